//! The trees and the host's files a [`HostNames`] looks in, and
//! [`HostNames::resolve`], which hands each selector to its resolver.

use super::{SelectError, Selector, normalise_pod_uid};
use crate::group::GroupPath;
use crate::layout::{Controller, Hierarchy};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Deepest level a search looks at below a tree's root.
const SEARCH_DEPTH: usize = 12;
/// Most directories one search visits (a bound on a huge tree).
const SEARCH_LIMIT: usize = 200_000;

/// One cgroup tree to look in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// Its root directory.
    pub dir: PathBuf,
    /// Whether it is the v2 hierarchy (its groups can be watched by id in
    /// the kernel).
    pub v2: bool,
}

/// A group a selector names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The tree it is in.
    pub tree: PathBuf,
    /// Its path in the tree.
    pub path: GroupPath,
    /// Whether the tree is the v2 hierarchy.
    pub v2: bool,
    /// How it was found (`systemctl show`, `directory name`, …).
    pub found_by: String,
}

impl Resolved {
    /// Its directory.
    pub fn dir(&self) -> PathBuf {
        if self.path.is_root() {
            self.tree.clone()
        } else {
            self.tree.join(self.path.as_str())
        }
    }
}

/// Where the container engines and the kubelet keep the files names are
/// resolved from (read only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFiles {
    /// docker's per-container directories (`config.v2.json`).
    pub docker_containers: PathBuf,
    /// podman's (containers/storage) container lists (`containers.json`).
    pub podman_containers: Vec<PathBuf>,
    /// The kubelet's pod log directories (`<ns>_<name>_<uid>`).
    pub pod_logs: PathBuf,
    /// The kubelet's state directory (`cpu_manager_state`, `pods/<uid>`).
    pub kubelet: PathBuf,
}

impl Default for HostFiles {
    fn default() -> Self {
        HostFiles::under(Path::new("/"))
    }
}

impl HostFiles {
    /// The usual places, below `root` (`/` on a host, a temp dir in tests).
    pub fn under(root: &Path) -> HostFiles {
        HostFiles {
            docker_containers: root.join("var/lib/docker/containers"),
            podman_containers: vec![
                root.join("var/lib/containers/storage/overlay-containers/containers.json"),
                root.join("var/lib/containers/storage/vfs-containers/containers.json"),
            ],
            pod_logs: root.join("var/log/pods"),
            kubelet: root.join("var/lib/kubelet"),
        }
    }

    /// The kubelet's CPU manager policy (`static` assigns pods exclusive
    /// CPUs through their cpusets; `none` leaves cpusets alone), from its
    /// checkpoint `cpu_manager_state`; `None` without one.
    pub fn cpu_manager_policy(&self) -> Option<(String, PathBuf)> {
        let f = self.kubelet.join("cpu_manager_state");
        let text = std::fs::read_to_string(&f).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let p = v.get("policyName")?.as_str()?.to_string();
        Some((p, f))
    }
}

/// Resolves [`Selector`]s on one host (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNames {
    pub(super) trees: Vec<Tree>,
    pub(super) files: HostFiles,
    pub(super) systemctl: bool,
}

impl HostNames {
    /// The trees of `hier` (its v2 tree first, then v1's `name=systemd`
    /// hierarchy and the controller hierarchies) and the host's files.
    pub fn new(hier: &Hierarchy, files: HostFiles) -> HostNames {
        let mut trees = Vec::new();
        if let Some(u) = hier.unified() {
            trees.push(Tree {
                dir: u.to_path_buf(),
                v2: true,
            });
        }
        let systemd = hier.root().join("systemd");
        if hier.unified() != Some(hier.root()) && systemd.join("cgroup.procs").is_file() {
            trees.push(Tree {
                dir: systemd,
                v2: false,
            });
        }
        for c in [
            Controller::Cpu,
            Controller::Cpuset,
            Controller::Freezer,
            Controller::Memory,
            Controller::Io,
        ] {
            if hier.is_v2(c) {
                continue;
            }
            if let Ok(d) = hier.controller_root(c) {
                if !trees.iter().any(|t| t.dir == d) {
                    trees.push(Tree { dir: d, v2: false });
                }
            }
        }
        HostNames {
            trees,
            files,
            systemctl: false,
        }
    }

    /// Asks `systemctl show` for a unit's cgroup where systemd runs as
    /// PID 1 (default: names are found from the tree alone).
    pub fn with_systemctl(mut self, on: bool) -> HostNames {
        self.systemctl = on;
        self
    }

    /// The trees looked in, in order.
    pub fn trees(&self) -> &[Tree] {
        &self.trees
    }

    /// The host's files.
    pub fn files(&self) -> &HostFiles {
        &self.files
    }

    pub(super) fn looked(&self) -> String {
        self.trees
            .iter()
            .map(|t| t.dir.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The groups `sel` names now. A name that should be one group and is
    /// none is an error ([`SelectError::NotFound`], or
    /// [`SelectError::NotRunning`] for a unit systemd knows but runs
    /// nothing of); a QoS class may name none (no pod of it runs).
    pub fn resolve(&self, sel: &Selector) -> Result<Vec<Resolved>, SelectError> {
        sel.validate()?;
        let what = sel.to_string();
        let not_found = |looked: String| SelectError::NotFound {
            what: what.clone(),
            looked,
        };
        match sel {
            Selector::Cgroup(p) => self
                .at_path(p, "its path")
                .map(|r| vec![r])
                .ok_or_else(|| not_found(format!("no directory {p} under {}", self.looked()))),
            Selector::Dir(d) => self.dir(d).map(|r| vec![r]).ok_or_else(|| {
                not_found(format!(
                    "{} is not a cgroup directory (no cgroup.procs)",
                    d.display()
                ))
            }),
            Selector::Slice(s) => self.slice(sel, s).map(|r| vec![r]),
            Selector::Unit(u) if u.ends_with(".slice") => self.slice(sel, u).map(|r| vec![r]),
            Selector::Unit(u) => self.unit(sel, u).map(|r| vec![r]),
            Selector::Container(c) => self.container(sel, c).map(|r| vec![r]),
            Selector::PodUid(u) => {
                let uid = normalise_pod_uid(u).expect("validated");
                self.pod_uid(&uid).map(|r| vec![r]).ok_or_else(|| {
                    not_found(format!(
                        "no pod{uid} or kubepods*-pod{}.slice directory under {}: the pod does not \
                         run on this node",
                        uid.replace('-', "_"),
                        self.looked()
                    ))
                })
            }
            Selector::Pod { namespace, name } => self.pod(sel, namespace, name).map(|r| vec![r]),
            Selector::Qos(q) => self.qos(sel, *q),
        }
    }

    /// The group at `path` in the first tree that has it.
    pub(super) fn at_path(&self, path: &GroupPath, how: &str) -> Option<Resolved> {
        self.trees.iter().find_map(|t| {
            let r = Resolved {
                tree: t.dir.clone(),
                path: path.clone(),
                v2: t.v2,
                found_by: how.to_string(),
            };
            r.dir().join("cgroup.procs").exists().then_some(r)
        })
    }

    /// An absolute directory, placed in the tree that holds it.
    pub(super) fn dir(&self, d: &Path) -> Option<Resolved> {
        if !d.join("cgroup.procs").exists() {
            return None;
        }
        for t in &self.trees {
            if let Ok(rest) = d.strip_prefix(&t.dir) {
                if let Ok(path) = GroupPath::new(&rest.to_string_lossy()) {
                    return Some(Resolved {
                        tree: t.dir.clone(),
                        path,
                        v2: t.v2,
                        found_by: "its directory".into(),
                    });
                }
            }
        }
        Some(Resolved {
            tree: d.to_path_buf(),
            path: GroupPath::root(),
            v2: crate::host::is_cgroup2(d),
            found_by: "its directory".into(),
        })
    }

    /// Directories whose name passes `f`: in the first tree with any, the
    /// shallowest ones.
    pub(super) fn search(&self, f: impl Fn(&str) -> bool) -> Vec<Resolved> {
        for t in &self.trees {
            let mut hits: Vec<Resolved> = Vec::new();
            let mut best = usize::MAX;
            let mut queue: VecDeque<(PathBuf, GroupPath)> = VecDeque::new();
            queue.push_back((t.dir.clone(), GroupPath::root()));
            let mut visited = 0;
            while let Some((dir, path)) = queue.pop_front() {
                visited += 1;
                if visited > SEARCH_LIMIT || path.depth() > best {
                    break;
                }
                let Ok(rd) = std::fs::read_dir(&dir) else {
                    continue;
                };
                let mut subs: Vec<(String, PathBuf)> = rd
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| (e.file_name().to_string_lossy().to_string(), e.path()))
                    .collect();
                subs.sort();
                for (name, p) in subs {
                    let Ok(child) = path.join(&name) else {
                        continue;
                    };
                    if f(&name) && child.depth() <= best {
                        best = child.depth();
                        hits.push(Resolved {
                            tree: t.dir.clone(),
                            path: child.clone(),
                            v2: t.v2,
                            found_by: "its directory's name".into(),
                        });
                    }
                    if child.depth() < SEARCH_DEPTH {
                        queue.push_back((p, child));
                    }
                }
            }
            hits.retain(|h| h.path.depth() == best);
            if !hits.is_empty() {
                return hits;
            }
        }
        Vec::new()
    }
}
