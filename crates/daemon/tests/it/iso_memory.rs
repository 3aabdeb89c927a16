//! The memory watermark and limits for real (root, the memory controller
//! of the machine's hierarchy — the v1 `memory` hierarchy, or `memory` in
//! a v2 tree; skipped with the need otherwise), whatever the layout:
//!
//! - two batch groups grow; when `MemAvailable` falls below the watermark
//!   the daemon kills the group of the lowest priority — whole — even
//!   though the other uses more memory; the other group and the LC service
//!   live on; the kill is in the daemon's log, its kill log and its
//!   metrics; the kernel's OOM killer never fired;
//! - the limits: `memory_high` and `memory_max` are in the group's files
//!   (v1 `memory.soft_limit_in_bytes` / `memory.limit_in_bytes`, v2
//!   `memory.high` / `memory.max`), written again when the group's owner
//!   writes over them, and put back at exit;
//! - v2 only (v1's soft limit never throttles): `memory.high` throttles a
//!   group that grows past it — its tasks stall in reclaim, the kernel
//!   counts `high` events and never OOM-kills it — and the stall, seen by
//!   the daemon's PSI trigger on `/proc/pressure/memory`, kills the group
//!   of the lowest priority, not the throttled one.
//!
//! The watermark is set 768 MiB below what is available when the test
//! starts, so the test needs well under a gigabyte whatever the machine.

use crate::coalesce::metrics_addr;
use crate::common::*;
use crate::live::{scrape, setup};
use elfen_cgroup::Controller;
use elfen_cmd::proc::oom_kills;
use elfen_cmd::skip::{Need, skip_test};
use elfen_ops::kills::KillLog;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn mem_available() -> u64 {
    elfen_daemon::isolation::plan::meminfo()
        .1
        .expect("MemAvailable")
}

fn memory_ok(test: &str) -> Option<()> {
    live_ok(test)?;
    controller_ok(test, "memory")
}

/// Whether the memory controller has v2 files here.
fn v2() -> bool {
    cgroups().is_v2(Controller::Memory)
}

/// The soft and hard limit files of this layout (read directly, not
/// through the executor under test).
fn limit_files() -> (&'static str, &'static str) {
    if v2() {
        ("memory.high", "memory.max")
    } else {
        ("memory.soft_limit_in_bytes", "memory.limit_in_bytes")
    }
}

fn balloon(name: &str, priority: i32, rate: u64, max: u64, extra: &str) -> String {
    balloon_after(name, priority, rate, max, 0, extra)
}

/// [`balloon`] that starts growing `delay_ms` after it starts.
fn balloon_after(
    name: &str,
    priority: i32,
    rate: u64,
    max: u64,
    delay_ms: u64,
    extra: &str,
) -> String {
    format!(
        "[[batch]]\nname = \"{name}\"\nmode = \"idle\"\npriority = {priority}\n{extra}\
         command = [\"{BIN}\", \"balloon-helper\", \"--rate-mib-s={rate}\", \"--max-mib={max}\", \
         \"--delay-ms={delay_ms}\"]\n"
    )
}

fn line_has(d: &DaemonProc, text: &str) -> bool {
    d.output().contains(text)
}

/// The memory group the daemon made for batch group `name`.
fn daemon_group(d: &DaemonProc, name: &str) -> PathBuf {
    group_dir("memory", &format!("elfen-daemon-{}/{name}", d.pid()))
}

fn group_pid(d: &DaemonProc, name: &str) -> Option<u32> {
    std::fs::read_to_string(daemon_group(d, name).join("cgroup.procs"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A counter of a v2 group's `memory.events` (`high`, `oom_kill`, …).
fn memory_event(dir: &Path, key: &str) -> u64 {
    std::fs::read_to_string(dir.join("memory.events"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The kill log, once the daemon has written it (just after it says the
/// kill).
fn kill_log_of(path: &Path) -> KillLog {
    wait_until(patient(Duration::from_secs(2)), || path.exists());
    KillLog::load(path).unwrap().expect("the kill log")
}

#[test]
fn the_lowest_priority_group_is_killed_below_the_watermark() {
    let test = "the_lowest_priority_group_is_killed_below_the_watermark";
    let Some(()) = memory_ok(test) else { return };
    let _one = serial();
    let kills = tempfile::tempdir().unwrap();
    let kill_log = kills.path().join("kills.json");
    let watermark = mem_available().saturating_sub(768 << 20);
    let s = setup(
        "mem",
        &format!(
            "[memory]\nmin_available = {watermark}\npoll_ms = 20\ncooldown_ms = 5000\nkill_log = \"{}\"\n",
            kill_log.display()
        ),
        // "high" holds 512 MiB at once; "low" grows 128 MiB/s: the
        // watermark is crossed while "high" uses more, and "low" goes
        &format!(
            "{}{}",
            balloon("low", 0, 128, 1536, "memory_max = \"2G\"\n"),
            balloon("high", 5, 1024, 512, "memory_max = \"2G\"\n")
        ),
    );
    let lc = lc_helper(&s.lc_name, &["--cpu=0"]);
    let oom_before = oom_kills();
    let d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    assert!(
        d.output().contains("memory watermark: MemAvailable below"),
        "{}",
        d.output()
    );
    assert!(!line_has(&d, "killed batch group"), "killed too early");
    let high = group_pid(&d, "high").expect("high's balloon runs");
    let low = group_pid(&d, "low").expect("low's balloon runs");
    // the hard limit is in the group's file
    let (_, hard) = limit_files();
    let max = std::fs::read_to_string(daemon_group(&d, "low").join(hard)).unwrap();
    assert_eq!(max.trim(), (2u64 << 30).to_string(), "{hard}");
    let line = d.wait_for("killed batch group", Duration::from_secs(40));
    assert!(
        line.contains("killed batch group low (priority 0"),
        "{line}"
    );
    // the whole group: its process is gone, the group empty
    assert!(
        wait_until(patient(Duration::from_secs(2)), || !elfen_shm::pid_alive(
            low
        )),
        "low's balloon still runs"
    );
    assert!(
        wait_until(patient(Duration::from_secs(3)), || group_pid(&d, "low")
            .is_none()),
        "the group is empty (once the daemon reaped its command)"
    );
    // nothing else: the other batch group and the LC live on
    assert!(elfen_shm::pid_alive(high), "high's balloon was killed");
    assert!(elfen_shm::pid_alive(lc.pid()), "the LC was killed");
    assert_eq!(oom_kills(), oom_before, "the kernel's OOM killer fired");
    // recorded: the kill log and the metrics
    let log = kill_log_of(&kill_log);
    assert_eq!(log.total(), 1, "{log:?}");
    let k = &log.kills[0];
    assert_eq!((k.group.as_str(), k.priority), ("low", 0));
    assert_eq!(k.processes, vec![low]);
    assert!(k.left.is_empty() && k.done_mono_ns >= k.detected_mono_ns);
    assert!(k.available_bytes < watermark, "{k:?}");
    assert!(k.reason.starts_with("MemAvailable"), "{k:?}");
    let m = scrape(&metrics_addr(&d));
    assert!(
        m.contains("elfen_batch_kills_total{group=\"low\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("elfen_batch_kills_total{group=\"high\"} 0"),
        "{m}"
    );
    assert!(m.contains("elfen_memory_available_bytes"), "{m}");
    // the command's exit is said too
    d.wait_for("signal: 9", Duration::from_secs(3));
}

#[test]
fn limits_are_written_and_put_back() {
    let test = "limits_are_written_and_put_back";
    let Some(()) = memory_ok(test) else { return };
    let _one = serial();
    let g = TestGroup::new(&unique("lim"), &["memory", "freezer"]);
    let dir = g.dir("memory");
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display()))
            .trim()
            .to_string()
    };
    let (soft, hard) = limit_files();
    let (soft0, hard0) = (read(soft), read(hard));
    let s = setup(
        "lim",
        "[memory]\nmin_available = 0\npressure = \"off\"\n",
        &format!(
            "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"{}\"\n\
             memory_high = \"256M\"\nmemory_max = \"512M\"\n",
            g.name
        ),
    );
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    assert_eq!(read(soft), (256u64 << 20).to_string(), "{soft}");
    assert_eq!(read(hard), (512u64 << 20).to_string(), "{hard}");
    assert!(
        d.output().contains("memory watermark: off"),
        "{}",
        d.output()
    );
    // the group's owner writes over a limit (as systemd does at a
    // daemon-reload): the next rescan writes it again, and says so
    std::fs::write(dir.join(soft), if v2() { "max" } else { "-1" }).unwrap();
    let line = d.wait_for("changed under the daemon", Duration::from_secs(5));
    assert!(
        line.contains(&format!("batch b: memory.high={}", 256u64 << 20)),
        "{line}"
    );
    assert_eq!(
        read(soft),
        (256u64 << 20).to_string(),
        "{soft} written again"
    );
    assert_eq!(read(hard), (512u64 << 20).to_string(), "{hard}");
    let st = d
        .stop_with(libc::SIGTERM, patient(Duration::from_secs(10)))
        .expect("exits");
    assert!(st.success(), "{}", d.output());
    assert_eq!(read(soft), soft0, "{soft} put back");
    assert_eq!(read(hard), hard0, "{hard} put back");
}

#[test]
fn memory_high_throttles_and_pressure_kills_the_lowest_priority_group() {
    let test = "memory_high_throttles_and_pressure_kills_the_lowest_priority_group";
    let Some(()) = memory_ok(test) else { return };
    if !v2() {
        skip_test(
            test,
            Need::CgroupV2("memory".into()),
            "memory.high throttles a group only on cgroup v2 (v1's soft limit never does)",
        );
        return;
    }
    let psi = Path::new("/proc/pressure/memory");
    if !psi.exists() {
        skip_test(
            test,
            Need::Input(psi.to_path_buf()),
            "the kernel's pressure stall information (PSI)",
        );
        return;
    }
    let _one = serial();
    let kills = tempfile::tempdir().unwrap();
    let kill_log = kills.path().join("kills.json");
    let high_limit: u64 = 48 << 20;
    let s = setup(
        "psi",
        &format!(
            "[memory]\nmin_available = 0\npressure = \"some\"\npressure_pct = 10\n\
             pressure_window_ms = 1000\npressure_kills = true\npoll_ms = 20\n\
             cooldown_ms = 600000\nkill_log = \"{}\"\n",
            kill_log.display()
        ),
        // "grow" goes past its memory_high (nothing it holds can be
        // reclaimed: anonymous memory, no swap needed), so the kernel
        // throttles it and it stalls; "small" holds 16 MiB at priority 0.
        // grow starts growing a while after the daemon runs, so the test
        // has read both groups' pids before the stall makes the kill
        &format!(
            "{}{}",
            balloon("small", 0, 64, 16, ""),
            balloon_after(
                "grow",
                5,
                256,
                512,
                2000 * u64::from(slack()),
                &format!("memory_high = {high_limit}\n")
            )
        ),
    );
    let lc = lc_helper(&s.lc_name, &["--cpu=0"]);
    let oom_before = oom_kills();
    let d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    assert!(
        d.output().contains("a PSI trigger \"some 100000 1000000\""),
        "{}",
        d.output()
    );
    let grow_dir = daemon_group(&d, "grow");
    let written = std::fs::read_to_string(grow_dir.join("memory.high")).unwrap();
    assert_eq!(written.trim(), high_limit.to_string(), "memory.high");
    let grow = group_pid(&d, "grow").expect("grow's balloon runs");
    let small = group_pid(&d, "small").expect("small's balloon runs");
    let line = d.wait_for("killed batch group", Duration::from_secs(40));
    assert!(
        line.contains(
            "memory pressure (some 100000 1000000): killed batch group small (priority 0"
        ),
        "{line}"
    );
    // small is in no memory controller (no limit of its own): its use is
    // its processes' resident memory, never nothing
    assert!(!line.contains("(priority 0, 0 B used"), "{line}");
    assert!(
        wait_until(patient(Duration::from_secs(2)), || !elfen_shm::pid_alive(
            small
        )),
        "small's balloon still runs"
    );
    // the throttled group: throttled (high events), never OOM-killed, alive
    assert!(
        memory_event(&grow_dir, "high") > 0,
        "memory.events of grow: {}",
        std::fs::read_to_string(grow_dir.join("memory.events")).unwrap_or_default()
    );
    assert_eq!(
        memory_event(&grow_dir, "oom_kill"),
        0,
        "grow was OOM-killed"
    );
    assert!(elfen_shm::pid_alive(grow), "grow's balloon was killed");
    assert!(elfen_shm::pid_alive(lc.pid()), "the LC was killed");
    assert_eq!(oom_kills(), oom_before, "the kernel's OOM killer fired");
    let log = kill_log_of(&kill_log);
    assert_eq!(log.total(), 1, "{log:?}");
    let k = &log.kills[0];
    assert_eq!((k.group.as_str(), k.priority), ("small", 0));
    assert_eq!(k.processes, vec![small]);
    assert!(k.reason.starts_with("memory pressure"), "{k:?}");
    let m = scrape(&metrics_addr(&d));
    assert!(
        m.contains("elfen_batch_kills_total{group=\"small\"} 1"),
        "{m}"
    );
    let events = m
        .lines()
        .find_map(|l| l.strip_prefix("elfen_memory_pressure_events_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(events >= 1.0, "{m}");
}
