//! The configuration: every example parses; bad input is refused naming
//! the field, and nothing is applied (no page, no state file, the cgroup
//! root untouched).

use crate::common::{BIN, HOST_ROOT, fake_root, tree};
use elfen_daemon::config::Config;
use elfen_daemon::plan::Plan;
use std::path::{Path, PathBuf};
use std::process::Command;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/daemon")
}

#[test]
fn every_example_parses_and_checks() {
    let dir = examples_dir();
    let mut n = 0;
    for e in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{} ships with the repository: {e}", dir.display()))
    {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let c = Config::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!c.batch.is_empty(), "{}", p.display());
            n += 1;
        }
    }
    assert!(
        n >= 4,
        "expected the four mode examples in {}",
        dir.display()
    );
}

#[test]
fn defaults_are_documented_values() {
    let c =
        Config::parse("[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\ncgroup = \"batch\"").unwrap();
    assert_eq!(c.page.path, Path::new("/dev/shm/elfen"));
    assert_eq!(c.page.batch_group, None);
    assert_eq!(c.state_file, Path::new("/run/elfen/daemon-state.json"));
    assert_eq!(c.cgroup_root, Path::new("/sys/fs/cgroup"));
    assert_eq!(c.policy.kind, elfen_policy::PolicyKind::BorrowIdle);
    assert_eq!((c.guard.priority, c.writer_priority()), (50, 51));
    assert_eq!((c.guard.spin_max_us, c.guard.spin_share_pct), (10_000, 90));
    assert_eq!(c.batch[0].mode, elfen_daemon::Mode::Guard);
    assert!(
        c.batch[0].confined(),
        "guard groups are confined by default"
    );
    assert_eq!(
        (c.lc.liveness_ms, c.lc.rescan_ms, c.heartbeat_ms),
        (100, 1000, 100)
    );
    c.check().unwrap();
}

#[test]
fn idle_groups_stay_off_the_request_lanes_unless_told() {
    let parse = |extra: &str| {
        Config::parse(&format!(
            "[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\nmode = \"idle\"\ncgroup = \"batch\"\n{extra}"
        ))
        .unwrap()
    };
    let c = parse("");
    assert!(c.batch[0].confined(), "idle groups are confined by default");
    assert_eq!(c.batch[0].request_lane_risk(), None);
    let c = parse("confine = true\n");
    assert_eq!(c.batch[0].request_lane_risk(), None);
    let c = parse("confine = false\n");
    assert!(!c.batch[0].confined());
    let risk = c.batch[0]
        .request_lane_risk()
        .expect("running on the request lanes is said");
    assert!(
        risk.contains("batch b") && risk.contains("request lanes") && risk.contains("p99"),
        "{risk}"
    );
    // other modes say nothing of it
    let g = Config::parse(
        "[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\nmode = \"freeze\"\ncgroup = \"batch\"\nconfine = false\n",
    )
    .unwrap();
    assert_eq!(g.batch[0].request_lane_risk(), None);
    // the shipped example of an idle group on the request lanes
    let p = examples_dir().join("idle-request-lanes.toml");
    let c = Config::load(&p)
        .unwrap_or_else(|e| panic!("{} ships with the repository: {e}", p.display()));
    assert!(c.batch.iter().any(|b| b.request_lane_risk().is_some()));
}

#[test]
fn file_checks_name_the_field() {
    let bad = |text: &str, field: &str, reason: &str| {
        let e = Config::parse(text).and_then(|c| c.check()).expect_err(text);
        assert!(
            e.field.contains(field) && e.reason.contains(reason),
            "{text}\n→ {e}"
        );
    };
    let ok_batch = "[[batch]]\nname = \"b\"\ncgroup = \"batch\"\n";
    bad(
        &format!("[lc]\ncomm = \"x\"\nfrobnicate = 1\n{ok_batch}"),
        "line 3",
        "unknown field `frobnicate`",
    );
    bad(
        &format!("[lc]\npid = 1\ncomm = \"x\"\n{ok_batch}"),
        "lc",
        "exactly one",
    );
    bad(&format!("[lc]\n{ok_batch}"), "lc", "exactly one");
    bad("[lc]\ncomm = \"x\"\n", "batch", "no batch group");
    bad(
        &format!("[lc]\ncomm = \"x\"\n{ok_batch}[[batch]]\nname = \"b\"\ncgroup = \"c\"\n"),
        "batch[1].name",
        "earlier group",
    );
    bad(
        "[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\n",
        "batch[0]",
        "exactly one of cgroup",
    );
    bad(
        &format!("[lc]\ncomm = \"x\"\n[policy]\nkind = \"fixed_budget\"\n{ok_batch}"),
        "policy.budget_us",
        "needs a budget",
    );
    bad(
        &format!(
            "[lc]\ncomm = \"x\"\n[policy]\nkind = \"refresh_budget\"\nbudget_us = 900\nslo_us = 800\n{ok_batch}"
        ),
        "policy.budget_us",
        "SLO",
    );
    bad(
        &format!("[lc]\ncomm = \"x\"\n[guard]\npriority = 99\n{ok_batch}"),
        "guard.priority",
        "1..=98",
    );
    bad(
        &format!("[lc]\ncomm = \"x\"\n[guard]\nspin_max_us = 50\n{ok_batch}"),
        "guard.spin_max_us",
        "100..=1000000",
    );
    bad(
        &format!("[lc]\ncomm = \"x\"\n[guard]\nspin_share_pct = 0\n{ok_batch}"),
        "guard.spin_share_pct",
        "1..=100",
    );
    bad(
        &format!("[lc]\ncomm = \"x\"\n[signal]\npriority = 10\n{ok_batch}"),
        "signal.priority",
        "above guard.priority",
    );
    bad(
        &format!("pairs = \"0-1\"\n[lc]\ncomm = \"x\"\n{ok_batch}"),
        "pairs",
        "",
    );
    bad(
        &format!("[lc]\ncomm = \"x\"\n[policy]\nnap = \"doze\"\n{ok_batch}"),
        "policy.nap",
        "doze",
    );
    bad(
        &format!("[lc]\ncomm = \"x\"\n[metrics]\nlisten = \"localhost\"\n{ok_batch}"),
        "metrics.listen",
        "not an address",
    );
    bad(
        "[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\nmode = \"sleepy\"\ncgroup = \"g\"\n",
        "line 5",
        "unknown variant `sleepy`",
    );
    bad(
        &format!(
            "[page]\npath = \"/dev/shm/x\"\nbatch_grup = \"b\"\n[lc]\ncomm = \"x\"\n{ok_batch}"
        ),
        "line 3",
        "unknown field `batch_grup`",
    );
    bad(
        &format!("[page]\nbatch_group = \"\"\n[lc]\ncomm = \"x\"\n{ok_batch}"),
        "page.batch_group",
        "must not be empty",
    );
}

#[test]
fn the_page_is_a_path_or_a_table() {
    use elfen_daemon::config::GroupRef;
    let batch = "[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\ncgroup = \"batch\"\n";
    let c = Config::parse(&format!("page = \"elfen-x\"\n{batch}")).unwrap();
    assert_eq!(
        (c.page.path.to_str(), &c.page.batch_group),
        (Some("elfen-x"), &None)
    );
    let c = Config::parse(&format!(
        "[page]\npath = \"/dev/shm/y\"\nbatch_group = \"elfen-batch\"\n{batch}"
    ))
    .unwrap();
    assert_eq!(c.page.path, Path::new("/dev/shm/y"));
    assert_eq!(
        c.page.batch_group,
        Some(GroupRef::Name("elfen-batch".into()))
    );
    let c = Config::parse(&format!("[page]\nbatch_group = 1001\n{batch}")).unwrap();
    assert_eq!(c.page.path, Path::new("/dev/shm/elfen"), "the default path");
    assert_eq!(c.page.batch_group, Some(GroupRef::Id(1001)));
}

/// A config on a fake cgroup root, with a page and state file in `dir`.
fn config_in(dir: &Path, extra: &str, batch: &str) -> (Config, PathBuf, PathBuf) {
    let root = fake_root(dir);
    let page = dir.join("page");
    let state = dir.join("state/daemon.json");
    let text = format!(
        "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n{extra}\n[signal]\npriority = 0\n{batch}",
        page.display(),
        state.display(),
        root.display()
    );
    (Config::parse(&text).unwrap(), page, state)
}

/// Refused with `field` in the error; the page, the state file and the
/// cgroup root untouched.
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

const COOP_BATCH: &str = "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"batch\"\n";

#[test]
fn machine_checks_name_the_field_and_apply_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // a valid one first: the same shape resolves
    let (c, page, state) = config_in(d, "[lc]\ncomm = \"nobody-runs-this\"", COOP_BATCH);
    let plan = Plan::resolve(&c).unwrap();
    assert_eq!(plan.groups.len(), 1);
    assert!(!page.exists() && !state.exists());
    // missing cgroup
    let (c, page, state) = config_in(
        d,
        "[lc]\ncomm = \"x\"",
        "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"no/such/group\"\n",
    );
    refused(
        d,
        &c,
        &page,
        &state,
        "batch[0].cgroup",
        "no group no/such/group",
    );
    // unknown CPU
    let (c, page, state) = config_in(d, "pairs = \"0:4095\"\n[lc]\ncomm = \"x\"", COOP_BATCH);
    refused(d, &c, &page, &state, "pairs", "not online");
    // a pid that does not exist (a reaped child's)
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let (c, page, state) = config_in(d, &format!("[lc]\npid = {dead}"), COOP_BATCH);
    refused(d, &c, &page, &state, "lc.pid", "no process");
    // an LC cgroup that is not one
    let (c, page, state) = config_in(d, "[lc]\ncgroup = \"/tmp\"", COOP_BATCH);
    refused(d, &c, &page, &state, "lc.cgroup", "not a cgroup directory");
    // a command that does not exist (root) / needs root (others)
    let (c, page, state) = config_in(
        d,
        "[lc]\ncomm = \"x\"",
        "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncommand = [\"no-such-program-here\"]\n",
    );
    refused(d, &c, &page, &state, "batch[0].command", "");
}

/// `config_in` with a `[page]` table instead of `page = "…"`.
fn config_with_page_table(dir: &Path, page_table: &str) -> (Config, PathBuf, PathBuf) {
    let (c, page, state) = config_in(dir, "[lc]\ncomm = \"x\"", COOP_BATCH);
    let text = format!(
        "state_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n[page]\npath = \"{}\"\n{page_table}\n\
         [lc]\ncomm = \"x\"\n[signal]\npriority = 0\n{COOP_BATCH}",
        state.display(),
        c.cgroup_root.display(),
        page.display()
    );
    (Config::parse(&text).unwrap(), page, state)
}

#[test]
fn the_batch_group_is_checked_and_said() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // an unknown group: refused, naming it
    let (c, page, state) = config_with_page_table(d, "batch_group = \"no-such-group-elfen\"");
    refused(
        d,
        &c,
        &page,
        &state,
        "page.batch_group",
        "no group named \"no-such-group-elfen\"",
    );
    // a known one (by name and by id): the batch segment's group, and said
    for g in ["\"nogroup\"", "65534", "\"65534\""] {
        let (c, _, _) = config_with_page_table(d, &format!("batch_group = {g}"));
        let plan = Plan::resolve(&c).unwrap_or_else(|e| panic!("{g}: {e}"));
        assert_eq!(
            (plan.page_spec.batch_gid, plan.page_spec.batch_mode),
            (Some(65534), 0o664),
            "{g}"
        );
        assert!(
            plan.notes
                .iter()
                .any(|n| n.contains("group nogroup (gid 65534) may attach")),
            "{:?}",
            plan.notes
        );
    }
    // none: cooperative batch programs of other users cannot attach; said
    let (c, _, _) = config_in(d, "[lc]\ncomm = \"x\"", COOP_BATCH);
    let plan = Plan::resolve(&c).unwrap();
    assert_eq!(
        (plan.page_spec.batch_gid, plan.page_spec.batch_mode),
        (None, 0o644)
    );
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("no [page] batch_group") && n.contains("cooperative b")),
        "{:?}",
        plan.notes
    );
}

#[test]
fn a_page_name_held_by_something_else_is_refused_saying_whose() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (c, page, state) = config_in(d, "[lc]\ncomm = \"x\"", COOP_BATCH);
    // not a signal page: never replaced
    std::fs::write(&page, b"an operator's file").unwrap();
    let e = Plan::resolve(&c).expect_err("not a page");
    assert!(
        e.field == "page"
            && e.reason.contains("not a signal page")
            && e.reason.contains(&format!("rm {}", page.display())),
        "{e}"
    );
    // a stale page of an older ABI (its creator gone): replaced
    let mut old = vec![0u8; 384];
    old[..8].copy_from_slice(b"ELFENSIG");
    old[8..12].copy_from_slice(&1u32.to_le_bytes());
    old[48..52].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    std::fs::write(&page, &old).unwrap();
    let plan = Plan::resolve(&c).unwrap();
    assert_eq!(plan.stale_page, Some(0x7fff_fff0));
    assert!(plan.page_spec.replace);
    // another user's file at the name: refused, naming the user
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Root,
            "cannot give the page file to another user; that case not checked",
        );
    } else {
        std::os::unix::fs::chown(&page, Some(65534), Some(65534)).unwrap();
        let e = Plan::resolve(&c).expect_err("squatted");
        assert!(
            e.field == "page"
                && e.reason.contains("user nobody (uid 65534)")
                && e.reason.contains("another user holds the name")
                && e.reason.contains(&format!("rm {}", page.display())),
            "{e}"
        );
    }
    std::fs::remove_file(&page).unwrap();
    assert!(!state.exists());
}

#[test]
fn a_page_in_use_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (c, page, state) = config_in(d, "[lc]\ncomm = \"x\"", COOP_BATCH);
    // a page whose creator (this process) lives
    let spec = elfen_shm::PageSpec::for_pairs(&[(0, vec![1])], 1, 0);
    let held = elfen_shm::Page::create(&page, &spec).unwrap();
    let e = Plan::resolve(&c).expect_err("page in use");
    assert!(e.field == "page" && e.reason.contains("in use"), "{e}");
    drop(held);
    assert!(!page.exists());
    assert!(!state.exists());
}

#[test]
fn check_flag_exits_0_or_78_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let root = fake_root(d);
    let write = |name: &str, body: &str| {
        let p = d.join(name);
        std::fs::write(
            &p,
            format!(
                "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n{body}\n[signal]\npriority = 0\n",
                d.join("page").display(),
                d.join("state.json").display(),
                root.display()
            ),
        )
        .unwrap();
        p
    };
    let good = write("good.toml", &format!("[lc]\ncomm = \"x\"\n{COOP_BATCH}"));
    let out = Command::new(BIN)
        .args(["--config", good.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("is valid"));
    let bad = write(
        "bad.toml",
        &format!("pairs = \"0:4095\"\n[lc]\ncomm = \"x\"\n{COOP_BATCH}"),
    );
    let out = Command::new(BIN)
        .args(["--config", bad.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("pairs:") && err.contains("nothing applied"),
        "{err}"
    );
    assert!(!d.join("page").exists() && !d.join("state.json").exists());
}

/// Mode scx at `--check`: on a kernel without sched_ext, exit 78 naming
/// the kernel and the key that would run the fallback instead; with that
/// key, the fallback is planned and said.
#[test]
fn check_of_scx_names_the_kernel_and_the_fallback_key() {
    use elfen_cmd::skip::{Need, skip};
    if !Need::Root.present() {
        skip(
            Need::Root,
            "mode scx is planned only for root (like every mode but cooperative)",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let root = fake_root(d);
    let write = |name: &str, extra: &str| {
        let p = d.join(name);
        std::fs::write(
            &p,
            format!(
                "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n\
                 [lc]\ncomm = \"x\"\n[signal]\npriority = 0\n{extra}\n\
                 [[batch]]\nname = \"b\"\nmode = \"scx\"\ncgroup = \"batch\"\n",
                d.join("page").display(),
                d.join("state.json").display(),
                root.display()
            ),
        )
        .unwrap();
        p
    };
    let check = |p: &Path| {
        Command::new(BIN)
            .args(["--config", p.to_str().unwrap(), "--check"])
            .output()
            .unwrap()
    };
    let refused = check(&write("refuse.toml", ""));
    let err = String::from_utf8_lossy(&refused.stderr);
    if elfen_scx::kernel::offered() {
        // a sched_ext kernel: the mode is not refused for want of it
        assert!(!err.contains("has no sched_ext"), "{err}");
        return;
    }
    assert_eq!(refused.status.code(), Some(78), "{err}");
    let kernel = elfen_scx::kernel::kernel_release();
    assert!(
        err.contains("batch[0].mode")
            && err.contains(&format!("kernel {kernel} has no sched_ext"))
            && err.contains("[scx] unavailable = \"fallback\""),
        "{err}"
    );
    assert!(!d.join("page").exists() && !d.join("state.json").exists());
    let fallback = check(&write(
        "fallback.toml",
        "[scx]\nunavailable = \"fallback\"\nfallback = \"idle\"",
    ));
    let out = String::from_utf8_lossy(&fallback.stdout);
    assert!(
        fallback.status.success(),
        "{}",
        String::from_utf8_lossy(&fallback.stderr)
    );
    assert!(
        out.contains("idle runs instead") && out.contains("mode idle"),
        "{out}"
    );
}

/// A v2 root like a systemd host's whose units set no CPU property: the
/// root offers cpu but has not turned it on for its children, so no child
/// shows `cpu.idle` yet. A group the daemon creates gets the controller
/// turned on (elfen-cgroup does it), so its `cpu.idle` is judged by the
/// kernel's version, not refused; a child where the controller is on but
/// without `cpu.idle` (a kernel before 5.15) is still refused.
#[test]
fn cpu_idle_on_a_v2_root_whose_children_lack_the_cpu_controller() {
    if !elfen_cmd::skip::Need::Root.present() {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Root,
            "a command in a group of its own",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let root = d.join("cgroup");
    let put = |rel: &str, v: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    };
    put("cgroup.controllers", "cpuset cpu io memory pids\n");
    put("cgroup.subtree_control", "memory pids\n");
    put("cgroup.procs", "");
    // core files every v2 group has, cpu controller or not
    for f in ["cgroup.procs", "cpu.stat", "cpu.pressure", "memory.max"] {
        put(&format!("system.slice/{f}"), "");
    }
    let text = format!(
        "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n[signal]\npriority = 0\n\
         [lc]\ncomm = \"nobody-runs-this\"\n\
         [[batch]]\nname = \"b\"\nmode = \"idle\"\ncommand = [\"true\"]\n",
        d.join("page").display(),
        d.join("state.json").display(),
        root.display()
    );
    let c = Config::parse(&text).unwrap();
    let before = tree(&root);
    let plan = Plan::resolve(&c).unwrap_or_else(|e| panic!("refused: {e}"));
    assert_eq!(
        plan.groups[0].idle,
        Some(elfen_daemon::config::IdleMethod::CpuIdle),
        "cpu.idle on v2"
    );
    assert_eq!(tree(&root), before, "resolving writes nothing");
    // the controller on in a child, without cpu.idle: an old kernel's
    put("system.slice/cpu.weight", "100\n");
    let e = Plan::resolve(&c).expect_err("no cpu.idle where the controller is on");
    assert!(
        e.field == "batch[0].idle_method" && e.reason.contains("cpu.idle is not offered"),
        "{e}"
    );
}

#[test]
fn scx_keys_parse_with_defaults_and_bad_ones_are_named() {
    use elfen_daemon::Mode;
    use elfen_daemon::config::Unavailable;
    let base = "[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\nmode = \"scx\"\ncgroup = \"batch\"\n";
    let c = Config::parse(base).unwrap();
    assert_eq!(c.batch[0].mode, Mode::Scx);
    assert_eq!(
        (c.scx.fallback, c.scx.unavailable),
        (Mode::Idle, Unavailable::Refuse)
    );
    assert_eq!(Mode::Scx.rungs(&c), vec![Mode::Scx, Mode::Idle]);
    assert!(!Mode::Scx.may_guard(&c));
    assert!(!c.batch[0].confined(), "the scheduler keeps the lanes");
    c.check().unwrap();
    let c = Config::parse(&format!(
        "[scx]\nfallback = \"guard\"\nunavailable = \"fallback\"\n{base}"
    ))
    .unwrap();
    c.check().unwrap();
    assert!(Mode::Scx.may_guard(&c));
    assert_eq!(Mode::Scx.rungs(&c), vec![Mode::Scx, Mode::Guard]);
    let e = Config::parse(&format!("[scx]\nfallback = \"freeze\"\n{base}"))
        .unwrap()
        .check()
        .unwrap_err();
    assert_eq!(e.field, "scx.fallback", "{e}");
    let e = Config::parse(&format!("[scx]\nfalback = \"idle\"\n{base}")).unwrap_err();
    assert!(e.to_string().contains("falback"), "{e}");
    let e = Config::parse(&format!("{base}idle_method = \"sched_idle\"\n"))
        .unwrap()
        .check()
        .unwrap_err();
    assert!(
        e.field == "batch[0].idle_method" && e.reason.contains("cpu.idle"),
        "{e}"
    );
}
