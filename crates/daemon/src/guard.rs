//! **Guards**: user-space lane reservation for batch programs nobody can
//! rebuild.
//!
//! A guard is a thread of the daemon attached to one batch lane as an
//! ordinary `BatchThread` (pinned to the lane's CPU) whose nap backend is
//! **spin**, running at SCHED_FIFO. The batch processes of the lane run
//! SCHED_IDLE (or in a `cpu.idle` group) and are confined to the batch
//! lanes. So:
//!
//! - while the policy says *nap* (borrow idle: the request lane is busy;
//!   a budget policy: the budget is spent), the guard's nap spins — it
//!   occupies the lane and the batch processes there are preempted;
//! - while the policy says *run*, the guard sleeps on its [`Bell`] and
//!   the batch processes have the lane.
//!
//! The decision is the runtime's slow path with the policy of the lane's
//! controller line — the same code that makes an instrumented batch thread
//! nap — including controller rewrites. The kill switch is the guard's own
//! test: while `KILL` is set it holds the lane (batch paused) until the
//! switch clears, noticed at its next wake-up (a busy edge, or `max_sleep`).
//!
//! **Bounded.** Every spin at SCHED_FIFO — the occupation, the hold, the
//! kill switch's — obeys the lane's [`LaneSpin`] (`crate::rt`): at most
//! `spin_max_us` per busy period (named by its busy edge, shared with the
//! writer holding the same lane) and `spin_share_pct` of the CPU over time.
//! The runtime's nap ends at that deadline ([`BatchThread::set_spin_deadline`]);
//! if the policy still says nap, the guard occupies on at SCHED_OTHER until
//! the lane's next edge (normal tasks — kernel workers, RCU, the LC's own
//! normal threads — then share the CPU with it; batch work, idle by its
//! set-up, still waits) and returns to SCHED_FIFO for its next wake-up. The
//! time past the bound is counted (`bounded_ns`, `cuts`).
//!
//! The loop: sleep on the bell until the writer rings it (a busy edge of
//! the partner request lane) → if the lane is busy, `check()` (which spins
//! until the policy says run) → **hold**: with borrow idle and a hold set,
//! stay on the lane, watching the LC line, until the hold has passed since
//! the lane's last idle edge ([`crate::writer::LaneEdges`]); a busy edge
//! meanwhile is occupied again at once, without a wake-up → sleep again.
//! The hold's time is counted apart from the occupation (lane time the
//! batch did not get). `crate::protection::fit::hold_ns` says how long a
//! gap is worth holding. While a budget
//! policy co-runs, every check is a slow path and the budget runs out with
//! time alone, so the guard sleeps only until the budget should expire:
//! the LC line's `busy_since` + the budget (then `recheck`), and checks.

use crate::bell::Bell;
use crate::error::DaemonError;
use crate::rt::LaneSpin;
use crate::worker::Worker;
use crate::writer::LaneEdges;
use elfen_cmd::proc::{SchedClass, gettid, set_sched};
use elfen_runtime::{BatchOptions, BatchStats, BatchThread, NapChoice};
use elfen_shm::{Page, state};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

/// How a guard runs.
#[derive(Debug, Clone)]
pub struct GuardOptions {
    /// SCHED_FIFO priority (1..=99).
    pub priority: u8,
    /// While co-running on a budget, the sleep after the expected expiry
    /// before checking again (`None`: budget / 8, at least 20 µs).
    pub recheck: Option<Duration>,
    /// The longest sleep (how soon a kill switch or a stop is noticed).
    pub max_sleep: Duration,
    /// The hold, ns (shared: the daemon may change it while the guard
    /// runs; 0 or `None`: no hold), and the request lanes' idle edges it
    /// is counted from.
    pub hold: Option<(Arc<AtomicU64>, Arc<LaneEdges>)>,
    /// The bound on its real-time spinning, and its account (shared with
    /// the writer when it holds the same lane).
    pub spin: Arc<LaneSpin>,
}

/// Latency percentiles, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub samples: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

impl LatencySummary {
    /// The summary of a histogram.
    pub fn of(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            samples: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }
}

impl std::fmt::Display for LatencySummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.samples == 0 {
            return f.write_str("no samples");
        }
        write!(
            f,
            "p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs ({} samples)",
            self.p50_ns as f64 / 1e3,
            self.p99_ns as f64 / 1e3,
            self.max_ns as f64 / 1e3,
            self.samples
        )
    }
}

/// `CLOCK_MONOTONIC` now, ns.
pub(crate) fn monotonic_now_ns() -> u64 {
    elfen_shm::clock::monotonic_ns()
}

/// The calling thread's CPU time so far, ns (`CLOCK_THREAD_CPUTIME_ID`):
/// what spinning costs, which wall time overstates when the CPU is taken
/// away meanwhile (interrupts, a host's pauses, steal).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A histogram of 1 ns .. 10 s with 3 significant digits.
pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds")
}

/// What a stopped guard reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct GuardReport {
    /// The batch lane.
    pub lane: u32,
    /// Its CPU.
    pub cpu: u32,
    /// Times the guard occupied the lane (naps of its batch thread).
    pub occupations: u64,
    /// Time spent occupying, ns.
    pub occupied_ns: u64,
    /// Time spent holding the lane through idle gaps, ns.
    pub held_ns: u64,
    /// Busy edges occupied while holding (no wake-up needed).
    pub caught: u64,
    /// Spins the real-time bound ended while the policy still said nap
    /// (the guard then occupied at SCHED_OTHER until the next edge).
    pub cuts: u64,
    /// CPU time occupied at SCHED_OTHER past the bound, ns.
    pub bounded_ns: u64,
    /// Wake-ups of the guard.
    pub wakes: u64,
    /// From the context switch that made the request lane busy (the
    /// signal source's event time) to the guard running on the batch lane
    /// about to occupy it: the batch threads are off the lane by then.
    pub step_aside: LatencySummary,
    /// The batch thread's own accounting.
    #[serde(skip)]
    pub stats: BatchStats,
}

/// A running guard.
#[derive(Debug)]
pub struct GuardHandle {
    worker: Worker<GuardReport>,
    tid: u32,
    lane: u32,
    describe: String,
    counters: Counters,
}

/// The counters a guard updates while it runs.
#[derive(Debug, Clone, Default)]
struct Counters {
    occupations: Arc<AtomicU64>,
    occupied_ns: Arc<AtomicU64>,
    held_ns: Arc<AtomicU64>,
    /// CPU time spent occupying (the part of the guard's CPU that is the
    /// protection), ns.
    occupied_cpu_ns: Arc<AtomicU64>,
    /// CPU time spent holding through gaps, ns.
    held_cpu_ns: Arc<AtomicU64>,
    /// Of the occupation, CPU time at SCHED_OTHER past the bound, ns.
    bounded_cpu_ns: Arc<AtomicU64>,
    /// Spins the bound ended.
    cuts: Arc<AtomicU64>,
}

/// A guard thread (see the module docs).
#[derive(Debug)]
pub struct Guard;

impl Guard {
    /// Starts the guard of batch lane `lane` of `page`, woken by `bell`
    /// (which the writer rings for the partner request lane). Returns once
    /// it is attached, pinned and at SCHED_FIFO, or why it could not be.
    pub fn spawn(
        page: Arc<Page>,
        lane: u32,
        bell: Arc<Bell>,
        opts: GuardOptions,
    ) -> Result<GuardHandle, DaemonError> {
        let counters = Counters::default();
        let c2 = counters.clone();
        let b2 = Arc::clone(&bell);
        let o2 = opts.clone();
        let (worker, (tid, describe)) = Worker::start(
            &format!("elfen-guard-{lane}"),
            Some(bell),
            move || {
                let bt = attach(page, lane, &o2)?;
                let info = (gettid(), bt.describe());
                Ok((bt, info))
            },
            move |mut bt, stop| run(&mut bt, &b2, &opts, stop, &c2),
            GuardReport::default,
        )?;
        Ok(GuardHandle {
            worker,
            tid,
            lane,
            describe,
            counters,
        })
    }
}

fn attach(page: Arc<Page>, lane: u32, opts: &GuardOptions) -> Result<BatchThread, DaemonError> {
    let bt = BatchThread::attach(page, lane, BatchOptions::default().nap(NapChoice::Spin))?;
    set_sched(0, SchedClass::Fifo(opts.priority)).map_err(|e| {
        DaemonError::os(
            format!(
                "setting the guard of lane {lane} to SCHED_FIFO {}",
                opts.priority
            ),
            e,
        )
    })?;
    Ok(bt)
}

/// How long to sleep while co-running on a budget: until the budget of
/// the busy period that began at the LC line's `busy_since` runs out, or
/// `recheck` past it.
fn budget_sleep(bt: &BatchThread, opts: &GuardOptions) -> Duration {
    let budget_ns = bt.policy().budget_ns.max(1);
    let recheck = opts
        .recheck
        .unwrap_or(Duration::from_nanos(budget_ns / 8))
        .max(Duration::from_micros(20));
    let page = bt.page();
    let clock = page.clock();
    let Ok(lc) = page.lc(bt.request_lane()) else {
        return recheck;
    };
    let since = lc.busy_since.load(Relaxed);
    let now = clock.now();
    let deadline = since.saturating_add(clock.ns_to_ticks(budget_ns));
    let left = Duration::from_nanos(clock.ticks_to_ns(deadline.saturating_sub(now)));
    if left.is_zero() { recheck } else { left }.min(opts.max_sleep)
}

/// Holds the lane after an occupation (borrow idle, LC idle now): spins
/// until the hold has passed since the request lane's last idle edge, the
/// lane is busy again (returns true: occupy again at once), or the spin
/// bound of busy period `period` ends it.
fn hold(
    bt: &BatchThread,
    word: &std::sync::atomic::AtomicU64,
    opts: &GuardOptions,
    stop: &AtomicBool,
    c: &Counters,
    period: u64,
) -> bool {
    let Some((hold, edges)) = &opts.hold else {
        return false;
    };
    let h = hold.load(Relaxed);
    if h == 0 || bt.policy().kind != elfen_policy::PolicyKind::BorrowIdle {
        return false;
    }
    let t0 = elfen_shm::clock::monotonic_ns();
    let mut now = t0;
    let mut busy = state::busy(word.load(Acquire));
    let until = edges.idle_since(bt.request_lane()).saturating_add(h);
    if busy || now >= until {
        return busy;
    }
    let until = until.min(t0.saturating_add(opts.spin.allowance(period, t0)));
    let cpu0 = thread_cpu_ns();
    while !busy && now < until && !stop.load(Relaxed) {
        std::hint::spin_loop();
        busy = state::busy(word.load(Acquire));
        now = elfen_shm::clock::monotonic_ns();
    }
    let cpu = thread_cpu_ns().saturating_sub(cpu0);
    opts.spin.charge(cpu, now);
    c.held_ns.fetch_add(now - t0, Relaxed);
    c.held_cpu_ns.fetch_add(cpu, Relaxed);
    busy
}

/// Puts the calling guard in `class` (the bound's step down to SCHED_OTHER
/// and back); false if the kernel refused (the caller then does not spin
/// at the class it could not leave).
fn set_class(class: SchedClass) -> bool {
    set_sched(0, class).is_ok()
}

/// Spins while `go` says so, at SCHED_FIFO up to the bound of busy period
/// `period`, then at SCHED_OTHER; the occupation's CPU time, with the part
/// past the bound, counted in `c`. For the kill switch (its period: when
/// the guard saw it set).
fn spin_bounded(opts: &GuardOptions, c: &Counters, period: u64, go: impl Fn() -> bool) {
    let t0 = elfen_shm::clock::monotonic_ns();
    let until = t0.saturating_add(opts.spin.allowance(period, t0));
    let cpu0 = thread_cpu_ns();
    let mut i = 0u32;
    while go() {
        std::hint::spin_loop();
        i = i.wrapping_add(1);
        if i % 1024 == 0 && elfen_shm::clock::monotonic_ns() >= until {
            break;
        }
    }
    let cpu1 = thread_cpu_ns();
    opts.spin
        .charge(cpu1.saturating_sub(cpu0), elfen_shm::clock::monotonic_ns());
    if go() && set_class(SchedClass::Other) {
        opts.spin.cut();
        c.cuts.fetch_add(1, Relaxed);
        while go() {
            std::hint::spin_loop();
        }
        let past = thread_cpu_ns().saturating_sub(cpu1);
        c.bounded_cpu_ns.fetch_add(past, Relaxed);
        opts.spin.bounded_ns.fetch_add(past, Relaxed);
        set_class(SchedClass::Fifo(opts.priority));
    }
    c.occupied_cpu_ns
        .fetch_add(thread_cpu_ns().saturating_sub(cpu0), Relaxed);
}

/// One check of the lane in busy period `period` (its busy edge): the
/// runtime's slow path, its nap's spin ending at the bound; if the policy
/// still says nap there, the nap goes on at SCHED_OTHER until the lane's
/// state changes. Returns whether it napped.
fn occupy(bt: &mut BatchThread, opts: &GuardOptions, c: &Counters, period: u64) -> bool {
    let naps = bt.stats().naps;
    let cpu0 = thread_cpu_ns();
    let now = elfen_shm::clock::monotonic_ns();
    let allowance = opts.spin.allowance(period, now);
    let clock = bt.page().clock();
    bt.set_spin_deadline(Some(
        clock.now().saturating_add(clock.ns_to_ticks(allowance)),
    ));
    bt.check();
    let cpu1 = thread_cpu_ns();
    opts.spin
        .charge(cpu1.saturating_sub(cpu0), elfen_shm::clock::monotonic_ns());
    if bt.cut_short() && set_class(SchedClass::Other) {
        opts.spin.cut();
        c.cuts.fetch_add(1, Relaxed);
        bt.set_spin_deadline(None);
        bt.slow_path();
        let past = thread_cpu_ns().saturating_sub(cpu1);
        c.bounded_cpu_ns.fetch_add(past, Relaxed);
        opts.spin.bounded_ns.fetch_add(past, Relaxed);
        set_class(SchedClass::Fifo(opts.priority));
    }
    let napped = bt.stats().naps > naps;
    if napped {
        c.occupied_cpu_ns
            .fetch_add(thread_cpu_ns().saturating_sub(cpu0), Relaxed);
    }
    napped
}

fn run(
    bt: &mut BatchThread,
    bell: &Bell,
    opts: &GuardOptions,
    stop: &AtomicBool,
    c: &Counters,
) -> GuardReport {
    let mut hist = latency_histogram();
    let mut wakes = 0u64;
    let mut caught = 0u64;
    let watch = bt.watch_word();
    let page = Arc::clone(bt.page());
    // SAFETY: the word lives in bt's page mapping, alive as long as bt.
    let word = unsafe { &*watch };
    let mut sleep = opts.max_sleep;
    let mut killed_ns = 0u64;
    // a busy edge caught while holding: occupy without sleeping first
    let mut again = false;
    loop {
        if again {
            caught += 1;
        } else {
            bell.wait(sleep);
            wakes += 1;
        }
        again = false;
        if stop.load(Relaxed) {
            break;
        }
        if page.killed() {
            // The kill switch: batch paused. The check's fast path never
            // reads the control word, so the guard holds the lane itself
            // until the switch clears (or the daemon stops), within the
            // bound at SCHED_FIFO.
            let t0 = elfen_shm::clock::monotonic_ns();
            c.occupations.fetch_add(1, Relaxed);
            spin_bounded(opts, c, t0, || page.killed() && !stop.load(Relaxed));
            killed_ns += elfen_shm::clock::monotonic_ns() - t0;
            c.occupied_ns.store(bt.stats().nap_ns + killed_ns, Relaxed);
            continue;
        }
        let s = word.load(Acquire);
        let co_running = bt.expected() == state::NEVER;
        sleep = opts.max_sleep;
        if !(state::busy(s) || co_running) {
            continue;
        }
        let woke_ns = elfen_shm::clock::monotonic_ns();
        // the busy period, named by its busy edge (the writer's, as it
        // names it for its own hold of this lane)
        let period = bell.busy_event_ns();
        if occupy(bt, opts, c, period) {
            let after = bt.stats();
            c.occupations.fetch_add(1, Relaxed);
            c.occupied_ns.store(after.nap_ns + killed_ns, Relaxed);
            let edge = bell.busy_event_ns();
            // a step-aside: woken by the busy edge, not by a budget's end
            if state::busy(s) && !co_running && edge > 0 && woke_ns >= edge {
                let _ = hist.record((woke_ns - edge).max(1));
            }
            again = hold(bt, word, opts, stop, c, period);
        }
        if state::busy(word.load(Acquire)) && bt.expected() == state::NEVER {
            sleep = budget_sleep(bt, opts);
        }
    }
    let stats = bt.stats();
    GuardReport {
        lane: bt.lane(),
        cpu: bt.cpu(),
        occupations: stats.naps,
        occupied_ns: stats.nap_ns,
        held_ns: c.held_ns.load(Relaxed),
        caught,
        cuts: c.cuts.load(Relaxed),
        bounded_ns: c.bounded_cpu_ns.load(Relaxed),
        wakes,
        step_aside: LatencySummary::of(&hist),
        stats,
    }
}

impl GuardHandle {
    /// The guard thread's id.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// The batch thread's description (lanes, policy, nap).
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Its batch lane.
    pub fn lane(&self) -> u32 {
        self.lane
    }

    /// Occupations so far.
    pub fn occupations(&self) -> u64 {
        self.counters.occupations.load(Relaxed)
    }

    /// Time spent occupying the lane so far, ns (wall time, updated after
    /// each occupation ends).
    pub fn occupied_ns(&self) -> u64 {
        self.counters.occupied_ns.load(Relaxed)
    }

    /// Time spent holding the lane through idle gaps so far, ns (wall).
    pub fn held_ns(&self) -> u64 {
        self.counters.held_ns.load(Relaxed)
    }

    /// CPU time spent occupying and holding so far, ns: the part of the
    /// guard's CPU that is the protection and the hold, not its own work.
    pub fn spin_cpu_ns(&self) -> (u64, u64) {
        (
            self.counters.occupied_cpu_ns.load(Relaxed),
            self.counters.held_cpu_ns.load(Relaxed),
        )
    }

    /// CPU time occupied at SCHED_OTHER past the real-time bound so far,
    /// and the spins the bound ended.
    pub fn bounded(&self) -> (u64, u64) {
        (
            self.counters.bounded_cpu_ns.load(Relaxed),
            self.counters.cuts.load(Relaxed),
        )
    }

    /// Whether the thread still runs.
    pub fn is_running(&self) -> bool {
        self.worker.is_running()
    }

    /// Stops the guard and returns its report. A guard occupying the lane
    /// stops when the request lane's LC line goes idle: stop the writer
    /// first (its LC lines end their requests when it stops).
    pub fn stop(self) -> GuardReport {
        self.worker.stop().unwrap_or_default()
    }
}
