//! `elfen advise`: the crate's subcommand, a clap [`Command`] the `elfen`
//! binary flattens into its own.

use crate::batch::{HelperArgs, helper_main};
use crate::latency;
use crate::record::{Knob, Probe};
use crate::run::{self, Options};
use anyhow::{Context, bail};
use clap::{ArgGroup, Args, Subcommand};
use elfen_daemon::LcTarget;
use elfen_kernels::KernelKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Profile an LC service under its real load and recommend the isolation
    /// knob that fits it (HIS: contention per resource, the cheapest knob
    /// that suffices).
    #[command(long_about = ABOUT)]
    Advise(AdviseArgs),
}

const ABOUT: &str = "\
Profile a latency-critical (LC) service under its real load and recommend how elfen daemon \
should protect it (HIS's profiler: contention = co-run / alone - 1 per resource, then the \
cheapest knob that suffices). Run it as root next to the service while its load runs; it \
changes nothing it does not give back.

  1. the LC alone: its busy share, busy time per busy period (the kernel signal: BPF on \
sched_switch, or the /proc poll fallback), on-CPU + run-queue wait per run (schedstat), and \
with --latency-probe the latency of advise's own requests from their intended send times. An \
LC that is not running, or busy less than --min-busy-pct of a lane, is refused: nothing runs.
  2. probes, one window each: a compute hog (Matrix) at the LC's priority and at SCHED_IDLE on \
the partner lane and on the LC's own lane, a memory streamer (Stream) on the partner lane; \
hardware counters and resctrl monitoring where the machine offers them (said otherwise). A \
probe that pushes the LC past --max-slowdown x alone (two --watch-ms intervals in a row) is \
stopped at once.
  3. the LC alone again (the reference is the mean of both).
  4. knobs, one window each: the real `elfen daemon` with a generated configuration per knob \
and the batch kernel as its [[batch]] command: idle (confined), guard, blind, freeze, auto, \
cooperative with borrow_idle / fixed_budget / refresh_budget / dynamic_refresh (an \
instrumented kernel that checks), resctrl CAT/MBA where present. Per knob: contention, p99 \
ratio, batch progress (work units vs the same kernel at SCHED_IDLE without a daemon), the \
daemon's CPU (schedstat of its threads; own = besides its guards' occupation), verdict.

The recommendation: of the knobs within --threshold (contention, and p99 ratio - 1 where the \
latency is known), the one that leaves the most to batch work (progress less the daemon's own \
CPU), ties to the least daemon CPU. The table, the reason in words and the total time are \
printed; --json saves everything. See docs/advise.md.";

/// Arguments of `elfen advise`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    group(ArgGroup::new("lc").required(true).args(["pid", "comm", "cgroup"]))
)]
pub struct AdviseArgs {
    /// The LC service: a running process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// The LC service: every process with this command name (`comm`, or the
    /// base name of argv[0]).
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// The LC service: the processes of this cgroup directory (absolute).
    #[arg(long, value_name = "DIR")]
    pub cgroup: Option<PathBuf>,
    /// With --comm / --pid: only this user's processes (a name or a uid), as
    /// the daemon's [lc] user.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Measure the LC's latency with advise's own requests: KIND@HOST:PORT,
    /// KIND redis, memcached (GET of a random key) or wire (elfen's LC wire
    /// protocol, e.g. `elfen serve`).
    #[arg(long, value_name = "KIND@HOST:PORT")]
    pub latency_probe: Option<String>,
    /// The latency probe's requests per second (Poisson).
    #[arg(long, value_name = "RPS", default_value_t = 200.0)]
    pub probe_rps: f64,
    /// The latency probe's work per request, µs (wire only).
    #[arg(long, value_name = "US", default_value_t = 20.0)]
    pub probe_work_us: f64,
    /// Lane pairing request:batch (e.g. 0:1); default: SMT siblings, else
    /// consecutive CPUs.
    #[arg(long, value_name = "SPEC")]
    pub pairs: Option<String>,
    /// Measured window of each phase, s.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub window_s: f64,
    /// Settling time before each window, s.
    #[arg(long, value_name = "S", default_value_t = 0.5)]
    pub warmup_s: f64,
    /// How often a running probe or knob is checked against --max-slowdown, ms.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub watch_ms: u64,
    /// Stop a probe or knob at once when the LC's service time, response
    /// time or median latency passes this many times its value alone in two
    /// watch intervals in a row.
    #[arg(long, value_name = "X", default_value_t = 3.0)]
    pub max_slowdown: f64,
    /// A knob is within when its contention (and p99 ratio − 1) is at most this.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.10)]
    pub threshold: f64,
    /// Below this busy share of a lane (%) the LC is not under load: refused.
    #[arg(long, value_name = "PCT", default_value_t = 2.0)]
    pub min_busy_pct: f64,
    /// The knobs' batch kernel: stream (memory streamer) or matrix (compute).
    #[arg(long, value_name = "KERNEL", default_value = "stream")]
    pub batch_kernel: String,
    /// The budget policies' budget, µs (default: threshold × the probe's p99
    /// alone, the paper's SLO − p99 with SLO = (1 + threshold) × p99; without
    /// a latency probe, threshold × the mean busy period).
    #[arg(long, value_name = "US")]
    pub budget_us: Option<u64>,
    /// Probes, comma-separated, `all` (default) or `none`: hog_idle_partner,
    /// hog_partner, stream_partner, hog_idle_own, hog_own, counters, mbm.
    #[arg(long, value_name = "LIST")]
    pub probes: Option<String>,
    /// Knobs, comma-separated, `all` (default) or `none`: idle, guard, blind,
    /// freeze, auto, borrow_idle, fixed_budget, refresh_budget, dynamic_refresh,
    /// resctrl.
    #[arg(long, value_name = "LIST")]
    pub knobs: Option<String>,
    /// Write the result JSON here (default: results/advise-SECONDS.json, Unix time).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// No progress lines.
    #[arg(long, short)]
    pub quiet: bool,
    /// (internal) the batch kernel process.
    #[command(subcommand)]
    pub sub: Option<AdviseSub>,
}

/// Hidden subcommands.
#[derive(Debug, Subcommand)]
pub enum AdviseSub {
    /// (internal) a batch kernel counting its work units.
    #[command(hide = true)]
    BatchHelper(HelperArgs),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Advise(a) => run(a),
        }
    }
}

/// A comma-separated list of names, `all` or `none`.
fn parse_list<T: Copy + std::str::FromStr<Err = String>>(
    s: Option<&str>,
    all: &[T],
    flag: &str,
) -> anyhow::Result<Vec<T>> {
    match s.map(str::trim) {
        None | Some("all") => Ok(all.to_vec()),
        Some("none") => Ok(Vec::new()),
        Some(list) => list
            .split(',')
            .map(|x| x.parse::<T>().map_err(|e| anyhow::anyhow!("{flag}: {e}")))
            .collect(),
    }
}

/// The run's options from the arguments, every bad value refused with
/// its flag named (before anything runs).
pub fn options(a: &AdviseArgs) -> anyhow::Result<Options> {
    let target = match (a.pid, &a.comm, &a.cgroup) {
        (Some(p), None, None) => LcTarget::Pid(p),
        (None, Some(c), None) if !c.is_empty() => LcTarget::Comm(c.clone()),
        (None, None, Some(d)) if d.is_absolute() => LcTarget::cgroup_dir(d.clone())
            .map_err(|e| anyhow::anyhow!("--cgroup {}: {e}", d.display()))?,
        (None, None, Some(d)) => bail!("--cgroup {}: must be an absolute path", d.display()),
        _ => bail!("give exactly one of --pid, --comm (not empty), --cgroup"),
    };
    if a.user.is_some() && a.cgroup.is_some() {
        bail!("--user goes with --comm or --pid, not --cgroup");
    }
    let pos = |v: f64, flag: &str| -> anyhow::Result<f64> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            bail!("{flag} {v}: must be > 0")
        }
    };
    pos(a.window_s, "--window-s")?;
    if !(a.warmup_s.is_finite() && a.warmup_s >= 0.0) {
        bail!("--warmup-s {}: must be ≥ 0", a.warmup_s);
    }
    if a.watch_ms < 10 {
        bail!("--watch-ms {}: must be at least 10", a.watch_ms);
    }
    if !(a.max_slowdown.is_finite() && a.max_slowdown > 1.0) {
        bail!("--max-slowdown {}: must be > 1", a.max_slowdown);
    }
    if !(a.threshold.is_finite() && a.threshold >= 0.0) {
        bail!("--threshold {}: must be ≥ 0 (0.10 = 10 %)", a.threshold);
    }
    if !(a.min_busy_pct.is_finite() && (0.0..100.0).contains(&a.min_busy_pct)) {
        bail!("--min-busy-pct {}: must be in 0..100", a.min_busy_pct);
    }
    let batch_kernel: KernelKind = match a.batch_kernel.trim() {
        k @ ("stream" | "matrix") => k.parse().map_err(|e| anyhow::anyhow!("{e}"))?,
        other => bail!("--batch-kernel {other:?}: expected stream or matrix"),
    };
    let probe = a
        .latency_probe
        .as_deref()
        .map(|s| latency::parse_spec(s, a.probe_work_us))
        .transpose()?;
    pos(a.probe_rps, "--probe-rps")?;
    if let Some(p) = &a.pairs {
        elfen_topo::parse_pair_spec(p).with_context(|| format!("--pairs {p:?}"))?;
    }
    Ok(Options {
        target,
        user: a.user.clone(),
        pairs: a.pairs.clone(),
        window: Duration::from_secs_f64(a.window_s),
        warmup: Duration::from_secs_f64(a.warmup_s),
        watch: Duration::from_millis(a.watch_ms),
        max_slowdown: a.max_slowdown,
        threshold: a.threshold,
        min_busy_pct: a.min_busy_pct,
        batch_kernel,
        probe,
        probe_rps: a.probe_rps,
        budget_us: a.budget_us,
        probes: parse_list(a.probes.as_deref(), &Probe::ALL, "--probes")?,
        knobs: parse_list(a.knobs.as_deref(), &Knob::ALL, "--knobs")?,
        exe: std::env::current_exe().context("locating the elfen executable")?,
        cgroup_root: elfen_cgroup_root(),
        progress: !a.quiet,
    })
}

/// Where the daemon looks for cgroup hierarchies by default.
fn elfen_cgroup_root() -> PathBuf {
    elfen_daemon::Config::default().cgroup_root
}

/// Runs `elfen advise` with `a`.
pub fn run(a: AdviseArgs) -> anyhow::Result<()> {
    if let Some(AdviseSub::BatchHelper(h)) = &a.sub {
        return helper_main(h);
    }
    let o = options(&a)?;
    let stop = elfen_cmd::interrupt::install();
    let result = run::advise(&o, stop)?;
    print!("{}", crate::format::render(&result));
    let path = a.json.clone().unwrap_or_else(|| {
        Path::new("results").join(format!("advise-{}.json", result.created_unix_s))
    });
    elfen_results::save_json(&result, &path)
        .with_context(|| format!("saving {}", path.display()))?;
    println!("saved {}", path.display());
    if result.interrupted {
        bail!(
            "ended early; the record holds what was measured ({})",
            path.display()
        );
    }
    Ok(())
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

    fn args(v: &[&str]) -> Result<AdviseArgs, clap::Error> {
        let mut all = vec!["elfen", "advise"];
        all.extend_from_slice(v);
        Cli::try_parse_from(all).map(|c| {
            let Command::Advise(a) = c.cmd;
            a
        })
    }

    #[test]
    fn arguments_parse_and_bad_values_are_named() {
        let a = args(&[
            "--comm",
            "redis-server",
            "--knobs",
            "idle,guard",
            "--probes",
            "none",
        ])
        .unwrap();
        let o = options(&a).unwrap();
        assert_eq!(o.target, LcTarget::Comm("redis-server".into()));
        assert_eq!(o.knobs, vec![Knob::Idle, Knob::Guard]);
        assert!(o.probes.is_empty());
        assert_eq!((o.max_slowdown, o.threshold), (3.0, 0.10));
        assert!(args(&[]).is_err(), "an LC selector is required");
        assert!(args(&["--pid", "1", "--comm", "x"]).is_err(), "only one");
        let bad = |v: &[&str]| format!("{:#}", options(&args(v).unwrap()).unwrap_err());
        assert!(bad(&["--pid", "1", "--knobs", "idle,gaurd"]).contains("gaurd"));
        assert!(bad(&["--pid", "1", "--max-slowdown", "0.5"]).contains("--max-slowdown"));
        assert!(bad(&["--pid", "1", "--window-s", "0"]).contains("--window-s"));
        assert!(bad(&["--pid", "1", "--batch-kernel", "fft"]).contains("fft"));
        assert!(bad(&["--cgroup", "rel/x"]).contains("absolute"));
        assert!(bad(&["--pid", "1", "--latency-probe", "redis"]).contains("KIND@HOST:PORT"));
        assert!(bad(&["--pid", "1", "--pairs", "0:x"]).contains("--pairs"));
        let h = args(&["batch-helper", "--kernel", "stream", "--units", "/x"]).unwrap();
        assert!(matches!(h.sub, Some(AdviseSub::BatchHelper(_))));
    }
}
