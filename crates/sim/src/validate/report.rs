//! The validation's report: one row per compared point, the verdict below
//! the knee, and its text form.

use super::DemandSource;
use serde::Serialize;
use std::collections::BTreeMap;

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

pub(super) fn ms(us: f64) -> String {
    format!("{:.2}", us / 1e3)
}

pub(super) fn row_name(r: &ValidationRow) -> String {
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
