//! The daemon's configuration file (TOML): types, documented defaults, and
//! the checks that need nothing but the file itself ([`Config::check`]).
//! Checks against the machine (CPUs, processes, cgroups, the page, the
//! state file) are in [`crate::plan`]; nothing is applied before both pass.
//!
//! The parts: `page` (the signal page and its group), `lc` (the LC
//! service), `host` (a group named the host's way), `sections` (the
//! tables of the threads and modes), `batch` (the batch groups and their
//! modes), `check` ([`Config::check`]).

mod batch;
mod check;
mod host;
mod lc;
mod page;
mod sections;

pub use crate::protection::fit::HoldSetting;
pub use batch::{BatchSection, IdleMethod, Mode};
pub use lc::LcSection;
pub use page::{GroupRef, PageSection};
pub use sections::{
    AutoSection, BlindSection, BlindWake, DEFAULT_GUARD_PRIORITY, DEFAULT_METRICS_LISTEN,
    DEFAULT_SPIN_MAX_US, DEFAULT_SPIN_SHARE_PCT, FreezeSection, GuardSection, MetricsSection,
    PolicySection, ScxSection, SignalSection, Unavailable, Unfit,
};

use crate::error::ConfigError;
use crate::isolation::config::{EgressSection, IoSection, MemorySection};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Default signal page (`page`).
pub const DEFAULT_PAGE: &str = "/dev/shm/elfen";
/// Default state file (`state_file`).
pub const DEFAULT_STATE_FILE: &str = "/run/elfen/daemon-state.json";

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
    /// How long a batch group that follows a unit, container or pod may
    /// be gone (its cgroup removed, waited for) before it counts as lost,
    /// as `on_group_lost` says, ms (default 300000; 0: waited for always).
    pub group_gone_ms: u64,
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
    /// Mode `scx`: its fallback, and what a kernel without sched_ext gets.
    pub scx: ScxSection,
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
            group_gone_ms: 300_000,
            undelegated: Undelegated::Refuse,
            policy: PolicySection::default(),
            lc: LcSection::default(),
            signal: SignalSection::default(),
            guard: GuardSection::default(),
            freeze: FreezeSection::default(),
            blind: BlindSection::default(),
            auto: AutoSection::default(),
            scx: ScxSection::default(),
            metrics: MetricsSection::default(),
            memory: MemorySection::default(),
            io: IoSection::default(),
            egress: EgressSection::default(),
            batch: Vec::new(),
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

    /// The writer thread's SCHED_FIFO priority (0 = SCHED_OTHER).
    pub fn writer_priority(&self) -> u8 {
        self.signal.priority.unwrap_or(self.guard.priority + 1)
    }
}

/// `line L, column C` of byte offset `at` in `text`, for parse errors.
fn locate(text: &str, at: usize) -> String {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {col}")
}
