//! # elfen-policy — what a batch thread does at a check
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! A **policy** decides, each time a batch thread's *check* leaves its fast
//! path, whether the thread keeps running batch code ([`Decision::Run`]) or
//! *naps* ([`Decision::Nap`]) until its partner request lane changes state.
//!
//! Policies here are pure state machines: [`transition`] maps
//! `(config, state, observation)` to `(decision, next state)`. There is no
//! clock (the caller passes `now_ns`), no I/O, no allocation and no
//! interior mutability, so the runtime and the simulator share this code
//! unchanged, and the tests can walk every transition of the paper's
//! Figure 9 (see `tests/figure9.rs`).
//!
//! The mechanism around a policy (reading the signal page, the fast-path
//! check, napping, the kill switch) lives in `elfen-runtime`; this crate only
//! holds the decision.
#![deny(missing_docs)]

pub mod blind;
pub mod dwrr;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What the batch thread does after a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Keep executing batch code.
    Run,
    /// Step aside: nap until the request lane's signals change.
    Nap,
}

/// The signals a batch thread observes of its partner request lane at one
/// check (Figure 9's `request_lane_idle`, `queue_len`, `running_request`,
/// the LC lane's IPC) plus the time of the check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// A request is executing on the request lane.
    pub lc_busy: bool,
    /// Requests waiting in the LC service's queue (not counting the running one).
    pub queue_len: u32,
    /// Identifies the request now running (any value that changes from one
    /// request to the next, e.g. a begin counter); meaningless when idle.
    pub running_request: u64,
    /// Time of the check in nanoseconds on any monotonic clock.
    pub now_ns: u64,
    /// Instructions per cycle of the request lane over the last sample, when
    /// hardware counters exist; `None` where they do not (dynamic refresh then
    /// behaves as refresh budget).
    pub lc_ipc: Option<f64>,
}

impl Observation {
    /// An observation of an idle request lane with an empty queue at `now_ns`.
    pub fn idle(now_ns: u64) -> Self {
        Observation {
            lc_busy: false,
            queue_len: 0,
            running_request: 0,
            now_ns,
            lc_ipc: None,
        }
    }

    /// An observation of request `request` running with `queue_len` waiting.
    pub fn busy(request: u64, queue_len: u32, now_ns: u64) -> Self {
        Observation {
            lc_busy: true,
            queue_len,
            running_request: request,
            now_ns,
            lc_ipc: None,
        }
    }
}

/// The policies. The numeric ids are the values stored in the signal page's
/// controller line (`docs/protocol.md`); never renumber them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// Always run: batch threads ignore the request lane (the naive co-run
    /// baseline; also what an instrumented program does with no controller).
    Unmanaged,
    /// Figure 9a: run only while the request lane is idle (mutual exclusion).
    BorrowIdle,
    /// Figure 9b: also co-run with the first request after an idle period for
    /// at most `budget_ns`.
    FixedBudget,
    /// Figure 9c: fixed budget whose budget restarts when a new request starts
    /// while the queue is empty.
    RefreshBudget,
    /// Figure 9d: refresh budget with the budget scaled by
    /// `ref_ipc / (ref_ipc - lc_ipc)`.
    DynamicRefresh,
}

impl PolicyKind {
    /// Every policy, in the order of the paper.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Unmanaged,
        PolicyKind::BorrowIdle,
        PolicyKind::FixedBudget,
        PolicyKind::RefreshBudget,
        PolicyKind::DynamicRefresh,
    ];

    /// The id stored in the signal page's controller line.
    pub fn id(self) -> u32 {
        use elfen_shm::policy as id;
        match self {
            PolicyKind::Unmanaged => id::UNMANAGED,
            PolicyKind::BorrowIdle => id::BORROW_IDLE,
            PolicyKind::FixedBudget => id::FIXED_BUDGET,
            PolicyKind::RefreshBudget => id::REFRESH_BUDGET,
            PolicyKind::DynamicRefresh => id::DYNAMIC_REFRESH,
        }
    }

    /// The policy with signal-page id `id`, if there is one.
    pub fn from_id(id: u32) -> Option<PolicyKind> {
        PolicyKind::ALL.into_iter().find(|k| k.id() == id)
    }

    /// The snake_case name used in configs, on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Unmanaged => "unmanaged",
            PolicyKind::BorrowIdle => "borrow_idle",
            PolicyKind::FixedBudget => "fixed_budget",
            PolicyKind::RefreshBudget => "refresh_budget",
            PolicyKind::DynamicRefresh => "dynamic_refresh",
        }
    }

    /// Whether the policy spends a co-running budget (and so needs `budget_ns`).
    pub fn uses_budget(self) -> bool {
        matches!(
            self,
            PolicyKind::FixedBudget | PolicyKind::RefreshBudget | PolicyKind::DynamicRefresh
        )
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name() == norm)
            .ok_or_else(|| PolicyError::UnknownPolicy(s.to_string()))
    }
}

/// Errors in a policy configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// The name is not one of [`PolicyKind::ALL`].
    #[error(
        "unknown policy {0:?}: expected one of unmanaged, borrow_idle, fixed_budget, refresh_budget, dynamic_refresh"
    )]
    UnknownPolicy(String),
    /// `ref_ipc` must be a positive finite number.
    #[error("policy.ref_ipc must be a positive finite number, got {0}")]
    BadRefIpc(f64),
    /// `max_budget_ratio` must be finite and at least 1.
    #[error("policy.max_budget_ratio must be finite and >= 1, got {0}")]
    BadMaxRatio(f64),
}

/// Default cap on dynamic refresh's budget scaling (see [`PolicyConfig::max_budget_ratio`]).
pub const DEFAULT_MAX_BUDGET_RATIO: f64 = 4.0;

fn default_max_ratio() -> f64 {
    DEFAULT_MAX_BUDGET_RATIO
}

/// A policy and its parameters, as written in configs
/// (`kind = "fixed_budget"`, `budget_ns = 2000000`, …).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Which policy.
    pub kind: PolicyKind,
    /// Co-running budget per period in nanoseconds (budget policies only; the
    /// paper derives it from SLO headroom: `SLO - p99 alone`).
    #[serde(default)]
    pub budget_ns: u64,
    /// Dynamic refresh: the request lane's IPC when it runs alone (profiled
    /// beforehand). `None` = no reference, the budget is not scaled.
    #[serde(default)]
    pub ref_ipc: Option<f64>,
    /// Dynamic refresh: the budget scale `ref_ipc / (ref_ipc - lc_ipc)` is
    /// clamped to `[1, max_budget_ratio]` (it diverges as `lc_ipc -> ref_ipc`).
    #[serde(default = "default_max_ratio")]
    pub max_budget_ratio: f64,
}

impl PolicyConfig {
    /// A policy without a budget (`unmanaged`, `borrow_idle`).
    pub fn simple(kind: PolicyKind) -> Self {
        PolicyConfig {
            kind,
            budget_ns: 0,
            ref_ipc: None,
            max_budget_ratio: DEFAULT_MAX_BUDGET_RATIO,
        }
    }

    /// A policy with a co-running budget of `budget_ns`.
    pub fn budget(kind: PolicyKind, budget_ns: u64) -> Self {
        PolicyConfig {
            budget_ns,
            ..PolicyConfig::simple(kind)
        }
    }

    /// Checks the parameters; the runtime and simulator call this once at setup.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if let Some(r) = self.ref_ipc {
            if !(r.is_finite() && r > 0.0) {
                return Err(PolicyError::BadRefIpc(r));
            }
        }
        if !(self.max_budget_ratio.is_finite() && self.max_budget_ratio >= 1.0) {
            return Err(PolicyError::BadMaxRatio(self.max_budget_ratio));
        }
        Ok(())
    }

    /// The budget that applies now: `budget_ns`, scaled for dynamic refresh
    /// by `ref_ipc / (ref_ipc - lc_ipc)` clamped to `[1, max_budget_ratio]`
    /// when both IPCs are known (Figure 9d lines 7–8).
    pub fn effective_budget_ns(&self, lc_ipc: Option<f64>) -> u64 {
        if self.kind != PolicyKind::DynamicRefresh {
            return self.budget_ns;
        }
        let (Some(ref_ipc), Some(lc_ipc)) = (self.ref_ipc, lc_ipc) else {
            return self.budget_ns;
        };
        let ratio = if !lc_ipc.is_finite() || lc_ipc < 0.0 {
            1.0
        } else if lc_ipc >= ref_ipc {
            self.max_budget_ratio
        } else {
            (ref_ipc / (ref_ipc - lc_ipc)).clamp(1.0, self.max_budget_ratio)
        };
        (self.budget_ns as f64 * ratio) as u64
    }
}

/// Figure 9b's per-lane `lane_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LaneStatus {
    /// No budget left: nap whenever the request lane is busy.
    #[default]
    Normal,
    /// The request lane went idle with an empty queue: the next request may be
    /// co-run for a budget.
    NewPeriod,
    /// Co-running with a request since `start_ns`.
    CoRunning,
}

/// A batch lane's policy state (Figure 9's per-CPU variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct PolicyState {
    /// `lane_status`.
    pub status: LaneStatus,
    /// `start_stamp`: when the current co-running budget started (ns).
    pub start_ns: u64,
    /// `last_request`: the request the current budget was granted for.
    pub last_request: u64,
}

/// One step of a policy: the decision for observation `obs` and the next state.
///
/// This is Figure 9 with the fast path and slow path folded together (the
/// runtime's fast path only skips calls whose observation cannot change the
/// outcome). One deliberate difference: when a budget expires (9b line 24)
/// the paper sets `NORMAL` and naps at the *next* check; here the same check
/// naps, so co-running never exceeds the budget by a check interval.
pub fn transition(
    cfg: &PolicyConfig,
    state: PolicyState,
    obs: &Observation,
) -> (Decision, PolicyState) {
    match cfg.kind {
        PolicyKind::Unmanaged => (Decision::Run, state),
        // 9a: `if (!request_lane_idle) nanonap();`
        PolicyKind::BorrowIdle => {
            if obs.lc_busy {
                (Decision::Nap, state)
            } else {
                (Decision::Run, state)
            }
        }
        PolicyKind::FixedBudget | PolicyKind::RefreshBudget | PolicyKind::DynamicRefresh => {
            budget_transition(cfg, state, obs)
        }
    }
}

/// Figures 9b–9d.
fn budget_transition(
    cfg: &PolicyConfig,
    mut s: PolicyState,
    obs: &Observation,
) -> (Decision, PolicyState) {
    let refresh = matches!(
        cfg.kind,
        PolicyKind::RefreshBudget | PolicyKind::DynamicRefresh
    );
    if !obs.lc_busy {
        // 9b line 8: idle with an empty queue opens a new period.
        if obs.queue_len == 0 {
            s.status = LaneStatus::NewPeriod;
        }
        // Idle with requests queued (a request just ended, the next not yet
        // begun): neither branch of the check fires; keep running.
        return (Decision::Run, s);
    }
    // 9b line 10: the request lane is busy, run the slow path.
    match s.status {
        // 9b line 15.
        LaneStatus::Normal => (Decision::Nap, s),
        // 9b line 18 (9c line 10: remember the request the budget is for).
        LaneStatus::NewPeriod => {
            s.status = LaneStatus::CoRunning;
            s.start_ns = obs.now_ns;
            if refresh {
                s.last_request = obs.running_request;
            }
            (Decision::Run, s)
        }
        LaneStatus::CoRunning => {
            // 9c lines 13–17: a new request started with nobody queued
            // behind it, so the budget may be spent again on it.
            if refresh && obs.running_request != s.last_request && obs.queue_len == 0 {
                s.last_request = obs.running_request;
                s.start_ns = obs.now_ns;
            }
            // 9b line 24 / 9d line 9.
            let budget = cfg.effective_budget_ns(obs.lc_ipc);
            if obs.now_ns.saturating_sub(s.start_ns) >= budget {
                s.status = LaneStatus::Normal;
                (Decision::Nap, s)
            } else {
                (Decision::Run, s)
            }
        }
    }
}

/// A policy with its state: what one batch thread (runtime) or one batch lane
/// (simulator) carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    cfg: PolicyConfig,
    state: PolicyState,
}

impl Policy {
    /// A policy in its initial state (`NORMAL`), after validating `cfg`.
    pub fn new(cfg: PolicyConfig) -> Result<Self, PolicyError> {
        cfg.validate()?;
        Ok(Policy {
            cfg,
            state: PolicyState::default(),
        })
    }

    /// Runs one check: returns the decision and advances the state.
    #[inline]
    pub fn step(&mut self, obs: &Observation) -> Decision {
        let (d, next) = transition(&self.cfg, self.state, obs);
        self.state = next;
        d
    }

    /// The configuration.
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// The current state.
    pub fn state(&self) -> PolicyState {
        self.state
    }

    /// Whether the decision can change with time alone, without any signal
    /// changing: true while co-running on a budget (expiry is a matter of
    /// time). The runtime then sends every check to the slow path; otherwise
    /// a check whose signals are unchanged cannot change the decision.
    #[inline]
    pub fn time_sensitive(&self) -> bool {
        self.state.status == LaneStatus::CoRunning
    }

    /// Replaces the configuration (the controller changed it) and resets the
    /// state to `NORMAL`, so a new budget is never mixed with an old period.
    pub fn reconfigure(&mut self, cfg: PolicyConfig) -> Result<(), PolicyError> {
        cfg.validate()?;
        self.cfg = cfg;
        self.state = PolicyState::default();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_stable() {
        let ids: Vec<u32> = PolicyKind::ALL.iter().map(|k| k.id()).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        for k in PolicyKind::ALL {
            assert_eq!(PolicyKind::from_id(k.id()), Some(k));
            assert_eq!(k.name().parse::<PolicyKind>().unwrap(), k);
        }
        assert_eq!(PolicyKind::from_id(5), None);
        assert_eq!(
            "Borrow-Idle".parse::<PolicyKind>().unwrap(),
            PolicyKind::BorrowIdle
        );
        let err = "greedy".parse::<PolicyKind>().unwrap_err();
        assert!(err.to_string().contains("\"greedy\""), "{err}");
    }

    #[test]
    fn validate_rejects_bad_parameters() {
        let mut c = PolicyConfig::budget(PolicyKind::DynamicRefresh, 10);
        c.ref_ipc = Some(0.0);
        assert_eq!(c.validate(), Err(PolicyError::BadRefIpc(0.0)));
        c.ref_ipc = Some(f64::NAN);
        assert!(c.validate().is_err());
        c.ref_ipc = Some(2.0);
        c.max_budget_ratio = 0.5;
        assert_eq!(c.validate(), Err(PolicyError::BadMaxRatio(0.5)));
        c.max_budget_ratio = 3.0;
        assert!(c.validate().is_ok());
        assert!(
            Policy::new(PolicyConfig {
                max_budget_ratio: f64::INFINITY,
                ..c
            })
            .is_err()
        );
    }

    #[test]
    fn effective_budget_scales_only_for_dynamic_refresh() {
        let mut c = PolicyConfig::budget(PolicyKind::DynamicRefresh, 1000);
        assert_eq!(
            c.effective_budget_ns(Some(1.0)),
            1000,
            "no reference IPC: unscaled"
        );
        c.ref_ipc = Some(2.0);
        assert_eq!(c.effective_budget_ns(None), 1000, "no counters: unscaled");
        assert_eq!(c.effective_budget_ns(Some(1.0)), 2000, "2 / (2 - 1)");
        assert_eq!(c.effective_budget_ns(Some(0.0)), 1000, "2 / 2");
        assert_eq!(
            c.effective_budget_ns(Some(1.9)),
            4000,
            "20x clamped to the 4x cap"
        );
        assert_eq!(c.effective_budget_ns(Some(2.5)), 4000, "lc above ref: cap");
        assert_eq!(c.effective_budget_ns(Some(f64::NAN)), 1000);
        let fixed = PolicyConfig {
            kind: PolicyKind::RefreshBudget,
            ..c
        };
        assert_eq!(fixed.effective_budget_ns(Some(1.0)), 1000);
    }

    #[test]
    fn config_parses_from_toml_with_defaults_and_rejects_unknown_fields() {
        let c: PolicyConfig =
            toml::from_str("kind = \"refresh_budget\"\nbudget_ns = 5000").unwrap();
        assert_eq!(c, PolicyConfig::budget(PolicyKind::RefreshBudget, 5000));
        let e = toml::from_str::<PolicyConfig>("kind = \"borrow_idle\"\nbudget = 5").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let e = toml::from_str::<PolicyConfig>("kind = \"nope\"").unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }
}
