//! The words the controller writes and its readers read: LC busy time,
//! the controller lines' seqlock, the kill switch, the heartbeat, liveness.

use crate::common::{tmp, two_lanes};
use elfen_shm::*;
use std::sync::atomic::Ordering::Relaxed;

#[test]
fn lc_busy_time_counts_the_running_request() {
    let d = tmp();
    let page = Page::create(d.path().join("sig"), &two_lanes()).unwrap();
    let (c, line) = (page.clock(), page.lc(0).unwrap());
    let ms = |n: u64| c.ns_to_ticks(n * 1_000_000);
    // completed requests' 5 ms, idle: just those
    line.busy_ticks.store(ms(5), Relaxed);
    let done = page.lc_busy_ns(0).unwrap();
    assert!(done.abs_diff(5_000_000) < 50_000, "{done}");
    // busy for the last 20 ms: those 5 ms plus the running 20
    line.busy_since
        .store(c.now().saturating_sub(ms(20)), Relaxed);
    line.state.store(state::pack(true, 1, 0), Relaxed);
    let running = page.lc_busy_ns(0).unwrap();
    assert!((25_000_000..30_000_000).contains(&running), "{running}");
    assert!(page.lc_busy_ns(9).is_err());
}

#[test]
fn controller_updates_are_atomic_to_readers() {
    let d = tmp();
    let p = d.path().join("seq");
    let page = Page::create(&p, &two_lanes()).unwrap();
    let reader = Page::attach(&p, Access::Batch).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // every snapshot must be one of the two written configurations
            while !stop.load(Relaxed) {
                let c = reader.read_controller(1).unwrap();
                assert!(c.seq % 2 == 0);
                assert!(
                    (c.policy, c.budget_ns) == (1, 0)
                        || (c.policy, c.budget_ns) == (2, 5_000)
                        || (c.policy, c.budget_ns) == (3, 7_000),
                    "torn read: {c:?}"
                );
            }
        });
        let mut l = two_lanes().lanes[1].clone();
        for i in 0..20_000u64 {
            (l.policy, l.budget_ns) = if i % 2 == 0 { (2, 5_000) } else { (3, 7_000) };
            page.write_controller(1, &l).unwrap();
        }
        stop.store(true, Relaxed);
    });
    assert_eq!(reader.read_controller(1).unwrap().seq, 40_000);
    // a controller that dies mid-rewrite leaves the line odd: readers give up
    page.controller(1)
        .unwrap()
        .config_seq
        .store(40_001, Relaxed);
    let e = reader.read_controller(1).unwrap_err().to_string();
    assert!(e.contains("lane 1") && e.contains("mid-rewrite"), "{e}");
    let mut bad = two_lanes().lanes[1].clone();
    bad.nap = 9;
    assert!(
        page.write_controller(1, &bad)
            .unwrap_err()
            .to_string()
            .contains("nap backend 9")
    );
}

#[test]
fn kill_switch_modes_set_both_bits_and_keep_others() {
    let d = tmp();
    let page = Page::create(d.path().join("sig"), &two_lanes()).unwrap();
    let obs = Page::attach(page.path(), Access::Observer).unwrap();
    let word = || obs.header().control.load(Relaxed);
    assert_eq!(
        (obs.kill_mode(), obs.batch_mode()),
        (KillMode::Off, BatchMode::Managed)
    );
    page.set_control(KillMode::Unmanaged).unwrap();
    assert_eq!(word(), control::UNMANAGED);
    assert_eq!(
        (obs.kill_mode(), obs.batch_mode()),
        (KillMode::Unmanaged, BatchMode::Unmanaged)
    );
    // set_kill keeps its old meaning and leaves UNMANAGED alone; KILL wins
    page.set_kill(true).unwrap();
    assert_eq!(word(), control::KILL | control::UNMANAGED);
    assert_eq!(
        (obs.kill_mode(), obs.batch_mode()),
        (KillMode::Paused, BatchMode::Killed)
    );
    page.set_kill(false).unwrap();
    assert_eq!(obs.kill_mode(), KillMode::Unmanaged);
    page.set_control(KillMode::Paused).unwrap();
    assert_eq!(word(), control::KILL);
    page.set_unmanaged(true).unwrap();
    page.set_control(KillMode::Off).unwrap();
    assert_eq!(word(), 0);
    // a bit this version does not define survives set_control
    page.header().control.store(1 << 7, Relaxed);
    page.set_control(KillMode::Paused).unwrap();
    assert_eq!(word(), (1 << 7) | control::KILL);
    page.set_control(KillMode::Off).unwrap();
    assert_eq!(word(), 1 << 7);
    // read-only handles refuse every write, naming what was refused
    for e in [
        obs.set_control(KillMode::Paused).unwrap_err(),
        obs.set_unmanaged(true).unwrap_err(),
    ] {
        assert!(
            e.to_string().contains("read-only") && e.to_string().contains("kill"),
            "{e}"
        );
    }
}

#[test]
fn heartbeat_fail_safe_reads_age_and_staleness() {
    let d = tmp();
    let page = Page::create(d.path().join("sig"), &two_lanes()).unwrap();
    let obs = Page::attach(page.path(), Access::Observer).unwrap();
    // a new page: never beat, check off -> not stale
    assert_eq!(obs.heartbeat_age_ns(), None);
    assert_eq!(obs.heartbeat_stale_ns(), 0);
    assert!(!obs.heartbeat_stale());
    // turning the check on beats first: fresh at once
    page.set_heartbeat_stale(1_000_000_000).unwrap();
    assert_eq!(obs.heartbeat_stale_ns(), 1_000_000_000);
    assert!(obs.heartbeat_age_ns().unwrap() < 1_000_000_000);
    assert!(!obs.heartbeat_stale());
    assert_eq!(obs.batch_mode(), BatchMode::Managed);
    // a heartbeat 2 s in the past is stale and pauses batch, also unmanaged
    let clock = page.clock();
    let past = clock.now() - clock.ns_to_ticks(2_000_000_000);
    page.header().heartbeat.store(past, Relaxed);
    assert!(obs.heartbeat_age_ns().unwrap() >= 2_000_000_000);
    assert!(obs.heartbeat_stale());
    assert_eq!(obs.batch_mode(), BatchMode::Stale);
    page.set_control(KillMode::Unmanaged).unwrap();
    assert_eq!(obs.batch_mode(), BatchMode::Stale);
    // a beat makes it fresh again
    page.beat().unwrap();
    assert!(!obs.heartbeat_stale());
    assert_eq!(obs.batch_mode(), BatchMode::Unmanaged);
    // check off: an old or missing heartbeat is no reason to pause
    page.header().heartbeat.store(0, Relaxed);
    page.set_heartbeat_stale(0).unwrap();
    assert!(!obs.heartbeat_stale());
    assert_eq!(
        obs.header().heartbeat.load(Relaxed),
        0,
        "turning it off does not beat"
    );
    page.set_heartbeat_stale(5).unwrap();
    page.header().heartbeat.store(0, Relaxed);
    assert!(obs.heartbeat_stale(), "on and never beat is stale");
    let e = obs.set_heartbeat_stale(1).unwrap_err().to_string();
    assert!(
        e.contains("read-only") && e.contains("heartbeat_stale_ns"),
        "{e}"
    );
}

#[test]
fn a_zombie_is_not_alive() {
    let mut c = std::process::Command::new("sleep")
        .arg("10")
        .spawn()
        .unwrap();
    let pid = c.id();
    assert!(elfen_shm::pid_alive(pid));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    // killed, not yet reaped: a zombie, still in the process table
    let gone = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(5));
        !elfen_shm::pid_alive(pid)
    });
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "still in the process table"
    );
    c.wait().unwrap();
    assert!(gone, "a zombie counts as not alive");
    assert!(!elfen_shm::pid_alive(pid));
}
