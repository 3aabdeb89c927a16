//! **Step-aside and wake latency** per nap backend (the paper's Figures 7–8,
//! done with our runtime on our lanes).
//!
//! Two threads over a fresh signal page (borrow idle):
//!
//! - the **LC thread**, pinned to the request lane's CPU, drives an
//!   [`LcLane`] through `toggles` request begin/end pairs and measures, on
//!   its own page clock (TSC) while spinning;
//! - the **batch thread**, attached as a [`BatchThread`] with the backend
//!   under test (pinned to the batch lane's CPU by attach), loops: stamp,
//!   `check()`, publish `resumed += 1`, one Loop unit (an empty call).
//!
//! One toggle:
//!
//! 1. *idle*: the LC thread leaves the lane idle for a random 5–50 µs
//!    (the batch thread runs batch code);
//! 2. **step-aside** = from just before `request_begin()` to the moment the
//!    LC thread, spinning on the batch line, sees `napping` ≥ 1. The batch
//!    thread increments `napping` in its slow path just before it enters the
//!    nap, after the policy decided to nap — from then on it runs no batch
//!    code. This is the time after which the LC *knows* the lane is clear;
//!    it includes the cross-CPU transfer of the `state` line to the batch
//!    thread and of the batch line back (~0.1 µs each on these VMs);
//! 3. *busy*: the LC thread holds the request for a random 10–100 µs (long
//!    enough for a futex nap to be asleep in the kernel; a hybrid nap's
//!    50 µs spin bound expires in about half the toggles);
//! 4. **wake** = from just before `request_end()` (which includes the LC's
//!    `FUTEX_WAKE` syscall when a batch thread sleeps in the OS) to the
//!    moment the LC thread sees the batch thread's `resumed` counter move:
//!    the batch thread's check has returned and it runs batch code again.
//!    Also split by whether the batch thread was registered in `sleepers`
//!    (blocked in the OS) at `request_end()`.
//!
//! **Disturbed samples.** The host pauses a vCPU ~1,300 times a second for
//! ~10 µs. A step-aside sample is *disturbed* if the LC thread sees a gap
//! larger than `disturb_ns` between consecutive clock reads of its spin
//! loop, or the batch thread sees one in the batch-code part of its loop
//! (outside `check()`), during the sample; a wake sample if the LC thread
//! sees such a gap after `request_end()` returned. Pauses of the batch
//! vCPU *inside* a nap cannot be seen from outside the runtime, so
//! "undisturbed" figures may still contain some. Every sample is in the
//! "all" figures; none is dropped.

use crate::error::{MicroError, panic_text};
use crate::setup::{BATCH_LANE, BenchPage, Lanes, REQUEST_LANE};
use crate::stats::{Percentiles, Rng, new_histogram, record};
use elfen_cmd::Progress;
use elfen_cmd::interrupt::interrupted;
use elfen_kernels::{Kernel, KernelKind, NoCheck};
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapChoice, machine_features};
use elfen_shm::Clock;
use elfen_topo::PinGuard;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};

/// The backends measured, in report order.
pub const BACKENDS: [NapChoice; 5] = [
    NapChoice::Spin,
    NapChoice::Futex,
    NapChoice::Hybrid,
    NapChoice::Umwait,
    NapChoice::Mwaitx,
];

/// How the toggles run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToggleParams {
    /// Measured toggles per backend.
    pub toggles: u64,
    /// Toggles run first and not recorded.
    pub warmup: u64,
    /// Idle hold before each request, µs (uniform in `[lo, hi]`).
    pub idle_us: [u64; 2],
    /// Busy hold of each request, µs (uniform in `[lo, hi]`).
    pub busy_us: [u64; 2],
    /// A clock gap above this marks a sample disturbed, ns.
    pub disturb_ns: u64,
    /// How long to wait for a nap or a resume before giving up, ms.
    pub timeout_ms: u64,
}

impl ToggleParams {
    /// The full run: 20,000 toggles.
    pub fn full() -> ToggleParams {
        ToggleParams {
            toggles: 20_000,
            warmup: 200,
            idle_us: [5, 50],
            busy_us: [10, 100],
            disturb_ns: 5_000,
            timeout_ms: 2_000,
        }
    }

    /// `--quick`: 500 toggles.
    pub fn quick() -> ToggleParams {
        ToggleParams {
            toggles: 500,
            warmup: 20,
            ..ToggleParams::full()
        }
    }
}

/// A latency over all samples and over the undisturbed ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Every sample.
    pub all: Option<Percentiles>,
    /// The samples with no detected host pause.
    pub undisturbed: Option<Percentiles>,
    /// Samples marked disturbed.
    pub disturbed: u64,
    /// `disturbed / all.count`.
    pub disturbed_fraction: f64,
}

struct Hist {
    all: Histogram<u64>,
    undisturbed: Histogram<u64>,
    disturbed: u64,
}

impl Hist {
    fn new() -> Hist {
        Hist {
            all: new_histogram(),
            undisturbed: new_histogram(),
            disturbed: 0,
        }
    }
    fn add(&mut self, ns: u64, disturbed: bool) {
        record(&mut self.all, ns);
        if disturbed {
            self.disturbed += 1;
        } else {
            record(&mut self.undisturbed, ns);
        }
    }
    fn latency(&self) -> Latency {
        let n = self.all.len();
        Latency {
            all: Percentiles::of(&self.all),
            undisturbed: Percentiles::of(&self.undisturbed),
            disturbed: self.disturbed,
            disturbed_fraction: if n == 0 {
                0.0
            } else {
                self.disturbed as f64 / n as f64
            },
        }
    }
}

/// The result for one nap backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendResult {
    /// `spin`, `futex`, `hybrid`, `umwait` or `mwaitx`.
    pub backend: String,
    /// Whether it can run here.
    pub available: bool,
    /// Why it is unavailable (the runtime's detection), or why it was
    /// chosen.
    pub reason: String,
    /// The batch thread's `describe()` line.
    pub describe: Option<String>,
    /// Measured toggles.
    pub toggles: u64,
    /// Step-aside latency.
    pub step_aside: Option<Latency>,
    /// Wake latency, every toggle.
    pub wake: Option<Latency>,
    /// Wake latency of the toggles whose batch thread was blocked in the OS
    /// (registered in `sleepers`) at `request_end()`.
    pub wake_from_os: Option<Latency>,
    /// Wake latency of the other toggles (the thread was spinning).
    pub wake_from_spin: Option<Latency>,
    /// Fraction of toggles woken from the OS.
    pub os_wake_fraction: Option<f64>,
}

impl BackendResult {
    fn unavailable(choice: NapChoice, reason: String) -> BackendResult {
        BackendResult {
            backend: choice.name().to_string(),
            available: false,
            reason,
            describe: None,
            toggles: 0,
            step_aside: None,
            wake: None,
            wake_from_os: None,
            wake_from_spin: None,
            os_wake_fraction: None,
        }
    }
}

/// Lines shared by the two threads, each on its own cache line.
#[repr(align(64))]
#[derive(Default)]
struct Line<T>(T);

#[derive(Default)]
struct Shared {
    /// Batch: +1 after every check returns (batch code runs).
    resumed: Line<AtomicU64>,
    /// Batch: +1 per detected pause in its batch-code part.
    batch_gaps: Line<AtomicU64>,
    /// LC: the batch thread should leave.
    stop: Line<AtomicBool>,
}

/// Measures every backend in [`BACKENDS`] (unavailable ones are reported
/// with the reason).
pub fn measure_all(
    page: &BenchPage,
    lanes: &Lanes,
    params: &ToggleParams,
    progress: &Progress,
) -> Result<Vec<BackendResult>, MicroError> {
    let mut out = Vec::new();
    for choice in BACKENDS {
        match choice.resolve(machine_features()) {
            Err(e) => out.push(BackendResult::unavailable(choice, e.to_string())),
            Ok((_, why)) => out.push(measure(page, lanes, choice, why, params, progress)?),
        }
    }
    Ok(out)
}

/// Spins until `cond` holds. Returns the clock when it was seen and the
/// largest gap between consecutive clock reads since `start`.
#[inline(always)]
fn spin_until(
    clock: &Clock,
    start: u64,
    timeout_ticks: u64,
    mut cond: impl FnMut() -> bool,
    mut give_up: impl FnMut() -> bool,
) -> Option<(u64, u64)> {
    let mut prev = start;
    let mut max_gap = 0;
    let mut spins = 0u32;
    loop {
        spins = spins.wrapping_add(1);
        let ok = cond();
        let now = clock.now();
        max_gap = max_gap.max(now.wrapping_sub(prev));
        prev = now;
        if ok {
            return Some((now, max_gap));
        }
        if spins % 4096 == 0 && (now.wrapping_sub(start) > timeout_ticks || give_up()) {
            return None;
        }
        // No `pause` here: it takes ~140 cycles on recent Intel cores and
        // would coarsen the observation; the clock read paces the loop.
    }
}

fn hold(clock: &Clock, ticks: u64) {
    let t = clock.now();
    while clock.now().wrapping_sub(t) < ticks {
        std::hint::spin_loop();
    }
}

/// Measures one available backend.
pub fn measure(
    page: &BenchPage,
    lanes: &Lanes,
    choice: NapChoice,
    why: &str,
    params: &ToggleParams,
    progress: &Progress,
) -> Result<BackendResult, MicroError> {
    let clock = page.page().clock();
    let sh = Shared::default();
    let disturb_ticks = clock.ns_to_ticks(params.disturb_ns);
    let batch_page = page.page().clone();
    let (lc_result, batch_result) = std::thread::scope(|s| {
        let sh = &sh;
        let batch = s.spawn(move || -> Result<String, MicroError> {
            let mut bt =
                BatchThread::attach(batch_page, BATCH_LANE, BatchOptions::default().nap(choice))?;
            let describe = bt.describe();
            let mut k = Kernel::new(KernelKind::Loop);
            let mut seq = 0u64;
            let mut prev = clock.now();
            while !sh.stop.0.load(Relaxed) {
                let before = clock.now();
                if before.wrapping_sub(prev) > disturb_ticks {
                    sh.batch_gaps.0.fetch_add(1, Relaxed);
                }
                bt.check();
                prev = clock.now();
                seq += 1;
                sh.resumed.0.store(seq, Release);
                k.run_unit(&mut NoCheck);
            }
            Ok(describe)
        });
        let lc = lc_side(
            page,
            lanes,
            choice,
            params,
            sh,
            &clock,
            &|| batch.is_finished(),
            progress,
        );
        // Whatever happened, the request is over (LcLane's drop ended it)
        // and the batch thread is told to leave.
        sh.stop.0.store(true, Relaxed);
        let b = batch
            .join()
            .map_err(|p| MicroError::Panicked(panic_text(p)))
            .and_then(|r| r);
        (lc, b)
    });
    let describe = batch_result?;
    let h = lc_result?;
    let os = h.wake_os.all.len();
    let n = h.wake.all.len();
    Ok(BackendResult {
        backend: choice.name().to_string(),
        available: true,
        reason: why.to_string(),
        describe: Some(describe),
        toggles: n,
        step_aside: Some(h.step.latency()),
        wake: Some(h.wake.latency()),
        wake_from_os: Some(h.wake_os.latency()),
        wake_from_spin: Some(h.wake_spin.latency()),
        os_wake_fraction: Some(if n == 0 { 0.0 } else { os as f64 / n as f64 }),
    })
}

struct LcHists {
    step: Hist,
    wake: Hist,
    wake_os: Hist,
    wake_spin: Hist,
}

#[allow(clippy::too_many_arguments)]
fn lc_side(
    page: &BenchPage,
    lanes: &Lanes,
    choice: NapChoice,
    params: &ToggleParams,
    sh: &Shared,
    clock: &Clock,
    batch_gone: &dyn Fn() -> bool,
    progress: &Progress,
) -> Result<LcHists, MicroError> {
    let _pin = PinGuard::new(lanes.request_cpu)?;
    let mut lc = LcLane::attach(page.page().clone(), REQUEST_LANE)?;
    let line = page.page().batch(BATCH_LANE)?;
    let timeout = clock.ns_to_ticks(params.timeout_ms * 1_000_000);
    let timeout_err = |what: &str| MicroError::Timeout {
        what: format!("the {} batch thread to {what}", choice.name()),
        ms: params.timeout_ms,
    };
    // The batch thread attached and runs batch code.
    if spin_until(
        clock,
        clock.now(),
        clock.ns_to_ticks(10_000_000_000),
        || sh.resumed.0.load(Acquire) > 0,
        batch_gone,
    )
    .is_none()
    {
        return Err(timeout_err("start running batch code (did it attach?)"));
    }
    let disturb = clock.ns_to_ticks(params.disturb_ns);
    let us = |x: u64| clock.ns_to_ticks(x * 1000);
    let mut rng = Rng::new(0xE1F3 ^ u64::from(choice.id()));
    let mut h = LcHists {
        step: Hist::new(),
        wake: Hist::new(),
        wake_os: Hist::new(),
        wake_spin: Hist::new(),
    };
    let total = params.warmup + params.toggles;
    let every = (total / 10).max(1);
    for i in 0..total {
        if interrupted() {
            return Err(MicroError::Interrupted);
        }
        if i % every == 0 && i > 0 {
            progress.say(&format!(
                "toggles: {} {}/{}",
                choice.name(),
                i.saturating_sub(params.warmup),
                params.toggles
            ));
        }
        hold(clock, us(rng.range(params.idle_us[0], params.idle_us[1])));

        // Step aside.
        let g0 = sh.batch_gaps.0.load(Acquire);
        let t0 = clock.now();
        lc.request_begin(i);
        let (t1, gap) = spin_until(
            clock,
            t0,
            timeout,
            || line.napping.load(Acquire) >= 1,
            batch_gone,
        )
        .ok_or_else(|| timeout_err("nap after request_begin"))?;
        let step_disturbed = gap > disturb || sh.batch_gaps.0.load(Acquire) != g0;

        hold(clock, us(rng.range(params.busy_us[0], params.busy_us[1])));

        // Wake.
        let from_os = line.sleepers.load(Acquire) > 0;
        let r0 = sh.resumed.0.load(Acquire);
        let t2 = clock.now();
        lc.request_end();
        let t2_end = clock.now();
        let (t3, gap) = spin_until(
            clock,
            t2_end,
            timeout,
            || sh.resumed.0.load(Acquire) != r0,
            batch_gone,
        )
        .ok_or_else(|| timeout_err("resume after request_end"))?;
        let wake_disturbed = gap > disturb;

        if i >= params.warmup {
            let ns = |t: u64| clock.ticks_to_ns(t);
            h.step.add(ns(t1.wrapping_sub(t0)), step_disturbed);
            let w = ns(t3.wrapping_sub(t2));
            h.wake.add(w, wake_disturbed);
            if from_os {
                h.wake_os.add(w, wake_disturbed);
            } else {
                h.wake_spin.add(w, wake_disturbed);
            }
        }
    }
    Ok(h)
}
