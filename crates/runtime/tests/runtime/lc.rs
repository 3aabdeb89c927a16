//! The LC line's words and counters, lane claiming and cleanup, and the
//! batch side's controller reconfiguration (single-threaded: the lane is
//! idle whenever the batch thread checks).

use crate::common::*;
use elfen_policy::PolicyKind;
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapBackend, NapChoice};
use elfen_shm::{nap, state};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// This thread's id (from /proc, to keep libc out of the test's dependencies).
fn gettid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn lc_line_words_and_counters() {
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let line = fx.page.lc(0).unwrap();
    let mut lc = LcLane::attach(fx.page.clone(), 0).unwrap();
    assert_eq!(line.lc_tid.load(Relaxed), gettid());
    assert!(!lc.is_busy());

    lc.request_begin(42);
    assert!(lc.is_busy());
    assert_eq!(line.state.load(Acquire), state::pack(true, 1, 0));
    assert_eq!(line.request_id.load(Relaxed), 42);
    assert!(line.busy_since.load(Relaxed) > 0);
    lc.set_queue_len(3);
    assert_eq!(line.state.load(Acquire), state::pack(true, 1, 3));
    lc.request_end();
    assert_eq!(line.state.load(Acquire), state::pack(false, 1, 3));
    assert_eq!(line.requests.load(Relaxed), 1);
    let ticks = line.busy_ticks.load(Relaxed);
    lc.request_end(); // not busy: nothing
    assert_eq!(line.requests.load(Relaxed), 1);

    // The queue length saturates below NEVER's.
    lc.set_queue_len(u32::MAX);
    assert_eq!(
        state::queue_len(line.state.load(Acquire)),
        state::MAX_QUEUE_LEN
    );
    lc.set_queue_len(0);

    // A begin while busy completes the running request without an idle gap.
    lc.request_begin(43);
    lc.request_begin(44);
    assert_eq!(line.state.load(Acquire), state::pack(true, 3, 0));
    assert_eq!(line.requests.load(Relaxed), 2);
    assert!(line.busy_ticks.load(Relaxed) >= ticks);

    // Requests measured elsewhere (the daemon's writer taking the kernel's
    // counts): counted with their time; the state and sequence unchanged.
    let (before_ticks, st) = (line.busy_ticks.load(Relaxed), line.state.load(Acquire));
    lc.count_completed(5, 2_000_000);
    assert_eq!(line.requests.load(Relaxed), 7);
    assert_eq!(
        line.busy_ticks.load(Relaxed) - before_ticks,
        fx.page.clock().ns_to_ticks(2_000_000)
    );
    assert_eq!(line.state.load(Acquire), st);
    lc.count_completed(0, 0);
    assert_eq!(line.requests.load(Relaxed), 7);

    // Drop ends the open request and releases the lane.
    drop(lc);
    assert_eq!(line.state.load(Acquire), state::pack(false, 3, 0));
    assert_eq!(line.requests.load(Relaxed), 8);
    assert_eq!(line.lc_tid.load(Relaxed), 0);

    // A new LC thread continues the sequence and the counters.
    let mut lc = LcLane::attach(fx.page.clone(), 0).unwrap();
    lc.request_begin(45);
    assert_eq!(state::seq(line.state.load(Acquire)), 4);
    lc.request_end();
    assert_eq!(line.requests.load(Relaxed), 9);
    fx.assert_quiescent();
}

#[test]
fn a_request_left_open_by_a_dead_lc_thread_is_ended() {
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let dead = std::thread::spawn(gettid).join().unwrap();
    assert_ne!(dead, 0);
    // What a crashed LC leaves behind (the creator may write the LC line).
    let line = fx.page.lc(0).unwrap();
    line.state.store(state::pack(true, 5, 2), Relaxed);
    line.lc_tid.store(dead, Relaxed);
    let mut lc = LcLane::attach(fx.page.clone(), 0).unwrap();
    assert_eq!(line.state.load(Acquire), state::pack(false, 5, 2));
    assert_eq!(line.lc_tid.load(Relaxed), gettid());
    lc.request_begin(1);
    assert_eq!(line.state.load(Acquire), state::pack(true, 6, 2));
    fx.assert_quiescent();
}

#[test]
fn lc_lane_is_send() {
    fn send<T: Send>() {}
    send::<LcLane>();
}

#[test]
fn batch_thread_follows_controller_rewrites() {
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let page = &fx.page;
    let mut lc = LcLane::attach(page.clone(), 0).unwrap();
    let toggle = |lc: &mut LcLane| {
        lc.request_begin(0);
        lc.request_end();
    };
    let mut b = BatchThread::attach(page.clone(), 1, BatchOptions::default().pin(false)).unwrap();
    assert_eq!(page.batch(1).unwrap().attached.load(Relaxed), 1);
    assert_eq!(b.nap_backend(), NapBackend::Spin); // pair_spec asks for spin
    assert_eq!(b.watch_word(), &page.lc(0).unwrap().state as *const _);
    assert_eq!(
        b.expected(),
        state::NEVER,
        "the first check runs the policy"
    );
    b.check();
    assert_eq!(b.expected(), page.lc(0).unwrap().state.load(Acquire));

    let mut l = pair_spec(1).lanes[1].clone();
    l.policy = PolicyKind::RefreshBudget.id();
    l.budget_ns = 5000;
    l.nap = nap::FUTEX;
    page.write_controller(1, &l).unwrap();
    toggle(&mut lc);
    b.check();
    assert_eq!(b.policy().kind, PolicyKind::RefreshBudget);
    assert_eq!(b.policy().budget_ns, 5000);
    assert_eq!(b.nap_backend(), NapBackend::Futex);

    // Rewrites it cannot follow are refused and counted; the thread keeps
    // its configuration.
    l.policy = 9;
    page.write_controller(1, &l).unwrap();
    toggle(&mut lc);
    b.check();
    assert_eq!(b.policy().kind, PolicyKind::RefreshBudget);
    assert_eq!(b.stats().config_rejects, 1);
    if !elfen_runtime::machine_features().umwait_allowed {
        l.policy = PolicyKind::RefreshBudget.id();
        l.nap = nap::UMWAIT;
        page.write_controller(1, &l).unwrap();
        toggle(&mut lc);
        b.check();
        assert_eq!(b.nap_backend(), NapBackend::Futex);
        assert_eq!(b.stats().config_rejects, 2);
    }
    let s = b.stats();
    assert_eq!(s.naps, 0);
    assert!(s.slow_checks >= 4, "{s:?}");
    drop(b);
    let line = page.batch(1).unwrap();
    assert_eq!(line.slow_checks.load(Relaxed), s.slow_checks);
    assert!(line.run_ticks.load(Relaxed) > 0);

    // A backend chosen in the options is not overridden by the controller.
    let mut b = BatchThread::attach(
        page.clone(),
        1,
        BatchOptions::default().pin(false).nap(NapChoice::Spin),
    )
    .unwrap();
    assert!(
        b.describe()
            .contains("nap spin [options: asked for explicitly]"),
        "{}",
        b.describe()
    );
    l.nap = nap::HYBRID;
    page.write_controller(1, &l).unwrap();
    toggle(&mut lc);
    b.check();
    assert_eq!(b.nap_backend(), NapBackend::Spin);
    drop(b);
    fx.assert_quiescent();
}

#[test]
fn several_batch_threads_share_a_lane() {
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let opts = BatchOptions::default().pin(false);
    let a = BatchThread::attach(fx.page.clone(), 1, opts.clone()).unwrap();
    let b = BatchThread::attach(fx.page.clone(), 1, opts).unwrap();
    assert_eq!(fx.page.batch(1).unwrap().attached.load(Relaxed), 2);
    drop((a, b));
    fx.assert_quiescent();
}
