//! `[[batch]]`: one batch group, its mode and how it yields.

use super::host::{HostKeys, host_selector};
use super::{Config, Unfit};
use crate::error::ConfigError;
use crate::isolation::config::{EgressClass, IoLimitSection};
use crate::units::ByteSize;
use elfen_cgroup::{QosClass, Selector};
use serde::{Deserialize, Serialize};

/// How a batch group gives the lanes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Instrumented programs on the signal page nap themselves; the daemon
    /// provides the page and the LC signal only.
    Cooperative,
    /// A SCHED_FIFO guard per batch lane occupies the lane while the
    /// policy says nap; the group runs SCHED_IDLE (or cpu.idle).
    Guard,
    /// The group is frozen while the policy says nap (coarse).
    Freeze,
    /// Only cpu.idle / SCHED_IDLE: nothing dynamic.
    Idle,
    /// PerfIso's blind isolation: the group's cpuset follows all CPUs −
    /// CPUs running the LC − `blind.buffer_cores` (frozen when that is none).
    Blind,
    /// The cheapest mode of `[auto] ladder` that keeps the LC's service
    /// time, chosen and re-checked while running.
    Auto,
    /// The kernel keeps the lanes: elfen's sched_ext scheduler
    /// (`elfen_lanes`) runs the group's threads and never on the SMT
    /// sibling of a running LC task; the group stays `cpu.idle` so the
    /// kernel unloading the scheduler leaves it in mode idle (`[scx]`).
    Scx,
}

impl Mode {
    /// The name in configs.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cooperative => "cooperative",
            Mode::Guard => "guard",
            Mode::Freeze => "freeze",
            Mode::Idle => "idle",
            Mode::Blind => "blind",
            Mode::Auto => "auto",
            Mode::Scx => "scx",
        }
    }

    /// Whether a group in this mode may run guard threads (as its mode,
    /// as a rung of `auto`'s ladder, or as freeze mode's fallback).
    pub fn may_guard(self, c: &Config) -> bool {
        match self {
            Mode::Guard => true,
            Mode::Auto => c.auto.ladder.contains(&Mode::Guard),
            Mode::Freeze => c.freeze.fallback == Mode::Guard,
            Mode::Scx => c.scx.fallback == Mode::Guard,
            _ => false,
        }
    }

    /// The modes a group in this mode may switch between.
    pub fn rungs(self, c: &Config) -> Vec<Mode> {
        match self {
            Mode::Auto => c.auto.ladder.clone(),
            Mode::Freeze if c.freeze.unfit != Unfit::Warn => vec![c.freeze.fallback, Mode::Freeze],
            Mode::Scx => vec![Mode::Scx, c.scx.fallback],
            m => vec![m],
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a group is made to yield to normal threads (modes `guard`, `idle`,
/// `auto`; `scx` yields by `cpu.idle` only: its threads' policy is the
/// scheduler's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum IdleMethod {
    /// `cpu_idle` where the group's cpu controller is v2, else `sched_idle`.
    #[default]
    Auto,
    /// The group's `cpu.idle` = 1 (through the executor; restored).
    CpuIdle,
    /// SCHED_IDLE on every thread of the group (new threads every rescan;
    /// the previous class is given back at exit).
    SchedIdle,
}

/// `[[batch]]`: one batch group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchSection {
    /// A name, unique in the file (used in messages and created groups).
    pub name: String,
    /// `cooperative`, `guard`, `freeze`, `idle`, `blind`, `auto` or `scx`.
    pub mode: Mode,
    /// An existing cgroup, as a path below each controller's root
    /// (`batch/jobs` = `/sys/fs/cgroup/<controller>/batch/jobs` on v1).
    pub cgroup: Option<String>,
    /// Or a command the daemon starts (argv) in a group it creates —
    /// below its own delegated group on a systemd host
    /// (`<its unit's group>/batch-<name>`), else `elfen-daemon-<pid>/<name>`
    /// — and stops at exit. It gets `ELFEN_PAGE` and, with one batch lane,
    /// `ELFEN_LANE`.
    pub command: Option<Vec<String>>,
    /// Or a systemd slice (`batch.slice`) the batch work runs in.
    pub slice: Option<String>,
    /// Or a systemd unit's group (`nightly.service`); a restart of the unit
    /// is followed (its knobs are applied again).
    pub unit: Option<String>,
    /// Or a container (id or name).
    pub container: Option<String>,
    /// Or a Kubernetes pod, `"NAMESPACE/NAME"`.
    pub pod: Option<String>,
    /// Or a Kubernetes pod by UID.
    pub pod_uid: Option<String>,
    /// Or a Kubernetes QoS class's group (`besteffort`, `burstable`).
    pub qos: Option<QosClass>,
    /// Confine the group to the batch lanes with its cpuset (default: true
    /// in modes guard and auto, where batch work must not flee to a
    /// request lane, and in mode idle, where SCHED_IDLE alone does not
    /// keep a memory-streaming batch on the LC's CPU from hurting it;
    /// `false` there runs the batch on the request lanes too, said at WARN
    /// at start).
    pub confine: Option<bool>,
    /// How the group yields (modes `guard`, `idle` and `auto`).
    pub idle_method: IdleMethod,
    /// Under the memory watermark, groups are killed lowest `priority`
    /// first (default 0).
    pub priority: i32,
    /// Soft memory limit (`"512M"`): v2 `memory.high`, v1
    /// `memory.soft_limit_in_bytes`.
    pub memory_high: Option<ByteSize>,
    /// Hard memory limit: v2 `memory.max`, v1 `memory.limit_in_bytes`.
    pub memory_max: Option<ByteSize>,
    /// Static disk I/O limits, one entry per device.
    pub io: Vec<IoLimitSection>,
    /// The group's share of the `[io]` budget and its kernel I/O weight
    /// where the device's scheduler honours one (1..=10000, default 100).
    pub io_weight: Option<u32>,
    /// `low`: its network traffic goes behind the LC's (`[egress]`).
    pub egress: EgressClass,
}

impl Default for BatchSection {
    fn default() -> Self {
        BatchSection {
            name: String::new(),
            mode: Mode::Guard,
            cgroup: None,
            command: None,
            slice: None,
            unit: None,
            container: None,
            pod: None,
            pod_uid: None,
            qos: None,
            confine: None,
            idle_method: IdleMethod::Auto,
            priority: 0,
            memory_high: None,
            memory_max: None,
            io: Vec::new(),
            io_weight: None,
            egress: EgressClass::Normal,
        }
    }
}

impl BatchSection {
    /// The host's name for an existing group (`slice`, `unit`,
    /// `container`, `pod`, `pod_uid`, `qos`), with its key; `None` for
    /// `cgroup` and `command`.
    pub fn selector(&self, field: &str) -> Result<Option<(Selector, &'static str)>, ConfigError> {
        host_selector(
            field,
            [],
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

    /// Whether the group's name follows a unit, container or pod that may
    /// stop and come back (a restart in place is followed).
    pub fn follows(&self) -> bool {
        self.unit.is_some()
            || self.container.is_some()
            || self.pod.is_some()
            || self.pod_uid.is_some()
    }

    /// Whether its name may come back at another path: a container or pod
    /// made anew gets a new id, and its cgroup a new directory.
    pub fn may_move(&self) -> bool {
        self.container.is_some() || self.pod.is_some()
    }

    /// Whether the group is confined to the batch lanes.
    pub fn confined(&self) -> bool {
        self.confine
            .unwrap_or(matches!(self.mode, Mode::Guard | Mode::Auto | Mode::Idle))
    }

    /// What the group risks when the config runs it on the request lanes
    /// in mode idle (`confine = false`): a line for the start's WARN, or
    /// `None` when it is confined or in another mode.
    pub fn request_lane_risk(&self) -> Option<String> {
        (self.mode == Mode::Idle && !self.confined()).then(|| {
            format!(
                "batch {}: mode idle with confine = false runs the batch on the request lanes \
                 too, where only SCHED_IDLE / cpu.idle keeps it behind the LC service: a \
                 memory-streaming batch on the LC's CPU raised the LC's p99 ×1.4–23 in our \
                 measurements (confined to the batch lanes: ×0.9–1.1); leave confine out to \
                 keep it on the batch lanes",
                self.name
            )
        })
    }
}

impl BatchSection {
    /// The keys of memory, I/O and egress isolation.
    pub fn isolation_keys(&self) -> crate::isolation::config::BatchKeys<'_> {
        crate::isolation::config::BatchKeys {
            priority: self.priority,
            memory_high: self.memory_high,
            memory_max: self.memory_max,
            io: &self.io,
            io_weight: self.io_weight,
            egress: self.egress,
        }
    }
}
