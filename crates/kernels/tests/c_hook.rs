//! The instrumented C kernels call libelfen's check hook at every unit: on a
//! thread attached through libelfen, their checks nap while the request lane
//! is busy (the batch line counts the naps), and the plain build never does.

mod common;

use common::wait_for;
use elfen_kernels::{CBuild, CKernel, KernelConfig, KernelKind};
use elfen_runtime::{BatchOptions, LcLane, NapChoice};
use elfen_shm::Page;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Runs `kind` in `build` on a thread attached to lane 1; returns
/// (units before the request, units at its end, naps during it).
fn run_through_a_request(page: &Arc<Page>, kind: KernelKind, build: CBuild) -> (u64, u64, u64) {
    let mut lc = LcLane::attach(page.clone(), 0).unwrap();
    let line = page.batch(1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let units = Arc::new(AtomicU64::new(0));
    let (p2, s2, u2) = (page.clone(), stop.clone(), units.clone());
    let batch = std::thread::spawn(move || {
        let opts = BatchOptions::default().pin(false).nap(NapChoice::Spin);
        elfen::batch::attach_current_thread(p2, 1, opts).unwrap();
        let cfg = KernelConfig {
            stream_bytes: 1 << 20,
            ..KernelConfig::default()
        };
        let mut k = CKernel::with_config(kind, build, cfg).unwrap();
        let n = k.run_until(&s2, &u2, 16);
        assert!(elfen::batch::detach_current_thread());
        n
    });
    wait_for("batch progress", || units.load(Relaxed) >= 64);
    let naps0 = line.naps.load(Relaxed);
    lc.request_begin(1);
    let begun = units.load(Relaxed);
    if build == CBuild::Instrumented {
        wait_for("the instrumented kernel to nap", || {
            line.napping.load(Relaxed) == 1
        });
    }
    std::thread::sleep(Duration::from_millis(20));
    let ended = units.load(Relaxed);
    let naps = line.naps.load(Relaxed) - naps0;
    lc.request_end();
    wait_for("progress after the request", || {
        units.load(Relaxed) > ended + 64
    });
    stop.store(true, Relaxed);
    batch.join().unwrap();
    (begun, ended, naps)
}

#[test]
fn instrumented_kernels_nap_while_busy_and_plain_ones_do_not() {
    let (_dir, page) = common::page();
    for kind in KernelKind::ALL {
        let (begun, ended, naps) = run_through_a_request(&page, kind, CBuild::Instrumented);
        assert_eq!(naps, 1, "{kind}: one nap per request");
        // It stops within the 16-unit publication chunk it was in.
        assert!(
            ended <= begun + 16,
            "{kind}: ran {} units while busy",
            ended - begun
        );

        let (begun, ended, naps) = run_through_a_request(&page, kind, CBuild::Plain);
        assert_eq!(naps, 0, "{kind}: the plain build never checks");
        assert!(ended > begun, "{kind}: the plain build kept running");
    }
    let line = page.batch(1).unwrap();
    assert_eq!(line.attached.load(Relaxed), 0);
    assert_eq!(line.napping.load(Relaxed), 0);
}
