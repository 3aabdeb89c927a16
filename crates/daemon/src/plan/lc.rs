//! The LC service named by pid or command name: checked, and whose
//! processes its name adopts.

use super::err;
use crate::config::Config;
use crate::error::ConfigError;
use crate::lc::{LcOwner, LcTarget};
use std::collections::BTreeSet;

/// What the plan says of the processes an LC process starts.
const DESCENDANTS: &str = "and every process they start, whatever its user";

pub(super) fn lc_target(
    config: &Config,
    notes: &mut Vec<String>,
) -> Result<(LcTarget, (LcOwner, String)), ConfigError> {
    let lc = &config.lc;
    let describe = elfen_cmd::proc::describe_user;
    let user = match &lc.user {
        Some(u) => Some(elfen_cmd::proc::user_id(u.trim()).ok_or_else(|| {
            err(
                "lc.user",
                format!("no user named {u:?} (the password database), and not a uid"),
            )
        })?),
        None => None,
    };
    if let Some(pid) = lc.pid {
        elfen_bpf::proc::check_process(pid).map_err(|e| err("lc.pid", e.to_string()))?;
        if pid == std::process::id() {
            return Err(err("lc.pid", "that is the daemon itself"));
        }
        let uids = elfen_cmd::proc::uids(pid)
            .ok_or_else(|| err("lc.pid", format!("cannot read /proc/{pid}/status")))?;
        let owner = match user {
            Some(u) if !crate::lc::owned_by(uids, u) => {
                return Err(err(
                    "lc.pid",
                    format!(
                        "pid {pid} runs as {}, not lc.user {}",
                        describe(uids.0),
                        describe(u)
                    ),
                ));
            }
            Some(u) => (
                LcOwner::Uid(u),
                format!(
                    "restarts of {} only ([lc] user); {DESCENDANTS}",
                    describe(u)
                ),
            ),
            None => (
                LcOwner::Uid(uids.0),
                format!(
                    "restarts of {} only (its user); {DESCENDANTS}",
                    describe(uids.0)
                ),
            ),
        };
        return Ok((LcTarget::Pid(pid), owner));
    }
    let name = lc.comm.clone().expect("checked: one selector");
    let running = crate::lc::find_by_name(&name);
    if running.is_empty() {
        notes.push(format!(
            "no process named {name:?} runs now: the daemon waits for it"
        ));
    }
    let owner = comm_owner(&name, user, &running, notes);
    Ok((LcTarget::Comm(name), owner))
}

/// Whose processes named `name` are the LC: `user` (`[lc] user`), else the
/// owner of the oldest of `running`, else the first found; same-named
/// processes of another user that run now are noted, unless an owner's
/// process started them (they are the service).
fn comm_owner(
    name: &str,
    user: Option<u32>,
    running: &[u32],
    notes: &mut Vec<String>,
) -> (LcOwner, String) {
    let describe = elfen_cmd::proc::describe_user;
    let owner = match (user, crate::lc::oldest_owner(running)) {
        (Some(u), _) => (
            LcOwner::Uid(u),
            format!(
                "processes of {} only ([lc] user), {DESCENDANTS}",
                describe(u)
            ),
        ),
        (None, Some((u, pid))) => (
            LcOwner::Uid(u),
            format!(
                "processes of {} only (the owner of the oldest one now, pid {pid}; set [lc] user \
                 to choose), {DESCENDANTS}",
                describe(u)
            ),
        ),
        (None, None) => (
            LcOwner::FirstFound,
            format!(
                "processes of one user only: the owner of the first found (set [lc] user to \
                 choose), {DESCENDANTS}"
            ),
        ),
    };
    if let LcOwner::Uid(u) = owner.0 {
        let with_uids: Vec<(u32, (u32, u32))> = running
            .iter()
            .filter_map(|&p| Some((p, elfen_cmd::proc::uids(p)?)))
            .collect();
        let owners: BTreeSet<u32> = with_uids
            .iter()
            .filter(|&&(_, uids)| crate::lc::owned_by(uids, u))
            .map(|&(p, _)| p)
            .collect();
        let others: Vec<String> = with_uids
            .iter()
            .filter(|&&(_, uids)| !crate::lc::owned_by(uids, u))
            .filter(|&&(p, _)| crate::lc::procs::ancestor_of(p, &owners).is_none())
            .map(|(p, uids)| format!("pid {p} ({})", describe(uids.0)))
            .collect();
        if !others.is_empty() {
            notes.push(format!(
                "processes named {name:?} of another user are not adopted: {}",
                others.join(", ")
            ));
        }
    }
    owner
}
