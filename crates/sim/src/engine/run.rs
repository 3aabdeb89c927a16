//! The event loop: arrivals, completions, checks, naps and wakes, budget
//! expiries and blind-isolation updates, and the accounting of the
//! measured window.

use super::state::{BlindState, Core, Ev, EvKind, Lane, LaneState, Req, ReqState};
use super::{Mode, RunOutput, RunSpec, Timing};
use crate::arrivals::Arrivals;
use crate::demand::Demand;
use elfen_policy::{Decision, Observation, Policy, PolicyConfig, PolicyKind};
use elfen_results::Distribution;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::collections::{BinaryHeap, VecDeque};

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
