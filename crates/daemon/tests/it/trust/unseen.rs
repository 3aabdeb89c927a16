//! A protection that protects nothing is never silent: an LC service that
//! uses CPU while batch work runs, but off its request lanes (so the writer
//! never sees it busy), is said at WARN, in the health record, in `elfen
//! status` and in the metrics; moved onto its request lane, it is seen and
//! the warning goes.

use super::{sample, scrape, setup};
use crate::coalesce::metrics_addr;
use crate::common::*;
use std::time::Duration;

/// What `elfen status` prints for the page at `page`.
fn status_text(page: &std::path::Path) -> String {
    let p = elfen_ops::status::attach(page).expect("the daemon's page");
    let s = elfen_ops::status::PageStatus::read(&p, 1000.0).expect("a snapshot");
    elfen_ops::render::text(&s, None)
}

/// The daemon's health record beside `page`.
fn health(page: &std::path::Path, daemon: u32) -> elfen_ops::health::DaemonHealth {
    elfen_ops::health::DaemonHealth::read(page, daemon)
        .expect("a trusted record")
        .expect("the daemon wrote it")
}

fn pin(pid: u32, cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_setaffinity
    // reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(pid as libc::pid_t, std::mem::size_of_val(&set), &set)
    };
    assert_eq!(rc, 0, "pinning pid {pid} to cpu {cpu}");
}

/// A daemon set-up (LC unseen after a 1 s window) with a `mode` group
/// running the spin helper, and its LC, named after `tag`, busy on cpu 1 —
/// the batch lane — while its request lane is cpu 0, found by its name.
fn lc_off_its_request_lane(tag: &str, mode: &str) -> (super::Setup, Proc) {
    let name = unique(tag);
    let name = name[name.len() - 15..].to_string();
    let s = setup(
        &format!("{name}\"\nunseen_window_ms = 1000 #"),
        "",
        &format!(
            "[[batch]]\nname = \"spin\"\nmode = \"{mode}\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n"
        ),
    );
    let lc = lc_helper(
        &name,
        &[
            "--cpu=1",
            "--busy-us=500",
            "--idle-min-us=500",
            "--idle-max-us=1500",
        ],
    );
    assert!(wait_until(Duration::from_secs(5), || {
        elfen_daemon::lc::find_by_name(&name).contains(&lc.pid())
    }));
    (s, lc)
}

#[test]
fn an_lc_its_request_lanes_never_see_is_said_until_it_is_seen() {
    let Some(()) = live_ok("an_lc_its_request_lanes_never_see_is_said_until_it_is_seen") else {
        return;
    };
    let _one = serial();
    let (s, lc) = lc_off_its_request_lane("v", "idle");
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    d.wait_for(
        &format!("LC service found: pid {}", lc.pid()),
        Duration::from_secs(5),
    );
    let warn = d.wait_for("LC UNSEEN", Duration::from_secs(10));
    assert!(
        warn.contains("WARN")
            && warn.contains("no LC busy period was seen on its request lanes (CPU 0)")
            && warn.contains(&format!("Its threads last ran on CPU 1 (pid {})", lc.pid())),
        "{warn}"
    );
    let addr = metrics_addr(&d);
    let m = scrape(&addr);
    assert_eq!(sample(&m, "elfen_lc_unseen"), Some(1.0), "{m}");
    let h = health(&s.page, d.pid());
    assert!(
        h.lc_unseen.as_deref().is_some_and(|u| u.contains("CPU 1")) && h.troubled(),
        "{h:?}"
    );
    let text = status_text(&s.page);
    assert!(
        text.contains("WARNING: LC UNSEEN: the LC service used"),
        "{text}"
    );
    // onto its request lane: seen, and said so; the warning goes
    pin(lc.pid(), 0);
    d.wait_for(
        "the LC service is seen busy on its request lanes again",
        Duration::from_secs(10),
    );
    let m = scrape(&addr);
    assert_eq!(sample(&m, "elfen_lc_unseen"), Some(0.0), "{m}");
    assert!(
        sample(&m, "elfen_lc_busy_periods_total").is_some_and(|v| v > 0.0),
        "{m}"
    );
    // the record is published at the next tick
    assert!(wait_until(Duration::from_secs(2), || health(
        &s.page,
        d.pid()
    )
    .lc_unseen
    .is_none()));
    let text = status_text(&s.page);
    assert!(!text.contains("LC UNSEEN"), "{text}");
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
    let warns = d.output().matches("LC UNSEEN").count();
    assert!(
        (1..=2).contains(&warns),
        "said at once, again only once a minute: {warns}"
    );
}

/// The same LC off its request lane, but a `blind` group: blind isolation
/// follows the LC on every CPU, so its busy periods on cpu 1 are seen and
/// nothing is said — although the LC and the batch used CPU and the
/// request lane never showed the LC busy (what makes the first test warn).
#[test]
fn an_lc_blind_isolation_follows_off_its_request_lanes_is_seen() {
    let Some(()) = live_ok("an_lc_blind_isolation_follows_off_its_request_lanes_is_seen") else {
        return;
    };
    let _one = serial();
    let (s, lc) = lc_off_its_request_lane("b", "blind");
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    d.wait_for(
        &format!("LC service found: pid {}", lc.pid()),
        Duration::from_secs(5),
    );
    let (_, spinner) = crate::live::daemon_spinner(&d, "spin");
    // pinned again: on cgroup v2 (Linux 6.1) turning the cpuset controller
    // on for the daemon's groups resets the affinity of the tasks below
    pin(lc.pid(), 1);
    std::thread::sleep(Duration::from_millis(100));
    let p = elfen_ops::status::attach(&s.page).expect("the daemon's page");
    let lane0 = || {
        let l = &elfen_ops::status::PageStatus::read(&p, 1000.0)
            .unwrap()
            .lanes[0]
            .lc;
        (u64::from(l.begins), l.requests)
    };
    let ticks = elfen_cmd::proc::process_ticks;
    let (lc0, batch0, seen0) = (ticks(lc.pid()), ticks(spinner), lane0());
    // three windows
    std::thread::sleep(patient(Duration::from_millis(3500)));
    let m = scrape(&metrics_addr(&d));
    let hz = elfen_cmd::proc::ticks_per_s();
    let lc_ms = (ticks(lc.pid()) - lc0) as f64 * 1000.0 / hz;
    let batch_ms = (ticks(spinner) - batch0) as f64 * 1000.0 / hz;
    let seen = lane0();
    assert!(
        lc_ms > 100.0 && batch_ms > 100.0 && seen == seen0,
        "the case the first test warns of: the LC {lc_ms:.0} ms and the batch {batch_ms:.0} \
         ms of CPU, the request lane never busy (begins and requests {seen0:?} → {seen:?})"
    );
    assert_eq!(sample(&m, "elfen_lc_unseen"), Some(0.0), "{m}");
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
    assert!(!d.output().contains("LC UNSEEN"), "{}", d.output());
}
