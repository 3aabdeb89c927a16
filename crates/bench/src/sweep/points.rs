//! The points of a sweep as their invocations finish: one accumulator per
//! (configuration, kernel, load), turned into the result file's points
//! after every round.

use super::measure::Measured;
use crate::lc::builtin::idle_buckets;
use crate::load::client::latency_buckets;
use crate::spec::{BatchProgram, Config};
use elfen_results::{Distribution, Point, Rep, Summary};

/// The invocations of one point collected so far.
#[derive(Debug, Clone)]
pub struct PointAcc {
    config: Config,
    batch: Option<BatchProgram>,
    rps: f64,
    /// Finished invocations.
    pub reps: Vec<Rep>,
    idle: Option<Distribution>,
    service: Distribution,
}

impl PointAcc {
    /// An empty point.
    pub fn new(config: Config, batch: Option<BatchProgram>, rps: f64) -> PointAcc {
        PointAcc {
            config,
            batch,
            rps,
            reps: Vec::new(),
            idle: None,
            service: latency_buckets(),
        }
    }

    /// Adds a finished invocation.
    pub fn push(&mut self, m: Measured) {
        if let Some(i) = &m.idle {
            self.idle.get_or_insert_with(idle_buckets).merge(i);
        }
        self.service.merge(&m.service);
        self.reps.push(m.rep);
    }

    fn point(&self, slo_us: Option<f64>) -> Point {
        Point {
            config: self.config,
            label: None,
            batch: self.batch.map(|b| b.name()),
            rps_target: self.rps,
            summary: Summary::of(&self.reps, slo_us),
            reps: self.reps.clone(),
            idle_periods: self.idle.clone(),
            service: (self.service.total() > 0).then(|| self.service.clone()),
        }
    }
}

/// The points of the result file: every point with at least one finished
/// invocation (`reps` holds exactly those), summaries over them.
pub fn points_of(accs: &[PointAcc], slo_us: Option<f64>) -> Vec<Point> {
    accs.iter()
        .filter(|a| !a.reps.is_empty())
        .map(|a| a.point(slo_us))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::plan::round_slots;
    use elfen_results::{MeasuredRep, Percentiles, Utilization};

    fn measured(round: u32, p99: f64) -> Measured {
        Measured {
            rep: Rep {
                round: Some(round),
                rps_achieved: 800.0,
                requests: 800,
                errors: 0,
                latency_us: Percentiles {
                    p50: p99 / 4.0,
                    p95: p99 / 2.0,
                    p99,
                    p999: p99,
                    max: p99,
                    mean: p99 / 3.0,
                },
                utilization: Utilization {
                    lc: 0.5,
                    batch: 0.0,
                    total: 0.5,
                },
                batch_units_per_s: None,
                batch_progress: None,
                naps_per_s: None,
                wakes_per_s: None,
                budget_us: None,
                histogram: None,
                measured: Some(MeasuredRep::default()),
                simulated: None,
            },
            idle: Some(idle_buckets()),
            service: latency_buckets(),
        }
    }

    #[test]
    fn an_interrupted_sweep_keeps_its_partial_points() {
        let stream = BatchProgram::Kernel(crate::spec::KernelKind::Stream);
        let mut accs: Vec<PointAcc> = round_slots(&[Config::BorrowIdle], &[stream])
            .iter()
            .map(|&(c, k)| PointAcc::new(c, k, 800.0))
            .collect();
        accs.push(PointAcc::new(Config::LcAlone, None, 1600.0));
        // two rounds of lc_alone, one of borrow idle: stopped in round 2
        accs[0].push(measured(1, 1000.0));
        accs[0].push(measured(2, 3000.0));
        accs[1].push(measured(1, 2000.0));
        let pts = points_of(&accs, Some(2500.0));
        assert_eq!(pts.len(), 2, "the point without invocations is left out");
        assert_eq!(pts[0].reps.len(), 2);
        assert_eq!(pts[0].summary.latency_us.p99.median, 2000.0);
        assert_eq!(pts[0].summary.slo_met, Some(true));
        assert_eq!(pts[1].reps.len(), 1);
        assert_eq!(pts[1].batch.as_deref(), Some("stream"));
        assert!(pts[1].idle_periods.is_some());
        assert!(pts[1].service.is_none(), "no service times recorded");
    }
}
