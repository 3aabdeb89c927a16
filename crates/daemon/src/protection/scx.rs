//! `scx`: the kernel keeps the lanes. elfen's sched_ext scheduler
//! (`elfen_scx`, `elfen_lanes`) is loaded with the LC's processes and the
//! group's, and runs the group's threads only where no LC task runs on the
//! CPU or its SMT sibling. Nothing in user space follows the busy edges:
//! the upkeep tick reads the scheduler's exit record (a load from its
//! mmapped data) and, every `[lc] rescan_ms`, hands it the LC processes and
//! batch processes that appeared (forks inherit the ext class by
//! themselves).
//!
//! The group stays `cpu.idle` (set up at start, like mode idle): when the
//! daemon dies the kernel unloads the scheduler and the batch runs in the
//! fair class inside an idle group — mode idle. When the kernel unloads it
//! while the daemon runs (its watchdog, an error, SysRq-S), [`Upkeep`]
//! says so and the driver switches to `[scx] fallback`.

use super::fit::{self, Verdict};
use super::profile::ProfileSnapshot;
use super::{Cost, Env, Protection, Target, Upkeep, Withdrawn};
use crate::config::Mode;
use crate::error::DaemonError;
use elfen_scx::{Lc, Options, Scheduler, Siblings};
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

/// The scheduler as `elfen status`, the metrics and the health file show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SchedulerView {
    /// Whether the kernel runs it now.
    pub running: bool,
    /// sched_ext's state in the kernel (`enabled`, `disabled`, …).
    pub kernel_state: String,
    /// Why the kernel unloaded it, once it did.
    pub exit: Option<String>,
    /// Batch processes put in the ext class.
    pub batch_procs: u64,
    /// LC processes it knows.
    pub lc_procs: u64,
    /// An LC task switched in on a CPU that ran none.
    pub lc_in: u64,
    /// Preempt kicks sent to a sibling running batch as an LC started.
    pub kick_preempt: u64,
    /// Dispatches that gave nothing because the sibling ran LC.
    pub held: u64,
    /// Batch tasks that started beside a running LC (kicked off at once).
    pub ran_held: u64,
    /// Batch tasks moved to a CPU by dispatch.
    pub dispatched: u64,
}

impl SchedulerView {
    /// One line for `elfen status`.
    pub fn line(&self) -> String {
        let what = if self.running {
            "elfen_lanes running".to_string()
        } else {
            format!(
                "elfen_lanes NOT running (sched_ext {}{})",
                self.kernel_state,
                self.exit
                    .as_deref()
                    .map_or(String::new(), |e| format!("; unloaded: {e}"))
            )
        };
        format!(
            "{what}; {} batch / {} LC processes; {} LC switch-ins, {} sibling kicks, {} \
             dispatches held, {} batch starts beside the LC",
            self.batch_procs,
            self.lc_procs,
            self.lc_in,
            self.kick_preempt,
            self.held,
            self.ran_held
        )
    }
}

/// `scx` applied to one group.
pub(super) struct Scx {
    env: Arc<Env>,
    target: Target,
    sched: Option<Scheduler>,
    lc_known: BTreeSet<u32>,
    batch_known: BTreeSet<u32>,
    next_rescan: Instant,
    /// The kernel's reason, once it unloaded the scheduler.
    ejected: Option<String>,
}

impl std::fmt::Debug for Scx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scx")
            .field("group", &self.target.name)
            .field("loaded", &self.sched.is_some())
            .field("ejected", &self.ejected)
            .finish()
    }
}

fn scx_error(e: elfen_scx::ScxError) -> DaemonError {
    DaemonError::thread("sched_ext scheduler", e.to_string())
}

impl Scx {
    pub(super) fn new(env: &Arc<Env>, target: &Target) -> Scx {
        Scx {
            env: Arc::clone(env),
            target: target.clone(),
            sched: None,
            lc_known: BTreeSet::new(),
            batch_known: BTreeSet::new(),
            next_rescan: Instant::now(),
            ejected: None,
        }
    }

    /// The group's processes now.
    fn batch_procs(&self) -> Result<Vec<u32>, DaemonError> {
        let cg = self.target.cgroup(Mode::Scx)?;
        let ex = cg.executor.lock().unwrap_or_else(|p| p.into_inner());
        Ok(ex.procs(&cg.group)?)
    }

    /// LC and batch processes that appeared since the last look handed to
    /// the scheduler; what to say.
    fn rescan(&mut self) -> Vec<String> {
        let mut said = Vec::new();
        let lc = self.env.lc_pids();
        let batch = self.batch_procs().unwrap_or_default();
        let Some(s) = self.sched.as_mut() else {
            return said;
        };
        for p in lc {
            if self.lc_known.contains(&p) {
                continue;
            }
            match s.add_lc_pid(p) {
                Ok(()) => {
                    self.lc_known.insert(p);
                }
                Err(elfen_scx::ScxError::NoSuchProcess { .. }) => {}
                Err(e) => said.push(format!(
                    "batch {}: LC process {p} not given to the scheduler: {e}",
                    self.target.name
                )),
            }
        }
        let mut added = 0;
        for p in batch {
            if self.batch_known.contains(&p) || self.lc_known.contains(&p) {
                continue;
            }
            match s.add_batch(p) {
                Ok(_) => {
                    self.batch_known.insert(p);
                    added += 1;
                }
                Err(elfen_scx::ScxError::NoSuchProcess { .. }) => {}
                Err(e) => said.push(format!(
                    "batch {}: process {p} not put in the sched_ext class: {e}",
                    self.target.name
                )),
            }
        }
        if added > 0 {
            said.push(format!(
                "batch {}: {added} new process(es) put in the sched_ext class",
                self.target.name
            ));
        }
        said
    }
}

impl Protection for Scx {
    fn mode(&self) -> Mode {
        Mode::Scx
    }

    fn apply(&mut self) -> Result<(), DaemonError> {
        if self.sched.is_some() {
            return Ok(());
        }
        if !self.target.yields {
            return Err(DaemonError::thread(
                "sched_ext scheduler",
                format!(
                    "batch {} has no cpu.idle group: without it the kernel unloading the \
                     scheduler would leave the batch at the LC's priority",
                    self.target.name
                ),
            ));
        }
        let lc: Vec<u32> = self.env.lc_pids();
        let batch: Vec<u32> = self
            .batch_procs()?
            .into_iter()
            .filter(|p| !lc.contains(p))
            .collect();
        let mut opts = Options::new(Lc::Pids(lc.clone()), batch.clone());
        if let Some(p) = &self.env.settings.scx_pairs {
            opts.siblings = Siblings::Pairs(p.clone());
        }
        let s = elfen_scx::load(&opts).map_err(scx_error)?;
        self.lc_known = lc.into_iter().collect();
        self.batch_known = s.batch_pids().into_iter().collect();
        self.sched = Some(s);
        self.ejected = None;
        self.next_rescan = Instant::now() + self.env.settings.rescan;
        Ok(())
    }

    fn withdraw(&mut self) -> Withdrawn {
        match self.sched.take() {
            Some(s) => Withdrawn::Scheduler(s.unload()),
            None => Withdrawn::Nothing,
        }
    }

    fn cost(&self) -> Cost {
        // no thread of its own and no knob cycle: its user-space work is
        // the upkeep tick's (the kernel's kicks are in `scheduler`)
        Cost::default()
    }

    fn fits(&self, window: &ProfileSnapshot) -> Verdict {
        fit::judge(Mode::Scx, window, &self.env.costs(), 0)
    }

    fn applied(&self) -> bool {
        self.sched.is_some()
    }

    fn upkeep(&mut self) -> Upkeep {
        let Some(s) = &self.sched else {
            return Upkeep::default();
        };
        if let Some(e) = s.exit_info() {
            let reason = e.to_string();
            self.ejected = Some(reason.clone());
            return Upkeep {
                said: Vec::new(),
                failed: Some(format!(
                    "the kernel unloaded the sched_ext scheduler: {reason}"
                )),
            };
        }
        let now = Instant::now();
        if now < self.next_rescan {
            return Upkeep::default();
        }
        self.next_rescan = now + self.env.settings.rescan;
        Upkeep {
            said: self.rescan(),
            failed: None,
        }
    }

    fn scheduler(&self) -> Option<SchedulerView> {
        let s = self.sched.as_ref()?;
        let st = s.state().ok();
        let stats = st.as_ref().map(|st| st.stats).unwrap_or_default();
        Some(SchedulerView {
            running: st.as_ref().is_some_and(|st| st.running),
            kernel_state: st
                .as_ref()
                .map_or_else(|| "unknown".into(), |st| st.kernel.state.clone()),
            exit: st
                .as_ref()
                .and_then(|st| st.exit.as_ref().map(ToString::to_string)),
            batch_procs: self.batch_known.len() as u64,
            lc_procs: self.lc_known.len() as u64,
            lc_in: stats.lc_in,
            kick_preempt: stats.kick_preempt,
            held: stats.held,
            ran_held: stats.ran_held,
            dispatched: stats.dispatched,
        })
    }
}
