//! Writing knobs: plan (read, compare, validate), record, write.
//!
//! An [`Executor::apply`] runs in three steps, so that bad input is refused
//! with nothing written:
//!
//! 1. **plan**: for each change, find the group's directory and the knob's
//!    files (missing → `Group` / `Unsupported` error), convert the value to
//!    the file's native form and check it (`Invalid`), read the current
//!    value and drop the change if it is equal (skip-unchanged); check
//!    cpusets against their parent and children;
//! 2. **record**: the current value of every knob about to change on a
//!    group the executor did not create goes into the state file, which is
//!    written atomically;
//! 3. **write**: cpuset changes in hierarchy order ([`crate::cpuset`]),
//!    then the others in the order given.

use crate::cpuset::{self, Change};
use crate::error::{CgroupError, Result};
use crate::executor::Executor;
use crate::fsio;
use crate::group::{Group, GroupPath};
use crate::knob::{Knob, KnobKind};
use crate::layout::Controller;
use crate::state::OriginalEntry;
use serde::Serialize;
use std::path::PathBuf;

/// One file write the executor made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileWrite {
    /// The file.
    pub path: PathBuf,
    /// The value written.
    pub value: String,
}

/// What an [`Executor::apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// Files written, in order.
    pub written: Vec<FileWrite>,
    /// Knobs that already held the value asked for (nothing written).
    pub unchanged: Vec<(GroupPath, KnobKind)>,
}

impl ApplyReport {
    /// Whether nothing was written.
    pub fn is_noop(&self) -> bool {
        self.written.is_empty()
    }
}

/// One change that will be written.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub group: GroupPath,
    pub ctl: Controller,
    pub dir: PathBuf,
    pub v2: bool,
    pub current: Knob,
    pub desired: Knob,
}

impl Executor {
    /// Sets one knob of `group` (see [`Executor::apply`]).
    pub fn set(&mut self, group: &Group, knob: Knob) -> Result<ApplyReport> {
        self.apply(&[(group.clone(), knob)])
    }

    /// Sets several knobs at once: everything is checked before the first
    /// write, unchanged values are skipped, originals of groups the
    /// executor did not create are recorded first, and cpuset writes of a
    /// parent and its child are ordered (widen parent first, narrow child
    /// first). A knob may appear once per group.
    pub fn apply(&mut self, changes: &[(Group, Knob)]) -> Result<ApplyReport> {
        let mut items = Vec::with_capacity(changes.len());
        for (g, k) in changes {
            // Driven controllers only: the directory check gives the error.
            self.group_dir_checked(g, k.controller())?;
            items.push((g.path.clone(), k.clone()));
        }
        self.apply_paths(&items, true)
    }

    /// [`Executor::apply`] on group paths; `record`: keep originals (off
    /// when restoring them).
    pub(crate) fn apply_paths(
        &mut self,
        items: &[(GroupPath, Knob)],
        record: bool,
    ) -> Result<ApplyReport> {
        let mut report = ApplyReport::default();
        let mut planned = Vec::new();
        for (i, (g, k)) in items.iter().enumerate() {
            if items[..i]
                .iter()
                .any(|(g2, k2)| g2 == g && k2.kind() == k.kind())
            {
                let dir = self.hier.group_dir(k.controller(), g)?;
                return Err(CgroupError::invalid(
                    dir.join(k.kind().files(self.hier.is_v2(k.controller()))[0]),
                    k.to_string(),
                    "the same knob is set twice in one apply",
                ));
            }
            match self.plan_one(g, k)? {
                Some(p) => planned.push(p),
                None => report.unchanged.push((g.clone(), k.kind())),
            }
        }
        self.check_cpusets(&planned)?;
        self.check_idle_weight(&mut planned, &mut report, record)?;
        if record {
            self.record_originals(&planned)?;
        }
        self.write_planned(&planned, &mut report)?;
        Ok(report)
    }

    /// Plans one change; `None` when the file already holds the value.
    pub(crate) fn plan_one(&self, group: &GroupPath, knob: &Knob) -> Result<Option<Planned>> {
        let ctl = knob.controller();
        let v2 = self.hier.is_v2(ctl);
        let dir = self.hier.group_dir(ctl, group)?;
        if !dir.is_dir() {
            return Err(CgroupError::group(dir, "no such group"));
        }
        let kind = knob.kind();
        self.check_files(&dir, kind, v2)?;
        let desired = knob.native(v2, &dir.join(kind.files(v2)[0]))?;
        let current = kind.read(&dir, v2)?;
        Ok((desired != current).then(|| Planned {
            group: group.clone(),
            ctl,
            dir,
            v2,
            current,
            desired,
        }))
    }

    /// Cpuset checks, all before any write:
    ///
    /// - the new list lies inside the parent's (its new value if it changes
    ///   in the same apply; else v1 `cpuset.cpus` / `cpuset.mems`, v2
    ///   `cpuset.cpus.effective` / `cpuset.mems.effective`, of the nearest
    ///   ancestor that has the file) — this catches CPUs the machine does
    ///   not have;
    /// - v1: every child group not changed in the same apply lies inside the
    ///   new list (the kernel refuses to narrow a parent below a child);
    /// - v1: a group with tasks does not become empty.
    fn check_cpusets(&self, planned: &[Planned]) -> Result<()> {
        for p in planned {
            let (list, kind) = match &p.desired {
                Knob::CpusetCpus(c) => (c, KnobKind::CpusetCpus),
                Knob::CpusetMems(c) => (c, KnobKind::CpusetMems),
                _ => continue,
            };
            let file = p.dir.join(kind.files(p.v2)[0]);
            let what = if kind == KnobKind::CpusetCpus {
                "cpus"
            } else {
                "mems"
            };
            let value = elfen_topo::format_cpu_list(list);
            let same_apply = |g: &GroupPath| {
                planned.iter().find_map(|q| match &q.desired {
                    Knob::CpusetCpus(c) if kind == KnobKind::CpusetCpus && &q.group == g => Some(c),
                    Knob::CpusetMems(c) if kind == KnobKind::CpusetMems && &q.group == g => Some(c),
                    _ => None,
                })
            };
            if let Some(parent) = p.group.parent() {
                let bound = match same_apply(&parent) {
                    Some(c) => Some((c.clone(), "new value".to_string())),
                    None => self.parent_bound(&parent, kind, p.v2)?,
                };
                if let Some((bound, from)) = bound {
                    let extra = cpuset::minus(list, &bound);
                    if !extra.is_empty() {
                        return Err(CgroupError::invalid(
                            file,
                            value,
                            format!(
                                "{what} {} not in the parent's {from} ({})",
                                elfen_topo::format_cpu_list(&extra),
                                elfen_topo::format_cpu_list(&bound)
                            ),
                        ));
                    }
                }
            }
            if p.v2 {
                continue;
            }
            for child in child_dirs(&p.dir) {
                let name = child
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .to_string();
                let cg = p.group.join(&name)?;
                if same_apply(&cg).is_some() {
                    continue;
                }
                let cf = child.join(kind.files(false)[0]);
                let Ok(text) = fsio::read_trim(&cf) else {
                    continue;
                };
                let held = elfen_topo::parse_cpu_list(&text)
                    .map_err(|e| CgroupError::parse(&cf, &text, e.to_string()))?;
                let extra = cpuset::minus(&held, list);
                if !extra.is_empty() {
                    return Err(CgroupError::invalid(
                        file,
                        value,
                        format!(
                            "child group {cg} holds {what} {} outside it; change the child in the same apply",
                            elfen_topo::format_cpu_list(&extra)
                        ),
                    ));
                }
            }
            if list.is_empty() {
                let procs = p.dir.join("cgroup.procs");
                let text = fsio::read(&procs).unwrap_or_default();
                if !text.trim().is_empty() {
                    return Err(CgroupError::invalid(
                        file,
                        value,
                        format!(
                            "the group has tasks; a v1 cpuset with tasks cannot have no {what}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The kernel fixes the weight of an idle group (`cpu.shares` reads 3,
    /// writes fail with `EINVAL`, and leaving idle resets it to the
    /// default). A weight change on a group that is idle and stays idle is
    /// refused before any write (entering or leaving idle in the same apply
    /// is ordered by `write_planned`); when restoring (`record` false) it is
    /// dropped instead, since the weight recorded for an idle group is that
    /// placeholder.
    fn check_idle_weight(
        &self,
        planned: &mut Vec<Planned>,
        report: &mut ApplyReport,
        record: bool,
    ) -> Result<()> {
        let mut i = 0;
        while i < planned.len() {
            let p = &planned[i];
            if p.desired.kind() != KnobKind::CpuWeight {
                i += 1;
                continue;
            }
            let f = p.dir.join("cpu.idle");
            let idle_now = f.exists() && fsio::read_trim(&f)? == "1";
            let idle_after = planned
                .iter()
                .find_map(|q| match q.desired {
                    Knob::CpuIdle(b) if q.group == p.group => Some(b),
                    _ => None,
                })
                .unwrap_or(idle_now);
            if !(idle_now && idle_after) {
                i += 1;
            } else if record {
                return Err(CgroupError::invalid(
                    p.dir.join(KnobKind::CpuWeight.files(p.v2)[0]),
                    p.desired.to_string(),
                    "the group's cpu.idle is 1: the kernel fixes an idle group's weight",
                ));
            } else {
                let p = planned.remove(i);
                report.unchanged.push((p.group, KnobKind::CpuWeight));
            }
        }
        Ok(())
    }

    /// The list a child of `parent` must stay within, and the file it came
    /// from; `None` if no ancestor has the file (a bare test root).
    pub(crate) fn parent_bound(
        &self,
        parent: &GroupPath,
        kind: KnobKind,
        v2: bool,
    ) -> Result<Option<(Vec<u32>, String)>> {
        let f = match (kind, v2) {
            (KnobKind::CpusetCpus, false) => "cpuset.cpus",
            (KnobKind::CpusetMems, false) => "cpuset.mems",
            (KnobKind::CpusetCpus, true) => "cpuset.cpus.effective",
            _ => "cpuset.mems.effective",
        };
        let mut g = Some(parent.clone());
        while let Some(cur) = g {
            let path = self.hier.group_dir(Controller::Cpuset, &cur)?.join(f);
            if let Ok(text) = fsio::read_trim(&path) {
                let list = elfen_topo::parse_cpu_list(&text)
                    .map_err(|e| CgroupError::parse(&path, &text, e.to_string()))?;
                return Ok(Some((list, path.display().to_string())));
            }
            g = cur.parent();
        }
        Ok(None)
    }

    /// The group's owner set `knob` itself, under the executor (`systemctl
    /// freeze`, `docker pause`): where the executor recorded the knob's
    /// original on `group`, the value restored at the end is now the
    /// owner's (persisted). Nothing is written to the group; a knob the
    /// executor never changed there stays unrecorded.
    pub fn owner_set(&mut self, group: &Group, knob: Knob) -> Result<()> {
        let ctl = knob.controller();
        let v2 = self.hier.is_v2(ctl);
        let dir = self.group_dir_checked(group, ctl)?;
        let native = knob.native(v2, &dir.join(knob.kind().files(v2)[0]))?;
        let kind = native.kind();
        let Some(o) = self
            .state
            .rec
            .originals
            .iter_mut()
            .find(|o| o.group == group.path && o.knob.kind() == kind)
        else {
            return Ok(());
        };
        if o.knob != native {
            o.knob = native;
            self.state.persist()?;
        }
        Ok(())
    }

    /// Records the current value of every planned knob of a group the
    /// executor did not create (first change only), then persists.
    fn record_originals(&mut self, planned: &[Planned]) -> Result<()> {
        let mut dirty = false;
        for p in planned {
            if self.state.created(&p.group, p.ctl) {
                continue;
            }
            let kind = p.current.kind();
            let known = self
                .state
                .rec
                .originals
                .iter()
                .any(|o| o.group == p.group && o.knob.kind() == kind);
            if !known {
                self.state.rec.originals.push(OriginalEntry {
                    group: p.group.clone(),
                    knob: p.current.clone(),
                });
                dirty = true;
            }
        }
        if dirty {
            self.state.persist()?;
        }
        Ok(())
    }

    /// Writes planned changes: cpusets in hierarchy order, then the rest.
    fn write_planned(&self, planned: &[Planned], report: &mut ApplyReport) -> Result<()> {
        for kind in [KnobKind::CpusetCpus, KnobKind::CpusetMems] {
            let idx: Vec<usize> = (0..planned.len())
                .filter(|&i| planned[i].desired.kind() == kind)
                .collect();
            let changes: Vec<Change> = idx
                .iter()
                .map(|&i| Change {
                    depth: planned[i].group.depth(),
                    current: list_of(&planned[i].current),
                    desired: list_of(&planned[i].desired),
                })
                .collect();
            for (j, list) in cpuset::order(&changes) {
                let p = &planned[idx[j]];
                let path = p.dir.join(kind.files(p.v2)[0]);
                let value = elfen_topo::format_cpu_list(&list);
                fsio::write(&path, &value)?;
                report.written.push(FileWrite { path, value });
            }
        }
        // Leaving cpu.idle goes before a weight write, entering it after
        // (an idle group's weight cannot be written).
        let mut rest: Vec<&Planned> = planned
            .iter()
            .filter(|p| {
                !matches!(
                    p.desired.kind(),
                    KnobKind::CpusetCpus | KnobKind::CpusetMems
                )
            })
            .collect();
        rest.sort_by_key(|p| match p.desired {
            Knob::CpuIdle(false) => 0,
            Knob::CpuIdle(true) => 2,
            _ => 1,
        });
        for p in rest {
            for (f, value) in p.desired.writes(&p.current, p.v2) {
                let path = p.dir.join(f);
                fsio::write(&path, &value)?;
                report.written.push(FileWrite { path, value });
            }
        }
        Ok(())
    }
}

fn list_of(k: &Knob) -> Vec<u32> {
    match k {
        Knob::CpusetCpus(c) | Knob::CpusetMems(c) => c.clone(),
        _ => Vec::new(),
    }
}

/// Child group directories of `dir`.
fn child_dirs(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
