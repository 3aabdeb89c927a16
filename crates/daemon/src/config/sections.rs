//! The tables of the threads and modes: `[policy]`, `[signal]`, `[guard]`,
//! `[freeze]`, `[blind]`, `[auto]` and `[metrics]`, with their defaults.

use super::{HoldSetting, Mode};
use crate::error::ConfigError;
use elfen_policy::{PolicyConfig, PolicyKind};
use serde::{Deserialize, Serialize};

/// Default guard priority (`guard.priority`, SCHED_FIFO).
pub const DEFAULT_GUARD_PRIORITY: u8 = 50;

/// Default `guard.spin_max_us`: the longest real-time spin per LC busy
/// period. Short enough that a CPU's kernel workers, RCU callbacks and the
/// LC's own normal threads (a JVM's VM thread ending a safepoint) wait at
/// most this long; long enough to cover the busy periods of services with
/// millisecond requests.
pub const DEFAULT_SPIN_MAX_US: u64 = 10_000;

/// Default `guard.spin_share_pct`: the share of a batch lane real-time
/// spinning may take over time (capped below the kernel's real-time
/// throttling, `crate::rt`).
pub const DEFAULT_SPIN_SHARE_PCT: u8 = 90;

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
    /// The longest spin at SCHED_FIFO per LC busy period, µs (default
    /// 10000): a guard (or the writer holding its lane) past it occupies
    /// at SCHED_OTHER until the next edge, so a CPU's kernel work and the
    /// LC's own normal threads run (`crate::rt`). 100..=1000000.
    pub spin_max_us: u64,
    /// The share of a batch lane spinning at SCHED_FIFO may take over time,
    /// % (default 90; at most 90 % of what the kernel's real-time
    /// throttling allows). 1..=100.
    pub spin_share_pct: u8,
}

impl Default for GuardSection {
    fn default() -> Self {
        GuardSection {
            priority: DEFAULT_GUARD_PRIORITY,
            recheck_us: 0,
            hold_us: HoldSetting::Us(0),
            spin_max_us: DEFAULT_SPIN_MAX_US,
            spin_share_pct: DEFAULT_SPIN_SHARE_PCT,
        }
    }
}

impl GuardSection {
    /// The bound on real-time spinning from these settings and the
    /// kernel's throttling read now, with the sentence that says it.
    pub fn spin_bound(&self) -> (crate::rt::SpinBound, String) {
        crate::rt::SpinBound::resolve(
            self.spin_max_us,
            self.spin_share_pct,
            crate::rt::RtThrottle::read(),
        )
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

/// `[scx]`: mode scx (elfen's sched_ext scheduler).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScxSection {
    /// The mode the group runs when the kernel unloads the scheduler (its
    /// watchdog, an error, SysRq-S) and, with `unavailable = "fallback"`,
    /// on a kernel without sched_ext: `idle` (default) or `guard` (the
    /// group is then confined to the batch lanes).
    pub fallback: Mode,
    /// On a kernel without sched_ext (or with another sched_ext scheduler
    /// loaded): `refuse` (default: `--check` and start fail, naming the
    /// kernel) or `fallback` (run `fallback` instead, said at start).
    pub unavailable: Unavailable,
}

impl Default for ScxSection {
    fn default() -> Self {
        ScxSection {
            fallback: Mode::Idle,
            unavailable: Unavailable::Refuse,
        }
    }
}

/// `[scx] unavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Unavailable {
    /// Refuse the configuration (exit 78), naming the kernel.
    #[default]
    Refuse,
    /// Run `[scx] fallback` instead, said at start.
    Fallback,
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
