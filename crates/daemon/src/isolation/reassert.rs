//! An operator's group's memory and I/O limits written again where its
//! owner wrote over them: systemd writes every limit of a unit or slice
//! again (`memory.high`, `memory.max`, `io.max`, `io.weight`, … — `max`
//! or its defaults where the unit sets none) at a `daemon-reload` or a
//! `set-property`, which would silently lift the daemon's. At each rescan
//! each limit the daemon applied is set again through the executor, which
//! writes only a file whose value differs (so a rescan where nothing
//! changed writes nothing), and what was written is said.
//!
//! Not here: the `[io]` budget's device, whose `io.max` the budget thread
//! rewrites every period anyway. A hard memory limit found lifted while
//! the group grew past it is applied at the group's use (a v2 write below
//! the use would reclaim or OOM-kill inside the group, v1 refuses it) and
//! lowered again at the following rescans ([`super::memory::relower`]).
//! A group whose directory is gone (its unit stopped) is left to the
//! rescan, which reports it.

use super::memory::round_up_mib;
use super::plan::GroupIso;
use elfen_cgroup::{Device, Executor, Group, Knob, KnobKind};

/// Writes `group`'s limits again where they changed; `applied_max` is the
/// hard memory limit in force (updated when it had to be raised). Returns
/// what to say (nothing when every value held).
pub fn reassert(
    ex: &mut Executor,
    name: &str,
    group: &Group,
    iso: &GroupIso,
    applied_max: &mut Option<u64>,
    budget_device: Option<Device>,
) -> Option<String> {
    // a group gone (its unit stopped) is the rescan's to report
    let present = group.controllers().iter().all(|&c| {
        ex.hierarchy()
            .group_dir(c, group.path())
            .is_ok_and(|d| d.is_dir())
    });
    if !present {
        return None;
    }
    let mut knobs: Vec<Knob> = Vec::new();
    if let Some(h) = iso.memory_high {
        knobs.push(Knob::MemoryHigh(Some(h)));
    }
    if let Some(m) = *applied_max {
        // lifted meanwhile and the group grew past it: at its use
        let lifted = ex
            .get(group, KnobKind::MemoryMax)
            .is_ok_and(|k| k != Knob::MemoryMax(Some(m)));
        let used = if lifted {
            ex.memory_current(group).unwrap_or(0)
        } else {
            0
        };
        let target = if used > m { round_up_mib(used) } else { m };
        *applied_max = Some(target);
        knobs.push(Knob::MemoryMax(Some(target)));
    }
    knobs.extend(
        iso.io_max
            .iter()
            .filter(|k| !matches!(k.kind(), KnobKind::IoMax(d) if Some(d) == budget_device))
            .cloned(),
    );
    knobs.extend(iso.io_weight.map(Knob::IoWeight));
    knobs.extend(iso.io_bfq_weight.map(Knob::IoBfqWeight));
    let mut written = Vec::new();
    let mut failed = Vec::new();
    for k in knobs {
        match ex.set(group, k.clone()) {
            Ok(r) if !r.is_noop() => written.push(k.to_string()),
            Ok(_) => {}
            Err(e) => failed.push(format!("{k}: {e}")),
        }
    }
    if written.is_empty() && failed.is_empty() {
        return None;
    }
    let mut line = format!("batch {name}: ");
    if !written.is_empty() {
        line += &format!(
            "{} changed under the daemon (by the group's owner: systemd writes a unit's memory \
             and I/O limits again at a daemon-reload): written again",
            written.join(", ")
        );
    }
    if !failed.is_empty() {
        if !written.is_empty() {
            line += "; ";
        }
        line += &format!("could not be written again: {}", failed.join("; "));
    }
    Some(line)
}
