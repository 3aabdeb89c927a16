//! `elfen sim` (under construction).
use clap::{Args, Subcommand};

/// The simulator's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate LC service + batch work on SMT cores, chips and clusters.
    Sim(SimArgs),
}

/// Arguments of `elfen sim`.
#[derive(Debug, Args)]
pub struct SimArgs {}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        anyhow::bail!("elfen sim is not built yet")
    }
}
