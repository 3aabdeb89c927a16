//! The one vocabulary of configurations: what runs next to the LC service.
//!
//! The harness (`elfen bench`), the simulator (`elfen sim`), the reports and
//! the daemon name configurations with these values, so a series called
//! `borrow_idle` means the same thing everywhere. Not every producer runs
//! every configuration: [`Config::in_harness`] and [`Config::in_simulator`]
//! say which.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One way of running (or not running) batch work next to the LC service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Config {
    /// The LC service alone: no batch work (the baseline every ratio is to).
    LcAlone,
    /// Batch work as users run it by default: at the LC's priority
    /// (`SCHED_OTHER`), on every lane, no checks, no cgroup.
    Naive,
    /// As naive, but the batch threads run `SCHED_IDLE`, so the OS preempts
    /// them whenever an LC thread wakes on their lane.
    SchedIdle,
    /// Batch confined to the batch lanes by a cpuset cgroup (restricting
    /// cores); on SMT cores, the paper's naive co-location on the sibling.
    Cpuset,
    /// Batch on every lane, capped by a CFS bandwidth quota (restricting
    /// cycles).
    CfsQuota,
    /// The daemon's `idle` mode: batch on every lane in a cgroup whose
    /// `cpu.idle` is set (the group's tasks run as `SCHED_IDLE`), no checks.
    CpuIdle,
    /// The daemon's `guard` mode: unmodified batch at `SCHED_IDLE` on the
    /// batch lanes; a real-time guard thread per batch lane occupies it
    /// while the policy says nap (borrow idle: while the request lane is
    /// busy, as the kernel signal reports it).
    Guard,
    /// The daemon's `freeze` mode: unmodified batch on the batch lanes in a
    /// freezer cgroup, frozen while the policy says nap.
    Freeze,
    /// Batch owns whole cores, the LC the others (simulator).
    StaticPartition,
    /// PerfIso's CPU blind isolation: batch cpuset = all − busy − B buffer
    /// cores (simulator).
    BlindIsolation,
    /// Elfen borrow idle (Figure 9a): batch threads check and run only while
    /// the request lane is idle.
    BorrowIdle,
    /// Elfen fixed budget (Figure 9b).
    FixedBudget,
    /// Elfen refresh budget (Figure 9c).
    RefreshBudget,
    /// Elfen dynamic refresh (Figure 9d).
    DynamicRefresh,
    /// The daemon's `auto` mode: unmodified batch at `SCHED_IDLE` on the
    /// batch lanes, its protection chosen and re-checked from the LC's
    /// busy periods with batch running vs stepped aside (HIS).
    Auto,
}

impl Config {
    /// Every configuration, in the order tables and plots show them.
    pub const ALL: [Config; 15] = [
        Config::LcAlone,
        Config::Naive,
        Config::SchedIdle,
        Config::Cpuset,
        Config::CfsQuota,
        Config::CpuIdle,
        Config::Guard,
        Config::Freeze,
        Config::StaticPartition,
        Config::BlindIsolation,
        Config::BorrowIdle,
        Config::FixedBudget,
        Config::RefreshBudget,
        Config::DynamicRefresh,
        Config::Auto,
    ];

    /// The snake_case name used on command lines, in configs and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Config::LcAlone => "lc_alone",
            Config::Naive => "naive",
            Config::SchedIdle => "sched_idle",
            Config::Cpuset => "cpuset",
            Config::CfsQuota => "cfs_quota",
            Config::CpuIdle => "cpu_idle",
            Config::Guard => "guard",
            Config::Freeze => "freeze",
            Config::StaticPartition => "static_partition",
            Config::BlindIsolation => "blind_isolation",
            Config::BorrowIdle => "borrow_idle",
            Config::FixedBudget => "fixed_budget",
            Config::RefreshBudget => "refresh_budget",
            Config::DynamicRefresh => "dynamic_refresh",
            Config::Auto => "auto",
        }
    }

    /// Whether batch work runs in this configuration.
    pub fn has_batch(self) -> bool {
        self != Config::LcAlone
    }

    /// The Elfen policy batch threads run (`None` for the baselines, whose
    /// batch threads do not check).
    pub fn policy(self) -> Option<elfen_policy::PolicyKind> {
        use elfen_policy::PolicyKind as P;
        match self {
            Config::BorrowIdle => Some(P::BorrowIdle),
            Config::FixedBudget => Some(P::FixedBudget),
            Config::RefreshBudget => Some(P::RefreshBudget),
            Config::DynamicRefresh => Some(P::DynamicRefresh),
            _ => None,
        }
    }

    /// Whether its policy spends a co-running budget.
    pub fn uses_budget(self) -> bool {
        self.policy().is_some_and(|p| p.uses_budget())
    }

    /// Whether `elfen bench` runs it.
    pub fn in_harness(self) -> bool {
        self != Config::StaticPartition
    }

    /// Whether `elfen bench` runs it when no configurations are named: not
    /// the daemon's modes, which protect unmodified services and so need
    /// the kernel signal (`--lc-signal bpf`) and real-time threads; nor
    /// dynamic refresh, which the harness runs as refresh budget (it sets
    /// no reference IPC), so it would repeat that configuration.
    pub fn in_default_sweep(self) -> bool {
        self.in_harness() && !self.is_daemon_mode() && self != Config::DynamicRefresh
    }

    /// The daemon's modes for unmodified batch programs (`cpu_idle`,
    /// `guard`, `freeze`, `blind_isolation`, `auto`).
    pub fn is_daemon_mode(self) -> bool {
        matches!(
            self,
            Config::CpuIdle
                | Config::Guard
                | Config::Freeze
                | Config::BlindIsolation
                | Config::Auto
        )
    }

    /// Whether its batch runs in the idle class (`SCHED_IDLE` threads or a
    /// `cpu.idle` group): it yields to every other task, so on a machine
    /// whose CPUs other work keeps busy it may get nothing at all.
    pub fn batch_runs_idle_class(self) -> bool {
        matches!(
            self,
            Config::SchedIdle | Config::CpuIdle | Config::Guard | Config::Auto
        )
    }

    /// Whether it needs someone to act on the request lane's busy state
    /// besides the batch threads themselves: a guard or a freezer, woken by
    /// the kernel signal's writer.
    pub fn needs_lc_writer(self) -> bool {
        matches!(
            self,
            Config::Guard | Config::Freeze | Config::BlindIsolation | Config::Auto
        )
    }

    /// Whether `elfen sim` models it (not equal-priority time-sharing of
    /// the request lane, nor CFS bandwidth control, nor the daemon's modes
    /// other than blind isolation, whose law the simulator runs too).
    pub fn in_simulator(self) -> bool {
        !matches!(self, Config::Naive | Config::CfsQuota)
            && (!self.is_daemon_mode() || self == Config::BlindIsolation)
    }

    /// One line saying what it is (shared by `--help`, reports and docs;
    /// each producer documents its own mechanics).
    pub fn definition(self) -> &'static str {
        match self {
            Config::LcAlone => "the LC service alone: no batch work",
            Config::Naive => {
                "batch at the LC's priority (SCHED_OTHER) on every lane, no checks: what users run by default"
            }
            Config::SchedIdle => {
                "batch at SCHED_IDLE on every lane, no checks: the OS preempts it when the LC wakes"
            }
            Config::Cpuset => {
                "batch confined to the batch lanes (a cpuset), no checks: on SMT cores the paper's naive co-location on the sibling lane"
            }
            Config::CfsQuota => "batch on every lane, capped by a CFS bandwidth quota, no checks",
            Config::CpuIdle => {
                "batch on every lane in a cgroup with cpu.idle set (the daemon's idle mode), no checks"
            }
            Config::Guard => {
                "unmodified batch at SCHED_IDLE on the batch lanes; a real-time guard thread occupies a batch lane while its request lane is busy (the daemon's guard mode)"
            }
            Config::Freeze => {
                "unmodified batch on the batch lanes, its cgroup frozen while the request lane is busy (the daemon's freeze mode)"
            }
            Config::StaticPartition => "batch owns whole cores, the LC the others",
            Config::BlindIsolation => {
                "PerfIso blind isolation: batch cpuset = all - busy - B buffer cores"
            }
            Config::BorrowIdle => {
                "Elfen borrow idle: run only while the request lane is idle (Figure 9a)"
            }
            Config::FixedBudget => {
                "Elfen fixed budget: also co-run with the first request after an idle period for at most the budget (Figure 9b)"
            }
            Config::RefreshBudget => {
                "Elfen refresh budget: fixed budget, restarted when a new request starts on an empty queue (Figure 9c)"
            }
            Config::DynamicRefresh => {
                "Elfen dynamic refresh: refresh budget scaled by the LC lane's IPC (Figure 9d)"
            }
            Config::Auto => {
                "unmodified batch at SCHED_IDLE on the batch lanes; the daemon's auto mode picks the cheapest protection (idle, then guard) that keeps the LC's service time, measured with batch running vs stepped aside"
            }
        }
    }

    /// Every name, comma-separated (for error messages).
    pub fn names() -> String {
        Config::ALL.map(Config::name).join(", ")
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A configuration name that is not one of [`Config::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown configuration {given:?}: expected one of {}", Config::names())]
pub struct UnknownConfig {
    /// What was given.
    pub given: String,
}

impl FromStr for Config {
    type Err = UnknownConfig;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        Config::ALL
            .into_iter()
            .find(|c| c.name() == norm)
            .ok_or_else(|| UnknownConfig {
                given: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_json() {
        for c in Config::ALL {
            assert_eq!(c.name().parse::<Config>().unwrap(), c);
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::Value::String(c.name().into())
            );
        }
        assert_eq!("Borrow-Idle".parse::<Config>().unwrap(), Config::BorrowIdle);
        let e = "borow_idle".parse::<Config>().unwrap_err().to_string();
        assert!(e.contains("borow_idle") && e.contains("borrow_idle"), "{e}");
    }

    #[test]
    fn elfen_configurations_have_their_policy() {
        assert_eq!(Config::Naive.policy(), None);
        assert!(Config::FixedBudget.uses_budget());
        assert!(!Config::BorrowIdle.uses_budget());
        assert!(
            Config::ALL
                .iter()
                .all(|c| c.in_harness() || c.in_simulator())
        );
        assert!(!Config::LcAlone.has_batch());
    }
}
