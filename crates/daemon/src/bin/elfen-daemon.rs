//! `elfen-daemon`: the daemon as a program of its own, the same commands
//! as `elfen daemon` (the integration tests run it as a child process, to
//! SIGTERM or SIGKILL it).

use clap::Parser;
use std::process::ExitCode;

/// The elfen daemon (see `elfen daemon --help`).
#[derive(Debug, Parser)]
#[command(name = "elfen-daemon", version)]
struct Cli {
    #[command(flatten)]
    args: elfen_daemon::cli::DaemonArgs,
}

fn main() -> ExitCode {
    match elfen_daemon::cli::run(Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("elfen-daemon: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
