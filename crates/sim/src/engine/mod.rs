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

mod run;
mod state;

pub use run::run;

use crate::arrivals::Arrivals;
use crate::batch::Interference;
use crate::demand::Demand;
use elfen_policy::PolicyConfig;
use elfen_policy::blind::BlindIsolation;
use elfen_results::Distribution;

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
