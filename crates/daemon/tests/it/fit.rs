//! Whether a mode can follow the service: freeze mode on an LC whose busy
//! periods (~50 µs) are far shorter than a freeze is judged unfit from the
//! busy periods the writer saw and the freeze timed at start, and — as
//! `[freeze] unfit` says — falls back to idle (the group never frozen, its
//! threads SCHED_IDLE, said in the log, the metrics and `elfen status`) or
//! is refused (the daemon stops, everything restored). `auto` with no knob
//! available (not root) is refused at `--check`, naming why.

use crate::coalesce::{metrics_addr, sample};
use crate::common::*;
use crate::live::{lc_bursts, scrape, setup, spinner_batch};
use std::time::Duration;

/// The freezer state of the daemon's group `name` (v1's names, on either
/// hierarchy).
fn group_freezer_state(d: &DaemonProc, name: &str) -> String {
    freezer_state(&format!("elfen-daemon-{}/{name}", d.pid()))
}

/// The pid of the command in the daemon's (freezer) group `name`.
fn spinner_in(d: &DaemonProc, name: &str) -> u32 {
    let procs =
        group_dir("freezer", &format!("elfen-daemon-{}/{name}", d.pid())).join("cgroup.procs");
    std::fs::read_to_string(&procs)
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the spinner runs in {}", procs.display()))
}

/// The scheduling policy of thread `tid` (`SCHED_IDLE` = 5).
fn policy(tid: u32) -> i32 {
    // SAFETY: a plain syscall on a thread id.
    unsafe { libc::sched_getscheduler(tid as libc::pid_t) }
}

#[test]
fn freeze_that_cannot_follow_the_service_falls_back_to_idle_and_says_so() {
    let test = "freeze_that_cannot_follow_the_service_falls_back_to_idle_and_says_so";
    let Some(()) = live_ok(test) else {
        return;
    };
    let _one = serial();
    let s = setup(
        "fz",
        "[freeze]\nobserve_ms = 500\n",
        &spinner_batch("frz", "freeze"),
    );
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let costs = d.wait_for("knob costs here", Duration::from_secs(5));
    assert!(
        costs.contains("a freeze"),
        "the freeze is timed at start: {costs}"
    );
    let addr = metrics_addr(&d);
    let spinner = spinner_in(&d, "frz");
    // busy ~50 µs, idle 50–150 µs: thousands of busy periods a second
    let lc = lc_bursts(&s.lc_name, 0, None, 0, 50, (50, 150));
    let said = d.wait_for("idle runs instead", Duration::from_secs(15));
    println!("{said}");
    assert!(said.contains("cannot follow"), "{said}");
    // the group is never frozen meanwhile, and its threads yield
    for _ in 0..40 {
        assert_eq!(group_freezer_state(&d, "frz"), "THAWED", "{}", d.output());
        std::thread::sleep(Duration::from_millis(10));
    }
    // SCHED_IDLE threads (v1's idle method) or an idle cpu group (v2's)
    let cpu_idle = || {
        let c = cgroups();
        c.supports(elfen_cgroup::Controller::Cpu)
            && std::fs::read_to_string(
                group_dir("cpu", &format!("elfen-daemon-{}/frz", d.pid())).join("cpu.idle"),
            )
            .is_ok_and(|v| v.trim() == "1")
    };
    assert!(
        wait_until(Duration::from_secs(3), || policy(spinner)
            == libc::SCHED_IDLE
            || cpu_idle()),
        "the fallback makes the batch yield (policy {}, group cpu.idle {})",
        policy(spinner),
        cpu_idle()
    );
    let m = scrape(&addr);
    let active = |mode: &str| {
        sample(
            &m,
            &format!("elfen_protection_active{{group=\"frz\",mode=\"{mode}\"}}"),
        )
    };
    assert_eq!(
        (active("idle"), active("freeze")),
        (Some(1.0), Some(0.0)),
        "{m}"
    );
    assert_eq!(
        sample(&m, "elfen_protection_fits{group=\"frz\",mode=\"freeze\"}"),
        Some(0.0),
        "{m}"
    );
    // elfen status: the group runs idle, freeze judged unfit
    let page = elfen_ops::status::attach(&s.page).unwrap();
    let st = elfen_ops::status::PageStatus::read(&page, 1000.0).unwrap();
    let text = elfen_ops::render::text(&st, None);
    println!("{text}");
    assert!(
        text.contains("freeze (idle)") && text.contains("UNFIT"),
        "{text}"
    );
    drop(page);
    drop(lc);
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(10))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
    assert!(!s.state.exists(), "everything restored");
}

#[test]
fn freeze_refused_stops_the_daemon_and_restores_everything() {
    let test = "freeze_refused_stops_the_daemon_and_restores_everything";
    let Some(()) = live_ok(test) else {
        return;
    };
    let _one = serial();
    let s = setup(
        "fr",
        "[freeze]\nunfit = \"refuse\"\nobserve_ms = 300\n",
        &spinner_batch("frz", "freeze"),
    );
    let lc = lc_bursts(&s.lc_name, 0, None, 0, 50, (50, 150));
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let pid = d.pid();
    let line = d.wait_for("freeze refused", Duration::from_secs(15));
    println!("{line}");
    assert!(line.contains("cannot follow"), "{line}");
    // it stops by itself: status 1, everything given back
    let status = d
        .stop_with(0, Duration::from_secs(10))
        .expect("exits by itself");
    assert_eq!(status.code(), Some(1), "{}", d.output());
    drop(lc);
    assert!(!s.state.exists(), "nothing left to restore");
    assert!(!s.page.exists(), "the page is removed");
    let group = group_dir("freezer", &format!("elfen-daemon-{pid}"));
    assert!(!group.exists(), "{} removed", group.display());
}

#[test]
fn auto_without_a_knob_is_refused_at_check_naming_why() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = dir.path().join("auto.toml");
    std::fs::write(
        &cfg,
        format!(
            "page = \"/dev/shm/{}\"\nstate_file = \"{}\"\n{HOST_ROOT}pairs = \"0:1\"\n\
             [lc]\ncomm = \"nothing-here\"\n[[batch]]\nname = \"b\"\nmode = \"auto\"\n\
             cgroup = \"batch\"\n",
            unique("ap"),
            dir.path().join("state.json").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = std::process::Command::new(BIN);
    c.args(["--config", cfg.to_str().unwrap(), "--check"]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // as root: check it as the unprivileged user nobody would (the
        // state file's directory nobody's, as it would be for nobody)
        std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
        c.uid(65534).gid(65534);
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{err}");
    assert_eq!(
        out.status.code(),
        Some(elfen_daemon::cli::EXIT_CONFIG),
        "{err}"
    );
    assert!(
        err.contains("batch[0].mode") && err.contains("auto has no knob") && err.contains("root"),
        "{err}"
    );
}
