//! `elfen bench` (under construction).
use clap::{Args, Subcommand};

/// The harness' subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the co-location experiment: configurations side by side over a load sweep.
    Bench(BenchArgs),
}

/// Arguments of `elfen bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        anyhow::bail!("elfen bench is not built yet")
    }
}
