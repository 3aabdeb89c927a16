//! Running a validation, step by step: check the options, choose the demand
//! source, take the alone demand, find the knee, derive the slowdowns (demand
//! mode), turn every modelled measured point into a simulation job, run the
//! jobs, and compare.

use super::measured::{
    fit_slowdown, idle_penalty, knee_of, lat_med, model_mode, quantile_us, row_of, service_of,
    service_ratio, util_med,
};
use super::report::{ValidationReport, ValidationRow, ms, row_name};
use super::{DemandSource, FIT_REQUESTS, MIN_REQUESTS, ValidateOptions};
use crate::batch::{Interference, builtin};
use crate::demand::{Demand, Empirical};
use crate::engine::{Mode, ServerModel, Timing};
use crate::error::{SimError, invalid};
use crate::sweep::{NO_INTERFERENCE, PointSpec, RepRun, par_map};
use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_results::{Point, ResultFile, Source, Summary};
use std::collections::BTreeMap;

/// Refuses options that make no sense before anything runs.
fn check_options(opts: &ValidateOptions) -> Result<(), SimError> {
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
    Ok(())
}

/// The demand source asked for, or the default for this file.
fn choose_source(measured: &ResultFile, opts: &ValidateOptions) -> Result<DemandSource, SimError> {
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
    Ok(source)
}

/// The LC service's demand measured alone, as the model's demand (shifted
/// by the response time), with its mean and median.
struct Alone {
    demand: Option<Demand>,
    mean_us: Option<f64>,
    p50_us: Option<f64>,
}

fn alone_demand(
    measured: &ResultFile,
    source: DemandSource,
    response_ns: f64,
    notes: &mut Vec<String>,
) -> Result<Alone, SimError> {
    let what = "measured demand";
    let alone = match (measured.demand.as_ref(), source) {
        (Some(d), DemandSource::Demand) => Some((Empirical::from_distribution(d, what)?, d)),
        (Some(d), DemandSource::Service) => match Empirical::from_distribution(d, what) {
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
    Ok(Alone {
        mean_us: alone.as_ref().map(|(e, _)| e.mean_ns() / 1e3),
        p50_us: alone.as_ref().and_then(|(_, d)| quantile_us(d, 0.5)),
        demand: alone.map(|(e, _)| Demand::Empirical(e.shifted(response_ns))),
    })
}

/// How simulated repetitions are set up: the model of the measured machine
/// and the length of a repetition.
struct Model<'a> {
    server: ServerModel,
    timing: Timing,
    opts: &'a ValidateOptions,
    /// The harness's warm-up, s.
    warmup_s: Option<f64>,
}

impl Model<'_> {
    /// As long as a measured rep (the median of its reps' requests), unless
    /// `--requests` asks for long runs: the measured p99 is a median over
    /// short windows, which sits below the long-run p99, so the simulation
    /// estimates the same statistic.
    fn requests(&self, p: &Point) -> u64 {
        self.opts.requests.unwrap_or_else(|| {
            let mut r: Vec<u64> = p.reps.iter().map(|r| r.requests + r.errors).collect();
            r.sort_unstable();
            r.get(r.len() / 2).copied().unwrap_or(0).max(MIN_REQUESTS)
        })
    }

    /// The harness's warm-up in requests, or a tenth of the run.
    fn warmup(&self, p: &Point, req: u64) -> u64 {
        match (self.opts.requests, self.warmup_s) {
            (None, Some(w)) => (w * p.rps_target).round() as u64,
            _ => req / 10,
        }
    }

    fn spec<'d>(
        &self,
        mode: Mode,
        interference: Interference,
        rps: f64,
        demand: &'d Demand,
        requests: u64,
        warmup_requests: u64,
    ) -> PointSpec<'d> {
        PointSpec {
            server: self.server,
            leaves: 1,
            mode,
            interference,
            timing: self.timing,
            rps,
            trace: None,
            demand,
            requests,
            warmup_requests,
            seed: 1,
            record_idle: false,
        }
    }

    /// Words for the report: how long a simulated repetition is.
    fn window(&self) -> String {
        match (self.opts.requests, self.warmup_s) {
            (Some(n), _) => format!("{n} requests each after {} warm-up (--requests)", n / 10),
            (None, Some(w)) => format!(
                "each as long as a measured rep (the median of its reps' requests), after a \
                 warm-up of {w} s x RPS requests (the harness's warmup_s); p99 is the median \
                 over reps"
            ),
            (None, None) => "each as long as a measured rep (the median of its reps' requests), \
                             after a warm-up of a tenth of that; p99 is the median over reps"
                .into(),
        }
    }
}

/// The LC slowdown of every measured batch kind (demand mode only): given,
/// from measured service times, fitted, or the built-in kind's default.
fn slowdowns(
    measured: &ResultFile,
    model: &Model,
    demand: &Demand,
) -> BTreeMap<String, (f64, String)> {
    let mut out = BTreeMap::new();
    let mut kinds: Vec<String> = measured
        .points
        .iter()
        .filter_map(|p| p.batch.clone())
        .collect();
    kinds.sort();
    kinds.dedup();
    for kind in &kinds {
        let found = if let Some(s) = model.opts.slowdown {
            Some((s, "--slowdown".into()))
        } else if let Some((s, n)) = service_ratio(measured, kind) {
            Some((
                s,
                format!(
                    "median over {n} loads of service p50 cpuset / lc_alone (reps' measured.breakdown)"
                ),
            ))
        } else if let Some(f) = fit_slowdown(measured, kind, |s, p| {
            let inter = Interference {
                lc_slowdown: s,
                corun_rate: 1.0,
            };
            let unmanaged = Mode::Elfen(PolicyConfig::simple(PolicyKind::Unmanaged));
            model
                .spec(
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
            Some(f)
        } else {
            builtin(kind).map(|i| {
                (
                    i.lc_slowdown,
                    "built-in default (no usable measured cpuset point)".into(),
                )
            })
        };
        if let Some(f) = found {
            out.insert(kind.clone(), f);
        }
    }
    out
}

/// A measured point to simulate.
struct Job<'a> {
    point: &'a Point,
    mode: Mode,
    inter: Interference,
    demand: Demand,
    requests: u64,
    warmup: u64,
}

/// The jobs: every measured point whose configuration the model covers and
/// whose demand is known; the others go to `notes` with the reason.
fn jobs<'a>(
    measured: &'a ResultFile,
    model: &Model,
    source: DemandSource,
    alone: &Alone,
    slowdown: &BTreeMap<String, (f64, String)>,
    notes: &mut Vec<String>,
) -> Vec<Job<'a>> {
    let response_ns = model.opts.response_us * 1e3;
    let mut jobs = Vec::new();
    let mut noted = std::collections::BTreeSet::new();
    for p in &measured.points {
        let budget_ns = model
            .opts
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
                let demand = alone.demand.clone().expect("checked in demand mode");
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
        let req = model.requests(p);
        jobs.push(Job {
            point: p,
            mode,
            inter,
            demand,
            requests: req,
            warmup: model.warmup(p, req),
        });
    }
    jobs
}

/// Runs `reps` repetitions of every job on `threads` threads.
fn simulate(jobs: &[Job], model: &Model) -> Vec<Vec<RepRun>> {
    let reps = model.opts.reps;
    let tasks: Vec<(usize, u32)> = (0..jobs.len())
        .flat_map(|j| (0..reps).map(move |r| (j, r)))
        .collect();
    let mut runs: Vec<Vec<Option<RepRun>>> = vec![vec![None; reps as usize]; jobs.len()];
    par_map(
        &tasks,
        model.opts.threads,
        |_, &(j, r)| {
            let job = &jobs[j];
            model
                .spec(
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
    runs.into_iter()
        .map(|v| v.into_iter().map(|r| r.expect("ran")).collect())
        .collect()
}

/// Runs the validation; returns the report and the simulated result file.
pub fn validate(
    measured: &ResultFile,
    opts: &ValidateOptions,
) -> Result<(ValidationReport, ResultFile), SimError> {
    check_options(opts)?;
    let source = choose_source(measured, opts)?;
    let mut notes = Vec::new();
    let alone = alone_demand(measured, source, opts.response_us * 1e3, &mut notes)?;
    if opts.demand.is_none() && source == DemandSource::Demand {
        notes.push(
            "the file has no per-point service times: demand mode (alone demand + slowdown)".into(),
        );
    }
    let model = Model {
        server: ServerModel {
            worker_cores: 1,
            smt_ways: 2,
        },
        timing: Timing {
            nap_ns: opts.nap_ns,
            wake_ns: opts.wake_ns,
            os_preempt_ns: opts.os_preempt_ns,
            blind_react_ns: 0,
        },
        opts,
        warmup_s: measured
            .spec
            .get("warmup_s")
            .and_then(serde_json::Value::as_f64)
            .filter(|w| w.is_finite() && *w >= 0.0),
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
    let slowdown = match (source, &alone.demand) {
        (DemandSource::Demand, Some(d)) => slowdowns(measured, &model, d),
        _ => BTreeMap::new(),
    };
    let jobs = jobs(measured, &model, source, &alone, &slowdown, &mut notes);
    let runs = simulate(&jobs, &model);

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
        let reps: Vec<_> = reps.into_iter().map(|r| r.rep).collect();
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
            alone.mean_us,
            knee.map_or(no_alone, |k| sim.rps_target <= k),
            opts.tolerance_pct,
        ));
        simulated.points.push(sim);
    }
    disturbed_note(measured, &rows, &mut notes);
    let window = model.window();
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
        "alone_demand_mean_us": alone.mean_us,
    });
    let report = summarize(
        measured,
        opts,
        &simulated,
        Compared {
            source,
            window,
            slowdown,
            alone,
            slo,
            knee,
            rows,
            notes,
        },
    );
    Ok((report, simulated))
}

/// Notes the compared points that kept a disturbed rep.
fn disturbed_note(measured: &ResultFile, rows: &[ValidationRow], notes: &mut Vec<String>) {
    let Some(limit) = measured
        .spec
        .get("disturbed_lanes")
        .and_then(serde_json::Value::as_f64)
    else {
        return;
    };
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

/// What the comparison produced, before it is summarized.
struct Compared {
    source: DemandSource,
    window: String,
    slowdown: BTreeMap<String, (f64, String)>,
    alone: Alone,
    slo: Option<f64>,
    knee: Option<f64>,
    rows: Vec<ValidationRow>,
    notes: Vec<String>,
}

/// The report: the rows and the verdict below the knee.
fn summarize(
    measured: &ResultFile,
    opts: &ValidateOptions,
    simulated: &ResultFile,
    c: Compared,
) -> ValidationReport {
    let below: Vec<&ValidationRow> = c.rows.iter().filter(|r| r.below_knee).collect();
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
    let within = below.iter().filter(|r| r.within_tolerance).count();
    ValidationReport {
        measured_command: measured.command.clone(),
        command: opts.command.clone(),
        demand_source: c.source,
        demand_description: c.source.describe().into(),
        model: simulated.system.clone(),
        simulated_reps: opts.reps,
        simulated_window: c.window,
        slowdown: c.slowdown,
        alone_demand_mean_us: c.alone.mean_us,
        alone_demand_p50_us: c.alone.p50_us,
        idle_penalty: idle_penalty(measured, c.alone.mean_us, c.alone.p50_us),
        slo_p99_us: c.slo,
        knee_rps: c.knee,
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
        rows: c.rows,
        skipped: c.notes,
    }
}
