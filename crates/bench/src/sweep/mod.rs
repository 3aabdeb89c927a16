//! The **sweep**: every configuration at every load, one run. It only
//! *records*: what it measured goes into a result file (saved atomically
//! after every round and on interruption), and everything asked of that
//! file later — ratios, verdicts, tables — is `elfen_results::study` and
//! [`crate::report`].
//!
//! 1. Pre-flight, before any load is sent ([`rig`]): lanes, the port, the
//!    signal page (created, or attached with `--page`), the cgroups (or a
//!    reason to skip their configurations), the request set, the
//!    generator's scheduling class; then the LC service starts.
//! 2. **Demand alone** ([`calibrate`]): every request of the set once, one
//!    at a time (Figure 1); its mean gives the capacity the automatic loads
//!    derive from, corrected by an open-loop probe.
//! 3. **Batch alone**: each kernel on one batch lane, no load — the
//!    progress baseline.
//! 4. The SLO ([`slo`]): given, or an LC-alone pre-sweep's, for the budgets.
//! 5. Per load, ascending, in **interleaved rounds** ([`plan`]): round 1 of
//!    every (configuration, kernel) — `lc_alone` first, whose round-1 p99
//!    sets the automatic budget of that load — then round 2 of every one,
//!    and so on, so slow drift of the host hits every configuration alike.
//!    Every invocation starts its own batch process ([`invocation`]) and
//!    records one `Rep` ([`measure`]). **Common random numbers**: the seed
//!    of an invocation depends on the load and the round only, so within a
//!    round every configuration sends the same arrivals and requests.
//!    Then rounds are added where a verdict is still open, up to the caps
//!    ([`rounds`]).
//! 6. The final SLO (LC alone meets it up to the knee in this run), every
//!    point judged against it, and where the wall time went ([`wall`]).

pub mod calibrate;
pub mod daemon_mode;
pub mod invocation;
pub mod measure;
pub mod plan;
pub mod points;
pub mod rig;
pub mod rounds;
pub mod slo;
pub mod wall;

use crate::error::{BenchError, Result};
use crate::load::client::latency_buckets;
use crate::spec::{BatchProgram, BenchSpec, Config};
use elfen_cmd::Progress;
use elfen_results::{
    BatchInfo, BudgetInfo, ChaseInfo, LanesInfo, LcInfo, PreSweepPoint, ResultFile, Run, SloInfo,
    Source,
};
use invocation::{Ctx, Inv, Phase, run_measured};
use plan::{PRESWEEP_REPS, PRESWEEP_ROUND};
use rig::Rig;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Instant;
use wall::{Part, WallClock};

/// How to run a sweep.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The experiment (defaults filled in).
    pub spec: BenchSpec,
    /// The command line, for the result file.
    pub command: String,
    /// Where the result file goes.
    pub json_path: PathBuf,
    /// The executable that runs the hidden batch-worker subcommand.
    pub worker_exe: PathBuf,
    /// Print progress lines (stderr).
    pub progress: bool,
}

/// What a sweep produced.
#[derive(Debug)]
pub struct SweepOutcome {
    /// The result file (also saved at `json_path`).
    pub result: ResultFile,
    /// Where it was saved.
    pub json_path: PathBuf,
    /// Stopped by Ctrl-C: `result` holds the invocations finished before.
    pub interrupted: bool,
}

/// A running sweep: the rig, the result file being written, and the
/// progress and wall-time accounts.
struct Sweep<'a> {
    opts: &'a SweepOptions,
    stop: &'a AtomicBool,
    rig: Rig,
    result: ResultFile,
    progress: Progress,
    wall: WallClock,
    ctx_scale: f64,
    alone: Vec<(BatchProgram, f64)>,
}

impl Sweep<'_> {
    fn run_info(&mut self) -> &mut Run {
        self.result
            .run
            .as_mut()
            .expect("a measured file has its run")
    }

    fn save(&mut self) -> Result<()> {
        let t = Instant::now();
        self.run_info().wall = Some(self.wall.now());
        self.result.save(&self.opts.json_path)?;
        self.wall.charge(Part::Saving, t);
        Ok(())
    }

    fn measure(&mut self, phase: Phase, inv: Inv) -> Result<measure::Measured> {
        let ctx = Ctx {
            spec: &self.opts.spec,
            worker_exe: &self.opts.worker_exe,
            stop: self.stop,
            work_scale: self.ctx_scale,
            alone: self.alone.clone(),
        };
        run_measured(
            &ctx,
            &mut self.rig,
            &mut self.progress,
            &mut self.wall,
            phase,
            inv,
        )
    }

    /// Demand alone, then the capacity: the open-loop probe's mean service
    /// time where loads are automatic. A probe that finds the service's
    /// calibration drifted ([`calibrate::drift_scale`]) rescales the work,
    /// measures the demand alone again and probes once more, said in a
    /// note. Returns the loads.
    fn calibrate(&mut self) -> Result<Vec<f64>> {
        self.progress
            .say("measuring the demand alone (every request once, back to back) ...");
        let mut d = calibrate::demand_alone(&self.rig, self.stop)?;
        self.ctx_scale = d.work_scale;
        let mut probe = None;
        if self.opts.spec.rps.is_empty() {
            let mut p = self.probe(1e6 / d.mean_us())?;
            if let Some(scale) = p.1.and_then(|s| calibrate::drift_scale(&self.rig.set, s)) {
                let note = format!(
                    "the service's calibration drifted: under the capacity probe its requests \
                     took {:.0} us on average against {:.0} us back to back just before \
                     ({:.1}x the nominal mean; the host's cache state changed since the service \
                     started), so the work is scaled by {scale:.2} and the demand alone and the \
                     probe are measured again",
                    p.1.unwrap_or_default(),
                    d.mean_us(),
                    1.0 / scale,
                );
                self.progress.say(&format!("note: {note}"));
                self.run_info().notes.push(note);
                self.ctx_scale *= scale;
                d = calibrate::demand_scaled(&self.rig, self.ctx_scale, self.stop)?;
                p = self.probe(1e6 / d.mean_us())?;
            }
            probe = Some(p);
        }
        for n in calibrate::demand_notes(&self.rig.set, &d.demand_us) {
            self.progress.say(&format!("note: {n}"));
            self.run_info().notes.push(n);
        }
        let mut dd = latency_buckets();
        for &x in &d.demand_us {
            dd.record(x);
        }
        self.result.demand = Some(dd);
        let closed = 1e6 / d.mean_us();
        let chase = self.rig.lc().chase_steps_per_us().map(|s| ChaseInfo {
            working_set_kib: self.opts.spec.chase.working_set_kib,
            steps_per_us_hot: s,
            correction: d.work_scale,
        });
        let lc = &mut self.run_info().lc;
        lc.demand_alone_mean_us = d.mean_us();
        lc.demand_alone_p99_us = d.p99_us();
        lc.closed_loop_capacity_rps = closed;
        lc.chase = chase;
        let mut capacity = closed;
        if let Some((probe_rps, service_us)) = probe {
            lc.open_loop_probe_rps = Some(probe_rps);
            lc.open_loop_service_mean_us = service_us;
            if let Some(s) = service_us {
                capacity = 1e6 / s;
            }
        }
        self.run_info().lc.capacity_rps = capacity;
        let rps = plan::resolve_rps(&self.opts.spec, capacity);
        self.run_info().rps = rps.clone();
        Ok(rps)
    }

    /// The capacity probe: one LC-alone invocation at 30 % of the
    /// back-to-back capacity `closed_rps` (under open-loop load requests
    /// run slower than back to back: after idle gaps the working set is
    /// cold, so the automatic loads derive from this mean service time).
    /// Returns the probe's load and its mean service time, µs (`None` when
    /// it measured none).
    fn probe(&mut self, closed_rps: f64) -> Result<(f64, Option<f64>)> {
        let probe_rps = plan::round2(0.3 * closed_rps).max(1.0);
        self.progress
            .count(1, self.opts.spec.window_s(probe_rps) + 0.5);
        let m = self.measure(Phase::Probe, Inv::lc_alone(probe_rps, PRESWEEP_ROUND))?;
        let service_us = m.rep.utilization.lc / probe_rps * 1e6;
        Ok((
            probe_rps,
            (service_us.is_finite() && service_us > 0.0).then_some(service_us),
        ))
    }

    fn batch_alone(&mut self) -> Result<()> {
        let spec = &self.opts.spec;
        if spec.batch_configs().is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        for k in spec.batches() {
            self.progress.say(&format!(
                "measuring {k} alone on cpu {} ...",
                self.rig.lanes.batch_cpus[0]
            ));
            let ups = calibrate::batch_alone(spec, &self.opts.worker_exe, &self.rig, k, self.stop)?;
            self.alone.push((k, ups));
        }
        self.run_info().batch.alone_units_per_s = self
            .alone
            .iter()
            .map(|(k, u)| (k.name().to_string(), *u))
            .collect();
        self.wall.charge(Part::BatchAlone, t);
        Ok(())
    }

    /// The LC-alone pre-sweep (with an automatic SLO): its SLO sets the
    /// budgets. `Ok(None)` when interrupted.
    fn presweep(&mut self, rps: &[f64]) -> Result<Option<Option<f64>>> {
        let spec = &self.opts.spec;
        let p99_zero = self.run_info().lc.demand_alone_p99_us;
        if spec.slo_p99_ms.value().is_some() {
            return Ok(Some(slo::presweep_slo(spec, &[], p99_zero).0));
        }
        let mut curve = Vec::new();
        for &r in rps {
            let mut p99s = Vec::with_capacity(PRESWEEP_REPS as usize);
            for i in 0..PRESWEEP_REPS {
                match self.measure(
                    Phase::PreSweep,
                    Inv::lc_alone(r, invocation::presweep_round(i)),
                ) {
                    Ok(m) => p99s.push(m.rep.latency_us.p99),
                    Err(BenchError::Interrupted) => return Ok(None),
                    Err(e) => return Err(e),
                }
            }
            let mut sorted = p99s.clone();
            sorted.sort_by(f64::total_cmp);
            curve.push((r, sorted[sorted.len() / 2]));
            self.run_info().slo.presweep.push(PreSweepPoint {
                rps: r,
                p99_us: p99s,
            });
        }
        let (s, src) = slo::presweep_slo(&self.opts.spec, &curve, p99_zero);
        let info = &mut self.run_info().slo;
        info.presweep_p99_us = s;
        info.source = src;
        Ok(Some(s))
    }

    /// The final SLO, every point judged against it.
    fn judge(&mut self, presweep_slo: Option<f64>) {
        let (s, knee, src) = slo::final_slo(&self.opts.spec, &self.result, presweep_slo);
        for p in &mut self.result.points {
            p.summary.judge(s);
        }
        let info = &mut self.run_info().slo;
        info.p99_us = s;
        info.knee_rps = knee;
        info.source = src;
    }
}

/// The run record as pre-flight leaves it.
fn initial_run(spec: &BenchSpec, pf: &rig::Preflight) -> Run {
    let r = &pf.rig;
    Run {
        lc: LcInfo {
            service: r.lc().describe(),
            signal: spec.lc.signal.name().into(),
            requests: r.set.source.clone(),
            request_set_size: r.set.requests.len(),
            ..LcInfo::default()
        },
        lanes: LanesInfo {
            pairing: r.lanes.pairing.clone(),
            request_cpu: r.lanes.request_cpu,
            batch_cpus: r.lanes.batch_cpus.clone(),
            batch_shares_core: Some(r.lanes.batch_shares_core),
            generator_cpus: r.lanes.side_cpus.clone(),
            page: r.page.path().display().to_string(),
        },
        batch: BatchInfo {
            nap: spec.batch.nap.name().into(),
            alone_units_per_s: Vec::new(),
            utilization_method: measure::utilization_method(spec.batch.nap),
            details: vec![format!(
                "stream kernel stores: {}",
                elfen_kernels::StreamMode::DEFAULT.name()
            )],
        },
        rps: Vec::new(),
        slo: SloInfo::default(),
        budget: BudgetInfo {
            source: slo::budget_source(spec),
            by_rps: Vec::new(),
        },
        reps_planned: spec.reps,
        rounds: None,
        common_random_numbers: true,
        order: plan::ORDER_NOTE.into(),
        generator_sched: pf.generator_sched.clone(),
        skipped: pf.skipped.clone(),
        notes: pf.notes.clone(),
        load_before: elfen_cmd::proc::loadavg(),
        load_after: None,
        wall: None,
        interrupted: false,
    }
}

/// Runs the sweep.
pub fn run(opts: SweepOptions, stop: &AtomicBool) -> Result<SweepOutcome> {
    let spec = &opts.spec;
    spec.validate()?;
    spec.check_programs()?;
    let wall = WallClock::start();
    let progress = Progress::new(opts.progress);
    let mut pf = rig::preflight(spec)?;
    // The sweep's own thread stays off the request lane, like the generator.
    let _pin = elfen_topo::PinGuard::with_cpus(&pf.rig.lanes.side_cpus)?;
    let prepared = pf.prepared.take().expect("prepared once");
    rig::start_lc(spec, &mut pf.rig, prepared, &opts.worker_exe, stop)?;
    pf.notes.extend(pf.rig.lc().notes());
    if let Some(note) = rig::start_kernel_signal(spec, &mut pf.rig)? {
        pf.notes.push(note);
    }
    progress.say(&format!(
        "elfen bench: request lane cpu {}, batch lane(s) cpu {}, generator on cpu {}; LC: {}; {}",
        pf.rig.lanes.request_cpu,
        elfen_topo::format_cpu_list(&pf.rig.lanes.batch_cpus),
        elfen_topo::format_cpu_list(&pf.rig.lanes.side_cpus),
        pf.rig.lc().describe(),
        pf.rig.set.source
    ));
    for n in &pf.notes {
        progress.say(&format!("note: {n}"));
    }
    for s in &pf.skipped {
        progress.say(&format!("skipped {}: {}", s.config, s.reason));
    }
    let mut result = ResultFile::new(
        Source::Measured,
        opts.command.clone(),
        serde_json::to_value(spec).unwrap_or_default(),
        serde_json::to_value(elfen_topo::SystemInfo::collect()).unwrap_or_default(),
    );
    result.run = Some(initial_run(spec, &pf));
    let mut sw = Sweep {
        opts: &opts,
        stop,
        rig: pf.rig,
        result,
        progress,
        wall,
        ctx_scale: 1.0,
        alone: Vec::new(),
    };
    let interrupted = match sweep_phases(&mut sw) {
        Ok(i) => i,
        Err(BenchError::Interrupted) => true,
        Err(e) => return Err(e),
    };
    sw.progress.finish();
    let load_after = elfen_cmd::proc::loadavg();
    let run = sw.run_info();
    run.load_after = Some(load_after);
    run.interrupted = interrupted;
    sw.save()?;
    let Sweep { result, .. } = sw;
    Ok(SweepOutcome {
        result,
        json_path: opts.json_path.clone(),
        interrupted,
    })
}

/// The phases after pre-flight; `Ok(true)` when Ctrl-C stopped them.
fn sweep_phases(sw: &mut Sweep) -> Result<bool> {
    let setup = Instant::now();
    let rps = sw.calibrate()?;
    sw.wall.charge(Part::Setup, setup);
    sw.batch_alone()?;
    sw.save()?;
    let spec = &sw.opts.spec;
    let presweep = if spec.slo_p99_ms.value().is_some() {
        0
    } else {
        rps.len() * PRESWEEP_REPS as usize
    };
    let skipped: Vec<Config> = sw.run_info().skipped.iter().map(|s| s.config).collect();
    let configs: Vec<Config> = spec
        .batch_configs()
        .into_iter()
        .filter(|c| !skipped.contains(c))
        .collect();
    let slots = plan::round_slots(&configs, &spec.batches()).len();
    let mean_window_s =
        rps.iter().map(|&r| spec.window_s(r)).sum::<f64>() / rps.len().max(1) as f64;
    sw.progress.count(
        presweep + rps.len() * slots * spec.reps as usize,
        mean_window_s + spec.warmup_s + 0.15,
    );
    let Some(presweep_slo) = sw.presweep(&rps)? else {
        return Ok(true);
    };
    if let Some(s) = presweep_slo {
        let src = sw.run_info().slo.source.clone();
        sw.progress.say(&format!(
            "budgets from the SLO p99 {:.2} ms ({src})",
            s / 1e3
        ));
    }
    sw.save()?;
    let interrupted = sw.rounds(&rps, presweep_slo)?;
    sw.judge(presweep_slo);
    Ok(interrupted)
}
