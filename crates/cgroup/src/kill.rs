//! Killing every process of a group and of the groups below it — one
//! mechanism for two callers:
//!
//! - a group the executor created for its owner's commands
//!   ([`Executor::create_owned_group`], [`Executor::kill_tasks`]): a command
//!   that forks (a shell wrapper, `make -j`, a daemonising grandchild) leaves
//!   processes the owner never saw, and they must not outlive the group —
//!   moved to the parent they would run unconfined;
//! - any batch group its owner decides to kill (a memory watermark:
//!   [`Executor::kill_target`] then [`KillTarget::kill`]), sparing the
//!   processes a rule names (the LC's, the owner's own): then the kernel's
//!   `cgroup.kill`, which spares nothing, is not used.
//!
//! - **v2**: `cgroup.kill` (the kernel kills every process of the group and
//!   its descendants, forks in flight included).
//! - **v1**: with the group in the freezer, freeze it (no process can fork
//!   meanwhile), SIGKILL every process listed in `cgroup.procs` of the group
//!   and the groups below it, thaw (the signal is delivered as they leave
//!   the refrigerator); without a freezer, SIGKILL round after round.
//!
//! Each process is signalled through a pidfd opened while it was listed and
//! checked to be listed still, so a pid reused meanwhile by a process
//! outside the group is never signalled. Rounds repeat until the groups are
//! empty or the timeout passes; what survives is reported with its state
//! (`D`: in uninterruptible sleep).

use crate::error::{CgroupError, Result};
use crate::executor::Executor;
use crate::fsio;
use crate::group::{Group, GroupPath};
use crate::knob::{Device, Knob, KnobKind};
use crate::layout::Controller;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a restore waits for the processes of an owned group to die.
pub const KILL_TIMEOUT: Duration = Duration::from_secs(2);

/// A process that outlived a [`Executor::kill_tasks`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Survivor {
    /// Its pid.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// Its state letter in `/proc/<pid>/stat` (`D`: uninterruptible sleep).
    pub state: String,
}

impl std::fmt::Display for Survivor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({}, state {})", self.pid, self.comm, self.state)
    }
}

/// What killing a group's processes did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KillReport {
    /// Processes signalled (distinct pids).
    pub killed: usize,
    /// Their pids (all of them: `cgroup.kill` signals what it finds).
    pub pids: Vec<u32>,
    /// Processes of the group the sparing rule kept alive.
    pub spared: Vec<u32>,
    /// How: `cgroup.kill`, `freezer` (freeze, SIGKILL, thaw) or `signals`.
    pub method: &'static str,
    /// Processes still in the group when the time ran out (the spared
    /// ones aside).
    pub survivors: Vec<Survivor>,
}

impl KillReport {
    /// Whether the group is empty.
    pub fn is_clean(&self) -> bool {
        self.survivors.is_empty()
    }
}

impl std::fmt::Display for KillReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} processes killed ({})", self.killed, self.method)?;
        if !self.survivors.is_empty() {
            let s: Vec<String> = self.survivors.iter().map(Survivor::to_string).collect();
            write!(f, "; {} survived SIGKILL: {}", s.len(), s.join(", "))?;
        }
        Ok(())
    }
}

/// Where a group's processes are and how to stop them: paths only, so the
/// kill runs without holding the executor.
#[derive(Debug, Clone)]
pub struct KillTarget {
    /// The group's directories (one per distinct hierarchy).
    dirs: Vec<PathBuf>,
    /// Its freezer directory and whether it is v2's `cgroup.freeze`.
    freezer: Option<(PathBuf, bool)>,
    /// Its v2 `cgroup.kill`, where the kernel offers one.
    kill_file: Option<PathBuf>,
}

impl KillTarget {
    /// Live processes in the groups and every group below them (a zombie,
    /// listed in a v1 group until its parent reaps it, has exited).
    fn procs(&self) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        for d in &self.dirs {
            let mut all = Vec::new();
            crate::executor::post_order(d, &mut all);
            for g in all {
                let f = g.join("cgroup.procs");
                if let Ok(text) = fsio::read(&f) {
                    out.extend(
                        text.split_whitespace()
                            .filter_map(|w| w.parse::<u32>().ok())
                            .filter(|&p| !exited(p)),
                    );
                }
            }
        }
        out
    }

    fn set_frozen(&self, frozen: bool) -> bool {
        match &self.freezer {
            Some((d, false)) => fsio::write(
                &d.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
            )
            .is_ok(),
            Some((d, true)) => {
                fsio::write(&d.join("cgroup.freeze"), if frozen { "1" } else { "0" }).is_ok()
            }
            None => false,
        }
    }

    /// Waits (at most 100 ms) until the freezer says frozen.
    fn wait_frozen(&self) {
        let Some((d, v2)) = &self.freezer else { return };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(100) {
            let done = if *v2 {
                fsio::read(&d.join("cgroup.events"))
                    .is_ok_and(|t| t.lines().any(|l| l.trim() == "frozen 1"))
            } else {
                fsio::read_trim(&d.join("freezer.state")).is_ok_and(|s| s == "FROZEN")
            };
            if done {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// SIGKILL to each of `pids` that is still in the group by the time a
/// pidfd refers to it; returns how many were signalled.
fn kill_listed(t: &KillTarget, pids: &BTreeSet<u32>) -> usize {
    let mut fds = Vec::new();
    for &p in pids {
        // SAFETY: pidfd_open takes a pid and flags; it returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p as libc::pid_t, 0) };
        if fd >= 0 {
            fds.push((p, Some(fd as libc::c_int)));
        } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            fds.push((p, None));
        }
    }
    let still = t.procs();
    let mut n = 0;
    for (p, fd) in fds {
        if still.contains(&p) {
            let r = match fd {
                // SAFETY: a pidfd we own; no siginfo.
                Some(fd) => unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd,
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                },
                // SAFETY: plain kill(2) (a kernel without pidfds).
                None => i64::from(unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) }),
            };
            n += usize::from(r == 0);
        }
        if let Some(fd) = fd {
            // SAFETY: closing the pidfd opened above.
            unsafe { libc::close(fd) };
        }
    }
    n
}

/// Whether `pid` has exited: gone, or a zombie waiting to be reaped.
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next())
            .is_some_and(|c| c == 'Z' || c == 'X')
    })
}

fn survivor(pid: u32) -> Survivor {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next())
        .unwrap_or("?")
        .to_string();
    Survivor {
        pid,
        comm: elfen_cmd::proc::comm(pid).unwrap_or_else(|| "?".into()),
        state,
    }
}

impl KillTarget {
    /// Kills every process of the group and the groups below it but those
    /// `spare` names, waiting at most `timeout`; what survives is in the
    /// report.
    pub fn kill(&self, timeout: Duration, spare: &dyn Fn(u32) -> bool) -> KillReport {
        let t0 = Instant::now();
        let mut signalled = BTreeSet::new();
        let mut spared = BTreeSet::new();
        let members = |spared: &mut BTreeSet<u32>| {
            let mut pids = self.procs();
            pids.retain(|&p| {
                let keep = spare(p);
                if keep {
                    spared.insert(p);
                }
                !keep
            });
            pids
        };
        let first = members(&mut spared);
        // cgroup.kill spares nothing: only where nothing is to be spared
        let kill_file = self.kill_file.as_ref().filter(|_| spared.is_empty());
        let method = if kill_file.is_some() {
            "cgroup.kill"
        } else if self.freezer.is_some() {
            "freezer"
        } else {
            "signals"
        };
        let mut report = KillReport {
            method,
            ..KillReport::default()
        };
        let mut pids = first;
        loop {
            if pids.is_empty() {
                break;
            }
            if t0.elapsed() >= timeout {
                report.survivors = pids.into_iter().map(survivor).collect();
                break;
            }
            let killed_by_kernel = kill_file.is_some_and(|f| fsio::write(f, "1").is_ok());
            if killed_by_kernel {
                signalled.extend(pids);
            } else {
                let frozen = self.set_frozen(true);
                if frozen {
                    self.wait_frozen();
                }
                let now = members(&mut spared);
                kill_listed(self, &now);
                signalled.extend(now);
                if frozen {
                    self.set_frozen(false);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
            pids = members(&mut spared);
        }
        report.killed = signalled.len();
        report.pids = signalled.into_iter().collect();
        report.spared = spared.into_iter().collect();
        report
    }
}

impl Executor {
    /// Creates group `path` like [`Executor::create_group`], recorded as
    /// holding only processes its owner starts (a daemon's batch
    /// commands): [`Executor::kill_tasks`] may kill them, and a restore —
    /// also the recovery after a crash — kills what is left in it instead
    /// of moving it to the parent.
    pub fn create_owned_group(&mut self, path: &str, controllers: &[Controller]) -> Result<Group> {
        self.create_group_with(path, controllers, true)
    }

    /// Kills every process in `group` and the groups below it (see the
    /// module docs), waiting at most `timeout`; what survives is in the
    /// report. Only a group made with [`Executor::create_owned_group`]:
    /// any other group's processes are someone else's, and refused.
    pub fn kill_tasks(&self, group: &Group, timeout: Duration) -> Result<KillReport> {
        for &ctl in &group.controllers {
            if !self.state.owned(&group.path, ctl) {
                return Err(CgroupError::group(
                    self.hier.group_dir(ctl, &group.path)?,
                    "not created for its owner's commands by this executor: its processes are \
                     left alone",
                ));
            }
        }
        self.kill_owned(&group.path, timeout)
    }

    /// Kills the processes of owned group `path` in every hierarchy it was
    /// created in.
    pub(crate) fn kill_owned(&self, path: &GroupPath, timeout: Duration) -> Result<KillReport> {
        let ctls: Vec<Controller> = self
            .state
            .rec
            .created
            .iter()
            .filter(|c| &c.group == path && c.kill_tasks)
            .map(|c| c.controller)
            .collect();
        let mut t = KillTarget {
            dirs: Vec::new(),
            freezer: None,
            kill_file: None,
        };
        for ctl in ctls {
            let d = self.hier.group_dir(ctl, path)?;
            // a test root's cgroup.procs lists made-up pids: never signalled
            if !d.is_dir() || t.dirs.contains(&d) || !fsio::is_cgroupfs(&d) {
                continue;
            }
            let v2 = self.hier.is_v2(ctl);
            if v2 && d.join("cgroup.kill").exists() {
                t.kill_file = Some(d.join("cgroup.kill"));
            }
            if ctl == Controller::Freezer {
                t.freezer = Some((d.clone(), v2));
            }
            t.dirs.push(d);
        }
        Ok(t.kill(timeout, &|_| false))
    }

    /// Where `group`'s processes are, in every hierarchy it is in, to kill
    /// them with [`KillTarget::kill`] (without holding the executor). Any
    /// group: the caller decides that its processes may die.
    pub fn kill_target(&self, group: &Group) -> Result<KillTarget> {
        let mut t = KillTarget {
            dirs: Vec::new(),
            freezer: None,
            kill_file: None,
        };
        for &ctl in &group.controllers {
            let d = self.hier.group_dir(ctl, &group.path)?;
            // a test root's cgroup.procs lists made-up pids: never signalled
            if !d.is_dir() || t.dirs.contains(&d) || !fsio::is_cgroupfs(&d) {
                continue;
            }
            let v2 = self.hier.is_v2(ctl);
            if v2 && d.join("cgroup.kill").exists() {
                t.kill_file = Some(d.join("cgroup.kill"));
            }
            if ctl == Controller::Freezer {
                t.freezer = Some((d.clone(), v2));
            }
            t.dirs.push(d);
        }
        Ok(t)
    }
}

/// Lifts every I/O limit of `dir` and of the groups below it, for each
/// device its limit files list ([`Knob::io_unlimited_writes`]). Best effort,
/// for a group about to be removed: what cannot be written is left (the
/// kill that follows reports any process it could not stop).
pub(crate) fn lift_io_limits(dir: &Path, v2: bool) {
    let mut devices: Vec<Device> = Vec::new();
    for f in KnobKind::IoMax(Device { major: 0, minor: 0 }).files(v2) {
        let Ok(content) = fsio::read(&dir.join(f)) else {
            continue;
        };
        for d in content
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        {
            if !devices.contains(&d) {
                devices.push(d);
            }
        }
    }
    for device in devices {
        for (file, value) in Knob::io_unlimited_writes(device, v2) {
            let _ = fsio::write(&dir.join(file), &value);
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                lift_io_limits(&e.path(), v2);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lift_io_limits;

    #[test]
    fn io_limits_are_lifted_in_the_group_and_below_it() {
        let d = tempfile::tempdir().unwrap();
        let child = d.path().join("child");
        std::fs::create_dir(&child).unwrap();
        for dir in [d.path(), child.as_path()] {
            std::fs::write(dir.join("blkio.throttle.read_bps_device"), "8:0 1048576\n").unwrap();
            std::fs::write(
                dir.join("io.max"),
                "8:0 rbps=4096 wbps=max riops=max wiops=max\n",
            )
            .unwrap();
        }
        lift_io_limits(d.path(), false);
        for dir in [d.path(), child.as_path()] {
            let v1 = std::fs::read_to_string(dir.join("blkio.throttle.read_bps_device")).unwrap();
            assert_eq!(v1, "8:0 0");
        }
        lift_io_limits(d.path(), true);
        for dir in [d.path(), child.as_path()] {
            let v2 = std::fs::read_to_string(dir.join("io.max")).unwrap();
            assert_eq!(v2, "8:0 rbps=max wbps=max riops=max wiops=max");
        }
    }
}
