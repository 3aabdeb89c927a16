//! **Who owns which groups on this host**: whether systemd runs as PID 1,
//! the process's own group in the v2 tree, whether that group is delegated
//! to it ([`HostSituation`]), and which manager owns any other group
//! ([`Owner::of`]).
//!
//! systemd's rule (its "cgroup delegation" documentation, and the kernel's
//! model of delegation): on a host where systemd manages the unified
//! hierarchy, a program may create groups only below a group delegated to
//! it — a unit with `Delegate=yes` — and only there; the delegated group's
//! own resource files (its `cpu.weight`, `cpu.idle`, …) stay systemd's, its
//! `cgroup.subtree_control` and everything below are the program's, and
//! since a group that distributes resources to children may hold no
//! process itself, the program's own processes move into a leaf below it.
//! systemd marks a delegated group with the extended attribute
//! `trusted.delegate` (v251) and `user.delegate` (later versions) = `1`;
//! the unit's `Delegate` property says the same to `systemctl show`.

use crate::group::GroupPath;
use crate::layout::Layout;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `statfs` magic of cgroup v2 file systems.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Whether `dir` is on a cgroup v2 file system.
pub fn is_cgroup2(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a zeroed statfs buffer and a NUL-terminated path.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == CGROUP2_SUPER_MAGIC
    }
}

/// Whether systemd runs as PID 1 (`/run/systemd/system` exists, as
/// `sd_booted()` asks, and PID 1's command is `systemd`).
pub fn systemd_is_pid1() -> bool {
    Path::new("/run/systemd/system").is_dir()
        && std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
}

/// The value of extended attribute `name` of `path`, if set.
pub fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let n = std::ffi::CString::new(name).ok()?;
    let mut buf = [0u8; 64];
    // SAFETY: NUL-terminated path and name, a buffer of the length given.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (len >= 0).then(|| buf[..len as usize].to_vec())
}

/// `systemctl show -p P1 -p P2 … UNIT` as a map, or `None` when systemd
/// does not run as PID 1, `systemctl` is missing, or it fails or takes
/// more than 5 s.
pub fn systemctl_show(unit: &str, props: &[&str]) -> Option<BTreeMap<String, String>> {
    if !systemd_is_pid1() {
        return None;
    }
    let mut cmd = Command::new("systemctl");
    cmd.args(["show", "--no-pager"]);
    for p in props {
        cmd.args(["-p", p]);
    }
    cmd.arg("--")
        .arg(unit)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().ok()?;
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// The group of process `pid` in the v2 tree (`0::PATH` in
/// `/proc/<pid>/cgroup`), if it has one.
pub fn v2_group_of(pid: u32) -> Option<GroupPath> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    v2_group_in(&text)
}

/// The `0::PATH` line of a `/proc/<pid>/cgroup` text.
pub fn v2_group_in(text: &str) -> Option<GroupPath> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .and_then(|p| GroupPath::new(p.trim()).ok())
}

/// The unit a group belongs to: its deepest component named like a
/// service or scope (`system.slice/redis.service/x` → `redis.service`).
pub fn unit_of(path: &GroupPath) -> Option<String> {
    path.as_str()
        .split('/')
        .rev()
        .find(|c| c.ends_with(".service") || c.ends_with(".scope"))
        .map(str::to_string)
}

/// Who manages a group (and so decides what else may write there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// No manager: an operator's group, or a host without one.
    Operator,
    /// systemd: a slice, service or scope (named), or a group below one.
    Systemd {
        /// The unit (or slice) whose group it is or lies in.
        unit: String,
    },
    /// The kubelet: its `kubepods` tree (pods, QoS classes, containers).
    Kubelet,
}

impl Owner {
    /// Who owns group `path` (of a tree under a systemd host when
    /// `systemd_host`): anything in a `kubepods` tree is the kubelet's;
    /// on a systemd host, a group named like a unit or below one is
    /// systemd's (a container runtime's scope too: it asked systemd for it).
    pub fn of(path: &GroupPath, systemd_host: bool) -> Owner {
        if path
            .as_str()
            .split('/')
            .any(|c| c == "kubepods" || c.starts_with("kubepods.") || c.starts_with("kubepods-"))
        {
            return Owner::Kubelet;
        }
        if systemd_host {
            if let Some(u) = path.as_str().split('/').rev().find(|c| {
                [".slice", ".service", ".scope"]
                    .iter()
                    .any(|s| c.ends_with(s))
            }) {
                return Owner::Systemd {
                    unit: u.to_string(),
                };
            }
        }
        Owner::Operator
    }

    /// In words (`systemd (batch.slice)`, `the kubelet`).
    pub fn describe(&self) -> String {
        match self {
            Owner::Operator => "no manager".into(),
            Owner::Systemd { unit } => format!("systemd ({unit})"),
            Owner::Kubelet => "the kubelet".into(),
        }
    }
}

/// Whether the process's own group is delegated to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delegation {
    /// No manager owns the tree (systemd is not PID 1, or no v2 tree is
    /// managed): groups may be made anywhere, as before.
    NoManager,
    /// Its group is delegated to it.
    Delegated {
        /// Its unit, when the group is named like one.
        unit: Option<String>,
        /// How that is known (`xattr trusted.delegate`, `systemctl show -p Delegate`).
        how: String,
    },
    /// Its group is the manager's.
    NotDelegated {
        /// The unit to give `Delegate=yes`, when the group is a unit's.
        unit: Option<String>,
        /// Why (what was looked at).
        why: String,
    },
}

/// The situation of this process on this host, for deciding where it may
/// create groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSituation {
    /// systemd runs as PID 1.
    pub systemd: bool,
    /// The layout of the hierarchy.
    pub layout: Layout,
    /// The process's group in the v2 tree.
    pub own_group: Option<GroupPath>,
    /// Whether it is delegated.
    pub delegation: Delegation,
}

impl HostSituation {
    /// This process on this host: `v2_tree` is the v2 hierarchy's root
    /// (where the own group's directory and its attributes are read).
    pub fn detect(layout: Layout, v2_tree: Option<&Path>) -> HostSituation {
        let systemd = systemd_is_pid1();
        let own_group = v2_group_of(std::process::id());
        let delegation = if in_foreign_namespace(own_group.as_ref(), v2_tree) {
            Delegation::NotDelegated {
                unit: None,
                why: "it runs in a cgroup namespace of its own (a container): its group in the \
                      host's tree is not known, and the tree is the host's"
                    .into(),
            }
        } else if !systemd || layout != Layout::V2 {
            Delegation::NoManager
        } else {
            match (&own_group, v2_tree) {
                (Some(g), Some(tree)) => delegation_of(tree, g, true),
                _ => Delegation::NotDelegated {
                    unit: None,
                    why: "its group in the v2 tree is not known".into(),
                },
            }
        };
        HostSituation {
            systemd,
            layout,
            own_group,
            delegation,
        }
    }

    /// Whether groups may be created only below the own (delegated) group.
    pub fn managed(&self) -> bool {
        !matches!(self.delegation, Delegation::NoManager)
    }

    /// One line for `--check` and the start.
    pub fn describe(&self) -> String {
        let own = self
            .own_group
            .as_ref()
            .map_or("unknown".to_string(), |g| g.to_string());
        match &self.delegation {
            Delegation::NoManager => format!(
                "cgroup {} layout, {}: the daemon's groups are made at the root of each hierarchy",
                self.layout,
                if self.systemd {
                    "systemd as PID 1 but not on a unified hierarchy"
                } else {
                    "no systemd as PID 1"
                }
            ),
            Delegation::Delegated { unit, how } => format!(
                "cgroup v2 under systemd; the daemon's group {own}{} is delegated to it ({how})",
                unit.as_ref().map_or(String::new(), |u| format!(" ({u})"))
            ),
            Delegation::NotDelegated { unit, why } => format!(
                "cgroup v2 under systemd; the daemon's group {own}{} is NOT delegated to it ({why})",
                unit.as_ref().map_or(String::new(), |u| format!(" ({u})"))
            ),
        }
    }
}

/// Whether this process sees the v2 tree at `tree` through a cgroup
/// namespace of its own (a container's): its group reads as the root, but
/// the tree's root group does not hold it.
fn in_foreign_namespace(own: Option<&GroupPath>, tree: Option<&Path>) -> bool {
    let (Some(own), Some(tree)) = (own, tree) else {
        return false;
    };
    if !own.is_root() {
        return false;
    }
    let Ok(procs) = std::fs::read_to_string(tree.join("cgroup.procs")) else {
        return false;
    };
    let me = std::process::id().to_string();
    !procs.lines().any(|l| l.trim() == me)
}

/// Whether group `g` of the v2 tree at `tree` is delegated: its
/// `trusted.delegate` or `user.delegate` attribute, else (when `ask` and
/// systemd runs) its unit's `Delegate` property. The root group never is.
pub fn delegation_of(tree: &Path, g: &GroupPath, ask: bool) -> Delegation {
    let unit = unit_of(g);
    if g.is_root() {
        return Delegation::NotDelegated {
            unit: None,
            why: "it runs in the root group (or in a container's cgroup namespace)".into(),
        };
    }
    let dir = tree.join(g.as_str());
    for attr in ["trusted.delegate", "user.delegate"] {
        if xattr(&dir, attr).is_some_and(|v| v.starts_with(b"1")) {
            return Delegation::Delegated {
                unit,
                how: format!("xattr {attr} = 1"),
            };
        }
    }
    if ask {
        if let Some(u) = &unit {
            if let Some(p) = systemctl_show(u, &["Delegate"]) {
                return if p.get("Delegate").is_some_and(|v| v == "yes") {
                    Delegation::Delegated {
                        unit,
                        how: "systemctl show -p Delegate".into(),
                    }
                } else {
                    Delegation::NotDelegated {
                        unit,
                        why: "its unit has Delegate=no".into(),
                    }
                };
            }
        }
    }
    Delegation::NotDelegated {
        unit,
        why: format!(
            "{} has no trusted.delegate or user.delegate attribute",
            dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_follow_the_managers_names() {
        let g = |p: &str| GroupPath::new(p).unwrap();
        assert_eq!(
            Owner::of(&g("kubepods.slice/kubepods-burstable.slice"), true),
            Owner::Kubelet
        );
        assert_eq!(
            Owner::of(&g("kubepods/besteffort/podx"), false),
            Owner::Kubelet
        );
        assert_eq!(
            Owner::of(&g("system.slice/redis.service"), true),
            Owner::Systemd {
                unit: "redis.service".into()
            }
        );
        assert_eq!(
            Owner::of(&g("batch.slice"), true),
            Owner::Systemd {
                unit: "batch.slice".into()
            }
        );
        assert_eq!(Owner::of(&g("batch.slice"), false), Owner::Operator);
        assert_eq!(Owner::of(&g("batch/jobs"), true), Owner::Operator);
        assert_eq!(
            unit_of(&g("system.slice/elfen-daemon.service/daemon")).as_deref(),
            Some("elfen-daemon.service")
        );
        assert_eq!(
            v2_group_in("1:cpu:/\n0::/system.slice/x.service\n"),
            Some(g("system.slice/x.service"))
        );
        assert_eq!(v2_group_in("1:cpu:/\n"), None);
    }

    #[test]
    fn delegation_is_read_from_the_attribute() {
        let dir = tempfile::tempdir().unwrap();
        let g = GroupPath::new("system.slice/x.service").unwrap();
        std::fs::create_dir_all(dir.path().join(g.as_str())).unwrap();
        match delegation_of(dir.path(), &g, false) {
            Delegation::NotDelegated { unit, why } => {
                assert_eq!(unit.as_deref(), Some("x.service"));
                assert!(why.contains("no trusted.delegate"), "{why}");
            }
            d => panic!("{d:?}"),
        }
        assert!(matches!(
            delegation_of(dir.path(), &GroupPath::root(), false),
            Delegation::NotDelegated { unit: None, .. }
        ));
        // user.* attributes on a tmpfs need Linux 6.6; trusted.* need root
        let c = std::ffi::CString::new(dir.path().join(g.as_str()).as_os_str().as_encoded_bytes())
            .unwrap();
        let set = |name: &str| {
            let n = std::ffi::CString::new(name).unwrap();
            // SAFETY: NUL-terminated strings, a one-byte value.
            unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), b"1".as_ptr().cast(), 1, 0) == 0 }
        };
        if set("user.delegate") || set("trusted.delegate") {
            assert!(matches!(
                delegation_of(dir.path(), &g, false),
                Delegation::Delegated { unit: Some(u), .. } if u == "x.service"
            ));
        } else {
            // SAFETY: geteuid cannot fail.
            assert!(
                unsafe { libc::geteuid() } != 0,
                "root sets trusted.* attributes on {}",
                dir.path().display()
            );
            elfen_cmd::skip::skip(
                elfen_cmd::skip::Need::Root,
                "trusted.delegate (user.delegate needs Linux 6.6 on a tmpfs)",
            );
        }
    }
}
