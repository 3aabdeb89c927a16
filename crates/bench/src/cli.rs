//! `elfen bench`, `elfen report`, `elfen serve`, `elfen load` and the hidden
//! batch-worker subcommand.

use crate::lc::serve::ServeArgs;
use crate::report;
use crate::spec::{self, Auto, BenchSpec, Config, KernelKind, LcSignal, ServiceKind};
use crate::sweep::{self, SweepOptions};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// The harness' subcommands.
// Parsed once per process: the size difference between variants is moot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the co-location experiment: every configuration side by side over
    /// a load sweep on an LC service (built in, or any server speaking the
    /// LC wire protocol); print the tables and verdicts and write the result
    /// JSON and a report (Markdown + PNG) under results/<timestamp>/.
    Bench(BenchArgs),
    /// Regenerate tables, verdicts and plots from result files alone
    /// (measured and simulated), without re-running anything.
    Report(ReportArgs),
    /// Run the built-in pointer-chase LC service as a process of its own
    /// (speaks docs/lc-protocol.md; `elfen bench --lc external` can drive it).
    Serve(ServeArgs),
    /// Drive an LC service open-loop at a rate for a duration with the
    /// harness's generator (starting it as `elfen bench` does: Redis,
    /// memcached, or the built-in service as `elfen serve`), and print its
    /// latency from intended send times.
    Load(crate::load::drive::LoadArgs),
    /// (internal) The batch process `elfen bench` starts for each point.
    #[command(name = "bench-batch-worker", hide = true)]
    BenchBatchWorker {
        /// Arguments, as `elfen bench` passes them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Arguments of `elfen bench`. Every option overrides the same key of
/// `--config`; without either, the default sweep runs (about 4–5 minutes).
#[derive(Debug, Args, Default)]
pub struct BenchArgs {
    /// TOML experiment file (see configs/bench/); unknown keys are errors,
    /// missing keys take their defaults.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write the result JSON here (default: results/<timestamp>/bench.json);
    /// the report goes to <its directory>/<its stem>-report/.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Configurations to compare, comma-separated, or `all`: lc_alone, naive,
    /// sched_idle, cpuset, cfs_quota, borrow_idle, fixed_budget,
    /// refresh_budget (the default set), dynamic_refresh (run as refresh
    /// budget: the harness sets no reference IPC), and the daemon's modes
    /// cpu_idle, guard, freeze, blind_isolation (all but cpu_idle need
    /// `--lc-signal bpf`); lc_alone, the baseline, always runs.
    #[arg(long, value_name = "LIST")]
    pub configs: Option<String>,
    /// The LC service: `builtin` (in this process), `external` (started
    /// from --lc-command; it must speak docs/lc-protocol.md), `lucene` (the
    /// Lucene search service of bindings/java/lucene, sent the tasks file's
    /// term queries, over the corpus copied $ELFEN_LUCENE_COPIES times,
    /// default 40: 10 M documents; scripts/lucene.sh builds it), `redis` or
    /// `memcached` (Debian's unmodified server on the request lane, 1.26 M
    /// keys of 256 B, GETs of random keys in its own protocol, its busy
    /// state from the kernel: --lc-signal bpf), or `kv` (the [lc.kv] of
    /// --config).
    #[arg(long, value_name = "KIND")]
    pub lc: Option<String>,
    /// The external LC service's command line ({port} {page} {lane} {cpu}
    /// {side_cpus} {lc_signal} are substituted), e.g.
    /// "target/release/elfen serve --port {port} --cpu {cpu}".
    #[arg(long, value_name = "COMMAND")]
    pub lc_command: Option<String>,
    /// Who publishes the request lane's state: `api` (the service, through
    /// the LC API), `none` (an unmodified service, nobody), or `bpf` (an
    /// unmodified service; the daemon's writer publishes it from the
    /// kernel's context switches; the built-in service then runs as its own
    /// process, `elfen serve`).
    #[arg(long, value_name = "SIGNAL")]
    pub lc_signal: Option<String>,
    /// Batch kernels, comma-separated, or `all`: loop, matrix, flush, stream
    /// (default: stream,matrix).
    #[arg(long, value_name = "LIST")]
    pub kernels: Option<String>,
    /// Unmodified batch programs from Debian packages, comma-separated:
    /// xz, stress-ng, 7zz (default: none); they run every configuration that
    /// needs no checks, their progress measured from outside.
    #[arg(long, value_name = "LIST")]
    pub programs: Option<String>,
    /// Offered loads in requests per second, comma-separated (each > 0), or
    /// `auto`: fractions (rps_fractions) of the capacity measured alone.
    #[arg(long, value_name = "LIST")]
    pub rps: Option<String>,
    /// Measured seconds per invocation (warm-up excluded).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Requests each invocation's measured window holds at the least
    /// (default 1000): at a load where --duration would hold fewer, the
    /// window is lengthened to N / rps, so every round's p99 rests on as
    /// many requests; 0 = every window is --duration.
    #[arg(long, value_name = "N")]
    pub min_requests: Option<u32>,
    /// Warm-up seconds per invocation (sent, not recorded).
    #[arg(long, value_name = "SECONDS")]
    pub warmup: Option<f64>,
    /// Rounds every point runs (invocations per point; the table shows
    /// medians over them). Raises --max-reps to N when larger.
    #[arg(long, value_name = "N")]
    pub reps: Option<u32>,
    /// The cap on rounds per point (default 20): a judged point whose
    /// verdict is still open after --reps rounds (the interval of its paired
    /// ratio straddles the limit) gets more rounds, beside LC alone, until
    /// it concludes, reaches N rounds, or the added rounds' time budget is
    /// spent. N = --reps adds none.
    #[arg(long, value_name = "N")]
    pub max_reps: Option<u32>,
    /// Wall time all added rounds together may take (default 180 s; the
    /// other cap).
    #[arg(long, value_name = "SECONDS")]
    pub added_reps_budget: Option<f64>,
    /// p99 latency SLO in milliseconds, or `auto` (the LC-alone p99 at the
    /// knee of its latency-vs-load curve).
    #[arg(long, value_name = "MS")]
    pub slo_p99_ms: Option<String>,
    /// Co-running budget of the budget policies in µs, or `auto` (SLO minus
    /// the LC-alone p99 at each load, as in the paper).
    #[arg(long, value_name = "US")]
    pub budget_us: Option<String>,
    /// TCP port of the LC service on 127.0.0.1 (0 = any free port).
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Lane pairing request:batch (e.g. 0:1); default: SMT siblings, else
    /// consecutive CPUs.
    #[arg(long, value_name = "SPEC")]
    pub pairs: Option<String>,
    /// Use this existing signal page (name in /dev/shm, or a path) instead of
    /// creating a private one; it must exist.
    #[arg(long, value_name = "NAME")]
    pub page: Option<String>,
    /// Nap backend of the Elfen configurations: spin, futex or hybrid (auto,
    /// umwait, mwaitx where the machine has them).
    #[arg(long, value_name = "KIND")]
    pub nap: Option<String>,
    /// `blind_isolation`: CPUs kept free of batch for the LC's bursts
    /// (PerfIso's B; default 0).
    #[arg(long, value_name = "N")]
    pub blind_buffer_cores: Option<u32>,
    /// Seed of the request shuffles and arrival times.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Directory for results/<timestamp>/ (default: results).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Do not write report.md and the plots (the JSON is always written).
    #[arg(long)]
    pub no_report: bool,
    /// No progress line.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print the configurations with their definitions and exit.
    #[arg(long)]
    pub list: bool,
    /// (internal) executable to run the batch worker with (default: this one).
    #[arg(long, hide = true)]
    pub worker_exe: Option<PathBuf>,
}

/// Arguments of `elfen report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Result JSON files or directories of them (measured, from `elfen
    /// bench`, and simulated, from `elfen sim`).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Where to write report.md and the PNGs (default: <dir>/<stem>-report/
    /// beside the first file, or <dir>/report/ for a directory).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Bench(a) => run_bench(a),
            Command::Report(a) => run_report(a),
            Command::Serve(a) => crate::lc::serve::run(a),
            Command::Load(a) => crate::load::drive::run(a),
            Command::BenchBatchWorker { args } => {
                std::process::exit(crate::batch::worker_main(&args))
            }
        }
    }
}

/// Builds the spec from `--config` and the overrides, validated: every bad
/// input fails here, before any load is sent.
pub fn build_spec(a: &BenchArgs) -> anyhow::Result<BenchSpec> {
    let mut spec = match &a.config {
        Some(p) => BenchSpec::load(p)?,
        None => BenchSpec::default(),
    };
    if let Some(s) = &a.configs {
        let harness: Vec<Config> = Config::ALL.into_iter().filter(|c| c.in_harness()).collect();
        spec.configs = spec::parse_list(s, &harness, str::parse).context("--configs")?;
    }
    if let Some(s) = &a.kernels {
        spec.kernels = spec::parse_list(s, &KernelKind::ALL, str::parse).context("--kernels")?;
    }
    if let Some(s) = &a.programs {
        spec.programs =
            spec::parse_list(s, &spec::ProgramKind::ALL, str::parse).context("--programs")?;
    }
    if let Some(s) = &a.rps {
        spec.rps = spec::parse_rps(s)?;
    }
    if let Some(s) = &a.lc {
        spec.lc.service = match s.trim() {
            "builtin" => ServiceKind::Builtin,
            "external" => ServiceKind::External,
            "lucene" => {
                let copies = crate::lc::lucene::copies_setting()?;
                spec.lc = spec::LcSpec::lucene(copies);
                ServiceKind::External
            }
            "redis" => {
                spec.lc = spec::LcSpec::kv(spec::KvSpec::redis());
                ServiceKind::Kv
            }
            "memcached" => {
                spec.lc = spec::LcSpec::kv(spec::KvSpec::memcached());
                ServiceKind::Kv
            }
            "kv" => ServiceKind::Kv,
            other => {
                bail!("--lc {other:?}: expected builtin, external, lucene, redis, memcached or kv")
            }
        };
    }
    if let Some(s) = &a.lc_command {
        spec.lc.command = Some(s.clone());
        if a.lc.is_none() {
            spec.lc.service = ServiceKind::External;
        }
    }
    if let Some(s) = &a.lc_signal {
        spec.lc.signal = match s.trim() {
            "api" => LcSignal::Api,
            "none" => LcSignal::None,
            "bpf" => LcSignal::Bpf,
            other => bail!("--lc-signal {other:?}: expected api, none or bpf"),
        };
    }
    if let Some(v) = a.duration {
        spec.duration_s = v;
    }
    if let Some(v) = a.min_requests {
        spec.min_requests = v;
    }
    if let Some(v) = a.warmup {
        spec.warmup_s = v;
    }
    if let Some(v) = a.reps {
        spec.reps = v;
        spec.max_reps = spec.max_reps.max(v);
    }
    if let Some(v) = a.max_reps {
        spec.max_reps = v;
    }
    if let Some(v) = a.added_reps_budget {
        spec.added_reps_budget_s = v;
    }
    if let Some(s) = &a.slo_p99_ms {
        spec.slo_p99_ms = Auto::parse(s, "--slo-p99-ms", "milliseconds")?;
    }
    if let Some(s) = &a.budget_us {
        spec.budget_us = Auto::parse(s, "--budget-us", "microseconds")?;
    }
    if let Some(v) = a.port {
        spec.port = v;
    }
    if let Some(s) = &a.pairs {
        spec.pairs = Some(s.clone());
    }
    if let Some(s) = &a.page {
        spec.page = Some(s.clone());
    }
    if let Some(s) = &a.nap {
        spec.batch.nap = s.parse().context("--nap")?;
    }
    if let Some(b) = a.blind_buffer_cores {
        spec.batch.blind_buffer_cores = b;
    }
    if let Some(v) = a.seed {
        spec.seed = v;
    }
    if let Some(d) = &a.out_dir {
        spec.out_dir = d.clone();
    }
    spec.normalize();
    spec.validate()?;
    Ok(spec)
}

fn run_bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.list {
        println!("configurations ({}):", spec::harness_config_names());
        for c in Config::ALL.into_iter().filter(|c| c.in_harness()) {
            println!("  {:<16} {}", c.name(), c.definition());
        }
        println!("kernels: {}", spec::KERNEL_NAMES);
        return Ok(());
    }
    let spec = build_spec(&a)?;
    let stop = elfen_cmd::interrupt::install();
    let json_path = match &a.json {
        Some(p) => p.clone(),
        None => spec
            .out_dir
            .join(elfen_cmd::time::utc_stamp(elfen_cmd::time::now_unix_s()))
            .join("bench.json"),
    };
    let worker_exe = match &a.worker_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the elfen executable")?,
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let out = sweep::run(
        SweepOptions {
            spec,
            command,
            json_path,
            worker_exe,
            progress: !a.quiet,
        },
        stop,
    )?;
    print!("{}", report::terminal_body(&out.result));
    println!("results: {}", out.json_path.display());
    if !a.no_report {
        let dir = report::report_dir_for(&out.json_path);
        let inputs = vec![report::Input {
            path: out.json_path.clone(),
            file: out.result.clone(),
        }];
        let (md, notes) = report::write_report(&inputs, &dir)?;
        for n in notes {
            println!("note: {n}");
        }
        println!("report:  {}", md.display());
    }
    // the run ends with what it showed, in words
    let c = report::conclusion::conclusion_text(&out.result);
    if !c.is_empty() {
        print!("\n{c}");
    }
    if out.interrupted {
        bail!(
            "interrupted: kept the {} points measured so far in {}",
            out.result.points.len(),
            out.json_path.display()
        );
    }
    Ok(())
}

fn run_report(a: ReportArgs) -> anyhow::Result<()> {
    let inputs = report::load_inputs(&a.files)?;
    let out = match &a.out {
        Some(d) => d.clone(),
        None if a.files[0].is_dir() => a.files[0].join("report"),
        None => report::report_dir_for(&a.files[0]),
    };
    for i in &inputs {
        println!("== {}", i.path.display());
        println!("{}", report::terminal_report(&i.file));
    }
    let (md, notes) = report::write_report(&inputs, &out)?;
    for n in notes {
        println!("note: {n}");
    }
    println!("report: {}", md.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_states_the_caps_on_added_rounds() {
        use clap::CommandFactory as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let help = Cli::command().render_long_help().to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let d = BenchSpec::default();
        assert!(
            help.contains(&format!("(default {})", d.max_reps))
                && help.contains(&format!("(default {:.0} s;", d.added_reps_budget_s)),
            "--help must state the caps the defaults hold: {help}"
        );
    }

    #[test]
    fn bad_input_fails_before_any_load() {
        let bad = |f: &dyn Fn(&mut BenchArgs)| {
            let mut a = BenchArgs::default();
            f(&mut a);
            format!("{:#}", build_spec(&a).unwrap_err())
        };
        let e = bad(&|a| a.rps = Some("0".into()));
        assert!(e.contains("> 0"), "{e}");
        let e = bad(&|a| a.rps = Some("-100".into()));
        assert!(e.contains("> 0"), "{e}");
        let e = bad(&|a| a.configs = Some("naive,borow_idle".into()));
        assert!(e.contains("borow_idle") && e.contains("borrow_idle"), "{e}");
        let e = bad(&|a| a.kernels = Some("stream,fft".into()));
        assert!(e.contains("fft") && e.contains("matrix"), "{e}");
        let e = bad(&|a| a.slo_p99_ms = Some("10ms".into()));
        assert!(e.contains("10ms") && e.contains("auto"), "{e}");
        let e = bad(&|a| a.slo_p99_ms = Some("-3".into()));
        assert!(e.contains("slo_p99_ms"), "{e}");
        let e = bad(&|a| a.reps = Some(0));
        assert!(e.contains("reps"), "{e}");
        let e = bad(&|a| {
            a.reps = Some(5);
            a.max_reps = Some(4);
        });
        assert!(e.contains("max_reps (4)"), "{e}");
        let e = bad(&|a| a.nap = Some("doze".into()));
        assert!(e.contains("doze"), "{e}");
        let e = bad(&|a| a.config = Some(PathBuf::from("/nonexistent/x.toml")));
        assert!(e.contains("/nonexistent/x.toml"), "{e}");
        let e = bad(&|a| a.configs = Some("static_partition".into()));
        assert!(e.contains("static_partition"), "{e}");
        let e = bad(&|a| {
            a.lc = Some("redis".into());
            a.lc_signal = Some("api".into());
        });
        assert!(e.contains("unmodified") && e.contains("bpf"), "{e}");
        let e = bad(&|a| a.lc = Some("lucene3".into()));
        assert!(e.contains("lucene3") && e.contains("external"), "{e}");
        let e = bad(&|a| a.lc = Some("external".into()));
        assert!(e.contains("lc.command"), "{e}");
        let e = bad(&|a| a.lc_signal = Some("bpff".into()));
        assert!(e.contains("bpff"), "{e}");
        let ok = build_spec(&BenchArgs {
            configs: Some("borrow_idle".into()),
            rps: Some("100,200".into()),
            slo_p99_ms: Some("2.5".into()),
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(ok.configs, vec![Config::LcAlone, Config::BorrowIdle]);
        // --reps above the cap raises the cap; --max-reps sets it
        let d = BenchSpec::default();
        let more = build_spec(&BenchArgs {
            reps: Some(d.max_reps + 3),
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(more.max_reps, d.max_reps + 3);
        let none = build_spec(&BenchArgs {
            max_reps: Some(d.reps),
            added_reps_budget: Some(0.0),
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!((none.max_reps, none.added_reps_budget_s), (d.reps, 0.0));
        assert_eq!(ok.slo_p99_ms, Auto::Value(2.5));
        let redis = build_spec(&BenchArgs {
            lc: Some("redis".into()),
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(
            (redis.lc.service, redis.lc.signal, redis.lc.requests),
            (ServiceKind::Kv, LcSignal::Bpf, spec::RequestsKind::Keys)
        );
        assert_eq!(redis.lc.kv, Some(spec::KvSpec::redis()));
    }
}
