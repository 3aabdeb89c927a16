//! `[lc]`: how the LC service is named, and how often it is looked for.

use super::host::{HostKeys, host_selector};
use crate::error::ConfigError;
use elfen_cgroup::{QosClass, Selector};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[lc]`: the LC service, by exactly one of `pid`, `comm`, `cgroup`,
/// `unit`, `slice`, `container`, `pod`, `pod_uid`, `qos`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LcSection {
    /// A running process. When it exits, a process with its command name
    /// is looked for (a restart).
    pub pid: Option<u32>,
    /// A cgroup directory (absolute path) and every group below it. A
    /// group of the v2 tree is watched by id in the kernel; of a v1
    /// hierarchy by the `cgroup.procs` of its subtree, re-read.
    pub cgroup: Option<PathBuf>,
    /// A command name: `/proc/<pid>/comm` or the base name of `argv[0]`.
    /// Every matching process of the LC's user (`user`) is LC. May be
    /// absent at start (waited for).
    pub comm: Option<String>,
    /// A systemd unit (`redis-server.service`) and every group below its
    /// cgroup; followed across restarts.
    pub unit: Option<String>,
    /// A systemd slice (`lc.slice`) and everything in it.
    pub slice: Option<String>,
    /// A docker / podman / CRI container: its id (12 to 64 hex digits, a
    /// prefix of the full id) or its name.
    pub container: Option<String>,
    /// A Kubernetes pod, `"NAMESPACE/NAME"` (resolved through the kubelet's
    /// pod log directories).
    pub pod: Option<String>,
    /// A Kubernetes pod by UID.
    pub pod_uid: Option<String>,
    /// Every pod of a Kubernetes QoS class: `guaranteed`, `burstable`,
    /// `besteffort`.
    pub qos: Option<QosClass>,
    /// Whose processes a name adopts (a user name or a uid; with `comm`,
    /// and with `pid` for its restarts). Default: the user of the pid, or
    /// of the oldest process found; processes of other users with the
    /// same name are ignored, and said so.
    pub user: Option<String>,
    /// How often the watched processes are checked for life, ms (default 100).
    pub liveness_ms: u64,
    /// How often processes are looked for anew (new processes of a comm or
    /// a v1 cgroup), ms (default 1000).
    pub rescan_ms: u64,
    /// While no LC process is found: how often to look, ms (default 10).
    pub lost_rescan_ms: u64,
    /// How long the LC may use CPU while batch work runs with no busy
    /// period seen on its request lanes before the daemon warns that it
    /// protects nothing, ms (default 5000).
    pub unseen_window_ms: u64,
}

impl LcSection {
    /// The host's name for the LC's group (`cgroup`, `unit`, `slice`,
    /// `container`, `pod`, `pod_uid`, `qos`), with its key; `None` with
    /// `pid` or `comm`.
    pub fn selector(&self) -> Result<Option<(Selector, &'static str)>, ConfigError> {
        let dir = self.cgroup.clone().map(Selector::Dir);
        host_selector(
            "lc",
            [("cgroup", dir)],
            HostKeys {
                unit: &self.unit,
                slice: &self.slice,
                container: &self.container,
                pod: &self.pod,
                pod_uid: &self.pod_uid,
                qos: self.qos,
            },
        )
    }
}

impl Default for LcSection {
    fn default() -> Self {
        LcSection {
            pid: None,
            cgroup: None,
            comm: None,
            unit: None,
            slice: None,
            container: None,
            pod: None,
            pod_uid: None,
            qos: None,
            user: None,
            liveness_ms: 100,
            rescan_ms: 1000,
            lost_rescan_ms: 10,
            unseen_window_ms: 5000,
        }
    }
}
