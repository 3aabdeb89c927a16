//! `elfen bpf probe` and `elfen bpf visibility`: the crate's subcommands,
//! a clap [`Command`] the `elfen` binary flattens into its own.

use crate::visibility::{self, Latency, Params, Run};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use elfen_results::Stat;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The BPF signal source's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The kernel signal source for unmodified LC services (BPF on sched_switch).
    #[command(subcommand)]
    Bpf(BpfCommand),
}

/// `elfen bpf …`
#[derive(Debug, Subcommand)]
pub enum BpfCommand {
    /// Whether the BPF program loads here, and why not (privileges, kernel BTF, verifier).
    Probe(ProbeArgs),
    /// How soon user space sees a context switch: mmapped slot, ring-buffer event, poll fallback.
    #[command(long_about = VISIBILITY_ABOUT)]
    Visibility(VisibilityArgs),
}

/// Arguments of `elfen bpf probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Exit with an error when BPF cannot be used.
    #[arg(long)]
    pub require: bool,
}

const VISIBILITY_ABOUT: &str = "\
How soon user space learns that a CPU switched to another thread. A switcher thread pinned to \
the LC CPU sleeps for random short intervals (each wake-up is a context switch into it); an \
observer pinned to the other CPU of the pair measures, per switch:

  visibility  BPF slot: the observer spins on the LC CPU's mmapped slot; its CLOCK_MONOTONIC \
when it first sees the new seq - the switch time BPF recorded (target <= 1 us).
  event       BPF ring buffer: the process watches its own tgid; a thread sleeping in epoll \
is woken by the program's forced wakeup; its clock after waking - the time of the event that \
woke it (the wake-up's WAKE event, or the switch's when it was not announced).
  poll        the coarse /proc fallback (scan every --poll-interval-us): the scan's time - \
the switcher's clock right after it woke.

p50/p90/p99/max (HdrHistogram) per run; with --runs N the table shows the median over runs \
and the JSON keeps every run. The CPU pair is the first of elfen_topo's plan (--pairs). Run it \
on an otherwise idle machine: a busy or paused host stretches the tail.";

/// Arguments of `elfen bpf visibility`.
#[derive(Debug, Args)]
pub struct VisibilityArgs {
    /// Visibility samples per run.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub samples: u64,
    /// Event samples per run.
    #[arg(long, value_name = "N", default_value_t = 2_000)]
    pub event_samples: u64,
    /// Poll-fallback samples per run (each takes several scan intervals).
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub poll_samples: u64,
    /// Poll fallback scan interval, µs.
    #[arg(long, value_name = "US", default_value_t = 1000)]
    pub poll_interval_us: u64,
    /// Repetitions of the whole measurement.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub runs: usize,
    /// LC:observer CPU pairing (e.g. "1:0"); default: the first planned pair.
    #[arg(long, value_name = "SPEC")]
    pub pairs: Option<String>,
    /// Skip the poll-fallback measurement.
    #[arg(long)]
    pub no_poll: bool,
    /// Write the JSON result here (default: results/bpf-visibility-<unix time>.json).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Bpf(BpfCommand::Probe(a)) => run_probe(a),
            Command::Bpf(BpfCommand::Visibility(a)) => run_visibility(a),
        }
    }
}

fn run_probe(a: ProbeArgs) -> anyhow::Result<()> {
    let p = crate::probe();
    print!("{}", p.render());
    if a.require && !p.loadable() {
        bail!(
            "BPF cannot be used here: {}",
            p.reason().map(|e| e.to_string()).unwrap_or_default()
        );
    }
    Ok(())
}

/// The JSON file `elfen bpf visibility` writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisibilityReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// Seconds since the Unix epoch at the start.
    pub created_unix_s: u64,
    /// The command line.
    pub command: String,
    /// The machine.
    pub system: elfen_topo::SystemInfo,
    /// What was measured.
    pub params: Params,
    /// The BPF source used, or why it could not be.
    pub bpf: String,
    /// Load average before the run.
    pub load_before: [f64; 3],
    /// Raw record: one entry per run.
    pub runs: Vec<Run>,
    /// Derived: each measurement's percentiles over runs.
    pub summary: Summary,
}

/// Schema tag of [`VisibilityReport`].
pub const SCHEMA: &str = "elfen-bpf-visibility/2";

/// One measurement's percentiles over runs (median, min, max of each).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyOverRuns {
    /// Samples over all runs.
    pub samples: u64,
    /// Median.
    pub p50_ns: Stat,
    /// 90th percentile.
    pub p90_ns: Stat,
    /// 99th percentile.
    pub p99_ns: Stat,
    /// Largest.
    pub max_ns: Stat,
}

/// The three measurements over runs; one no run made is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// A thread switches in → the observer sees it in the per-CPU array.
    pub visibility: Option<LatencyOverRuns>,
    /// The same, through the ring buffer's event.
    pub event: Option<LatencyOverRuns>,
    /// The coarse `/proc` polling fallback.
    pub poll: Option<LatencyOverRuns>,
}

/// Median/min/max over runs of every percentile of every measurement.
pub fn summarize(runs: &[Run]) -> Summary {
    let over = |pick: fn(&Run) -> Option<&Latency>| {
        let ls: Vec<&Latency> = runs.iter().filter_map(pick).collect();
        let stat =
            |f: fn(&Latency) -> u64| Stat::of(&ls.iter().map(|l| f(l) as f64).collect::<Vec<_>>());
        Some(LatencyOverRuns {
            samples: ls.iter().map(|l| l.samples).sum(),
            p50_ns: stat(|l| l.p50_ns)?,
            p90_ns: stat(|l| l.p90_ns)?,
            p99_ns: stat(|l| l.p99_ns)?,
            max_ns: stat(|l| l.max_ns)?,
        })
    };
    Summary {
        visibility: over(|r| r.visibility.as_ref()),
        event: over(|r| r.event.as_ref()),
        poll: over(|r| r.poll.as_ref()),
    }
}

fn fmt_ns(ns: f64) -> String {
    if ns < 10_000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{:.0} µs", ns / 1000.0)
    }
}

/// The table of a report.
pub fn render(r: &VisibilityReport) -> String {
    let mut s = format!(
        "LC cpu {} ↔ observer cpu {}, {} run(s); load before {:.2}\nBPF: {}\n\n",
        r.params.lc_cpu,
        r.params.observer_cpu,
        r.runs.len(),
        r.load_before[0],
        r.bpf
    );
    s += &format!(
        "{:<12} {:>8} {:>11} {:>11} {:>11} {:>11}  {}\n",
        "measurement", "samples", "p50", "p90", "p99", "max", "target"
    );
    let rows = [
        ("visibility", r.summary.visibility),
        ("event", r.summary.event),
        ("poll", r.summary.poll),
    ];
    for (name, l) in rows {
        let Some(l) = l else {
            s += &format!("{name:<12} {:>8}\n", "not measured");
            continue;
        };
        let target = match name {
            "visibility" if l.p99_ns.median <= 1000.0 => "p99 <= 1 µs: met",
            "visibility" => "p99 <= 1 µs: MISSED",
            "poll" => "coarse (about one scan interval)",
            _ => "",
        };
        s += &format!(
            "{name:<12} {:>8} {:>11} {:>11} {:>11} {:>11}  {target}\n",
            l.samples,
            fmt_ns(l.p50_ns.median),
            fmt_ns(l.p90_ns.median),
            fmt_ns(l.p99_ns.median),
            fmt_ns(l.max_ns.median)
        );
    }
    if r.runs.len() > 1 {
        s += "(medians over runs; every run is in the JSON)\n";
    }
    s
}

fn choose_cpus(pairs: Option<&str>) -> anyhow::Result<(u32, u32)> {
    let topo = elfen_topo::Topology::detect().context("reading the CPU topology")?;
    let plan = elfen_topo::plan_pairs(&topo, pairs).context("planning the CPU pair")?;
    let pair = plan
        .into_pairs()
        .into_iter()
        .next()
        .context("this machine has no CPU pair (needs 2 CPUs)")?;
    Ok((pair.request, pair.batch[0]))
}

fn run_visibility(a: VisibilityArgs) -> anyhow::Result<()> {
    if a.runs == 0 || a.samples == 0 || a.event_samples == 0 {
        bail!("--runs, --samples and --event-samples must be at least 1");
    }
    if !a.no_poll && (a.poll_samples == 0 || a.poll_interval_us < 100) {
        bail!("--poll-samples must be at least 1 and --poll-interval-us at least 100");
    }
    let (lc_cpu, observer_cpu) = choose_cpus(a.pairs.as_deref())?;
    let mut params = Params::new(lc_cpu, observer_cpu);
    params.samples = a.samples;
    params.event_samples = a.event_samples;
    params.poll_samples = a.poll_samples;
    params.poll_interval_us = a.poll_interval_us;
    let created_unix_s = elfen_cmd::time::now_unix_s();
    let load_before = elfen_cmd::proc::loadavg();
    let mut bpf = visibility::open_bpf();
    let bpf_desc = match &bpf {
        Ok(s) => s.describe(),
        Err(e) => format!("UNAVAILABLE: {e}"),
    };
    eprintln!("bpf visibility: {bpf_desc}");
    let mut runs = Vec::new();
    for i in 0..a.runs {
        eprintln!("run {}/{}", i + 1, a.runs);
        let run = visibility::run_once(bpf.as_mut().ok(), &params, !a.no_poll)
            .with_context(|| format!("run {}", i + 1))?;
        runs.push(run);
    }
    drop(bpf);
    let report = VisibilityReport {
        schema: SCHEMA.into(),
        created_unix_s,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        system: elfen_topo::SystemInfo::collect(),
        params,
        bpf: bpf_desc,
        load_before,
        summary: summarize(&runs),
        runs,
    };
    let path = a.json.clone().unwrap_or_else(|| {
        Path::new("results").join(format!("bpf-visibility-{created_unix_s}.json"))
    });
    save(&report, &path).with_context(|| format!("saving {}", path.display()))?;
    print!("{}", render(&report));
    println!("\nsaved {}", path.display());
    Ok(())
}

/// Writes the report atomically (temp file + rename), creating the directory.
pub fn save(r: &VisibilityReport, path: &Path) -> std::io::Result<()> {
    elfen_results::save_json(r, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Command,
    }

    #[test]
    fn parses_as_flattened_subcommands() {
        let c = Cli::try_parse_from([
            "elfen",
            "bpf",
            "visibility",
            "--samples",
            "5",
            "--json",
            "x.json",
        ])
        .unwrap();
        let Command::Bpf(BpfCommand::Visibility(a)) = c.cmd else {
            panic!("visibility")
        };
        assert_eq!((a.samples, a.runs), (5, 3));
        assert_eq!(a.json.as_deref(), Some(Path::new("x.json")));
        assert!(Cli::try_parse_from(["elfen", "bpf", "probe", "--require"]).is_ok());
    }

    #[test]
    fn summary_table_and_json_round_trip() {
        let lat = |p50| Latency {
            samples: 10,
            p50_ns: p50,
            p90_ns: p50 * 2,
            p99_ns: p50 * 3,
            max_ns: p50 * 10,
            mean_ns: p50 as f64,
            missed: 0,
        };
        let runs: Vec<Run> = [100, 300, 200]
            .map(|p| Run {
                visibility: Some(lat(p)),
                event: None,
                poll: Some(lat(p * 1000)),
            })
            .into();
        let summary = summarize(&runs);
        let v = summary.visibility.unwrap();
        assert_eq!(
            (v.p50_ns.median, v.p50_ns.min, v.p99_ns.max),
            (200.0, 100.0, 900.0)
        );
        assert_eq!(v.samples, 30);
        assert!(summary.event.is_none());
        let r = VisibilityReport {
            schema: SCHEMA.into(),
            created_unix_s: 0,
            command: "test".into(),
            system: elfen_topo::SystemInfo::collect(),
            params: Params::new(1, 0),
            bpf: "test".into(),
            load_before: [0.0; 3],
            runs,
            summary,
        };
        let table = render(&r);
        assert!(table.contains("p99 <= 1 µs: met"), "{table}");
        assert!(
            table.contains("event") && table.contains("not measured"),
            "{table}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/v.json");
        save(&r, &path).unwrap();
        let back: VisibilityReport =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
