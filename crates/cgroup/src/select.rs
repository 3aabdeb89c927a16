//! **Names the host uses** for groups of processes — systemd units and
//! slices, docker / podman / CRI containers, Kubernetes pods and QoS
//! classes — resolved to cgroup directories ([`HostNames::resolve`]).
//!
//! Resolution reads only: the cgroup trees under a root (the v2 tree first,
//! then the v1 `name=systemd` hierarchy and the controller hierarchies), the
//! container engines' and the kubelet's own files, and — where systemd runs
//! as PID 1 and [`HostNames::with_systemctl`] asks for it —
//! `systemctl show` for a unit's `ControlGroup`. Every other rule is a pure
//! function of the tree's directory names, so tests build both kubelet
//! layouts and systemd layouts as directories in a temp dir:
//!
//! | selector | where it is found |
//! |---|---|
//! | `unit = "redis.service"` | `systemctl show -p ControlGroup` when asked and systemd runs; else the directory named so (the shallowest; two at one depth are ambiguous) |
//! | `slice = "batch-nightly.slice"` | `batch.slice/batch-nightly.slice` (systemd's rule: each `-` opens a parent slice) |
//! | `container = ID or NAME` | a directory `docker-ID….scope`, `libpod-ID….scope`, `cri-containerd-ID….scope`, `crio-ID….scope` (systemd drivers) or `ID…` (cgroupfs drivers); an id is 12 to 64 hex digits, a prefix of the full id; a name is looked up in docker's `containers/*/config.v2.json` and podman's `containers.json` |
//! | `pod_uid = UID` | `pod<UID>` (kubelet's cgroupfs driver) or `kubepods[-QOS]-pod<UID with _>.slice` (systemd driver) |
//! | `pod = "NAMESPACE/NAME"` | its UID from the kubelet's log directories `/var/log/pods/<ns>_<name>_<uid>`, then as `pod_uid` |
//! | `qos = "burstable"` … | `kubepods/burstable`, `kubepods.slice/kubepods-burstable.slice` (besteffort alike); `guaranteed`: every pod directly under `kubepods` |
//!
//! A pod's labels and annotations are not on the node's disk: naming a pod
//! by them needs the API server (resolve them to a UID with `kubectl get
//! pod -o jsonpath='{.metadata.uid}'`).

use crate::group::GroupPath;
use crate::layout::{Controller, Hierarchy};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Deepest level a search looks at below a tree's root.
const SEARCH_DEPTH: usize = 12;
/// Most directories one search visits (a bound on a huge tree).
const SEARCH_LIMIT: usize = 200_000;

/// A Kubernetes QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QosClass {
    /// Requests equal limits for every container: pods directly under
    /// `kubepods`.
    Guaranteed,
    /// `kubepods/burstable`.
    Burstable,
    /// `kubepods/besteffort`.
    #[serde(alias = "best_effort")]
    Besteffort,
}

impl QosClass {
    /// Its name in cgroup paths (`burstable`, `besteffort`).
    pub fn name(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "guaranteed",
            QosClass::Burstable => "burstable",
            QosClass::Besteffort => "besteffort",
        }
    }
}

/// A name the host gives a group of processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// A group path in a tree (`batch/jobs`): that group and every group below.
    Cgroup(GroupPath),
    /// An absolute cgroup directory (of any hierarchy).
    Dir(PathBuf),
    /// A systemd unit with a cgroup (`.service`, `.scope`, `.slice`,
    /// `.socket`, `.mount`, `.swap`).
    Unit(String),
    /// A systemd slice.
    Slice(String),
    /// A container: an id (or a prefix of 12+ hex digits) or a name.
    Container(String),
    /// A Kubernetes pod by namespace and name.
    Pod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A Kubernetes pod by UID.
    PodUid(String),
    /// Every pod of a QoS class.
    Qos(QosClass),
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::Cgroup(p) => write!(f, "cgroup {p}"),
            Selector::Dir(d) => write!(f, "cgroup {}", d.display()),
            Selector::Unit(u) => write!(f, "unit {u}"),
            Selector::Slice(s) => write!(f, "slice {s}"),
            Selector::Container(c) => write!(f, "container {c}"),
            Selector::Pod { namespace, name } => write!(f, "pod {namespace}/{name}"),
            Selector::PodUid(u) => write!(f, "pod uid {u}"),
            Selector::Qos(q) => write!(f, "QoS class {}", q.name()),
        }
    }
}

/// Why a selector names no group here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// The name is malformed.
    #[error("{what}: {reason}")]
    Invalid {
        /// The selector as written.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// Nothing of that name here.
    #[error("{what}: not found: {looked}")]
    NotFound {
        /// The selector.
        what: String,
        /// Where it was looked for.
        looked: String,
    },
    /// The host knows it, but it runs nothing now (a stopped unit).
    #[error("{what}: not running: {detail}")]
    NotRunning {
        /// The selector.
        what: String,
        /// What the host says.
        detail: String,
        /// Where its group will be when it runs, if known.
        expected: Option<GroupPath>,
    },
    /// More than one group answers to it.
    #[error("{what}: ambiguous: {candidates}")]
    Ambiguous {
        /// The selector.
        what: String,
        /// The groups it could be.
        candidates: String,
    },
}

/// Unit types that have a cgroup.
const UNIT_SUFFIXES: [&str; 6] = [".service", ".scope", ".slice", ".socket", ".mount", ".swap"];

fn invalid(what: impl std::fmt::Display, reason: impl Into<String>) -> SelectError {
    SelectError::Invalid {
        what: what.to_string(),
        reason: reason.into(),
    }
}

/// Whether `s` is `len` hex digits (any case).
fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A pod UID in its canonical form (dashes; `_` as the systemd driver
/// writes it is accepted), lower case.
pub fn normalise_pod_uid(uid: &str) -> Option<String> {
    let u = uid.replace('_', "-").to_ascii_lowercase();
    let parts: Vec<&str> = u.split('-').collect();
    let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
    (lens == [8, 4, 4, 4, 12] && parts.iter().all(|p| is_hex(p))).then_some(u)
}

/// Whether `s` is a DNS-1123 name (namespaces, pod names): lower-case
/// letters, digits, `-` and `.`.
fn dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

impl Selector {
    /// Checks the name's form (nothing is looked up).
    pub fn validate(&self) -> Result<(), SelectError> {
        match self {
            Selector::Cgroup(_) => Ok(()),
            Selector::Dir(d) if !d.is_absolute() => {
                Err(invalid(self, "a cgroup directory must be an absolute path"))
            }
            Selector::Dir(_) => Ok(()),
            Selector::Unit(u) => {
                unit_chars(self, u)?;
                if !UNIT_SUFFIXES
                    .iter()
                    .any(|s| u.ends_with(s) && u.len() > s.len())
                {
                    return Err(invalid(
                        self,
                        format!(
                            "a unit with a cgroup ends in {} (a timer or path unit has none: name \
                             the service it starts)",
                            UNIT_SUFFIXES.join(", ")
                        ),
                    ));
                }
                if u.ends_with(".slice") {
                    slice_path(u).map(|_| ()).map_err(|r| invalid(self, r))
                } else {
                    Ok(())
                }
            }
            Selector::Slice(s) => {
                unit_chars(self, s)?;
                slice_path(s).map(|_| ()).map_err(|r| invalid(self, r))
            }
            Selector::Container(c) => {
                if c.is_empty()
                    || !c
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
                {
                    return Err(invalid(
                        self,
                        "a container id (12 to 64 hex digits) or name (letters, digits, _ . -)",
                    ));
                }
                Ok(())
            }
            Selector::Pod { namespace, name } => {
                if !dns_name(namespace) || !dns_name(name) {
                    return Err(invalid(
                        self,
                        "NAMESPACE/NAME, each lower-case letters, digits, '-' and '.'",
                    ));
                }
                Ok(())
            }
            Selector::PodUid(u) => normalise_pod_uid(u).map(|_| ()).ok_or_else(|| {
                invalid(
                    self,
                    "a pod UID looks like 1f3b9c2e-8d4a-4b1e-9f00-3c2d1e0f9a8b",
                )
            }),
            Selector::Qos(_) => Ok(()),
        }
    }

    /// Parses `pod = "NAMESPACE/NAME"`.
    pub fn pod(spec: &str) -> Result<Selector, SelectError> {
        let Some((ns, name)) = spec.split_once('/') else {
            return Err(invalid(
                format!("pod {spec}"),
                "NAMESPACE/NAME (e.g. \"default/redis\")",
            ));
        };
        let s = Selector::Pod {
            namespace: ns.to_string(),
            name: name.to_string(),
        };
        s.validate()?;
        Ok(s)
    }

    /// Whether it may name several groups at once (a QoS class).
    pub fn is_set(&self) -> bool {
        matches!(self, Selector::Qos(_))
    }
}

fn unit_chars(sel: &Selector, u: &str) -> Result<(), SelectError> {
    if u.is_empty()
        || u.len() > 255
        || !u
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b":-_.\\@".contains(&b))
    {
        return Err(invalid(
            sel,
            "a unit name: letters, digits and : - _ . \\ @ only (no '/')",
        ));
    }
    Ok(())
}

/// The cgroup path of a systemd slice: `a-b-c.slice` is
/// `a.slice/a-b.slice/a-b-c.slice` (each `-` opens a parent); `-.slice`
/// is the root.
pub fn slice_path(name: &str) -> Result<GroupPath, String> {
    let Some(stem) = name.strip_suffix(".slice") else {
        return Err("a slice name ends in .slice".into());
    };
    if stem == "-" {
        return Ok(GroupPath::root());
    }
    if stem.is_empty() || stem.starts_with('-') || stem.ends_with('-') || stem.contains("--") {
        return Err(format!(
            "{name:?} is not a slice name (each '-' separates a parent slice: a-b.slice)"
        ));
    }
    let mut comps = Vec::new();
    let mut acc = String::new();
    for part in stem.split('-') {
        if !acc.is_empty() {
            acc.push('-');
        }
        acc.push_str(part);
        comps.push(format!("{acc}.slice"));
    }
    GroupPath::new(&comps.join("/")).map_err(|e| e.to_string())
}

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
    trees: Vec<Tree>,
    files: HostFiles,
    systemctl: bool,
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

    fn looked(&self) -> String {
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
    fn at_path(&self, path: &GroupPath, how: &str) -> Option<Resolved> {
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
    fn dir(&self, d: &Path) -> Option<Resolved> {
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

    fn slice(&self, sel: &Selector, name: &str) -> Result<Resolved, SelectError> {
        let path = slice_path(name).map_err(|r| invalid(sel, r))?;
        if let Some(r) = self.at_path(&path, "the slice's name") {
            return Ok(r);
        }
        if self.systemctl {
            if let Some(props) = crate::host::systemctl_show(name, &["LoadState", "ActiveState"]) {
                let get = |k: &str| props.get(k).cloned().unwrap_or_default();
                if get("LoadState") == "loaded" {
                    return Err(SelectError::NotRunning {
                        what: sel.to_string(),
                        detail: format!(
                            "systemd knows it (ActiveState={}) but its cgroup {path} does not exist: \
                             start it (systemctl start {name})",
                            get("ActiveState")
                        ),
                        expected: Some(path),
                    });
                }
            }
        }
        Err(SelectError::NotFound {
            what: sel.to_string(),
            looked: format!("no directory {path} under {}", self.looked()),
        })
    }

    fn unit(&self, sel: &Selector, name: &str) -> Result<Resolved, SelectError> {
        if self.systemctl {
            if let Some(props) = crate::host::systemctl_show(
                name,
                &["LoadState", "ActiveState", "ControlGroup", "Slice"],
            ) {
                let get = |k: &str| props.get(k).cloned().unwrap_or_default();
                if get("LoadState") != "loaded" {
                    return Err(SelectError::NotFound {
                        what: sel.to_string(),
                        looked: format!(
                            "systemd has no such unit (LoadState={})",
                            get("LoadState")
                        ),
                    });
                }
                let cg = get("ControlGroup");
                if let Ok(path) = GroupPath::new(&cg) {
                    if !path.is_root() {
                        if let Some(r) = self.at_path(&path, "systemctl show -p ControlGroup") {
                            return Ok(r);
                        }
                    }
                }
                let expected = slice_path(&get("Slice"))
                    .ok()
                    .and_then(|s| s.join(name).ok());
                return Err(SelectError::NotRunning {
                    what: sel.to_string(),
                    detail: format!(
                        "systemd knows it (ActiveState={}) but it has no cgroup now",
                        get("ActiveState")
                    ),
                    expected,
                });
            }
        }
        let hits = self.search(|n| n == name);
        match hits.as_slice() {
            [] => Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "no directory named {name} under {} (a unit has a cgroup only while it runs)",
                    self.looked()
                ),
            }),
            [one] => Ok(one.clone()),
            many => Err(SelectError::Ambiguous {
                what: sel.to_string(),
                candidates: many
                    .iter()
                    .map(|r| r.path.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// Directories whose name passes `f`: in the first tree with any, the
    /// shallowest ones.
    fn search(&self, f: impl Fn(&str) -> bool) -> Vec<Resolved> {
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

    fn container(&self, sel: &Selector, c: &str) -> Result<Resolved, SelectError> {
        let id = if (12..=64).contains(&c.len()) && is_hex(c) {
            c.to_ascii_lowercase()
        } else {
            self.container_id_of_name(c).ok_or_else(|| SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "no container named {c:?} in {} or {} (give its id: docker inspect -f '{{{{.Id}}}}' {c})",
                    self.files.docker_containers.display(),
                    self.files
                        .podman_containers
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?
        };
        let hits = self.search(|n| container_id_in(n).is_some_and(|full| full.starts_with(&id)));
        let mut ids: Vec<String> = hits
            .iter()
            .filter_map(|h| container_id_in(h.path.name()).map(str::to_string))
            .collect();
        ids.sort();
        ids.dedup();
        match (hits.first(), ids.len()) {
            (None, _) => Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "no container scope (docker-, libpod-, cri-containerd-, crio-{id}….scope) or \
                     cgroupfs directory {id}… under {}: it does not run here",
                    self.looked()
                ),
            }),
            (Some(h), 1) => Ok(Resolved {
                found_by: format!("container id {}", ids[0]),
                ..h.clone()
            }),
            _ => Err(SelectError::Ambiguous {
                what: sel.to_string(),
                candidates: format!("the id prefix {id} matches {}", ids.join(", ")),
            }),
        }
    }

    /// A container's full id from its name, in docker's or podman's files.
    fn container_id_of_name(&self, name: &str) -> Option<String> {
        if let Ok(rd) = std::fs::read_dir(&self.files.docker_containers) {
            for e in rd.flatten() {
                let Ok(text) = std::fs::read_to_string(e.path().join("config.v2.json")) else {
                    continue;
                };
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                    continue;
                };
                let n = v.get("Name").and_then(|n| n.as_str()).unwrap_or("");
                if n.trim_start_matches('/') == name {
                    let id = v.get("ID").and_then(|i| i.as_str()).map(str::to_string);
                    return id.or_else(|| Some(e.file_name().to_string_lossy().to_string()));
                }
            }
        }
        for f in &self.files.podman_containers {
            let Ok(text) = std::fs::read_to_string(f) else {
                continue;
            };
            let Ok(serde_json::Value::Array(list)) = serde_json::from_str(&text) else {
                continue;
            };
            for c in list {
                let named = c
                    .get("names")
                    .and_then(|n| n.as_array())
                    .is_some_and(|ns| ns.iter().any(|n| n.as_str() == Some(name)));
                if named {
                    if let Some(id) = c.get("id").and_then(|i| i.as_str()) {
                        return Some(id.to_string());
                    }
                }
            }
        }
        None
    }

    /// A pod's group by its (normalised) UID.
    fn pod_uid(&self, uid: &str) -> Option<Resolved> {
        let cgroupfs = format!("pod{uid}");
        let systemd = format!("-pod{}.slice", uid.replace('-', "_"));
        self.search(|n| n == cgroupfs || (n.starts_with("kubepods") && n.ends_with(&systemd)))
            .into_iter()
            .next()
            .map(|r| Resolved {
                found_by: format!("pod uid {uid}"),
                ..r
            })
    }

    fn pod(&self, sel: &Selector, ns: &str, name: &str) -> Result<Resolved, SelectError> {
        let prefix = format!("{ns}_{name}_");
        let mut uids: Vec<String> = std::fs::read_dir(&self.files.pod_logs)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let n = e.file_name().to_string_lossy().to_string();
                        n.strip_prefix(&prefix).and_then(normalise_pod_uid)
                    })
                    .collect()
            })
            .unwrap_or_default();
        uids.sort();
        uids.dedup();
        if uids.is_empty() {
            return Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "{} has no {prefix}<uid> directory (the kubelet's pod logs: pods are named \
                     offline through them only; give pod_uid, from kubectl get pod -n {ns} {name} \
                     -o jsonpath='{{.metadata.uid}}')",
                    self.files.pod_logs.display()
                ),
            });
        }
        let live: Vec<Resolved> = uids
            .iter()
            .filter_map(|u| self.pod_uid(u))
            .map(|r| Resolved {
                found_by: format!("{} → {}", self.files.pod_logs.display(), r.found_by),
                ..r
            })
            .collect();
        match live.as_slice() {
            [] => Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "its uid{} {} ha{} no cgroup here: it does not run on this node now",
                    if uids.len() > 1 { "s" } else { "" },
                    uids.join(", "),
                    if uids.len() > 1 { "ve" } else { "s" }
                ),
            }),
            [one] => Ok(one.clone()),
            many => Err(SelectError::Ambiguous {
                what: sel.to_string(),
                candidates: many
                    .iter()
                    .map(|r| r.path.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The kubelet's top group (`kubepods` or `kubepods.slice`), searched
    /// a few levels down (a `--cgroup-root` may nest it).
    fn kubepods(&self) -> Option<Resolved> {
        self.search(|n| n == "kubepods" || n == "kubepods.slice")
            .into_iter()
            .find(|r| r.path.depth() <= 3)
    }

    fn qos(&self, sel: &Selector, q: QosClass) -> Result<Vec<Resolved>, SelectError> {
        let Some(top) = self.kubepods() else {
            return Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "no kubepods or kubepods.slice directory under {}: no kubelet runs pods here",
                    self.looked()
                ),
            });
        };
        let systemd = top.path.name() == "kubepods.slice";
        let child = |name: String| -> Option<Resolved> {
            let path = top.path.join(&name).ok()?;
            let r = Resolved {
                path,
                found_by: format!(
                    "the kubelet's {} layout",
                    if systemd { "systemd" } else { "cgroupfs" }
                ),
                ..top.clone()
            };
            r.dir().join("cgroup.procs").exists().then_some(r)
        };
        match q {
            QosClass::Burstable | QosClass::Besteffort => {
                let name = if systemd {
                    format!("kubepods-{}.slice", q.name())
                } else {
                    q.name().to_string()
                };
                child(name.clone())
                    .map(|r| vec![r])
                    .ok_or_else(|| SelectError::NotFound {
                        what: sel.to_string(),
                        looked: format!("no {}/{name} directory", top.path),
                    })
            }
            QosClass::Guaranteed => {
                let mut names: Vec<String> = std::fs::read_dir(top.dir())
                    .map(|rd| {
                        rd.flatten()
                            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                            .map(|e| e.file_name().to_string_lossy().to_string())
                            .filter(|n| {
                                if systemd {
                                    n.starts_with("kubepods-pod") && n.ends_with(".slice")
                                } else {
                                    n.strip_prefix("pod").and_then(normalise_pod_uid).is_some()
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                Ok(names.into_iter().filter_map(child).collect())
            }
        }
    }
}

/// The container id in a cgroup directory's name: `docker-<id>.scope`,
/// `libpod-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`
/// (systemd drivers), `libpod-<id>` or a bare 64-hex-digit id (cgroupfs
/// drivers). The runtimes' monitor scopes (`libpod-conmon-…`,
/// `crio-conmon-…`) are not containers.
pub fn container_id_in(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".scope").unwrap_or(name);
    for p in ["docker-", "libpod-", "cri-containerd-", "crio-"] {
        if let Some(id) = stem.strip_prefix(p) {
            return (id.len() == 64 && is_hex(id)).then_some(id);
        }
    }
    (stem.len() == 64 && is_hex(stem) && stem == name).then_some(stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_names_map_to_nested_paths() {
        let p = |n: &str| slice_path(n).map(|g| g.as_str().to_string());
        assert_eq!(p("batch.slice").unwrap(), "batch.slice");
        assert_eq!(
            p("kubepods-burstable-pod1_2.slice").unwrap(),
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice"
        );
        assert_eq!(p("-.slice").unwrap(), "");
        for bad in ["batch", "-x.slice", "x-.slice", "a--b.slice", ".slice"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_checked_before_any_lookup() {
        let bad = |s: Selector, word: &str| {
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(word), "{s}: {e}");
        };
        bad(Selector::Unit("redis".into()), "ends in");
        bad(Selector::Unit("nightly.timer".into()), "timer");
        bad(Selector::Unit("a/b.service".into()), "no '/'");
        bad(Selector::Slice("batch".into()), "ends in .slice");
        bad(Selector::Container("".into()), "container id");
        bad(Selector::PodUid("1234".into()), "pod UID");
        bad(Selector::Dir("relative/x".into()), "absolute");
        assert!(Selector::pod("redis").is_err());
        assert!(Selector::pod("Default/redis").is_err(), "upper case");
        assert_eq!(
            Selector::pod("default/redis").unwrap(),
            Selector::Pod {
                namespace: "default".into(),
                name: "redis".into()
            }
        );
        assert_eq!(
            normalise_pod_uid("1F3B9C2E_8D4A_4B1E_9F00_3C2D1E0F9A8B").as_deref(),
            Some("1f3b9c2e-8d4a-4b1e-9f00-3c2d1e0f9a8b")
        );
    }

    #[test]
    fn container_ids_are_read_from_directory_names() {
        let id = "a".repeat(64);
        for n in [
            format!("docker-{id}.scope"),
            format!("libpod-{id}.scope"),
            format!("cri-containerd-{id}.scope"),
            format!("crio-{id}.scope"),
            format!("libpod-{id}"),
            id.clone(),
        ] {
            assert_eq!(container_id_in(&n), Some(id.as_str()), "{n}");
        }
        for n in [
            format!("libpod-conmon-{id}.scope"),
            format!("crio-conmon-{id}.scope"),
            "docker-abc.scope".to_string(),
            "system.slice".to_string(),
        ] {
            assert_eq!(container_id_in(&n), None, "{n}");
        }
    }
}
