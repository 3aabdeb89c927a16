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

use crate::batch::{Interference, builtin};
use crate::demand::{Demand, Empirical, unit_ns};
use crate::engine::{Mode, ServerModel, Timing};
use crate::error::{SimError, invalid};
use crate::sweep::{NO_INTERFERENCE, PointSpec, RepRun, par_map};
use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_results::{
    Config, Distribution, LatencyBreakdown, LatencyStats, Point, ResultFile, Source, Stat, Summary,
    UtilizationStats, study,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// Fewest requests of a simulated repetition.
const MIN_REQUESTS: u64 = 100;
/// Requests of the runs that fit a slowdown (long, for a stable mean).
const FIT_REQUESTS: u64 = 50_000;

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

/// One compared point. Measured figures are medians over the point's reps
/// (min and max where named); simulated ones medians over simulated reps.
/// Errors are `(simulated − measured) / measured`, percent.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationRow {
    /// Configuration.
    pub config: String,
    /// Batch kind.
    pub batch: Option<String>,
    /// Offered load (the simulated Poisson rate).
    pub rps: f64,
    /// Measured achieved load (requests sent in the window per second).
    pub measured_rps_achieved: f64,
    /// Measured p50, µs.
    pub measured_p50_us: f64,
    /// Simulated p50, µs.
    pub simulated_p50_us: f64,
    /// Relative error of p50, percent (reported, not judged).
    pub p50_err_pct: f64,
    /// Measured p99, µs.
    pub measured_p99_us: f64,
    /// Smallest p99 over the measured reps, µs.
    pub measured_p99_min_us: f64,
    /// Largest p99 over the measured reps, µs.
    pub measured_p99_max_us: f64,
    /// Simulated p99, µs.
    pub simulated_p99_us: f64,
    /// Relative error of p99, percent.
    pub p99_err_pct: f64,
    /// The simulated p99 lies within the measured reps' min–max.
    pub p99_within_measured_spread: bool,
    /// Measured LC utilization (begin-to-end time / wall time).
    pub measured_lc_util: f64,
    /// Smallest measured LC utilization over reps.
    pub measured_lc_util_min: f64,
    /// Largest measured LC utilization over reps.
    pub measured_lc_util_max: f64,
    /// Simulated LC utilization (request-lane time executing requests / window).
    pub simulated_lc_util: f64,
    /// Relative error of LC utilization, percent.
    pub lc_util_err_pct: f64,
    /// Measured total utilization (reported, not judged).
    pub measured_total_util: f64,
    /// Simulated total utilization.
    pub simulated_total_util: f64,
    /// Relative error of total utilization, percent (reported, not judged).
    pub total_util_err_pct: f64,
    /// Mean of the point's recorded service times, µs (None: not recorded).
    pub measured_service_mean_us: Option<f64>,
    /// Mean of the demand the simulation drew from (bucket midpoints), µs.
    pub demand_sampled_mean_us: f64,
    /// Measured service mean / alone demand mean: the idle penalty, times
    /// the co-runner's slowdown for batch configurations.
    pub service_over_alone_demand: Option<f64>,
    /// Measured LC busy time per request (LC utilization / achieved RPS),
    /// µs: the recorded service plus the response write.
    pub lc_busy_per_request_us: Option<f64>,
    /// Measured latency outside the server's queue and service (send
    /// lateness, loopback, dispatcher, response delivery), median of the
    /// reps' p50, µs: not simulated.
    pub outside_p50_us: Option<f64>,
    /// Largest CPU share other processes and the host took during a
    /// measured rep (`measured.foreign_util + measured.steal_util`, lanes).
    pub measured_disturbance_max: Option<f64>,
    /// At or below the knee.
    pub below_knee: bool,
    /// p99 and LC utilization both within the tolerance.
    pub within_tolerance: bool,
}

/// The idle penalty at one load: LC alone's recorded service time against
/// its demand measured back to back.
#[derive(Debug, Clone, Serialize)]
pub struct IdlePenalty {
    /// Offered load.
    pub rps: f64,
    /// Mean recorded service time of `lc_alone` at this load, µs.
    pub service_mean_us: f64,
    /// Its p50 (upper edge of the bucket), µs.
    pub service_p50_us: f64,
    /// `service_mean_us` / alone demand mean.
    pub ratio_mean: f64,
    /// `service_p50_us` / alone demand p50 (same bucket rule).
    pub ratio_p50: f64,
}

/// The validation report.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationReport {
    /// The measured file's command line.
    pub measured_command: String,
    /// The simulation's command line.
    pub command: String,
    /// Where the demand came from.
    pub demand_source: DemandSource,
    /// What that means.
    pub demand_description: String,
    /// The model of the measured machine.
    pub model: serde_json::Value,
    /// Simulated repetitions per point.
    pub simulated_reps: u32,
    /// How long a simulated repetition is.
    pub simulated_window: String,
    /// LC slowdown used per batch kind, and where it came from (`demand` only).
    pub slowdown: BTreeMap<String, (f64, String)>,
    /// Mean of the file's alone demand, µs.
    pub alone_demand_mean_us: Option<f64>,
    /// p50 of the file's alone demand (upper edge of the bucket), µs.
    pub alone_demand_p50_us: Option<f64>,
    /// Idle penalty per load (from `lc_alone` points).
    pub idle_penalty: Vec<IdlePenalty>,
    /// SLO used for the knee, µs.
    pub slo_p99_us: Option<f64>,
    /// The knee load (None: no SLO or no `lc_alone` points, or alone never meets it).
    pub knee_rps: Option<f64>,
    /// Tolerance, percent.
    pub tolerance_pct: f64,
    /// Compared points.
    pub rows: Vec<ValidationRow>,
    /// Notes, and points or configurations not compared with the reason.
    pub skipped: Vec<String>,
    /// Points compared at or below the knee.
    pub below_knee_points: usize,
    /// Of those, within the tolerance.
    pub below_knee_within_tolerance: usize,
    /// Of those outside it, how many have the simulated p99 inside the
    /// measured reps' min–max.
    pub below_knee_misses_within_spread: usize,
    /// Largest |error| of p99 below the knee, percent.
    pub max_p99_err_pct_below_knee: Option<f64>,
    /// Largest |error| of LC utilization below the knee, percent.
    pub max_lc_util_err_pct_below_knee: Option<f64>,
    /// The point below the knee with the largest |error| (p99 or LC utilization).
    pub worst_below_knee: Option<String>,
    /// Whether every point below the knee is within the tolerance (None: none there).
    pub all_within_tolerance_below_knee: Option<bool>,
}

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1e3)
}

fn row_name(r: &ValidationRow) -> String {
    match &r.batch {
        Some(b) => format!("{}·{b} @ {} RPS", r.config, r.rps),
        None => format!("{} @ {} RPS", r.config, r.rps),
    }
}

impl ValidationReport {
    /// The report as text: header, idle penalty, the table, notes, verdict.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "demand: {}", self.demand_description);
        let _ = writeln!(
            s,
            "model: {}",
            self.model
                .get("description")
                .and_then(|d| d.as_str())
                .unwrap_or("")
        );
        let _ = writeln!(
            s,
            "simulated: {} reps per point, {}; {} us added to every demand (--response-us)",
            self.simulated_reps,
            self.simulated_window,
            self.model
                .get("response_us")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.0)
        );
        if self.demand_source == DemandSource::Demand {
            for (k, (v, why)) in &self.slowdown {
                let _ = writeln!(s, "slowdown[{k}] = {v:.3} ({why})");
            }
        }
        let _ = writeln!(
            s,
            "knee: {} (SLO p99 {})",
            self.knee_rps
                .map_or("unknown".into(), |k| format!("{k} RPS")),
            self.slo_p99_us
                .map_or("unknown".into(), |x| format!("{x} us"))
        );
        if let (Some(m), Some(p)) = (self.alone_demand_mean_us, self.alone_demand_p50_us) {
            let _ = writeln!(
                s,
                "idle penalty: LC alone's recorded service time / its demand measured back to back \
                 (mean {m:.0} us, p50 {p:.0} us)"
            );
            for ip in &self.idle_penalty {
                let _ = writeln!(
                    s,
                    "  {:>8.1} RPS: service mean {:>7.0} us = {:.2}x, p50 {:>7.0} us = {:.2}x",
                    ip.rps, ip.service_mean_us, ip.ratio_mean, ip.service_p50_us, ip.ratio_p50
                );
            }
        }
        let _ = writeln!(
            s,
            "latencies in ms; p99 spread = the measured reps' min-max; in = simulated p99 inside \
             it; u_lc = LC utilization; svc_x = measured service mean / alone demand mean; \
             dist = most CPU (lanes) other processes and the host took in a measured rep"
        );
        let _ = writeln!(
            s,
            "{:<15} {:<6} {:>6} {:>7} {:>7} {:>6} {:>7} {:>13} {:>7} {:>6} {:>3} {:>6} {:>6} {:>6} {:>5} {:>4} {:>5} {:>3}",
            "config",
            "batch",
            "rps",
            "p50",
            "p50sim",
            "err%",
            "p99",
            "spread",
            "p99sim",
            "err%",
            "in",
            "u_lc",
            "sim",
            "err%",
            "svc_x",
            "dist",
            "knee",
            "ok"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<15} {:<6} {:>6.0} {:>7} {:>7} {:>+6.1} {:>7} {:>13} {:>7} {:>+6.1} {:>3} {:>6.3} {:>6.3} {:>+6.1} {:>5} {:>4} {:>5} {:>3}",
                r.config,
                r.batch.as_deref().unwrap_or("-"),
                r.rps,
                ms(r.measured_p50_us),
                ms(r.simulated_p50_us),
                r.p50_err_pct,
                ms(r.measured_p99_us),
                format!(
                    "{}-{}",
                    ms(r.measured_p99_min_us),
                    ms(r.measured_p99_max_us)
                ),
                ms(r.simulated_p99_us),
                r.p99_err_pct,
                if r.p99_within_measured_spread {
                    "in"
                } else {
                    "out"
                },
                r.measured_lc_util,
                r.simulated_lc_util,
                r.lc_util_err_pct,
                r.service_over_alone_demand
                    .map_or("-".into(), |x| format!("{x:.2}")),
                r.measured_disturbance_max
                    .map_or("-".into(), |x| format!("{x:.2}")),
                if r.below_knee { "below" } else { "above" },
                if r.within_tolerance { "yes" } else { "NO" }
            );
        }
        for note in &self.skipped {
            let _ = writeln!(s, "note: {note}");
        }
        let verdict = match self.all_within_tolerance_below_knee {
            Some(true) => format!("yes, all {} points", self.below_knee_points),
            Some(false) => format!(
                "NO: {} of {} points within; worst {}; {} of the {} misses have the simulated p99 \
                 inside the measured reps' min-max",
                self.below_knee_within_tolerance,
                self.below_knee_points,
                self.worst_below_knee.as_deref().unwrap_or("-"),
                self.below_knee_misses_within_spread,
                self.below_knee_points - self.below_knee_within_tolerance
            ),
            None => "no points below the knee to judge".into(),
        };
        let _ = writeln!(
            s,
            "all below-knee points within {}% (p99 and LC utilization): {verdict}",
            self.tolerance_pct
        );
        s
    }
}

/// What a measured configuration is in the model (the harness's
/// definitions, `docs/harness.md`).
fn model_mode(config: Config, budget_ns: Option<u64>) -> Result<Mode, String> {
    let budget = |k: PolicyKind| {
        budget_ns
            .map(|b| Mode::Elfen(PolicyConfig::budget(k, b)))
            .ok_or_else(|| format!("{config}: budget policy without a budget (pass --budget-us)"))
    };
    match config {
        Config::LcAlone => Ok(Mode::Alone),
        // cpuset confines the batch to the batch lane: on a one-core model
        // the batch lane always co-running.
        Config::Cpuset => Ok(Mode::Elfen(PolicyConfig::simple(PolicyKind::Unmanaged))),
        // One batch thread per lane at SCHED_IDLE, request lanes included.
        Config::SchedIdle => Ok(Mode::SchedIdle),
        Config::BorrowIdle => Ok(Mode::Elfen(PolicyConfig::simple(PolicyKind::BorrowIdle))),
        Config::FixedBudget => budget(PolicyKind::FixedBudget),
        Config::RefreshBudget => budget(PolicyKind::RefreshBudget),
        // Without hardware counters dynamic refresh runs without an IPC and
        // behaves as refresh budget (elfen-policy's rule).
        Config::DynamicRefresh => budget(PolicyKind::DynamicRefresh),
        other => Err(format!(
            "{other}: not modelled on the two-lane core model ({}); compare it by hand",
            other.definition()
        )),
    }
}

/// Median over reps of a latency percentile (µs), NaN when absent.
fn lat_med(p: &Point, get: fn(&LatencyStats) -> Stat) -> f64 {
    get(&p.summary.latency_us).median
}

/// Median over reps of a utilization figure, NaN when absent.
fn util_med(p: &Point, get: fn(&UtilizationStats) -> Stat) -> f64 {
    get(&p.summary.utilization).median
}

/// Median over reps of a latency breakdown figure (µs).
fn breakdown_median(p: &Point, get: fn(&LatencyBreakdown) -> f64) -> Option<f64> {
    study::rep_stat(p, |r| r.measured.as_ref()?.breakdown.map(|b| get(&b))).map(|s| s.median)
}

/// The point's recorded service times, if any were recorded.
fn service_of(p: &Point) -> Option<&Distribution> {
    p.service
        .as_ref()
        .filter(|d| d.counts.iter().any(|c| *c > 0))
}

/// Mean of a histogram, µs (None if unusable).
fn mean_us(d: &Distribution) -> Option<f64> {
    Empirical::from_distribution(d, "")
        .ok()
        .map(|e| e.mean_ns() / 1e3)
}

/// Quantile of a histogram (upper edge of the bucket reaching it), µs.
fn quantile_us(d: &Distribution, q: f64) -> Option<f64> {
    Some(d.quantile(q)? * unit_ns(&d.unit)? / 1e3)
}

/// The LC slowdown of batch kind `kind` from service times (time in service,
/// no queueing) the harness records per rep: the ratio of `cpuset`'s
/// (batch always running on the batch lane) median service p50 to
/// `lc_alone`'s at the same load, median over the loads both have, at least
/// 1. `None` without such pairs.
fn service_ratio(measured: &ResultFile, kind: &str) -> Option<(f64, usize)> {
    let alone = study::config_series(measured, Config::LcAlone, None);
    let ratios: Vec<f64> = study::config_series(measured, Config::Cpuset, Some(kind))
        .into_iter()
        .filter_map(|n| {
            let a = alone.iter().find(|a| a.rps_target == n.rps_target)?;
            let (sn, sa) = (
                breakdown_median(n, |b| b.service_p50_us)?,
                breakdown_median(a, |b| b.service_p50_us)?,
            );
            (sn > 0.0 && sa > 0.0 && sn.is_finite() && sa.is_finite()).then_some(sn / sa)
        })
        .collect();
    let s = Stat::of(&ratios)?.median;
    Some((s.max(1.0), ratios.len()))
}

fn rel_err_pct(sim: f64, meas: f64) -> f64 {
    (sim - meas) / meas * 100.0
}

/// The knee: the largest load at which LC alone meets the SLO; notes go to
/// `notes`.
fn knee_of(
    measured: &ResultFile,
    slo: Option<f64>,
    notes: &mut Vec<String>,
) -> (Option<f64>, bool) {
    let p99 = |p: &Point| lat_med(p, |l| l.p99);
    let alone = study::config_series(measured, Config::LcAlone, None);
    let knee = slo.and_then(|s| {
        alone
            .iter()
            .filter(|p| p99(p) <= s)
            .map(|p| p.rps_target)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    });
    if let (Some(k), Some(s)) = (knee, slo) {
        let misses: Vec<String> = alone
            .iter()
            .filter(|p| p.rps_target < k && p99(p) > s)
            .map(|p| format!("{}", p.rps_target))
            .collect();
        if !misses.is_empty() {
            notes.push(format!(
                "LC alone misses the SLO at {} RPS, below the knee ({k} RPS): noisy measurement?",
                misses.join(", ")
            ));
        }
    }
    if alone.is_empty() {
        notes.push("no lc_alone points: the knee is unknown, every point is judged".into());
    } else if slo.is_none() {
        notes.push(
            "no SLO in the file (pass --slo-us): the knee is unknown, no point is judged".into(),
        );
    } else if knee.is_none() {
        notes.push(
            "LC alone misses the SLO at every measured load: no point is below the knee".into(),
        );
    }
    (knee, alone.is_empty())
}

/// Runs the validation; returns the report and the simulated result file.
pub fn validate(
    measured: &ResultFile,
    opts: &ValidateOptions,
) -> Result<(ValidationReport, ResultFile), SimError> {
    if opts.reps == 0 {
        return Err(invalid("--reps", "must be >= 1, got 0"));
    }
    if let Some(s) = opts.slowdown {
        if !(s.is_finite() && s >= 1.0) {
            return Err(invalid(
                "--slowdown",
                format!("must be a finite number >= 1, got {s}"),
            ));
        }
    }
    if !(opts.response_us.is_finite() && opts.response_us >= 0.0) {
        return Err(invalid(
            "--response-us",
            format!("must be a finite number >= 0, got {}", opts.response_us),
        ));
    }
    let response_ns = opts.response_us * 1e3;
    let has_service = measured.points.iter().any(|p| service_of(p).is_some());
    let source = match opts.demand {
        Some(DemandSource::Service) if !has_service => {
            return Err(invalid(
                "--demand service",
                "needs points[].service (service times the harness recorded \
                 per point); the measured file has none: use --demand demand",
            ));
        }
        Some(s) => s,
        None if has_service => DemandSource::Service,
        None => DemandSource::Demand,
    };
    if source == DemandSource::Service && opts.slowdown.is_some() {
        return Err(invalid(
            "--slowdown",
            "applies to --demand demand only: recorded service times already include the \
             co-runner's interference",
        ));
    }
    let mut notes = Vec::new();
    let alone_what = "measured demand";
    let alone_demand = match (measured.demand.as_ref(), source) {
        (Some(d), DemandSource::Demand) => Some((Empirical::from_distribution(d, alone_what)?, d)),
        (Some(d), DemandSource::Service) => match Empirical::from_distribution(d, alone_what) {
            Ok(e) => Some((e, d)),
            Err(e) => {
                notes.push(format!("{e}: no idle-penalty ratios"));
                None
            }
        },
        (None, DemandSource::Demand) => {
            return Err(SimError::File {
                path: "measured file".into(),
                problem: "no demand (the LC service's demand measured alone); \
                          the harness must record it"
                    .into(),
            });
        }
        (None, DemandSource::Service) => None,
    };
    let alone_mean_us = alone_demand.as_ref().map(|(e, _)| e.mean_ns() / 1e3);
    let alone_p50_us = alone_demand.as_ref().and_then(|(_, d)| quantile_us(d, 0.5));
    let alone_demand = alone_demand.map(|(e, _)| Demand::Empirical(e.shifted(response_ns)));
    if opts.demand.is_none() && source == DemandSource::Demand {
        notes.push(
            "the file has no per-point service times: demand mode (alone demand + \
             slowdown)"
                .into(),
        );
    }

    let server = ServerModel {
        worker_cores: 1,
        smt_ways: 2,
    };
    let timing = Timing {
        nap_ns: opts.nap_ns,
        wake_ns: opts.wake_ns,
        os_preempt_ns: opts.os_preempt_ns,
        blind_react_ns: 0,
    };
    let slo = opts
        .slo_us
        .or_else(|| measured.points.iter().find_map(|p| p.summary.slo_p99_us));
    // The harness records the load average around the run; a busy machine
    // explains residuals the model cannot.
    if let Some(r) = &measured.run {
        let fmt = |l: [f64; 3]| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]);
        notes.push(format!(
            "measured file's load average (1/5/15 min) before {}, after {}",
            fmt(r.load_before),
            r.load_after.map_or("-".into(), fmt)
        ));
    }
    if measured.source != Source::Measured {
        notes.push("the input file says it is simulated, not measured".into());
    }
    let (knee, no_alone) = knee_of(measured, slo, &mut notes);

    // A simulated repetition is as long as a measured one (the median of
    // the measured reps' requests, warm-up as the harness's `warmup_s`): the
    // measured p99 is a median over short windows, which sits below the
    // long-run p99, so the simulation estimates the same statistic.
    // `--requests` asks for long runs instead.
    let warmup_s = measured
        .spec
        .get("warmup_s")
        .and_then(serde_json::Value::as_f64)
        .filter(|w| w.is_finite() && *w >= 0.0);
    let requests = |p: &Point| {
        opts.requests.unwrap_or_else(|| {
            let mut r: Vec<u64> = p.reps.iter().map(|r| r.requests + r.errors).collect();
            r.sort_unstable();
            r.get(r.len() / 2).copied().unwrap_or(0).max(MIN_REQUESTS)
        })
    };
    let warmup = |p: &Point, req: u64| match (opts.requests, warmup_s) {
        (None, Some(w)) => (w * p.rps_target).round() as u64,
        _ => req / 10,
    };
    let base = |mode, inter, rps, demand, req, warm| PointSpec {
        server,
        leaves: 1,
        mode,
        interference: inter,
        timing,
        rps,
        trace: None,
        demand,
        requests: req,
        warmup_requests: warm,
        seed: 1,
        record_idle: false,
    };

    // Slowdown per batch kind (demand mode only).
    let mut slowdown: BTreeMap<String, (f64, String)> = BTreeMap::new();
    if let (DemandSource::Demand, Some(demand)) = (source, &alone_demand) {
        let mut kinds: Vec<String> = measured
            .points
            .iter()
            .filter_map(|p| p.batch.clone())
            .collect();
        kinds.sort();
        kinds.dedup();
        for kind in &kinds {
            if let Some(s) = opts.slowdown {
                slowdown.insert(kind.clone(), (s, "--slowdown".into()));
            } else if let Some((s, n)) = service_ratio(measured, kind) {
                slowdown.insert(
                    kind.clone(),
                    (
                        s,
                        format!(
                            "median over {n} loads of service p50 cpuset / lc_alone (reps' measured.breakdown)"
                        ),
                    ),
                );
            } else if let Some((s, why)) = fit_slowdown(measured, kind, |s, p| {
                let inter = Interference {
                    lc_slowdown: s,
                    corun_rate: 1.0,
                };
                let unmanaged = Mode::Elfen(PolicyConfig::simple(PolicyKind::Unmanaged));
                base(
                    unmanaged,
                    inter,
                    p.rps_target,
                    demand,
                    FIT_REQUESTS,
                    FIT_REQUESTS / 10,
                )
                .run_rep(0)
                .rep
                .latency_us
                .mean
            }) {
                slowdown.insert(kind.clone(), (s, why));
            } else if let Some(i) = builtin(kind) {
                slowdown.insert(
                    kind.clone(),
                    (
                        i.lc_slowdown,
                        "built-in default (no usable measured cpuset point)".into(),
                    ),
                );
            }
        }
    }

    // The points to simulate.
    struct Job<'a> {
        point: &'a Point,
        mode: Mode,
        inter: Interference,
        demand: Demand,
        requests: u64,
        warmup: u64,
    }
    let mut jobs = Vec::new();
    let mut noted = std::collections::BTreeSet::new();
    for p in &measured.points {
        let budget_ns = opts
            .budget_us
            .or_else(|| p.reps.iter().find_map(|r| r.budget_us))
            .map(|b| (b * 1e3).round() as u64);
        let mode = match model_mode(p.config, budget_ns) {
            Ok(m) => m,
            Err(why) => {
                if noted.insert(p.config.name().to_string()) {
                    notes.push(why);
                }
                continue;
            }
        };
        let here = format!(
            "{}{} at {} RPS",
            p.series_name(),
            p.batch
                .as_deref()
                .map_or(String::new(), |b| format!("·{b}")),
            p.rps_target
        );
        if !(p.rps_target.is_finite() && p.rps_target > 0.0) {
            notes.push(format!("{here}: not a positive load"));
            continue;
        }
        let (mp, mu) = (lat_med(p, |l| l.p99), util_med(p, |u| u.lc));
        if !(mp.is_finite() && mu.is_finite() && mp > 0.0 && mu > 0.0) {
            notes.push(format!("{here}: no measured p99 or LC utilization"));
            continue;
        }
        let (inter, demand) = match source {
            DemandSource::Service => {
                let Some(d) = service_of(p) else {
                    notes.push(format!("{here}: no recorded service times"));
                    continue;
                };
                match Empirical::from_distribution(d, &format!("{here}: recorded service times")) {
                    Ok(e) => (NO_INTERFERENCE, Demand::Empirical(e.shifted(response_ns))),
                    Err(e) => {
                        notes.push(e.to_string());
                        continue;
                    }
                }
            }
            DemandSource::Demand => {
                let demand = alone_demand.clone().expect("checked in demand mode");
                let inter = match (&mode, &p.batch) {
                    (Mode::Alone, _) => NO_INTERFERENCE,
                    (_, None) => {
                        notes.push(format!("{here}: batch kind not recorded"));
                        continue;
                    }
                    (_, Some(k)) => match slowdown.get(k) {
                        Some((s, _)) => Interference {
                            lc_slowdown: *s,
                            corun_rate: 1.0,
                        },
                        None => {
                            if noted.insert(format!("kind:{k}")) {
                                notes.push(format!(
                                    "batch kind {k:?}: no cpuset point, not built in, no --slowdown"
                                ));
                            }
                            continue;
                        }
                    },
                };
                (inter, demand)
            }
        };
        let req = requests(p);
        jobs.push(Job {
            point: p,
            mode,
            inter,
            demand,
            requests: req,
            warmup: warmup(p, req),
        });
    }
    let tasks: Vec<(usize, u32)> = (0..jobs.len())
        .flat_map(|j| (0..opts.reps).map(move |r| (j, r)))
        .collect();
    let mut runs: Vec<Vec<Option<RepRun>>> = vec![vec![None; opts.reps as usize]; jobs.len()];
    par_map(
        &tasks,
        opts.threads,
        |_, &(j, r)| {
            let job = &jobs[j];
            base(
                job.mode,
                job.inter,
                job.point.rps_target,
                &job.demand,
                job.requests,
                job.warmup,
            )
            .run_rep(r)
        },
        |i, run| {
            let (j, r) = tasks[i];
            runs[j][r as usize] = Some(run);
        },
    );

    let mut simulated = ResultFile::new(
        Source::Simulated,
        opts.command.clone(),
        serde_json::json!({
            "validate": measured.command,
            "demand_source": source,
            "reps": opts.reps,
        }),
        serde_json::json!({}),
    );
    let mut rows = Vec::new();
    for (job, reps) in jobs.iter().zip(runs) {
        let reps: Vec<_> = reps.into_iter().map(|r| r.expect("ran").rep).collect();
        let sim = Point {
            config: job.point.config,
            label: job.point.label.clone(),
            batch: job.point.batch.clone(),
            rps_target: job.point.rps_target,
            summary: Summary::of(&reps, slo),
            reps,
            idle_periods: None,
            service: None,
        };
        rows.push(row_of(
            job.point,
            &sim,
            &job.demand,
            alone_mean_us,
            knee.map_or(no_alone, |k| sim.rps_target <= k),
            opts.tolerance_pct,
        ));
        simulated.points.push(sim);
    }
    if let Some(limit) = measured
        .spec
        .get("disturbed_lanes")
        .and_then(serde_json::Value::as_f64)
    {
        let disturbed: Vec<String> = rows
            .iter()
            .filter(|r| r.measured_disturbance_max.is_some_and(|d| d > limit))
            .map(row_name)
            .collect();
        if !disturbed.is_empty() {
            notes.push(format!(
                "{} compared points kept a rep in which other processes and the host took more \
                 than the harness's disturbed_lanes ({limit}) even after its retries: {}",
                disturbed.len(),
                disturbed.join(", ")
            ));
        }
    }
    let below: Vec<&ValidationRow> = rows.iter().filter(|r| r.below_knee).collect();
    let max_abs = |f: fn(&ValidationRow) -> f64| {
        below
            .iter()
            .map(|r| f(r).abs())
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    let worst = below
        .iter()
        .max_by(|a, b| {
            let e = |r: &ValidationRow| r.p99_err_pct.abs().max(r.lc_util_err_pct.abs());
            e(a).total_cmp(&e(b))
        })
        .map(|r| {
            format!(
                "{} (p99 {:+.1}%, LC utilization {:+.1}%, measured p99 spread {}-{} ms)",
                row_name(r),
                r.p99_err_pct,
                r.lc_util_err_pct,
                ms(r.measured_p99_min_us),
                ms(r.measured_p99_max_us)
            )
        });
    let idle_penalty = idle_penalty(measured, alone_mean_us, alone_p50_us);
    let window = match (opts.requests, warmup_s) {
        (Some(n), _) => format!("{n} requests each after {} warm-up (--requests)", n / 10),
        (None, Some(w)) => format!(
            "each as long as a measured rep (the median of its reps' requests), after a warm-up \
             of {w} s x RPS requests (the harness's warmup_s); p99 is the median over reps"
        ),
        (None, None) => "each as long as a measured rep (the median of its reps' requests), \
                         after a warm-up of a tenth of that; p99 is the median over reps"
            .into(),
    };
    simulated.system = serde_json::json!({
        "simulated_window": window,
        "description": "one core of 2 lanes: LC worker on the request lane, batch thread on the batch lane (SMT siblings, or two CPUs sharing the LLC)",
        "demand_source": source,
        "demand": source.describe(),
        "sampling": "bucket by count, then uniformly inside the bucket",
        "response_us": opts.response_us,
        "slowdown": slowdown,
        "nap_ns": opts.nap_ns,
        "os_preempt_ns": opts.os_preempt_ns,
        "wake_ns": opts.wake_ns,
        "alone_demand_mean_us": alone_mean_us,
    });
    let within = below.iter().filter(|r| r.within_tolerance).count();
    let report = ValidationReport {
        measured_command: measured.command.clone(),
        command: opts.command.clone(),
        demand_source: source,
        demand_description: source.describe().into(),
        model: simulated.system.clone(),
        simulated_reps: opts.reps,
        simulated_window: window.clone(),
        slowdown,
        alone_demand_mean_us: alone_mean_us,
        alone_demand_p50_us: alone_p50_us,
        idle_penalty,
        slo_p99_us: slo,
        knee_rps: knee,
        tolerance_pct: opts.tolerance_pct,
        below_knee_points: below.len(),
        below_knee_within_tolerance: within,
        below_knee_misses_within_spread: below
            .iter()
            .filter(|r| !r.within_tolerance && r.p99_within_measured_spread)
            .count(),
        max_p99_err_pct_below_knee: max_abs(|r| r.p99_err_pct),
        max_lc_util_err_pct_below_knee: max_abs(|r| r.lc_util_err_pct),
        worst_below_knee: worst,
        all_within_tolerance_below_knee: (!below.is_empty()).then_some(within == below.len()),
        rows,
        skipped: notes,
    };
    Ok((report, simulated))
}

/// Fits the LC slowdown of `kind` to the mean latency of its lowest-load
/// `cpuset` point: bisection on `s` in [1, 8]; `mean_at(s, point)` simulates.
fn fit_slowdown(
    measured: &ResultFile,
    kind: &str,
    mean_at: impl Fn(f64, &Point) -> f64,
) -> Option<(f64, String)> {
    let corun = study::config_series(measured, Config::Cpuset, Some(kind));
    let p = corun.first()?;
    let target = lat_med(p, |l| l.mean);
    if !(target.is_finite() && target > 0.0) {
        return None;
    }
    let (mut lo, mut hi) = (1.0f64, 8.0f64);
    let s = if mean_at(lo, p) >= target {
        1.0
    } else if mean_at(hi, p) <= target {
        hi
    } else {
        for _ in 0..14 {
            let mid = (lo + hi) / 2.0;
            if mean_at(mid, p) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    };
    Some((
        s,
        format!(
            "fitted to the mean latency of cpuset at {} RPS",
            p.rps_target
        ),
    ))
}

/// The comparison of one measured point with its simulation.
fn row_of(
    m: &Point,
    sim: &Point,
    demand: &Demand,
    alone_mean_us: Option<f64>,
    below_knee: bool,
    tolerance_pct: f64,
) -> ValidationRow {
    let p99 = m.summary.latency_us.p99;
    let ulc = m.summary.utilization.lc;
    let (mp, sp) = (p99.median, lat_med(sim, |l| l.p99));
    let (mu, su) = (ulc.median, util_med(sim, |u| u.lc));
    let (mp50, sp50) = (lat_med(m, |l| l.p50), lat_med(sim, |l| l.p50));
    let (mt, st) = (util_med(m, |u| u.total), util_med(sim, |u| u.total));
    let (ep, eu) = (rel_err_pct(sp, mp), rel_err_pct(su, mu));
    let service_mean = service_of(m).and_then(mean_us);
    ValidationRow {
        config: m.series_name().to_string(),
        batch: m.batch.clone(),
        rps: m.rps_target,
        measured_rps_achieved: m.summary.rps_achieved.median,
        measured_p50_us: mp50,
        simulated_p50_us: sp50,
        p50_err_pct: rel_err_pct(sp50, mp50),
        measured_p99_us: mp,
        measured_p99_min_us: p99.min,
        measured_p99_max_us: p99.max,
        simulated_p99_us: sp,
        p99_err_pct: ep,
        p99_within_measured_spread: (p99.min..=p99.max).contains(&sp),
        measured_lc_util: mu,
        measured_lc_util_min: ulc.min,
        measured_lc_util_max: ulc.max,
        simulated_lc_util: su,
        lc_util_err_pct: eu,
        measured_total_util: mt,
        simulated_total_util: st,
        total_util_err_pct: rel_err_pct(st, mt),
        measured_service_mean_us: service_mean,
        demand_sampled_mean_us: match demand {
            Demand::Empirical(e) => e.sampled_mean_ns(),
            d => d.mean_ns(),
        } / 1e3,
        service_over_alone_demand: service_mean.zip(alone_mean_us).map(|(s, a)| s / a),
        lc_busy_per_request_us: study::rep_stat(m, |r| {
            (r.rps_achieved > 0.0).then(|| r.utilization.lc / r.rps_achieved * 1e6)
        })
        .map(|s| s.median),
        outside_p50_us: breakdown_median(m, |b| b.outside_p50_us),
        measured_disturbance_max: study::rep_stat(m, |r| {
            r.measured.as_ref().map(|m| m.disturbance())
        })
        .map(|s| s.max),
        below_knee,
        within_tolerance: ep.abs() <= tolerance_pct && eu.abs() <= tolerance_pct,
    }
}

/// The idle penalty per load from the `lc_alone` points' recorded service
/// times (empty without them or without the alone demand).
fn idle_penalty(
    measured: &ResultFile,
    alone_mean_us: Option<f64>,
    alone_p50_us: Option<f64>,
) -> Vec<IdlePenalty> {
    let (Some(am), Some(ap)) = (alone_mean_us, alone_p50_us) else {
        return Vec::new();
    };
    let mut v: Vec<IdlePenalty> = study::config_series(measured, Config::LcAlone, None)
        .into_iter()
        .filter_map(|p| {
            let d = service_of(p)?;
            let (mean, p50) = (mean_us(d)?, quantile_us(d, 0.5)?);
            Some(IdlePenalty {
                rps: p.rps_target,
                service_mean_us: mean,
                service_p50_us: p50,
                ratio_mean: mean / am,
                ratio_p50: p50 / ap,
            })
        })
        .collect();
    v.sort_by(|a, b| a.rps.total_cmp(&b.rps));
    v
}
