//! The signal page: in use by a live daemon or left by a dead one, whose
//! it is, and who may attach cooperative batch threads.

use super::err;
use crate::config::{Config, Mode};
use crate::error::ConfigError;
use elfen_shm::{Page, PageSpec};

/// A page at the path refuses a second daemon while its creator lives; a
/// file there that is not the daemon's to replace (another user's, not a
/// signal page) is refused, saying whose it is and how to clear it; the
/// batch group, if named, becomes the batch segment's group.
pub(super) fn check_page(config: &Config, spec: &mut PageSpec) -> Result<Option<u32>, ConfigError> {
    let path = elfen_shm::page_path(&config.page.path.to_string_lossy());
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Err(err("page", "needs a directory"));
    };
    if !dir.is_dir() {
        return Err(err(
            "page",
            format!("directory {} does not exist", dir.display()),
        ));
    }
    if let Some(g) = &config.page.batch_group {
        *spec = spec.clone().with_batch_group(batch_gid(g)?);
    }
    let Some(holder) = Page::holder(&path) else {
        return Ok(None);
    };
    let clear = format!("remove it (rm {}) or choose another page", path.display());
    if !holder.trusted_by(elfen_shm::users::euid()) {
        return Err(err(
            "page",
            format!(
                "{} exists and is not the daemon's to use or replace ({}): another user holds \
                 the name; {clear}",
                path.display(),
                holder.describe()
            ),
        ));
    }
    if !holder.signal_page {
        return Err(err(
            "page",
            format!(
                "{} exists and is not a signal page (no ELFENSIG magic); {clear}",
                path.display()
            ),
        ));
    }
    // a creator pid reused by a program started after the page: gone
    let pid = holder.creator_pid;
    let written = (holder.created_unix_s > 0).then_some(holder.created_unix_s);
    if let elfen_cmd::proc::Holder::Running(p) = elfen_cmd::proc::holder(pid, None, written) {
        return Err(err(
            "page",
            format!(
                "{} is in use: its creator, {p}, is running (another daemon?); stop it \
                 (kill -TERM {pid}) or choose another page",
                path.display()
            ),
        ));
    }
    spec.replace = true;
    Ok(Some(holder.creator_pid))
}

/// `[page] batch_group` as a gid: a group name, or a gid.
fn batch_gid(g: &crate::config::GroupRef) -> Result<u32, ConfigError> {
    use crate::config::GroupRef;
    match g {
        GroupRef::Id(gid) => Ok(*gid),
        GroupRef::Name(n) => elfen_shm::users::group_id(n)
            .or_else(|| n.parse().ok())
            .ok_or_else(|| {
                err(
                    "page.batch_group",
                    format!("no group named {n:?} (see /etc/group; a gid also works)"),
                )
            }),
    }
}

/// Who may attach cooperative batch threads, said where it matters: a
/// cooperative group needs its batch programs to write the page's batch
/// lines, which only the daemon's user and the batch group may.
pub(super) fn page_access_notes(config: &Config, spec: &PageSpec, notes: &mut Vec<String>) {
    let coop: Vec<&str> = config
        .batch
        .iter()
        .filter(|b| b.mode == Mode::Cooperative)
        .map(|b| b.name.as_str())
        .collect();
    if coop.is_empty() {
        return;
    }
    let me = elfen_shm::users::describe_user(elfen_shm::users::euid());
    match spec.batch_gid {
        Some(g) => notes.push(format!(
            "page: batch threads of {me} and of {} may attach (cooperative {})",
            elfen_shm::users::describe_group(g),
            coop.join(", ")
        )),
        None => {
            // other users' processes already in a cooperative group's cgroup
            let others = cooperative_uids(config);
            notes.push(format!(
                "page: no [page] batch_group: only processes of {me} may attach cooperative batch \
                 threads (cooperative {}){}; name a batch_group for batch programs of other users",
                coop.join(", "),
                if others.is_empty() {
                    String::new()
                } else {
                    format!(
                        " — processes of {} in their groups now cannot",
                        others
                            .iter()
                            .map(|&u| elfen_shm::users::describe_user(u))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ));
        }
    }
}

/// The uids (other than this process's) of processes now in the existing
/// cgroups of cooperative batch groups (best effort: any controller's
/// `cgroup.procs` under the cgroup root).
fn cooperative_uids(config: &Config) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let me = elfen_shm::users::euid();
    let mut uids = Vec::new();
    for b in config.batch.iter().filter(|b| b.mode == Mode::Cooperative) {
        let Some(g) = &b.cgroup else { continue };
        let rel = g.trim_matches('/');
        let dirs = std::fs::read_dir(&config.cgroup_root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|c| c.path().join(rel))
            .chain([config.cgroup_root.join(rel)]);
        for d in dirs {
            let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) else {
                continue;
            };
            for pid in procs.split_whitespace() {
                if let Ok(m) = std::fs::metadata(format!("/proc/{pid}")) {
                    if m.uid() != me && !uids.contains(&m.uid()) {
                        uids.push(m.uid());
                    }
                }
            }
        }
    }
    uids
}
