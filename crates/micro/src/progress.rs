//! Progress lines on stderr for long runs.

use std::time::Instant;

/// Prints `[  12.3 s] message` lines to stderr (or nothing when quiet).
#[derive(Debug)]
pub struct Progress {
    start: Instant,
    enabled: bool,
}

impl Progress {
    /// A progress printer; `enabled = false` prints nothing.
    pub fn new(enabled: bool) -> Progress {
        Progress {
            start: Instant::now(),
            enabled,
        }
    }

    /// Prints one line.
    pub fn say(&self, msg: &str) {
        if self.enabled {
            eprintln!("[{:7.1} s] {msg}", self.start.elapsed().as_secs_f64());
        }
    }
}
