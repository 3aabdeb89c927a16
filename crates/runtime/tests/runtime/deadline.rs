//! The spin deadline (`BatchThread::set_spin_deadline`): a spinning nap on
//! a lane that stays busy ends at the deadline, the slow path with it (said
//! by `cut_short`), and the check's fast path stays quiet until the lane's
//! state changes; the kill switch's nap is bounded alike; without a
//! deadline the nap ends only at the change.

use crate::common::*;
use elfen_policy::PolicyKind;
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapChoice};
use std::time::{Duration, Instant};

#[test]
fn a_spin_deadline_ends_the_nap_and_the_slow_path() {
    let Some(fx) = Fixture::new(PolicyKind::BorrowIdle.id(), 0, elfen_shm::nap::AUTO) else {
        return;
    };
    let page = &fx.page;
    let clock = page.clock();
    let mut lc = LcLane::attach(page.clone(), 0).unwrap();
    let opts = BatchOptions::default().pin(false).nap(NapChoice::Spin);
    let mut b = BatchThread::attach(page.clone(), 1, opts).unwrap();
    lc.request_begin(1);
    // the lane stays busy: only the deadline ends the nap
    let t0 = Instant::now();
    b.set_spin_deadline(Some(clock.now() + clock.ns_to_ticks(2_000_000)));
    b.check();
    let took = t0.elapsed();
    assert!(b.cut_short(), "the slow path ended at the deadline");
    assert!(
        took >= Duration::from_millis(2),
        "it spun until then: {took:?}"
    );
    let s = b.stats();
    assert_eq!((s.naps, s.slow_checks), (1, 1), "{s:?}");
    // the fast path compares with the state it napped on: quiet until a change
    for _ in 0..1000 {
        b.check();
    }
    assert_eq!(
        b.stats().slow_checks,
        1,
        "no slow path while the state holds"
    );
    // the kill switch's nap is bounded too
    page.set_kill(true).unwrap();
    b.set_spin_deadline(Some(clock.now() + clock.ns_to_ticks(1_000_000)));
    b.slow_path();
    assert!(b.cut_short(), "the kill switch's nap ended at the deadline");
    page.set_kill(false).unwrap();
    // without a deadline the nap lasts until the lane changes
    b.set_spin_deadline(None);
    // timed from before the spawn: the ender's sleep starts after `t1`, so
    // the nap cannot end before 20 ms have passed since it, however late
    // this thread runs again after the spawn
    let t1 = Instant::now();
    let ender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        lc.request_end();
        lc
    });
    b.slow_path();
    let lc = ender.join().unwrap();
    assert!(!b.cut_short(), "ended by the policy, not the deadline");
    assert!(
        t1.elapsed() >= Duration::from_millis(20),
        "napped until the idle edge: {:?}",
        t1.elapsed()
    );
    drop(b);
    drop(lc);
    fx.assert_quiescent();
}
