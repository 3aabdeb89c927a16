//! `elfen daemon`: the crate's subcommand, a clap [`Command`] the `elfen`
//! binary flattens into its own (and `elfen-daemon`, this crate's binary,
//! parses [`DaemonArgs`] directly).

use crate::config::Config;
use crate::helpers::{LcHelperArgs, SpinHelperArgs};
use crate::measure::{self, MeasureReport, Params};
use crate::plan::Plan;
use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

/// The daemon's subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Protect an unmodified LC service while batch work borrows its idle lanes.
    #[command(long_about = DAEMON_ABOUT)]
    Daemon(DaemonArgs),
}

const DAEMON_ABOUT: &str = "\
Protect an unmodified latency-critical (LC) service while batch work borrows the lanes it \
leaves idle. The daemon creates and owns a signal page, learns from the kernel (BPF on \
sched_switch; a coarse /proc poll fallback, reported) when the LC service - found by pid, \
cgroup or command name, and found again when it restarts - runs on each request lane, writes \
that lane's LC line, and makes each batch group give the lanes back in its mode: cooperative \
(instrumented programs nap themselves), guard (a SCHED_FIFO thread occupies the batch lane \
while the policy says nap), freeze (the group's freezer), idle (cpu.idle / SCHED_IDLE) or \
blind (the group's cpuset follows the CPUs the LC leaves idle). Every cgroup change is \
recorded in a state file first: SIGTERM restores everything (a batch command is stopped with \
all it forked), and the next start repairs what a killed daemon left. Exit status: 0 after a \
clean stop, 1 on an error, 3 when a batch group's cgroup was removed under the daemon \
(on_group_lost = \"stop\"), 78 when the configuration is refused (nothing applied; --check \
too). Under systemd (Type=notify) it says READY=1 once it protects and feeds the watchdog \
from its heartbeat. See docs/daemon.md.";

/// Arguments of `elfen daemon`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DaemonArgs {
    /// The configuration file (TOML; see configs/daemon/).
    #[arg(long, value_name = "FILE", required = true)]
    pub config: Option<PathBuf>,
    /// Validate the configuration against this machine and exit: 0 valid, 78 not.
    #[arg(long)]
    pub check: bool,
    /// Measurements and helpers.
    #[command(subcommand)]
    pub sub: Option<DaemonSub>,
}

/// `elfen daemon …` subcommands.
#[derive(Debug, Subcommand)]
pub enum DaemonSub {
    /// Guard step-aside latency, the daemon's CPU use at zero and half load, freeze latency.
    #[command(long_about = MEASURE_ABOUT)]
    Measure(MeasureArgs),
    /// (for measurements and tests) a synthetic LC service busy in bursts.
    #[command(hide = true)]
    LcHelper(LcHelperArgs),
    /// (for measurements and tests) an unmodified batch spinner.
    #[command(hide = true)]
    SpinHelper(SpinHelperArgs),
    /// (for measurements and tests) a batch program whose memory grows at a fixed rate.
    #[command(hide = true)]
    BalloonHelper(crate::balloon::BalloonArgs),
}

const MEASURE_ABOUT: &str = "\
What the daemon costs and how fast its guards step aside, with the daemon's code in this \
process. Each run has up to five phases, each a fresh daemon protecting a synthetic LC service \
(a child pinned to the request lane) from an unmodified SCHED_IDLE spinner the daemon starts \
confined to the batch lane:

  zero    guard mode, the LC sleeps: the daemon's idle upkeep (target <= 2 % of a lane)
  half    guard mode, the LC busy 500 us / idle 250-750 us (about 50 %): the daemon's CPU \
besides the guards' occupation (target <= 2 %), and the step-aside latency of every burst: \
the LC thread's switch onto the request lane (BPF event time) -> the daemon's writer running \
on the batch lane, which takes the batch thread off it (target p99 <= 50 us); then the guard \
holds the lane
  freeze  the same LC, the batch group in freeze mode: freeze and thaw latency
  blind   blind isolation (B = 0, batch on every CPU) on an LC busy 500 us / idle 2-6 ms, \
twice: woken at busy edges, then polling every 200 us: the reaction, LC switch-in -> its CPU \
taken from batch (target p99 <= 100 us)

Needs root. Run it on an otherwise idle machine: other processes stretch every figure.";

/// Arguments of `elfen daemon measure`.
#[derive(Debug, Args)]
pub struct MeasureArgs {
    /// Repetitions of the phases.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub runs: usize,
    /// Measured window of each phase, ms.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub window_ms: u64,
    /// Warm-up before each window, ms.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub warmup_ms: u64,
    /// Lane pairing (e.g. "0:1"); default: the machine's plan.
    #[arg(long, value_name = "SPEC")]
    pub pairs: Option<String>,
    /// Skip the freeze phase.
    #[arg(long)]
    pub no_freeze: bool,
    /// Skip the two blind-isolation phases.
    #[arg(long)]
    pub no_blind: bool,
    /// Publish busy edges at the LC's switch-in instead of at its wake-up
    /// (`[signal] announce_wakeups = false`), to compare the two.
    #[arg(long)]
    pub no_announce: bool,
    /// Write the JSON result here (default: results/daemon-measure-SECONDS.json, Unix time).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Daemon(a) => run(a),
        }
    }
}

/// Runs `elfen daemon` with `args`.
pub fn run(args: DaemonArgs) -> anyhow::Result<()> {
    match args.sub {
        Some(DaemonSub::Measure(m)) => run_measure(m),
        Some(DaemonSub::LcHelper(h)) => crate::helpers::lc_helper(&h),
        Some(DaemonSub::SpinHelper(h)) => crate::helpers::spin_helper(&h),
        Some(DaemonSub::BalloonHelper(h)) => crate::balloon::balloon_helper(&h),
        None => {
            let path = args.config.context("--config FILE is required")?;
            run_daemon(&path, args.check)
        }
    }
}

/// The exit status of `elfen daemon` (and `--check`) when the
/// configuration is refused (`EX_CONFIG` of sysexits.h): nothing was
/// applied, and starting again will not help — the systemd unit's
/// `RestartPreventExitStatus=78` does not restart it.
pub const EXIT_CONFIG: i32 = 78;

/// Says a refused configuration and exits with [`EXIT_CONFIG`].
fn config_refused(e: anyhow::Error) -> ! {
    crate::logging::error(format!("error: {e:#}"));
    std::process::exit(EXIT_CONFIG)
}

fn run_daemon(path: &Path, check: bool) -> anyhow::Result<()> {
    if !check {
        crate::logging::init();
    }
    let config = Config::load(path)
        .context("invalid configuration, nothing applied")
        .unwrap_or_else(|e| config_refused(e));
    let plan = Plan::resolve(&config)
        .with_context(|| format!("invalid configuration {}, nothing applied", path.display()))
        .unwrap_or_else(|e| config_refused(e));
    if check {
        for n in &plan.notes {
            println!("note: {n}");
        }
        for r in plan
            .config
            .batch
            .iter()
            .filter_map(|b| b.request_lane_risk())
        {
            println!("warning: {r}");
        }
        print!("{}", plan.describe());
        println!("configuration {} is valid", path.display());
        return Ok(());
    }
    let stop = elfen_cmd::interrupt::install();
    match crate::daemon::run(plan, stop) {
        Ok(_) => Ok(()),
        // a distinct status: a supervisor must not take it for a crash
        Err(e @ crate::DaemonError::GroupLost { .. }) => {
            crate::logging::error(format!("error: {e}"));
            std::process::exit(crate::health::EXIT_GROUP_LOST)
        }
        // refused at start (a metrics port in use): nothing was applied
        Err(crate::DaemonError::Config(e)) => {
            config_refused(anyhow::Error::new(e).context("elfen daemon: nothing applied"))
        }
        Err(e) => Err(anyhow::Error::new(e).context("elfen daemon")),
    }
}

fn run_measure(a: MeasureArgs) -> anyhow::Result<()> {
    let params = Params {
        runs: a.runs,
        window_ms: a.window_ms,
        warmup_ms: a.warmup_ms,
        pairs: a.pairs.clone(),
        no_freeze: a.no_freeze,
        no_blind: a.no_blind,
        announce_wakeups: !a.no_announce,
        helper: measure::helper_prefix(),
        ..Params::default()
    };
    elfen_cmd::interrupt::install();
    let created_unix_s = elfen_cmd::time::now_unix_s();
    let load_before = elfen_cmd::proc::loadavg();
    let (runs, source) = measure::measure(&params)?;
    let report = MeasureReport {
        schema: measure::SCHEMA.into(),
        created_unix_s,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        system: elfen_topo::SystemInfo::collect(),
        params,
        source,
        load_before,
        load_after: elfen_cmd::proc::loadavg(),
        summary: measure::summarize(&runs),
        runs,
    };
    let path = a.json.unwrap_or_else(|| {
        Path::new("results").join(format!("daemon-measure-{created_unix_s}.json"))
    });
    measure::save(&report, &path).with_context(|| format!("saving {}", path.display()))?;
    print!("{}", measure::render(&report));
    println!("\nsaved {}", path.display());
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

    #[test]
    fn parses_as_a_flattened_subcommand() {
        let c = Cli::try_parse_from(["elfen", "daemon", "--config", "d.toml", "--check"]).unwrap();
        let Command::Daemon(a) = c.cmd;
        assert_eq!(a.config.as_deref(), Some(Path::new("d.toml")));
        assert!(a.check && a.sub.is_none());
        let c = Cli::try_parse_from(["elfen", "daemon", "measure", "--runs", "1"]).unwrap();
        let Command::Daemon(a) = c.cmd;
        assert!(matches!(a.sub, Some(DaemonSub::Measure(m)) if m.runs == 1));
        assert!(
            Cli::try_parse_from(["elfen", "daemon"]).is_err(),
            "--config is required"
        );
        assert!(Cli::try_parse_from(["elfen", "daemon", "--config", "x", "measure"]).is_err());
    }
}
