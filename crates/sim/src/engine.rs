//! The discrete-event engine: one **server** (a single core, or a chip's
//! worker cores behind a dispatcher with one shared request queue) under one
//! configuration at one load.
//!
//! # Model
//!
//! * A **core** has `smt_ways` **lanes** (hardware threads). Lane 0 is the
//!   **request lane**: it runs LC requests, one at a time, taken in FIFO order
//!   from the server's request queue (on a chip, whichever worker core's
//!   request lane is free takes the head of the shared queue; the dispatcher
//!   core only queues and hands out requests and is not simulated further).
//!   Lanes `1..smt_ways` are **batch lanes**: one CPU-bound batch thread each.
//! * A request needs `demand` ns of work. While `k` batch lanes of its core
//!   execute, it progresses at `1 / (1 + (s - 1) k)` of its alone rate
//!   (`s` = the batch kind's `lc_slowdown`); the engine re-plans its
//!   completion whenever `k` changes.
//! * Under an Elfen **policy** each batch lane carries an
//!   [`elfen_policy::Policy`] and calls [`Policy::step`] at every *check*:
//!   whenever its core's signals change (request begins or ends, queue length
//!   changes for budget policies), when its budget expires (scheduled as an
//!   event while [`Policy::time_sensitive`]) and when it wakes. A `Nap`
//!   decision **steps aside**: the batch keeps executing (and interfering) for
//!   `nap_ns`, then **naps** (lane released). A napping lane is woken when its
//!   request lane goes idle, resumes `wake_ns` later and checks again.
//! * Baselines: `Alone` (batch lanes unused), `StaticPartition` (batch owns
//!   whole cores, the LC the rest), `SchedIdle` (batch at SCHED_IDLE on every
//!   lane, never steps aside on batch lanes; a request arriving at an idle
//!   request lane waits `os_preempt_ns` for the OS to preempt the batch
//!   thread there), `Blind` (PerfIso's law over whole cores, reacting after
//!   `blind_react_ns`).
//!
//! # Speed
//!
//! Events are 32-byte `Copy` values in a binary heap; invalidated events are
//! skipped by a per-core / per-lane epoch number instead of being
//! removed. Nothing is allocated per event, nothing is dynamically
//! dispatched, and the next arrival waits in its own slot, not in the heap.

use crate::arrivals::Arrivals;
use crate::batch::Interference;
use crate::demand::Demand;
use elfen_policy::blind::BlindIsolation;
use elfen_policy::{Decision, Observation, Policy, PolicyConfig, PolicyKind};
use elfen_results::Distribution;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// The simulated hardware of one server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerModel {
    /// Cores that run LC requests (a chip's dispatcher core excluded).
    pub worker_cores: u32,
    /// Lanes per core (1 = SMT off).
    pub smt_ways: u32,
}

/// How batch work shares the server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// No batch work (the paper's "LC alone", SMT lanes unused).
    Alone,
    /// One batch thread per batch lane, governed by an Elfen policy
    /// (`Unmanaged` = naive co-run).
    Elfen(PolicyConfig),
    /// Batch owns `batch_cores` whole worker cores (all their lanes); the LC
    /// runs on the others, whose batch lanes stay unused.
    StaticPartition {
        /// Cores given to the batch.
        batch_cores: u32,
    },
    /// Batch threads at SCHED_IDLE on every lane: batch lanes always co-run;
    /// the request lane runs batch while idle and is taken back by the OS
    /// `os_preempt_ns` after a request arrives.
    SchedIdle,
    /// PerfIso CPU blind isolation over whole worker cores.
    Blind(BlindIsolation),
}

impl Mode {
    /// Batch threads this mode runs (the reference for batch progress: each
    /// of them alone on an otherwise idle core progresses at rate 1).
    pub fn batch_threads(&self, server: ServerModel) -> u32 {
        let (w, n) = (server.worker_cores, server.smt_ways);
        match self {
            Mode::Alone => 0,
            Mode::Elfen(_) => w * (n - 1),
            Mode::StaticPartition { batch_cores } => batch_cores * n,
            Mode::SchedIdle | Mode::Blind(_) => w * n,
        }
    }
}

/// Latencies of the mechanisms, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Step-aside latency: from a `Nap` decision until the batch lane stops
    /// executing (check interval + nap entry). The batch keeps co-running.
    pub nap_ns: u64,
    /// Wake latency: from the request lane going idle until a napping batch
    /// lane executes again.
    pub wake_ns: u64,
    /// OS-priority baseline: delay before a request preempts the SCHED_IDLE
    /// batch thread on its request lane.
    pub os_preempt_ns: u64,
    /// Blind isolation: delay from a change of idle cores until the batch's
    /// core set follows (poll + cpuset update).
    pub blind_react_ns: u64,
}

/// Everything one run (one repetition of one point on one server) needs.
#[derive(Debug, Clone)]
pub struct RunSpec<'a> {
    /// Hardware.
    pub server: ServerModel,
    /// Batch sharing.
    pub mode: Mode,
    /// Interference of the batch kind.
    pub interference: Interference,
    /// Mechanism latencies.
    pub timing: Timing,
    /// Arrival process (at this point's RPS).
    pub arrivals: &'a Arrivals,
    /// Demand sampler.
    pub demand: &'a Demand,
    /// Measured requests.
    pub requests: u64,
    /// Requests before the measured ones (not in any figure).
    pub warmup_requests: u64,
    /// Seed of the arrival stream.
    pub arrival_seed: u64,
    /// Seed of the demand stream.
    pub demand_seed: u64,
    /// Keep the distribution of request-lane idle periods (Figure 5).
    pub record_idle: bool,
}

/// What one run measured. Lane-time sums are over the measurement window:
/// from the arrival of the first measured request to the arrival of the last.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// Latency of each measured request in arrival order, ns.
    pub latencies_ns: Vec<u64>,
    /// Length of the measurement window, ns.
    pub window_ns: u64,
    /// Lane-ns spent executing requests.
    pub lc_lane_ns: u64,
    /// Lane-ns spent executing batch with the core's request lane not running a request.
    pub batch_alone_lane_ns: u64,
    /// Lane-ns spent executing batch while the core's request lane runs a request.
    pub batch_corun_lane_ns: u64,
    /// Nap decisions in the window.
    pub naps: u64,
    /// Wakes (batch lane resumes after a nap) in the window.
    pub wakes: u64,
    /// Events processed (arrivals included, invalidated events excluded).
    pub events: u64,
    /// Invalidated events popped and skipped.
    pub stale_events: u64,
    /// Longest time a measured request co-ran with batch work, ns.
    pub corun_max_ns: u64,
    /// Total co-run time of measured requests, ns.
    pub corun_sum_ns: u64,
    /// Request-lane idle periods ending in the window, µs (with sums).
    pub idle_us: Option<Distribution>,
    /// Cores utilization is divided by (all worker cores).
    pub util_cores: u32,
    /// Batch threads (see [`Mode::batch_threads`]).
    pub batch_threads: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ReqState {
    Free,
    /// OS-priority: a request is assigned; the OS preempts the batch thread.
    Starting,
    Busy,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LaneState {
    /// Executing batch code, checking its policy at every signal change.
    Running,
    /// Decided to nap; still executing for `nap_ns`.
    SteppingAside,
    /// Lane released.
    Napping,
    /// Woken; executes again after `wake_ns`.
    Waking,
}

#[derive(Clone, Copy, Debug)]
enum EvKind {
    Complete,
    Start,
    NapDone,
    WakeDone,
    Expiry,
    BlindUpdate,
}

#[derive(Clone, Copy, Debug)]
struct Ev {
    t: u64,
    seq: u64,
    idx: u32,
    epoch: u32,
    kind: EvKind,
}

impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        self.t == o.t && self.seq == o.seq
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    // Reversed: BinaryHeap is a max-heap, we want the earliest (then the
    // first scheduled) on top.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Req {
    id: u64,
    arrival: u64,
    demand: u64,
}

/// One worker core: its request lane and the count of its executing batch lanes.
#[derive(Clone, Debug)]
struct Core {
    state: ReqState,
    req: Req,
    /// Work left on the running request, in ns of alone execution.
    remaining: f64,
    /// When `remaining` was last brought up to date.
    last: u64,
    /// Co-run time of the running request so far.
    corun_ns: u64,
    /// Batch lanes of this core executing now (Running or SteppingAside).
    active: u32,
    epoch: u32,
    idle_since: u64,
    /// A batch thread executes on the request lane (OS-priority, idle lane).
    rl_batch: bool,
    dirty: bool,
}

/// One batch lane under a policy.
#[derive(Clone, Copy, Debug)]
struct Lane {
    core: u32,
    state: LaneState,
    epoch: u32,
    policy: Policy,
    /// When the pending budget-expiry event fires (u64::MAX: none).
    expiry_at: u64,
}

struct BlindState {
    law: BlindIsolation,
    /// Cores now given to the batch.
    s: u32,
    pending: bool,
    secondary: Vec<u32>,
}

/// Runs one simulation.
pub fn run(spec: &RunSpec<'_>) -> RunOutput {
    let mut e = Engine::new(spec);
    e.run();
    e.finish()
}

struct Engine<'a> {
    arrivals: &'a Arrivals,
    demand: &'a Demand,
    /// `lc_slowdown - 1`: extra request time per executing batch lane.
    extra: f64,
    timing: Timing,
    smt_ways: u32,
    util_cores: u32,
    batch_threads: u32,
    /// Signal every core when the queue length changes (budget policies read it).
    budget_signals: bool,
    /// Dynamic refresh: the LC's IPC alone; it observes `ref / factor` while co-running.
    dyn_ref_ipc: Option<f64>,
    sched_idle: bool,
    blind: Option<BlindState>,
    /// Policy-managed batch lanes per core.
    nb: usize,

    now: u64,
    seq: u64,
    heap: BinaryHeap<Ev>,
    cores: Vec<Core>,
    lanes: Vec<Lane>,
    queue: VecDeque<Req>,
    free: Vec<u32>,
    dirty: Vec<u32>,

    lc_lanes: u64,
    batch_alone: u64,
    batch_corun: u64,
    acc_lc: u64,
    acc_ba: u64,
    acc_bc: u64,
    last_t: u64,
    w0: u64,
    w1: u64,

    next_arrival: u64,
    issued: u64,
    total: u64,
    warmup: u64,
    rng_a: SmallRng,
    rng_d: SmallRng,

    lat: Vec<u64>,
    completed: u64,
    naps: u64,
    wakes: u64,
    events: u64,
    stale: u64,
    corun_max: u64,
    corun_sum: u64,
    idle: Option<Distribution>,
}

impl<'a> Engine<'a> {
    fn new(spec: &RunSpec<'a>) -> Engine<'a> {
        let s = spec.server;
        let n = s.smt_ways;
        let (lc_cores, nb, policy) = match spec.mode {
            Mode::Alone | Mode::Blind(_) => (s.worker_cores, 0, None),
            Mode::StaticPartition { batch_cores } => (s.worker_cores - batch_cores, 0, None),
            Mode::Elfen(cfg) => (s.worker_cores, (n - 1) as usize, Some(cfg)),
            // The batch lanes' threads never step aside: the OS does not know
            // about the request lane. Same state machine as naive co-run.
            Mode::SchedIdle => (
                s.worker_cores,
                (n - 1) as usize,
                Some(PolicyConfig::simple(PolicyKind::Unmanaged)),
            ),
        };
        let sched_idle = matches!(spec.mode, Mode::SchedIdle);
        let total = spec.warmup_requests + spec.requests;
        let mut cores = Vec::with_capacity(lc_cores as usize);
        let mut lanes = Vec::with_capacity(lc_cores as usize * nb);
        for c in 0..lc_cores {
            cores.push(Core {
                state: ReqState::Free,
                req: Req::default(),
                remaining: 0.0,
                last: 0,
                corun_ns: 0,
                active: nb as u32,
                epoch: 0,
                idle_since: 0,
                rl_batch: sched_idle,
                dirty: false,
            });
            if let Some(cfg) = policy {
                for _ in 0..nb {
                    lanes.push(Lane {
                        core: c,
                        state: LaneState::Running,
                        epoch: 0,
                        policy: Policy::new(cfg).expect("policy validated with the config"),
                        expiry_at: u64::MAX,
                    });
                }
            }
        }
        let mut batch_alone = (lc_cores as usize * nb) as u64;
        if sched_idle {
            batch_alone += u64::from(lc_cores);
        }
        if let Mode::StaticPartition { batch_cores } = spec.mode {
            batch_alone += u64::from(batch_cores * n);
        }
        let budget_signals = policy.is_some_and(|p| p.kind.uses_budget());
        let dyn_ref_ipc = policy
            .filter(|p| p.kind == PolicyKind::DynamicRefresh)
            .and_then(|p| p.ref_ipc);
        let mut rng_a = SmallRng::seed_from_u64(spec.arrival_seed);
        let first = spec.arrivals.gap_ns(0, &mut rng_a);
        let mut e = Engine {
            arrivals: spec.arrivals,
            demand: spec.demand,
            extra: spec.interference.lc_slowdown - 1.0,
            timing: spec.timing,
            smt_ways: n,
            util_cores: s.worker_cores,
            batch_threads: spec.mode.batch_threads(s),
            budget_signals,
            dyn_ref_ipc,
            sched_idle,
            blind: None,
            nb,
            now: 0,
            seq: 0,
            heap: BinaryHeap::with_capacity(64 + 4 * (lc_cores as usize) * (nb + 1)),
            cores,
            lanes,
            queue: VecDeque::with_capacity(1024),
            free: (0..lc_cores).rev().collect(),
            dirty: Vec::with_capacity(lc_cores as usize),
            lc_lanes: 0,
            batch_alone,
            batch_corun: 0,
            acc_lc: 0,
            acc_ba: 0,
            acc_bc: 0,
            last_t: 0,
            w0: u64::MAX,
            w1: u64::MAX,
            next_arrival: first,
            issued: 0,
            total,
            warmup: spec.warmup_requests,
            rng_a,
            rng_d: SmallRng::seed_from_u64(spec.demand_seed),
            lat: vec![0; spec.requests as usize],
            completed: 0,
            naps: 0,
            wakes: 0,
            events: 0,
            stale: 0,
            corun_max: 0,
            corun_sum: 0,
            idle: spec
                .record_idle
                .then(|| Distribution::log_buckets("us", 1.0, 1e7, 10)),
        };
        if let Mode::Blind(law) = spec.mode {
            e.blind = Some(BlindState {
                law,
                s: 0,
                pending: true,
                secondary: Vec::with_capacity(s.worker_cores as usize),
            });
            e.push(0, EvKind::BlindUpdate, 0, 0);
        }
        // First check of every batch lane: the request lane is idle.
        for c in 0..e.cores.len() {
            e.signal_core(c);
        }
        e
    }

    #[inline]
    fn push(&mut self, t: u64, kind: EvKind, idx: usize, epoch: u32) {
        self.seq += 1;
        self.heap.push(Ev {
            t,
            seq: self.seq,
            idx: idx as u32,
            epoch,
            kind,
        });
    }

    #[inline]
    fn in_window(&self) -> bool {
        self.now >= self.w0 && self.now <= self.w1
    }

    #[inline]
    fn factor(&self, active: u32) -> f64 {
        1.0 + self.extra * f64::from(active)
    }

    /// Moves the clock to `t`, integrating lane occupancy over the part of
    /// `[last, t]` inside the measurement window.
    #[inline]
    fn advance(&mut self, t: u64) {
        let lo = self.last_t.max(self.w0);
        let hi = t.min(self.w1);
        if hi > lo {
            let d = hi - lo;
            self.acc_lc += self.lc_lanes * d;
            self.acc_ba += self.batch_alone * d;
            self.acc_bc += self.batch_corun * d;
        }
        self.last_t = t;
        self.now = t;
    }

    fn run(&mut self) {
        while self.completed < self.total {
            let heap_t = self.heap.peek().map_or(u64::MAX, |e| e.t);
            if self.next_arrival < heap_t {
                self.advance(self.next_arrival);
                self.events += 1;
                self.arrival();
            } else if let Some(ev) = self.heap.pop() {
                self.advance(ev.t);
                self.handle(ev);
            } else {
                debug_assert!(false, "no events left with requests outstanding");
                break;
            }
            if !self.dirty.is_empty() {
                self.flush();
            }
        }
    }

    fn handle(&mut self, ev: Ev) {
        let i = ev.idx as usize;
        let valid = match ev.kind {
            EvKind::Complete => {
                self.cores[i].epoch == ev.epoch && self.cores[i].state == ReqState::Busy
            }
            EvKind::Start => {
                self.cores[i].epoch == ev.epoch && self.cores[i].state == ReqState::Starting
            }
            EvKind::NapDone => {
                self.lanes[i].epoch == ev.epoch && self.lanes[i].state == LaneState::SteppingAside
            }
            EvKind::WakeDone => {
                self.lanes[i].epoch == ev.epoch && self.lanes[i].state == LaneState::Waking
            }
            EvKind::Expiry => {
                self.lanes[i].epoch == ev.epoch && self.lanes[i].state == LaneState::Running
            }
            EvKind::BlindUpdate => true,
        };
        if !valid {
            self.stale += 1;
            return;
        }
        self.events += 1;
        match ev.kind {
            EvKind::Complete => self.complete(i),
            EvKind::Start => {
                let r = self.cores[i].req;
                self.begin(i, r, true);
                self.blind_poke();
            }
            EvKind::NapDone => self.nap_done(i),
            EvKind::WakeDone => self.wake_done(i),
            EvKind::Expiry => {
                self.lanes[i].expiry_at = u64::MAX;
                self.decide(i);
            }
            EvKind::BlindUpdate => self.blind_update(),
        }
    }

    fn arrival(&mut self) {
        let id = self.issued;
        let t = self.now;
        if id == self.warmup {
            self.w0 = t;
        }
        self.issued += 1;
        if self.issued == self.total {
            self.w1 = t;
            self.next_arrival = u64::MAX;
        } else {
            self.next_arrival = t + self.arrivals.gap_ns(self.issued, &mut self.rng_a);
        }
        let demand = self.demand.sample_ns(&mut self.rng_d);
        self.dispatch(Req {
            id,
            arrival: t,
            demand,
        });
    }

    /// Hands a request to a free worker core, or queues it.
    fn dispatch(&mut self, r: Req) {
        if let Some(c) = self.free.pop() {
            let c = c as usize;
            if self.sched_idle && self.timing.os_preempt_ns > 0 {
                let core = &mut self.cores[c];
                core.state = ReqState::Starting;
                core.req = r;
                core.epoch = core.epoch.wrapping_add(1);
                let g = core.epoch;
                self.push(self.now + self.timing.os_preempt_ns, EvKind::Start, c, g);
            } else {
                self.begin(c, r, true);
            }
            self.blind_poke();
        } else {
            self.queue.push_back(r);
            if self.budget_signals {
                self.signal_all();
            }
        }
    }

    /// Request `r` begins on core `c`'s request lane now; `after_idle`: the
    /// request lane was idle (or being taken back from SCHED_IDLE batch)
    /// since `idle_since`, so an idle period ends here.
    fn begin(&mut self, c: usize, r: Req, after_idle: bool) {
        let now = self.now;
        let in_window = self.in_window();
        let core = &mut self.cores[c];
        if core.rl_batch {
            core.rl_batch = false;
            self.batch_alone -= 1;
        }
        if let (Some(d), true) = (&mut self.idle, in_window && after_idle) {
            d.record(now.saturating_sub(core.idle_since) as f64 / 1e3);
        }
        core.state = ReqState::Busy;
        core.req = r;
        core.remaining = r.demand as f64;
        core.last = now;
        core.corun_ns = 0;
        let a = u64::from(core.active);
        self.lc_lanes += 1;
        self.batch_alone -= a;
        self.batch_corun += a;
        self.mark_dirty(c);
        self.signal_core(c);
    }

    /// The request on core `c` completes now.
    fn complete(&mut self, c: usize) {
        self.settle(c);
        let now = self.now;
        let core = &mut self.cores[c];
        let r = core.req;
        if r.id >= self.warmup {
            self.lat[(r.id - self.warmup) as usize] = now - r.arrival;
            self.corun_max = self.corun_max.max(core.corun_ns);
            self.corun_sum += core.corun_ns;
        }
        self.completed += 1;
        core.state = ReqState::Free;
        let a = u64::from(core.active);
        self.lc_lanes -= 1;
        self.batch_corun -= a;
        self.batch_alone += a;
        if let Some(next) = self.queue.pop_front() {
            self.begin(c, next, false);
            if self.budget_signals {
                self.signal_all();
            }
        } else {
            let core = &mut self.cores[c];
            core.idle_since = now;
            if self.sched_idle {
                core.rl_batch = true;
                self.batch_alone += 1;
            }
            self.free.push(c as u32);
            self.signal_core(c);
        }
        self.blind_poke();
    }

    /// Brings the running request's remaining work up to now.
    #[inline]
    fn settle(&mut self, c: usize) {
        let f = self.factor(self.cores[c].active);
        let now = self.now;
        let core = &mut self.cores[c];
        if core.state == ReqState::Busy && now > core.last {
            let dt = now - core.last;
            core.remaining -= dt as f64 / f;
            if core.active > 0 {
                core.corun_ns += dt;
            }
            core.last = now;
        }
    }

    #[inline]
    fn mark_dirty(&mut self, c: usize) {
        if !self.cores[c].dirty {
            self.cores[c].dirty = true;
            self.dirty.push(c as u32);
        }
    }

    /// Re-plans the completion of every request whose rate changed during
    /// the event just handled (one heap push per core however many changes).
    fn flush(&mut self) {
        for k in 0..self.dirty.len() {
            let c = self.dirty[k] as usize;
            let f = self.factor(self.cores[c].active);
            let core = &mut self.cores[c];
            core.dirty = false;
            if core.state == ReqState::Busy {
                core.epoch = core.epoch.wrapping_add(1);
                let dt = (core.remaining.max(0.0) * f).ceil() as u64;
                let g = core.epoch;
                self.push(self.now + dt, EvKind::Complete, c, g);
            }
        }
        self.dirty.clear();
    }

    /// A batch lane of core `c` starts (`+1`) or stops (`-1`) executing.
    fn set_active(&mut self, c: usize, delta: i32) {
        self.settle(c);
        let core = &mut self.cores[c];
        core.active = core.active.wrapping_add_signed(delta);
        let busy = core.state == ReqState::Busy;
        let counter = if busy {
            &mut self.batch_corun
        } else {
            &mut self.batch_alone
        };
        *counter = counter.wrapping_add_signed(i64::from(delta));
        if busy {
            self.mark_dirty(c);
        }
    }

    fn observe(&self, c: usize) -> Observation {
        let core = &self.cores[c];
        Observation {
            lc_busy: core.state == ReqState::Busy,
            queue_len: self.queue.len().min(u32::MAX as usize) as u32,
            running_request: core.req.id,
            now_ns: self.now,
            lc_ipc: self.dyn_ref_ipc.map(|r| r / self.factor(core.active)),
        }
    }

    /// Core `c`'s signals changed: every running batch lane checks; napping
    /// ones are woken if the request lane went idle.
    fn signal_core(&mut self, c: usize) {
        if self.nb == 0 {
            return;
        }
        let idle = self.cores[c].state != ReqState::Busy;
        for l in c * self.nb..(c + 1) * self.nb {
            match self.lanes[l].state {
                LaneState::Running => self.decide(l),
                LaneState::Napping if idle => self.wake(l),
                _ => {}
            }
        }
    }

    /// The queue length changed: it is a signal of every core.
    fn signal_all(&mut self) {
        for c in 0..self.cores.len() {
            self.signal_core(c);
        }
    }

    /// One check of batch lane `l`: the policy decides.
    fn decide(&mut self, l: usize) {
        let obs = self.observe(self.lanes[l].core as usize);
        let lane = &mut self.lanes[l];
        match lane.policy.step(&obs) {
            Decision::Nap => self.start_nap(l),
            Decision::Run => {
                if lane.policy.time_sensitive() {
                    // Co-running on a budget: the decision changes with time
                    // alone, so schedule the check at the expiry instant.
                    let budget = lane.policy.config().effective_budget_ns(obs.lc_ipc);
                    let t = lane.policy.state().start_ns.saturating_add(budget);
                    if t != lane.expiry_at {
                        lane.expiry_at = t;
                        lane.epoch = lane.epoch.wrapping_add(1);
                        let g = lane.epoch;
                        self.push(t.max(self.now), EvKind::Expiry, l, g);
                    }
                }
            }
        }
    }

    fn start_nap(&mut self, l: usize) {
        if self.in_window() {
            self.naps += 1;
        }
        let c = self.lanes[l].core as usize;
        let lane = &mut self.lanes[l];
        lane.expiry_at = u64::MAX;
        lane.epoch = lane.epoch.wrapping_add(1);
        if self.timing.nap_ns == 0 {
            lane.state = LaneState::Napping;
            self.set_active(c, -1);
        } else {
            lane.state = LaneState::SteppingAside;
            let g = lane.epoch;
            self.push(self.now + self.timing.nap_ns, EvKind::NapDone, l, g);
        }
    }

    fn nap_done(&mut self, l: usize) {
        let c = self.lanes[l].core as usize;
        self.lanes[l].state = LaneState::Napping;
        self.set_active(c, -1);
        if self.cores[c].state != ReqState::Busy {
            self.wake(l);
        }
    }

    fn wake(&mut self, l: usize) {
        if self.timing.wake_ns == 0 {
            self.resume(l);
        } else {
            let lane = &mut self.lanes[l];
            lane.state = LaneState::Waking;
            lane.epoch = lane.epoch.wrapping_add(1);
            let g = lane.epoch;
            self.push(self.now + self.timing.wake_ns, EvKind::WakeDone, l, g);
        }
    }

    fn wake_done(&mut self, l: usize) {
        self.resume(l);
    }

    /// Batch lane `l` executes again and checks at once.
    fn resume(&mut self, l: usize) {
        if self.in_window() {
            self.wakes += 1;
        }
        let c = self.lanes[l].core as usize;
        self.lanes[l].state = LaneState::Running;
        self.set_active(c, 1);
        self.decide(l);
    }

    /// Blind isolation: schedule a controller update if the law would move.
    fn blind_poke(&mut self) {
        let w = self.util_cores;
        let idle = self.free.len() as u32;
        let now = self.now;
        let react = self.timing.blind_react_ns;
        let Some(b) = &mut self.blind else { return };
        if !b.pending && b.law.next_allocation(w, b.s, idle) != b.s {
            b.pending = true;
            self.push(now + react, EvKind::BlindUpdate, 0, 0);
        }
    }

    /// Blind isolation: apply PerfIso's law to the idle cores seen now.
    fn blind_update(&mut self) {
        let w = self.util_cores;
        let n = u64::from(self.smt_ways);
        let Some(mut b) = self.blind.take() else {
            return;
        };
        b.pending = false;
        let target = b.law.next_allocation(w, b.s, self.free.len() as u32);
        while b.s < target {
            let c = self
                .free
                .pop()
                .expect("the law grows by at most the idle cores");
            b.secondary.push(c);
            b.s += 1;
            self.batch_alone += n;
        }
        while b.s > target {
            let c = b.secondary.pop().expect("s counts the secondary cores") as usize;
            b.s -= 1;
            self.batch_alone -= n;
            self.cores[c].idle_since = self.now;
            if let Some(r) = self.queue.pop_front() {
                self.begin(c, r, false);
            } else {
                self.free.push(c as u32);
            }
        }
        self.blind = Some(b);
        self.blind_poke();
    }

    fn finish(self) -> RunOutput {
        RunOutput {
            latencies_ns: self.lat,
            window_ns: self.w1.saturating_sub(self.w0),
            lc_lane_ns: self.acc_lc,
            batch_alone_lane_ns: self.acc_ba,
            batch_corun_lane_ns: self.acc_bc,
            naps: self.naps,
            wakes: self.wakes,
            events: self.events,
            stale_events: self.stale,
            corun_max_ns: self.corun_max,
            corun_sum_ns: self.corun_sum,
            idle_us: self.idle,
            util_cores: self.util_cores,
            batch_threads: self.batch_threads,
        }
    }
}
