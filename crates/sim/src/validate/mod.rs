//! `elfen sim validate`: does the simulator agree with what the harness
//! measured?
//!
//! Input: a measured [`ResultFile`] from `elfen bench` with points of
//! configurations such as `lc_alone`, `cpuset` and `borrow_idle`. The
//! simulator runs the same loads (Poisson arrivals at each point's
//! `rps_target`) on a model of the measured machine and reports, per point,
//! measured and simulated p50, p99 and LC utilization, their relative
//! errors, the measured reps' spread, and a verdict below the knee.
//!
//! # Demand source ([`DemandSource`])
//!
//! - **`service`** (the default when the file has per-point
//!   `service`): each point is simulated with the service
//!   times the harness recorded *at that point* (its configuration and load)
//!   as the request demand, and no LC slowdown for co-running: the recorded
//!   service time already contains whatever interference there was (the
//!   co-runner's, other tenants', the cache refill after idleness). This
//!   checks the harness's queueing measurement (open loop, latency from the
//!   intended send time) and the simulator's queueing engine against each
//!   other.
//! - **`demand`**: the paper-style prediction: every point draws from the
//!   file's `demand`, measured back to back with nothing
//!   else running, and a batch kind slows requests by a factor `s` (see
//!   below). On shared VMs a request's service time under open-loop load is
//!   several times its back-to-back demand (other tenants evict the LC's
//!   cache-resident working set while the request lane idles: the **idle
//!   penalty**), which this mode does not model; the report states the ratio
//!   measured service / alone demand per load so the residual is explained.
//!
//! Either way a value is drawn from a histogram by picking a bucket by its
//! count, then **uniformly inside the bucket** ([`Empirical`]).
//!
//! # Model of the measured machine
//!
//! The harness pairs a request lane with a batch lane (SMT siblings, or
//! two CPUs sharing the LLC on a machine without SMT). It is modelled as
//! one "core" of two lanes (one LC worker
//! on the request lane, one batch thread on the batch lane). In `demand`
//! mode the batch lane slows requests by a factor `s` per batch kind: the
//! ratio of the measured service times (`measured.breakdown.service_p50_us`, time in
//! service without queueing) of `cpuset` and `lc_alone` at the same loads;
//! without them, fitted to the measured `cpuset` point at its lowest load
//! (bisection on `s` until the simulated mean latency matches the measured
//! one); or given with `--slowdown`; or the built-in kind's default.
//!
//! # Utilization
//!
//! The harness's LC utilization is the worker's time from request begin to
//! request end over the window's wall time (one lane = 1.0); the engine's is
//! the time the request lane executes requests over the measurement window,
//! the same quantity. The harness's "end" comes after the response is
//! written while its recorded service time stops before, so the measured LC
//! busy time per request exceeds the mean recorded service by that write
//! (reported per point as `lc_busy_per_request_us`).
//!
//! # Knee and verdict
//!
//! The knee is the largest measured load at which LC alone meets the SLO
//! (a note says so when LC alone misses it at some lower load). Points at or
//! below it are "below the knee"; a point is within the tolerance (15% by
//! default) when both its p99 and its LC utilization are. The verdict is
//! whether all points below the knee are, naming the worst. Points above the
//! knee are reported too, never hidden. Every row carries the measured reps'
//! p99 min–max so a miss can be set against the measurement's own spread.
//!
//! Configurations map to the model as follows (the harness's definitions):
//! `lc_alone` → alone; `cpuset` (batch confined to the batch lane) → the
//! batch lane always co-running; `sched_idle` (a SCHED_IDLE batch thread on
//! every lane) → `sched_idle` with `os_preempt_ns`; `borrow_idle` and the
//! budget policies (budget from `--budget-us` or the reps' `budget_us`) →
//! the policy. `naive` (batch at the LC's priority on every lane) and
//! `cfs_quota` are not modelled and are skipped with a note.

mod measured;
mod report;
mod run;

pub use report::{IdlePenalty, ValidationReport, ValidationRow};
pub use run::validate;

use serde::Serialize;

/// Fewest requests of a simulated repetition.
pub(super) const MIN_REQUESTS: u64 = 100;
/// Requests of the runs that fit a slowdown (long, for a stable mean).
pub(super) const FIT_REQUESTS: u64 = 50_000;

/// Where the simulated request demand comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DemandSource {
    /// The file's `demand` (measured back to back, alone)
    /// with a per-kind LC slowdown: the paper-style prediction.
    Demand,
    /// Each point's `service` (service times observed at
    /// that configuration and load), no slowdown.
    Service,
}

impl DemandSource {
    /// What the source means, for the report.
    pub fn describe(self) -> &'static str {
        match self {
            DemandSource::Demand => {
                "demand: the file's demand (the LC service measured back to \
                 back, alone) for every point, slowed by the batch kind's factor while the batch \
                 lane co-runs; the idle penalty (service under load / alone demand) is not \
                 modelled, its ratio is reported per load"
            }
            DemandSource::Service => {
                "service: each point's service times (service times recorded at that \
                 configuration and load) as the demand, no slowdown for co-running (the recorded \
                 times include it)"
            }
        }
    }
}

/// Options of [`validate`].
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// Demand source (None: `service` when the file has per-point service
    /// distributions, else `demand`).
    pub demand: Option<DemandSource>,
    /// Request-lane time per request after the recorded service ends (the
    /// harness's worker writes the response before its request "end"), µs,
    /// added to every simulated demand.
    pub response_us: f64,
    /// LC slowdown for every batch kind (else fitted / built-in); `demand` only.
    pub slowdown: Option<f64>,
    /// SLO (µs) for the knee (else the measured file's).
    pub slo_us: Option<f64>,
    /// Budget (µs) for budget-policy points.
    pub budget_us: Option<f64>,
    /// Step-aside latency, ns.
    pub nap_ns: u64,
    /// Wake latency, ns.
    pub wake_ns: u64,
    /// `sched_idle`: time for the LC worker to preempt the SCHED_IDLE batch thread, ns.
    pub os_preempt_ns: u64,
    /// Measured requests per simulated repetition (default: as many as a
    /// measured rep, warm-up from the file's `warmup_s`).
    pub requests: Option<u64>,
    /// Simulated repetitions per point.
    pub reps: u32,
    /// Tolerance below the knee, percent.
    pub tolerance_pct: f64,
    /// Threads.
    pub threads: usize,
    /// Command line.
    pub command: String,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            demand: None,
            response_us: 0.0,
            slowdown: None,
            slo_us: None,
            budget_us: None,
            nap_ns: 1000,
            wake_ns: 13_000,
            os_preempt_ns: 6000,
            requests: None,
            reps: 200,
            tolerance_pct: 15.0,
            threads: crate::sweep::default_threads(),
            command: String::new(),
        }
    }
}
