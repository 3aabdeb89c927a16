//! How a batch group in the cpu controller yields as a whole, and where
//! its processes are listed from.

use super::GroupSource;
use elfen_cgroup::{Controller, GroupPath, Hierarchy, Knob};
use std::path::{Path, PathBuf};

/// How a batch group in the cpu controller yields **as a whole**. A
/// task's SCHED_IDLE ranks it only among the tasks of its own cpu group:
/// the group's entity competes with its siblings (the LC's group, or the
/// LC's tasks in the root) at its weight — 1024 shares, 100 on v2 — so a
/// batch group that is not idle itself runs as if at the LC's priority,
/// whatever its threads' class. `cpu.idle` = 1 makes the group's entity
/// idle among its siblings (v2, and v1 since Linux 5.15); without it the
/// group gets the minimum weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuYield {
    /// The cpu-controller groups written, outermost first: the top group
    /// the daemon creates (`elfen-daemon-<pid>`) when the batch group is
    /// its own, then the batch group.
    pub groups: Vec<GroupPath>,
    /// What each gets: `cpu.idle` = 1, or the minimum weight.
    pub knob: Knob,
}

impl CpuYield {
    /// In words, for `--check` and the start: which groups get what.
    pub fn describe(&self) -> String {
        let groups: Vec<&str> = self.groups.iter().map(GroupPath::as_str).collect();
        match self.knob {
            Knob::CpuIdle(_) => format!("cpu.idle = 1 on cpu group {}", groups.join(", ")),
            ref k => format!(
                "{k} (the minimum: cpu.idle is not offered here) on cpu group {}",
                groups.join(", ")
            ),
        }
    }
}

/// Where a group's processes are listed from, when no mode needs a
/// controller: one that changes nothing about them. The freezer (and a
/// cpuset the daemon does not confine) leave scheduling alone; a group of
/// the cpu controller does not (its entity competes at its weight), so it
/// comes last, and only for an existing group (reading its members changes
/// nothing) or a group whose mode makes it yield as a whole.
pub(super) fn membership(
    h: &Hierarchy,
    path: &GroupPath,
    source: &GroupSource,
    yields: bool,
) -> Result<Controller, String> {
    let existing = matches!(source, GroupSource::Existing);
    let pick = [Controller::Freezer, Controller::Cpuset, Controller::Cpu]
        .into_iter()
        .filter(|&c| existing || yields || c != Controller::Cpu)
        .find(|&c| {
            if existing {
                h.group_dir(c, path).is_ok_and(|d| d.is_dir())
            } else {
                h.supports(c)
            }
        });
    pick.ok_or_else(|| {
        if existing {
            format!("no group {path} in the freezer, cpuset or cpu hierarchy")
        } else {
            "no freezer or cpuset hierarchy to hold the command's group (a group of the cpu \
             controller would change how its processes are scheduled)"
                .to_string()
        }
    })
}

/// Whether group `path` exists as a group of the cpu controller: its
/// directory in the v1 `cpu` hierarchy, or (v2) a directory whose cpu
/// controller is enabled (it has `cpu.weight`).
pub(super) fn in_cpu_controller(h: &Hierarchy, path: &GroupPath) -> bool {
    let Ok(dir) = h.group_dir(Controller::Cpu, path) else {
        return false;
    };
    if h.is_v2(Controller::Cpu) {
        dir.join("cpu.weight").is_file()
    } else {
        dir.is_dir()
    }
}

/// Whether this process (the daemon, whose cpu group a command it starts
/// inherits) is in the root group of the cpu controller.
pub(super) fn in_root_cpu_group(h: &Hierarchy) -> bool {
    h.group_of(std::process::id(), Controller::Cpu)
        .map_or(true, |g| g.is_root())
}

/// Cpu groups above an existing batch group (up to the root's children)
/// that are not idle: the batch group yields only among their children.
fn busy_ancestors(h: &Hierarchy, path: &GroupPath) -> Vec<String> {
    let mut out = Vec::new();
    let mut p = path.parent();
    while let Some(a) = p.filter(|a| !a.is_root()) {
        let idle = h
            .group_dir(Controller::Cpu, &a)
            .ok()
            .and_then(|d| std::fs::read_to_string(d.join("cpu.idle")).ok())
            .is_some_and(|t| t.trim() == "1");
        if !idle {
            out.push(a.as_str().to_string());
        }
        p = a.parent();
    }
    out
}

/// Whether a group below `root` has `file` of the cpu controller (the root
/// group lacks some files its children have). Children with the controller
/// on (`cpu.weight` on v2, `cpu.shares` on v1) tell. Where none has it on —
/// no child, or a v2 root that has not turned the controller on for its
/// children (a systemd host whose units set no CPU property): the daemon
/// turns it on when it creates its group — the kernel's version does:
/// `cpu.idle` came with Linux 5.15.
pub(super) fn child_offers(root: &Path, file: &str) -> bool {
    let Ok(rd) = std::fs::read_dir(root) else {
        return false;
    };
    let on: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && (p.join("cpu.weight").exists() || p.join("cpu.shares").exists()))
        .collect();
    if on.is_empty() {
        return kernel_at_least(5, 15);
    }
    on.iter().any(|d| d.join(file).exists())
}

/// Whether the running kernel's release is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = rel.trim().split(|c: char| !c.is_ascii_digit());
    let num = |s: Option<&str>| s.and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
    (num(it.next()), num(it.next())) >= (major, minor)
}

/// How a yielding group in the cpu controller yields as a whole: the
/// groups written (the daemon's own top group first, where it competes
/// with the LC's) and the knob.
pub(super) fn cpu_yield(
    h: &Hierarchy,
    path: &GroupPath,
    existing: bool,
    delegated: bool,
    cpu_idle_offered: bool,
) -> CpuYield {
    let mut groups = Vec::new();
    if let (false, false, Some(top)) = (existing, delegated, path.lineage().first()) {
        // the daemon's own top group competes with the LC's (delegated,
        // its group is the unit's: CPUWeight=idle there is systemd's)
        if top != path {
            groups.push(top.clone());
        }
    }
    groups.push(path.clone());
    let knob = if cpu_idle_offered {
        Knob::CpuIdle(true)
    } else if h.is_v2(Controller::Cpu) {
        Knob::CpuWeight(1)
    } else {
        Knob::CpuShares(2)
    };
    CpuYield { groups, knob }
}

/// What the operator should know of a group's yield: by weight only
/// (no `cpu.idle`), or among the children of a cpu group that is not idle.
pub(super) fn cpu_yield_notes(
    b: &crate::config::BatchSection,
    h: &Hierarchy,
    y: &CpuYield,
    path: &GroupPath,
    existing: bool,
    cpu_idle_offered: bool,
    notes: &mut Vec<String>,
) {
    if !cpu_idle_offered {
        notes.push(format!(
            "batch {}: cpu.idle is not offered here (it came with Linux 5.15), so its cpu \
             group yields as a whole only by weight: {}; a busy batch still gets a small \
             share of a CPU the LC wants",
            b.name,
            y.describe()
        ));
    }
    if existing {
        let above = busy_ancestors(h, path);
        if !above.is_empty() {
            notes.push(format!(
                "batch {}: cpu group {} above {path} is not idle (cpu.idle = 0): the batch \
                 yields only among its children there, and competes with the LC at that \
                 group's weight; set cpu.idle = 1 on it, or move the batch",
                b.name,
                above.join(", ")
            ));
        }
    }
}
