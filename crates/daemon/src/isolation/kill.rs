//! Killing a whole batch group: every process in the group and in the
//! groups below it, never one outside, never the LC's, never the daemon.
//!
//! The memory watermark's killer uses this small function of its own; the
//! daemon's "stop the whole group" of batch.rs (`cgroup.kill` on v2,
//! freeze + kill on v1) is the same job and one of the two is to go.
//!
//! How: freeze the group where it is in a freezer (a frozen process cannot
//! fork a child the kill would miss), list the processes of the group's
//! directory and of every directory below it, and for each one open a
//! pidfd, check through `/proc/<pid>/cgroup` that *that* process is in the
//! group (a pid reused since the listing names another process, which the
//! pidfd then refers to and the check refuses), and send SIGKILL through
//! the pidfd; then thaw (a v1-frozen process dies when it is thawed).
//! Rounds repeat while processes remain (at most 10).

use crate::lc::LcTarget;
use elfen_cgroup::{Controller, Executor, Group, GroupPath, Knob, KnobKind};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a kill did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KillOutcome {
    /// Processes sent SIGKILL.
    pub killed: Vec<u32>,
    /// Processes of the group that were spared: the LC's or the daemon's
    /// own (said, never killed).
    pub spared: Vec<u32>,
    /// Processes still in the group when it gave up.
    pub left: Vec<u32>,
    /// Rounds of listing and killing.
    pub rounds: u32,
}

/// Whether `pid` belongs to the LC service `lc`.
pub fn is_lc(lc: &LcTarget, pid: u32) -> bool {
    match lc {
        LcTarget::Pid(p) => *p == pid,
        LcTarget::Comm(name) => crate::lc::matches_name(pid, name),
        LcTarget::Cgroup(dir) => std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .any(|t| t.parse() == Ok(pid)),
    }
}

/// Whether `pid` has exited: gone, or a zombie waiting to be reaped (a
/// zombie is still listed in a v1 group until its parent reaps it; its
/// memory is freed).
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next())
            .is_some_and(|c| c == 'Z' || c == 'X')
    })
}

/// Directories of `dir` and every group below it.
fn tree(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                tree(&e.path(), out);
            }
        }
    }
}

fn pidfd_open(pid: u32) -> Option<i32> {
    // SAFETY: a plain syscall; the fd returned is owned by the caller.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    (fd >= 0).then_some(fd as i32)
}

fn pidfd_kill(fd: i32) -> bool {
    // SAFETY: fd is a pidfd we own; no siginfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd,
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    r == 0
}

/// Whether process `pid` is, per `/proc/<pid>/cgroup`, in `group` or below
/// it in `ctl`'s hierarchy.
fn member(ex: &Executor, pid: u32, ctl: Controller, group: &GroupPath) -> bool {
    ex.hierarchy()
        .group_of(pid, ctl)
        .is_ok_and(|g| g.is_within(group))
}

/// Kills every process of `group` and of the groups below it, sparing
/// those `lc` names and this process. See the module docs.
pub fn kill_group(executor: &Mutex<Executor>, group: &Group, lc: &LcTarget) -> KillOutcome {
    let mut out = KillOutcome::default();
    let me = std::process::id();
    let ctl = group.controllers()[0];
    let frozen_before = {
        let mut ex = executor.lock().unwrap_or_else(|p| p.into_inner());
        if group.has(Controller::Freezer) {
            let was = matches!(ex.get(group, KnobKind::Frozen), Ok(Knob::Frozen(true)));
            let _ = ex.freeze(group, Duration::from_millis(100));
            Some(was)
        } else {
            None
        }
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    for round in 1..=10 {
        out.rounds = round;
        let ex = executor.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(dir) = ex.hierarchy().group_dir(ctl, group.path()) else {
            break;
        };
        let mut dirs = Vec::new();
        tree(&dir, &mut dirs);
        let mut pids: Vec<u32> = dirs
            .iter()
            .flat_map(|d| {
                std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|t| t.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids.retain(|&p| !out.spared.contains(&p) && !exited(p));
        let mut sent = 0;
        for pid in pids {
            if pid == me || is_lc(lc, pid) {
                out.spared.push(pid);
                continue;
            }
            let Some(fd) = pidfd_open(pid) else { continue };
            if member(&ex, pid, ctl, group.path()) && pidfd_kill(fd) {
                if !out.killed.contains(&pid) {
                    out.killed.push(pid);
                }
                sent += 1;
            }
            // SAFETY: our fd.
            unsafe { libc::close(fd) };
        }
        drop(ex);
        if round == 1 {
            if let Some(was) = frozen_before {
                // v1: a frozen process dies when thawed; v2's freezer lets
                // it die at once. Frozen again below if it was before.
                let mut ex = executor.lock().unwrap_or_else(|p| p.into_inner());
                let _ = ex.thaw(group);
                if was {
                    let _ = ex.set(group, Knob::Frozen(true));
                }
            }
        }
        if sent == 0 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // done when the killed processes are gone (their memory freed)
    while Instant::now() < deadline && !out.killed.iter().all(|&p| exited(p)) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let ex = executor.lock().unwrap_or_else(|p| p.into_inner());
    out.left = ex
        .procs(group)
        .unwrap_or_default()
        .into_iter()
        .filter(|&p| !out.spared.contains(&p) && !exited(p))
        .collect();
    out
}
