//! `elfen sim …`: the simulator's subcommands (flattened into the `elfen`
//! binary by `crates/cli`).
//!
//! * `elfen sim run CONFIG` — simulate an experiment config, print a table,
//!   save a result file (`--json`).
//! * `elfen sim check CONFIG…` — parse and check configs without running.
//! * `elfen sim kinds` — the built-in batch kinds and where their numbers come from.
//! * `elfen sim validate MEASURED` — simulate a measured harness result and
//!   report the per-point error of p99 and utilization.
//! * `elfen sim repro` — the paper's headline results next to the simulator's.
//! * `elfen sim perf` — events per second and the wall time of a full sweep.

use crate::batch::BUILTIN_KINDS;
use crate::config::{SimConfig, base_dir};
use crate::perf::{PerfOptions, run_perf};
use crate::repro::{ReproOptions, run_repro};
use crate::sweep::{RunOptions, default_threads};
use crate::validate::{DemandSource, ValidateOptions, validate};
use anyhow::Context;
use clap::{Args, Subcommand};
use elfen_results::ResultFile;
use std::path::PathBuf;

/// The simulator's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate an LC service and batch work on SMT cores, chips and clusters
    /// (discrete-event; the runtime's own policy state machines).
    Sim(SimArgs),
}

/// Arguments of `elfen sim`.
#[derive(Debug, Args)]
#[command(
    long_about = "Discrete-event simulator of elfen: LC requests on request lanes, batch threads on \
                  SMT batch lanes under Elfen's policies (elfen-policy, called as is) and baselines, \
                  on one core, a chip with a dispatcher and a shared queue, or a cluster fan-out. \
                  Results are written in the harness's result format (elfen-results) so \
                  `elfen report` can plot simulated and measured curves together. \
                  The model and its assumptions: docs/simulator.md."
)]
pub struct SimArgs {
    #[command(subcommand)]
    cmd: SimCmd,
}

#[derive(Debug, Subcommand)]
enum SimCmd {
    /// Run an experiment config (TOML, see configs/sim/): every configuration
    /// × load × repetition, in parallel; prints one line per point.
    Run(RunArgs),
    /// Parse and check experiment configs without running them.
    Check(CheckArgs),
    /// List the built-in batch kinds: LC slowdown while co-running, batch
    /// progress rate while co-running, and where the numbers come from.
    Kinds,
    /// Compare the simulator with a measured harness result file: simulate
    /// the measured loads (Poisson, each point's rps_target) with each
    /// point's recorded service times or the alone demand (--demand) on a
    /// model of the measured machine and report per point measured vs
    /// simulated p50, p99 and LC utilization, relative errors, the measured
    /// reps' spread and a verdict below the knee.
    Validate(ValidateArgs),
    /// Reproduce the Elfen paper's headline results (one 2-way SMT core and
    /// an 8-core chip, Lucene-like demand) and print them next to the paper's.
    Repro(ReproArgs),
    /// Measure the simulator's speed: events per second on one thread and the
    /// wall time of a full sweep (10 configurations × 20 loads × N requests).
    Perf(PerfArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Experiment config (TOML).
    config: PathBuf,
    /// Save the result file (elfen-results JSON) here; written as points
    /// finish and at the end.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Override `requests` (measured requests per repetition).
    #[arg(long)]
    requests: Option<i64>,
    /// Override `warmup_requests`.
    #[arg(long)]
    warmup: Option<i64>,
    /// Override `reps` (repetitions per point).
    #[arg(long)]
    reps: Option<i64>,
    /// Override the loads: comma-separated requests per second.
    #[arg(long, value_delimiter = ',', value_name = "RPS,...")]
    rps: Option<Vec<f64>>,
    /// Override `seed`.
    #[arg(long)]
    seed: Option<u64>,
    /// Worker threads (default: all CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress line on stderr.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Experiment configs (TOML).
    #[arg(required = true)]
    configs: Vec<PathBuf>,
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// Measured result file from the harness (`elfen bench --json`), with
    /// `distributions["demand"]` and points such as `lc_alone`, `naive`,
    /// `borrow_idle`.
    measured: PathBuf,
    /// Save the validation report (JSON) here.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Also save the simulated points as a result file (for `elfen report`).
    #[arg(long, value_name = "PATH")]
    sim_json: Option<PathBuf>,
    /// Request demand of the simulated points. `service`: each point's
    /// recorded service times (points[].distributions["service"], at that
    /// configuration and load), no slowdown for co-running: checks the
    /// harness's queueing measurement and the simulator's queueing engine
    /// against each other. `demand`: the file's distributions["demand"]
    /// (measured back to back, alone) slowed by a per-kind factor: the
    /// paper-style prediction, which misses the idle penalty (reported per
    /// load). Default: `service` when the file has per-point service
    /// distributions, else `demand`. Values are drawn by bucket count, then
    /// uniformly inside the bucket.
    #[arg(long, value_enum, value_name = "SOURCE")]
    demand: Option<DemandArg>,
    /// Request-lane time per request after the recorded service ends, µs,
    /// added to every simulated demand: the harness's worker writes the
    /// response before its request "end", so its LC utilization (begin to
    /// end) counts that write and its recorded service time does not. The
    /// report's lc_busy_per_request_us − measured_service_mean_us estimates
    /// it per point.
    #[arg(long, default_value_t = 0.0)]
    response_us: f64,
    /// `--demand demand` only: LC slowdown while the batch co-runs (all
    /// batch kinds). Default, per batch kind: the ratio of measured service
    /// times (reps' `measured.breakdown.service_p50_us`) of `cpuset` to
    /// `lc_alone`; without them, fitted to the mean latency of the
    /// lowest-load `cpuset` point; else the built-in kind's default.
    #[arg(long)]
    slowdown: Option<f64>,
    /// p99 SLO in µs for the knee (default: the measured file's
    /// `summary.slo_p99_us`).
    #[arg(long)]
    slo_us: Option<f64>,
    /// Budget in µs for measured budget-policy points (skipped without it
    /// unless their reps carry `budget_us`).
    #[arg(long)]
    budget_us: Option<f64>,
    /// Step-aside latency of the measured runtime's nap, ns.
    #[arg(long, default_value_t = 1000)]
    nap_ns: u64,
    /// Wake latency of the measured runtime's nap, ns (futex wake on the dev
    /// VM: 9–17 µs p50).
    #[arg(long, default_value_t = 13000)]
    wake_ns: u64,
    /// `sched_idle` points: time for the LC worker to preempt the
    /// SCHED_IDLE batch thread on its lane, ns (6 µs: a p50 measured on a
    /// KVM guest).
    #[arg(long, default_value_t = 6000)]
    os_preempt_ns: u64,
    /// Measured requests per simulated repetition (default: as many as a
    /// measured rep, so the simulated p99 is the same statistic as the
    /// measured one — a median over short windows — with the harness's
    /// warm-up; a large N gives the long-run p99 instead).
    #[arg(long)]
    requests: Option<u64>,
    /// Simulated repetitions per point (many: the median over short windows
    /// is noisy).
    #[arg(long, default_value_t = 200)]
    reps: u32,
    /// Error bound below the knee, percent.
    #[arg(long, default_value_t = 15.0)]
    tolerance_pct: f64,
    /// Worker threads (default: all CPUs).
    #[arg(long)]
    threads: Option<usize>,
}

/// `--demand` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum DemandArg {
    /// The file's alone demand with a per-kind slowdown.
    Demand,
    /// Each point's recorded service times.
    Service,
}

#[derive(Debug, Args)]
struct ReproArgs {
    /// Save the reproduction (every simulated point and the table) as JSON.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Also write the table as Markdown.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
    /// Measured requests per repetition.
    #[arg(long, default_value_t = 200_000)]
    requests: u64,
    /// Repetitions per point.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Worker threads (default: all CPUs).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Debug, Args)]
struct PerfArgs {
    /// Save the figures (JSON) here.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Requests of the single-thread events/s run.
    #[arg(long, default_value_t = 2_000_000)]
    requests: u64,
    /// Measured requests per point of the sweep.
    #[arg(long, default_value_t = 1_000_000)]
    sweep_requests: u64,
    /// How many times to repeat each measurement (the median is quoted).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Threads for the sweep.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Only measure events per second.
    #[arg(long)]
    skip_sweep: bool,
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        let Command::Sim(args) = self;
        // `elfen sim …` whatever the binary's path, for result files and docs.
        let command = std::iter::once("elfen".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" ");
        match args.cmd {
            SimCmd::Run(a) => run_cmd(a, command),
            SimCmd::Check(a) => {
                for path in &a.configs {
                    let cfg = SimConfig::load(path)?;
                    let exp = cfg.resolve(&base_dir(path))?;
                    println!(
                        "{}: ok ({} configurations × {} loads × {} reps, {} requests each)",
                        path.display(),
                        exp.configs.len(),
                        exp.loads.len(),
                        exp.reps,
                        exp.requests
                    );
                }
                Ok(())
            }
            SimCmd::Kinds => {
                println!(
                    "{:<8} {:>11} {:>10}  {:<10}  source",
                    "kind", "lc_slowdown", "corun_rate", "basis"
                );
                for k in BUILTIN_KINDS {
                    println!(
                        "{:<8} {:>11} {:>10}  {:<10}  {}",
                        k.name,
                        k.interference.lc_slowdown,
                        k.interference.corun_rate,
                        k.basis.name(),
                        k.source
                    );
                }
                Ok(())
            }
            SimCmd::Validate(a) => {
                let measured = ResultFile::load(&a.measured)
                    // (The message names the file and the OS error; keep no
                    // source chain, which would print the OS error twice.)
                    .map_err(|e| anyhow::anyhow!("reading the measured file: {e}"))?;
                let opts = ValidateOptions {
                    demand: a.demand.map(|d| match d {
                        DemandArg::Demand => DemandSource::Demand,
                        DemandArg::Service => DemandSource::Service,
                    }),
                    response_us: a.response_us,
                    slowdown: a.slowdown,
                    slo_us: a.slo_us,
                    budget_us: a.budget_us,
                    nap_ns: a.nap_ns,
                    wake_ns: a.wake_ns,
                    os_preempt_ns: a.os_preempt_ns,
                    requests: a.requests,
                    reps: a.reps,
                    tolerance_pct: a.tolerance_pct,
                    threads: a.threads.unwrap_or_else(default_threads),
                    command: command.clone(),
                };
                let (report, simulated) = validate(&measured, &opts)?;
                print!("{}", report.to_text());
                if let Some(p) = &a.json {
                    let text = serde_json::to_string_pretty(&report)?;
                    std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
                }
                if let Some(p) = &a.sim_json {
                    simulated.save(p)?;
                }
                Ok(())
            }
            SimCmd::Repro(a) => {
                let opts = ReproOptions {
                    requests: a.requests,
                    reps: a.reps,
                    threads: a.threads.unwrap_or_else(default_threads),
                    command: command.clone(),
                };
                let out = run_repro(&opts)?;
                let md = out.markdown();
                print!("{md}");
                if let Some(p) = &a.markdown {
                    std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
                }
                if let Some(p) = &a.json {
                    let text = serde_json::to_string_pretty(&out)?;
                    std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
                }
                Ok(())
            }
            SimCmd::Perf(a) => {
                anyhow::ensure!(a.runs >= 1, "--runs must be >= 1, got 0");
                anyhow::ensure!(a.threads >= 1, "--threads must be >= 1, got 0");
                anyhow::ensure!(
                    a.requests >= 2,
                    "--requests must be >= 2, got {}",
                    a.requests
                );
                anyhow::ensure!(
                    a.sweep_requests >= 2,
                    "--sweep-requests must be >= 2, got {}",
                    a.sweep_requests
                );
                let opts = PerfOptions {
                    requests: a.requests,
                    sweep_requests: a.sweep_requests,
                    runs: a.runs,
                    threads: a.threads,
                    sweep: !a.skip_sweep,
                    command: command.clone(),
                };
                let out = run_perf(&opts)?;
                print!("{}", out.to_text());
                if let Some(p) = &a.json {
                    let text = serde_json::to_string_pretty(&out)?;
                    std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
                }
                Ok(())
            }
        }
    }
}

fn run_cmd(a: RunArgs, command: String) -> anyhow::Result<()> {
    let mut cfg = SimConfig::load(&a.config)?;
    if let Some(r) = a.requests {
        cfg.requests = r;
    }
    if let Some(w) = a.warmup {
        cfg.warmup_requests = Some(w);
    }
    if let Some(r) = a.reps {
        cfg.reps = r;
    }
    if let Some(s) = a.seed {
        cfg.seed = s;
    }
    if let Some(rps) = a.rps {
        cfg.load = crate::config::LoadSpec {
            rps,
            ..Default::default()
        };
    }
    let exp = cfg
        .resolve(&base_dir(&a.config))
        .with_context(|| format!("checking {}", a.config.display()))?;
    let threads = a.threads.unwrap_or_else(default_threads);
    anyhow::ensure!(threads >= 1, "--threads must be >= 1, got 0");
    let opts = RunOptions {
        threads,
        progress: !a.quiet,
        save: a.json.clone(),
        command,
    };
    let file = exp.run(&opts)?;
    print!("{}", points_table(&file));
    if let Some(p) = &a.json {
        eprintln!("elfen sim: wrote {}", p.display());
    }
    Ok(())
}

/// A plain-text table of a result file's points (medians over reps).
pub fn points_table(file: &ResultFile) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<18} {:<7} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>8} {:>4}",
        "config",
        "batch",
        "rps",
        "p50_ms",
        "p99_ms",
        "p999_ms",
        "u_lc",
        "u_bat",
        "u_tot",
        "progress",
        "slo"
    );
    for p in &file.points {
        let s_ = &p.summary;
        let l = &s_.latency_us;
        let (u_lc, u_bat, u_tot) = (
            s_.utilization.lc.median,
            s_.utilization.batch.median,
            s_.utilization.total.median,
        );
        let _ = writeln!(
            s,
            "{:<18} {:<7} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>6.3} {:>6.3} {:>6.3} {:>8} {:>4}",
            p.series_name(),
            p.batch.as_deref().unwrap_or("-"),
            p.rps_target,
            l.p50.median / 1e3,
            l.p99.median / 1e3,
            l.p999.median / 1e3,
            u_lc,
            u_bat,
            u_tot,
            s_.batch_progress
                .map_or("-".to_string(), |b| format!("{:.3}", b.median)),
            match s_.slo_met {
                Some(true) => "ok",
                Some(false) => "MISS",
                None => "-",
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Command,
    }

    #[test]
    fn the_command_line_is_consistent_and_parses() {
        Cli::command().debug_assert();
        let c = Cli::try_parse_from([
            "elfen", "sim", "run", "x.toml", "--rps", "10,20", "--reps", "2",
        ])
        .unwrap();
        let Command::Sim(SimArgs {
            cmd: SimCmd::Run(r),
        }) = c.cmd
        else {
            panic!("not run")
        };
        assert_eq!(r.rps, Some(vec![10.0, 20.0]));
        let c = Cli::try_parse_from(["elfen", "sim", "validate", "m.json", "--demand", "demand"])
            .unwrap();
        let Command::Sim(SimArgs {
            cmd: SimCmd::Validate(v),
        }) = c.cmd
        else {
            panic!("not validate")
        };
        assert!(matches!(v.demand, Some(DemandArg::Demand)));
        assert!(
            Cli::try_parse_from(["elfen", "sim", "validate", "m.json", "--demand", "alone"])
                .is_err()
        );
        for sub in ["run", "check", "kinds", "validate", "repro", "perf"] {
            let e = Cli::try_parse_from(["elfen", "sim", sub, "--help"]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{sub}");
        }
    }
}
