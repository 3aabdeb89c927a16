//! `elfen micro` (under construction).
use clap::{Args, Subcommand};

/// The micro-benchmarks' subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Micro-benchmarks: nap/wake latency per nap backend, check cost, instrumentation overhead.
    Micro(MicroArgs),
}

/// Arguments of `elfen micro`.
#[derive(Debug, Args)]
pub struct MicroArgs {}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        anyhow::bail!("elfen micro is not built yet")
    }
}
