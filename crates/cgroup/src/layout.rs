//! Layouts: where each controller's files live under a cgroup root.
//!
//! - **v1**: one hierarchy per controller, mounted at `<root>/<name>` where
//!   `<name>` lists the controllers co-mounted there (`cpu`, `cpu,cpuacct`,
//!   `blkio`, ...). A group `a/b` of controller `cpu` is `<root>/cpu/a/b`.
//! - **v2**: one unified hierarchy at `<root>`; a controller is usable in a
//!   group when the root lists it in `cgroup.controllers` and every ancestor
//!   enables it in `cgroup.subtree_control`. The freezer is a core file
//!   (`cgroup.freeze`), always present in non-root groups.
//! - **hybrid**: v1 controller hierarchies plus a v2 tree at `<root>/unified`
//!   that usually holds no controllers but does have `cgroup.freeze`. Every
//!   controller is driven through v1; the freezer through v1's `freezer`
//!   hierarchy or the unified tree ([`FreezerBackend`]).
//!
//! Nothing here assumes `/sys/fs/cgroup`: the root is passed in (tests point
//! it at a temp dir); [`default_root`] only names the usual mount point.

use crate::error::{CgroupError, Result};
use crate::group::GroupPath;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The usual cgroup mount point.
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";

/// The usual cgroup mount point, as a path.
pub fn default_root() -> PathBuf {
    PathBuf::from(DEFAULT_ROOT)
}

/// How cgroups are mounted under a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// One hierarchy per controller under `<root>/<controller>`.
    V1,
    /// The unified hierarchy at `<root>`.
    V2,
    /// v1 controllers plus a v2 tree at `<root>/unified`.
    Hybrid,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::V1 => "v1",
            Layout::V2 => "v2",
            Layout::Hybrid => "hybrid",
        })
    }
}

/// A controller (a set of knobs living in one hierarchy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Controller {
    /// `cpuset`: which CPUs and memory nodes the group may use.
    Cpuset,
    /// `cpu`: CFS bandwidth, weight, `cpu.idle`.
    Cpu,
    /// The freezer: v1 `freezer` hierarchy or v2 `cgroup.freeze`.
    Freezer,
    /// `memory`: limit and usage.
    Memory,
    /// Block I/O: v1 `blkio`, v2 `io`.
    Io,
    /// Membership of a group of the v2 tree without any controller: where
    /// cgroup BPF programs attach (they take a cgroup2 directory) — the
    /// unified hierarchy itself on v2, `<root>/unified` on hybrid, not
    /// offered on v1. A core part of every v2 group, like the v2 freezer.
    Unified,
}

impl Controller {
    /// Every controller.
    pub const ALL: [Controller; 6] = [
        Controller::Cpuset,
        Controller::Cpu,
        Controller::Freezer,
        Controller::Memory,
        Controller::Io,
        Controller::Unified,
    ];

    /// The controllers mounted as v1 hierarchies of their own.
    const V1: [Controller; 5] = [
        Controller::Cpuset,
        Controller::Cpu,
        Controller::Freezer,
        Controller::Memory,
        Controller::Io,
    ];

    /// Its name in v1 mounts (`cpuset`, `cpu`, `freezer`, `memory`,
    /// `blkio`; `unified` names the v2 tree, which is no v1 mount).
    pub fn v1_name(self) -> &'static str {
        match self {
            Controller::Cpuset => "cpuset",
            Controller::Cpu => "cpu",
            Controller::Freezer => "freezer",
            Controller::Memory => "memory",
            Controller::Io => "blkio",
            Controller::Unified => "unified",
        }
    }

    /// Its name in v2 `cgroup.controllers` (`None` for the freezer and the
    /// unified membership, core parts of every v2 group).
    pub fn v2_name(self) -> Option<&'static str> {
        match self {
            Controller::Cpuset => Some("cpuset"),
            Controller::Cpu => Some("cpu"),
            Controller::Freezer | Controller::Unified => None,
            Controller::Memory => Some("memory"),
            Controller::Io => Some("io"),
        }
    }
}

impl std::fmt::Display for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.v1_name())
    }
}

/// Which freezer a hybrid layout drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreezerBackend {
    /// v1 `freezer.state` (`FROZEN` / `THAWED`, reads `FREEZING` meanwhile).
    V1,
    /// v2 `cgroup.freeze` (`1` / `0`), done when `cgroup.events` says
    /// `frozen 1`.
    V2,
}

/// Called after the executor creates a group directory, with the directory
/// and its controller. Real cgroup file systems populate a new directory
/// themselves; a test root uses this to create the files the kernel would.
pub type CreateHook = Arc<dyn Fn(&Path, Controller) + Send + Sync>;

/// A cgroup root with its layout resolved: where every controller lives.
#[derive(Clone)]
pub struct Hierarchy {
    root: PathBuf,
    layout: Layout,
    /// v1 controller → its mount directory (v1 and hybrid).
    v1: BTreeMap<Controller, PathBuf>,
    /// The v2 tree: `<root>` (v2) or `<root>/unified` (hybrid, if present).
    unified: Option<PathBuf>,
    /// Controllers the v2 tree's `cgroup.controllers` lists.
    v2_available: Vec<Controller>,
    /// The freezer driven, if any.
    freezer: Option<FreezerBackend>,
    on_create: Option<CreateHook>,
}

impl std::fmt::Debug for Hierarchy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hierarchy")
            .field("root", &self.root)
            .field("layout", &self.layout)
            .field("v1", &self.v1)
            .field("unified", &self.unified)
            .field("v2_available", &self.v2_available)
            .field("freezer", &self.freezer)
            .field("on_create", &self.on_create.is_some())
            .finish()
    }
}

/// The layout under `root`: v2 if `<root>/cgroup.controllers` exists,
/// hybrid if `<root>/unified/cgroup.controllers` does, else v1 if any
/// controller hierarchy is there.
pub fn detect_layout(root: &Path) -> Result<Layout> {
    if root.join("cgroup.controllers").is_file() {
        return Ok(Layout::V2);
    }
    if root.join("unified/cgroup.controllers").is_file() {
        return Ok(Layout::Hybrid);
    }
    if !scan_v1(root).is_empty() {
        return Ok(Layout::V1);
    }
    Err(CgroupError::unsupported(
        root,
        "no cgroup hierarchy here: no cgroup.controllers (v2), no unified/ (hybrid), \
         no cpuset/cpu/freezer/memory/blkio directory (v1)",
    ))
}

/// v1 controller directories under `root`: a directory whose name, split
/// at commas, names the controller (`cpu`, `cpu,cpuacct`). The shortest
/// such name wins (`cpu` over `cpu,cpuacct` where both are links to one
/// mount).
fn scan_v1(root: &Path) -> BTreeMap<Controller, PathBuf> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort_by_key(|n| (n.len(), n.clone()));
    let mut out = BTreeMap::new();
    for ctl in Controller::V1 {
        if let Some(n) = names
            .iter()
            .find(|n| n.split(',').any(|c| c == ctl.v1_name()))
        {
            out.insert(ctl, root.join(n));
        }
    }
    out
}

/// Controllers listed in a v2 `cgroup.controllers` file.
fn v2_controllers(file: &Path) -> Result<Vec<Controller>> {
    let text = crate::fsio::read(file)?;
    let words: Vec<&str> = text.split_whitespace().collect();
    Ok(Controller::ALL
        .into_iter()
        .filter(|c| c.v2_name().is_some_and(|n| words.contains(&n)))
        .collect())
}

impl Hierarchy {
    /// Detects the layout under `root` ([`detect_layout`]).
    pub fn detect(root: impl Into<PathBuf>) -> Result<Hierarchy> {
        let root = root.into();
        let layout = detect_layout(&root)?;
        Hierarchy::with_layout(root, layout)
    }

    /// The hierarchy under `root` read as `layout` (an explicit override of
    /// detection). The freezer defaults to v1's where a `freezer`
    /// hierarchy is mounted, else the v2 tree's `cgroup.freeze`.
    pub fn with_layout(root: impl Into<PathBuf>, layout: Layout) -> Result<Hierarchy> {
        let root = root.into();
        let (v1, unified) = match layout {
            Layout::V1 => (scan_v1(&root), None),
            Layout::V2 => (BTreeMap::new(), Some(root.clone())),
            Layout::Hybrid => (scan_v1(&root), Some(root.join("unified"))),
        };
        if layout != Layout::V2 && v1.is_empty() {
            return Err(CgroupError::unsupported(
                &root,
                format!(
                    "layout {layout}: no v1 controller hierarchy (cpuset, cpu, freezer, memory, blkio) here"
                ),
            ));
        }
        let v2_available = match &unified {
            Some(u) => {
                let f = u.join("cgroup.controllers");
                if !f.is_file() {
                    return Err(CgroupError::unsupported(
                        f,
                        format!("layout {layout} needs a v2 tree here"),
                    ));
                }
                v2_controllers(&f)?
            }
            None => Vec::new(),
        };
        let freezer = if v1.contains_key(&Controller::Freezer) {
            Some(FreezerBackend::V1)
        } else if unified.is_some() {
            Some(FreezerBackend::V2)
        } else {
            None
        };
        Ok(Hierarchy {
            root,
            layout,
            v1,
            unified,
            v2_available,
            freezer,
            on_create: None,
        })
    }

    /// Drives `backend` as the freezer (hybrid: v1 `freezer` or the unified
    /// tree's `cgroup.freeze`). Fails if the layout has no such freezer.
    pub fn with_freezer(mut self, backend: FreezerBackend) -> Result<Hierarchy> {
        let ok = match backend {
            FreezerBackend::V1 => self.v1.contains_key(&Controller::Freezer),
            FreezerBackend::V2 => self.unified.is_some(),
        };
        if !ok {
            return Err(CgroupError::unsupported(
                &self.root,
                format!("layout {} has no {backend:?} freezer here", self.layout),
            ));
        }
        self.freezer = Some(backend);
        Ok(self)
    }

    /// Calls `hook` after every group directory the executor creates (for
    /// test roots, which the kernel does not populate).
    pub fn with_create_hook(mut self, hook: CreateHook) -> Hierarchy {
        self.on_create = Some(hook);
        self
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The freezer driven, if any.
    pub fn freezer(&self) -> Option<FreezerBackend> {
        self.freezer
    }

    /// The v2 tree, if the layout has one.
    pub fn unified(&self) -> Option<&Path> {
        self.unified.as_deref()
    }

    pub(crate) fn create_hook(&self) -> Option<&CreateHook> {
        self.on_create.as_ref()
    }

    /// Whether `ctl` is served by a v2 tree here (its files have v2 names).
    pub fn is_v2(&self, ctl: Controller) -> bool {
        match self.layout {
            Layout::V1 => false,
            Layout::V2 => true,
            Layout::Hybrid => {
                ctl == Controller::Unified
                    || (ctl == Controller::Freezer && self.freezer == Some(FreezerBackend::V2))
            }
        }
    }

    /// Whether `ctl` can be driven here.
    pub fn supports(&self, ctl: Controller) -> bool {
        self.controller_root(ctl).is_ok()
    }

    /// The directory of the root group of `ctl`'s hierarchy.
    pub fn controller_root(&self, ctl: Controller) -> Result<PathBuf> {
        if ctl == Controller::Freezer {
            return match self.freezer {
                Some(FreezerBackend::V1) => Ok(self.v1[&Controller::Freezer].clone()),
                Some(FreezerBackend::V2) => Ok(self.unified.clone().expect("checked")),
                None => Err(CgroupError::unsupported(
                    self.root.join("freezer"),
                    format!(
                        "layout {}: no freezer hierarchy and no v2 tree",
                        self.layout
                    ),
                )),
            };
        }
        if ctl == Controller::Unified {
            return self.unified.clone().ok_or_else(|| {
                CgroupError::unsupported(
                    self.root.join("unified"),
                    format!(
                        "layout {}: no v2 tree (cgroup2) is mounted here, and cgroup BPF \
                         programs attach only to cgroup2 groups",
                        self.layout
                    ),
                )
            });
        }
        match self.layout {
            Layout::V1 | Layout::Hybrid => self.v1.get(&ctl).cloned().ok_or_else(|| {
                CgroupError::unsupported(
                    self.root.join(ctl.v1_name()),
                    format!(
                        "layout {}: no v1 {} hierarchy is mounted here",
                        self.layout,
                        ctl.v1_name()
                    ),
                )
            }),
            Layout::V2 => {
                if self.v2_available.contains(&ctl) {
                    Ok(self.root.clone())
                } else {
                    Err(CgroupError::unsupported(
                        self.root.join("cgroup.controllers"),
                        format!(
                            "the v2 hierarchy does not offer the {} controller",
                            ctl.v2_name().unwrap_or("?")
                        ),
                    ))
                }
            }
        }
    }

    /// The directory of group `path` in `ctl`'s hierarchy (whether or not
    /// it exists).
    pub fn group_dir(&self, ctl: Controller, path: &GroupPath) -> Result<PathBuf> {
        let base = self.controller_root(ctl)?;
        Ok(if path.is_root() {
            base
        } else {
            base.join(path.as_str())
        })
    }

    /// The group process `pid` belongs to in `ctl`'s hierarchy, from
    /// `/proc/<pid>/cgroup`.
    pub fn group_of(&self, pid: u32, ctl: Controller) -> Result<GroupPath> {
        let file = PathBuf::from(format!("/proc/{pid}/cgroup"));
        let text = crate::fsio::read(&file)?;
        self.group_in_proc_cgroup(&file, &text, ctl)
    }

    /// Parses the text of a `/proc/<pid>/cgroup` file (`file` names it in
    /// errors) for `ctl`'s group.
    pub fn group_in_proc_cgroup(
        &self,
        file: &Path,
        text: &str,
        ctl: Controller,
    ) -> Result<GroupPath> {
        self.controller_root(ctl)?;
        let v2 = self.is_v2(ctl);
        for line in text.lines() {
            let mut it = line.splitn(3, ':');
            let (Some(id), Some(ctls), Some(path)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let hit = if v2 {
                id == "0" && ctls.is_empty()
            } else {
                ctls.split(',').any(|c| c == ctl.v1_name())
            };
            if hit {
                return GroupPath::new(path);
            }
        }
        Err(CgroupError::parse(
            file,
            text,
            format!("no line for the {ctl} hierarchy"),
        ))
    }
}
