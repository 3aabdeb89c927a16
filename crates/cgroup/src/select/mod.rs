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
//! | `container = ID or NAME` | a directory `docker-ID….scope`, `libpod-ID….scope`, `cri-containerd-ID….scope`, `crio-ID….scope` (systemd drivers) or `ID…` (cgroupfs drivers); an id is 12 to 64 hex digits, a prefix of the full id; a name is looked up in docker's `containers/*/config.v2.json` and podman's `containers.json` (one name under two engines is refused, both named) |
//! | `pod_uid = UID` | `pod<UID>` (kubelet's cgroupfs driver) or `kubepods[-QOS]-pod<UID with _>.slice` (systemd driver) |
//! | `pod = "NAMESPACE/NAME"` | its UID from the kubelet's log directories `/var/log/pods/<ns>_<name>_<uid>`, then as `pod_uid` |
//! | `qos = "burstable"` … | `kubepods/burstable`, `kubepods.slice/kubepods-burstable.slice` (besteffort alike); `guaranteed`: every pod directly under `kubepods` |
//!
//! A pod's labels and annotations are not on the node's disk: naming a pod
//! by them needs the API server (resolve them to a UID with `kubectl get
//! pod -o jsonpath='{.metadata.uid}'`).

//!
//! The parts: this file (the selectors, their checks and errors), `host`
//! (the trees and files looked in, and [`HostNames::resolve`]), `systemd`
//! (units and slices), `container` (docker / podman / CRI containers),
//! `kube` (Kubernetes pods and QoS classes).

mod container;
mod host;
mod kube;
mod systemd;

pub use container::container_id_in;
pub use host::{HostFiles, HostNames, Resolved, Tree};

use crate::group::GroupPath;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
