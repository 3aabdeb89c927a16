//! `elfen`: the command-line entry point. A thin main: each crate owns its
//! subcommands (`elfen_micro::cli`, `elfen_bench::cli`, `elfen_sim::cli`,
//! `elfen_bpf::cli`, `elfen_ops::cli`, `elfen_daemon::cli`,
//! `elfen_proxybench::cli` (with `elfen_proxy::cli`), `elfen_trace::cli`,
//! `elfen_isobench::cli`, `elfen_advise::cli`) and this file only
//! dispatches to them and prints errors.
//!
//! Both product and lab: the one binary carries `elfen daemon` and
//! `elfen bench` alike (`docs/architecture.md`).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// elfen lets batch work borrow the CPU a latency-critical (LC) service leaves
/// idle and hands it back within microseconds when a request arrives.
#[derive(Debug, Parser)]
#[command(name = "elfen", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size difference between variants is moot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Cmd {
    #[command(flatten)]
    Micro(elfen_micro::cli::Command),
    #[command(flatten)]
    Bench(elfen_bench::cli::Command),
    #[command(flatten)]
    Sim(elfen_sim::cli::Command),
    #[command(flatten)]
    Bpf(elfen_bpf::cli::Command),
    #[command(flatten)]
    Ops(elfen_ops::cli::Command),
    #[command(flatten)]
    Daemon(elfen_daemon::cli::Command),
    #[command(flatten)]
    Proxy(elfen_proxybench::cli::Command),
    #[command(flatten)]
    Trace(elfen_trace::cli::Command),
    #[command(flatten)]
    Isobench(elfen_isobench::cli::Command),
    #[command(flatten)]
    Advise(elfen_advise::cli::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Micro(c) => c.run(),
        Cmd::Bench(c) => c.run(),
        Cmd::Sim(c) => c.run(),
        Cmd::Bpf(c) => c.run(),
        Cmd::Ops(c) => c.run(),
        Cmd::Daemon(c) => c.run(),
        Cmd::Proxy(c) => c.run(),
        Cmd::Trace(c) => c.run(),
        Cmd::Isobench(c) => c.run(),
        Cmd::Advise(c) => c.run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("elfen: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
