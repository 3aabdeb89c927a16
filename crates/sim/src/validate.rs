//! `elfen sim validate`: does the simulator predict what the harness
//! measured?
//!
//! Input: a measured [`ResultFile`] with `distributions["demand"]` (the LC
//! service's demand measured alone) and points of configurations such as
//! `lc_alone`, `naive` and `borrow_idle`. The simulator runs the same loads
//! with that demand on a model of the measured machine and reports, per
//! point, the relative error of p99 latency and total utilization.
//!
//! # Model of the measured machine
//!
//! The dev VM has no SMT: the request lane and the batch lane are two vCPUs
//! sharing the LLC. It is modelled as one "core" of two lanes (one LC worker
//! on the request lane, one batch thread on the batch lane) whose batch lane
//! slows requests by a factor `s` — per batch kind: the ratio of the
//! measured service times (`extra["service_p50_us"]`, time in service without
//! queueing) of `naive` and `lc_alone` at the same loads; without them,
//! fitted to the measured `naive` point at its lowest load (bisection on `s`
//! until the simulated mean latency matches the measured one); or given with
//! `--slowdown`; or the built-in kind's default.
//!
//! # Knee
//!
//! The knee is the largest measured load at which LC alone meets the SLO
//! (a note says so when LC alone misses it at some lower load). Points at or
//! below it are "below the knee";
//! the verdict is whether all of them are within the tolerance (15% by
//! default). Points above the knee are reported too, never hidden.
//!
//! Configurations map to the model as follows (the harness's definitions):
//! `lc_alone` → alone; `naive` and `cpuset` (batch thread pinned / confined
//! to the batch lane) → naive co-run; `sched_idle` (a SCHED_IDLE batch
//! thread on every lane) → OS-priority co-run with `os_preempt_ns`;
//! `borrow_idle` and the budget policies (budget from `--budget-us` or the
//! reps' `extra["budget_us"]`) → the policy. Anything else (`cfs_quota`,
//! unknown names) is skipped with a note.

use crate::batch::{Interference, builtin};
use crate::demand::{Demand, Empirical};
use crate::engine::{Mode, ServerModel, Timing};
use crate::error::SimError;
use crate::sweep::{NO_INTERFERENCE, PointSpec, RepRun, par_map};
use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_results::{Point, ResultFile, Source, Summary};
use serde::Serialize;
use std::collections::BTreeMap;

/// Options of [`validate`].
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// LC slowdown for every batch kind (else fitted / built-in).
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
    /// Measured requests per simulated repetition (default: as measured, >= 20 000).
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
            slowdown: None,
            slo_us: None,
            budget_us: None,
            nap_ns: 1000,
            wake_ns: 13_000,
            os_preempt_ns: 6000,
            requests: None,
            reps: 5,
            tolerance_pct: 15.0,
            threads: crate::sweep::default_threads(),
            command: String::new(),
        }
    }
}

/// One compared point.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationRow {
    /// Configuration.
    pub config: String,
    /// Batch kind.
    pub batch: Option<String>,
    /// Offered load.
    pub rps: f64,
    /// Measured p99 (median over reps), µs.
    pub measured_p99_us: f64,
    /// Simulated p99, µs.
    pub simulated_p99_us: f64,
    /// `(simulated - measured) / measured`, percent.
    pub p99_err_pct: f64,
    /// Measured total utilization.
    pub measured_util: f64,
    /// Simulated total utilization.
    pub simulated_util: f64,
    /// Relative error of utilization, percent.
    pub util_err_pct: f64,
    /// At or below the knee.
    pub below_knee: bool,
    /// Both errors within the tolerance.
    pub within_tolerance: bool,
}

/// The validation report.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationReport {
    /// The measured file's command line.
    pub measured_command: String,
    /// The simulation's command line.
    pub command: String,
    /// The model of the measured machine.
    pub model: serde_json::Value,
    /// LC slowdown used per batch kind, and where it came from.
    pub slowdown: BTreeMap<String, (f64, String)>,
    /// SLO used for the knee, µs.
    pub slo_p99_us: Option<f64>,
    /// The knee load (None: no SLO or no `lc_alone` points, or alone never meets it).
    pub knee_rps: Option<f64>,
    /// Tolerance, percent.
    pub tolerance_pct: f64,
    /// Compared points.
    pub rows: Vec<ValidationRow>,
    /// Points or configurations not compared, with the reason.
    pub skipped: Vec<String>,
    /// Points compared at or below the knee.
    pub below_knee_points: usize,
    /// Largest |error| of p99 below the knee, percent.
    pub max_p99_err_pct_below_knee: Option<f64>,
    /// Largest |error| of utilization below the knee, percent.
    pub max_util_err_pct_below_knee: Option<f64>,
    /// Whether every point below the knee is within the tolerance (None: none there).
    pub all_within_tolerance_below_knee: Option<bool>,
}

impl ValidationReport {
    /// The report as a table.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "model: {}",
            self.model
                .get("description")
                .and_then(|d| d.as_str())
                .unwrap_or("")
        );
        for (k, (v, why)) in &self.slowdown {
            let _ = writeln!(s, "slowdown[{k}] = {v:.3} ({why})");
        }
        let _ = writeln!(
            s,
            "knee: {} (SLO p99 {})",
            self.knee_rps
                .map_or("unknown".into(), |k| format!("{k} RPS")),
            self.slo_p99_us
                .map_or("unknown".into(), |x| format!("{x} us"))
        );
        let _ = writeln!(
            s,
            "{:<16} {:<8} {:>8} {:>11} {:>11} {:>8} {:>7} {:>7} {:>8} {:>5} {:>4}",
            "config",
            "batch",
            "rps",
            "p99_meas_us",
            "p99_sim_us",
            "p99_err%",
            "u_meas",
            "u_sim",
            "u_err%",
            "knee",
            "ok"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<16} {:<8} {:>8.1} {:>11.1} {:>11.1} {:>+8.1} {:>7.3} {:>7.3} {:>+8.1} {:>5} {:>4}",
                r.config,
                r.batch.as_deref().unwrap_or("-"),
                r.rps,
                r.measured_p99_us,
                r.simulated_p99_us,
                r.p99_err_pct,
                r.measured_util,
                r.simulated_util,
                r.util_err_pct,
                if r.below_knee { "below" } else { "above" },
                if r.within_tolerance { "yes" } else { "NO" }
            );
        }
        for note in &self.skipped {
            let _ = writeln!(s, "skipped: {note}");
        }
        let verdict = match self.all_within_tolerance_below_knee {
            Some(true) => format!("yes, all {} points below the knee", self.below_knee_points),
            Some(false) => format!(
                "NO (max |err| below the knee: p99 {:.1}%, utilization {:.1}%)",
                self.max_p99_err_pct_below_knee.unwrap_or(f64::NAN),
                self.max_util_err_pct_below_knee.unwrap_or(f64::NAN)
            ),
            None => "no points below the knee to judge".into(),
        };
        let _ = writeln!(
            s,
            "within {}% below the knee: {verdict}",
            self.tolerance_pct
        );
        s
    }
}

/// What a measured configuration is in the model.
fn model_mode(config: &str, budget_ns: Option<u64>) -> Result<Mode, String> {
    let unmanaged = Mode::Elfen(PolicyConfig::simple(PolicyKind::Unmanaged));
    let budget = |k: PolicyKind| {
        budget_ns
            .map(|b| Mode::Elfen(PolicyConfig::budget(k, b)))
            .ok_or_else(|| format!("{config}: budget policy without a budget (pass --budget-us)"))
    };
    match config {
        "lc_alone" | "alone" => Ok(Mode::Alone),
        // The harness's naive pins one batch thread per batch lane; cpuset
        // confines it to the batch lanes: on a one-core model both are the
        // batch lane always co-running.
        "naive" | "cpuset" => Ok(unmanaged),
        // One batch thread per lane at SCHED_IDLE, request lanes included.
        "sched_idle" => Ok(Mode::OsPriority),
        "borrow_idle" => Ok(Mode::Elfen(PolicyConfig::simple(PolicyKind::BorrowIdle))),
        "fixed_budget" => budget(PolicyKind::FixedBudget),
        "refresh_budget" => budget(PolicyKind::RefreshBudget),
        // No hardware counters on the dev VM: dynamic refresh runs without
        // an IPC and behaves as refresh budget (elfen-policy's rule).
        "dynamic_refresh" => budget(PolicyKind::DynamicRefresh),
        other => Err(format!(
            "{other}: not modelled on the two-vCPU core model (its placement and scheduling \
             are the harness's); compare it by hand"
        )),
    }
}

fn p99(p: &Point) -> f64 {
    p.summary
        .latency_us
        .get("p99")
        .map_or(f64::NAN, |s| s.median)
}

fn util(p: &Point) -> f64 {
    p.summary
        .utilization
        .get("total")
        .map_or(f64::NAN, |s| s.median)
}

/// Median of a rep figure over a point's reps.
fn rep_median(p: &Point, key: &str) -> Option<f64> {
    let v: Vec<f64> = p
        .reps
        .iter()
        .filter_map(|r| r.extra.get(key).copied())
        .collect();
    elfen_results::Stat::of(&v).map(|s| s.median)
}

/// The LC slowdown of batch kind `kind` from service times (time in service,
/// no queueing) the harness records per rep: the ratio of `naive`'s median
/// `service_p50_us` to `lc_alone`'s at the same load, median over the loads
/// both have, at least 1. `None` without such pairs.
fn service_ratio(measured: &ResultFile, kind: &str) -> Option<(f64, usize)> {
    let alone = measured.series("lc_alone", None);
    let ratios: Vec<f64> = measured
        .series("naive", Some(kind))
        .into_iter()
        .filter_map(|n| {
            let a = alone.iter().find(|a| a.rps_target == n.rps_target)?;
            let (sn, sa) = (
                rep_median(n, "service_p50_us")?,
                rep_median(a, "service_p50_us")?,
            );
            (sn > 0.0 && sa > 0.0 && sn.is_finite() && sa.is_finite()).then_some(sn / sa)
        })
        .collect();
    let s = elfen_results::Stat::of(&ratios)?.median;
    Some((s.max(1.0), ratios.len()))
}

fn rel_err_pct(sim: f64, meas: f64) -> f64 {
    (sim - meas) / meas * 100.0
}

/// Runs the validation; returns the report and the simulated result file.
pub fn validate(
    measured: &ResultFile,
    opts: &ValidateOptions,
) -> Result<(ValidationReport, ResultFile), SimError> {
    let d = measured
        .distributions
        .get("demand")
        .ok_or_else(|| SimError::File {
            path: "measured file".into(),
            problem: "no distributions[\"demand\"] (the LC service's demand measured alone); \
                  the harness must record it"
                .into(),
        })?;
    let demand = Demand::Empirical(Empirical::from_distribution(
        d,
        "measured distributions[\"demand\"]",
    )?);
    if let Some(s) = opts.slowdown {
        if !(s.is_finite() && s >= 1.0) {
            return Err(crate::error::invalid(
                "--slowdown",
                format!("must be a finite number >= 1, got {s}"),
            ));
        }
    }
    if opts.reps == 0 {
        return Err(crate::error::invalid("--reps", "must be >= 1, got 0"));
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
    let mut skipped = Vec::new();
    // The harness records the load average around the run; a busy machine
    // explains residuals the model cannot.
    let resolved = measured.spec.get("resolved");
    for key in ["load_before", "load_after"] {
        if let Some(l) = resolved.and_then(|r| r.get(key)).and_then(|l| l.as_str()) {
            skipped.push(format!(
                "note: measured file's {key} (load average 1/5/15 min) = {l}"
            ));
        }
    }
    if measured.source != Source::Measured {
        skipped.push("note: the input file says it is simulated, not measured".into());
    }

    // The knee, from LC alone.
    let alone: Vec<&Point> = {
        let mut v: Vec<&Point> = measured
            .points
            .iter()
            .filter(|p| p.config == "lc_alone" || p.config == "alone")
            .collect();
        v.sort_by(|a, b| a.rps_target.total_cmp(&b.rps_target));
        v
    };
    // The knee: the largest load at which LC alone meets the SLO.
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
            skipped.push(format!(
                "note: LC alone misses the SLO at {} RPS, below the knee ({k} RPS): noisy measurement?",
                misses.join(", ")
            ));
        }
    }
    if alone.is_empty() {
        skipped.push("no lc_alone points: the knee is unknown, every point is judged".into());
    } else if slo.is_none() {
        skipped.push(
            "no SLO in the file (pass --slo-us): the knee is unknown, no point is judged".into(),
        );
    } else if knee.is_none() {
        skipped.push(
            "LC alone misses the SLO at every measured load: no point is below the knee".into(),
        );
    }

    let requests = |p: &Point| {
        opts.requests.unwrap_or_else(|| {
            let mut r: Vec<u64> = p.reps.iter().map(|r| r.requests).collect();
            r.sort_unstable();
            r.get(r.len() / 2).copied().unwrap_or(0).max(20_000)
        })
    };
    let base = |mode, inter, rps, req| PointSpec {
        server,
        leaves: 1,
        mode,
        interference: inter,
        timing,
        rps,
        trace: None,
        demand: &demand,
        requests: req,
        warmup_requests: req / 10,
        seed: 1,
        record_idle: false,
    };

    // Slowdown per batch kind.
    let mut slowdown: BTreeMap<String, (f64, String)> = BTreeMap::new();
    let kinds: Vec<String> = {
        let mut v: Vec<String> = measured
            .points
            .iter()
            .filter_map(|p| p.batch.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    for kind in &kinds {
        if let Some(s) = opts.slowdown {
            slowdown.insert(kind.clone(), (s, "--slowdown".into()));
            continue;
        }
        if let Some((s, n)) = service_ratio(measured, kind) {
            slowdown.insert(
                kind.clone(),
                (
                    s,
                    format!(
                        "median over {n} loads of service p50 naive / lc_alone (reps' extra[\"service_p50_us\"])"
                    ),
                ),
            );
            continue;
        }
        let naive = measured.series("naive", Some(kind));
        if let Some(p) = naive.first() {
            let target = p
                .summary
                .latency_us
                .get("mean")
                .map_or(f64::NAN, |s| s.median);
            if target.is_finite() && target > 0.0 {
                let req = requests(p).min(50_000);
                let mean_at = |s: f64| {
                    let inter = Interference {
                        lc_slowdown: s,
                        corun_rate: 1.0,
                    };
                    base(
                        Mode::Elfen(PolicyConfig::simple(PolicyKind::Unmanaged)),
                        inter,
                        p.rps_target,
                        req,
                    )
                    .run_rep(0)
                    .rep
                    .latency_us
                    .mean
                };
                let (mut lo, mut hi) = (1.0f64, 8.0f64);
                let s = if mean_at(lo) >= target {
                    1.0
                } else if mean_at(hi) <= target {
                    hi
                } else {
                    for _ in 0..14 {
                        let mid = (lo + hi) / 2.0;
                        if mean_at(mid) < target {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    (lo + hi) / 2.0
                };
                slowdown.insert(
                    kind.clone(),
                    (
                        s,
                        format!(
                            "fitted to the mean latency of naive at {} RPS",
                            p.rps_target
                        ),
                    ),
                );
                continue;
            }
        }
        if let Some(i) = builtin(kind) {
            slowdown.insert(
                kind.clone(),
                (
                    i.lc_slowdown,
                    "built-in default (no usable measured naive point)".into(),
                ),
            );
        }
    }

    // The points to simulate.
    struct Job<'a> {
        point: &'a Point,
        mode: Mode,
        inter: Interference,
        requests: u64,
    }
    let mut jobs = Vec::new();
    let mut noted = std::collections::BTreeSet::new();
    for p in &measured.points {
        let budget_ns = opts
            .budget_us
            .or_else(|| {
                p.reps
                    .iter()
                    .find_map(|r| r.extra.get("budget_us").copied())
            })
            .map(|b| (b * 1e3).round() as u64);
        let mode = match model_mode(&p.config, budget_ns) {
            Ok(m) => m,
            Err(why) => {
                if noted.insert(p.config.clone()) {
                    skipped.push(why);
                }
                continue;
            }
        };
        if !(p.rps_target.is_finite() && p.rps_target > 0.0) {
            skipped.push(format!(
                "{} at rps {}: not a positive load",
                p.config, p.rps_target
            ));
            continue;
        }
        if !p99(p).is_finite() || !util(p).is_finite() || p99(p) <= 0.0 || util(p) <= 0.0 {
            skipped.push(format!(
                "{} at {} RPS: no measured p99 or utilization",
                p.config, p.rps_target
            ));
            continue;
        }
        let inter = match (&mode, &p.batch) {
            (Mode::Alone, _) => NO_INTERFERENCE,
            (_, None) => {
                skipped.push(format!(
                    "{} at {} RPS: batch kind not recorded",
                    p.config, p.rps_target
                ));
                continue;
            }
            (_, Some(k)) => match slowdown.get(k) {
                Some((s, _)) => Interference {
                    lc_slowdown: *s,
                    corun_rate: 1.0,
                },
                None => {
                    if noted.insert(format!("kind:{k}")) {
                        skipped.push(format!(
                            "batch kind {k:?}: no naive point, not built in, no --slowdown"
                        ));
                    }
                    continue;
                }
            },
        };
        jobs.push(Job {
            point: p,
            mode,
            inter,
            requests: requests(p),
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
            base(job.mode, job.inter, job.point.rps_target, job.requests).run_rep(r)
        },
        |i, run| {
            let (j, r) = tasks[i];
            runs[j][r as usize] = Some(run);
        },
    );

    let mut simulated = ResultFile::new(
        Source::Simulated,
        opts.command.clone(),
        serde_json::json!({"validate": measured.command, "reps": opts.reps}),
        serde_json::json!({}),
    );
    let mut rows = Vec::new();
    for (job, reps) in jobs.iter().zip(runs) {
        let reps: Vec<_> = reps.into_iter().map(|r| r.expect("ran").rep).collect();
        let sim = Point {
            config: job.point.config.clone(),
            batch: job.point.batch.clone(),
            rps_target: job.point.rps_target,
            summary: Summary::of(&reps, slo),
            reps,
            distributions: BTreeMap::new(),
        };
        let (mp, sp) = (p99(job.point), p99(&sim));
        let (mu, su) = (util(job.point), util(&sim));
        let (ep, eu) = (rel_err_pct(sp, mp), rel_err_pct(su, mu));
        rows.push(ValidationRow {
            config: sim.config.clone(),
            batch: sim.batch.clone(),
            rps: sim.rps_target,
            measured_p99_us: mp,
            simulated_p99_us: sp,
            p99_err_pct: ep,
            measured_util: mu,
            simulated_util: su,
            util_err_pct: eu,
            below_knee: match knee {
                Some(k) => sim.rps_target <= k,
                None => alone.is_empty(),
            },
            within_tolerance: ep.abs() <= opts.tolerance_pct && eu.abs() <= opts.tolerance_pct,
        });
        simulated.points.push(sim);
    }
    let below: Vec<&ValidationRow> = rows.iter().filter(|r| r.below_knee).collect();
    let max_abs = |f: fn(&ValidationRow) -> f64| {
        below
            .iter()
            .map(|r| f(r).abs())
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    simulated.system = serde_json::json!({
        "description": "one core of 2 lanes: LC worker on the request lane, batch thread on the batch lane (two vCPUs sharing the LLC on the dev VM)",
        "slowdown": slowdown,
        "nap_ns": opts.nap_ns,
        "os_preempt_ns": opts.os_preempt_ns,
        "wake_ns": opts.wake_ns,
        "demand_mean_us": demand.mean_ns() / 1e3,
    });
    let report = ValidationReport {
        measured_command: measured.command.clone(),
        command: opts.command.clone(),
        model: simulated.system.clone(),
        slowdown,
        slo_p99_us: slo,
        knee_rps: knee,
        tolerance_pct: opts.tolerance_pct,
        below_knee_points: below.len(),
        max_p99_err_pct_below_knee: max_abs(|r| r.p99_err_pct),
        max_util_err_pct_below_knee: max_abs(|r| r.util_err_pct),
        all_within_tolerance_below_knee: (!below.is_empty())
            .then(|| below.iter().all(|r| r.within_tolerance)),
        rows,
        skipped,
    };
    Ok((report, simulated))
}
