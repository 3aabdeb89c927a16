//! The freezer: stop every task of a group, and let them go again.
//!
//! - v1: write `FROZEN` / `THAWED` to `freezer.state`; reading it gives
//!   `FREEZING` until every task is stopped, then `FROZEN`.
//! - v2: write `1` / `0` to `cgroup.freeze`; the group is frozen when
//!   `cgroup.events` says `frozen 1`.
//!
//! Freezing is asynchronous in both, so [`Executor::freeze`] writes the
//! request and then polls until the group is frozen or the timeout passes,
//! and says which. The request is a [`Knob::Frozen`] write like any other:
//! skipped when already requested, recorded (for groups the executor did
//! not create) so recovery thaws it.

use crate::apply::ApplyReport;
use crate::error::{CgroupError, Result};
use crate::executor::Executor;
use crate::fsio;
use crate::group::Group;
use crate::knob::Knob;
use crate::layout::Controller;
use serde::Serialize;
use std::time::{Duration, Instant};

/// A group's freezer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FreezerState {
    /// Running.
    Thawed,
    /// Freeze requested, some tasks still running.
    Freezing,
    /// Every task stopped.
    Frozen,
}

/// How a [`Executor::freeze`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FreezeOutcome {
    /// The group is frozen; `waited` from the request to seeing it.
    Frozen {
        /// Time from the write to the state reading frozen.
        waited: Duration,
    },
    /// The timeout passed first; the request stays in place (thaw to undo).
    TimedOut {
        /// Time waited.
        waited: Duration,
        /// The state last read.
        state: FreezerState,
    },
}

impl FreezeOutcome {
    /// Whether the group was seen frozen.
    pub fn is_frozen(&self) -> bool {
        matches!(self, FreezeOutcome::Frozen { .. })
    }

    /// Time waited.
    pub fn waited(&self) -> Duration {
        match *self {
            FreezeOutcome::Frozen { waited } | FreezeOutcome::TimedOut { waited, .. } => waited,
        }
    }
}

impl Executor {
    /// The freezer state of `group`.
    pub fn freezer_state(&self, group: &Group) -> Result<FreezerState> {
        let dir = self.group_dir_checked(group, Controller::Freezer)?;
        if self.hier.is_v2(Controller::Freezer) {
            let requested = fsio::read_trim(&dir.join("cgroup.freeze"))? == "1";
            let ev = dir.join("cgroup.events");
            let text = fsio::read(&ev)?;
            let frozen = text
                .lines()
                .find_map(|l| l.strip_prefix("frozen "))
                .ok_or_else(|| CgroupError::parse(&ev, &text, "no \"frozen\" line"))?
                .trim()
                == "1";
            Ok(match (requested, frozen) {
                (_, true) => FreezerState::Frozen,
                (true, false) => FreezerState::Freezing,
                (false, false) => FreezerState::Thawed,
            })
        } else {
            let f = dir.join("freezer.state");
            let t = fsio::read_trim(&f)?;
            match t.as_str() {
                "THAWED" => Ok(FreezerState::Thawed),
                "FREEZING" => Ok(FreezerState::Freezing),
                "FROZEN" => Ok(FreezerState::Frozen),
                _ => Err(CgroupError::parse(
                    f,
                    t,
                    "expected THAWED, FREEZING or FROZEN",
                )),
            }
        }
    }

    /// Freezes `group` and waits until it is frozen or `timeout` passes.
    /// Errors only for I/O and bad groups; a timeout is an outcome.
    pub fn freeze(&mut self, group: &Group, timeout: Duration) -> Result<FreezeOutcome> {
        let t0 = Instant::now();
        self.set(group, Knob::Frozen(true))?;
        self.wait_frozen_since(group, t0, timeout)
    }

    /// Waits until `group` reads frozen, or `timeout`.
    pub fn wait_frozen(&self, group: &Group, timeout: Duration) -> Result<FreezeOutcome> {
        self.wait_frozen_since(group, Instant::now(), timeout)
    }

    /// Polls the state: back to back for the first 2 ms (a freeze usually
    /// takes tens to hundreds of µs), then sleeping a tenth of the time
    /// waited so far, at most 1 ms.
    fn wait_frozen_since(
        &self,
        group: &Group,
        t0: Instant,
        timeout: Duration,
    ) -> Result<FreezeOutcome> {
        loop {
            let state = self.freezer_state(group)?;
            let waited = t0.elapsed();
            if state == FreezerState::Frozen {
                return Ok(FreezeOutcome::Frozen { waited });
            }
            if waited >= timeout {
                return Ok(FreezeOutcome::TimedOut { waited, state });
            }
            if waited < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep((waited / 10).min(Duration::from_millis(1)));
            }
        }
    }

    /// Thaws `group` (returns at once; tasks run again as the kernel wakes
    /// them).
    pub fn thaw(&mut self, group: &Group) -> Result<ApplyReport> {
        self.set(group, Knob::Frozen(false))
    }
}
