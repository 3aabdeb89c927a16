//! **Protection**: how a batch group gives the LC's lanes back — one
//! interface for every mode, so the daemon, `auto` and the harness drive
//! the same code.
//!
//! A [`Protection`] is one mode applied to one batch group ([`Target`]):
//! [`Protection::apply`] starts it (its threads, its knob writes through
//! the executor — recorded, restored at stop, repaired after a crash),
//! [`Protection::withdraw`] stops it and gives back what it took,
//! [`Protection::cost`] says what it has cost (measured: the CPU of its
//! threads, split into its own work, the occupation that *is* the
//! protection, and the lane time held through idle gaps), and
//! [`Protection::fits`] whether it can follow the service (a typed
//! [`fit::Verdict`] with the reason, from the LC's busy-period profile and
//! the knob's measured cost). [`new`] makes the protection of a [`Mode`]:
//!
//! | mode | apply | withdraw |
//! |---|---|---|
//! | `cooperative` | nothing (the batch threads nap themselves) | nothing |
//! | `idle` | the group yields (set up at start; SCHED_IDLE on its threads where it did not) | nothing (threads stay SCHED_IDLE until the stop) |
//! | `guard` | the group confined to the batch lanes; guard threads, and the writer's hold of its batch lane (shared by every group that guards) | the guards stopped when no group guards any more |
//! | `freeze` | the freezer thread | it thaws and stops |
//! | `blind` | the blind-isolation thread | the group gets its CPUs back, thawed |
//! | `scx` | elfen's sched_ext scheduler loaded with the LC and the group (`cpu.idle` set up at start) | unloaded: the batch threads get their policy back |
//!
//! The group's driver (`driver`) applies the configured mode, judges
//! whether it fits, falls back (`[freeze] unfit`) and runs `auto`.
//! Modules: [`profile`] (the busy periods), [`fit`] (the verdicts, the
//! hold), [`auto`] (HIS's state machine), `modes` (five
//! implementations), `scx` (the sched_ext one), [`driver`].

pub mod auto;
pub mod costs;
pub mod driver;
pub mod fit;
mod modes;
pub mod profile;
mod scx;

use crate::bell::Bell;
use crate::blind::{BlindReport, OwnThreads};
use crate::config::{BlindSection, HoldSetting, Mode};
use crate::error::DaemonError;
use crate::freeze::FreezeReport;
use crate::guard::{GuardHandle, GuardOptions, GuardReport};
use crate::health::GroupReporter;
use crate::rt::{LaneSpin, SpinBound};
use crate::writer::{Hold, LaneEdges};
use elfen_bpf::SlotReader;
use elfen_cgroup::{Executor, Group};
use elfen_policy::PolicyConfig;
use elfen_shm::Page;
use fit::{KnobCosts, Verdict};
use profile::{Profile, ProfileSnapshot};
use serde::Serialize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use driver::{Driver, DriverState};
pub use scx::SchedulerView;

/// What a protection has cost since it was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Cost {
    /// On-CPU time of its threads (schedstat), ns.
    pub cpu_ns: u64,
    /// Of it, spinning on a batch lane while the LC was busy (the
    /// protection itself), ns.
    pub occupied_ns: u64,
    /// Spinning through idle gaps (lane time the batch did not get), ns.
    pub held_ns: u64,
    /// Of the occupation, the part past the real-time bound, at
    /// SCHED_OTHER (`crate::rt`: the lane's normal tasks shared it), ns.
    pub bounded_ns: u64,
    /// Knob cycles: wake-ups, freezes, cpuset writes.
    pub cycles: u64,
}

impl Cost {
    /// Its own work: its threads' CPU less the spinning (ns).
    pub fn own_ns(&self) -> u64 {
        self.cpu_ns
            .saturating_sub(self.occupied_ns)
            .saturating_sub(self.held_ns)
    }
}

/// What a withdrawn protection reports.
#[derive(Debug, Clone, Default)]
pub enum Withdrawn {
    /// Nothing to report.
    #[default]
    Nothing,
    /// The guards stopped (empty when other groups still guard).
    Guards(Vec<GuardReport>),
    /// The freezer.
    Freezer(FreezeReport),
    /// Blind isolation.
    Blind(BlindReport),
    /// The sched_ext scheduler unloaded.
    Scheduler(elfen_scx::Unloaded),
}

/// What a protection's upkeep found (each tick of its driver).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Upkeep {
    /// What to say.
    pub said: Vec<String>,
    /// Why it stopped protecting (the kernel unloaded its scheduler): the
    /// driver falls back.
    pub failed: Option<String>,
}

/// One mode applied to one batch group (see the module docs).
pub trait Protection: Send + std::fmt::Debug {
    /// Its mode.
    fn mode(&self) -> Mode;
    /// Starts protecting; on error nothing of it runs.
    fn apply(&mut self) -> Result<(), DaemonError>;
    /// Stops protecting and gives back what it took (idempotent).
    fn withdraw(&mut self) -> Withdrawn;
    /// What it has cost since applied (measured).
    fn cost(&self) -> Cost;
    /// Whether it can follow the service of `window` here.
    fn fits(&self, window: &ProfileSnapshot) -> Verdict;
    /// Whether it is applied.
    fn applied(&self) -> bool;
    /// Whether its threads still run (true when it has none).
    fn is_running(&self) -> bool {
        true
    }
    /// Its threads' ids (the daemon's own, for blind isolation's count).
    fn tids(&self) -> Vec<u32> {
        Vec::new()
    }
    /// Its upkeep, each tick of the driver (nothing for most modes).
    fn upkeep(&mut self) -> Upkeep {
        Upkeep::default()
    }
    /// The sched_ext scheduler it runs, as status shows it.
    fn scheduler(&self) -> Option<SchedulerView> {
        None
    }
}

/// A batch lane as protections see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    /// Its CPU.
    pub cpu: u32,
    /// Its page lane index.
    pub lane: u32,
    /// Its request lane's page index.
    pub request_lane: u32,
}

/// The modes' settings (from the daemon's configuration or the harness).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `[guard] priority`.
    pub guard_priority: u8,
    /// Freezer and blind-isolation threads' SCHED_FIFO priority.
    pub group_priority: u8,
    /// Where freezer and blind-isolation threads run.
    pub thread_cpus: Vec<u32>,
    /// `[guard] recheck_us` (`None`: budget / 8).
    pub guard_recheck: Option<Duration>,
    /// `[guard] hold_us`.
    pub hold: HoldSetting,
    /// `[freeze] timeout_ms`.
    pub freeze_timeout: Duration,
    /// `[blind]`.
    pub blind: BlindSection,
    /// The lanes' policy.
    pub policy: PolicyConfig,
    /// The bound on guards' and the writer's real-time spinning
    /// (`[guard] spin_max_us`, `spin_share_pct`, the kernel's throttling).
    pub spin: SpinBound,
    /// How often new LC and batch processes are looked for (`[lc] rescan_ms`).
    pub rescan: Duration,
    /// How the sched_ext scheduler pairs CPUs: the configured (request,
    /// batch) pairs on a machine without SMT; `None`: the SMT siblings.
    pub scx_pairs: Option<Vec<(u32, u32)>>,
}

/// The guards every guarding group shares: one per batch lane, started by
/// the first group that applies guard mode, stopped by the last to
/// withdraw it.
#[derive(Debug, Default)]
struct GuardSet {
    users: usize,
    guards: Vec<GuardHandle>,
}

/// What every protection of one daemon (or harness run) acts through.
#[derive(Debug)]
pub struct Env {
    /// The signal page.
    pub page: Arc<Page>,
    /// The batch lanes.
    pub batch_lanes: Vec<Lane>,
    /// Every CPU blind isolation hands out.
    pub all_cpus: Vec<u32>,
    /// The signal source's per-CPU slots.
    pub slots: SlotReader,
    /// The service's busy periods (the writer's).
    pub profile: Arc<Profile>,
    /// The request lanes' idle edges (the writer's).
    pub edges: Arc<LaneEdges>,
    /// The writer's hold of its batch lane, where it has one lane.
    pub writer_hold: Option<Arc<Hold>>,
    /// The guards' bells, one per batch lane (disarmed while no guard runs).
    pub guard_bells: Vec<(Lane, Arc<Bell>)>,
    /// The daemon's threads (blind isolation counts their CPUs idle).
    pub own: OwnThreads,
    /// The modes' settings.
    pub settings: Settings,
    /// What the knobs cost here (measured; refined while running).
    pub costs: Mutex<KnobCosts>,
    /// The hold in use by guards and the writer, ns.
    pub hold_ns: Arc<AtomicU64>,
    /// Each batch lane's real-time spinning (its guard's and, on its lane,
    /// the writer's hold), in the order of `batch_lanes`.
    pub spins: Vec<Arc<LaneSpin>>,
    guards: Mutex<GuardSet>,
    /// The LC processes watched now (the writer's), when known.
    lc_pids: Option<Arc<Mutex<Vec<u32>>>>,
    /// Threads of withdrawn protections: their CPU, occupation and hold
    /// (so the daemon's counters never go down), ns.
    retired: Mutex<(u64, u64, u64)>,
}

impl Env {
    /// A new environment; no protection applied yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        page: Arc<Page>,
        batch_lanes: Vec<Lane>,
        all_cpus: Vec<u32>,
        slots: SlotReader,
        profile: Arc<Profile>,
        edges: Arc<LaneEdges>,
        writer_hold: Option<Arc<Hold>>,
        guard_bells: Vec<(Lane, Arc<Bell>)>,
        settings: Settings,
        costs: KnobCosts,
    ) -> Env {
        let spins: Vec<Arc<LaneSpin>> = batch_lanes
            .iter()
            .map(|l| Arc::new(LaneSpin::new(l.cpu, settings.spin)))
            .collect();
        if let Some(h) = &writer_hold {
            if let Some(s) = spins.iter().find(|s| s.cpu == h.cpu) {
                h.set_spin(Arc::clone(s));
            }
        }
        Env {
            spins,
            page,
            batch_lanes,
            all_cpus,
            slots,
            profile,
            edges,
            writer_hold,
            guard_bells,
            own: OwnThreads::default(),
            settings,
            costs: Mutex::new(costs),
            hold_ns: Arc::new(AtomicU64::new(0)),
            guards: Mutex::new(GuardSet::default()),
            lc_pids: None,
            retired: Mutex::new((0, 0, 0)),
        }
    }

    /// The LC processes the writer watches, shared (the sched_ext
    /// scheduler is told them).
    pub fn with_lc_pids(mut self, pids: Arc<Mutex<Vec<u32>>>) -> Env {
        self.lc_pids = Some(pids);
        self
    }

    /// The LC processes watched now (none when not known).
    pub fn lc_pids(&self) -> Vec<u32> {
        self.lc_pids.as_ref().map_or_else(Vec::new, |p| {
            p.lock().unwrap_or_else(|p| p.into_inner()).clone()
        })
    }

    /// Counts a stopping thread `tid` of a protection (its CPU so far, of
    /// which `spin` occupied and held) as retired.
    pub(crate) fn retire(&self, tid: u32, spin: (u64, u64)) {
        let cpu = thread_cpu(tid);
        let mut r = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        r.0 += cpu;
        r.1 += spin.0;
        r.2 += spin.1;
    }

    /// Retired threads' CPU so far, ns.
    pub fn retired_cpu_ns(&self) -> u64 {
        self.retired.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// The knobs' costs now.
    pub fn costs(&self) -> KnobCosts {
        *self.costs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the hold from the setting, the wake-up cost and the gaps of
    /// `window`; applied at once when guards run. Returns it, ns.
    pub fn refresh_hold(&self, window: &ProfileSnapshot) -> u64 {
        let h = fit::hold_ns(
            self.settings.hold,
            self.costs().wake_ns,
            window.gaps.mean_ns(),
        );
        let borrow_idle = self.settings.policy.kind == elfen_policy::PolicyKind::BorrowIdle;
        let h = if borrow_idle { h } else { 0 };
        self.hold_ns.store(h, Relaxed);
        if self.guards_running() {
            if let Some(w) = &self.writer_hold {
                w.set_ns(h);
            }
        }
        h
    }

    /// The hold in use, ns.
    pub fn hold(&self) -> u64 {
        self.hold_ns.load(Relaxed)
    }

    /// Whether guards run (some group guards).
    pub fn guards_running(&self) -> bool {
        self.guards.lock().unwrap_or_else(|p| p.into_inner()).users > 0
    }

    /// The guards' thread ids.
    pub fn guard_tids(&self) -> Vec<u32> {
        let g = self.guards.lock().unwrap_or_else(|p| p.into_inner());
        g.guards.iter().map(GuardHandle::tid).collect()
    }

    /// The guards' occupation and hold so far, and their counts.
    pub fn guard_counts(&self) -> Vec<crate::metrics::GuardCounts> {
        let g = self.guards.lock().unwrap_or_else(|p| p.into_inner());
        g.guards
            .iter()
            .map(|h| crate::metrics::GuardCounts {
                lane: h.lane(),
                cpu: self
                    .batch_lanes
                    .iter()
                    .find(|l| l.lane == h.lane())
                    .map_or(0, |l| l.cpu),
                occupations: h.occupations(),
                occupied_ns: h.occupied_ns(),
            })
            .collect()
    }

    /// CPU time the guards and the writer's hold spent spinning so far:
    /// (occupied while the LC was busy, held through its gaps), ns.
    pub fn spin_ns(&self) -> (u64, u64) {
        let g = self.guards.lock().unwrap_or_else(|p| p.into_inner());
        let (mut occ, mut held) = g.guards.iter().fold((0, 0), |(o, h), g| {
            let (go, gh) = g.spin_cpu_ns();
            (o + go, h + gh)
        });
        if let Some(w) = &self.writer_hold {
            occ += w.occupied_ns.load(Relaxed);
            held += w.held_ns.load(Relaxed);
        }
        let r = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        (occ + r.1, held + r.2)
    }

    /// The real-time spinning of batch CPU `cpu` (a lane of its own if it
    /// is no batch lane: never shared, still bounded).
    fn spin_of(&self, cpu: u32) -> Arc<LaneSpin> {
        self.spins
            .iter()
            .find(|s| s.cpu == cpu)
            .cloned()
            .unwrap_or_else(|| Arc::new(LaneSpin::new(cpu, self.settings.spin)))
    }

    /// CPU time guards occupied past the real-time bound, at SCHED_OTHER,
    /// so far (every lane, retired guards included), ns.
    pub fn bounded_ns(&self) -> u64 {
        self.spins.iter().map(|s| s.bounded_ns.load(Relaxed)).sum()
    }

    /// Spins the real-time bound ended so far (guards and the writer).
    pub fn spin_cuts(&self) -> u64 {
        self.spins.iter().map(|s| s.cuts.load(Relaxed)).sum()
    }

    /// Starts the guards if none run yet (one more user either way).
    fn acquire_guards(&self) -> Result<(), DaemonError> {
        let mut g = self.guards.lock().unwrap_or_else(|p| p.into_inner());
        if g.users == 0 {
            let mut started = Vec::new();
            for (lane, bell) in &self.guard_bells {
                let opts = GuardOptions {
                    priority: self.settings.guard_priority,
                    recheck: self.settings.guard_recheck,
                    max_sleep: Duration::from_millis(100),
                    hold: Some((Arc::clone(&self.hold_ns), Arc::clone(&self.edges))),
                    spin: self.spin_of(lane.cpu),
                };
                bell.arm(true);
                match crate::guard::Guard::spawn(
                    Arc::clone(&self.page),
                    lane.lane,
                    Arc::clone(bell),
                    opts,
                ) {
                    Ok(h) => {
                        self.own.add(h.tid());
                        started.push(h);
                    }
                    Err(e) => {
                        for (_, b) in &self.guard_bells {
                            b.arm(false);
                        }
                        for h in started {
                            self.own.remove(h.tid());
                            h.stop();
                        }
                        return Err(e);
                    }
                }
            }
            g.guards = started;
            if let Some(w) = &self.writer_hold {
                w.set_ns(self.hold());
            }
        }
        g.users += 1;
        Ok(())
    }

    /// One user fewer; the last one stops the guards (their reports).
    fn release_guards(&self) -> Vec<GuardReport> {
        let mut g = self.guards.lock().unwrap_or_else(|p| p.into_inner());
        g.users = g.users.saturating_sub(1);
        if g.users > 0 {
            return Vec::new();
        }
        if let Some(w) = &self.writer_hold {
            w.set_ns(0);
        }
        for (_, b) in &self.guard_bells {
            b.arm(false);
        }
        g.guards
            .drain(..)
            .map(|h| {
                self.own.remove(h.tid());
                self.retire(h.tid(), h.spin_cpu_ns());
                h.stop()
            })
            .collect()
    }
}

/// One batch group as its protections see it.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its index in the plan.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Its cgroup and the executor every knob write goes through (`None`:
    /// the batch is in no group of its own — the harness's guard
    /// configuration; only modes that write no knob can run then).
    pub cgroup: Option<Cgroup>,
    /// Where failed writes are counted.
    pub reporter: Option<GroupReporter>,
    /// Its freezer's bell (rung at every transition of the request lanes).
    pub freeze_bell: Option<Arc<Bell>>,
    /// Its blind isolation's bell (busy edges of every CPU).
    pub blind_bell: Option<Arc<Bell>>,
    /// The request lanes it borrows from (page indices).
    pub request_lanes: Vec<u32>,
    /// Its cpuset when confined to the batch lanes (guard mode confines).
    pub confine: Option<Vec<u32>>,
    /// Whether it yields by its set-up (SCHED_IDLE or `cpu.idle`).
    pub yields: bool,
    /// Set when its threads must be put SCHED_IDLE (idle mode as a
    /// fallback): the daemon's rescans do it.
    pub sched_idle: Arc<AtomicBool>,
}

/// This process's thread `tid`'s on-CPU time so far, ns.
pub(crate) fn thread_cpu(tid: u32) -> u64 {
    elfen_cmd::proc::thread_schedstat(std::process::id(), tid).map_or(0, |s| s.on_cpu_ns)
}

/// A batch group's cgroup, with the executor that writes it.
#[derive(Debug, Clone)]
pub struct Cgroup {
    /// The group.
    pub group: Group,
    /// The executor (recorded, restored at stop, repaired after a crash).
    pub executor: Arc<Mutex<Executor>>,
}

impl Target {
    /// Its cgroup, or why a mode that writes knobs cannot run.
    pub fn cgroup(&self, mode: Mode) -> Result<&Cgroup, DaemonError> {
        self.cgroup.as_ref().ok_or_else(|| {
            DaemonError::thread(
                mode.name(),
                format!("batch {} is in no cgroup of its own", self.name),
            )
        })
    }
}

/// The protection of `mode` for `target`, not applied yet.
pub fn new(mode: Mode, env: &Arc<Env>, target: &Target) -> Box<dyn Protection> {
    modes::new(mode, env, target)
}
