//! `elfen isobench`: the clap command the `elfen` binary flattens.

use crate::common::{Helpers, Load, save};
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// The subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure the daemon's isolation beyond the CPU: memory, disk I/O,
    /// egress, and the heartbeat fail-safe (root; see docs/daemon.md).
    Isobench(IsobenchArgs),
}

/// `elfen isobench`.
#[derive(Debug, Args)]
pub struct IsobenchArgs {
    /// Which benchmark.
    #[command(subcommand)]
    pub bench: Bench,
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// A batch job that balloons next to a serving LC: watermark → kill time, the LC's
    /// p99 and major faults with and without the balloon, what was killed, the kernel's OOM kills.
    Memory(MemoryArgs),
    /// fio: an LC latency probe next to fio batch jobs, alone / unlimited / under the I/O budget.
    Io(IoArgs),
    /// In network namespaces: LC requests next to an iperf3 upload, alone / normal / low priority.
    Egress(EgressArgs),
    /// The heartbeat fail-safe: daemon SIGKILLed → batch threads pause.
    Failsafe(FailsafeArgs),
    /// (the benchmarks' helper programs)
    #[command(hide = true)]
    Helper {
        /// The helper and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Common arguments.
#[derive(Debug, Args)]
pub struct Common {
    /// Repetitions.
    #[arg(long)]
    pub runs: Option<usize>,
    /// Write the JSON result here (default: results/isobench-<bench>-<unix time>.json).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

/// `elfen isobench memory`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[command(flatten)]
    common: Common,
    /// The LC's load, requests/s.
    #[arg(long, default_value_t = 2000.0)]
    rps: f64,
    /// Measured window, ms.
    #[arg(long, default_value_t = 8000)]
    window_ms: u64,
    /// The watermark: this far below MemAvailable at each run's start, MiB.
    #[arg(long, default_value_t = 1024)]
    headroom_mib: u64,
    /// The balloon's growth, MiB/s.
    #[arg(long, default_value_t = 256)]
    rate_mib_s: u64,
    /// The LC's working set (a file's pages), MiB.
    #[arg(long, default_value_t = 256)]
    working_set_mib: u64,
}

/// `elfen isobench io`.
#[derive(Debug, Args)]
pub struct IoArgs {
    #[command(flatten)]
    common: Common,
    /// Measured window, s.
    #[arg(long, default_value_t = 10)]
    window_s: u64,
    /// The probe's reads per second.
    #[arg(long, default_value_t = 200)]
    probe_iops: u32,
    /// The batch budget: read MiB/s.
    #[arg(long, default_value_t = 16)]
    budget_read_mib_s: u64,
    /// The batch budget: write MiB/s.
    #[arg(long, default_value_t = 32)]
    budget_write_mib_s: u64,
}

/// `elfen isobench egress`.
#[derive(Debug, Args)]
pub struct EgressArgs {
    #[command(flatten)]
    common: Common,
    /// The LC's load, requests/s.
    #[arg(long, default_value_t = 500.0)]
    rps: f64,
    /// Measured window, ms.
    #[arg(long, default_value_t = 10_000)]
    window_ms: u64,
    /// The link's rate, Mbit/s.
    #[arg(long, default_value_t = 50)]
    rate_mbit: u32,
}

/// `elfen isobench failsafe`.
#[derive(Debug, Args)]
pub struct FailsafeArgs {
    #[command(flatten)]
    common: Common,
    /// The daemon's heartbeat, ms.
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,
}

impl Command {
    /// Runs it.
    pub fn run(self) -> anyhow::Result<()> {
        let Command::Isobench(a) = self;
        if let Bench::Helper { args } = &a.bench {
            return crate::helpers::run(args);
        }
        let stop = elfen_cmd::interrupt::install();
        let helpers = Helpers::cli();
        let load_before = elfen_cmd::proc::loadavg();
        let (table, path) = match a.bench {
            Bench::Memory(m) => {
                let d = crate::memory::Params::default();
                let p = crate::memory::Params {
                    runs: m.common.runs.unwrap_or(d.runs),
                    load: Load {
                        rps: m.rps,
                        window_ms: m.window_ms,
                        ..d.load
                    },
                    headroom_mib: m.headroom_mib,
                    rate_mib_s: m.rate_mib_s,
                    working_set_mib: m.working_set_mib,
                    ..d
                };
                let reps = crate::memory::measure(&p, &helpers, stop)?;
                let r = crate::memory::report(&p, reps, load_before);
                (
                    crate::memory::render(&r.summary),
                    save(&r, m.common.json.as_deref())?,
                )
            }
            Bench::Io(m) => {
                let d = crate::io::Params::default();
                let p = crate::io::Params {
                    runs: m.common.runs.unwrap_or(d.runs),
                    window_s: m.window_s,
                    probe_iops: m.probe_iops,
                    budget_read_mib_s: m.budget_read_mib_s,
                    budget_write_mib_s: m.budget_write_mib_s,
                    ..d
                };
                let reps = crate::io::measure(&p, stop)?;
                let r = crate::io::report(&p, reps, load_before);
                (
                    crate::io::render(&r.summary),
                    save(&r, m.common.json.as_deref())?,
                )
            }
            Bench::Egress(m) => {
                let d = crate::egress::Params::default();
                let p = crate::egress::Params {
                    runs: m.common.runs.unwrap_or(d.runs),
                    load: Load {
                        rps: m.rps,
                        window_ms: m.window_ms,
                        ..d.load
                    },
                    rate_mbit: m.rate_mbit,
                    ..d
                };
                let reps = crate::egress::measure(&p, &helpers, stop)?;
                let r = crate::egress::report(&p, reps, load_before);
                (
                    crate::egress::render(&r.summary),
                    save(&r, m.common.json.as_deref())?,
                )
            }
            Bench::Failsafe(m) => {
                let d = crate::failsafe::Params::default();
                let p = crate::failsafe::Params {
                    runs: m.common.runs.unwrap_or(d.runs),
                    heartbeat_ms: m.heartbeat_ms,
                };
                let reps = crate::failsafe::measure(&p, &helpers, stop)?;
                let r = crate::failsafe::report(&p, reps, load_before);
                (
                    crate::failsafe::render(&r.summary),
                    save(&r, m.common.json.as_deref())?,
                )
            }
            Bench::Helper { .. } => unreachable!("handled above"),
        };
        print!("{table}");
        println!("saved {}", path.display());
        Ok(())
    }
}
