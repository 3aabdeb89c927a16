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
//! [`Discovery`] (LC processes exiting and starting again) and reconciles
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
//!
//! The harness uses it for `--lc-signal bpf` with
//! [`WriterOptions::default`] (no priority, no pinning, no bells).

use crate::bell::Bell;
use crate::error::DaemonError;
use crate::guard::{LatencySummary, latency_histogram};
use crate::lc::{Discovery, DiscoveryOptions, LcTarget, Notice};
use crate::protection::profile::Profile;
use crate::worker::Worker;
use elfen_bpf::contract::ANNOUNCE_NS;
use elfen_bpf::{LcEvent, Options, SlotReader, Source};
use elfen_cmd::proc::{SchedClass, gettid, set_sched};
use elfen_runtime::LcLane;
use elfen_shm::Page;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
        }
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
    /// Events the BPF program dropped (full ring buffer), request lanes.
    pub dropped: u64,
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
}

/// What the thread reports once it runs.
struct Started {
    source: String,
    bpf: bool,
    tid: u32,
    slots: SlotReader,
}

/// One request lane as the writer drives it.
struct Lane {
    cpu: u32,
    lc: LcLane,
    bells: Vec<Arc<Bell>>,
    next_id: u64,
    /// A busy edge published at the LC's wake-up, its switch-in not yet
    /// seen.
    announced: Option<Announced>,
    /// The current busy period's start (its busy edge), ns.
    busy_start_ns: u64,
    /// The last idle edge, ns (0: none yet).
    idle_since_ns: u64,
}

/// Where a lane's transitions are recorded.
struct Record<'a> {
    stats: &'a WriterStats,
    profile: &'a Profile,
    edges: &'a LaneEdges,
    /// The batch CPU whose guard need not be rung (the writer holds it).
    holding_cpu: Option<u32>,
}

/// A busy edge announced by a WAKE event.
#[derive(Debug, Clone, Copy)]
struct Announced {
    /// The wake-up (`CLOCK_MONOTONIC` ns).
    event_ns: u64,
    /// When the writer published it (ran on its CPU).
    published_ns: u64,
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
                run(r, stop, rec, &p2)
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

/// Opens the source, attaches the lanes, starts discovery; then sets the
/// thread's class and CPUs (after the source, so a poll fallback's
/// scanner thread does not inherit them).
fn setup(
    page: &Arc<Page>,
    lanes: &[(u32, u32)],
    target: LcTarget,
    opts: &WriterOptions,
    notes: &mut Vec<Notice>,
) -> Result<(Source, Vec<Lane>, Discovery), DaemonError> {
    let mut sopts = opts.source.clone();
    let mut watched: Vec<u32> = lanes.iter().map(|&(cpu, _)| cpu).collect();
    watched.extend(&opts.extra_cpus);
    watched.sort_unstable();
    watched.dedup();
    sopts.watched_cpus = Some(watched);
    let mut src = Source::open(&sopts)?;
    let mut out = Vec::new();
    for &(cpu, lane) in lanes {
        let lc = LcLane::attach(Arc::clone(page), lane)?;
        let bells = opts
            .bells
            .iter()
            .filter(|(l, _)| *l == lane)
            .map(|(_, b)| Arc::clone(b))
            .collect();
        out.push(Lane {
            cpu,
            lc,
            bells,
            next_id: 1,
            announced: None,
            busy_start_ns: 0,
            idle_since_ns: 0,
        });
    }
    let (disc, n) = Discovery::start(target, opts.discovery, &mut src)?;
    notes.extend(n);
    if let Some(cpus) = &opts.cpus {
        elfen_topo::set_current_affinity(cpus)
            .map_err(|e| DaemonError::thread("lc writer", format!("pinning: {e}")))?;
    }
    if opts.priority > 0 {
        set_sched(0, SchedClass::Fifo(opts.priority)).map_err(|e| {
            DaemonError::os(
                format!("setting the writer thread to SCHED_FIFO {}", opts.priority),
                e,
            )
        })?;
    }
    Ok((src, out, disc))
}

/// The writer's state once its source is open and its lanes attached.
struct Running {
    src: Source,
    lanes: Vec<Lane>,
    disc: Discovery,
    notes: Vec<Notice>,
    opts: WriterOptions,
}

fn run(
    r: Running,
    stop: &AtomicBool,
    mut rec: Record<'_>,
    lc_pids: &Mutex<Vec<u32>>,
) -> Result<WriterReport, DaemonError> {
    let Running {
        mut src,
        mut lanes,
        mut disc,
        mut notes,
        opts,
    } = r;
    let slots = src.slots().clone();
    let notify = |n: Notice| match &opts.notices {
        Some(tx) => {
            let _ = tx.send(n);
        }
        None if matches!(n, Notice::Warning(_)) => crate::logging::warn(n),
        None => crate::logging::info(n),
    };
    notes.drain(..).for_each(notify);
    *lc_pids.lock().unwrap_or_else(|p| p.into_inner()) = disc.pids();
    let mut events: Vec<LcEvent> = Vec::with_capacity(64);
    let mut wake = latency_histogram();
    let mut budget = SpinBudget::default();
    let result = loop {
        if stop.load(Relaxed) {
            break Ok(());
        }
        let now = Instant::now();
        // Whole milliseconds, rounded up: the ring buffer's poll takes
        // milliseconds, and would turn a shorter wait into a busy loop.
        let ms = disc
            .until_next(now)
            .min(opts.max_wait)
            .as_micros()
            .div_ceil(1000);
        let timeout = Duration::from_millis(ms.max(1) as u64);
        if let Err(e) = src.wait_events(timeout, |e| events.push(e)) {
            break Err(DaemonError::from(e));
        }
        let timed_out = events.is_empty();
        let woke_ns = elfen_shm::clock::monotonic_ns();
        rec.holding_cpu = opts
            .hold
            .as_deref()
            .filter(|h| h.ns() > 0 && budget.allows(woke_ns))
            .map(|h| h.cpu);
        handle(&mut lanes, &mut events, woke_ns, &mut wake, &rec, &opts);
        let now_ns = elfen_shm::clock::monotonic_ns();
        for l in lanes.iter_mut() {
            let runs_lc = slots.lc_busy(l.cpu)
                || match slots.snapshot(l.cpu) {
                    Ok(s) if disc.runs_lc(&s) => true,
                    // only at a wake-up without events: the /proc reads
                    // stay off the path of every transition
                    Ok(s)
                        if timed_out
                            && slot_is_stale(&s, l.cpu, now_ns)
                            && disc.runnable_on(l.cpu) =>
                    {
                        rec.stats.stale.fetch_add(1, Relaxed);
                        true
                    }
                    _ => false,
                };
            let busy = reconciled(l, runs_lc, now_ns);
            if busy != l.lc.is_busy() {
                rec.stats.reconciled.fetch_add(1, Relaxed);
                set_busy(l, busy, elfen_shm::clock::monotonic_ns(), None, &rec);
            }
        }
        let now = Instant::now();
        if disc.until_next(now).is_zero() {
            disc.tick(&mut src, now, &mut notes);
            if !notes.is_empty() {
                *lc_pids.lock().unwrap_or_else(|p| p.into_inner()) = disc.pids();
                notes.drain(..).for_each(notify);
            }
        }
        if let Some(h) = opts.hold.as_deref() {
            let now_ns = elfen_shm::clock::monotonic_ns();
            if holds(h, &lanes, now_ns) && budget.allows(now_ns) {
                let hold = Spin {
                    hold: h,
                    stop,
                    disc: &disc,
                    budget: &mut budget,
                };
                if let Err(e) = hold.run(
                    &mut src,
                    &mut lanes,
                    &mut events,
                    &mut wake,
                    &mut rec,
                    &opts,
                ) {
                    break Err(e);
                }
            }
        }
    };
    let dropped = lanes
        .iter()
        .filter_map(|l| slots.snapshot(l.cpu).ok())
        .map(|s| u64::from(s.dropped))
        .sum();
    // Dropping the lanes ends open requests (and wakes futex sleepers).
    for l in lanes.drain(..) {
        let bells = l.bells.clone();
        drop(l);
        bells.iter().for_each(|b| b.ring());
    }
    let stats = rec.stats;
    result.map(|()| WriterReport {
        events: stats.events.load(Relaxed),
        begins: stats.begins.load(Relaxed),
        ends: stats.ends.load(Relaxed),
        reconciled: stats.reconciled.load(Relaxed),
        stale: stats.stale.load(Relaxed),
        dropped,
        wake: LatencySummary::of(&wake),
    })
}

/// Handles the events taken, at `woke_ns`: each request lane's transitions
/// to its LC line; busy edges of any CPU to the per-CPU bells.
fn handle(
    lanes: &mut [Lane],
    events: &mut Vec<LcEvent>,
    woke_ns: u64,
    wake: &mut hdrhistogram::Histogram<u64>,
    rec: &Record<'_>,
    opts: &WriterOptions,
) {
    rec.stats.events.fetch_add(events.len() as u64, Relaxed);
    for e in events.drain(..) {
        if e.busy {
            opts.cpu_bells
                .iter()
                .for_each(|b| b.ring_busy_on(e.cpu, e.time_ns));
        }
        if let Some(l) = lanes.iter_mut().find(|l| l.cpu == e.cpu) {
            on_event(l, &e, woke_ns, wake, rec);
        }
    }
}

/// Whether the writer holds its lane now: a hold is set and its request
/// lane is busy, or went idle less than the hold ago.
fn holds(h: &Hold, lanes: &[Lane], now_ns: u64) -> bool {
    let hold = h.ns();
    if hold == 0 {
        return false;
    }
    let Some(l) = lanes.iter().find(|l| l.lc.lane() == h.request_lane) else {
        return false;
    };
    l.lc.is_busy() || now_ns.saturating_sub(l.idle_since_ns) < hold
}

/// The kernel throttles real-time threads that run more than 95 % of a
/// second (`sched_rt_runtime_us`): the writer spins at most this share of
/// each second, so it is never throttled in the middle of publishing.
const SPIN_SHARE_MAX: f64 = 0.85;

/// The writer's spinning in the current second.
#[derive(Debug, Default)]
struct SpinBudget {
    second_ns: u64,
    spun_ns: u64,
}

impl SpinBudget {
    fn allows(&mut self, now_ns: u64) -> bool {
        if now_ns.saturating_sub(self.second_ns) >= 1_000_000_000 {
            self.second_ns = now_ns;
            self.spun_ns = 0;
        }
        (self.spun_ns as f64) < SPIN_SHARE_MAX * 1e9
    }

    fn spent(&mut self, ns: u64) {
        self.spun_ns += ns;
    }
}

/// One spell of holding the lane (see the module docs).
struct Spin<'a> {
    hold: &'a Hold,
    stop: &'a AtomicBool,
    disc: &'a Discovery,
    budget: &'a mut SpinBudget,
}

impl Spin<'_> {
    /// Spins, consuming events, until the request lane has been idle for
    /// the hold (or the spin budget, the stop flag, or discovery's next
    /// look ends it). The BPF program does not wake the writer meanwhile;
    /// after the spin it does again, and events that came in between are
    /// taken by the next wait at once.
    fn run(
        self,
        src: &mut elfen_bpf::Source,
        lanes: &mut [Lane],
        events: &mut Vec<LcEvent>,
        wake: &mut hdrhistogram::Histogram<u64>,
        rec: &mut Record<'_>,
        opts: &WriterOptions,
    ) -> Result<(), DaemonError> {
        let h = self.hold;
        let Some(i) = lanes.iter().position(|l| l.lc.lane() == h.request_lane) else {
            return Ok(());
        };
        src.set_reader_polling(true);
        h.spins.fetch_add(1, Relaxed);
        rec.holding_cpu = Some(h.cpu);
        let t0 = elfen_shm::clock::monotonic_ns();
        // CPU time, read at each change of the lane's state: spinning's
        // cost is the CPU it takes, not the wall time it spans
        let mut last = crate::guard::thread_cpu_ns();
        let mut was_busy = lanes[i].lc.is_busy();
        let mut checks = 0u32;
        let result = loop {
            if let Err(e) = src.consume_events(|e| events.push(e)) {
                break Err(DaemonError::from(e));
            }
            let now = elfen_shm::clock::monotonic_ns();
            if !events.is_empty() {
                let begins = rec.stats.begins.load(Relaxed);
                handle(lanes, events, now, wake, rec, opts);
                let began = rec.stats.begins.load(Relaxed) - begins;
                h.caught.fetch_add(began, Relaxed);
            }
            // a switch the tracepoint did not report, or an announcement
            // whose LC never ran: the slot decides, as after a wake-up —
            // once its last switch is old enough that its event, sent just
            // after the slot is written, would have come
            let l = &mut lanes[i];
            let runs_lc = src.lc_busy(l.cpu);
            if runs_lc != l.lc.is_busy() {
                let settled = src
                    .snapshot(l.cpu)
                    .is_ok_and(|s| now.saturating_sub(s.switch_ns) > IN_FLIGHT_NS);
                let busy = reconciled(l, runs_lc, now);
                if settled && busy != l.lc.is_busy() {
                    rec.stats.reconciled.fetch_add(1, Relaxed);
                    set_busy(l, busy, now, None, rec);
                }
            }
            let busy = l.lc.is_busy();
            let done = self.stop.load(Relaxed) || !holds(h, lanes, now);
            if busy != was_busy || done {
                let cpu = crate::guard::thread_cpu_ns();
                let d = cpu.saturating_sub(last);
                if was_busy {
                    h.occupied_ns.fetch_add(d, Relaxed);
                } else {
                    h.held_ns.fetch_add(d, Relaxed);
                }
                last = cpu;
                was_busy = busy;
            }
            if done {
                break Ok(());
            }
            checks = checks.wrapping_add(1);
            if checks % 1024 == 0
                && (self.disc.until_next(Instant::now()).is_zero() || !self.budget.allows(now))
            {
                break Ok(());
            }
            std::hint::spin_loop();
        };
        let end = elfen_shm::clock::monotonic_ns();
        self.budget.spent(end - t0);
        src.set_reader_polling(false);
        rec.holding_cpu = None;
        // the spin ends inside a busy period (its budget, discovery): the
        // guard of this lane, not rung meanwhile, takes over
        let l = &lanes[i];
        if l.lc.is_busy() {
            l.bells
                .iter()
                .filter(|b| b.sleeper_cpu() == Some(h.cpu))
                .for_each(|b| b.ring_busy(l.busy_start_ns));
        }
        result
    }
}

/// How long after a slot's switch its transition event is surely in the
/// ring buffer (the program writes the slot, then sends the event).
const IN_FLIGHT_NS: u64 = 50_000;

/// One event of a lane's CPU, handled when the writer runs at `woke_ns`.
/// The off-lane time (`wake`) is the LC's switch-in → the writer running
/// on the batch lane to publish the busy edge: 0 when the LC's wake-up
/// announced the edge before the switch-in.
fn on_event(
    l: &mut Lane,
    e: &LcEvent,
    woke_ns: u64,
    wake: &mut hdrhistogram::Histogram<u64>,
    rec: &Record<'_>,
) {
    if e.woken {
        l.announced = Some(Announced {
            event_ns: e.time_ns,
            published_ns: woke_ns,
        });
        set_busy(l, true, e.time_ns, None, rec);
        return;
    }
    if e.busy {
        let published = l.announced.take().map_or(woke_ns, |a| a.published_ns);
        let _ = wake.record(published.saturating_sub(e.time_ns).max(1));
    } else {
        l.announced = None;
    }
    let busy_ns = (!e.busy && e.busy_ns > 0).then_some(e.busy_ns);
    set_busy(l, e.busy, e.time_ns, busy_ns, rec);
}

/// How long a slot must have shown the same non-LC task before the writer
/// asks /proc whether that task still runs there.
const STALE_AFTER_NS: u64 = 5_000_000;

/// Whether `cpu`'s slot names a task that, by /proc, no longer runs there
/// although no switch was recorded since (the kernel has been seen to
/// switch back to a preempted task without the `sched_switch` tracepoint,
/// for BPF and ftrace alike). The idle task (tid 0) is taken at its word.
fn slot_is_stale(s: &elfen_bpf::SlotSnapshot, cpu: u32, now_ns: u64) -> bool {
    if s.tid == 0 || !s.valid() || now_ns.saturating_sub(s.switch_ns) < STALE_AFTER_NS {
        return false;
    }
    elfen_bpf::proc::task_state(s.tgid, s.tid).is_none_or(|(state, c)| state != 'R' || c != cpu)
}

/// What a lane's LC line should say, given whether its slot shows an LC
/// task running (`runs_lc`): busy while it does, and from an announced
/// wake-up until the switch-in. A woken LC task that has not run here
/// `ANNOUNCE_NS` later never will: the announcement is dropped (at the next
/// wake-up: no timer for it, and its switch-in's event would not have woken
/// this thread either).
fn reconciled(l: &mut Lane, runs_lc: bool, now_ns: u64) -> bool {
    match l.announced {
        _ if runs_lc => true,
        Some(a) if now_ns.saturating_sub(a.event_ns) < ANNOUNCE_NS => true,
        Some(_) => {
            l.announced = None;
            false
        }
        None => false,
    }
}

/// Writes one transition to a lane's LC line at `time_ns` and rings its
/// bells (nothing when the line already says so); records the busy period
/// that ended (`busy_ns` when the source measured it on the CPU) or the
/// gap that did. The guard on the CPU the writer holds is not rung.
fn set_busy(l: &mut Lane, busy: bool, time_ns: u64, busy_ns: Option<u64>, rec: &Record<'_>) {
    if busy == l.lc.is_busy() {
        return;
    }
    if busy {
        l.lc.request_begin(l.next_id);
        l.next_id += 1;
        rec.stats.begins.fetch_add(1, Relaxed);
        if l.idle_since_ns > 0 {
            rec.profile
                .gaps
                .record(time_ns.saturating_sub(l.idle_since_ns).max(1));
        }
        l.busy_start_ns = time_ns;
        for b in &l.bells {
            if rec.holding_cpu.is_some() && b.sleeper_cpu() == rec.holding_cpu {
                continue;
            }
            b.ring_busy(time_ns);
        }
    } else {
        l.lc.request_end();
        rec.stats.ends.fetch_add(1, Relaxed);
        let len = busy_ns.unwrap_or_else(|| time_ns.saturating_sub(l.busy_start_ns));
        if l.busy_start_ns > 0 {
            rec.profile.busy.record(len.max(1));
        }
        l.idle_since_ns = time_ns;
        rec.edges.set(l.lc.lane(), time_ns);
        l.bells
            .iter()
            .filter(|b| !b.busy_only())
            .for_each(|b| b.ring_if_armed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elfen_cmd::proc::gettid;
    use elfen_shm::PageSpec;

    fn lane(dir: &std::path::Path) -> Lane {
        let spec = PageSpec::for_pairs(&[(0, vec![1])], 0, 0);
        let page = Arc::new(Page::create(dir.join("sig"), &spec).unwrap());
        Lane {
            cpu: 0,
            lc: LcLane::attach(page, 0).unwrap(),
            bells: Vec::new(),
            next_id: 1,
            announced: None,
            busy_start_ns: 0,
            idle_since_ns: 0,
        }
    }

    struct Rec {
        stats: WriterStats,
        profile: Profile,
        edges: LaneEdges,
    }

    impl Rec {
        fn new() -> Rec {
            Rec {
                stats: WriterStats::default(),
                profile: Profile::default(),
                edges: LaneEdges::new(2),
            }
        }
        fn rec(&self) -> Record<'_> {
            Record {
                stats: &self.stats,
                profile: &self.profile,
                edges: &self.edges,
                holding_cpu: None,
            }
        }
    }

    fn event(busy: bool, woken: bool, time_ns: u64) -> LcEvent {
        LcEvent {
            cpu: 0,
            busy,
            woken,
            time_ns,
            tid: 7,
            tgid: 7,
            cgroup_id: 0,
            busy_ns: 0,
        }
    }

    #[test]
    fn an_announced_edge_is_busy_until_the_switch_in_and_timed_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = lane(dir.path());
        let r = Rec::new();
        let mut wake = latency_histogram();
        // woken at 1,000 ns, published when the writer ran at 5,000
        on_event(
            &mut l,
            &event(true, true, 1_000),
            5_000,
            &mut wake,
            &r.rec(),
        );
        assert!(l.lc.is_busy(), "published at the wake-up");
        // before the switch-in the slot shows no LC task: still busy
        assert!(reconciled(&mut l, false, 1_000 + ANNOUNCE_NS - 1));
        // the switch-in at 9,000: the writer was there 4,000 ns before it
        on_event(
            &mut l,
            &event(true, false, 9_000),
            20_000,
            &mut wake,
            &r.rec(),
        );
        assert!(l.announced.is_none());
        assert_eq!(wake.len(), 1);
        assert!(wake.max() <= 1, "off-lane 0 (recorded as 1 ns)");
        assert_eq!(r.stats.begins.load(Relaxed), 1, "one request, not two");
        on_event(
            &mut l,
            &event(false, false, 30_000),
            31_000,
            &mut wake,
            &r.rec(),
        );
        assert!(!l.lc.is_busy());
        // not announced: timed from the switch-in to the writer running
        on_event(
            &mut l,
            &event(true, false, 40_000),
            52_000,
            &mut wake,
            &r.rec(),
        );
        assert_eq!(wake.len(), 2);
        assert!(wake.max() >= 11_900, "{}", wake.max());
    }

    #[test]
    fn a_woken_lc_task_that_never_runs_here_is_dropped_after_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = lane(dir.path());
        let r = Rec::new();
        let mut wake = latency_histogram();
        on_event(
            &mut l,
            &event(true, true, 1_000),
            2_000,
            &mut wake,
            &r.rec(),
        );
        assert!(reconciled(&mut l, false, 1_000 + ANNOUNCE_NS / 2));
        assert!(l.announced.is_some());
        assert!(
            !reconciled(&mut l, false, 1_000 + ANNOUNCE_NS),
            "window over"
        );
        assert!(l.announced.is_none());
        // the slot decides once the LC runs
        assert!(reconciled(&mut l, true, 0));
    }

    #[test]
    fn a_slot_is_stale_when_its_task_no_longer_runs_there() {
        let _pin = elfen_topo::PinGuard::new(0).unwrap();
        let me = std::process::id();
        let now = elfen_shm::clock::monotonic_ns();
        let slot = |tgid: u32, tid: u32, switch_ns: u64| elfen_bpf::SlotSnapshot {
            cpu: 0,
            flags: elfen_bpf::contract::flags::VALID,
            switch_ns,
            tid,
            tgid,
            ..Default::default()
        };
        let old = now - 10 * STALE_AFTER_NS;
        // this thread runs on cpu 0: the slot is right
        assert!(!slot_is_stale(&slot(me, gettid(), old), 0, now));
        // the same thread named for another CPU, a sleeping thread, a gone
        // one: stale
        assert!(slot_is_stale(&slot(me, gettid(), old), 1, now));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ttx, trx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            ttx.send(gettid()).unwrap();
            rx.recv().ok();
        });
        let tid = trx.recv().unwrap();
        let asleep = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            elfen_bpf::proc::task_state(me, tid).is_some_and(|(s, _)| s == 'S')
        });
        assert!(asleep);
        assert!(slot_is_stale(&slot(me, tid, old), 0, now));
        tx.send(()).unwrap();
        sleeper.join().unwrap();
        assert!(slot_is_stale(&slot(me, u32::MAX, old), 0, now));
        // the idle task, a recent switch, a slot never written: taken as is
        assert!(!slot_is_stale(&slot(0, 0, old), 0, now));
        assert!(!slot_is_stale(&slot(me, tid, now - 1000), 0, now));
        let mut never = slot(me, tid, old);
        never.flags = 0;
        assert!(!slot_is_stale(&never, 0, now));
    }
}
