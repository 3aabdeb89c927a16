//! The study of `elfen daemon measure`'s runs: each phase's figures as
//! median, min and max over runs.

use super::{Phase, Run, WakeCharge};
use crate::guard::LatencySummary;
use elfen_results::Stat;
use serde::{Deserialize, Serialize};

/// One phase's figures over runs. Latencies are `None` when no run had a
/// sample (e.g. no freeze outside the freeze phase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// The daemon's CPU beyond the guards' occupation, % of one lane.
    pub overhead_pct: Stat,
    /// LC busy time, % of the window.
    pub lc_busy_pct: Stat,
    /// The batch spinner's CPU, % of one lane.
    pub batch_pct: Stat,
    /// LC busy periods begun in the window.
    pub lc_periods: Stat,
    /// Writer thread CPU, ns.
    pub writer_cpu_ns: Stat,
    /// Guards' occupation of the batch lane, ns.
    pub occupied_ns: Stat,
    /// Guards' and the writer's hold of the batch lane through the LC's
    /// idle gaps, ns.
    #[serde(default)]
    pub held_ns: Option<Stat>,
    /// LC switch-in → the writer on the batch lane, p50 (ns).
    pub off_lane_p50_ns: Option<Stat>,
    /// The same, p99 (ns).
    pub off_lane_p99_ns: Option<Stat>,
    /// Published busy edge → the guard running (→ frozen in the freeze
    /// phase), p50 (ns).
    pub step_aside_p50_ns: Option<Stat>,
    /// The same, p99 (ns).
    pub step_aside_p99_ns: Option<Stat>,
    /// Freeze request → frozen, p50 (ns).
    pub freeze_p50_ns: Option<Stat>,
    /// The same, p99 (ns).
    pub freeze_p99_ns: Option<Stat>,
    /// The thaw write, p50 (ns).
    pub thaw_p50_ns: Option<Stat>,
    /// Blind isolation: LC switch-in → its CPU taken from batch, p50 (ns).
    #[serde(default)]
    pub reaction_p50_ns: Option<Stat>,
    /// The same, p99 (ns).
    #[serde(default)]
    pub reaction_p99_ns: Option<Stat>,
    /// One wake-up of the writer from the request lane per LC busy period
    /// (at the busy edge, before the guard occupies the lane) × the
    /// machine's charge per wake-up, % of one lane: the part of the
    /// overhead that is the machine's price of that wake-up (the idle
    /// edge's wake-up falls inside the occupation). `None`: no charge
    /// measured.
    #[serde(default)]
    pub busy_edge_charge_pct: Option<Stat>,
}

/// The phases over runs; a phase no run had is `None`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    /// The kernel's charge per wake-up of a thread on the batch lane, ns.
    #[serde(default)]
    pub wake_charge_ns: Option<Stat>,
    /// Zero load, guard mode.
    pub zero: Option<PhaseSummary>,
    /// Half load, guard mode.
    pub half: Option<PhaseSummary>,
    /// Half load, freeze mode.
    pub freeze: Option<PhaseSummary>,
    /// Blind isolation woken at busy edges.
    #[serde(default)]
    pub blind_events: Option<PhaseSummary>,
    /// Blind isolation polling.
    #[serde(default)]
    pub blind_polled: Option<PhaseSummary>,
}

/// Median, min and max over runs of every figure of every phase.
pub fn summarize(runs: &[Run]) -> Summary {
    let charges: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.wake_charge.map(|c| c.charged_ns_per_wake))
        .collect();
    Summary {
        wake_charge_ns: Stat::of(&charges),
        zero: phase(runs.iter().map(|r| (&r.zero, r.wake_charge)).collect()),
        half: phase(runs.iter().map(|r| (&r.half, r.wake_charge)).collect()),
        freeze: phase(
            runs.iter()
                .filter_map(|r| Some((r.freeze.as_ref()?, r.wake_charge)))
                .collect(),
        ),
        blind_events: phase(
            runs.iter()
                .filter_map(|r| Some((r.blind_events.as_ref()?, r.wake_charge)))
                .collect(),
        ),
        blind_polled: phase(
            runs.iter()
                .filter_map(|r| Some((r.blind_polled.as_ref()?, r.wake_charge)))
                .collect(),
        ),
    }
}

fn phase(ps: Vec<(&Phase, Option<WakeCharge>)>) -> Option<PhaseSummary> {
    let stat = |f: fn(&Phase) -> f64| Stat::of(&ps.iter().map(|p| f(p.0)).collect::<Vec<_>>());
    let charged: Vec<f64> = ps
        .iter()
        .filter_map(|(p, c)| {
            let per_wake = c.as_ref()?.charged_ns_per_wake;
            Some(p.lc_periods as f64 * per_wake * 100.0 / p.window_ns.max(1) as f64)
        })
        .collect();
    let lat = |f: fn(&Phase) -> (&LatencySummary, u64)| {
        let xs: Vec<f64> = ps
            .iter()
            .map(|p| f(p.0))
            .filter(|(l, _)| l.samples > 0)
            .map(|(_, v)| v as f64)
            .collect();
        Stat::of(&xs)
    };
    Some(PhaseSummary {
        overhead_pct: stat(|p| p.overhead_pct)?,
        lc_busy_pct: stat(|p| p.lc_busy_pct)?,
        batch_pct: stat(|p| p.batch_pct)?,
        lc_periods: stat(|p| p.lc_periods as f64)?,
        writer_cpu_ns: stat(|p| p.writer_cpu_ns as f64)?,
        occupied_ns: stat(|p| p.occupied_ns as f64)?,
        held_ns: stat(|p| p.held_ns as f64),
        off_lane_p50_ns: lat(|p| (&p.off_lane, p.off_lane.p50_ns)),
        off_lane_p99_ns: lat(|p| (&p.off_lane, p.off_lane.p99_ns)),
        step_aside_p50_ns: lat(|p| (&p.step_aside, p.step_aside.p50_ns)),
        step_aside_p99_ns: lat(|p| (&p.step_aside, p.step_aside.p99_ns)),
        freeze_p50_ns: lat(|p| (&p.freeze, p.freeze.p50_ns)),
        freeze_p99_ns: lat(|p| (&p.freeze, p.freeze.p99_ns)),
        thaw_p50_ns: lat(|p| (&p.thaw, p.thaw.p50_ns)),
        reaction_p50_ns: lat(|p| (&p.reaction, p.reaction.p50_ns)),
        reaction_p99_ns: lat(|p| (&p.reaction, p.reaction.p99_ns)),
        busy_edge_charge_pct: Stat::of(&charged),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(p50_ns: u64, p99_ns: u64) -> LatencySummary {
        LatencySummary {
            samples: 10,
            p50_ns,
            p99_ns,
            max_ns: p99_ns,
        }
    }

    fn half(overhead_pct: f64, p99_ns: u64) -> Phase {
        Phase {
            overhead_pct,
            window_ns: 1_000_000_000,
            lc_periods: 1000,
            off_lane: lat(1_000, p99_ns),
            ..Phase::default()
        }
    }

    #[test]
    fn medians_over_runs_per_phase_and_missing_latencies_stay_missing() {
        let runs: Vec<Run> = [(2.4, 20_000), (2.2, 30_000), (2.6, 25_000)]
            .into_iter()
            .map(|(o, p99)| Run {
                wake_charge: Some(WakeCharge {
                    wakes: 1000,
                    charged_ns_per_wake: 10_000.0,
                }),
                zero: Phase::default(),
                half: half(o, p99),
                freeze: None,
                blind_events: None,
                blind_polled: (p99 == 30_000).then(|| Phase {
                    reaction: lat(2_000, 400_000),
                    ..Phase::default()
                }),
            })
            .collect();
        let s = summarize(&runs);
        let h = s.half.unwrap();
        assert_eq!(
            h.overhead_pct,
            Stat {
                median: 2.4,
                min: 2.2,
                max: 2.6
            }
        );
        assert_eq!(h.off_lane_p99_ns.unwrap().median, 25_000.0);
        assert_eq!(h.off_lane_p50_ns.unwrap().max, 1_000.0);
        assert!(h.freeze_p50_ns.is_none(), "no run had a freeze sample");
        // 1,000 busy edges × 10 µs in 1 s = 1 % of the lane
        assert!((h.busy_edge_charge_pct.unwrap().median - 1.0).abs() < 1e-9);
        assert_eq!(s.wake_charge_ns.unwrap().median, 10_000.0);
        assert!(s.zero.unwrap().off_lane_p99_ns.is_none());
        assert!(s.freeze.is_none(), "no run had a freeze phase");
        assert!(s.blind_events.is_none(), "no run had a blind phase");
        let polled = s.blind_polled.unwrap();
        assert_eq!(polled.reaction_p99_ns.unwrap().median, 400_000.0);
        assert!(h.reaction_p99_ns.is_none());
        assert!(summarize(&[]).half.is_none());
    }
}
