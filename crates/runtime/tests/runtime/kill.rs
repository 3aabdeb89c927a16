//! The kill switch: a controller sets `KILL`; the batch thread stops
//! running batch code at its next slow path (the next request begin or end
//! on its request lane), stays stopped through further toggles, and resumes
//! after the controller clears the bit — for a spinning and a sleeping nap.

use crate::common::*;
use elfen_policy::PolicyKind;
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapChoice};
use elfen_topo::PinGuard;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

fn kill_switch(nap: NapChoice) {
    let _serial = serial();
    let Some(fx) = Fixture::new(PolicyKind::BorrowIdle.id(), 0, elfen_shm::nap::AUTO) else {
        return;
    };
    let fx = Arc::new(fx);
    let fx2 = fx.clone();
    watchdog(Duration::from_secs(60), move || {
        let fx = fx2;
        let page = &fx.page; // created here: controller access
        let runs = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let batch = {
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
        let _pin = PinGuard::new(fx.request_cpu).unwrap();
        let mut lc = LcLane::attach(page.clone(), 0).unwrap();
        let line = page.batch(1).unwrap();
        wait_for("batch code to run", || runs.load(Relaxed) > 1000);

        page.set_kill(true).unwrap();
        // A running thread whose lane stays idle does not see it yet (it
        // sees it at its next slow path); make one: a request.
        let naps = line.naps.load(Acquire);
        lc.request_begin(1);
        wait_for("the nap on the busy lane", || napping_since(page, naps));
        let naps = line.naps.load(Acquire);
        lc.request_end();
        // It wakes, sees the kill switch, and naps again.
        wait_for("the kill-switch nap", || napping_since(page, naps));
        let r0 = runs.load(Relaxed);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            runs.load(Relaxed),
            r0,
            "batch code ran with the kill switch set"
        );
        // Toggles do not let it run either.
        for i in 0..5 {
            let naps = line.naps.load(Acquire);
            lc.request_begin(2 + i);
            std::thread::sleep(Duration::from_millis(2));
            lc.request_end();
            wait_for("the kill-switch nap after a toggle", || {
                napping_since(page, naps)
            });
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            runs.load(Relaxed),
            r0,
            "batch code ran with the kill switch set"
        );

        let cleared = Instant::now();
        page.set_kill(false).unwrap();
        wait_for("batch code to resume after clear", || {
            runs.load(Relaxed) > r0
        });
        println!(
            "kill switch, nap {nap}: stopped at the next slow path, resumed {:?} after clear",
            cleared.elapsed()
        );
        stop.store(true, Release);
        batch.join().unwrap();
    });
    fx.assert_quiescent();
}

#[test]
fn kill_switch_stops_and_resumes_a_spinning_batch_thread() {
    kill_switch(NapChoice::Spin);
}

#[test]
fn kill_switch_stops_and_resumes_a_sleeping_batch_thread() {
    kill_switch(NapChoice::Futex);
}
