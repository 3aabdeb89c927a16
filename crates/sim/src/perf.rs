//! `elfen sim perf`: the simulator's own speed — events per second on one
//! thread, and the wall time of a full sweep (the experiment in
//! `configs/sim/perf_sweep.toml`: 10 configurations × 20 loads on an 8-core
//! chip, one repetition of N requests each) on a given number of threads.
//!
//! Figures are medians over `runs` repetitions with min and max; this is a
//! measurement, never a test assertion.

use crate::arrivals::Arrivals;
use crate::batch::builtin;
use crate::config::{Experiment, SimConfig};
use crate::demand::DemandSpec;
use crate::engine::{Mode, RunSpec, ServerModel, Timing, run};
use crate::error::SimError;
use crate::sweep::RunOptions;
use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_results::Stat;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// The sweep `elfen sim perf` times (also runnable with `elfen sim run`).
pub const PERF_SWEEP_TOML: &str = include_str!("../../../configs/sim/perf_sweep.toml");

/// Options of [`run_perf`].
#[derive(Debug, Clone)]
pub struct PerfOptions {
    /// Requests (measured) of each events/s run.
    pub requests: u64,
    /// Measured requests per sweep point.
    pub sweep_requests: u64,
    /// Repetitions of each measurement.
    pub runs: u32,
    /// Threads of the sweep.
    pub threads: usize,
    /// Time the sweep too.
    pub sweep: bool,
    /// Command line (stored in the JSON).
    pub command: String,
}

/// One events/s measurement.
#[derive(Debug, Clone, Serialize)]
pub struct EventsRun {
    /// What was simulated.
    pub scenario: String,
    /// Events processed per run.
    pub events: u64,
    /// Events per second of each run.
    pub events_per_s: Vec<f64>,
    /// Median, min, max of `events_per_s`.
    pub stat: Stat,
}

/// The figures of `elfen sim perf`.
#[derive(Debug, Clone, Serialize)]
pub struct PerfOutput {
    /// Command line.
    pub command: String,
    /// CPUs the OS reports.
    pub cpus: usize,
    /// Events per second on one thread, per scenario.
    pub single_thread: Vec<EventsRun>,
    /// Sweep description.
    pub sweep: Option<SweepPerf>,
}

/// Sweep timing.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPerf {
    /// Configurations × loads × reps.
    pub points: usize,
    /// Measured requests per point (plus 10% warm-up).
    pub requests_per_point: u64,
    /// Threads.
    pub threads: usize,
    /// Wall time of each run, s.
    pub wall_s: Vec<f64>,
    /// Median, min, max of `wall_s`.
    pub stat: Stat,
    /// Events of one sweep (all points).
    pub events: u64,
}

impl PerfOutput {
    /// Human-readable figures.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "single thread ({} CPUs reported):", self.cpus);
        for r in &self.single_thread {
            let _ = writeln!(
                s,
                "  {:<58} {:>6.2} M events/s median (min {:.2}, max {:.2}; {} runs of {} events)",
                r.scenario,
                r.stat.median / 1e6,
                r.stat.min / 1e6,
                r.stat.max / 1e6,
                r.events_per_s.len(),
                r.events
            );
        }
        if let Some(w) = &self.sweep {
            let _ = writeln!(
                s,
                "sweep: {} points x {} requests on {} threads: {:.1} s median (min {:.1}, max {:.1}; {} runs), {:.2} M events/s overall",
                w.points,
                w.requests_per_point,
                w.threads,
                w.stat.median,
                w.stat.min,
                w.stat.max,
                w.wall_s.len(),
                w.events as f64 / w.stat.median / 1e6
            );
        }
        s
    }
}

fn events_run(scenario: &str, spec: &RunSpec<'_>, runs: u32) -> EventsRun {
    let mut rates = Vec::new();
    let mut events = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let out = run(spec);
        let dt = t.elapsed().as_secs_f64();
        events = out.events;
        rates.push(out.events as f64 / dt);
    }
    EventsRun {
        scenario: scenario.to_string(),
        events,
        stat: Stat::of(&rates).expect("runs >= 1"),
        events_per_s: rates,
    }
}

/// Measures the figures.
pub fn run_perf(opts: &PerfOptions) -> Result<PerfOutput, SimError> {
    let demand = DemandSpec::Lucene.resolve(Path::new("."))?;
    let timing = Timing {
        nap_ns: 1640,
        wake_ns: 720,
        os_preempt_ns: 6000,
        blind_react_ns: 25_000,
    };
    let lp = builtin("loop").expect("built-in");
    let core = ServerModel {
        worker_cores: 1,
        smt_ways: 2,
    };
    let chip = ServerModel {
        worker_cores: 7,
        smt_ways: 2,
    };
    let mut single = Vec::new();
    let scenarios: [(&str, ServerModel, Mode, f64); 3] = [
        (
            "one core, borrow_idle, lucene demand, 100 RPS (58% lane)",
            core,
            Mode::Elfen(PolicyConfig::simple(PolicyKind::BorrowIdle)),
            100.0,
        ),
        (
            "one core, refresh_budget 20 ms, 100 RPS",
            core,
            Mode::Elfen(PolicyConfig::budget(PolicyKind::RefreshBudget, 20_000_000)),
            100.0,
        ),
        (
            "8-core chip (7 workers), borrow_idle, 800 RPS",
            chip,
            Mode::Elfen(PolicyConfig::simple(PolicyKind::BorrowIdle)),
            800.0,
        ),
    ];
    for (name, server, mode, rps) in scenarios {
        eprintln!("elfen sim perf: {name} ...");
        let arrivals = Arrivals::at_rps(None, rps);
        let spec = RunSpec {
            server,
            mode,
            interference: lp,
            timing,
            arrivals: &arrivals,
            demand: &demand,
            requests: opts.requests,
            warmup_requests: opts.requests / 10,
            arrival_seed: 1,
            demand_seed: 2,
            record_idle: false,
        };
        single.push(events_run(name, &spec, opts.runs));
    }
    let sweep = if opts.sweep {
        let mut cfg = SimConfig::from_toml(PERF_SWEEP_TOML, "configs/sim/perf_sweep.toml")?;
        cfg.requests = opts.sweep_requests as i64;
        cfg.warmup_requests = Some((opts.sweep_requests / 10) as i64);
        let exp: Experiment = cfg.resolve(Path::new("."))?;
        let points = exp.configs.len() * exp.loads.len() * exp.reps as usize;
        let mut wall = Vec::new();
        let mut events = 0u64;
        for i in 0..opts.runs {
            eprintln!(
                "elfen sim perf: sweep {}/{} ({points} points x {} requests, {} threads) ...",
                i + 1,
                opts.runs,
                opts.sweep_requests,
                opts.threads
            );
            let t = Instant::now();
            let file = exp.run(&RunOptions {
                threads: opts.threads,
                progress: false,
                save: None,
                command: opts.command.clone(),
            })?;
            wall.push(t.elapsed().as_secs_f64());
            events = file
                .points
                .iter()
                .flat_map(|p| &p.reps)
                .filter_map(|r| r.simulated.map(|s| s.events))
                .sum();
        }
        Some(SweepPerf {
            points,
            requests_per_point: opts.sweep_requests,
            threads: opts.threads,
            stat: Stat::of(&wall).expect("runs >= 1"),
            wall_s: wall,
            events,
        })
    } else {
        None
    };
    Ok(PerfOutput {
        command: opts.command.clone(),
        cpus: crate::sweep::default_threads(),
        single_thread: single,
        sweep,
    })
}
