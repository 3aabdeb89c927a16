//! `elfen proxy …`: the proxy's own subcommands (`run`, `demo-service`,
//! from `elfen_proxy::cli`) and `bench`, the measurement beside them.

use clap::{Args, Subcommand};

/// The proxy's subcommand, with its bench.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Local-node redundancy for an LC service: a proxy in front of an
    /// active and a backup replica that re-sends the requests in flight at a
    /// paused replica (seen on its signal line) to the other one, swaps the
    /// roles and warms the paused one; or a timeout hedge at a percentile.
    Proxy(ProxyCommand),
}

/// `elfen proxy …`.
#[derive(Debug, Args)]
pub struct ProxyCommand {
    #[command(subcommand)]
    sub: Sub,
}

// Parsed once per process: the size difference between variants is moot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Sub {
    /// The proxy's own: `run`, `demo-service`.
    #[command(flatten)]
    Proxy(elfen_proxy::cli::Sub),
    /// Benchmark: an LC service's replicas driven alone, through the proxy
    /// (forwarding, local-node redundancy) and behind a timeout hedge, side
    /// by side (configs/proxy/bench-*.toml; default: the proxy's added
    /// latency); prints the table, saves JSON.
    Bench(crate::BenchArgs),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        let Command::Proxy(p) = self;
        match p.sub {
            Sub::Proxy(s) => s.run(),
            Sub::Bench(a) => crate::run(a),
        }
    }
}
