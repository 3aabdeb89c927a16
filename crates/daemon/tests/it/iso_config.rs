//! Memory, I/O and egress keys: defaults, refusals that name the field
//! (from the file alone and against the machine, with nothing applied).

use crate::common::{BIN, HOST_ROOT, fake_root, tree};
use elfen_daemon::config::Config;
use elfen_daemon::isolation::config::{EgressClass, PressureLine, WhenUnsupported};
use elfen_daemon::plan::Plan;
use elfen_daemon::units::{ByteSize, MemAmount};
use std::path::{Path, PathBuf};
use std::process::Command;

const LC: &str = "[lc]\ncomm = \"x\"\n";

#[test]
fn defaults_are_documented_values() {
    let c = Config::parse(&format!("{LC}[[batch]]\nname = \"b\"\ncgroup = \"batch\"")).unwrap();
    assert_eq!(c.memory.min_available, MemAmount::Percent(2.0));
    assert_eq!(c.memory.pressure, PressureLine::Some);
    assert!(!c.memory.pressure_kills);
    assert_eq!(
        (
            c.memory.pressure_pct,
            c.memory.pressure_window_ms,
            c.memory.poll_ms,
            c.memory.cooldown_ms
        ),
        (10, 2000, 50, 1000)
    );
    assert_eq!(c.memory.kill_log, Path::new("/run/elfen/batch-kills.json"));
    assert_eq!(c.io.device, None);
    assert_eq!(c.io.period_ms, 200);
    assert_eq!((c.egress.priority, c.egress.mark), (1, 0));
    assert_eq!(c.egress.unsupported, WhenUnsupported::Refuse);
    let b = &c.batch[0];
    assert_eq!((b.priority, b.memory_high, b.memory_max), (0, None, None));
    assert!(b.io.is_empty() && b.io_weight.is_none());
    assert_eq!(b.egress, EgressClass::Normal);
    c.check().unwrap();
    let c = Config::parse(&format!(
        "{LC}[[batch]]\nname = \"b\"\ncgroup = \"batch\"\nmemory_high = \"1.5G\"\nmemory_max = 3221225472\n\
         io = [{{ device = \"8:0\", read_bps = \"10M\", write_iops = 30 }}]"
    ))
    .unwrap();
    assert_eq!(c.batch[0].memory_high, Some(ByteSize(3 << 29)));
    assert_eq!(c.batch[0].memory_max, Some(ByteSize(3 << 30)));
    assert_eq!(c.batch[0].io[0].read_bps, Some(ByteSize(10 << 20)));
    assert_eq!(c.batch[0].io[0].write_iops, Some(30));
}

#[test]
fn file_checks_name_the_field() {
    let bad = |text: &str, field: &str, reason: &str| {
        let e = Config::parse(text)
            .and_then(|c| c.check().map(|_| c))
            .expect_err(text);
        assert!(
            e.field.contains(field) && e.reason.contains(reason),
            "{text}\nexpected {field}: …{reason}…, got {e}"
        );
    };
    let b = "[[batch]]\nname = \"b\"\ncgroup = \"batch\"\n";
    bad(
        &format!("{LC}{b}memory_high = \"2G\"\nmemory_max = \"1G\""),
        "batch[0].memory_high",
        "above memory_max",
    );
    bad(
        &format!("{LC}{b}memory_max = \"12 MB\""),
        "line 6",
        "unknown unit",
    );
    bad(
        &format!("{LC}{b}memory_max = \"4K\""),
        "batch[0].memory_max",
        "below 1 MiB",
    );
    bad(
        &format!("{LC}{b}io_weight = 0"),
        "batch[0].io_weight",
        "1..=10000",
    );
    bad(
        &format!("{LC}{b}io = [{{ device = \"8:0\" }}]"),
        "batch[0].io[0]",
        "no limit",
    );
    bad(
        &format!("{LC}{b}io = [{{ device = \"8:0\", read_bps = 0 }}]"),
        "batch[0].io[0]",
        "a limit of 0",
    );
    bad(
        &format!("{LC}{b}io = [{{ device = \"8:0\", riops = 5 }}]"),
        "line",
        "unknown field",
    );
    bad(
        &format!("{LC}[memory]\npressure_window_ms = 100\n{b}"),
        "memory.pressure_window_ms",
        "500..=10000",
    );
    bad(
        &format!("{LC}[memory]\nmin_available = \"120%\"\n{b}"),
        "line",
        "0..=100",
    );
    bad(
        &format!("{LC}[memory]\nfree = 1\n{b}"),
        "line",
        "unknown field",
    );
    bad(
        &format!("{LC}[io]\ndevice = \"8:0\"\n{b}"),
        "io",
        "has no budget",
    );
    bad(
        &format!("{LC}[io]\nread_bps = \"1G\"\n{b}"),
        "io.device",
        "needs its device",
    );
    bad(
        &format!("{LC}{b}egress = \"lowest\""),
        "line",
        "unknown variant",
    );
}

/// A fake root with the memory and blkio hierarchies too; a config over it.
fn config_in(dir: &Path, extra: &str, batch: &str) -> (Config, PathBuf, PathBuf) {
    let root = fake_root(dir);
    for (c, files) in [
        (
            "memory",
            &[
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.soft_limit_in_bytes", "9223372036854771712\n"),
                ("memory.usage_in_bytes", "1073741824\n"),
            ][..],
        ),
        (
            "blkio",
            &[
                ("blkio.throttle.read_bps_device", ""),
                ("blkio.throttle.write_bps_device", ""),
                ("blkio.throttle.read_iops_device", ""),
                ("blkio.throttle.write_iops_device", ""),
            ][..],
        ),
    ] {
        for sub in [root.join(c), root.join(c).join("batch")] {
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join("cgroup.procs"), "").unwrap();
            for (f, v) in files {
                std::fs::write(sub.join(f), v).unwrap();
            }
        }
    }
    let page = dir.join("page");
    let state = dir.join("state/daemon.json");
    let text = format!(
        "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n{extra}\n[signal]\npriority = 0\n{LC}{batch}",
        page.display(),
        state.display(),
        root.display()
    );
    (Config::parse(&text).unwrap(), page, state)
}

const COOP: &str = "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"batch\"\n";

fn refused(dir: &Path, c: &Config, page: &Path, state: &Path, field: &str, reason: &str) {
    let before = tree(&dir.join("cgroup"));
    let e = Plan::resolve(c).expect_err("must be refused");
    assert!(
        e.field.contains(field) && e.reason.contains(reason),
        "expected {field}: …{reason}…, got {e}"
    );
    assert!(!page.exists() && !state.exists(), "nothing applied");
    assert_eq!(
        tree(&dir.join("cgroup")),
        before,
        "the cgroup root is untouched"
    );
}

#[test]
fn machine_checks_name_the_field_and_apply_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // valid: limits on an existing group in the memory and blkio hierarchies
    let (c, _, _) = config_in(
        d,
        "",
        &format!(
            "{COOP}memory_max = \"2G\"\nio_weight = 300\nio = [{{ device = \"1:3\", read_iops = 10 }}]\n"
        ),
    );
    // /dev/null's numbers (1:3) are a character device: no block device
    let e = Plan::resolve(&c).expect_err("1:3 is no block device");
    assert!(
        e.field == "batch[0].io[0].device" && e.reason.contains("no block device 1:3"),
        "{e}"
    );
    let (c, page, state) = config_in(
        d,
        "",
        &format!("{COOP}io = [{{ device = \"/dev/elfen-no-such-disk\", read_iops = 10 }}]\n"),
    );
    refused(
        d,
        &c,
        &page,
        &state,
        "batch[0].io[0].device",
        "/dev/elfen-no-such-disk",
    );
    let (c, page, state) = config_in(d, "[io]\ndevice = \"4095:4095\"\nread_bps = \"1M\"", COOP);
    refused(
        d,
        &c,
        &page,
        &state,
        "io.device",
        "no block device 4095:4095",
    );
    // a watermark above the machine's memory
    let (c, page, state) = config_in(d, "[memory]\nmin_available = \"64T\"", COOP);
    refused(
        d,
        &c,
        &page,
        &state,
        "memory.min_available",
        "above this machine's memory",
    );
    // limits on a group that is not in the memory hierarchy
    let (c, page, state) = config_in(
        d,
        "",
        "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"other\"\nmemory_max = \"1G\"\n",
    );
    std::fs::create_dir_all(d.join("cgroup/freezer/other")).unwrap();
    std::fs::write(d.join("cgroup/freezer/other/cgroup.procs"), "").unwrap();
    refused(
        d,
        &c,
        &page,
        &state,
        "batch[0].memory_max",
        "not in the memory hierarchy",
    );
    // a limit below what the group uses now: accepted, and said
    let (c, _, _) = config_in(
        d,
        "[memory]\npressure = \"off\"",
        &format!("{COOP}memory_max = \"512M\"\n"),
    );
    let plan = Plan::resolve(&c).unwrap();
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("memory_max 512 MiB is below what the group uses now (1 GiB)")),
        "{:?}",
        plan.notes
    );
    assert_eq!(plan.groups[0].iso.memory_max, Some(512 << 20));
    assert!(plan.isolation.psi_trigger.is_none());
}

#[test]
fn check_flag_refuses_a_watermark_above_total_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (_, _, _) = config_in(d, "", COOP);
    let root = d.join("cgroup");
    let p = d.join("w.toml");
    std::fs::write(
        &p,
        format!(
            "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n[signal]\npriority = 0\n\
             [memory]\nmin_available = \"64T\"\n{LC}{COOP}",
            d.join("page").display(),
            d.join("state.json").display(),
            root.display()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["--config", p.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("memory.min_available") && err.contains("above this machine's memory"),
        "{err}"
    );
}

#[test]
fn egress_unsupported_is_refused_or_said_as_configured() {
    // a v1-only root has no cgroup2 tree: the BPF program has nowhere to go
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let b = format!("{COOP}egress = \"low\"\n");
    let (c, page, state) = config_in(d, "", &b);
    refused(
        d,
        &c,
        &page,
        &state,
        "batch[0].egress",
        "not supported here",
    );
    let (c, _, _) = config_in(d, "[egress]\nunsupported = \"warn\"", &b);
    let plan = Plan::resolve(&c).unwrap();
    assert!(plan.isolation.egress.is_none());
    assert!(!plan.groups[0].iso.egress);
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("egress: not supported here")),
        "{:?}",
        plan.notes
    );
}
