//! The main sweep's **rounds**: every point's first `reps` rounds, then
//! rounds added where a verdict is still open.
//!
//! 1. Per load, ascending: `reps` interleaved rounds — round 1 of every
//!    (configuration, batch program), LC alone first, then round 2 of every
//!    one, …, the order after LC alone rotated round by round
//!    ([`super::plan::round_order`]).
//! 2. **Added rounds**, sized by the precision the verdicts need. With the
//!    knee of LC alone's curve so far, a judged point (a load up to the
//!    knee) whose interval of the paired ratio straddles the limit is
//!    *open* (`elfen_results::study::open_verdicts`) — unless its series is
//!    HURT at another load, which decides its verdict. In passes over the
//!    loads, ascending, each load with open points runs one more round: LC
//!    alone and those points, interleaved as above and on one seed (common
//!    random numbers), so each added round pairs up like the first ones. A
//!    point leaves when its verdict concludes (kept or HURT) or it has
//!    `max_reps` rounds; no round starts that would take the added rounds
//!    past `added_reps_budget_s` (predicted from the mean invocation so
//!    far). The knee is read again before every pass.
//!
//! Every round is kept in the result file; [`elfen_results::Rounds`]
//! records the caps, each added round and why they stopped.

use super::Sweep;
use super::invocation::{Inv, Phase};
use super::plan::Slot;
use super::points::{self, PointAcc};
use super::slo;
use crate::error::{BenchError, Result};
use crate::spec::Config;
use elfen_results::study::{self, Open};
use elfen_results::{AddedRound, LoadRounds, Point, Rounds, RoundsEnd};
use std::time::Instant;

/// The points of the main sweep, load-major.
pub(super) struct Grid {
    slots: Vec<Slot>,
    rps: Vec<f64>,
    accs: Vec<PointAcc>,
    /// The budget policies' budget per load (`None` until round 1's LC
    /// alone sets it, when automatic).
    budgets: Vec<Option<f64>>,
    /// The rounds added per load.
    added: Vec<Vec<AddedRound>>,
}

impl Grid {
    /// Empty points for `slots` at every load of `rps`.
    pub(super) fn new(slots: Vec<Slot>, rps: &[f64], budget_us: Option<f64>) -> Grid {
        let accs = rps
            .iter()
            .flat_map(|&r| slots.iter().map(move |&(c, k)| PointAcc::new(c, k, r)))
            .collect();
        Grid {
            accs,
            budgets: vec![budget_us; rps.len()],
            added: vec![Vec::new(); rps.len()],
            rps: rps.to_vec(),
            slots,
        }
    }

    fn acc(&self, load: usize, slot: usize) -> &PointAcc {
        &self.accs[load * self.slots.len() + slot]
    }

    fn acc_mut(&mut self, load: usize, slot: usize) -> &mut PointAcc {
        &mut self.accs[load * self.slots.len() + slot]
    }

    /// The result file's points.
    pub(super) fn points(&self, slo_us: Option<f64>) -> Vec<Point> {
        points::points_of(&self.accs, slo_us)
    }

    /// Invocations finished so far.
    fn invocations(&self) -> usize {
        self.accs.iter().map(|a| a.reps.len()).sum()
    }

    /// Rounds run at `load` so far (LC alone runs in every one).
    fn rounds_at(&self, load: usize) -> u32 {
        u32::try_from(self.acc(load, 0).reps.len()).unwrap_or(u32::MAX)
    }

    /// The load index and slot of an open verdict, if it is one of ours.
    fn locate(&self, o: &Open) -> Option<(usize, usize)> {
        let load = self.rps.iter().position(|&r| r == o.rps)?;
        let slot = self.slots.iter().position(|&(c, k)| {
            c == o.key.config && k.map(|k| k.name()) == o.key.batch && o.key.label.is_none()
        })?;
        Some((load, slot))
    }

    /// The record of the added rounds.
    fn by_rps(&self) -> Vec<LoadRounds> {
        (0..self.rps.len())
            .map(|l| LoadRounds {
                rps: self.rps[l],
                rounds: self.rounds_at(l),
                added: self.added[l].clone(),
            })
            .collect()
    }
}

/// Per load (ascending), the slots of the open verdicts there.
pub(super) fn open_slots(grid: &Grid, open: &[Open]) -> Vec<(usize, Vec<usize>)> {
    let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
    for (load, slot) in open.iter().filter_map(|o| grid.locate(o)) {
        match out.iter_mut().find(|(l, _)| *l == load) {
            Some((_, v)) => v.push(slot),
            None => out.push((load, vec![slot])),
        }
    }
    out.sort_by_key(|(l, _)| *l);
    for (_, v) in &mut out {
        v.sort_unstable();
        v.dedup();
    }
    out
}

impl Sweep<'_> {
    /// The first `reps` rounds at every load, then the added rounds.
    /// Returns whether Ctrl-C stopped them.
    pub(super) fn rounds(&mut self, rps: &[f64], presweep_slo: Option<f64>) -> Result<bool> {
        let spec = self.opts.spec.clone();
        let skipped: Vec<Config> = self.run_info().skipped.iter().map(|s| s.config).collect();
        let configs: Vec<Config> = spec
            .batch_configs()
            .into_iter()
            .filter(|c| !skipped.contains(c))
            .collect();
        let slots = super::plan::round_slots(&configs, &spec.batches());
        let all: Vec<usize> = (0..slots.len()).collect();
        let mut grid = Grid::new(slots, rps, spec.budget_us.value());
        for load in 0..rps.len() {
            for round in 0..spec.reps {
                if self.round(&mut grid, load, round, &all, presweep_slo)? {
                    return Ok(true);
                }
            }
        }
        self.add_rounds(&mut grid, presweep_slo)
    }

    /// One round at `load` of the slots `which` (LC alone first).
    /// Returns whether Ctrl-C stopped it; the file is saved after it.
    fn round(
        &mut self,
        g: &mut Grid,
        load: usize,
        round: u32,
        which: &[usize],
        presweep_slo: Option<f64>,
    ) -> Result<bool> {
        let r = g.rps[load];
        for i in super::plan::round_order(which, round) {
            let (config, batch) = g.slots[i];
            let inv = Inv {
                config,
                batch,
                rps: r,
                budget_us: config.uses_budget().then(|| g.budgets[load].unwrap_or(0.0)),
                round,
            };
            match self.measure(Phase::Main, inv) {
                Ok(m) => g.acc_mut(load, i).push(m),
                Err(BenchError::Interrupted) => {
                    self.result.points = g.points(presweep_slo);
                    return Ok(true);
                }
                Err(e) => return Err(e),
            }
            if config == Config::LcAlone && round == 0 && g.budgets[load].is_none() {
                let lc_p99 = g.acc(load, 0).reps[0].latency_us.p99;
                let b = slo::budget_us(&self.opts.spec, presweep_slo, Some(lc_p99));
                g.budgets[load] = Some(b);
                self.run_info().budget.by_rps.push((r, b));
            }
        }
        self.result.points = g.points(presweep_slo);
        self.save()?;
        Ok(false)
    }

    /// Rounds added to the open verdicts, within the caps (module docs).
    /// Returns whether Ctrl-C stopped them.
    fn add_rounds(&mut self, g: &mut Grid, presweep_slo: Option<f64>) -> Result<bool> {
        let spec = self.opts.spec.clone();
        let started = Instant::now();
        let tol = spec.verdict_tolerance_pct / 100.0;
        let w = self.wall.now();
        let per_inv_s = (w.points_s + w.reruns_s) / g.invocations().max(1) as f64;
        let mut info = Rounds {
            max_reps: spec.max_reps,
            budget_s: spec.added_reps_budget_s,
            ..Rounds::default()
        };
        let mut interrupted = false;
        'passes: loop {
            info.knee_rps = study::knee_rps(&self.result);
            let prot = study::protection(&self.result, tol, info.knee_rps);
            let (open, capped) = study::open_verdicts(&prot, spec.max_reps as usize);
            let by_load = open_slots(g, &open);
            if by_load.is_empty() {
                info.end = if capped.is_empty() {
                    RoundsEnd::Concluded
                } else {
                    RoundsEnd::RoundCap
                };
                break;
            }
            let n: usize = by_load.iter().map(|(_, v)| v.len() + 1).sum();
            self.progress.count(n, per_inv_s);
            for (load, open_here) in by_load {
                let which: Vec<usize> = std::iter::once(0).chain(open_here).collect();
                let predicted = started.elapsed().as_secs_f64() + per_inv_s * which.len() as f64;
                if predicted > spec.added_reps_budget_s {
                    info.end = RoundsEnd::TimeCap;
                    break 'passes;
                }
                let round = g.rounds_at(load);
                let series = which[1..]
                    .iter()
                    .map(|&i| {
                        let (c, k) = g.slots[i];
                        k.map_or(c.name().to_string(), |k| format!("{c} · {k}"))
                    })
                    .collect();
                if self.round(g, load, round, &which, presweep_slo)? {
                    info.end = RoundsEnd::Interrupted;
                    interrupted = true;
                    break 'passes;
                }
                g.added[load].push(AddedRound {
                    round: round + 1,
                    series,
                });
            }
        }
        info.spent_s = started.elapsed().as_secs_f64();
        info.by_rps = g.by_rps();
        self.run_info().rounds = Some(info);
        Ok(interrupted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{BatchProgram, KernelKind};
    use elfen_results::study::SeriesKey;

    #[test]
    fn open_verdicts_map_to_their_loads_and_slots() {
        let stream = BatchProgram::Kernel(KernelKind::Stream);
        let matrix = BatchProgram::Kernel(KernelKind::Matrix);
        let slots = super::super::plan::round_slots(
            &[Config::SchedIdle, Config::BorrowIdle],
            &[stream, matrix],
        );
        let g = Grid::new(slots, &[500.0, 1000.0], None);
        let open = |c: Config, b: &str, rps: f64| Open {
            key: SeriesKey {
                config: c,
                label: None,
                batch: Some(b.into()),
            },
            rps,
            rounds: 3,
        };
        let o = [
            open(Config::BorrowIdle, "matrix", 1000.0),
            open(Config::SchedIdle, "stream", 1000.0),
            open(Config::BorrowIdle, "stream", 500.0),
            // not a point of this sweep
            open(Config::Naive, "stream", 500.0),
            open(Config::BorrowIdle, "stream", 750.0),
        ];
        // slots: lc_alone, sched_idle·stream, borrow_idle·stream,
        // sched_idle·matrix, borrow_idle·matrix
        assert_eq!(open_slots(&g, &o), vec![(0, vec![2]), (1, vec![1, 4])]);
        assert!(open_slots(&g, &[]).is_empty());
    }
}
