//! `elfen status` and `elfen ctl`, as clap commands the `elfen` binary
//! flattens.

use crate::ctl;
use crate::render;
use crate::status::{self, DEFAULT_STALE_MS, PageStatus, Rates};
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use elfen_shm::KillMode;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The operator's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// A live per-lane view of a signal page: LC busy/idle and queue, policy
    /// and budget, batch threads napping, the kill switch, and whether the
    /// page's controller is alive (heartbeat) — read straight from the page.
    Status(StatusArgs),
    /// The kill switch: `elfen ctl off` stops all borrowing at once (batch
    /// threads pause at their next slow path); `elfen ctl on` resumes it.
    Ctl(CtlArgs),
    /// Serves a signal page's metrics for Prometheus at
    /// http://LISTEN/metrics (OpenMetrics text) until Ctrl-C: LC busy time
    /// and requests, batch run time, naps and wakes per lane, policy, kill
    /// switch, heartbeat age.
    Metrics(MetricsArgs),
}

/// `elfen metrics`.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// The signal page: a name in /dev/shm or a path.
    #[arg(long, env = "ELFEN_PAGE", default_value = elfen_shm::DEFAULT_NAME)]
    pub page: String,
    /// Address to listen on (keep it on localhost unless a firewall guards it).
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub listen: std::net::SocketAddr,
    /// A heartbeat older than this marks the controller dead, ms.
    #[arg(long, default_value_t = DEFAULT_STALE_MS)]
    pub stale_ms: f64,
}

impl Command {
    /// Runs the command.
    pub fn run(self) -> Result<()> {
        match self {
            Command::Status(a) => status(&a),
            Command::Ctl(a) => ctl(&a),
            Command::Metrics(a) => metrics(&a),
        }
    }
}

/// The page file a `--page` value names: a name without `/` lives in
/// /dev/shm, anything else is a path.
fn page_file(page: &str) -> PathBuf {
    elfen_shm::page_path(page)
}

/// `elfen status`: a live per-lane view of a signal page, read straight from
/// the page (works while the page's controller runs and after it died, and
/// says which).
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The signal page: a name in /dev/shm or a path.
    #[arg(long, env = "ELFEN_PAGE", default_value = elfen_shm::DEFAULT_NAME)]
    pub page: String,
    /// Refresh in place every `--interval-ms` until Ctrl-C, with rates (LC
    /// busy and batch run fractions, requests/s, naps/s) over each interval.
    #[arg(long)]
    pub watch: bool,
    /// Refresh interval for `--watch`, ms.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
    /// Print the snapshot as JSON (with `--watch`: one JSON object per line,
    /// with rates).
    #[arg(long)]
    pub json: bool,
    /// A heartbeat older than this is reported stale, ms.
    #[arg(long, default_value_t = DEFAULT_STALE_MS)]
    pub stale_ms: f64,
    /// The daemon's record of batch groups killed under memory shortage
    /// (`[memory] kill_log`), shown when it exists.
    #[arg(long, env = "ELFEN_KILL_LOG", default_value = crate::kills::DEFAULT_KILL_LOG)]
    pub kill_log: PathBuf,
}

/// The line on batch kills, when the daemon's kill log `path` exists
/// (`creator_pid`: the page's creator, the daemon that runs now).
fn kills_line(path: &std::path::Path, creator_pid: u32) -> String {
    match crate::kills::KillLog::load(path) {
        Ok(Some(log)) => format!(
            "batch kills (memory watermark): {}{}\n",
            log.summary(),
            if log.daemon_pid == creator_pid {
                String::new()
            } else {
                format!(" — recorded by an earlier daemon, pid {}", log.daemon_pid)
            }
        ),
        Ok(None) => String::new(),
        Err(e) => format!("batch kills: cannot read the kill log: {e}\n"),
    }
}

/// `elfen ctl off|on`: the kill switch.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// `off` stops all borrowing at once (batch threads obey at their next
    /// slow path); `on` resumes it.
    pub switch: SwitchArg,
    /// With `off`: `paused` (batch must not run; guards hold their lanes,
    /// freezers freeze) or `unmanaged` (borrowing off: batch runs without
    /// napping, guards stand aside, freezers thaw).
    #[arg(long, default_value = "paused")]
    pub mode: KillMode,
    /// The signal page: a name in /dev/shm or a path.
    #[arg(long, env = "ELFEN_PAGE", default_value = elfen_shm::DEFAULT_NAME)]
    pub page: String,
}

/// The kill switch's two positions.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SwitchArg {
    /// Stop borrowing.
    Off,
    /// Resume borrowing.
    On,
}

/// Runs `elfen status`.
pub fn status(args: &StatusArgs) -> Result<()> {
    let path = page_file(&args.page);
    let page =
        status::attach(&path).with_context(|| format!("attaching {} read-only", path.display()))?;
    let read = || {
        PageStatus::read(&page, args.stale_ms)
            .with_context(|| format!("reading {}", path.display()))
    };
    let mut prev = read()?;
    if !args.watch {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&prev)?);
        } else {
            print!("{}", render::text(&prev, None));
            print!("{}", kills_line(&args.kill_log, prev.creator_pid));
        }
        return Ok(());
    }
    let stop = elfen_cmd::interrupt::install();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let interval = Duration::from_millis(args.interval_ms.max(50));
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(interval);
        let now = read()?;
        let rates = Rates::between(&prev, &now);
        let mut out = std::io::stdout().lock();
        if args.json {
            let line = serde_json::json!({ "status": &now, "rates": &rates });
            writeln!(out, "{line}")?;
        } else {
            if tty {
                // home + clear screen: refresh in place
                write!(out, "\x1b[H\x1b[2J")?;
            }
            write!(out, "{}", render::text(&now, Some(&rates)))?;
            write!(out, "{}", kills_line(&args.kill_log, now.creator_pid))?;
            if !tty {
                writeln!(out)?;
            }
        }
        out.flush()?;
        prev = now;
    }
    Ok(())
}

/// Runs `elfen ctl`.
pub fn ctl(args: &CtlArgs) -> Result<()> {
    let mode = match args.switch {
        SwitchArg::Off if args.mode == KillMode::Off => {
            anyhow::bail!(
                "elfen ctl off --mode: paused or unmanaged (`elfen ctl on` clears the switch)"
            )
        }
        SwitchArg::Off => args.mode,
        SwitchArg::On => KillMode::Off,
    };
    let path = page_file(&args.page);
    let was = ctl::set(&path, mode).with_context(|| {
        format!(
            "setting the kill switch of {} (needs write access to the page file: its owner or root)",
            path.display()
        )
    })?;
    let word = |m: KillMode| match m {
        KillMode::Off => "clear (borrowing allowed)".to_string(),
        m => format!("{m} (borrowing stopped)"),
    };
    if was == mode {
        println!("kill switch of {}: already {}", path.display(), word(mode));
    } else {
        println!(
            "kill switch of {}: {} (was {})",
            path.display(),
            word(mode),
            word(was)
        );
    }
    Ok(())
}

/// Runs `elfen metrics`.
pub fn metrics(args: &MetricsArgs) -> Result<()> {
    let path = page_file(&args.page);
    let page =
        status::attach(&path).with_context(|| format!("attaching {} read-only", path.display()))?;
    let registry = crate::metrics::page_registry(std::sync::Arc::new(page), args.stale_ms);
    let server = crate::metrics::serve(args.listen, registry)?;
    eprintln!(
        "elfen metrics: serving {} at http://{}/metrics (Ctrl-C stops)",
        path.display(),
        server.addr()
    );
    let stop = elfen_cmd::interrupt::install();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("elfen metrics: {} scrapes answered", server.scrapes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kills::{BatchKill, KillLog};

    #[test]
    fn status_shows_the_kill_log_when_there_is_one() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("kills.json");
        assert_eq!(kills_line(&p, 7), "", "no log, no line");
        let mut log = KillLog::new(7);
        log.push(BatchKill {
            unix_s: 1_700_000_000.0,
            group: "nightly".into(),
            priority: 0,
            reason: "MemAvailable 812 MiB < 1024 MiB".into(),
            available_bytes: 812 << 20,
            group_bytes: 1 << 30,
            processes: vec![10, 11, 12],
            left: vec![],
            detected_mono_ns: 1,
            done_mono_ns: 2,
        });
        log.save(&p).unwrap();
        assert_eq!(
            kills_line(&p, 7),
            "batch kills (memory watermark): 1 (last: group nightly at 20231114-221320, \
             MemAvailable 812 MiB < 1024 MiB; 3 processes)\n"
        );
        assert!(kills_line(&p, 8).contains("recorded by an earlier daemon, pid 7"));
        std::fs::write(&p, "not json").unwrap();
        assert!(kills_line(&p, 7).starts_with("batch kills: cannot read the kill log"));
    }
}
