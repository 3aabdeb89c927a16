//! The record of batch work killed under memory shortage ([`KillLog`]):
//! the daemon appends a [`BatchKill`] to a small JSON file (by default
//! `/run/elfen/batch-kills.json`) at each kill, and `elfen status` shows
//! the count and the last one. One type for both sides.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// Where `elfen daemon` records kills unless configured otherwise
/// (`[memory] kill_log`).
pub const DEFAULT_KILL_LOG: &str = "/run/elfen/batch-kills.json";

/// At most this many kills are kept (the oldest go first); the counts
/// per group keep every kill.
pub const KEEP: usize = 100;

/// One batch group killed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchKill {
    /// Seconds since the Unix epoch when the group was killed.
    pub unix_s: f64,
    /// The batch group's name.
    pub group: String,
    /// Its configured priority (the lowest are killed first).
    pub priority: i32,
    /// Why: the watermark crossed, in words.
    pub reason: String,
    /// `MemAvailable` when the watermark was seen crossed, bytes.
    pub available_bytes: u64,
    /// What the group used then, bytes (0: not known).
    pub group_bytes: u64,
    /// Processes sent SIGKILL.
    pub processes: Vec<u32>,
    /// Processes still there afterwards (should be none).
    pub left: Vec<u32>,
    /// `CLOCK_MONOTONIC` ns when the watermark was seen crossed.
    pub detected_mono_ns: u64,
    /// `CLOCK_MONOTONIC` ns when the kill was done (the group empty or
    /// given up on).
    pub done_mono_ns: u64,
}

/// The kill log: the last kills and every group's count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KillLog {
    /// The daemon that writes it.
    pub daemon_pid: u32,
    /// Kills per group since that daemon started.
    pub counts: std::collections::BTreeMap<String, u64>,
    /// The last [`KEEP`] kills, oldest first.
    pub kills: Vec<BatchKill>,
}

impl KillLog {
    /// A fresh log for daemon `pid`.
    pub fn new(pid: u32) -> KillLog {
        KillLog {
            daemon_pid: pid,
            ..KillLog::default()
        }
    }

    /// Reads `path`; `None` if there is no such file.
    pub fn load(path: &Path) -> std::io::Result<Option<KillLog>> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Adds `k` (dropping the oldest beyond [`KEEP`]).
    pub fn push(&mut self, k: BatchKill) {
        *self.counts.entry(k.group.clone()).or_default() += 1;
        self.kills.push(k);
        if self.kills.len() > KEEP {
            self.kills.remove(0);
        }
    }

    /// Kills in total.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Writes the log to `path` atomically (temp file + rename), creating
    /// its directory.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d)?;
        }
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    }

    /// One line for `elfen status`.
    pub fn summary(&self) -> String {
        match self.kills.last() {
            None => "none".into(),
            Some(k) => format!(
                "{} (last: group {} at {}, {}; {} processes)",
                self.total(),
                k.group,
                elfen_cmd::time::utc_stamp(k.unix_s as u64),
                k.reason,
                k.processes.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_round_trips_and_keeps_the_last() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/kills.json");
        assert_eq!(KillLog::load(&p).unwrap(), None);
        let mut log = KillLog::new(7);
        for i in 0..(KEEP + 5) {
            log.push(BatchKill {
                unix_s: 1.0,
                group: if i % 2 == 0 { "a" } else { "b" }.into(),
                priority: 0,
                reason: "MemAvailable 1 MiB < 2 MiB".into(),
                available_bytes: 1 << 20,
                group_bytes: 0,
                processes: vec![1, 2],
                left: vec![],
                detected_mono_ns: 1,
                done_mono_ns: 2,
            });
        }
        assert_eq!(log.kills.len(), KEEP);
        assert_eq!(log.total(), (KEEP + 5) as u64);
        log.save(&p).unwrap();
        let back = KillLog::load(&p).unwrap().unwrap();
        assert_eq!(back, log);
        assert!(
            back.summary().starts_with("105 (last: group a"),
            "{}",
            back.summary()
        );
        std::fs::write(&p, "{").unwrap();
        assert!(
            KillLog::load(&p)
                .unwrap_err()
                .to_string()
                .contains("kills.json")
        );
    }
}
