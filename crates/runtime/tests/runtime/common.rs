//! Shared fixtures: a page in a temporary directory, CPU choice, spinning,
//! a watchdog, and the quiescence check every test ends with.

use elfen_shm::{LaneSpec, Page, PageSpec, role};
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Threaded tests pin threads to the same two CPUs: run them one at a time,
/// in this process and machine-wide (`elfen_cmd::LaneLock`).
pub fn serial() -> (MutexGuard<'static, ()>, elfen_cmd::LaneLock) {
    static SERIAL: Mutex<()> = Mutex::new(());
    let inner = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    (
        inner,
        elfen_cmd::LaneLock::acquire().expect("the lane lock"),
    )
}

/// A page with one request lane (lane 0) and its batch lane (lane 1).
/// Fields drop in order: the page (removing its files), then the directory.
pub struct Fixture {
    pub page: Arc<Page>,
    pub request_cpu: u32,
    _dir: tempfile::TempDir,
}

/// The request and batch CPUs for threaded tests: the first two CPUs this
/// thread may run on, or `None` (the caller skips) on a one-CPU machine.
pub fn two_cpus() -> Option<(u32, u32)> {
    let cpus = elfen_topo::current_affinity().unwrap();
    match cpus[..] {
        [a, b, ..] => Some((a, b)),
        _ => {
            elfen_cmd::skip::skip(
                elfen_cmd::skip::Need::Cpus(2),
                format!("this thread may use only CPUs {cpus:?}"),
            );
            None
        }
    }
}

impl Fixture {
    /// A page for `policy` (id) with `budget_ns`, nap backend `nap` (id).
    pub fn new(policy: u32, budget_ns: u64, nap: u32) -> Option<Fixture> {
        let (request_cpu, batch_cpu) = two_cpus()?;
        let mut spec = PageSpec::for_pairs(&[(request_cpu, vec![batch_cpu])], policy, budget_ns);
        for l in &mut spec.lanes {
            l.nap = nap;
        }
        Some(Fixture::with_spec(spec, request_cpu))
    }

    /// A page from `spec` (lanes as the caller wants them).
    pub fn with_spec(spec: PageSpec, request_cpu: u32) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let page = Arc::new(Page::create(dir.path().join("sig"), &spec).unwrap());
        Fixture {
            page,
            request_cpu,
            _dir: dir,
        }
    }

    /// Asserts no batch thread is attached, napping or sleeping on any lane.
    pub fn assert_quiescent(&self) {
        assert_quiescent(&self.page);
    }
}

/// Asserts no batch thread is attached, napping or sleeping on any lane of `page`.
pub fn assert_quiescent(page: &Page) {
    for lane in 0..page.lane_count() {
        let b = page.batch(lane).unwrap();
        let (a, n, s) = (
            b.attached.load(Relaxed),
            b.napping.load(Relaxed),
            b.sleepers.load(Relaxed),
        );
        assert_eq!(
            (a, n, s),
            (0, 0, 0),
            "lane {lane}: attached/napping/sleepers left behind"
        );
    }
}

/// A lane spec, for pages the tests lay out by hand.
pub fn lane(cpu: u32, role_: u32, partners: Vec<u32>, policy: u32) -> LaneSpec {
    LaneSpec {
        cpu,
        role: role_,
        partners,
        policy,
        budget_ns: 0,
        nap: elfen_shm::nap::SPIN,
        hybrid_spin_ns: 50_000,
        ref_ipc_milli: 0,
    }
}

/// A two-lane spec (request lane 0 on cpu 0, batch lane 1 on cpu 1) with
/// nothing validated against this machine (bad-input tests).
pub fn pair_spec(policy: u32) -> PageSpec {
    PageSpec {
        lanes: vec![
            lane(0, role::REQUEST, vec![1], policy),
            lane(1, role::BATCH, vec![0], policy),
        ],
        ..PageSpec::for_pairs(&[(0, vec![1])], policy, 0)
    }
}

/// Busy-waits until the page clock reaches `until`.
#[inline]
pub fn spin_until(clock: &elfen_shm::Clock, until: u64) {
    while clock.now() < until {
        std::hint::spin_loop();
    }
}

/// A few hundred nanoseconds of "batch code" the optimizer cannot remove.
#[inline(never)]
pub fn batch_code(x: &mut u64) {
    for _ in 0..64 {
        *x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// xorshift64*: the tests' random intervals (seeded, reproducible).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Runs `f` on its own thread and fails (instead of hanging) if it takes
/// longer than `limit`.
pub fn watchdog<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    // named after the test, so that a skip inside says which test it is
    let name = std::thread::current()
        .name()
        .unwrap_or("watchdog")
        .to_string();
    let h = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let r = f();
            let _ = tx.send(());
            r
        })
        .unwrap();
    match rx.recv_timeout(limit) {
        Ok(()) => h.join().unwrap(),
        // The body panicked: re-raise its panic.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("watchdog: the test did not finish within {limit:?} (a thread is stuck)")
        }
    }
}

/// Waits until `cond` holds (failing after 10 s).
pub fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The batch thread is inside a nap that began after `naps_before` naps.
pub fn napping_since(page: &Page, naps_before: u64) -> bool {
    let l = page.batch(1).unwrap();
    l.napping.load(Acquire) == 1 && l.naps.load(Acquire) > naps_before
}
