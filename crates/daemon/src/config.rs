//! The daemon's configuration file (TOML): types, documented defaults, and
//! the checks that need nothing but the file itself ([`Config::check`]).
//! Checks against the machine (CPUs, processes, cgroups, the page, the
//! state file) are in [`crate::plan`]; nothing is applied before both pass.

use crate::error::ConfigError;
use crate::isolation::config::{
    EgressClass, EgressSection, IoLimitSection, IoSection, MemorySection,
};
pub use crate::protection::fit::HoldSetting;
use crate::units::ByteSize;
use elfen_cgroup::{QosClass, Selector};
use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_runtime::NapChoice;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Default signal page (`page`).
pub const DEFAULT_PAGE: &str = "/dev/shm/elfen";
/// Default state file (`state_file`).
pub const DEFAULT_STATE_FILE: &str = "/run/elfen/daemon-state.json";
/// Default guard priority (`guard.priority`, SCHED_FIFO).
pub const DEFAULT_GUARD_PRIORITY: u8 = 50;

/// The whole file. Every field has a default except the LC service and the
/// batch groups; unknown keys are refused everywhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The signal page the daemon creates and owns: `page = "PATH"`, or a
    /// `[page]` table with `path` and `batch_group`.
    pub page: PageSection,
    /// The cgroup executor's state file (default
    /// `/run/elfen/daemon-state.json`): every cgroup change is recorded there
    /// before it is made, so the next start repairs what a killed daemon left.
    pub state_file: PathBuf,
    /// Lane pairing, `request:batch[+batch]` comma-separated (`"0:1"`,
    /// `"0:1,2:3"`); default: elfen-topo's plan (SMT siblings, else
    /// consecutive CPUs: cpu 0 request, cpu 1 batch).
    pub pairs: Option<String>,
    /// Where the cgroup hierarchies are mounted (default `/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// Where the host's own files are (default `/`): the kubelet's
    /// `var/log/pods` and `var/lib/kubelet`, docker's and podman's
    /// container records, read to resolve pod and container names. In a
    /// container, where the host's root (or those directories) is mounted.
    pub host_root: PathBuf,
    /// Which freezer freeze mode drives: `auto` (the v1 freezer where one is
    /// mounted, else the v2 `cgroup.freeze`), `v1`, `v2`.
    pub freezer: FreezerChoice,
    /// How often the daemon writes the page's heartbeat, ms (default 100).
    pub heartbeat_ms: u64,
    /// What the daemon does when a batch group's cgroup is removed under
    /// it (its processes are no longer contained): `stop` (default: restore
    /// everything and exit with status 3) or `continue` (keep running, the
    /// group marked lost in `elfen status` and the metrics).
    pub on_group_lost: OnGroupLost,
    /// Where the groups of `[[batch]] command`s go when systemd manages
    /// the host's cgroups but the daemon's own group is not delegated to it
    /// (a shell's session scope, a unit without `Delegate=yes`): `refuse`
    /// (default: the start is refused, naming the unit to change) or
    /// `root` (made at the root of each hierarchy, beside systemd's, with a
    /// warning — for a measurement run from a shell).
    pub undelegated: Undelegated,
    /// The policy of every lane.
    pub policy: PolicySection,
    /// The LC service to protect.
    pub lc: LcSection,
    /// The LC signal writer and its source.
    pub signal: SignalSection,
    /// Guards (mode `guard`).
    pub guard: GuardSection,
    /// The freezer (mode `freeze`).
    pub freeze: FreezeSection,
    /// Blind isolation (mode `blind`).
    pub blind: BlindSection,
    /// Mode `auto`: the cheapest mode that suffices, chosen while running.
    pub auto: AutoSection,
    /// The Prometheus endpoint.
    pub metrics: MetricsSection,
    /// The memory watermark below which batch work is killed.
    pub memory: MemorySection,
    /// A disk I/O budget the batch groups share by weight.
    pub io: IoSection,
    /// How batch traffic is sent at low priority.
    pub egress: EgressSection,
    /// The batch work, one entry per group (`[[batch]]`).
    pub batch: Vec<BatchSection>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            page: PageSection::default(),
            state_file: PathBuf::from(DEFAULT_STATE_FILE),
            pairs: None,
            cgroup_root: elfen_cgroup::default_root(),
            host_root: PathBuf::from("/"),
            freezer: FreezerChoice::Auto,
            heartbeat_ms: 100,
            on_group_lost: OnGroupLost::Stop,
            undelegated: Undelegated::Refuse,
            policy: PolicySection::default(),
            lc: LcSection::default(),
            signal: SignalSection::default(),
            guard: GuardSection::default(),
            freeze: FreezeSection::default(),
            blind: BlindSection::default(),
            auto: AutoSection::default(),
            metrics: MetricsSection::default(),
            memory: MemorySection::default(),
            io: IoSection::default(),
            egress: EgressSection::default(),
            batch: Vec::new(),
        }
    }
}

/// `page`: the signal page. Either `page = "PATH"` (the path alone) or a
/// `[page]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageSection {
    /// The page file (default `/dev/shm/elfen`, where `elfen status` and
    /// `elfen ctl` look first; a name without `/` lives in `/dev/shm`).
    pub path: PathBuf,
    /// The group whose members may attach cooperative batch threads (write
    /// the page's batch lines): a group name or a gid. Default: none, so
    /// only the daemon's user (root) writes them; everyone may read.
    pub batch_group: Option<GroupRef>,
}

impl Default for PageSection {
    fn default() -> Self {
        PageSection {
            path: PathBuf::from(DEFAULT_PAGE),
            batch_group: None,
        }
    }
}

/// The `[page]` table's keys (unknown keys refused).
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PageTable {
    path: PathBuf,
    batch_group: Option<GroupRef>,
}

impl Default for PageTable {
    fn default() -> Self {
        let d = PageSection::default();
        PageTable {
            path: d.path,
            batch_group: d.batch_group,
        }
    }
}

impl<'de> Deserialize<'de> for PageSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = PageSection;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a page path (page = \"/dev/shm/elfen\") or a [page] table")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PageSection, E> {
                Ok(PageSection {
                    path: PathBuf::from(v),
                    batch_group: None,
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<PageSection, A::Error> {
                let t = PageTable::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Ok(PageSection {
                    path: t.path,
                    batch_group: t.batch_group,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A group, by name or by id (`batch_group = "elfen-batch"` or `= 1001`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GroupRef {
    /// A gid.
    Id(u32),
    /// A group name (or a gid written as a string).
    Name(String),
}

impl std::fmt::Display for GroupRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupRef::Id(g) => write!(f, "gid {g}"),
            GroupRef::Name(n) => write!(f, "{n:?}"),
        }
    }
}

/// `on_group_lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnGroupLost {
    /// Restore everything and exit with `health::EXIT_GROUP_LOST`.
    #[default]
    Stop,
    /// Keep running; the group is marked lost.
    Continue,
}

/// `undelegated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Undelegated {
    /// Refuse to start commands (exit 78), naming the unit to change.
    #[default]
    Refuse,
    /// Make their groups at the root of each hierarchy, with a warning.
    Root,
}

/// `freezer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FreezerChoice {
    /// The hierarchy's default.
    #[default]
    Auto,
    /// v1 `freezer.state`.
    V1,
    /// v2 `cgroup.freeze` (on a hybrid layout: the unified tree's groups).
    V2,
}

/// `[policy]`: the four policies of elfen-policy, unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicySection {
    /// `unmanaged`, `borrow_idle` (default), `fixed_budget`,
    /// `refresh_budget`, `dynamic_refresh`.
    pub kind: PolicyKind,
    /// Co-running budget per period, µs (budget policies; required there).
    pub budget_us: u64,
    /// The LC service's tail-latency objective, µs (optional; a budget must
    /// fit in it: the paper's budget is `SLO − p99 of the LC alone`).
    pub slo_us: Option<u64>,
    /// Dynamic refresh: the LC's IPC alone (needs hardware counters).
    pub ref_ipc: Option<f64>,
    /// How cooperative batch threads nap: `auto` (default), `spin`,
    /// `futex`, `hybrid`, `umwait`, `mwaitx`. Guards always spin.
    pub nap: String,
}

impl Default for PolicySection {
    fn default() -> Self {
        PolicySection {
            kind: PolicyKind::BorrowIdle,
            budget_us: 0,
            slo_us: None,
            ref_ipc: None,
            nap: "auto".into(),
        }
    }
}

impl PolicySection {
    /// The policy as elfen-policy takes it.
    pub fn policy_config(&self) -> PolicyConfig {
        PolicyConfig {
            ref_ipc: self.ref_ipc,
            ..PolicyConfig::budget(self.kind, self.budget_us.saturating_mul(1000))
        }
    }
}

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

/// The keys of `[lc]` and `[[batch]]` that name a group the host's way.
struct HostKeys<'a> {
    unit: &'a Option<String>,
    slice: &'a Option<String>,
    container: &'a Option<String>,
    pod: &'a Option<String>,
    pod_uid: &'a Option<String>,
    qos: Option<QosClass>,
}

/// The one selector among `extra` and the host keys (`None` if none is
/// given; more than one is the caller's error), checked for form.
fn host_selector<const N: usize>(
    section: &str,
    extra: [(&'static str, Option<Selector>); N],
    k: HostKeys<'_>,
) -> Result<Option<(Selector, &'static str)>, ConfigError> {
    let pod = match k.pod {
        Some(p) => Some(
            Selector::pod(p)
                .map_err(|e| ConfigError::new(format!("{section}.pod"), e.to_string()))?,
        ),
        None => None,
    };
    let all = extra.into_iter().chain([
        ("unit", k.unit.clone().map(Selector::Unit)),
        ("slice", k.slice.clone().map(Selector::Slice)),
        ("container", k.container.clone().map(Selector::Container)),
        ("pod", pod),
        ("pod_uid", k.pod_uid.clone().map(Selector::PodUid)),
        ("qos", k.qos.map(Selector::Qos)),
    ]);
    let mut found = None;
    for (key, sel) in all {
        if let Some(sel) = sel {
            sel.validate()
                .map_err(|e| ConfigError::new(format!("{section}.{key}"), e.to_string()))?;
            found.get_or_insert((sel, key));
        }
    }
    Ok(found)
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
        }
    }
}

/// `[signal]`: the LC signal writer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignalSection {
    /// Use the coarse /proc poll source when BPF cannot load (default
    /// true, reported with the reason); false: refuse to start.
    pub fallback: bool,
    /// Poll fallback scan interval, µs (default 1000).
    pub poll_interval_us: u64,
    /// SCHED_FIFO priority of the writer thread (default: the guard
    /// priority plus one, so it preempts a spinning guard to publish the
    /// idle edge); 0 = leave it SCHED_OTHER.
    pub priority: Option<u8>,
    /// CPUs the writer thread may run on (default: the batch lanes, so it
    /// never preempts the LC service on a request lane).
    pub cpus: Option<Vec<u32>>,
    /// BPF: publish a busy edge at the LC task's wake-up, before its
    /// switch-in (default true); false: at the switch-in.
    pub announce_wakeups: bool,
}

impl Default for SignalSection {
    fn default() -> Self {
        SignalSection {
            fallback: true,
            poll_interval_us: 1000,
            priority: None,
            cpus: None,
            announce_wakeups: true,
        }
    }
}

/// `[guard]`: guard threads (mode `guard`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GuardSection {
    /// SCHED_FIFO priority, 1..=98 (default 50).
    pub priority: u8,
    /// While a budget policy co-runs: the longest sleep between checks
    /// after the budget should have expired, µs (default 0 = budget / 8).
    pub recheck_us: u64,
    /// How long a guard (and the writer, on its own batch lane) stays on
    /// the lane through an idle gap of the LC before it gives the lane
    /// back: `"auto"` (one measured sleep/wake cycle, longer when the
    /// service's gaps are shorter than that) or µs (0, the default: never).
    /// Borrow idle only: a budget policy decides the lane itself.
    pub hold_us: HoldSetting,
}

impl Default for GuardSection {
    fn default() -> Self {
        GuardSection {
            priority: DEFAULT_GUARD_PRIORITY,
            recheck_us: 0,
            hold_us: HoldSetting::Us(0),
        }
    }
}

/// `[freeze]`: freeze mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FreezeSection {
    /// How long a freeze may take before it is reported late, ms (default 50).
    pub timeout_ms: u64,
    /// What to do when freezing cannot follow the service (a freeze takes
    /// longer than its busy periods last): `fallback` (default: run the
    /// `fallback` mode instead while that holds), `refuse` (stop, restoring
    /// everything), `warn` (freeze anyway, saying so).
    pub unfit: Unfit,
    /// The mode a freeze group runs while freezing does not fit (and while
    /// the service is watched at start): `idle` (default: nothing dynamic,
    /// never worse than equal priority), `guard` (the group is then
    /// confined to the batch lanes) or `blind`.
    pub fallback: Mode,
    /// How long the service is watched at start before freezing is judged, ms.
    pub observe_ms: u64,
}

impl Default for FreezeSection {
    fn default() -> Self {
        FreezeSection {
            timeout_ms: 50,
            unfit: Unfit::Fallback,
            fallback: Mode::Idle,
            observe_ms: 1000,
        }
    }
}

/// `[freeze] unfit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Unfit {
    /// Stop the daemon (everything restored), saying why.
    Refuse,
    /// Run `[freeze] fallback` instead while freezing does not fit.
    #[default]
    Fallback,
    /// Freeze anyway, saying so.
    Warn,
}

impl Unfit {
    /// The name in configs.
    pub fn name(self) -> &'static str {
        match self {
            Unfit::Refuse => "refuse",
            Unfit::Fallback => "fallback",
            Unfit::Warn => "warn",
        }
    }
}

/// `[blind]`: PerfIso's blind isolation (mode `blind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlindSection {
    /// CPUs kept free of batch for the LC's bursts (PerfIso's B; default 0).
    pub buffer_cores: u32,
    /// A larger allocation waits this long, µs (default 2000; shrinks are
    /// at once).
    pub grow_hold_us: u64,
    /// What wakes the controller: `events` (default: each busy edge the
    /// writer sees, on any CPU; the slots read every `poll_us` as a safety
    /// net) or `poll` (the slots read every `poll_us`, nothing else).
    pub wake: BlindWake,
    /// The slots are read at least this often, µs (default 2000: with
    /// `wake = "events"` a safety net; with `poll` the reaction's bound).
    pub poll_us: u64,
}

impl Default for BlindSection {
    fn default() -> Self {
        BlindSection {
            buffer_cores: 0,
            grow_hold_us: 2000,
            wake: BlindWake::Events,
            poll_us: 2000,
        }
    }
}

/// `[blind] wake`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BlindWake {
    /// Woken at each busy edge; polled every `poll_us` besides.
    #[default]
    Events,
    /// Polled every `poll_us` only.
    Poll,
}

/// `[auto]`: mode `auto` (HIS's scheduler). The group starts at the first
/// mode of the ladder; every `period_ms` the batch steps aside (frozen)
/// for `solo_ms`, and the LC's mean busy period then (solo) is compared
/// with the rest of the period (co-run): contention = co-run / solo − 1.
/// Above `escalate_pct` in `confirm` periods in a row, the next mode up
/// that fits; below `settle_pct` for `step_down_s`, a trial of the mode
/// below (back up at once if contention returns, and the next trial
/// waits twice as long). Switches are at least `min_dwell_s` apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoSection {
    /// The modes, cheapest first (default `["idle", "guard"]`; any of
    /// `idle`, `guard`, `freeze`, `blind`).
    pub ladder: Vec<Mode>,
    /// One co-run window and one solo window, ms (default 5000).
    pub period_ms: u64,
    /// The solo window: the batch stepped aside, ms (default 250).
    pub solo_ms: u64,
    /// Contention above which the next mode is tried, % (default 10).
    pub escalate_pct: f64,
    /// Contention below which a cheaper mode may be tried, % (default 5).
    pub settle_pct: f64,
    /// Periods in a row above `escalate_pct` before escalating (default 2).
    pub confirm: u32,
    /// Time below `settle_pct` before a cheaper mode is tried, s (default 30).
    pub step_down_s: u64,
    /// Least time between two switches, s (default 10).
    pub min_dwell_s: u64,
    /// LC busy periods a window needs to count (default 50).
    pub min_periods: u64,
}

impl Default for AutoSection {
    fn default() -> Self {
        AutoSection {
            ladder: vec![Mode::Idle, Mode::Guard],
            period_ms: 5000,
            solo_ms: 250,
            escalate_pct: 10.0,
            settle_pct: 5.0,
            confirm: 2,
            step_down_s: 30,
            min_dwell_s: 10,
            min_periods: 50,
        }
    }
}

/// Default metrics address (`metrics.listen`).
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";

/// `[metrics]`: the Prometheus endpoint (docs/operations.md lists the
/// metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSection {
    /// Address of `http://…/metrics` (default `127.0.0.1:9464`; port 0
    /// picks a free one, printed at start); `""` turns the endpoint off.
    pub listen: String,
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            listen: DEFAULT_METRICS_LISTEN.to_string(),
        }
    }
}

impl MetricsSection {
    /// The address, `None` when off.
    pub fn addr(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        if self.listen.is_empty() {
            return Ok(None);
        }
        self.listen.parse().map(Some).map_err(|e| {
            ConfigError::new(
                "metrics.listen",
                format!(
                    "{:?} is not an address like 127.0.0.1:9464 ({e})",
                    self.listen
                ),
            )
        })
    }
}

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
        }
    }

    /// Whether a group in this mode may run guard threads (as its mode,
    /// as a rung of `auto`'s ladder, or as freeze mode's fallback).
    pub fn may_guard(self, c: &Config) -> bool {
        match self {
            Mode::Guard => true,
            Mode::Auto => c.auto.ladder.contains(&Mode::Guard),
            Mode::Freeze => c.freeze.fallback == Mode::Guard,
            _ => false,
        }
    }

    /// The modes a group in this mode may switch between.
    pub fn rungs(self, c: &Config) -> Vec<Mode> {
        match self {
            Mode::Auto => c.auto.ladder.clone(),
            Mode::Freeze if c.freeze.unfit != Unfit::Warn => vec![c.freeze.fallback, Mode::Freeze],
            m => vec![m],
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a group is made to yield to normal threads (modes `guard`, `idle`).
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
    /// `cooperative`, `guard`, `freeze`, `idle` or `blind`.
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
    /// request lane).
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

    /// Whether the group is confined to the batch lanes.
    pub fn confined(&self) -> bool {
        self.confine
            .unwrap_or(matches!(self.mode, Mode::Guard | Mode::Auto))
    }
}

impl Config {
    /// Parses a configuration from TOML text (syntax and field names only).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let msg = e.message().to_string();
            let field = e
                .span()
                .map(|s| locate(text, s.start))
                .unwrap_or_else(|| "config".into());
            ConfigError::new(field, msg)
        })
    }

    /// Reads and parses `path`, then runs [`Config::check`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(path.display().to_string(), format!("cannot read: {e}"))
        })?;
        let c = Config::parse(&text)
            .map_err(|e| ConfigError::new(format!("{} ({})", path.display(), e.field), e.reason))?;
        c.check()?;
        Ok(c)
    }

    /// Every check that needs only the file: exactly one LC selector,
    /// batch groups named uniquely with exactly one of `cgroup` / `command`,
    /// values in range, a valid policy. The first problem is returned.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.heartbeat_ms == 0 {
            return Err(ConfigError::new("heartbeat_ms", "must be at least 1"));
        }
        if let Some(p) = &self.pairs {
            elfen_topo::parse_pair_spec(p).map_err(|e| ConfigError::new("pairs", e.to_string()))?;
        }
        if self.page.path.as_os_str().is_empty() {
            return Err(ConfigError::new("page", "must not be empty"));
        }
        if let Some(GroupRef::Name(n)) = &self.page.batch_group {
            if n.is_empty() {
                return Err(ConfigError::new(
                    "page.batch_group",
                    "must not be empty (a group name or a gid)",
                ));
            }
        }
        if self.state_file.as_os_str().is_empty() || self.state_file.is_dir() {
            return Err(ConfigError::new("state_file", "must name a file"));
        }
        self.check_policy()?;
        self.check_lc()?;
        self.check_threads()?;
        if self.freeze.timeout_ms == 0 {
            return Err(ConfigError::new("freeze.timeout_ms", "must be at least 1"));
        }
        self.metrics.addr()?;
        crate::isolation::config::check_tables(&self.memory, &self.io)?;
        if self.blind.poll_us < 20 {
            return Err(ConfigError::new("blind.poll_us", "must be at least 20"));
        }
        self.check_modes()?;
        if self.batch.is_empty() {
            return Err(ConfigError::new(
                "batch",
                "no batch group: add at least one [[batch]] with a mode and a cgroup or command",
            ));
        }
        for (i, b) in self.batch.iter().enumerate() {
            check_batch(i, b, &self.batch[..i])?;
        }
        Ok(())
    }

    fn check_policy(&self) -> Result<(), ConfigError> {
        let p = &self.policy;
        p.policy_config()
            .validate()
            .map_err(|e| ConfigError::new("policy.ref_ipc", e.to_string()))?;
        if p.kind.uses_budget() && p.budget_us == 0 {
            return Err(ConfigError::new(
                "policy.budget_us",
                format!(
                    "{} needs a budget (the paper's: SLO − p99 of the LC alone)",
                    p.kind
                ),
            ));
        }
        if let Some(slo) = p.slo_us {
            if slo == 0 {
                return Err(ConfigError::new("policy.slo_us", "must be at least 1"));
            }
            if p.budget_us >= slo {
                return Err(ConfigError::new(
                    "policy.budget_us",
                    format!(
                        "{} µs does not fit in the SLO of {slo} µs (a budget is SLO headroom)",
                        p.budget_us
                    ),
                ));
            }
        }
        p.nap
            .parse::<NapChoice>()
            .map_err(|e| ConfigError::new("policy.nap", e.to_string()))?;
        Ok(())
    }

    fn check_lc(&self) -> Result<(), ConfigError> {
        let lc = &self.lc;
        let n = [
            lc.pid.is_some(),
            lc.cgroup.is_some(),
            lc.comm.is_some(),
            lc.unit.is_some(),
            lc.slice.is_some(),
            lc.container.is_some(),
            lc.pod.is_some(),
            lc.pod_uid.is_some(),
            lc.qos.is_some(),
        ]
        .into_iter()
        .filter(|&b| b)
        .count();
        if n != 1 {
            return Err(ConfigError::new(
                "lc",
                format!(
                    "name the LC service by exactly one of pid, comm, cgroup, unit, slice, \
                     container, pod, pod_uid, qos ({n} given)"
                ),
            ));
        }
        let group = lc.selector()?;
        if lc.pid == Some(0) {
            return Err(ConfigError::new("lc.pid", "0 is not a process"));
        }
        if let Some(c) = &lc.cgroup {
            if !c.is_absolute() {
                return Err(ConfigError::new(
                    "lc.cgroup",
                    format!("{} must be an absolute path", c.display()),
                ));
            }
        }
        if let Some(c) = &lc.comm {
            if c.is_empty() || c.contains('/') {
                return Err(ConfigError::new(
                    "lc.comm",
                    format!("{c:?}: a command name, without '/'"),
                ));
            }
        }
        if let Some(u) = &lc.user {
            if u.trim().is_empty() {
                return Err(ConfigError::new("lc.user", "a user name or uid, not empty"));
            }
            if let Some((_, key)) = &group {
                return Err(ConfigError::new(
                    "lc.user",
                    format!(
                        "applies to pid and comm, not {key}: a group's processes are what its \
                         owner put there"
                    ),
                ));
            }
        }
        for (f, v) in [
            ("lc.liveness_ms", lc.liveness_ms),
            ("lc.rescan_ms", lc.rescan_ms),
            ("lc.lost_rescan_ms", lc.lost_rescan_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::new(f, "must be at least 1"));
            }
        }
        Ok(())
    }

    fn check_threads(&self) -> Result<(), ConfigError> {
        if !(1..=98).contains(&self.guard.priority) {
            return Err(ConfigError::new(
                "guard.priority",
                format!(
                    "{} is not a SCHED_FIFO priority in 1..=98 (the writer runs one above)",
                    self.guard.priority
                ),
            ));
        }
        if let Some(p) = self.signal.priority {
            if p > 99 {
                return Err(ConfigError::new(
                    "signal.priority",
                    format!("{p}: SCHED_FIFO priorities are 1..=99 (0 = SCHED_OTHER)"),
                ));
            }
        }
        let guards = self.batch.iter().any(|b| b.mode.may_guard(self));
        if guards && self.writer_priority() <= self.guard.priority {
            return Err(ConfigError::new(
                "signal.priority",
                format!(
                    "{} must be above guard.priority ({}): the writer has to preempt a spinning guard to publish the idle edge",
                    self.writer_priority(),
                    self.guard.priority
                ),
            ));
        }
        if self.signal.poll_interval_us < 100 {
            return Err(ConfigError::new(
                "signal.poll_interval_us",
                "must be at least 100",
            ));
        }
        if self.signal.cpus.as_ref().is_some_and(|c| c.is_empty()) {
            return Err(ConfigError::new("signal.cpus", "must not be empty"));
        }
        Ok(())
    }

    /// `[freeze]`'s fallback and `[auto]`'s ladder and thresholds.
    fn check_modes(&self) -> Result<(), ConfigError> {
        if !matches!(self.freeze.fallback, Mode::Idle | Mode::Guard | Mode::Blind) {
            return Err(ConfigError::new(
                "freeze.fallback",
                format!(
                    "{}: one of idle, guard, blind (a mode that follows any service)",
                    self.freeze.fallback
                ),
            ));
        }
        if self.freeze.observe_ms == 0 {
            return Err(ConfigError::new("freeze.observe_ms", "must be at least 1"));
        }
        let a = &self.auto;
        if a.ladder.is_empty() {
            return Err(ConfigError::new(
                "auto.ladder",
                "name at least one mode, cheapest first (e.g. [\"idle\", \"guard\"])",
            ));
        }
        for (i, m) in a.ladder.iter().enumerate() {
            if !matches!(m, Mode::Idle | Mode::Guard | Mode::Freeze | Mode::Blind) {
                return Err(ConfigError::new(
                    "auto.ladder",
                    format!("{m}: one of idle, guard, freeze, blind"),
                ));
            }
            if a.ladder[..i].contains(m) {
                return Err(ConfigError::new(
                    "auto.ladder",
                    format!("{m} is named twice"),
                ));
            }
        }
        if a.solo_ms == 0 || a.period_ms < 4 * a.solo_ms {
            return Err(ConfigError::new(
                "auto.solo_ms",
                format!(
                    "{} ms: at least 1, and at most a quarter of period_ms ({} ms): the batch \
                     steps aside that long every period",
                    a.solo_ms, a.period_ms
                ),
            ));
        }
        if !(a.escalate_pct.is_finite() && a.settle_pct.is_finite())
            || a.settle_pct < 0.0
            || a.escalate_pct <= a.settle_pct
        {
            return Err(ConfigError::new(
                "auto.escalate_pct",
                format!(
                    "{} %: must be above settle_pct ({} %, at least 0): between the two nothing \
                     changes (the hysteresis)",
                    a.escalate_pct, a.settle_pct
                ),
            ));
        }
        if a.confirm == 0 {
            return Err(ConfigError::new("auto.confirm", "must be at least 1"));
        }
        if a.min_periods == 0 {
            return Err(ConfigError::new("auto.min_periods", "must be at least 1"));
        }
        Ok(())
    }

    /// The writer thread's SCHED_FIFO priority (0 = SCHED_OTHER).
    pub fn writer_priority(&self) -> u8 {
        self.signal.priority.unwrap_or(self.guard.priority + 1)
    }
}

fn check_batch(i: usize, b: &BatchSection, before: &[BatchSection]) -> Result<(), ConfigError> {
    let f = |k: &str| format!("batch[{i}].{k}");
    if b.name.is_empty()
        || !b
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ConfigError::new(
            f("name"),
            format!("{:?}: letters, digits, '-' and '_' only, not empty", b.name),
        ));
    }
    if before.iter().any(|o| o.name == b.name) {
        return Err(ConfigError::new(
            f("name"),
            format!("{:?} is used by an earlier group", b.name),
        ));
    }
    if b.mode == Mode::Blind && b.confine == Some(true) {
        return Err(ConfigError::new(
            f("confine"),
            "blind isolation drives the group's cpuset itself: leave confine out",
        ));
    }
    let named = [
        b.cgroup.is_some(),
        b.command.is_some(),
        b.slice.is_some(),
        b.unit.is_some(),
        b.container.is_some(),
        b.pod.is_some(),
        b.pod_uid.is_some(),
        b.qos.is_some(),
    ]
    .into_iter()
    .filter(|&x| x)
    .count();
    if named != 1 {
        return Err(ConfigError::new(
            format!("batch[{i}]"),
            "give exactly one of cgroup (an existing group), command (started by the daemon), \
             slice, unit, container, pod, pod_uid or qos (the host's name for an existing group)",
        ));
    }
    if b.qos == Some(QosClass::Guaranteed) {
        return Err(ConfigError::new(
            f("qos"),
            "guaranteed pods have no group of their own class (each sits directly under \
             kubepods): a batch group is one group — name the pod (pod, pod_uid) or use \
             besteffort / burstable",
        ));
    }
    b.selector(&format!("batch[{i}]"))?;
    match (&b.cgroup, &b.command) {
        (None, None) => {}
        (Some(_), Some(_)) => unreachable!("counted: exactly one"),
        (Some(g), None) => {
            if g.trim_matches('/').is_empty() {
                return Err(ConfigError::new(
                    f("cgroup"),
                    "the root group cannot be a batch group",
                ));
            }
            elfen_cgroup::GroupPath::new(g)
                .map_err(|e| ConfigError::new(f("cgroup"), e.to_string()))?;
        }
        (None, Some(argv)) => {
            if argv.first().is_none_or(|p| p.is_empty()) {
                return Err(ConfigError::new(f("command"), "empty command"));
            }
        }
    }
    if b.idle_method != IdleMethod::Auto && !matches!(b.mode, Mode::Guard | Mode::Idle | Mode::Auto)
    {
        return Err(ConfigError::new(
            f("idle_method"),
            format!(
                "only modes guard, idle and auto use it, not {}",
                b.mode.name()
            ),
        ));
    }
    if b.mode == Mode::Auto && b.confine == Some(false) {
        return Err(ConfigError::new(
            f("confine"),
            "auto needs the group confined to the batch lanes (its guard and idle rungs do)",
        ));
    }
    crate::isolation::config::check_batch(&f, b.isolation_keys())
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

/// `line L, column C` of byte offset `at` in `text`, for parse errors.
fn locate(text: &str, at: usize) -> String {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {col}")
}
