//! The executor's state file: held by a live daemon, or left by a dead
//! one to recover first.

use super::err;
use crate::error::ConfigError;
use elfen_cgroup::StateRecord;
use std::path::Path;

/// A state file of a live daemon refuses a second one; one whose writer is
/// gone — its pid free, or reused by another program (a later start than
/// the one recorded, or than the file's last write) — is recovered first.
/// A file or directory another user could have written is refused
/// (`StateRecord::load`). Returns the dead writer's pid and, when its pid
/// is reused, a note saying by what.
pub(super) fn check_state_file(path: &Path) -> Result<(Option<u32>, Option<String>), ConfigError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if dir.exists() && !dir.is_dir() {
            return Err(err(
                "state_file",
                format!("{} is not a directory", dir.display()),
            ));
        }
    }
    let rec = StateRecord::load(path).map_err(|e| err("state_file", e.to_string()))?;
    let Some(r) = rec else {
        return Ok((None, None));
    };
    if r.pid == std::process::id() {
        return Ok((Some(r.pid), None));
    }
    let written = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    match elfen_cmd::proc::holder(r.pid, r.pid_start, written) {
        elfen_cmd::proc::Holder::Running(p) => Err(err(
            "state_file",
            format!(
                "{} is held by {p}, which is running (another daemon on this state file?): \
                 stop it (kill -TERM {}) or give this daemon another state_file",
                path.display(),
                p.pid
            ),
        )),
        elfen_cmd::proc::Holder::Reused(p) => Ok((
            Some(r.pid),
            Some(format!(
                "state file {}: its writer, pid {}, is gone; that pid now belongs to another \
                 program ({p}, started after the file was written)",
                path.display(),
                r.pid
            )),
        )),
        elfen_cmd::proc::Holder::Gone => Ok((Some(r.pid), None)),
    }
}
