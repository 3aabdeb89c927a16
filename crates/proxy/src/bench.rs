//! `elfen proxy bench` (being written).

use clap::Args;

/// Arguments of `elfen proxy bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {}

/// Runs a benchmark.
pub fn run(_a: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
