//! Batch kinds: how much a batch thread co-running on a **batch lane** slows
//! the request running on its partner **request lane**, and how fast the
//! batch itself progresses meanwhile.
//!
//! The model is deliberately two numbers per batch kind (see
//! `docs/simulator.md`, "Interference"):
//!
//! * `lc_slowdown` `s >= 1`: a request needs `s` times its demand (its run
//!   time alone) while one batch lane of its core executes; with `k` batch
//!   lanes executing the factor is `1 + (s - 1) * k`.
//! * `corun_rate` in `(0, 1]`: a batch lane co-running with a request makes
//!   progress at this fraction of the rate it has on a core whose request lane
//!   is idle.
//!
//! The defaults are drawn from the Elfen paper (ATC'16) where it gives
//! numbers and are labelled as assumptions where it does not.

use crate::error::{SimError, invalid};
use serde::{Deserialize, Serialize};

/// The interference of one batch kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interference {
    /// Factor (>= 1) by which a request's run time stretches while one batch
    /// lane of its core executes.
    pub lc_slowdown: f64,
    /// Batch progress rate while co-running with a request, relative to the
    /// batch running with an idle request lane (0 < rate <= 1).
    pub corun_rate: f64,
}

impl Interference {
    /// Checks the ranges; `field` names the config table (`batch.kinds.x`).
    pub fn validate(&self, field: &str) -> Result<(), SimError> {
        if !(self.lc_slowdown.is_finite() && self.lc_slowdown >= 1.0) {
            return Err(invalid(
                format!("{field}.lc_slowdown"),
                format!("must be a finite number >= 1, got {}", self.lc_slowdown),
            ));
        }
        if !(self.corun_rate.is_finite() && self.corun_rate > 0.0 && self.corun_rate <= 1.0) {
            return Err(invalid(
                format!("{field}.corun_rate"),
                format!("must be in (0, 1], got {}", self.corun_rate),
            ));
        }
        Ok(())
    }

    /// The request's run-time factor with `k` batch lanes executing.
    #[inline]
    pub fn factor(&self, k: u32) -> f64 {
        1.0 + (self.lc_slowdown - 1.0) * f64::from(k)
    }
}

/// A built-in batch kind with the source of its numbers.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinKind {
    /// Name used in configs and in `Point.batch`.
    pub name: &'static str,
    /// The numbers.
    pub interference: Interference,
    /// How the numbers were obtained.
    pub basis: Basis,
    /// Where they come from.
    pub source: &'static str,
}

/// How a built-in kind's numbers were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Fitted so the model reproduces a result of the paper.
    Calibrated,
    /// Declared: no measurement in this repository fixes them.
    Assumed,
}

impl Basis {
    /// `calibrated` or `assumed`.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Calibrated => "calibrated",
            Basis::Assumed => "assumed",
        }
    }
}

/// The built-in batch kinds.
pub const BUILTIN_KINDS: &[BuiltinKind] = &[
    BuiltinKind {
        name: "pause",
        interference: Interference {
            lc_slowdown: 1.53,
            corun_rate: 1.0,
        },
        basis: Basis::Calibrated,
        source: "Elfen Fig. 4, the IPC-0.01 non-temporal-store + fence co-runner: calibrated so \
                 that with the `lucene` demand on one lane, cpuset (the paper's naive co-run) meets the p99 that LC \
                 alone has at 100 RPS only at ~40 RPS (paper: \"RPS must fall to around 40\"); \
                 `elfen sim repro` prints the check. corun_rate 1.0: it stalls on memory anyway",
    },
    BuiltinKind {
        name: "loop",
        interference: Interference {
            lc_slowdown: 1.7,
            corun_rate: 0.6,
        },
        basis: Basis::Assumed,
        source: "Elfen Fig. 4/11 `Loop` (empty call, IPC 1): assumed a little worse than pause \
                 (it takes issue slots); corun_rate 0.6 is the usual share of a 2-way SMT core \
                 (assumption)",
    },
    BuiltinKind {
        name: "matrix",
        interference: Interference {
            lc_slowdown: 1.8,
            corun_rate: 0.6,
        },
        basis: Basis::Assumed,
        source: "Elfen Fig. 11 `Matrix` (5x5 multiply, high IPC, functional units): assumption",
    },
    BuiltinKind {
        name: "flush",
        interference: Interference {
            lc_slowdown: 2.0,
            corun_rate: 0.6,
        },
        basis: Basis::Assumed,
        source: "Elfen Fig. 11 `Flush` (zeroes 32 KB, evicts the L1D): assumption, the most \
                 disruptive of the C co-runners",
    },
    BuiltinKind {
        name: "dacapo",
        interference: Interference {
            lc_slowdown: 1.6,
            corun_rate: 0.65,
        },
        basis: Basis::Assumed,
        source: "Elfen Fig. 10 DaCapo average: assumption; Fig. 12 reports co-running DaCapo \
                 IPC drops only ~1% under borrow idle (it never co-runs there)",
    },
    BuiltinKind {
        name: "stream",
        interference: Interference {
            lc_slowdown: 1.35,
            corun_rate: 0.9,
        },
        basis: Basis::Assumed,
        source: "a memory-streaming co-runner on the other vCPU of a 2-vCPU VM without SMT: \
                 docs/micro.md measures it slowing a 4 MiB pointer chase x1.00-1.35 on the \
                 Intel VMs (the largest taken here); hosts with contended memory bandwidth see \
                 more. `elfen sim validate` reads the factor from the measured cpuset point \
                 instead",
    },
];

/// The built-in kind named `name`.
pub fn builtin(name: &str) -> Option<Interference> {
    BUILTIN_KINDS
        .iter()
        .find(|k| k.name == name)
        .map(|k| k.interference)
}

/// Names of the built-in kinds, comma separated (for error messages).
pub fn builtin_names() -> String {
    BUILTIN_KINDS
        .iter()
        .map(|k| k.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_unique() {
        for (i, k) in BUILTIN_KINDS.iter().enumerate() {
            k.interference.validate(k.name).unwrap();
            assert!(BUILTIN_KINDS[..i].iter().all(|o| o.name != k.name));
        }
        assert!(builtin("pause").is_some() && builtin("nope").is_none());
    }

    #[test]
    fn validate_names_the_field() {
        let e = Interference {
            lc_slowdown: 0.5,
            corun_rate: 1.0,
        }
        .validate("batch.kinds.x")
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "batch.kinds.x.lc_slowdown must be a finite number >= 1, got 0.5"
        );
        let e = Interference {
            lc_slowdown: 1.0,
            corun_rate: 0.0,
        }
        .validate("b")
        .unwrap_err()
        .to_string();
        assert!(e.contains("b.corun_rate"), "{e}");
    }

    #[test]
    fn factor_is_linear_in_lanes() {
        let i = Interference {
            lc_slowdown: 1.5,
            corun_rate: 1.0,
        };
        assert_eq!(i.factor(0), 1.0);
        assert_eq!(i.factor(1), 1.5);
        assert_eq!(i.factor(3), 2.5);
    }
}
