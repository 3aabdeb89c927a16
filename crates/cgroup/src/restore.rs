//! Undoing: [`Executor::restore_all`] (clean shutdown) and, through it,
//! [`Executor::recover`] (start after a crash).
//!
//! Order, each step best-effort (a failure is reported and the entry kept
//! in the state file for the next attempt; the other steps still run):
//!
//! 1. **thaw**: recorded freezer originals first, so stopped tasks run
//!    again as soon as possible;
//! 2. **remove created groups**, newest first (children before parents):
//!    kill what is left in a group made for its owner's commands
//!    ([`Executor::create_owned_group`]), thaw, move other tasks to the
//!    parent, remove child groups, `rmdir`;
//! 3. **put back original values**: cpusets together in hierarchy order
//!    (after step 2, so a created child no longer holds CPUs a parent
//!    must give back), then the others in recording order; a value
//!    already in place is not rewritten; a group that no longer exists is
//!    skipped;
//! 4. **turn off v2 controllers** the executor enabled in an existing
//!    group's `cgroup.subtree_control`, newest first (`EBUSY`: other
//!    groups below use it, left on and reported).
//!
//! Restoring twice is harmless: restored entries leave the record, and
//! values already in place are skipped.
//!
//! One value cannot always be put back: a v2 group's empty `cpuset.cpus`
//! (it uses its parent's CPUs) while the group has tasks — the kernel
//! refuses to empty a populated cpuset (`ENOSPC`). Its tasks get their
//! CPUs back all the same: the parent's effective CPUs are written instead,
//! and the report says so ([`RestoreAction::RestoredAs`]).

use crate::error::CgroupError;
use crate::executor::{Executor, errno};
use crate::fsio;
use crate::group::GroupPath;
use crate::knob::{Knob, KnobKind};
use crate::layout::Controller;
use crate::state::{CreatedEntry, EnabledEntry, OriginalEntry};
use serde::Serialize;

/// One thing a restore did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreAction {
    /// An original value is back (`written`: false if it already was).
    Restored {
        /// The group.
        group: GroupPath,
        /// The original value.
        knob: Knob,
        /// Whether a file was written.
        written: bool,
    },
    /// A created group was removed.
    Removed {
        /// The group.
        group: GroupPath,
        /// Its hierarchy.
        controller: Controller,
        /// Processes moved to the parent.
        tasks_moved: usize,
        /// Processes killed (a group made for its owner's commands: what
        /// they left behind).
        tasks_killed: usize,
    },
    /// An original value the kernel refuses to write back, replaced by
    /// its nearest equivalent (a populated v2 group's empty `cpuset.cpus`:
    /// the parent's CPUs, written explicitly).
    RestoredAs {
        /// The group.
        group: GroupPath,
        /// The original value.
        original: Knob,
        /// The value written instead.
        knob: Knob,
        /// Why.
        reason: String,
    },
    /// A v2 controller was turned off again in `cgroup.subtree_control`.
    Disabled {
        /// The group.
        group: GroupPath,
        /// The controller.
        controller: Controller,
    },
    /// Nothing to do for an entry (group gone, controller still in use).
    Skipped {
        /// The group.
        group: GroupPath,
        /// Why.
        reason: String,
    },
}

impl std::fmt::Display for RestoreAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RestoreAction::Restored {
                group,
                knob,
                written,
            } => write!(
                f,
                "restored {knob} on {group}{}",
                if *written { "" } else { " (already in place)" }
            ),
            RestoreAction::RestoredAs {
                group,
                original,
                knob,
                reason,
            } => write!(f, "restored {original} on {group} as {knob}: {reason}"),
            RestoreAction::Removed {
                group,
                controller,
                tasks_moved,
                tasks_killed: 0,
            } => write!(
                f,
                "removed {controller} group {group} ({tasks_moved} processes moved to its parent)"
            ),
            RestoreAction::Removed {
                group,
                controller,
                tasks_moved,
                tasks_killed,
            } => write!(
                f,
                "removed {controller} group {group} ({tasks_killed} processes left in it killed, \
                 {tasks_moved} moved to its parent)"
            ),
            RestoreAction::Disabled { group, controller } => {
                write!(
                    f,
                    "disabled {} in {group}'s cgroup.subtree_control",
                    controller.v2_name().unwrap_or("?")
                )
            }
            RestoreAction::Skipped { group, reason } => write!(f, "skipped {group}: {reason}"),
        }
    }
}

/// What a restore or a recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// What was done, in order.
    pub actions: Vec<RestoreAction>,
    /// What failed (each entry stays recorded for the next attempt).
    pub failures: Vec<String>,
}

impl RestoreReport {
    /// Whether everything recorded was undone (or had nothing to undo).
    pub fn is_clean(&self) -> bool {
        self.failures.is_empty()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty() && self.failures.is_empty()
    }
}

impl std::fmt::Display for RestoreReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for a in &self.actions {
            writeln!(f, "{a}")?;
        }
        for e in &self.failures {
            writeln!(f, "FAILED: {e}")?;
        }
        Ok(())
    }
}

impl Executor {
    /// Undoes everything this executor recorded (see the module docs for
    /// the order) and reports what it did. Entries that could not be
    /// undone stay recorded (and in the state file) for another attempt.
    pub fn restore_all(&mut self) -> RestoreReport {
        let mut report = RestoreReport::default();
        let rec = self.state.rec.clone();
        let (frozen, others): (Vec<OriginalEntry>, Vec<OriginalEntry>) = rec
            .originals
            .into_iter()
            .partition(|o| o.knob.kind() == KnobKind::Frozen);
        let mut kept_originals = Vec::new();
        for o in frozen {
            if !self.restore_one(&o, &mut report) {
                kept_originals.push(o);
            }
        }
        let mut kept_created = Vec::new();
        // v2 controllers share one directory: it is removed once.
        let mut done_dirs = Vec::new();
        for c in rec.created.into_iter().rev() {
            if let Ok(d) = self.hier.group_dir(c.controller, &c.group) {
                if done_dirs.contains(&d) {
                    continue;
                }
                done_dirs.push(d);
            }
            if !self.restore_created(&c, &mut report) {
                kept_created.push(c);
            }
        }
        kept_created.reverse();
        let (cpusets, rest): (Vec<OriginalEntry>, Vec<OriginalEntry>) = others
            .into_iter()
            .partition(|o| matches!(o.knob.kind(), KnobKind::CpusetCpus | KnobKind::CpusetMems));
        kept_originals.extend(self.restore_cpusets(cpusets, &mut report));
        // cpu.idle before the weight: an idle group's weight cannot be
        // written (and an originally idle group's weight is not restored).
        let (idle, rest): (Vec<OriginalEntry>, Vec<OriginalEntry>) = rest
            .into_iter()
            .partition(|o| o.knob.kind() == KnobKind::CpuIdle);
        for o in idle.into_iter().chain(rest) {
            if !self.restore_one(&o, &mut report) {
                kept_originals.push(o);
            }
        }
        let mut kept_enabled = Vec::new();
        let mut groups: Vec<GroupPath> = Vec::new();
        for e in rec.enabled.iter().rev() {
            if !groups.contains(&e.group) {
                groups.push(e.group.clone());
            }
        }
        for g in groups {
            let ctls: Vec<Controller> = rec
                .enabled
                .iter()
                .rev()
                .filter(|e| e.group == g)
                .map(|e| e.controller)
                .collect();
            for ctl in self.restore_enabled(&g, &ctls, &mut report) {
                kept_enabled.push(EnabledEntry {
                    group: g.clone(),
                    controller: ctl,
                });
            }
        }
        self.state.rec.originals = kept_originals;
        self.state.rec.created = kept_created;
        self.state.rec.enabled = kept_enabled;
        if let Err(e) = self.state.persist() {
            report.failures.push(e.to_string());
        }
        report
    }

    /// Puts one original back; false if it failed (keep it).
    fn restore_one(&mut self, o: &OriginalEntry, report: &mut RestoreReport) -> bool {
        match self.apply_paths(&[(o.group.clone(), o.knob.clone())], false) {
            Ok(r) => {
                report.actions.push(RestoreAction::Restored {
                    group: o.group.clone(),
                    knob: o.knob.clone(),
                    written: !r.is_noop(),
                });
                true
            }
            Err(CgroupError::Group { .. }) => {
                report.actions.push(RestoreAction::Skipped {
                    group: o.group.clone(),
                    reason: format!("group is gone; {} not restored", o.knob),
                });
                true
            }
            Err(e) if e.is_not_found() => {
                report.actions.push(RestoreAction::Skipped {
                    group: o.group.clone(),
                    reason: format!("group is gone; {} not restored", o.knob),
                });
                true
            }
            Err(e)
                if errno(&e) == Some(libc::ENOSPC)
                    && o.knob == Knob::CpusetCpus(Vec::new())
                    && self.hier.is_v2(Controller::Cpuset) =>
            {
                self.restore_inherited_cpus(o, e, report)
            }
            Err(e) => {
                report
                    .failures
                    .push(format!("restoring {} on {}: {e}", o.knob, o.group));
                false
            }
        }
    }

    /// A populated v2 group's empty `cpuset.cpus`, refused by the kernel
    /// (`refused`): writes the parent's effective CPUs, the CPUs the empty
    /// value gave its tasks. False if that fails too (keep the entry).
    fn restore_inherited_cpus(
        &mut self,
        o: &OriginalEntry,
        refused: CgroupError,
        report: &mut RestoreReport,
    ) -> bool {
        let parent = o.group.parent().unwrap_or_else(GroupPath::root);
        let bound = self.parent_bound(&parent, KnobKind::CpusetCpus, true);
        let fail = |report: &mut RestoreReport, why: String| {
            report.failures.push(format!(
                "restoring {} on {}: {refused}; the parent's CPUs instead: {why}",
                o.knob, o.group
            ));
            false
        };
        let cpus = match bound {
            Ok(Some((cpus, _))) => cpus,
            Ok(None) => return fail(report, "no cpuset.cpus.effective above it".into()),
            Err(e) => return fail(report, e.to_string()),
        };
        let knob = Knob::CpusetCpus(cpus);
        match self.apply_paths(&[(o.group.clone(), knob.clone())], false) {
            Ok(_) => {
                report.actions.push(RestoreAction::RestoredAs {
                    group: o.group.clone(),
                    original: o.knob.clone(),
                    knob,
                    reason: "the kernel refuses an empty cpuset on a group with tasks; \
                             its tasks have the parent's CPUs again"
                        .into(),
                });
                true
            }
            Err(e) => fail(report, e.to_string()),
        }
    }

    /// Cpuset originals in one ordered apply; if that is refused (a group
    /// gone, someone else's child in the way), one by one. Returns those
    /// to keep.
    fn restore_cpusets(
        &mut self,
        cpusets: Vec<OriginalEntry>,
        report: &mut RestoreReport,
    ) -> Vec<OriginalEntry> {
        if cpusets.is_empty() {
            return Vec::new();
        }
        let items: Vec<(GroupPath, Knob)> = cpusets
            .iter()
            .map(|o| (o.group.clone(), o.knob.clone()))
            .collect();
        if let Ok(r) = self.apply_paths(&items, false) {
            for o in cpusets {
                let written = !r.unchanged.contains(&(o.group.clone(), o.knob.kind()));
                report.actions.push(RestoreAction::Restored {
                    group: o.group,
                    knob: o.knob,
                    written,
                });
            }
            return Vec::new();
        }
        let mut kept = Vec::new();
        for o in cpusets {
            if !self.restore_one(&o, report) {
                kept.push(o);
            }
        }
        kept
    }

    /// Removes one created group; false if it failed.
    fn restore_created(&mut self, c: &CreatedEntry, report: &mut RestoreReport) -> bool {
        match self.remove_created(&c.group, c.controller) {
            Ok(Some((moved, killed))) => {
                report.actions.push(RestoreAction::Removed {
                    group: c.group.clone(),
                    controller: c.controller,
                    tasks_moved: moved,
                    tasks_killed: killed,
                });
                true
            }
            Ok(None) => {
                report.actions.push(RestoreAction::Skipped {
                    group: c.group.clone(),
                    reason: format!("created {} group is already gone", c.controller),
                });
                true
            }
            Err(e) => {
                report
                    .failures
                    .push(format!("removing {} group {}: {e}", c.controller, c.group));
                false
            }
        }
    }

    /// Turns v2 controllers off again in `group`'s `cgroup.subtree_control`,
    /// in one write (`-io -cpu`); if the kernel refuses it (`EBUSY`: a
    /// controller is still used below), one by one. Returns those whose
    /// write failed otherwise (to keep).
    fn restore_enabled(
        &mut self,
        group: &GroupPath,
        ctls: &[Controller],
        report: &mut RestoreReport,
    ) -> Vec<Controller> {
        let file = match self.hier.group_dir(ctls[0], group) {
            Ok(d) => d.join("cgroup.subtree_control"),
            Err(err) => {
                report.failures.push(err.to_string());
                return ctls.to_vec();
            }
        };
        let skip = |report: &mut RestoreReport, reason: String| {
            report.actions.push(RestoreAction::Skipped {
                group: group.clone(),
                reason,
            })
        };
        let cur = match fsio::read(&file) {
            Ok(c) => c,
            Err(e) if e.is_not_found() => {
                skip(report, "group is gone".into());
                return Vec::new();
            }
            Err(e) => {
                report.failures.push(e.to_string());
                return ctls.to_vec();
            }
        };
        // A test root's file keeps the "+name" written to it.
        let on: Vec<&str> = cur
            .split_whitespace()
            .map(|w| w.trim_start_matches('+'))
            .collect();
        let (live, off): (Vec<Controller>, Vec<Controller>) = ctls
            .iter()
            .partition(|c| on.contains(&c.v2_name().unwrap_or("?")));
        for c in off {
            skip(
                report,
                format!("{} is already off", c.v2_name().unwrap_or("?")),
            );
        }
        let name = |c: &Controller| c.v2_name().unwrap_or("?").to_string();
        if live.is_empty() {
            return Vec::new();
        }
        let all: Vec<String> = live.iter().map(|c| format!("-{}", name(c))).collect();
        let mut kept = Vec::new();
        match fsio::write(&file, &all.join(" ")) {
            Ok(()) => {
                for &c in &live {
                    report.actions.push(RestoreAction::Disabled {
                        group: group.clone(),
                        controller: c,
                    });
                }
            }
            Err(e) if errno(&e) == Some(libc::EBUSY) => {
                for c in live {
                    match fsio::write(&file, &format!("-{}", name(&c))) {
                        Ok(()) => report.actions.push(RestoreAction::Disabled {
                            group: group.clone(),
                            controller: c,
                        }),
                        Err(e) if errno(&e) == Some(libc::EBUSY) => skip(
                            report,
                            format!("{} left on: other groups below use it", name(&c)),
                        ),
                        Err(e) => {
                            report.failures.push(e.to_string());
                            kept.push(c);
                        }
                    }
                }
            }
            Err(e) => {
                report.failures.push(e.to_string());
                kept = live;
            }
        }
        kept
    }
}
