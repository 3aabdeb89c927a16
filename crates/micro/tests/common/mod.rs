//! Running `elfen micro` in-process, as the `elfen` binary would.

use clap::Parser;
use elfen_micro::cli::Command;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

/// Parses `elfen <args>` into the micro subcommand.
pub fn parse(args: &[&str]) -> anyhow::Result<Command> {
    let mut v = vec!["elfen"];
    v.extend_from_slice(args);
    Ok(Cli::try_parse_from(v)?.cmd)
}

/// Our directories in `/dev/shm` (`elfen-micro-*`).
pub fn shm_dirs() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("elfen-micro-"))
                .collect()
        })
        .unwrap_or_default()
}
