//! **Freeze mode**: a batch group is frozen (v2 `cgroup.freeze` / v1
//! freezer) while the policy says nap and thawed while it says run.
//!
//! A freezer thread keeps one `elfen_policy::Policy` per request lane the
//! group borrows from — the pure policy code the runtime's slow path runs —
//! and steps it on an observation of that lane's LC line (busy, queue
//! length, begin sequence, page clock) whenever the writer rings its
//! [`Bell`]. The group is frozen while any lane's policy says nap, or the
//! page's kill switch is set. While a budget policy co-runs the thread
//! sleeps exactly until the budget runs out (the policy state's start +
//! the budget).
//!
//! Coarse: a freeze takes tens (v2) to hundreds (v1) of microseconds of
//! kernel work and is asynchronous; each freeze and thaw is timed and
//! reported. Every freeze goes through the executor, so a group the daemon
//! did not create has its original state recorded and a restart after a
//! SIGKILL thaws it.
//!
//! A freeze or thaw that fails (after [`crate::health::retry`]'s retries
//! of a transient error) is counted ([`crate::health`]: the daemon's
//! metrics, `elfen status`, its log) and not taken for done: the group is
//! still thawed (or frozen) as far as the thread knows, and the next
//! decision writes again.
//!
//! **The group's owner** may freeze and thaw it too (`systemctl freeze` /
//! `thaw` of its unit, `docker pause` / `unpause`; `podman pause` freezes a
//! group of its own below the container's scope, which never meets this).
//! A group thawed under the thread while it holds it frozen for the LC
//! (read back at each wake-up while the policy says nap, at least every
//! `max_sleep`, or found thawed by the thread's own thaw) is counted and
//! said, and frozen again while the policy says nap. A group a freeze finds
//! frozen already (the executor writes nothing) is the owner's: the thread
//! leaves its freezer alone, the value restored at the stop becomes frozen
//! ([`Executor::owner_set`]), and it takes the group back when the owner
//! thaws it. A freeze the owner makes while the thread holds the group
//! frozen cannot be seen (the file reads frozen either way) and ends at the
//! next thaw.

use crate::bell::Bell;
use crate::error::DaemonError;
use crate::guard::{LatencySummary, latency_histogram};
use crate::health::{GroupReporter, retry};
use crate::worker::Worker;
use elfen_cgroup::{Executor, FreezerState, Group, Knob, KnobKind};
use elfen_cmd::proc::{SchedClass, set_sched};
use elfen_ops::health::DaemonKnob;
use elfen_policy::{Decision, Observation, Policy, PolicyConfig};
use elfen_shm::{Page, state};
use serde::Serialize;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a freezer runs.
#[derive(Debug, Clone, PartialEq)]
pub struct FreezeOptions {
    /// The policy (as on the page's lanes).
    pub policy: PolicyConfig,
    /// A freeze not done after this long is counted late (the request stays).
    pub timeout: Duration,
    /// The longest sleep (how soon a kill switch or a stop is noticed).
    pub max_sleep: Duration,
    /// SCHED_FIFO priority of the thread (0 = SCHED_OTHER).
    pub priority: u8,
    /// CPUs the thread may run on (`None`: unchanged).
    pub cpus: Option<Vec<u32>>,
    /// The bound on its real-time work (`crate::rt::DutyBound`).
    pub bound: crate::rt::SpinBound,
}

/// What a stopped freezer reports.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct FreezeReport {
    /// The group.
    pub group: String,
    /// Freezes requested.
    pub freezes: u64,
    /// Thaws.
    pub thaws: u64,
    /// Freezes that took longer than the timeout.
    pub late: u64,
    /// Freeze and thaw writes that failed (after retries of transient
    /// errors).
    pub failed_writes: u64,
    /// Write of the request → the group reads frozen.
    pub freeze: LatencySummary,
    /// The thaw write.
    pub thaw: LatencySummary,
    /// From the switch that made a request lane busy to the group frozen.
    pub step_aside: LatencySummary,
    /// 100 ms windows in which its work reached its real-time bound's
    /// share and it ran the rest of the window at SCHED_OTHER.
    pub rt_demotions: u64,
    /// Times the group was thawed under the thread while it held it
    /// frozen (frozen again each time).
    pub owner_thaws: u64,
    /// Times a freeze found the group frozen by its owner (left alone
    /// until the owner thawed it).
    pub owner_holds: u64,
    /// Errors met (the thread keeps going; the first few are kept).
    pub errors: Vec<String>,
}

/// A running freezer.
#[derive(Debug)]
pub struct FreezerHandle {
    worker: Worker<FreezeReport>,
    tid: u32,
    freezes: Arc<AtomicU64>,
}

/// A freezer thread (see the module docs).
#[derive(Debug)]
pub struct Freezer;

impl Freezer {
    /// Starts the freezer of `group`, deciding from request lanes `lanes`
    /// of `page`, woken by `bell` (rung for every one of those lanes).
    pub fn spawn(
        page: Arc<Page>,
        lanes: Vec<u32>,
        group: Group,
        executor: Arc<Mutex<Executor>>,
        bell: Arc<Bell>,
        opts: FreezeOptions,
    ) -> Result<FreezerHandle, DaemonError> {
        Freezer::spawn_reporting(page, lanes, group, executor, bell, opts, None)
    }

    /// [`Freezer::spawn`], counting failed writes in `reporter` (the
    /// daemon's [`crate::health::Health`]); without one the first few are
    /// printed.
    pub fn spawn_reporting(
        page: Arc<Page>,
        lanes: Vec<u32>,
        group: Group,
        executor: Arc<Mutex<Executor>>,
        bell: Arc<Bell>,
        opts: FreezeOptions,
        reporter: Option<GroupReporter>,
    ) -> Result<FreezerHandle, DaemonError> {
        for &l in &lanes {
            page.lc(l)?;
        }
        let b2 = Arc::clone(&bell);
        let freezes = Arc::new(AtomicU64::new(0));
        let f2 = Arc::clone(&freezes);
        let (worker, tid) = Worker::start(
            "elfen-freezer",
            Some(bell),
            move || {
                if let Some(c) = &opts.cpus {
                    elfen_topo::set_current_affinity(c)
                        .map_err(|e| DaemonError::thread("freezer", e.to_string()))?;
                }
                if opts.priority > 0 {
                    set_sched(0, SchedClass::Fifo(opts.priority))
                        .map_err(|e| DaemonError::os("setting the freezer to SCHED_FIFO", e))?;
                }
                let p = Policy::new(opts.policy)
                    .map_err(|e| DaemonError::thread("freezer", e.to_string()))?;
                let mut st = State::new(page, lanes, group, executor, p, opts, reporter);
                st.freezes = f2;
                Ok((st, elfen_cmd::proc::gettid()))
            },
            move |mut f, stop| f.run(&b2, stop),
            FreezeReport::default,
        )?;
        Ok(FreezerHandle {
            worker,
            tid,
            freezes,
        })
    }
}

impl FreezerHandle {
    /// The freezer thread's id.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// Freezes requested so far.
    pub fn freezes(&self) -> u64 {
        self.freezes.load(Relaxed)
    }

    /// Stops the freezer (thawing the group) and returns its report.
    pub fn stop(self) -> FreezeReport {
        self.worker.stop().unwrap_or_default()
    }

    /// Whether the thread still runs.
    pub fn is_running(&self) -> bool {
        self.worker.is_running()
    }
}

/// The shortest sleep between decisions: a budget's end, or a freeze's
/// poll, never makes the thread spin.
const MIN_SLEEP: Duration = Duration::from_micros(20);

/// The freezer thread's state.
struct State {
    page: Arc<Page>,
    lanes: Vec<u32>,
    policies: Vec<Policy>,
    group: Group,
    executor: Arc<Mutex<Executor>>,
    opts: FreezeOptions,
    reporter: Option<GroupReporter>,
    /// The thread holds the group frozen (its own freeze).
    frozen: bool,
    /// The group's owner holds it frozen (see the module docs).
    owner_holds: bool,
    /// Freezes requested (read while running).
    freezes: Arc<AtomicU64>,
    /// A freeze requested and not yet seen done: when, and the busy edge.
    pending: Option<(Instant, u64)>,
    report: FreezeReport,
    freeze_h: hdrhistogram::Histogram<u64>,
    thaw_h: hdrhistogram::Histogram<u64>,
    step_h: hdrhistogram::Histogram<u64>,
}

impl State {
    fn new(
        page: Arc<Page>,
        lanes: Vec<u32>,
        group: Group,
        executor: Arc<Mutex<Executor>>,
        policy: Policy,
        opts: FreezeOptions,
        reporter: Option<GroupReporter>,
    ) -> State {
        State {
            policies: vec![policy; lanes.len()],
            report: FreezeReport {
                group: group.path().to_string(),
                ..FreezeReport::default()
            },
            page,
            lanes,
            group,
            executor,
            opts,
            reporter,
            frozen: false,
            owner_holds: false,
            freezes: Arc::new(AtomicU64::new(0)),
            pending: None,
            freeze_h: latency_histogram(),
            thaw_h: latency_histogram(),
            step_h: latency_histogram(),
        }
    }

    /// Steps every lane's policy; returns whether the group must be frozen
    /// and how long the decision holds without a signal changing.
    fn decide(&mut self) -> (bool, Duration) {
        let clock = self.page.clock();
        let now_ns = clock.ticks_to_ns(clock.now());
        let mut nap = self.page.killed();
        let mut hold = self.opts.max_sleep;
        if !nap && self.page.unmanaged() {
            // the kill switch's "unmanaged" mode: borrowing off, batch runs
            return (false, hold);
        }
        for (i, &lane) in self.lanes.iter().enumerate() {
            let Ok(lc) = self.page.lc(lane) else { continue };
            let s = lc.state.load(Acquire);
            let obs = Observation {
                lc_busy: state::busy(s),
                queue_len: state::queue_len(s),
                running_request: u64::from(state::seq(s)),
                now_ns,
                lc_ipc: None,
            };
            let p = &mut self.policies[i];
            if p.step(&obs) == Decision::Nap {
                nap = true;
            }
            if p.time_sensitive() {
                let end = p
                    .state()
                    .start_ns
                    .saturating_add(p.config().effective_budget_ns(None));
                hold = hold.min(Duration::from_nanos(end.saturating_sub(now_ns).max(1)));
            }
        }
        (nap, hold)
    }

    fn run(&mut self, bell: &Bell, stop: &AtomicBool) -> FreezeReport {
        let mut sleep = Duration::ZERO;
        let mut duty = crate::rt::DutyBound::new(self.opts.priority, &self.opts.bound);
        loop {
            bell.wait(sleep);
            if stop.load(Relaxed) {
                break;
            }
            duty.step(elfen_shm::clock::monotonic_ns());
            self.check_pending();
            let (nap, hold) = self.decide();
            self.follow_owner(nap);
            if !self.owner_holds && nap != self.frozen {
                self.set_frozen(nap, bell.busy_event_ns());
            }
            sleep = match self.pending {
                // poll the freezer at a quarter of the time waited so far
                Some((t0, _)) => hold.min((t0.elapsed() / 4).max(Duration::from_micros(50))),
                None => hold,
            }
            .max(MIN_SLEEP);
        }
        self.report.rt_demotions = duty.demotions;
        if self.frozen {
            self.set_frozen(false, 0);
        }
        let mut r = std::mem::take(&mut self.report);
        r.freeze = LatencySummary::of(&self.freeze_h);
        r.thaw = LatencySummary::of(&self.thaw_h);
        r.step_aside = LatencySummary::of(&self.step_h);
        r
    }

    /// A freeze in progress: is the group frozen now (record how long it
    /// took), or late?
    fn check_pending(&mut self) {
        let Some((t0, edge_ns)) = self.pending else {
            return;
        };
        let state = self
            .executor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .freezer_state(&self.group);
        match state {
            Ok(FreezerState::Frozen) => {
                let _ = self.freeze_h.record(t0.elapsed().as_nanos().max(1) as u64);
                let now = elfen_shm::clock::monotonic_ns();
                if edge_ns > 0 && now > edge_ns {
                    let _ = self.step_h.record(now - edge_ns);
                }
                self.pending = None;
            }
            Ok(_) if t0.elapsed() > self.opts.timeout => {
                self.report.late += 1;
                self.pending = None;
            }
            Ok(_) => {}
            Err(e) => {
                self.error(format!("reading the freezer state: {e}"));
                self.pending = None;
            }
        }
    }

    /// What the group's owner did to its freezer (see the module docs):
    /// while the owner holds it frozen, whether it thawed it; while the
    /// thread holds it frozen and the policy still says nap, whether it
    /// was thawed under the thread (then taken for thawed: the decision
    /// freezes it again).
    fn follow_owner(&mut self, nap: bool) {
        let watch = self.owner_holds || (self.frozen && nap && self.pending.is_none());
        if !watch {
            return;
        }
        let requested = self
            .executor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.group, KnobKind::Frozen);
        let Ok(Knob::Frozen(requested)) = requested else {
            return; // a group gone or unreadable: the next write says so
        };
        if requested {
            return;
        }
        if self.owner_holds {
            self.set_owner_holds(false);
        } else {
            self.thawed_under();
        }
    }

    /// The group, held frozen by the thread, was thawed under it: taken
    /// for thawed (the next decision to nap freezes it again), counted and
    /// reported.
    fn thawed_under(&mut self) {
        self.frozen = false;
        self.report.owner_thaws += 1;
        if let Some(r) = &self.reporter {
            r.owner_thawed();
        }
    }

    /// The owner holds the group frozen (`true`, counted) or let it go:
    /// the value restored at the stop becomes the owner's, and reported.
    fn set_owner_holds(&mut self, holds: bool) {
        self.owner_holds = holds;
        if holds {
            self.report.owner_holds += 1;
        }
        let r = self
            .executor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .owner_set(&self.group, Knob::Frozen(holds));
        if let Err(e) = r {
            self.error(format!("recording the owner's freezer state: {e}"));
        }
        if let Some(r) = &self.reporter {
            r.set_owner_holds(holds);
        }
    }

    /// Requests a freeze (its completion is polled by `check_pending`,
    /// sleeping in between: a freezing task must run to stop, and this
    /// thread may share its CPU) or thaws. A write that fails is counted
    /// and not taken for done (the next decision writes again).
    fn set_frozen(&mut self, frozen: bool, edge_ns: u64) {
        let executor = Arc::clone(&self.executor);
        let mut ex = executor.lock().unwrap_or_else(|p| p.into_inner());
        let t0 = Instant::now();
        let group = self.group.clone();
        if frozen {
            let r = retry(|| ex.set(&group, Knob::Frozen(true)));
            if matches!(&r, Ok(rep) if rep.is_noop()) {
                // frozen already, not by this thread: its owner's
                drop(ex);
                self.set_owner_holds(true);
                return;
            }
            self.report.freezes += 1;
            self.freezes.fetch_add(1, Relaxed);
            match r {
                Ok(_) => {
                    self.pending = Some((t0, edge_ns));
                    self.frozen = true;
                    self.succeeded(DaemonKnob::Freeze);
                }
                Err(e) => self.failed(DaemonKnob::Freeze, &e),
            }
        } else {
            self.report.thaws += 1;
            self.pending = None;
            match retry(|| ex.thaw(&group)) {
                Ok(rep) if rep.is_noop() && self.frozen => {
                    // thawed already, not by this thread: its owner thawed
                    // it while the thread held it frozen
                    drop(ex);
                    self.thawed_under();
                }
                Ok(_) => {
                    let _ = self.thaw_h.record(t0.elapsed().as_nanos().max(1) as u64);
                    self.frozen = false;
                    self.succeeded(DaemonKnob::Thaw);
                }
                Err(e) => self.failed(DaemonKnob::Thaw, &e),
            }
        }
    }

    fn succeeded(&self, knob: DaemonKnob) {
        if let Some(r) = &self.reporter {
            r.succeeded(knob);
        }
    }

    fn failed(&mut self, knob: DaemonKnob, e: &elfen_cgroup::CgroupError) {
        self.report.failed_writes += 1;
        if let Some(r) = &self.reporter {
            r.failed(knob, e);
        }
        self.error(format!("{}: {e}", knob.name()));
    }

    /// Keeps the first few errors for the report; without a reporter (the
    /// daemon logs what its reporter counts) they are printed too.
    fn error(&mut self, e: String) {
        if self.report.errors.len() < 8 {
            if self.reporter.is_none() {
                crate::logging::warn(format!("freezer of {}: {e}", self.report.group));
            }
            self.report.errors.push(e);
        }
    }
}
