//! A group removed under the running daemon: counted, shown and kept
//! running when asked, or the daemon stops with a distinct status.

use super::{Setup, sample, scrape, setup};
use crate::coalesce::metrics_addr;
use crate::common::*;
use std::time::Duration;

/// A freeze group (an operator's, empty) beside a guarded command group
/// (the freezer must not wait for a guard that occupies the batch lane).
fn lost_setup(extra: &str, g: &TestGroup) -> (Setup, String) {
    let name = unique("g");
    let name = name[name.len() - 15..].to_string();
    // freeze from the start: these tests are about the group, not about
    // whether freeze fits the service (judged after observe_ms otherwise)
    let extra = format!("{extra}\n[freeze]\nunfit = \"warn\"\n");
    let s = setup(
        &name,
        &extra,
        &format!(
            "[[batch]]\nname = \"frz\"\nmode = \"freeze\"\ncgroup = \"{}\"\n\
             [[batch]]\nname = \"spin\"\nmode = \"guard\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n",
            g.name
        ),
    );
    (s, name)
}

/// Removes the group's directories (waiting while the kernel still holds
/// a dying task).
fn remove_group(g: &TestGroup, ctls: &[&str]) {
    for c in ctls {
        let d = g.dir(c);
        assert!(
            wait_until(Duration::from_secs(5), || std::fs::remove_dir(&d).is_ok()
                || !d.exists()),
            "{} removed",
            d.display()
        );
    }
}

#[test]
fn a_group_removed_under_the_daemon_is_counted_shown_and_kept_running_when_asked() {
    let Some(()) =
        live_ok("a_group_removed_under_the_daemon_is_counted_shown_and_kept_running_when_asked")
    else {
        return;
    };
    let _one = serial();
    let g = TestGroup::new(&unique("lost"), &["freezer"]);
    let (s, lc_name) = lost_setup("on_group_lost = \"continue\"", &g);
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let _lc = lc_helper(
        &lc_name,
        &[
            "--cpu=0",
            "--busy-us=30000",
            "--idle-min-us=30000",
            "--idle-max-us=30000",
        ],
    );
    d.wait_for("LC service found", Duration::from_secs(5));
    // the freezer freezes and thaws the (empty) group; then it is removed.
    // Watched from the LC's CPU at SCHED_FIFO 1: on the batch CPU a guard
    // (or the writer) spins while the LC is busy, and an ordinary thread
    // may get to read the state only once the LC is idle and the group
    // thawed again; preempting the LC, this one reads it at once.
    let pin = elfen_topo::PinGuard::new(0).unwrap();
    let fifo = libc::sched_param { sched_priority: 1 };
    // SAFETY: this thread's own policy, a valid parameter.
    assert_eq!(
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) },
        0
    );
    let frozen = wait_until(Duration::from_secs(5), || g.freezer_state() != "THAWED");
    let other = libc::sched_param { sched_priority: 0 };
    // SAFETY: as above.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &other) };
    drop(pin);
    assert!(frozen, "frozen while the LC is busy:\n{}", d.output());
    remove_group(&g, &["freezer"]);
    let lost = d.wait_for("LOST: batch frz", Duration::from_secs(5));
    assert!(
        lost.contains("removed while the daemon ran") || lost.contains("its cgroup is gone"),
        "{lost}"
    );
    assert!(lost.contains("carries on without it"), "{lost}");
    // the freezer's next write (a thaw of the group it froze, or a freeze)
    // fails: counted and said
    let failed = d.wait_for("writes of", Duration::from_secs(5));
    assert!(
        failed.contains("batch frz")
            && failed.contains("in all")
            && failed.contains("no such group"),
        "{failed}"
    );
    // metrics: counted, marked lost
    let addr = metrics_addr(&d);
    let metrics = scrape(&addr);
    assert_eq!(
        sample(&metrics, "elfen_batch_group_lost{group=\"frz\"}"),
        Some(1.0),
        "{metrics}"
    );
    let failures: f64 = ["freeze", "thaw"]
        .iter()
        .filter_map(|k| {
            sample(
                &metrics,
                &format!("elfen_knob_failures_total{{group=\"frz\",knob=\"{k}\"}}"),
            )
        })
        .sum();
    assert!(failures >= 1.0, "{metrics}");
    assert_eq!(
        sample(&metrics, "elfen_batch_group_lost{group=\"spin\"}"),
        Some(0.0)
    );
    // elfen status shows it (its typed record and its text)
    let page = elfen_ops::status::attach(&s.page).unwrap();
    let st = elfen_ops::status::PageStatus::read(&page, 1000.0).unwrap();
    let h = st
        .daemon
        .as_ref()
        .unwrap_or_else(|| panic!("{:?}", st.daemon_note));
    let frz = h.groups.iter().find(|g| g.name == "frz").unwrap();
    assert_eq!(frz.state, elfen_ops::health::GroupState::Lost);
    assert!(
        frz.failures.iter().map(|f| f.count).sum::<u64>() >= 1,
        "{frz:?}"
    );
    let text = elfen_ops::render::text(&st, None);
    println!("{text}");
    assert!(
        text.contains("LOST") && text.contains("failed writes: "),
        "{text}"
    );
    drop(page);
    // still running, and a clean stop
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        elfen_shm::pid_alive(d.pid()),
        "continue: the daemon keeps running"
    );
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
    assert!(
        !elfen_ops::health::health_path(&s.page).exists(),
        "the health record goes with the page"
    );
}

#[test]
fn a_group_removed_under_the_daemon_stops_it_with_a_distinct_status() {
    let Some(()) = live_ok("a_group_removed_under_the_daemon_stops_it_with_a_distinct_status")
    else {
        return;
    };
    let _one = serial();
    let g = TestGroup::new(&unique("stop"), &["freezer"]);
    let (s, _) = lost_setup("", &g);
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    remove_group(&g, &["freezer"]);
    d.wait_for("LOST: batch frz", Duration::from_secs(5));
    let status = d
        .stop_with(0, Duration::from_secs(15))
        .expect("the daemon exits by itself");
    let out = d.output();
    assert_eq!(status.code(), Some(3), "exit status 3:\n{out}");
    assert!(out.contains("the daemon stops"), "{out}");
    assert!(
        out.contains("stopping: restoring"),
        "it restores first:\n{out}"
    );
    assert!(
        out.contains("was removed while the daemon ran"),
        "the error names the group:\n{out}"
    );
    assert!(
        !s.state.exists() && !s.page.exists(),
        "everything given back"
    );
}
