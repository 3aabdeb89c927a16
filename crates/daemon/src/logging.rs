//! The daemon's log: one event per line with its level, through `tracing`.
//!
//! `elfen daemon` installs a subscriber writing to stderr without colours:
//! `2026-01-01T12:00:00.000000Z  INFO elfen daemon: running …`, or without
//! the time stamp under systemd's journal (`$JOURNAL_STREAM` set: journald
//! stamps each line itself). `$ELFEN_LOG` (`error`, `warn`, `info`,
//! `debug`, `trace`; default `info`) sets the lowest level shown. A message
//! of several lines is several events, one per line. Used in-process
//! without that subscriber (tests, embedders), the lines go to stderr as
//! they are.

use tracing::Level;
use tracing::level_filters::LevelFilter;

/// Installs the stderr subscriber for this process (once; a second call,
/// or one after an embedder installed its own, changes nothing).
pub fn init() {
    let level = std::env::var("ELFEN_LOG")
        .ok()
        .and_then(|v| v.trim().parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let b = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(level);
    let _ = if journal {
        b.without_time().try_init()
    } else {
        b.try_init()
    };
}

/// Logs `msg` at `level`, one event per non-empty line.
pub fn event(level: Level, msg: impl std::fmt::Display) {
    let text = msg.to_string();
    let installed = tracing::dispatcher::has_been_set();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if !installed {
            eprintln!("elfen daemon: {line}");
            continue;
        }
        match level {
            Level::ERROR => tracing::error!(target: "elfen daemon", "{line}"),
            Level::WARN => tracing::warn!(target: "elfen daemon", "{line}"),
            Level::INFO => tracing::info!(target: "elfen daemon", "{line}"),
            Level::DEBUG => tracing::debug!(target: "elfen daemon", "{line}"),
            _ => tracing::trace!(target: "elfen daemon", "{line}"),
        }
    }
}

/// [`event`] at `INFO`.
pub fn info(msg: impl std::fmt::Display) {
    event(Level::INFO, msg)
}

/// [`event`] at `WARN`.
pub fn warn(msg: impl std::fmt::Display) {
    event(Level::WARN, msg)
}

/// [`event`] at `ERROR`.
pub fn error(msg: impl std::fmt::Display) {
    event(Level::ERROR, msg)
}
