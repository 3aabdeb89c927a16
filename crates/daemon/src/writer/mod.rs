//! The **LC signal writer**: one thread that learns from the kernel
//! (`elfen_bpf::Source`: BPF on `sched_switch`, or the coarse /proc poll
//! fallback) when the LC service runs on each request lane and writes that
//! lane's LC line through `LcLane` — `request_begin` when an LC thread
//! switches in, or earlier when the source announces it at the thread's
//! wake-up (`elfen_bpf::Options::announce_wakeups`), `request_end` when the
//! lane goes idle — then rings the lane's [`Bell`]s so guards and freezers
//! act at once. An announced lane stays busy until the switch-in; if the
//! woken LC thread has not run there `ANNOUNCE_NS` later, the next wake-up
//! (at most `max_wait` later) sets it idle.
//!
//! The thread sleeps in epoll on the source's ring buffer (the BPF program
//! wakes it at each transition), never spins. Between events it runs
//! [`Discovery`](crate::lc::Discovery) (LC processes exiting and starting again) and reconciles
//! each lane with the per-CPU slot — its LC flag, or its task being one of
//! the LC processes (a process watched while it already runs is flagged by
//! the kernel only from its next switch) — so a transition event lost to a
//! full ring buffer, or never sent, is corrected at the next wake-up. At a
//! wake-up without events it also checks a slot that has named the same
//! non-LC task for a while against /proc (`slot_is_stale`): the kernel
//! can switch back to a preempted task without the tracepoint.
//!
//! It records every busy period and every gap between them in the
//! service's [`Profile`] (what `crate::protection` judges modes by), and
//! the time of each request lane's last idle edge in [`LaneEdges`].
//!
//! **Holding the lane** ([`Hold`], guard mode, when the writer has exactly
//! one CPU and that CPU is a batch lane): the writer, woken at a busy edge
//! on the batch lane at real-time priority, stays there — consuming the
//! ring buffer in a loop and publishing each edge as it comes, with the BPF
//! program told not to wake it — while the partner request lane is busy
//! (that spin *is* the guard's occupation: the batch is off the lane) and
//! through idle gaps shorter than the hold (lane time the batch does not
//! get, counted apart). One wake-up per burst of busy periods instead of
//! two per busy period; the guard on that lane is not rung meanwhile.
//! The hold spins at SCHED_FIFO within the lane's real-time bound
//! ([`crate::rt::LaneSpin`], shared with the lane's guard): when the bound
//! ends it inside a busy period, the guard is rung and takes over — at
//! SCHED_OTHER, the period's bound being spent.
//!
//! The harness uses it for `--lc-signal bpf` with
//! [`WriterOptions::default`] (no priority, no pinning, no bells).
//!
//! The parts: `thread` (the writer's thread: its set-up and its loop),
//! `spin` (holding the lane), `lane` (one request lane's transitions to
//! its LC line, and its reconciliation with the slot).

mod lane;
mod spin;
mod thread;

use lane::Record;
use thread::{Running, run, setup};

use crate::bell::Bell;
use crate::blind::OwnThreads;
use crate::error::DaemonError;
use crate::guard::LatencySummary;
use crate::lc::{DiscoveryOptions, LcTarget, Notice};
use crate::protection::profile::Profile;
use crate::rt::{LaneSpin, SpinBound};
use crate::worker::Worker;
use elfen_bpf::{Options, SlotReader};
use elfen_cmd::proc::gettid;
use elfen_shm::Page;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How the writer runs.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Source options (`watched_cpus` is set to the request lanes' CPUs).
    pub source: Options,
    /// SCHED_FIFO priority of the thread; 0 = leave it SCHED_OTHER.
    pub priority: u8,
    /// CPUs the thread may run on (`None`: unchanged). Keep it off the
    /// request lanes: waking there would preempt the LC service.
    pub cpus: Option<Vec<u32>>,
    /// LC discovery intervals.
    pub discovery: DiscoveryOptions,
    /// The longest sleep between looks at the stop flag.
    pub max_wait: Duration,
    /// Where notices go (`None`: printed on stderr).
    pub notices: Option<Sender<Notice>>,
    /// Bells rung after each write of a lane's LC line: `(lane, bell)`
    /// (disarmed ones are skipped).
    pub bells: Vec<(u32, Arc<Bell>)>,
    /// Bells rung at a busy edge of any watched CPU, with its time per CPU
    /// (blind isolation).
    pub cpu_bells: Vec<Arc<Bell>>,
    /// CPUs whose transitions are wanted besides the request lanes' (blind
    /// isolation: every CPU the LC may run on).
    pub extra_cpus: Vec<u32>,
    /// The writer's hold of its batch lane (guard mode; see the module docs).
    pub hold: Option<Arc<Hold>>,
    /// The bound on its real-time work (`crate::rt`): its hold spins within
    /// its lane's, and its own work at SCHED_FIFO takes at most the
    /// bound's share of the CPU (past it, SCHED_OTHER for the rest of a
    /// 100 ms window).
    pub bound: SpinBound,
    /// When the writer follows every busy edge (see [`Edges`]).
    pub edges: Edges,
}

/// When the writer is woken at every LC busy edge. Off the edges (the BPF
/// source only) the kernel counts the busy periods, gaps and wake-to-run
/// delays (`elfen_bpf::StatsReader`) and the writer takes them on its tick
/// — every `max_wait` or discovery interval — into the [`Profile`] and the
/// request lanes' LC lines (completed requests and their time; the lines
/// stay idle, nobody steps aside for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edges {
    /// Always: something reads the LC lines at each edge (instrumented
    /// batch threads napping on them, in mode cooperative or the harness's
    /// policies).
    Always,
    /// While one of its bells is armed (a guard, a freezer or blind
    /// isolation woken by events is applied); the modes the kernel protects
    /// alone (idle) cost no wake-up per edge.
    WhileArmed,
}

/// The writer's hold of its one batch lane (see the module docs): set by
/// the guard mode's protection, read by the writer at every wake-up.
#[derive(Debug)]
pub struct Hold {
    /// The request lane whose busy periods it follows (page index).
    pub request_lane: u32,
    /// The batch CPU the writer runs on, and so occupies while it spins.
    pub cpu: u32,
    hold_ns: AtomicU64,
    /// Spinning while the request lane was busy: the occupation (the
    /// writer's CPU time, ns).
    pub occupied_ns: AtomicU64,
    /// Spinning through idle gaps: lane time the batch did not get (CPU
    /// time, ns).
    pub held_ns: AtomicU64,
    /// Spins begun (each after a wake-up).
    pub spins: AtomicU64,
    /// Busy periods that began while the writer spun (no wake-up needed).
    pub caught: AtomicU64,
    /// The bound on its spinning (the lane's, shared with its guard); set
    /// by the protections' environment. Without one the writer never holds.
    spin: OnceLock<Arc<LaneSpin>>,
}

impl Hold {
    /// A hold of request lane `request_lane` from batch CPU `cpu`, off.
    pub fn new(request_lane: u32, cpu: u32) -> Hold {
        Hold {
            request_lane,
            cpu,
            hold_ns: AtomicU64::new(0),
            occupied_ns: AtomicU64::new(0),
            held_ns: AtomicU64::new(0),
            spins: AtomicU64::new(0),
            caught: AtomicU64::new(0),
            spin: OnceLock::new(),
        }
    }

    /// Gives the hold its lane's spin bound (the first one given stays).
    pub fn set_spin(&self, spin: Arc<LaneSpin>) {
        let _ = self.spin.set(spin);
    }

    /// The lane's spin bound, once given.
    pub fn spin(&self) -> Option<&Arc<LaneSpin>> {
        self.spin.get()
    }

    /// Sets the hold (0: the writer never spins).
    pub fn set_ns(&self, ns: u64) {
        self.hold_ns.store(ns, Relaxed);
    }

    /// The hold now, ns.
    pub fn ns(&self) -> u64 {
        self.hold_ns.load(Relaxed)
    }
}

/// Each request lane's last idle edge (`CLOCK_MONOTONIC` ns, 0 = none
/// yet), by page lane index: a guard holds its lane until that + the hold.
#[derive(Debug)]
pub struct LaneEdges {
    idle_since: Box<[AtomicU64]>,
}

impl LaneEdges {
    /// For a page of `lanes` lanes.
    pub fn new(lanes: u32) -> LaneEdges {
        LaneEdges {
            idle_since: (0..lanes).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Lane `lane`'s last idle edge.
    pub fn idle_since(&self, lane: u32) -> u64 {
        self.idle_since
            .get(lane as usize)
            .map_or(0, |a| a.load(Relaxed))
    }

    fn set(&self, lane: u32, ns: u64) {
        if let Some(a) = self.idle_since.get(lane as usize) {
            a.store(ns, Relaxed);
        }
    }
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            source: Options::default(),
            priority: 0,
            cpus: None,
            discovery: DiscoveryOptions::default(),
            max_wait: Duration::from_millis(100),
            notices: None,
            bells: Vec::new(),
            cpu_bells: Vec::new(),
            extra_cpus: Vec::new(),
            hold: None,
            bound: crate::config::GuardSection::default().spin_bound().0,
            edges: Edges::Always,
        }
    }
}

/// Counters of a running writer (readable while it runs).
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Transition events received.
    pub events: AtomicU64,
    /// `request_begin` calls.
    pub begins: AtomicU64,
    /// `request_end` calls.
    pub ends: AtomicU64,
    /// Lanes set from the slot's flag because no event said so (events
    /// lost to a full ring buffer, or not yet consumed).
    pub reconciled: AtomicU64,
    /// Times a slot named a task that /proc said no longer ran there while
    /// an LC thread was runnable there: the lane taken as busy.
    pub stale: AtomicU64,
    /// Whether the writer is off the busy edges now (the kernel counts;
    /// see [`Edges`]).
    pub off_edges: std::sync::atomic::AtomicBool,
    /// Switches between following the edges and the kernel's counts.
    pub edge_switches: AtomicU64,
    /// Busy periods the kernel counted while the writer was off the edges.
    pub kernel_periods: AtomicU64,
}

/// What a stopped writer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct WriterReport {
    /// Transition events received.
    pub events: u64,
    /// Busy periods begun on the LC lines.
    pub begins: u64,
    /// Busy periods ended.
    pub ends: u64,
    /// Lanes corrected from the slots.
    pub reconciled: u64,
    /// Stale slots seen (see [`WriterStats::stale`]).
    #[serde(default)]
    pub stale: u64,
    /// Busy periods the kernel counted while the writer was off the edges
    /// (see [`Edges`]).
    #[serde(default)]
    pub kernel_periods: u64,
    /// Events the BPF program dropped (full ring buffer), request lanes.
    pub dropped: u64,
    /// 100 ms windows in which the writer's own work reached its real-time
    /// bound's share and it ran the rest of the window at SCHED_OTHER.
    #[serde(default)]
    pub rt_demotions: u64,
    /// From the context switch that made a request lane busy (the event's
    /// time) to the writer running with the event. The writer runs on the
    /// batch lanes at SCHED_FIFO, so on a machine with one pair this is
    /// when an unmodified batch thread there left the lane.
    pub wake: LatencySummary,
}

/// The LC signal writer (see the module docs).
#[derive(Debug)]
pub struct LcWriter;

/// A running writer; [`LcWriterHandle::stop`] ends it (its LC lines end
/// open requests, so nothing waits on a busy lane).
#[derive(Debug)]
pub struct LcWriterHandle {
    worker: Worker<Result<WriterReport, DaemonError>>,
    stats: Arc<WriterStats>,
    source: String,
    bpf: bool,
    tid: u32,
    slots: SlotReader,
    lc_pids: Arc<Mutex<Vec<u32>>>,
    profile: Arc<Profile>,
    edges: Arc<LaneEdges>,
    quiet: Arc<OnceLock<OwnThreads>>,
}

/// What the thread reports once it runs.
struct Started {
    source: String,
    bpf: bool,
    tid: u32,
    slots: SlotReader,
}

impl LcWriter {
    /// Starts the writer for request lanes `lanes` (`(cpu, lane index)`)
    /// of `page` (attached with write access to the page file) and the LC
    /// service `target`. Returns once the source is open and the lanes are
    /// attached, or with the reason it could not.
    pub fn spawn(
        page: Arc<Page>,
        lanes: &[(u32, u32)],
        target: LcTarget,
        opts: WriterOptions,
    ) -> Result<LcWriterHandle, DaemonError> {
        let stats = Arc::new(WriterStats::default());
        let lc_pids = Arc::new(Mutex::new(Vec::new()));
        let profile = Arc::new(Profile::default());
        let edges = Arc::new(LaneEdges::new(page.lane_count()));
        let quiet: Arc<OnceLock<OwnThreads>> = Arc::default();
        let q2 = Arc::clone(&quiet);
        let lanes = lanes.to_vec();
        let (st2, p2) = (Arc::clone(&stats), Arc::clone(&lc_pids));
        let (pr2, e2) = (Arc::clone(&profile), Arc::clone(&edges));
        let (worker, s) = Worker::start(
            "elfen-lc-writer",
            None,
            move || {
                let mut notes = Vec::new();
                let (src, lanes, disc) = setup(&page, &lanes, target, &opts, &mut notes)?;
                let started = Started {
                    source: src.describe(),
                    bpf: src.is_bpf(),
                    tid: gettid(),
                    slots: src.slots().clone(),
                };
                let running = Running {
                    src,
                    lanes,
                    disc,
                    notes,
                    opts,
                };
                Ok((running, started))
            },
            move |r, stop| {
                let rec = Record {
                    stats: &st2,
                    profile: &pr2,
                    edges: &e2,
                    holding_cpu: None,
                };
                run(r, stop, rec, &p2, &q2)
            },
            || Ok(WriterReport::default()),
        )?;
        Ok(LcWriterHandle {
            worker,
            stats,
            source: s.source,
            bpf: s.bpf,
            tid: s.tid,
            slots: s.slots,
            lc_pids,
            profile,
            edges,
            quiet,
        })
    }
}

impl LcWriterHandle {
    /// The source in use (BPF, or the fallback and why BPF was not used).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the source is the BPF program.
    pub fn is_bpf(&self) -> bool {
        self.bpf
    }

    /// The writer thread's id.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// The per-CPU slots of the source (who runs where).
    pub fn slots(&self) -> &SlotReader {
        &self.slots
    }

    /// The running counters.
    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// The service's busy periods and gaps, recorded as they come.
    pub fn profile(&self) -> &Arc<Profile> {
        &self.profile
    }

    /// Each request lane's last idle edge.
    pub fn edges(&self) -> &Arc<LaneEdges> {
        &self.edges
    }

    /// The daemon's threads the writer wakes (guards, freezers, blind
    /// isolation, as they come and go): their switches, like the writer's
    /// own, are no transitions of the signal — a thread woken on a watched
    /// CPU would otherwise turn the preemption of an LC task there and its
    /// return into edges that wake it again. The first set given stays.
    pub fn quiet_threads(&self, own: OwnThreads) {
        let _ = self.quiet.set(own);
    }

    /// The LC processes watched now, shared (updated as discovery goes).
    pub fn lc_pids_shared(&self) -> Arc<Mutex<Vec<u32>>> {
        Arc::clone(&self.lc_pids)
    }

    /// The LC processes watched now.
    pub fn lc_pids(&self) -> Vec<u32> {
        self.lc_pids.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Whether the thread still runs (it ends only on stop or an error).
    pub fn is_running(&self) -> bool {
        self.worker.is_running()
    }

    /// Stops the thread (within `max_wait`), ends open requests on its LC
    /// lines and returns its report, or the error that stopped it.
    pub fn stop(self) -> Result<WriterReport, DaemonError> {
        self.worker
            .stop()
            .unwrap_or_else(|| Err(DaemonError::thread("lc writer", "panicked")))
    }
}
