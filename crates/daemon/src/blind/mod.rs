//! **Blind isolation** (PerfIso, ATC'18 §4.1) applied to a batch group:
//! its cpuset follows `all CPUs − CPUs running the LC service − B buffer
//! cores`, recomputed from the kernel source's per-CPU slots (who runs
//! where), with the same pure law the simulator uses
//! (`elfen_policy::blind::BlindIsolation`).
//!
//! [`BlindState`] is the pure part: given which CPUs run the LC, how many
//! are idle, and the time, it decides the next set — **shrinking at once**
//! (a CPU that turned LC-busy leaves the set on that step; the law's
//! `S' = S + I − B` shrinks when fewer than B CPUs are idle) and **growing
//! with hysteresis** (only after a larger allocation has been called for
//! during `grow_hold`). It never gives batch a CPU that runs the LC and
//! keeps the CPUs batch already has where it can (fewer migrations). An
//! allocation of 0 cannot be a cpuset (a v1 cpuset with no CPU holds no
//! task): the group is frozen instead, and thawed when CPUs come back.
//!
//! The page's kill switch overrides the law: paused, the group is frozen;
//! unmanaged, it gets every CPU (PerfIso's two kill-switch modes).
//!
//! **Idle CPUs** ([`idle_cpus`]), the law's `I`: CPUs running neither the
//! LC nor the batch. A CPU outside the batch's set runs no batch, so it is
//! idle unless the LC runs there (another program there is neither); a CPU
//! of the set is idle when its slot shows the idle task *or one of the
//! daemon's own threads* (the controller itself — it runs while it reads the
//! slots —, the LC signal writer, guards), which run only to keep the law.
//! Counting only CPUs that show the idle task, as before, made the CPU
//! running the controller busy, and two CPUs with `B` = 1 kept batch frozen
//! for good.
//!
//! [`Blind::spawn`] is the mechanism: a thread woken by the LC signal
//! writer at each busy edge of any CPU ([`crate::bell::Bell::per_cpu`];
//! with `wake = Poll`, or as a safety net, the slots are read every
//! `poll`) that reads the slots (plain loads from the mmapped array; no
//! system call unless the set changes) and writes the group's cpuset (or
//! freezer) through the executor, so every change is recorded and
//! restorable. A CPU whose LC wake-up was announced (the writer's per-CPU
//! busy edge, newer than the slot's last switch) counts as the LC's before
//! the LC's switch-in. Each shrink that took a CPU away because the LC
//! began to run there is timed from the LC's switch onto that CPU (the
//! slot's time) to the write's return: the reaction time (taken away
//! before the switch-in, on an announcement: recorded as 0).
//!
//! The parts: `state` ([`BlindState`], the pure decision) and `thread`
//! (the controller's loop and its writes).

mod state;
mod thread;

use thread::{Io, run};

pub use state::{BlindState, Target};

use crate::bell::Bell;
use crate::error::DaemonError;
use crate::guard::LatencySummary;
use crate::health::GroupReporter;
use crate::worker::Worker;
use elfen_bpf::SlotReader;
use elfen_cgroup::{Executor, Group};
use elfen_cmd::proc::{SchedClass, set_sched};
use elfen_shm::Page;
use serde::Serialize;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many of `cpus` (`snaps`: their slots, `None` unreadable) are idle in
/// the law's sense — running neither the LC nor the batch: a CPU outside
/// the batch's set `batch` that runs no LC task (whatever else runs there,
/// batch cannot), and a CPU of the set that shows the idle task or one of
/// the daemon's threads `own` (see the module docs).
pub fn idle_cpus(
    cpus: &[u32],
    snaps: &[Option<elfen_bpf::SlotSnapshot>],
    batch: &[u32],
    own: &[u32],
) -> u32 {
    cpus.iter()
        .zip(snaps)
        .filter(|(c, s)| match s {
            Some(s) if s.lc() => false,
            Some(s) => !batch.contains(c) || s.tid == 0 || own.contains(&s.tid),
            None => false,
        })
        .count() as u32
}

/// The daemon's own threads (their tids): blind isolation counts a CPU
/// running one of them as idle, and the writer makes their switches no
/// transitions of the signal (`elfen_bpf::Source::set_quiet_tids`).
#[derive(Debug, Clone, Default)]
pub struct OwnThreads(Arc<(Mutex<Vec<u32>>, AtomicU64)>);

impl OwnThreads {
    /// Adds `tid`.
    pub fn add(&self, tid: u32) {
        let mut v = self.0.0.lock().unwrap_or_else(|p| p.into_inner());
        if !v.contains(&tid) {
            v.push(tid);
            self.0.1.fetch_add(1, Relaxed);
        }
    }

    /// Removes `tid`.
    pub fn remove(&self, tid: u32) {
        let mut v = self.0.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = v.len();
        v.retain(|&t| t != tid);
        if v.len() != n {
            self.0.1.fetch_add(1, Relaxed);
        }
    }

    /// The tids now.
    pub fn tids(&self) -> Vec<u32> {
        self.0.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes so far (an add or a remove that changed the set).
    pub fn generation(&self) -> u64 {
        self.0.1.load(Relaxed)
    }
}

/// What wakes the controller.
#[derive(Debug, Clone)]
pub enum BlindWaking {
    /// The writer's busy edges (this bell, rung per CPU); the slots read
    /// every `poll` besides.
    Events(Arc<Bell>),
    /// The slots read every `poll`.
    Poll,
}

/// How a blind-isolation thread runs.
#[derive(Debug, Clone)]
pub struct BlindOptions {
    /// PerfIso's B.
    pub buffer_cores: u32,
    /// Growth waits this long.
    pub grow_hold: Duration,
    /// Slot poll interval (with events: the safety net's).
    pub poll: Duration,
    /// What wakes it.
    pub waking: BlindWaking,
    /// SCHED_FIFO priority (0 = SCHED_OTHER).
    pub priority: u8,
    /// CPUs the thread may run on (`None`: unchanged).
    pub thread_cpus: Option<Vec<u32>>,
    /// The daemon's threads, counted as idle (the controller adds itself).
    pub own: OwnThreads,
    /// The CPUs the group gets back when the controller stops (`None`:
    /// every CPU it hands out).
    pub release: Option<Vec<u32>>,
    /// The bound on its real-time work (`crate::rt::DutyBound`).
    pub bound: crate::rt::SpinBound,
}

/// What a stopped controller reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BlindReport {
    /// The group.
    pub group: String,
    /// cpuset writes.
    pub cpuset_changes: u64,
    /// Shrinks among them.
    pub shrinks: u64,
    /// Freezes (allocation 0).
    pub freezes: u64,
    /// LC switch onto a CPU of the set → the write that took it away.
    pub reaction: LatencySummary,
    /// Steps taken on a busy edge (woken by the writer).
    pub woken: u64,
    /// Steps taken on the poll interval.
    pub polled: u64,
    /// cpuset, freeze and thaw writes that failed (after retries of
    /// transient errors).
    pub failed_writes: u64,
    /// 100 ms windows in which its work reached its real-time bound's
    /// share and it ran the rest of the window at SCHED_OTHER.
    pub rt_demotions: u64,
    /// Errors met (the first few).
    pub errors: Vec<String>,
}

/// A running controller.
#[derive(Debug)]
pub struct BlindHandle {
    worker: Worker<BlindReport>,
    changes: Arc<AtomicU64>,
    tid: u32,
}

impl BlindHandle {
    /// cpuset writes so far.
    pub fn cpuset_changes(&self) -> u64 {
        self.changes.load(Relaxed)
    }

    /// The controller thread's id.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// Whether the thread still runs.
    pub fn is_running(&self) -> bool {
        self.worker.is_running()
    }

    /// Stops the controller — it gives the group its CPUs back (every CPU,
    /// or `release`) and thaws it (the executor restores the original
    /// values later, with everything else it recorded) — and returns its
    /// report.
    pub fn stop(self) -> BlindReport {
        self.worker.stop().unwrap_or_default()
    }
}

/// The blind-isolation thread of one group.
#[derive(Debug)]
pub struct Blind;

impl Blind {
    /// Starts the controller of `group` over the CPUs `cpus`, reading
    /// `slots` and the kill switch of `page`; LC processes are those the
    /// slots flag (the writer's watched processes and cgroups).
    pub fn spawn(
        page: Arc<Page>,
        slots: SlotReader,
        cpus: Vec<u32>,
        group: Group,
        executor: Arc<Mutex<Executor>>,
        opts: BlindOptions,
    ) -> Result<BlindHandle, DaemonError> {
        Blind::spawn_reporting(page, slots, cpus, group, executor, opts, None)
    }

    /// [`Blind::spawn`], counting failed writes in `reporter` (the
    /// daemon's [`crate::health::Health`]).
    pub fn spawn_reporting(
        page: Arc<Page>,
        slots: SlotReader,
        cpus: Vec<u32>,
        group: Group,
        executor: Arc<Mutex<Executor>>,
        opts: BlindOptions,
        reporter: Option<GroupReporter>,
    ) -> Result<BlindHandle, DaemonError> {
        let changes = Arc::new(AtomicU64::new(0));
        let c2 = Arc::clone(&changes);
        let bell = match &opts.waking {
            BlindWaking::Events(b) => Some(Arc::clone(b)),
            BlindWaking::Poll => None,
        };
        let (worker, tid) = Worker::start(
            "elfen-blind",
            bell,
            move || {
                if let Some(c) = &opts.thread_cpus {
                    elfen_topo::set_current_affinity(c)
                        .map_err(|e| DaemonError::thread("blind isolation", e.to_string()))?;
                }
                if opts.priority > 0 {
                    set_sched(0, SchedClass::Fifo(opts.priority)).map_err(|e| {
                        DaemonError::os("setting the blind-isolation thread to SCHED_FIFO", e)
                    })?;
                }
                let tid = elfen_cmd::proc::gettid();
                opts.own.add(tid);
                Ok((opts, tid))
            },
            move |opts, stop| {
                let io = Io {
                    group: &group,
                    executor: &executor,
                    reporter: reporter.as_ref(),
                };
                let r = run(&page, &slots, cpus, io, &opts, stop, &c2);
                opts.own.remove(elfen_cmd::proc::gettid());
                r
            },
            BlindReport::default,
        )?;
        Ok(BlindHandle {
            worker,
            changes,
            tid,
        })
    }
}

/// Whether `cpu` counts as the LC's: its slot flags an LC task, or the
/// writer's last busy edge for it (an announced wake-up) is newer than the
/// slot's last switch and less than `ANNOUNCE_NS` old.
fn lc_on(snap: Option<&elfen_bpf::SlotSnapshot>, edge_ns: u64, now_ns: u64) -> bool {
    match snap {
        Some(s) if s.lc() => true,
        Some(s) => {
            edge_ns > s.switch_ns
                && now_ns.saturating_sub(edge_ns) < elfen_bpf::contract::ANNOUNCE_NS
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfen_policy::blind::BlindIsolation;
    use elfen_shm::KillMode;

    fn st(b: u32) -> BlindState {
        BlindState::new(
            BlindIsolation { buffer_cores: b },
            vec![0, 1, 2, 3],
            Duration::from_micros(1000),
        )
    }

    #[test]
    fn shrinks_at_once_when_the_lc_takes_a_cpu() {
        let mut s = st(0);
        // the LC starts on cpu 2, nothing idle
        let t = s.step(KillMode::Off, |c| c == 2, 0, 0);
        assert_eq!(t, Some(Target::Cpus(vec![0, 1, 3])));
        // and on cpu 0 too
        assert_eq!(
            s.step(KillMode::Off, |c| c == 2 || c == 0, 0, 10),
            Some(Target::Cpus(vec![1, 3]))
        );
    }

    #[test]
    fn grows_only_after_the_hold() {
        let mut s = st(0);
        s.step(KillMode::Off, |c| c == 2, 0, 0);
        // the LC leaves cpu 2: one CPU idle
        assert_eq!(
            s.step(KillMode::Off, |_| false, 1, 100_000),
            None,
            "not before the hold"
        );
        assert_eq!(s.step(KillMode::Off, |_| false, 1, 600_000), None);
        assert_eq!(
            s.step(KillMode::Off, |_| false, 1, 1_100_000),
            Some(Target::Cpus(vec![0, 1, 2, 3]))
        );
    }

    #[test]
    fn a_shrink_resets_the_hold() {
        let mut s = st(0);
        s.step(KillMode::Off, |c| c == 2, 0, 0);
        assert_eq!(s.step(KillMode::Off, |_| false, 1, 100_000), None);
        // busy again before the hold ran out: nothing to do (cpu 2 is not batch's)
        assert_eq!(s.step(KillMode::Off, |c| c == 2, 0, 500_000), None);
        assert_eq!(
            s.step(KillMode::Off, |_| false, 1, 1_200_000),
            None,
            "the hold starts again"
        );
        assert!(s.step(KillMode::Off, |_| false, 1, 2_300_000).is_some());
    }

    #[test]
    fn buffer_cores_are_kept_idle() {
        let mut s = st(1);
        // the LC on cpu 0, nothing idle: S' = S + I − B = 3, and not cpu 0
        assert_eq!(
            s.step(KillMode::Off, |c| c == 0, 0, 0),
            Some(Target::Cpus(vec![1, 2, 3]))
        );
        // still nothing idle (I = 0 < B = 1): one more goes → all − busy − B
        assert_eq!(
            s.step(KillMode::Off, |c| c == 0, 0, 10),
            Some(Target::Cpus(vec![1, 2]))
        );
        // now one CPU idle = B: steady
        assert_eq!(s.step(KillMode::Off, |c| c == 0, 1, 20), None);
    }

    #[test]
    fn no_cpu_left_freezes_and_cpus_back_thaw() {
        let mut s = BlindState::new(
            BlindIsolation { buffer_cores: 1 },
            vec![0, 1],
            Duration::from_micros(0),
        );
        // two CPUs, B = 1: the LC on cpu 0 takes it, then the buffer the other
        assert_eq!(
            s.step(KillMode::Off, |c| c == 0, 0, 0),
            Some(Target::Cpus(vec![1]))
        );
        assert_eq!(
            s.step(KillMode::Off, |c| c == 0, 0, 5),
            Some(Target::Frozen)
        );
        assert!(s.current().is_empty());
        // the LC stops: both idle → S = 0 + 2 − 1 = 1
        assert_eq!(
            s.step(KillMode::Off, |_| false, 2, 10),
            Some(Target::Cpus(vec![0]))
        );
    }

    #[test]
    fn a_rolled_back_step_is_decided_again() {
        let mut s = st(0);
        assert_eq!(
            s.step(KillMode::Off, |c| c == 2, 0, 0),
            Some(Target::Cpus(vec![0, 1, 3]))
        );
        // the write failed: batch still has every CPU, the shrink comes again
        s.rollback(vec![0, 1, 2, 3]);
        assert_eq!(
            s.step(KillMode::Off, |c| c == 2, 0, 10),
            Some(Target::Cpus(vec![0, 1, 3]))
        );
    }

    #[test]
    fn never_an_lc_cpu_and_keeps_its_cpus() {
        let mut s = st(0);
        s.step(KillMode::Off, |c| c == 1, 0, 0);
        assert_eq!(s.current(), &[0, 2, 3]);
        // the LC moves from 1 to 3: 3 leaves at once and, the allocation
        // being the same, the freed cpu 1 takes its place; 0 and 2 stay
        assert_eq!(
            s.step(KillMode::Off, |c| c == 3, 0, 10),
            Some(Target::Cpus(vec![0, 1, 2]))
        );
        assert_eq!(
            s.step(KillMode::Off, |c| c == 3, 1, 20),
            None,
            "a larger allocation waits for the hold"
        );
    }

    #[test]
    fn the_kill_switch_overrides_the_law() {
        let mut s = st(0);
        assert_eq!(
            s.step(KillMode::Off, |c| c == 2, 0, 0),
            Some(Target::Cpus(vec![0, 1, 3]))
        );
        // paused: batch frozen at once, whatever the LC does
        assert_eq!(
            s.step(KillMode::Paused, |_| false, 4, 10),
            Some(Target::Frozen)
        );
        assert_eq!(s.step(KillMode::Paused, |_| false, 4, 20), None);
        // unmanaged: every CPU, also the one the LC runs on, without a hold
        assert_eq!(
            s.step(KillMode::Unmanaged, |c| c == 2, 0, 30),
            Some(Target::Cpus(vec![0, 1, 2, 3]))
        );
        assert_eq!(s.step(KillMode::Unmanaged, |c| c == 2, 0, 40), None);
        // off again: the law takes the LC's CPU back
        assert_eq!(
            s.step(KillMode::Off, |c| c == 2, 0, 50),
            Some(Target::Cpus(vec![0, 1, 3]))
        );
    }

    fn slot(tid: u32, lc: bool) -> Option<elfen_bpf::SlotSnapshot> {
        use elfen_bpf::contract::flags;
        Some(elfen_bpf::SlotSnapshot {
            tid,
            flags: flags::VALID | if lc { flags::LC } else { 0 },
            ..Default::default()
        })
    }

    #[test]
    fn two_cpus_with_one_buffer_core_give_batch_a_cpu_back_while_the_lc_is_idle() {
        let own = [77, 78];
        let cpus = [0, 1];
        let mut s = BlindState::new(
            BlindIsolation { buffer_cores: 1 },
            vec![0, 1],
            Duration::from_micros(0),
        );
        assert_eq!(
            s.step(KillMode::Off, |c| c == 0, 0, 0),
            Some(Target::Cpus(vec![1]))
        );
        assert_eq!(
            s.step(KillMode::Off, |c| c == 0, 0, 1),
            Some(Target::Frozen)
        );
        // frozen, the LC on cpu 0, the controller (tid 77) reading the
        // slots on cpu 1: one CPU runs neither LC nor batch — I = B, batch
        // stays out while the LC runs (the buffer core is kept)
        let lc_busy = [slot(500, true), slot(77, false)];
        let idle = idle_cpus(&cpus, &lc_busy, s.current(), &own);
        assert_eq!(idle, 1);
        assert_eq!(s.step(KillMode::Off, |c| c == 0, idle, 2), None);
        // the LC sleeps: cpu 0 runs the idle task, cpu 1 the controller (or
        // another program): both idle in the law's sense
        for other in [77, 4242] {
            let lc_idle = [slot(0, false), slot(other, false)];
            assert_eq!(idle_cpus(&cpus, &lc_idle, s.current(), &own), 2);
        }
        let lc_idle = [slot(0, false), slot(77, false)];
        let idle = idle_cpus(&cpus, &lc_idle, s.current(), &own);
        assert_eq!(
            s.step(KillMode::Off, |_| false, idle, 3),
            Some(Target::Cpus(vec![0])),
            "batch gets a CPU back"
        );
        // counting only the idle task, as before, kept it frozen for good
        let mut old = BlindState::new(
            BlindIsolation { buffer_cores: 1 },
            vec![0, 1],
            Duration::from_micros(0),
        );
        old.step(KillMode::Off, |c| c == 0, 0, 0);
        old.step(KillMode::Off, |c| c == 0, 0, 1);
        let only_idle_task = lc_idle.iter().flatten().filter(|s| s.tid == 0).count() as u32;
        assert_eq!(old.step(KillMode::Off, |_| false, only_idle_task, 3), None);
        assert!(old.current().is_empty());
        // a CPU of the batch's set running batch is not idle; running the
        // controller it is; an LC task never is, whoever's tid it has
        let set = [0, 1];
        assert_eq!(
            idle_cpus(&cpus, &[slot(900, false), slot(77, false)], &set, &own),
            1
        );
        assert_eq!(idle_cpus(&[1], &[slot(77, true)], &[], &own), 0);
        assert_eq!(idle_cpus(&[0], &[None], &[], &own), 0, "unreadable");
    }

    #[test]
    fn an_announced_wake_up_counts_before_the_switch_in() {
        let s = slot(0, false).map(|mut s| {
            s.switch_ns = 1_000;
            s
        });
        assert!(
            lc_on(s.as_ref(), 2_000, 3_000),
            "woken after the last switch"
        );
        assert!(
            !lc_on(s.as_ref(), 500, 3_000),
            "an edge before the last switch"
        );
        assert!(
            !lc_on(s.as_ref(), 2_000, 2_000 + elfen_bpf::contract::ANNOUNCE_NS),
            "never ran: dropped after the window"
        );
        assert!(lc_on(slot(9, true).as_ref(), 0, 0));
        assert!(!lc_on(None, 5, 6));
    }
}
