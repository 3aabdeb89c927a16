//! The kill switch's modes and the heartbeat fail-safe, with real threads:
//!
//! - mode "unmanaged" (`UNMANAGED`): a batch thread whose request lane is
//!   busy runs instead of napping; `KILL` still pauses it; clearing the bit
//!   restores the policy at the next slow path;
//! - a stale heartbeat (`heartbeat_stale_ns` set, the controller silent)
//!   pauses a batch thread although its request lane is idle, from the
//!   first check of a thread attaching to a stale page and from the next
//!   slow path of a running one, until a beat (or the check is turned off);
//! - `heartbeat_stale_ns` = 0: an old or missing heartbeat changes nothing.
//!
//! Each for a spinning and a sleeping (futex) nap.

use crate::common::*;
use elfen_policy::PolicyKind;
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapChoice};
use elfen_shm::{BatchMode, KillMode, Page};
use elfen_topo::PinGuard;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::thread::JoinHandle;
use std::time::Duration;

/// A batch thread on lane 1 counting its runs of batch code. Dropping it
/// clears the kill switch and the fail-safe (so no nap outlives the test,
/// also when it fails) and joins the thread.
struct Worker {
    page: Arc<Page>,
    runs: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn start(page: &Arc<Page>, nap: NapChoice) -> Worker {
        let runs = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (p, runs, stop) = (page.clone(), runs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut b = BatchThread::attach(p, 1, BatchOptions::default().nap(nap)).unwrap();
                let mut x = 1;
                while !stop.load(Acquire) {
                    b.check();
                    runs.fetch_add(1, Relaxed);
                    batch_code(&mut x);
                }
            })
        };
        Worker {
            page: page.clone(),
            runs,
            stop,
            thread: Some(thread),
        }
    }

    fn runs(&self) -> u64 {
        self.runs.load(Relaxed)
    }

    /// Waits until batch code runs again after `from` runs.
    fn wait_runs(&self, what: &str, from: u64) {
        wait_for(what, || self.runs() > from + 100);
    }

    /// Asserts that no batch code runs for `ms` milliseconds.
    fn assert_still(&self, ms: u64, why: &str) {
        let r0 = self.runs();
        std::thread::sleep(Duration::from_millis(ms));
        assert_eq!(self.runs(), r0, "batch code ran {why}");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Release);
        let _ = self.page.set_control(KillMode::Off);
        let _ = self.page.set_heartbeat_stale(0);
        if let Some(t) = self.thread.take() {
            let r = t.join();
            if !std::thread::panicking() {
                r.unwrap();
            }
        }
    }
}

/// Runs `body` on a borrow-idle page with the LC lane attached on the
/// request CPU, under the watchdog; then checks the page is quiescent.
fn with_page(body: impl FnOnce(&Arc<Page>, &mut LcLane) + Send + 'static) {
    let _serial = serial();
    let Some(fx) = Fixture::new(PolicyKind::BorrowIdle.id(), 0, elfen_shm::nap::AUTO) else {
        return;
    };
    let fx = Arc::new(fx);
    let fx2 = fx.clone();
    watchdog(Duration::from_secs(60), move || {
        let _pin = PinGuard::new(fx2.request_cpu).unwrap();
        let mut lc = LcLane::attach(fx2.page.clone(), 0).unwrap();
        body(&fx2.page, &mut lc);
    });
    fx.assert_quiescent();
}

fn naps(page: &Page) -> u64 {
    page.batch(1).unwrap().naps.load(Acquire)
}

fn unmanaged(nap: NapChoice) {
    with_page(move |page, lc| {
        let w = Worker::start(page, nap);
        w.wait_runs("batch code to run", 0);
        // borrow idle: a busy request lane makes it nap
        let n = naps(page);
        lc.request_begin(1);
        wait_for("the nap on the busy lane", || napping_since(page, n));
        w.assert_still(20, "on a busy lane under borrow idle");

        // unmanaged: the nap ends (the control word changed) and batch
        // code runs although the request lane stays busy
        page.set_control(KillMode::Unmanaged).unwrap();
        assert_eq!(page.batch_mode(), BatchMode::Unmanaged);
        w.wait_runs("batch code to run unmanaged on a busy lane", w.runs());
        w.wait_runs("unmanaged batch code to keep running", w.runs());
        assert!(lc.is_busy());
        assert_eq!(page.batch(1).unwrap().napping.load(Acquire), 0);

        // KILL wins over UNMANAGED: paused at the next slow path
        page.set_kill(true).unwrap();
        assert_eq!(page.kill_mode(), KillMode::Paused);
        let n = naps(page);
        lc.request_end();
        wait_for("the kill-switch nap", || napping_since(page, n));
        w.assert_still(30, "with KILL and UNMANAGED set");

        // clearing KILL leaves UNMANAGED: runs again, busy or not
        page.set_kill(false).unwrap();
        w.wait_runs("batch code after KILL cleared", w.runs());
        lc.request_begin(2);
        w.wait_runs("unmanaged batch code on a busy lane again", w.runs());

        // clearing UNMANAGED restores the policy at the next slow path
        page.set_control(KillMode::Off).unwrap();
        let n = naps(page);
        lc.request_end();
        lc.request_begin(3);
        wait_for("the policy's nap after unmanaged", || {
            napping_since(page, n)
        });
        w.assert_still(20, "on a busy lane after unmanaged was cleared");
        lc.request_end();
        w.wait_runs("batch code on the idle lane", w.runs());
        println!(
            "unmanaged, nap {nap}: ran on a busy lane, KILL paused it, clearing restored borrow idle"
        );
    });
}

#[test]
fn unmanaged_mode_runs_a_spinning_batch_thread_on_a_busy_lane() {
    unmanaged(NapChoice::Spin);
}

#[test]
fn unmanaged_mode_runs_a_sleeping_batch_thread_on_a_busy_lane() {
    unmanaged(NapChoice::Futex);
}

/// Puts the heartbeat `ms` milliseconds in the past.
fn age_heartbeat(page: &Page, ms: u64) {
    let c = page.clock();
    let past = c.now().saturating_sub(c.ns_to_ticks(ms * 1_000_000)).max(1);
    page.header().heartbeat.store(past, Release);
}

fn stale(nap: NapChoice) {
    with_page(move |page, lc| {
        // the fail-safe on (20 ms), the heartbeat 1 s old: a thread
        // attaching now pauses at its first check, the request lane idle
        page.set_heartbeat_stale(20_000_000).unwrap();
        age_heartbeat(page, 1_000);
        assert_eq!(page.batch_mode(), BatchMode::Stale);
        let w = Worker::start(page, nap);
        wait_for("the stale-heartbeat nap at attach", || {
            napping_since(page, 0)
        });
        assert!(!lc.is_busy());
        w.assert_still(30, "with a stale heartbeat on an idle lane");

        // a beat (kept up, as a live controller does) ends the pause
        wait_for("batch code after a beat", || {
            page.beat().unwrap();
            w.runs() > 100
        });

        // the controller falls silent: a thread in the fast path whose lane
        // stays idle cannot notice (the documented limit) ...
        age_heartbeat(page, 1_000);
        let r = w.runs();
        w.wait_runs("batch code in the fast path, stale but unnoticed", r);
        // ... it notices at its next slow path: the request's end
        let n = naps(page);
        lc.request_begin(1);
        lc.request_end();
        // (the state word changed, so the check fails whether or not the
        // thread saw the lane busy; a nap on the busy lane, if any, ends in
        // the stale nap without running batch code in between)
        wait_for("the stale-heartbeat nap after a request", || {
            napping_since(page, n)
        });
        w.assert_still(30, "with a stale heartbeat after a request");
        wait_for("batch code after the controller beats again", || {
            page.beat().unwrap();
            w.runs() > r + 200
        });

        // turning the check off also ends a stale pause
        age_heartbeat(page, 1_000);
        let n = naps(page);
        lc.request_begin(2);
        lc.request_end();
        wait_for("the stale-heartbeat nap", || napping_since(page, n));
        w.assert_still(20, "with a stale heartbeat");
        page.set_heartbeat_stale(0).unwrap();
        w.wait_runs("batch code after the fail-safe was turned off", w.runs());
        println!("stale heartbeat, nap {nap}: paused on an idle lane, resumed after a beat");
    });
}

#[test]
fn stale_heartbeat_pauses_a_spinning_batch_thread_until_a_beat() {
    stale(NapChoice::Spin);
}

#[test]
fn stale_heartbeat_pauses_a_sleeping_batch_thread_until_a_beat() {
    stale(NapChoice::Futex);
}

#[test]
fn without_the_fail_safe_an_old_heartbeat_changes_nothing() {
    with_page(|page, lc| {
        // heartbeat_stale_ns = 0, a heartbeat from long ago
        age_heartbeat(page, 10_000);
        assert_eq!(page.heartbeat_stale_ns(), 0);
        assert_eq!(page.batch_mode(), BatchMode::Managed);
        let w = Worker::start(page, NapChoice::Spin);
        w.wait_runs("batch code with an old heartbeat", 0);
        for i in 0..3 {
            lc.request_begin(i);
            std::thread::sleep(Duration::from_millis(2));
            lc.request_end();
            w.wait_runs("batch code after a request", w.runs());
        }
        assert_eq!(page.batch(1).unwrap().napping.load(Acquire), 0);
    });
}
