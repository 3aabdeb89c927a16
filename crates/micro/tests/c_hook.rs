//! The C kernels (`c/kernels.c`): every build computes what the Rust kernels
//! compute, over the same state; the checked builds (`-finstrument-functions`,
//! `-pg -mfentry`) call libelfen's check hook at every unit: on a thread
//! attached through libelfen, their checks nap while the request lane is busy
//! (the batch line counts the naps), and the plain build never does.

use elfen_kernels::{
    C_STATE_BYTES, FLUSH_BYTES, KernelConfig, KernelKind, MATRIX_N, Matrix5, STREAM_CHUNK_BYTES,
    StreamMode, matrix_multiply,
};
use elfen_micro::ckernel::{CBuild, CKernel, c_state_size};
use elfen_runtime::{BatchOptions, LcLane, NapChoice};
use elfen_shm::{Page, PageSpec};
use std::sync::Arc;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::time::{Duration, Instant};

/// Every build of the C kernels that exists here (says which do not).
fn builds() -> Vec<CBuild> {
    let all = [CBuild::Plain, CBuild::Instrumented, CBuild::Fentry];
    for b in all.iter().filter(|b| !b.available()) {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Hardware(elfen_cmd::skip::Feature::X86_64),
            format!("the {} build", b.name()),
        );
    }
    all.into_iter().filter(|b| b.available()).collect()
}

/// Waits (yielding) until `cond` holds; fails the test after 10 s.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// A borrow-idle page with request lane 0 (CPU 0) and batch lane 1 (CPU 1)
/// in a temporary directory (returned too: the page lives as long as it).
fn page() -> (tempfile::TempDir, Arc<Page>) {
    let dir = tempfile::tempdir().unwrap();
    let borrow_idle = elfen_policy::PolicyKind::BorrowIdle.id();
    let spec = PageSpec::for_pairs(&[(0, vec![1])], borrow_idle, 0);
    let page = Arc::new(Page::create(dir.path().join("sig"), &spec).unwrap());
    (dir, page)
}

fn small_stream() -> KernelConfig {
    KernelConfig {
        stream_bytes: 1 << 20,
        ..KernelConfig::default()
    }
}

#[test]
fn the_c_state_matches_the_kernels_crate() {
    assert_eq!(c_state_size(), C_STATE_BYTES);
}

#[test]
fn both_builds_compute_what_the_rust_kernels_compute() {
    let mut a: Matrix5 = [[0.0; MATRIX_N]; MATRIX_N];
    let mut b: Matrix5 = [[0.0; MATRIX_N]; MATRIX_N];
    for i in 0..MATRIX_N {
        for j in 0..MATRIX_N {
            a[i][j] = (i * MATRIX_N + j) as f64;
            b[i][j] = if i == j { 2.0 } else { 0.0 } + j as f64;
        }
    }
    for build in builds() {
        let mut k = CKernel::new(KernelKind::Loop, build);
        k.run_units(1000);
        assert_eq!(k.units(), 1000);

        let mut k = CKernel::new(KernelKind::Matrix, build);
        k.set_matrix_inputs(&a, &b);
        k.run_units(3);
        assert_eq!(k.matrix_product(), matrix_multiply(&a, &b), "{build:?}");

        let mut k = CKernel::new(KernelKind::Flush, build);
        assert_eq!(k.flush_buffer().len(), FLUSH_BYTES);
        k.flush_buffer_mut().fill(0xCD);
        k.run_units(1);
        assert!(k.flush_buffer().iter().all(|&x| x == 0), "{build:?}");

        for mode in StreamMode::ALL {
            let cfg = KernelConfig {
                stream_mode: mode,
                ..small_stream()
            };
            let per_pass = (cfg.stream_bytes / STREAM_CHUNK_BYTES) as u64;
            let mut k = CKernel::with_config(KernelKind::Stream, build, cfg).unwrap();
            k.run_units(2 * per_pass);
            assert_eq!(k.stream_passes(), 2);
            assert!(
                k.stream_buffer().iter().all(|&x| x == 2),
                "{build:?} {mode}: after 2 passes every byte is 2"
            );
        }
    }
    let bad = KernelConfig {
        stream_bytes: 5000,
        ..KernelConfig::default()
    };
    let e = CKernel::with_config(KernelKind::Stream, CBuild::Plain, bad).unwrap_err();
    assert!(e.to_string().contains("multiple of 4096"), "{e}");
}

#[test]
fn run_until_publishes_progress_and_stops() {
    for kind in KernelKind::ALL {
        for build in builds() {
            let stop = Arc::new(AtomicBool::new(false));
            let units = Arc::new(AtomicU64::new(0));
            let (s2, u2) = (stop.clone(), units.clone());
            let h = std::thread::spawn(move || {
                let mut k = CKernel::with_config(kind, build, small_stream()).unwrap();
                k.run_units(10);
                let n = k.run_until(&s2, &u2, 64);
                (n, k.units())
            });
            wait_for("progress", || units.load(Relaxed) >= 256);
            stop.store(true, Relaxed);
            let (n, total) = h.join().unwrap();
            assert!(n >= 246 && n % 64 == 0, "{kind} {build:?}: {n}");
            assert_eq!(total, n + 10);
            assert_eq!(units.load(Relaxed), total, "publishes the total");
        }
    }
}

/// What a batch thread did through one request.
struct ThroughRequest {
    /// Units published when the request began.
    begun: u64,
    /// Units published when it was seen napping (instrumented builds), or
    /// `begun` (plain).
    at_nap: u64,
    /// Units published at the request's end, 20 ms after `at_nap` (plain:
    /// 20 ms after it was seen running on through the request).
    ended: u64,
    /// Naps during the request.
    naps: u64,
}

/// Runs `kind` in `build` on a thread attached to lane 1 through one
/// request of 20 ms.
fn run_through_a_request(page: &Arc<Page>, kind: KernelKind, build: CBuild) -> ThroughRequest {
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
    if build != CBuild::Plain {
        wait_for("the instrumented kernel to nap", || {
            line.napping.load(Acquire) == 1
        });
    }
    let at_nap = units.load(Relaxed);
    if build == CBuild::Plain {
        // The plain build never looks at the page: it runs on through the
        // request (waited for, not slept for: on a loaded machine the
        // batch thread may get no CPU in a fixed 20 ms).
        wait_for("the plain kernel to run on during the request", || {
            units.load(Relaxed) > begun + 64
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
    ThroughRequest {
        begun,
        at_nap,
        ended,
        naps,
    }
}

#[test]
fn instrumented_kernels_nap_while_busy_and_plain_ones_do_not() {
    let (_dir, page) = page();
    let checked: Vec<CBuild> = builds()
        .into_iter()
        .filter(|&b| b != CBuild::Plain)
        .collect();
    for kind in KernelKind::ALL {
        for &build in &checked {
            let r = run_through_a_request(&page, kind, build);
            assert_eq!(r.naps, 1, "{kind} {build:?}: one nap per request");
            // Napping, it makes no progress until the request ends (the
            // chunk it was in is published after the nap).
            assert_eq!(
                r.ended, r.at_nap,
                "{kind} {build:?}: progressed while napping"
            );
            // It stepped aside within the 16-unit publication chunk it was
            // in when it saw the busy state, which reaches the other CPU
            // within a unit of the other kernels (~90 ns and up) but
            // hundreds of Loop's ~1.5 ns units (a store's way between
            // CPUs, longer in a VM).
            let slack = if kind == KernelKind::Loop { 1024 } else { 16 };
            assert!(
                r.at_nap <= r.begun + 16 + slack,
                "{kind} {build:?}: ran {} units after the request began",
                r.at_nap - r.begun
            );
        }

        let r = run_through_a_request(&page, kind, CBuild::Plain);
        assert_eq!(r.naps, 0, "{kind}: the plain build never checks");
        assert!(r.ended > r.begun, "{kind}: the plain build kept running");
    }
    let line = page.batch(1).unwrap();
    assert_eq!(line.attached.load(Relaxed), 0);
    assert_eq!(line.napping.load(Relaxed), 0);
}
