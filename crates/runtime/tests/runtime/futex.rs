//! The futex nap loses no wakeup: thousands of rapid request begin/end
//! toggles race the batch thread's `sleepers` registration, re-check and
//! `FUTEX_WAIT`; every so often the lane stays idle for `LONG_IDLE`, and the
//! batch thread must run batch code during every such idle period.
//!
//! The futex timeout is lengthened to 1 s so a lost wakeup cannot hide
//! behind it (with the default 10 ms the thread would re-check in time).
//! A watchdog fails the test instead of letting it hang.

use crate::common::*;
use elfen_policy::PolicyKind;
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapBackend, NapChoice};
use elfen_shm::state;
use elfen_topo::PinGuard;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const TOGGLES: u64 = 5000;
const LONG_EVERY: u64 = 100;
/// Long enough for a woken thread to be scheduled even on a busy VM.
const LONG_IDLE: Duration = Duration::from_millis(20);
const SEQS: usize = 1 << 14;

#[test]
fn futex_nap_loses_no_wakeup() {
    let _serial = serial();
    let Some(fx) = Fixture::new(PolicyKind::BorrowIdle.id(), 0, elfen_shm::nap::FUTEX) else {
        return;
    };
    let fx = Arc::new(fx);
    let (long_idle, ran_idle, stats) = {
        let fx = fx.clone();
        watchdog(Duration::from_secs(60), move || {
            let clock = fx.page.clock();
            // ran_idle[seq]: the batch thread ran batch code while the lane
            // was idle after request `seq`.
            let ran_idle: Arc<Vec<AtomicBool>> =
                Arc::new((0..SEQS).map(|_| AtomicBool::new(false)).collect());
            let stop = Arc::new(AtomicBool::new(false));
            let start = Arc::new(Barrier::new(2));
            let lc = {
                let (fx, stop, start) = (fx.clone(), stop.clone(), start.clone());
                std::thread::spawn(move || {
                    let _pin = PinGuard::new(fx.request_cpu).unwrap();
                    let mut lc = LcLane::attach(fx.page.clone(), 0).unwrap();
                    let mut rng = Rng::new(0xf07e);
                    let mut long = Vec::new();
                    start.wait();
                    for i in 0..TOGGLES {
                        lc.request_begin(i);
                        spin_until(
                            &clock,
                            clock.now() + clock.ns_to_ticks(rng.range(0, 30_000)),
                        );
                        lc.request_end();
                        let idle = if i % LONG_EVERY == LONG_EVERY - 1 {
                            long.push(lc.seq() as usize);
                            LONG_IDLE.as_nanos() as u64
                        } else {
                            rng.range(0, 30_000)
                        };
                        spin_until(&clock, clock.now() + clock.ns_to_ticks(idle));
                    }
                    stop.store(true, Release);
                    long
                })
            };
            let batch = {
                let (fx, ran_idle) = (fx.clone(), ran_idle.clone());
                std::thread::spawn(move || {
                    let opts = BatchOptions::default()
                        .nap(NapChoice::Futex)
                        .futex_timeout(Duration::from_secs(1));
                    let mut b = BatchThread::attach(fx.page.clone(), 1, opts).unwrap();
                    assert_eq!(b.nap_backend(), NapBackend::Futex);
                    let lc_line = fx.page.lc(0).unwrap();
                    let mut x = 1u64;
                    start.wait();
                    while !stop.load(Acquire) {
                        b.check();
                        let s = lc_line.state.load(Acquire);
                        if !state::busy(s) {
                            ran_idle[state::seq(s) as usize % SEQS].store(true, Relaxed);
                        }
                        batch_code(&mut x);
                    }
                    b.stats()
                })
            };
            let long = lc.join().unwrap();
            let stats = batch.join().unwrap();
            let ran: Vec<bool> = ran_idle.iter().map(|r| r.load(Relaxed)).collect();
            (long, ran, stats)
        })
    };
    fx.assert_quiescent();
    let missed: Vec<usize> = long_idle
        .iter()
        .copied()
        .filter(|&k| !ran_idle[k])
        .collect();
    let woke_in_os = fx.page.batch(1).unwrap().wakes.load(Relaxed);
    println!(
        "futex: {TOGGLES} toggles, {} long idle periods, missed {missed:?}; {stats:?}; batch line wakes {woke_in_os}",
        long_idle.len()
    );
    assert!(
        missed.is_empty(),
        "lost wakeup: the batch thread slept through idle periods after requests {missed:?}"
    );
    assert_eq!(long_idle.len() as u64, TOGGLES / LONG_EVERY);
    assert!(stats.naps > 500, "only {} naps", stats.naps);
    assert_eq!(stats.naps, stats.wakes);
}
