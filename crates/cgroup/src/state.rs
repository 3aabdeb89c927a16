//! The state file: what the executor changed, so a later start can undo it.
//!
//! Written atomically (temp file + rename + directory sync, see
//! [`crate::fsio::write_atomic`]) *before* each change it describes is
//! applied, so after a crash (kill -9) the file lists everything that may
//! have been changed, possibly one entry more than was actually applied —
//! restoring that entry is harmless (its value is already the original, or
//! the group it would create does not exist).
//!
//! Format (JSON, `version` 1):
//!
//! ```json
//! {
//!   "version": 1,
//!   "root": "/sys/fs/cgroup",
//!   "layout": "hybrid",
//!   "freezer": "v1",
//!   "pid": 4242,
//!   "pid_start": 183467,
//!   "created": [ { "group": "elfen/batch", "controller": "cpuset", "kill_tasks": true } ],
//!   "originals": [ { "group": "lc.slice", "knob": { "cpu_shares": 1024 } } ],
//!   "enabled": [ { "group": "", "controller": "cpu" } ]
//! }
//! ```
//!
//! - `pid`, `pid_start`: the process that wrote the file and its start
//!   (clock ticks since boot, `/proc/<pid>/stat`), so a later start can
//!   tell its writer from a program that reuses the pid
//!   (`elfen_cmd::proc::holder`); files without `pid_start` are judged by
//!   their modification time.
//! - `created`: groups the executor made, in creation order (parents
//!   before children); restore removes them in reverse order. With
//!   `kill_tasks` every process in the group was started for its owner
//!   (a daemon's batch command and what it forked): restore kills what is
//!   left in it instead of moving it to the parent, where it would run
//!   unconfined.
//!
//! The file lives in a directory only root or its user can write, and
//! belongs to root or its user: [`StateRecord::load`] refuses anything
//! else (a link, another user's file, a group- or world-writable
//! directory), naming the file and the owner.
//! - `originals`: for groups it did not create, the value each knob had
//!   before the executor first changed it (one entry per group and knob
//!   kind; later changes keep the first original).
//! - `enabled`: v2 controllers the executor turned on in an existing
//!   group's `cgroup.subtree_control`; restore turns them off again.

use crate::error::{CgroupError, Result};
use crate::group::GroupPath;
use crate::knob::Knob;
use crate::layout::{Controller, FreezerBackend, Layout};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The state file's format version.
pub const STATE_VERSION: u32 = 1;

/// A group directory the executor created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatedEntry {
    /// The group.
    pub group: GroupPath,
    /// The hierarchy it was created in.
    pub controller: Controller,
    /// Its processes are its owner's: restore kills them (see the module
    /// docs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kill_tasks: bool,
}

/// The original value of a knob on a group the executor did not create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginalEntry {
    /// The group.
    pub group: GroupPath,
    /// The value before the executor's first change (native form).
    pub knob: Knob,
}

/// A v2 controller the executor enabled in a group's
/// `cgroup.subtree_control`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnabledEntry {
    /// The group whose `cgroup.subtree_control` was changed.
    pub group: GroupPath,
    /// The controller enabled.
    pub controller: Controller,
}

/// The content of a state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateRecord {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The cgroup root the changes were made under.
    pub root: PathBuf,
    /// Its layout.
    pub layout: Layout,
    /// The freezer driven.
    #[serde(default)]
    pub freezer: Option<FreezerBackend>,
    /// The process that wrote the file.
    pub pid: u32,
    /// Its start, clock ticks since boot (absent in files of older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    /// Groups created, in creation order.
    #[serde(default)]
    pub created: Vec<CreatedEntry>,
    /// Original values, in recording order.
    #[serde(default)]
    pub originals: Vec<OriginalEntry>,
    /// Controllers enabled in `cgroup.subtree_control`.
    #[serde(default)]
    pub enabled: Vec<EnabledEntry>,
}

impl StateRecord {
    /// An empty record for a hierarchy.
    pub(crate) fn new(root: &Path, layout: Layout, freezer: Option<FreezerBackend>) -> Self {
        StateRecord {
            version: STATE_VERSION,
            root: root.to_path_buf(),
            layout,
            freezer,
            pid: std::process::id(),
            pid_start: elfen_cmd::proc::start_ticks(std::process::id()),
            created: Vec::new(),
            originals: Vec::new(),
            enabled: Vec::new(),
        }
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.created.is_empty() && self.originals.is_empty() && self.enabled.is_empty()
    }

    /// Reads a state file; `None` if it does not exist. Refused, naming
    /// the reason, when its directory may be written by another user or
    /// the file is a link or another user's (see the module docs).
    pub fn load(path: &Path) -> Result<Option<StateRecord>> {
        let refuse = |reason: String| CgroupError::State {
            path: path.to_path_buf(),
            reason,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if dir.exists() {
                elfen_cmd::files::check_private_dir(dir).map_err(refuse)?;
            }
        }
        if elfen_cmd::files::check_owner(path)
            .map_err(refuse)?
            .is_none()
        {
            return Ok(None);
        }
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(CgroupError::State {
                    path: path.to_path_buf(),
                    reason: format!("cannot read: {e}"),
                });
            }
        };
        let rec: StateRecord = serde_json::from_str(&text).map_err(|e| CgroupError::State {
            path: path.to_path_buf(),
            reason: format!("not a valid state file: {e}"),
        })?;
        if rec.version != STATE_VERSION {
            return Err(CgroupError::State {
                path: path.to_path_buf(),
                reason: format!(
                    "version {} (this build reads version {STATE_VERSION})",
                    rec.version
                ),
            });
        }
        Ok(Some(rec))
    }
}

/// The in-memory record and where it is persisted.
#[derive(Debug)]
pub(crate) struct StateStore {
    pub(crate) path: Option<PathBuf>,
    pub(crate) rec: StateRecord,
}

impl StateStore {
    /// Persists the record: written atomically, or the file removed when
    /// nothing is recorded.
    pub(crate) fn persist(&mut self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let err = |reason: String| CgroupError::State {
            path: path.clone(),
            reason,
        };
        if self.rec.is_empty() {
            return match std::fs::remove_file(path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(err(format!("cannot remove: {e}"))),
            };
        }
        if self.rec.pid != std::process::id() {
            self.rec.pid = std::process::id();
            self.rec.pid_start = elfen_cmd::proc::start_ticks(self.rec.pid);
        }
        let mut json = serde_json::to_vec_pretty(&self.rec).expect("state serialises");
        json.push(b'\n');
        crate::fsio::write_atomic(path, &json).map_err(|e| err(format!("cannot write: {e}")))
    }

    /// Whether the executor created `group` in `ctl` for its owner's
    /// processes only.
    pub(crate) fn owned(&self, group: &GroupPath, ctl: Controller) -> bool {
        self.rec
            .created
            .iter()
            .any(|c| &c.group == group && c.controller == ctl && c.kill_tasks)
    }

    /// Whether the executor created `group` in `ctl`.
    pub(crate) fn created(&self, group: &GroupPath, ctl: Controller) -> bool {
        self.rec
            .created
            .iter()
            .any(|c| &c.group == group && c.controller == ctl)
    }
}
