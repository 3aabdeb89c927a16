//! The executor: the one writer of cgroup files.
//!
//! Strategies (a harness configuration, a daemon's blind-isolation loop)
//! compute values; the executor writes them. It
//!
//! - creates and removes groups (and records which it created),
//! - writes a knob only when the file holds a different value,
//! - records the original value of every knob it changes on a group it did
//!   not create in the state file *before* writing,
//! - orders hierarchical cpuset writes ([`crate::cpuset`]),
//! - restores everything on [`Executor::restore_all`] or, after a crash,
//!   on [`Executor::recover`].
//!
//! This file holds construction, groups and processes; writing knobs is in
//! `apply.rs`, the freezer in `freezer.rs`, undoing in `restore.rs`.

use crate::error::{CgroupError, Result};
use crate::fsio;
use crate::group::{Group, GroupPath};
use crate::knob::KnobKind;
use crate::layout::{Controller, Hierarchy};
use crate::restore::RestoreReport;
use crate::state::{CreatedEntry, EnabledEntry, StateRecord, StateStore};
use std::path::{Path, PathBuf};

/// The cgroup executor over one [`Hierarchy`]. See the crate docs.
#[derive(Debug)]
pub struct Executor {
    pub(crate) hier: Hierarchy,
    pub(crate) state: StateStore,
    restore_on_drop: bool,
    /// The group delegated to this process: no `cgroup.subtree_control`
    /// above it is written ([`Executor::set_delegated`]).
    delegated: Option<GroupPath>,
    /// Threads whose affinity was set again after turning cpuset on.
    affinities_kept: usize,
}

impl Executor {
    /// An executor that keeps its record in memory only (no state file):
    /// [`restore_all`](Executor::restore_all) still undoes everything, but a
    /// crash leaves changes behind (the harness cleans those up with
    /// [`remove_stale`](Executor::remove_stale)).
    pub fn new(hier: Hierarchy) -> Executor {
        let rec = StateRecord::new(hier.root(), hier.layout(), hier.freezer());
        Executor {
            hier,
            state: StateStore { path: None, rec },
            restore_on_drop: false,
            delegated: None,
            affinities_kept: 0,
        }
    }

    /// How many threads got back the affinity turning the cpuset
    /// controller on took from them (v2, kernels before 6.2).
    pub fn affinities_kept(&self) -> usize {
        self.affinities_kept
    }

    /// An executor that records its changes in `state_file`. If the file
    /// holds records of an earlier run (a crash), they are recovered first
    /// (as [`Executor::recover`]) and the report says what was done.
    /// Entries that could not be restored stay recorded, to be retried by
    /// the next restore.
    pub fn with_state_file(
        hier: Hierarchy,
        state_file: impl Into<PathBuf>,
    ) -> Result<(Executor, RestoreReport)> {
        let path = state_file.into();
        let mut report = RestoreReport::default();
        let mut leftover = None;
        if let Some(rec) = StateRecord::load(&path)? {
            let same = rec.root == hier.root()
                && rec.layout == hier.layout()
                && rec.freezer == hier.freezer();
            let rhier = if same {
                hier.clone()
            } else {
                hierarchy_of(&rec, &path)?
            };
            let mut old = Executor {
                hier: rhier,
                state: StateStore {
                    path: Some(path.clone()),
                    rec,
                },
                restore_on_drop: false,
                delegated: None,
                affinities_kept: 0,
            };
            report = old.restore_all();
            if !old.state.rec.is_empty() {
                if !same {
                    return Err(CgroupError::State {
                        path,
                        reason: format!(
                            "entries for another hierarchy ({}, {}) could not be restored: {}",
                            old.state.rec.root.display(),
                            old.state.rec.layout,
                            report.failures.join("; ")
                        ),
                    });
                }
                leftover = Some(std::mem::replace(
                    &mut old.state.rec,
                    StateRecord::new(hier.root(), hier.layout(), hier.freezer()),
                ));
            }
        }
        let rec = leftover
            .unwrap_or_else(|| StateRecord::new(hier.root(), hier.layout(), hier.freezer()));
        let ex = Executor {
            hier,
            state: StateStore {
                path: Some(path),
                rec,
            },
            restore_on_drop: false,
            delegated: None,
            affinities_kept: 0,
        };
        Ok((ex, report))
    }

    /// Undoes everything recorded in `state_file` by an earlier executor
    /// (typically one killed with SIGKILL): puts back original values, thaws
    /// groups it froze, removes groups it created (killing what is left in
    /// an owned one — [`Executor::create_owned_group`] — and moving other
    /// groups' tasks to the parent), turns off v2 controllers it enabled. The hierarchy is the
    /// one recorded in the file. A missing file is nothing to do. Restored
    /// entries are removed from the file (the file itself when all are), so
    /// running it again is harmless.
    pub fn recover(state_file: impl AsRef<Path>) -> Result<RestoreReport> {
        let path = state_file.as_ref();
        let Some(rec) = StateRecord::load(path)? else {
            return Ok(RestoreReport::default());
        };
        let hier = hierarchy_of(&rec, path)?;
        let mut ex = Executor {
            hier,
            state: StateStore {
                path: Some(path.to_path_buf()),
                rec,
            },
            restore_on_drop: false,
            delegated: None,
            affinities_kept: 0,
        };
        Ok(ex.restore_all())
    }

    /// Whether dropping the executor runs [`restore_all`](Executor::restore_all)
    /// (default off: a daemon restores explicitly on SIGTERM, and a drop
    /// without restore is what a crash looks like; the harness turns it on
    /// so its temporary groups go away on every exit path).
    pub fn restore_on_drop(mut self, on: bool) -> Executor {
        self.restore_on_drop = on;
        self
    }

    /// Confines the executor to the subtree delegated to this process (a
    /// systemd unit with `Delegate=yes`): turning a controller on in the
    /// `cgroup.subtree_control` of a group above `base` is refused (that
    /// file is the manager's), so a group created below `base` can use
    /// only the controllers delegated to it. `None`: no limit.
    pub fn set_delegated(&mut self, base: Option<GroupPath>) {
        self.delegated = base;
    }

    /// The hierarchy driven.
    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hier
    }

    /// What is recorded (created groups, originals, enabled controllers).
    pub fn record(&self) -> &StateRecord {
        &self.state.rec
    }

    /// The state file, if any.
    pub fn state_file(&self) -> Option<&Path> {
        self.state.path.as_deref()
    }

    /// Opens an existing group (an LC service's cgroup, an operator's batch
    /// cgroup) by path in `controllers`. Fails, naming the directory, if it
    /// is missing in any of them. Knobs changed on it are recorded and
    /// restored; it is never removed.
    pub fn open_group(&self, path: &str, controllers: &[Controller]) -> Result<Group> {
        let gp = GroupPath::new(path)?;
        let ctls = normalise_controllers(&gp, controllers)?;
        for &ctl in &ctls {
            let dir = self.hier.group_dir(ctl, &gp)?;
            if !dir.is_dir() {
                return Err(CgroupError::group(
                    dir,
                    format!("no such group in the {ctl} hierarchy"),
                ));
            }
        }
        Ok(Group {
            path: gp,
            controllers: ctls,
        })
    }

    /// Creates group `path` (and missing parents) in every one of
    /// `controllers`. The group itself must not exist yet in any of them
    /// (an existing group is someone's: open it instead). Each directory is
    /// recorded as created before `mkdir`. On v2, the controllers are
    /// enabled in every ancestor's `cgroup.subtree_control` (recorded for
    /// groups the executor did not create). A new v1 cpuset gets its
    /// parent's `cpuset.cpus` and `cpuset.mems`, so a task may join at once.
    pub fn create_group(&mut self, path: &str, controllers: &[Controller]) -> Result<Group> {
        self.create_group_with(path, controllers, false)
    }

    /// [`Executor::create_group`]; `owned`: recorded as holding only its
    /// owner's processes ([`Executor::create_owned_group`]).
    pub(crate) fn create_group_with(
        &mut self,
        path: &str,
        controllers: &[Controller],
        owned: bool,
    ) -> Result<Group> {
        let gp = GroupPath::new(path)?;
        if gp.is_root() {
            return Err(CgroupError::group(path, "the root group cannot be created"));
        }
        let ctls = normalise_controllers(&gp, controllers)?;
        // Check everything before the first write.
        for &ctl in &ctls {
            let base = self.hier.controller_root(ctl)?;
            if !base.is_dir() {
                return Err(CgroupError::group(base, format!("no {ctl} hierarchy here")));
            }
            let dir = self.hier.group_dir(ctl, &gp)?;
            if dir.exists() {
                return Err(CgroupError::group(
                    dir,
                    "already exists: open it with open_group, or remove it first",
                ));
            }
        }
        let mut made: Vec<PathBuf> = Vec::new();
        // v2 controllers that need enabling on the way down.
        let enable: Vec<Controller> = ctls
            .iter()
            .copied()
            .filter(|&c| self.hier.is_v2(c) && c.v2_name().is_some())
            .collect();
        for level in gp.lineage() {
            let parent = level.parent().expect("lineage has no root");
            if !enable.is_empty() {
                self.ensure_enabled(&parent, &enable)?;
            }
            for &ctl in &ctls {
                let dir = self.hier.group_dir(ctl, &level)?;
                let fresh = !dir.exists();
                if fresh || made.contains(&dir) {
                    self.state.rec.created.push(CreatedEntry {
                        group: level.clone(),
                        controller: ctl,
                        kill_tasks: owned,
                    });
                    self.state.persist()?;
                }
                if fresh {
                    std::fs::create_dir(&dir).map_err(|e| CgroupError::io(&dir, "creating", e))?;
                    made.push(dir.clone());
                }
                if made.contains(&dir) {
                    if let Some(hook) = self.hier.create_hook() {
                        hook(&dir, ctl);
                    }
                    if ctl == Controller::Cpuset && !self.hier.is_v2(ctl) {
                        self.init_v1_cpuset(&parent, &dir)?;
                    }
                }
            }
        }
        Ok(Group {
            path: gp,
            controllers: ctls,
        })
    }

    /// v2: turns `ctls` on in `group`'s `cgroup.subtree_control` where they
    /// are off, in one write (`+cpu +cpuset`); recorded first unless the
    /// executor created `group`.
    fn ensure_enabled(&mut self, group: &GroupPath, ctls: &[Controller]) -> Result<()> {
        let file = self
            .hier
            .group_dir(ctls[0], group)?
            .join("cgroup.subtree_control");
        let cur = fsio::read(&file)?;
        // A test root's file keeps the "+name" written to it.
        let on: Vec<&str> = cur
            .split_whitespace()
            .map(|w| w.trim_start_matches('+'))
            .collect();
        let missing: Vec<Controller> = ctls
            .iter()
            .copied()
            .filter(|c| !on.contains(&c.v2_name().expect("v2 controller")))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if let Some(base) = self.delegated.as_ref().filter(|b| !group.is_within(b)) {
            let names: Vec<&str> = missing.iter().filter_map(|c| c.v2_name()).collect();
            return Err(CgroupError::unsupported(
                file,
                format!(
                    "{} would have to be turned on here, above {base}, the group delegated to this \
                     process: that is its manager's file (delegate the controller to the unit: \
                     Delegate=yes)",
                    names.join(" ")
                ),
            ));
        }
        let mut dirty = false;
        for &ctl in &missing {
            let known = self
                .state
                .rec
                .enabled
                .iter()
                .any(|e| &e.group == group && e.controller == ctl);
            if !self.state.created(group, ctl) && !known {
                self.state.rec.enabled.push(EnabledEntry {
                    group: group.clone(),
                    controller: ctl,
                });
                dirty = true;
            }
        }
        if dirty {
            self.state.persist()?;
        }
        let value: Vec<String> = missing
            .iter()
            .map(|c| format!("+{}", c.v2_name().expect("v2 controller")))
            .collect();
        // turning cpuset on resets the affinity of the tasks below on
        // kernels before 6.2: the pinned ones get theirs back
        let kept = missing
            .contains(&Controller::Cpuset)
            .then(|| crate::affinity::Kept::take(file.parent().expect("a group's file")));
        fsio::write(&file, &value.join(" "))?;
        if let Some(k) = kept {
            self.affinities_kept += k.put_back();
        }
        Ok(())
    }

    /// A new v1 cpuset starts with empty `cpuset.cpus` and `cpuset.mems`
    /// and takes no task until both are set: copy the parent's.
    fn init_v1_cpuset(&self, parent: &GroupPath, dir: &Path) -> Result<()> {
        let pdir = self.hier.group_dir(Controller::Cpuset, parent)?;
        for f in ["cpuset.mems", "cpuset.cpus"] {
            let Ok(pv) = fsio::read_trim(&pdir.join(f)) else {
                continue;
            };
            let target = dir.join(f);
            let cur = fsio::read_trim(&target).unwrap_or_default();
            if cur.is_empty() && !pv.is_empty() {
                fsio::write(&target, &pv)?;
            }
        }
        Ok(())
    }

    /// Removes a group this executor created, in all its controllers:
    /// thaws it, moves the tasks of it and of any child groups to its
    /// parent (an owned group's are killed first:
    /// [`Executor::create_owned_group`]), removes children first, then the
    /// group. Returns the number of processes moved. A group the executor
    /// did not create is refused.
    pub fn remove_group(&mut self, group: &Group) -> Result<usize> {
        for &ctl in &group.controllers {
            if !self.state.created(&group.path, ctl) {
                return Err(CgroupError::group(
                    self.hier.group_dir(ctl, &group.path)?,
                    "not created by this executor: it is left alone",
                ));
            }
        }
        let mut moved = 0;
        for &ctl in &group.controllers {
            moved += self.remove_created(&group.path, ctl)?.map_or(0, |(m, _)| m);
            let gp = &group.path;
            self.state
                .rec
                .created
                .retain(|c| !(c.controller == ctl && c.group.is_within(gp)));
            self.state
                .rec
                .originals
                .retain(|o| !(o.knob.controller() == ctl && o.group.is_within(gp)));
            self.state.persist()?;
        }
        Ok(moved)
    }

    /// Removes `group`'s directory in `ctl` (see [`remove_group`]): the
    /// processes moved to the parent and those killed (an owned group's),
    /// or `None` if it was already gone. An owned group whose processes
    /// survive SIGKILL is not removed (the error names them).
    ///
    /// [`remove_group`]: Executor::remove_group
    pub(crate) fn remove_created(
        &self,
        group: &GroupPath,
        ctl: Controller,
    ) -> Result<Option<(usize, usize)>> {
        let dir = self.hier.group_dir(ctl, group)?;
        if !dir.is_dir() {
            return Ok(None);
        }
        let mut killed = 0;
        if self.state.owned(group, ctl) {
            // A process whose I/O is throttled sits in uninterruptible
            // sleep (state D) until its queued I/O is served, past any kill
            // timeout: the group's I/O limits go before its processes do.
            if self.state.created(group, Controller::Io) {
                if let Ok(io) = self.hier.group_dir(Controller::Io, group) {
                    crate::kill::lift_io_limits(&io, self.hier.is_v2(Controller::Io));
                }
            }
            let r = self.kill_owned(group, crate::kill::KILL_TIMEOUT)?;
            if !r.is_clean() {
                return Err(CgroupError::group(
                    dir,
                    format!("the processes started in it could not all be stopped: {r}"),
                ));
            }
            killed = r.killed;
        }
        let targets = self.ancestor_dirs(group, ctl)?;
        let thaw = (ctl == Controller::Freezer).then_some(self.hier.is_v2(ctl));
        remove_tree(&dir, &targets, thaw).map(|moved| Some((moved, killed)))
    }

    /// `group`'s ancestors' directories in `ctl`, nearest first (where its
    /// tasks may go).
    fn ancestor_dirs(&self, group: &GroupPath, ctl: Controller) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let mut g = group.parent();
        while let Some(p) = g {
            out.push(self.hier.group_dir(ctl, &p)?);
            g = p.parent();
        }
        Ok(out)
    }

    /// Removes leftover groups of processes that no longer run: top-level
    /// groups named `<prefix><pid>-…` (or `<prefix><pid>`) in every
    /// hierarchy, whose `<pid>` is dead. Their tasks go to the root group.
    /// Returns the directories removed. For harness runs killed before they
    /// could clean up.
    pub fn remove_stale(&self, prefix: &str) -> Vec<PathBuf> {
        // The v2 tree first (its groups have cgroup.freeze, whichever
        // freezer is driven), then the v1 hierarchies.
        let mut roots: Vec<(PathBuf, Option<bool>)> = self
            .hier
            .unified()
            .map(|u| (u.to_path_buf(), Some(true)))
            .into_iter()
            .collect();
        for ctl in Controller::ALL {
            if let Ok(r) = self.hier.controller_root(ctl) {
                let thaw = (ctl == Controller::Freezer).then_some(self.hier.is_v2(ctl));
                if !roots.iter().any(|(d, _)| d == &r) {
                    roots.push((r, thaw));
                }
            }
        }
        let mut removed = Vec::new();
        for (root, thaw) in roots {
            let Ok(rd) = std::fs::read_dir(&root) else {
                continue;
            };
            let mut stale: Vec<PathBuf> = rd
                .flatten()
                .filter(|e| e.path().is_dir())
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let Some(rest) = name.strip_prefix(prefix) else {
                        return false;
                    };
                    let pid = rest.split('-').next().and_then(|s| s.parse::<u32>().ok());
                    pid.is_some_and(|p| !elfen_shm::pid_alive(p))
                })
                .map(|e| e.path())
                .collect();
            stale.sort();
            for d in stale {
                if remove_tree(&d, std::slice::from_ref(&root), thaw).is_ok() {
                    removed.push(d);
                }
            }
        }
        removed
    }

    /// Directories of `group`, one per distinct directory (v2 controllers
    /// share one), with the controller that named it.
    fn dirs(&self, group: &Group) -> Result<Vec<(Controller, PathBuf)>> {
        let mut out: Vec<(Controller, PathBuf)> = Vec::new();
        for &ctl in &group.controllers {
            let d = self.hier.group_dir(ctl, &group.path)?;
            if !out.iter().any(|(_, x)| x == &d) {
                out.push((ctl, d));
            }
        }
        Ok(out)
    }

    /// Moves process `pid` (all its threads) into `group` in each of its
    /// controllers. A v1 cpuset with empty `cpuset.cpus` or `cpuset.mems`
    /// is refused before anything is written (the kernel would say
    /// `ENOSPC`).
    pub fn add_process(&self, group: &Group, pid: u32) -> Result<()> {
        self.add_task(group, pid, "cgroup.procs", "cgroup.procs")
    }

    /// Moves thread `tid` into `group` (v1 `tasks`; v2 `cgroup.threads`,
    /// which needs a threaded group).
    pub fn add_thread(&self, group: &Group, tid: u32) -> Result<()> {
        self.add_task(group, tid, "tasks", "cgroup.threads")
    }

    fn add_task(&self, group: &Group, id: u32, v1_file: &str, v2_file: &str) -> Result<()> {
        let dirs = self.dirs(group)?;
        for (ctl, d) in &dirs {
            if *ctl == Controller::Cpuset && !self.hier.is_v2(*ctl) {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let p = d.join(f);
                    if fsio::read_trim(&p)?.is_empty() {
                        return Err(CgroupError::invalid(
                            d.join(v1_file),
                            id.to_string(),
                            format!(
                                "{f} is empty: a v1 cpuset takes no task until cpuset.cpus and cpuset.mems are set"
                            ),
                        ));
                    }
                }
            }
        }
        for (ctl, d) in dirs {
            let f = d.join(if self.hier.is_v2(ctl) {
                v2_file
            } else {
                v1_file
            });
            fsio::write(&f, &id.to_string())?;
        }
        Ok(())
    }

    /// The processes in `group` (its first controller's `cgroup.procs`).
    pub fn procs(&self, group: &Group) -> Result<Vec<u32>> {
        self.ids(group, "cgroup.procs", "cgroup.procs")
    }

    /// The threads in `group` (v1 `tasks`, v2 `cgroup.threads`).
    pub fn threads(&self, group: &Group) -> Result<Vec<u32>> {
        self.ids(group, "tasks", "cgroup.threads")
    }

    fn ids(&self, group: &Group, v1_file: &str, v2_file: &str) -> Result<Vec<u32>> {
        let (ctl, d) =
            self.dirs(group)?.into_iter().next().ok_or_else(|| {
                CgroupError::group(group.path.as_str(), "group has no controllers")
            })?;
        let f = d.join(if self.hier.is_v2(ctl) {
            v2_file
        } else {
            v1_file
        });
        let text = fsio::read(&f)?;
        fsio::parse_ids(&f, &text)
    }

    /// Current memory usage of `group` in bytes (v1
    /// `memory.usage_in_bytes`, v2 `memory.current`).
    pub fn memory_current(&self, group: &Group) -> Result<u64> {
        let dir = self.group_dir_checked(group, Controller::Memory)?;
        let f = dir.join(if self.hier.is_v2(Controller::Memory) {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        });
        let t = fsio::read_trim(&f)?;
        t.parse()
            .map_err(|_| CgroupError::parse(&f, t, "expected a byte count"))
    }

    /// The current value of knob `kind` of `group`, in the file's native
    /// form (a v1 weight reads as [`Knob::CpuShares`](crate::Knob::CpuShares)).
    pub fn get(&self, group: &Group, kind: KnobKind) -> Result<crate::Knob> {
        let ctl = kind.controller();
        let dir = self.group_dir_checked(group, ctl)?;
        let v2 = self.hier.is_v2(ctl);
        self.check_files(&dir, kind, v2)?;
        kind.read(&dir, v2)
    }

    /// `group`'s directory in `ctl`, checked to be driven and to exist.
    pub(crate) fn group_dir_checked(&self, group: &Group, ctl: Controller) -> Result<PathBuf> {
        let dir = self.hier.group_dir(ctl, &group.path)?;
        if !group.has(ctl) {
            return Err(CgroupError::unsupported(
                dir,
                format!(
                    "group {} was opened without the {ctl} controller",
                    group.path
                ),
            ));
        }
        if !dir.is_dir() {
            return Err(CgroupError::group(dir, "no such group"));
        }
        Ok(dir)
    }

    /// Every file of `kind` must exist in `dir`.
    pub(crate) fn check_files(&self, dir: &Path, kind: KnobKind, v2: bool) -> Result<()> {
        for f in kind.files(v2) {
            let p = dir.join(f);
            if !p.exists() {
                return Err(CgroupError::unsupported(p, kind.missing_reason(v2)));
            }
        }
        Ok(())
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        if self.restore_on_drop && !self.state.rec.is_empty() {
            let _ = self.restore_all();
        }
    }
}

/// The hierarchy a state record was written for.
fn hierarchy_of(rec: &StateRecord, path: &Path) -> Result<Hierarchy> {
    let h = Hierarchy::with_layout(&rec.root, rec.layout).map_err(|e| CgroupError::State {
        path: path.to_path_buf(),
        reason: format!("its hierarchy is gone: {e}"),
    })?;
    match rec.freezer {
        Some(f) if h.freezer() != Some(f) => h.with_freezer(f),
        _ => Ok(h),
    }
}

fn normalise_controllers(gp: &GroupPath, controllers: &[Controller]) -> Result<Vec<Controller>> {
    let mut ctls = controllers.to_vec();
    ctls.sort();
    ctls.dedup();
    if ctls.is_empty() {
        return Err(CgroupError::group(gp.as_str(), "no controllers given"));
    }
    Ok(ctls)
}

/// Removes `dir` and every group below it, children first, after moving
/// their tasks to the first of `targets` that takes them (v2 refuses tasks
/// in a non-root group that enables controllers for its children, so the
/// next ancestor is tried). `thaw`: the group is in a freezer (v2 file
/// names if `Some(true)`) and is thawed first, so its tasks leave running.
/// Returns the number of processes moved.
fn remove_tree(dir: &Path, targets: &[PathBuf], thaw: Option<bool>) -> Result<usize> {
    match thaw {
        Some(false) if dir.join("freezer.state").exists() => {
            fsio::write(&dir.join("freezer.state"), "THAWED")?
        }
        Some(true) if dir.join("cgroup.freeze").exists() => {
            fsio::write(&dir.join("cgroup.freeze"), "0")?
        }
        _ => {}
    }
    let mut order = Vec::new();
    post_order(dir, &mut order);
    let mut moved = 0;
    for d in order {
        moved += move_tasks(&d, targets)?;
        fsio::remove_group_dir(&d)?;
    }
    Ok(moved)
}

/// Subdirectories of `dir`, deepest first, then `dir`.
pub(crate) fn post_order(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        let mut subs: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        subs.sort();
        for s in subs {
            post_order(&s, out);
        }
    }
    out.push(dir.to_path_buf());
}

/// Moves every process in `from` to the first of `targets` that accepts
/// it; processes that exit meanwhile (`ESRCH`) are skipped. Repeats while
/// processes remain (a fork may race the move).
fn move_tasks(from: &Path, targets: &[PathBuf]) -> Result<usize> {
    let procs = from.join("cgroup.procs");
    if !procs.exists() {
        return Ok(0);
    }
    let real = fsio::is_cgroupfs(from);
    let mut moved = 0;
    for _round in 0..10 {
        let text = fsio::read(&procs)?;
        let ids = fsio::parse_ids(&procs, &text)?;
        if ids.is_empty() {
            break;
        }
        for id in ids {
            let mut last = None;
            for t in targets {
                match fsio::write(&t.join("cgroup.procs"), &id.to_string()) {
                    Ok(()) => {
                        moved += 1;
                        last = None;
                        break;
                    }
                    Err(e) if errno(&e) == Some(libc::ESRCH) => {
                        last = None;
                        break;
                    }
                    Err(e) if matches!(errno(&e), Some(libc::EBUSY | libc::EOPNOTSUPP)) => {
                        last = Some(e)
                    }
                    Err(e) => return Err(e),
                }
            }
            if let Some(e) = last {
                return Err(e);
            }
        }
        if !real {
            // A test root's cgroup.procs does not empty itself.
            break;
        }
    }
    Ok(moved)
}

/// The errno of an I/O error.
pub(crate) fn errno(e: &CgroupError) -> Option<i32> {
    match e {
        CgroupError::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}
