//! Killing a whole batch group for the memory watermark: every process in
//! the group and in the groups below it, never one outside, never the LC's,
//! never the daemon. The mechanism is the executor's, the one the daemon's
//! "stop the whole group" uses too ([`elfen_cgroup::KillTarget`]: freeze
//! where the group is in a freezer, SIGKILL through pidfds checked to be
//! members, thaw, rounds until empty); this module adds the rule of what is
//! spared.

use crate::lc::LcTarget;
use elfen_cgroup::{Executor, Group, KILL_TIMEOUT};
use serde::Serialize;
use std::sync::Mutex;

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
}

/// Whether `pid` belongs to the LC service `lc`.
pub fn is_lc(lc: &LcTarget, pid: u32) -> bool {
    match lc {
        LcTarget::Pid(p) => *p == pid,
        LcTarget::Comm(name) => crate::lc::matches_name(pid, name),
        LcTarget::Groups(t) => t.pids_now().contains(&pid),
    }
}

/// Kills every process of `group` and of the groups below it, sparing
/// those `lc` names and this process. The executor is held only while the
/// group's directories are looked up.
pub fn kill_group(executor: &Mutex<Executor>, group: &Group, lc: &LcTarget) -> KillOutcome {
    let me = std::process::id();
    let target = {
        let ex = executor.lock().unwrap_or_else(|p| p.into_inner());
        match ex.kill_target(group) {
            Ok(t) => t,
            Err(_) => return KillOutcome::default(),
        }
    };
    let r = target.kill(KILL_TIMEOUT, &|p| p == me || is_lc(lc, p));
    KillOutcome {
        killed: r.pids,
        spared: r.spared,
        left: r.survivors.iter().map(|s| s.pid).collect(),
    }
}
