//! The Rust kernels with the runtime's batch thread as their check: they
//! make progress while the request lane is idle and none while it is busy
//! (their checks nap), as the batch line's counters show.

mod common;

use common::wait_for;
use elfen_kernels::{Kernel, KernelConfig, KernelKind};
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapChoice};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

#[test]
fn checks_nap_while_the_request_lane_is_busy() {
    let (_dir, page) = common::page();
    for kind in KernelKind::ALL {
        let mut lc = LcLane::attach(page.clone(), 0).unwrap();
        let line = page.batch(1).unwrap();
        let (naps0, wakes0) = (line.naps.load(Relaxed), line.wakes.load(Relaxed));
        let stop = Arc::new(AtomicBool::new(false));
        let units = Arc::new(AtomicU64::new(0));
        let (p2, s2, u2) = (page.clone(), stop.clone(), units.clone());
        let batch = std::thread::spawn(move || {
            // Not pinned: the test must not depend on the machine's CPUs.
            let opts = BatchOptions::default().pin(false).nap(NapChoice::Spin);
            let mut bt = BatchThread::attach(p2, 1, opts).unwrap();
            let cfg = KernelConfig {
                stream_bytes: 1 << 20,
                ..KernelConfig::default()
            };
            let mut k = Kernel::with_config(kind, cfg).unwrap();
            k.run_until(&mut bt, &s2, &u2, 16)
        });
        wait_for("batch progress", || units.load(Relaxed) >= 64);
        lc.request_begin(7);
        wait_for("the batch thread to nap", || {
            line.napping.load(Relaxed) == 1
        });
        let frozen = units.load(Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(units.load(Relaxed), frozen, "{kind}: batch ran while busy");
        lc.request_end();
        wait_for("batch progress after the request", || {
            units.load(Relaxed) > frozen + 64
        });
        stop.store(true, Relaxed);
        let n = batch.join().unwrap();
        assert!(n > frozen, "{kind}");
        assert!(line.naps.load(Relaxed) > naps0, "{kind}: no nap counted");
        assert!(line.wakes.load(Relaxed) > wakes0, "{kind}: no wake counted");
        assert_eq!(line.napping.load(Relaxed), 0);
    }
}
