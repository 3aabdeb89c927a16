//! The **SLO** and the budget policies' **budgets**.
//!
//! With `slo_p99_ms = "auto"` two SLOs play a part, in this order:
//!
//! 1. Before the main sweep, an LC-alone pre-sweep (the median p99 of
//!    [`super::plan::PRESWEEP_REPS`] invocations per load) gives a knee and
//!    a first SLO, the highest pre-sweep p99 up to that knee. The budget
//!    policies' budgets come from it (the paper's headroom: SLO minus LC
//!    alone's p99 at the load), because they must be set before their
//!    points run.
//! 2. After the main sweep, the SLO every point is judged against is the
//!    highest LC-alone p99 (median over the main sweep's rounds) at loads up
//!    to the knee of the main sweep's own LC-alone curve — or the pre-sweep
//!    SLO if that is higher. So LC alone meets the SLO at every load up to
//!    the knee *in the same run*, whatever the host did between the
//!    pre-sweep and the main sweep.

use crate::spec::{Auto, BenchSpec};
use elfen_results::{ResultFile, study};

/// The pre-sweep SLO (µs) from its `(rps, median p99 µs)` curve, and where
/// it came from; a given SLO wins.
pub fn presweep_slo(
    spec: &BenchSpec,
    curve: &[(f64, f64)],
    p99_at_zero: f64,
) -> (Option<f64>, String) {
    if let Auto::Value(ms) = spec.slo_p99_ms {
        return (Some(ms * 1e3), format!("given: {ms} ms"));
    }
    match study::knee_index(curve, p99_at_zero) {
        Some(i) => (
            Some(curve[..=i].iter().map(|p| p.1).fold(0.0, f64::max)),
            format!(
                "pre-sweep: the highest LC-alone p99 up to the knee of the pre-sweep's p99-vs-load \
                 curve ({:.0} rps)",
                curve[i].0
            ),
        ),
        None => (None, "none: no LC-alone points".into()),
    }
}

/// The SLO every point is judged against (µs), the main sweep's knee
/// (rps), and where the SLO came from.
pub fn final_slo(
    spec: &BenchSpec,
    f: &ResultFile,
    presweep: Option<f64>,
) -> (Option<f64>, Option<f64>, String) {
    let knee = study::knee_rps(f);
    if let Auto::Value(ms) = spec.slo_p99_ms {
        return (Some(ms * 1e3), knee, format!("given: {ms} ms"));
    }
    let main = knee.and_then(|k| study::lc_alone_slo_us(f, k));
    match (main, presweep) {
        (Some(m), p) if p.is_none_or(|p| m >= p) => (
            Some(m),
            knee,
            format!(
                "auto: the highest LC-alone p99 (median over rounds) at loads up to the knee of \
                 its p99-vs-load curve ({:.0} rps) in this run's main sweep, so LC alone meets it \
                 at every such load",
                knee.unwrap_or(0.0)
            ),
        ),
        (_, Some(p)) => (
            Some(p),
            knee,
            "auto: the pre-sweep's SLO, higher than LC alone's p99 up to the knee in the main \
             sweep, so LC alone meets it at every such load"
                .into(),
        ),
        _ => (None, knee, "none: no LC-alone points".into()),
    }
}

/// The budget for the budget policies at a load: given, or the SLO
/// headroom there (SLO − LC-alone p99, at least 0), as the paper derives it.
pub fn budget_us(spec: &BenchSpec, slo_us: Option<f64>, lc_p99_us: Option<f64>) -> f64 {
    match spec.budget_us {
        Auto::Value(v) => v,
        Auto::Auto => match (slo_us, lc_p99_us) {
            (Some(s), Some(p)) => (s - p).max(0.0),
            _ => 0.0,
        },
    }
}

/// Where the budgets come from, in words.
pub fn budget_source(spec: &BenchSpec) -> String {
    match spec.budget_us {
        Auto::Value(v) => format!("given: {v} us"),
        Auto::Auto => "auto: the pre-sweep SLO minus the p99 of round 1's lc_alone invocation at \
                       the load (run just before the budget configurations of round 1), at least 0"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presweep_slo_and_budget() {
        let mut spec = BenchSpec::default();
        let pts = [(100.0, 1000.0), (200.0, 1200.0), (300.0, 4000.0)];
        let (slo, src) = presweep_slo(&spec, &pts, 900.0);
        assert_eq!(slo, Some(1200.0));
        assert!(src.contains("200"), "{src}");
        // not monotonic below the knee: the SLO covers every load up to it
        let u = [
            (100.0, 1500.0),
            (200.0, 1200.0),
            (300.0, 1250.0),
            (400.0, 5000.0),
        ];
        assert_eq!(presweep_slo(&spec, &u, 1000.0).0, Some(1500.0));
        assert_eq!(budget_us(&spec, slo, Some(1000.0)), 200.0);
        assert_eq!(budget_us(&spec, slo, Some(4000.0)), 0.0, "never negative");
        spec.slo_p99_ms = Auto::Value(5.0);
        spec.budget_us = Auto::Value(300.0);
        assert_eq!(presweep_slo(&spec, &pts, 900.0).0, Some(5000.0));
        assert_eq!(budget_us(&spec, Some(5000.0), Some(1000.0)), 300.0);
    }
}
