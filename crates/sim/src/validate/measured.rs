//! Reading a measured file for the model: which configuration is which
//! mode, the medians and breakdowns of its points, the knee, the slowdown
//! from service times or a fit, the idle penalty, and one compared row.

use super::report::{IdlePenalty, ValidationRow};
use crate::demand::{Demand, Empirical, unit_ns};
use crate::engine::Mode;
use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_results::{
    Config, Distribution, LatencyBreakdown, LatencyStats, Point, ResultFile, Stat,
    UtilizationStats, study,
};

/// What a measured configuration is in the model (the harness's
/// definitions, `docs/harness.md`).
pub(super) fn model_mode(config: Config, budget_ns: Option<u64>) -> Result<Mode, String> {
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
pub(super) fn lat_med(p: &Point, get: fn(&LatencyStats) -> Stat) -> f64 {
    get(&p.summary.latency_us).median
}

/// Median over reps of a utilization figure, NaN when absent.
pub(super) fn util_med(p: &Point, get: fn(&UtilizationStats) -> Stat) -> f64 {
    get(&p.summary.utilization).median
}

/// Median over reps of a latency breakdown figure (µs).
pub(super) fn breakdown_median(p: &Point, get: fn(&LatencyBreakdown) -> f64) -> Option<f64> {
    study::rep_stat(p, |r| r.measured.as_ref()?.breakdown.map(|b| get(&b))).map(|s| s.median)
}

/// The point's recorded service times, if any were recorded.
pub(super) fn service_of(p: &Point) -> Option<&Distribution> {
    p.service
        .as_ref()
        .filter(|d| d.counts.iter().any(|c| *c > 0))
}

/// Mean of a histogram, µs (None if unusable).
pub(super) fn mean_us(d: &Distribution) -> Option<f64> {
    Empirical::from_distribution(d, "")
        .ok()
        .map(|e| e.mean_ns() / 1e3)
}

/// Quantile of a histogram (upper edge of the bucket reaching it), µs.
pub(super) fn quantile_us(d: &Distribution, q: f64) -> Option<f64> {
    Some(d.quantile(q)? * unit_ns(&d.unit)? / 1e3)
}

/// The LC slowdown of batch kind `kind` from service times (time in service,
/// no queueing) the harness records per rep: the ratio of `cpuset`'s
/// (batch always running on the batch lane) median service p50 to
/// `lc_alone`'s at the same load, median over the loads both have, at least
/// 1. `None` without such pairs.
pub(super) fn service_ratio(measured: &ResultFile, kind: &str) -> Option<(f64, usize)> {
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

pub(super) fn rel_err_pct(sim: f64, meas: f64) -> f64 {
    (sim - meas) / meas * 100.0
}

/// The knee: the largest load at which LC alone meets the SLO; notes go to
/// `notes`.
pub(super) fn knee_of(
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

/// Fits the LC slowdown of `kind` to the mean latency of its lowest-load
/// `cpuset` point: bisection on `s` in [1, 8]; `mean_at(s, point)` simulates.
pub(super) fn fit_slowdown(
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
pub(super) fn row_of(
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
pub(super) fn idle_penalty(
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
