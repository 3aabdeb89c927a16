//! The futex nap loses no wakeup: thousands of rapid request begin/end
//! toggles race the batch thread's `sleepers` registration, re-check and
//! `FUTEX_WAIT`; every so often the lane stays idle for `LONG_IDLE`, and the
//! batch thread must wake for every such idle period.
//!
//! "Wake" is what the OS sees: at the end of a long idle period in which
//! the batch thread ran no batch code, the LC thread reads the batch
//! thread's scheduler state from `/proc`. Runnable (`R`) means it was woken
//! and is waiting for a CPU (another process is using it: a loaded VM);
//! anything else means it is still asleep in `FUTEX_WAIT` although `state`
//! changed `LONG_IDLE` ago: a lost wakeup, and the test fails. On a quiet
//! machine the thread runs in every long idle period.
//!
//! The futex timeout is lengthened to 1 s so a lost wakeup cannot hide
//! behind it (with the default 10 ms the thread would re-check in time).
//! A watchdog fails the test instead of letting it hang.

use crate::common::*;
use elfen_policy::PolicyKind;
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapBackend, NapChoice};
use elfen_shm::state;
use elfen_topo::PinGuard;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const TOGGLES: u64 = 5000;
const LONG_EVERY: u64 = 100;
const LONG_IDLE: Duration = Duration::from_millis(20);
const SEQS: usize = 1 << 14;

/// This thread's id.
fn gettid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// The scheduler state letter of thread `tid` of this process (`R`, `S`, …).
fn task_state(tid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // "tid (comm) S ...": the state follows the last ')'.
    stat[stat.rfind(')').unwrap() + 1..]
        .trim_start()
        .chars()
        .next()
        .unwrap()
}

#[test]
fn futex_nap_loses_no_wakeup() {
    let _serial = serial();
    let Some(fx) = Fixture::new(PolicyKind::BorrowIdle.id(), 0, elfen_shm::nap::FUTEX) else {
        return;
    };
    let fx = Arc::new(fx);
    let (long_idle, missed, stats) = {
        let fx = fx.clone();
        watchdog(Duration::from_secs(60), move || {
            let clock = fx.page.clock();
            // ran_idle[seq]: the batch thread ran batch code while the lane
            // was idle after request `seq`.
            let ran_idle: Arc<Vec<AtomicBool>> =
                Arc::new((0..SEQS).map(|_| AtomicBool::new(false)).collect());
            let batch_tid = Arc::new(AtomicU32::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let start = Arc::new(Barrier::new(2));
            let lc = {
                let (fx, stop, start) = (fx.clone(), stop.clone(), start.clone());
                let (ran_idle, batch_tid) = (ran_idle.clone(), batch_tid.clone());
                std::thread::spawn(move || {
                    let _pin = PinGuard::new(fx.request_cpu).unwrap();
                    let mut lc = LcLane::attach(fx.page.clone(), 0).unwrap();
                    let mut rng = Rng::new(0xf07e);
                    let (mut long, mut missed) = (0, Vec::new());
                    start.wait();
                    let tid = batch_tid.load(Acquire);
                    for i in 0..TOGGLES {
                        lc.request_begin(i);
                        spin_until(
                            &clock,
                            clock.now() + clock.ns_to_ticks(rng.range(0, 30_000)),
                        );
                        lc.request_end();
                        if i % LONG_EVERY == LONG_EVERY - 1 {
                            long += 1;
                            let ns = LONG_IDLE.as_nanos() as u64;
                            spin_until(&clock, clock.now() + clock.ns_to_ticks(ns));
                            let seq = lc.seq() as usize;
                            if !ran_idle[seq % SEQS].load(Acquire) {
                                missed.push((seq, task_state(tid)));
                            }
                        } else {
                            let ns = rng.range(0, 30_000);
                            spin_until(&clock, clock.now() + clock.ns_to_ticks(ns));
                        }
                    }
                    stop.store(true, Release);
                    (long, missed)
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
                    batch_tid.store(gettid(), Release);
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
            let (long, missed) = lc.join().unwrap();
            (long, missed, batch.join().unwrap())
        })
    };
    fx.assert_quiescent();
    println!(
        "futex: {TOGGLES} toggles, {long_idle} long idle periods; missed (seq, batch thread state) {missed:?}; {stats:?}"
    );
    let lost: Vec<_> = missed.iter().filter(|&&(_, st)| st != 'R').collect();
    assert!(
        lost.is_empty(),
        "lost wakeup: the batch thread was still asleep {LONG_IDLE:?} after these requests ended: {lost:?}"
    );
    assert_eq!(long_idle, TOGGLES / LONG_EVERY);
    // Not vacuous: it napped and woke hundreds of times. How many long idle
    // periods it actually ran in is scheduling (a loaded machine leaves the
    // woken thread runnable, `R`, past the period), so it is printed above,
    // not asserted.
    assert!(stats.naps > 100, "only {} naps", stats.naps);
    assert_eq!(stats.naps, stats.wakes);
}
