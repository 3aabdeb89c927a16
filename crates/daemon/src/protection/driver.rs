//! A batch group's **driver**: it holds the group's applied
//! [`Protection`] and decides, at each [`Driver::tick`], whether another
//! mode should take over — the one place switches happen, each recorded
//! ([`DriverState`]: metrics, `elfen status`, the log) with its reason:
//!
//! - a fixed mode: applied at start; every second its verdict for the last
//!   window of busy periods is published (and the guards' hold refreshed);
//! - `freeze` (with `[freeze] unfit` other than `warn`): the fallback mode
//!   runs while the service is watched (`observe_ms`), then freeze if it
//!   fits; if it does not, the fallback stays (`fallback`) or the daemon
//!   stops (`refuse`); later verdicts switch between the two, two in a row
//!   and at least [`FALLBACK_DWELL`] apart. With `warn`, freeze from the
//!   start and a warning whenever its verdict turns;
//! - `auto`: HIS's A/B period (`super::auto`): a co-run window in the
//!   current mode, then a solo window with the group frozen (through the
//!   executor: a crash meanwhile is repaired by the next start; a freeze
//!   or blind mode, which write the freezer themselves, is withdrawn for
//!   it), then the decision, and the mode it names applied;
//! - `scx`: the scheduler loaded at start; the protection's upkeep each
//!   tick (new processes, the kernel's exit record); once the kernel
//!   unloads the scheduler (its watchdog, an error, SysRq-S) it is said at
//!   WARN with the kernel's reason and `[scx] fallback` runs.
//!
//! The daemon ticks it from its upkeep loop; the harness from a thread of
//! its own.

use super::auto::{Auto, Decision, Observation, Window};
use super::fit::{FitState, Verdict};
use super::profile::ProfileSnapshot;
use super::{Cost, Env, Protection, Target, Withdrawn};
use crate::config::{AutoSection, FreezeSection, Mode, ScxSection, Unfit};
use crate::error::DaemonError;
use elfen_cgroup::{Group, Knob};
use elfen_ops::health::DaemonKnob;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a verdict is taken.
pub const FIT_EVERY: Duration = Duration::from_secs(1);
/// Least time between two switches of a freeze group's fallback.
pub const FALLBACK_DWELL: Duration = Duration::from_secs(10);
/// Verdicts in a row that switch a freeze group.
const FALLBACK_CONFIRM: u32 = 2;

/// What a driver publishes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriverState {
    /// The group's name.
    pub group: String,
    /// The configured mode.
    pub configured: Mode,
    /// The mode applied now.
    pub active: Mode,
    /// Switches so far.
    pub switches: u64,
    /// The last switch, with its reason.
    pub last_switch: Option<String>,
    /// The last verdict (of the configured mode for freeze, else of the
    /// active one).
    pub verdict: Option<Verdict>,
    /// `auto`: the last contention measured.
    pub contention: Option<f64>,
    /// `auto`: the batch is stepped aside (a solo window).
    pub stepped_aside: bool,
    /// The active mode's cost since it was applied.
    pub cost: Cost,
    /// The sched_ext scheduler the active mode runs (mode scx), as read at
    /// the last verdict (once a second); once the kernel unloaded it, its
    /// last view (not running, the kernel's reason) while the fallback runs.
    pub scheduler: Option<super::SchedulerView>,
}

/// A freeze group's choice between freeze and its fallback.
#[derive(Debug)]
struct FreezeChoice {
    unfit: Unfit,
    fallback: Mode,
    /// Freeze has been judged once (the start's watch is over).
    decided: bool,
    observe_until: Instant,
    /// The last verdict's state and how many in a row.
    streak: (FitState, u32),
    /// Warned of (warn): the state last said.
    said: Option<FitState>,
}

/// `auto`'s period.
#[derive(Debug)]
enum Phase {
    CoRun {
        since: Instant,
        snap: Option<ProfileSnapshot>,
    },
    Solo {
        since: Instant,
        snap: Option<ProfileSnapshot>,
        corun: ProfileSnapshot,
    },
}

#[derive(Debug)]
struct AutoRun {
    auto: Auto,
    period: Duration,
    solo: Duration,
    phase: Phase,
}

#[derive(Debug)]
enum Chooser {
    Fixed,
    Freeze(FreezeChoice),
    Auto(Box<AutoRun>),
    /// `scx`, with the mode that runs once the kernel unloads the scheduler.
    Scx {
        fallback: Mode,
    },
}

/// One batch group's driver (see the module docs).
#[derive(Debug)]
pub struct Driver {
    env: Arc<Env>,
    target: Target,
    active: Box<dyn Protection>,
    chooser: Chooser,
    withdrawn: Vec<Withdrawn>,
    state: DriverState,
    window: Option<ProfileSnapshot>,
    last_check: Instant,
    last_switch: Option<Instant>,
    /// The scheduler the kernel unloaded, as last seen (mode scx, once its
    /// fallback runs).
    unloaded: Option<super::SchedulerView>,
}

fn now_ns() -> u64 {
    elfen_shm::clock::monotonic_ns()
}

impl Driver {
    /// Applies the first mode of `target` in `mode` (`freeze` and `auto`
    /// with their settings); returns the driver and what to say.
    pub fn start(
        env: &Arc<Env>,
        target: Target,
        mode: Mode,
        freeze: &FreezeSection,
        auto: &AutoSection,
    ) -> Result<(Driver, Vec<String>), DaemonError> {
        Driver::resume(env, target, mode, freeze, auto, None)
    }

    /// [`Driver::start`] of a group in mode `scx`, falling back to
    /// `scx.fallback` when the kernel unloads the scheduler.
    pub fn start_scx(
        env: &Arc<Env>,
        target: Target,
        scx: &ScxSection,
    ) -> Result<(Driver, Vec<String>), DaemonError> {
        let (mut d, mut said) = Driver::resume(
            env,
            target,
            Mode::Scx,
            &FreezeSection::default(),
            &AutoSection::default(),
            None,
        )?;
        d.chooser = Chooser::Scx {
            fallback: scx.fallback,
        };
        d.state.scheduler = d.scheduler();
        said.push(format!(
            "batch {}: the sched_ext scheduler elfen_lanes runs its threads (never beside a \
             running LC task on an SMT sibling); the group stays cpu.idle; if the kernel \
             unloads the scheduler, {} runs ([scx] fallback)",
            d.target.name, scx.fallback
        ));
        Ok((d, said))
    }

    /// [`Driver::start`], `auto` continuing from `state` (the harness keeps
    /// it across the invocations of one load; see [`Driver::stop_keeping`]).
    /// A freeze group whose service the writer has already watched for
    /// `observe_ms` (the harness's, running all along) is judged at once.
    pub fn resume(
        env: &Arc<Env>,
        target: Target,
        mode: Mode,
        freeze: &FreezeSection,
        auto: &AutoSection,
        state: Option<Auto>,
    ) -> Result<(Driver, Vec<String>), DaemonError> {
        let now = Instant::now();
        let mut said = Vec::new();
        let seen = env.profile.since_start(now_ns());
        let (first, chooser) = match mode {
            Mode::Freeze
                if freeze.unfit != Unfit::Warn
                    && seen.busy.count >= super::fit::MIN_PERIODS
                    && seen.at_ns >= freeze.observe_ms.saturating_mul(1_000_000) =>
            {
                let v = super::new(Mode::Freeze, env, &target).fits(&seen);
                if v.state == FitState::Unfit && freeze.unfit == Unfit::Refuse {
                    return Err(DaemonError::Refused {
                        name: target.name.clone(),
                        mode: "freeze".into(),
                        reason: v.reason,
                        fallback: freeze.fallback.name().into(),
                    });
                }
                let first = if v.fits() {
                    Mode::Freeze
                } else {
                    freeze.fallback
                };
                said.push(format!(
                    "batch {}: freeze {}: {first} runs ({})",
                    target.name,
                    v.state.word(),
                    v.reason
                ));
                (
                    first,
                    Chooser::Freeze(FreezeChoice {
                        unfit: freeze.unfit,
                        fallback: freeze.fallback,
                        decided: true,
                        observe_until: now,
                        streak: (v.state, 1),
                        said: None,
                    }),
                )
            }
            Mode::Freeze if freeze.unfit != Unfit::Warn => {
                said.push(format!(
                    "batch {}: {} while the service is watched ({} ms) before freezing is \
                     judged (a freeze must be shorter than the busy periods it follows)",
                    target.name, freeze.fallback, freeze.observe_ms
                ));
                (
                    freeze.fallback,
                    Chooser::Freeze(FreezeChoice {
                        unfit: freeze.unfit,
                        fallback: freeze.fallback,
                        decided: false,
                        observe_until: now + Duration::from_millis(freeze.observe_ms),
                        streak: (FitState::Unknown, 0),
                        said: None,
                    }),
                )
            }
            Mode::Freeze => (
                Mode::Freeze,
                Chooser::Freeze(FreezeChoice {
                    unfit: Unfit::Warn,
                    fallback: freeze.fallback,
                    decided: true,
                    observe_until: now,
                    streak: (FitState::Unknown, 0),
                    said: None,
                }),
            ),
            Mode::Auto => {
                let a = state.unwrap_or_else(|| Auto::new(auto.clone()));
                let first = a.mode();
                said.push(format!(
                    "batch {}: auto starts at {first} (ladder {}); every {} ms the batch steps \
                     aside for {} ms to measure contention",
                    target.name,
                    auto.ladder
                        .iter()
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join(" → "),
                    auto.period_ms,
                    auto.solo_ms
                ));
                (
                    first,
                    Chooser::Auto(Box::new(AutoRun {
                        auto: a,
                        period: Duration::from_millis(auto.period_ms),
                        solo: Duration::from_millis(auto.solo_ms),
                        phase: Phase::CoRun {
                            since: now,
                            snap: None,
                        },
                    })),
                )
            }
            m => (m, Chooser::Fixed),
        };
        let mut active = super::new(first, env, &target);
        active.apply()?;
        let state = DriverState {
            group: target.name.clone(),
            configured: mode,
            active: first,
            switches: 0,
            last_switch: None,
            verdict: None,
            contention: None,
            stepped_aside: false,
            cost: Cost::default(),
            scheduler: None,
        };
        let window = Some(env.profile.snapshot(now_ns()));
        Ok((
            Driver {
                env: Arc::clone(env),
                target,
                active,
                chooser,
                withdrawn: Vec::new(),
                state,
                window,
                last_check: now,
                last_switch: None,
                unloaded: None,
            },
            said,
        ))
    }

    /// What it publishes now.
    pub fn state(&self) -> DriverState {
        let mut s = self.state.clone();
        s.cost = self.active.cost();
        s
    }

    /// The group's index in the plan.
    pub fn index(&self) -> usize {
        self.target.index
    }

    /// The protection applied now.
    pub fn active(&self) -> &dyn Protection {
        &*self.active
    }

    /// Whether its protection's threads run.
    pub fn is_running(&self) -> bool {
        self.active.is_running()
    }

    /// Withdraws the active mode (thawing a solo window); returns every
    /// report of the run (earlier switches' included).
    pub fn stop(self) -> Vec<Withdrawn> {
        self.stop_keeping().0
    }

    /// [`Driver::stop`], also giving back `auto`'s state machine.
    pub fn stop_keeping(mut self) -> (Vec<Withdrawn>, Option<Auto>) {
        let w = self.active.withdraw();
        self.withdrawn.push(w);
        if self.state.stepped_aside {
            self.thaw();
        }
        let auto = match std::mem::replace(&mut self.chooser, Chooser::Fixed) {
            Chooser::Auto(run) => Some(run.auto),
            _ => None,
        };
        (std::mem::take(&mut self.withdrawn), auto)
    }

    /// The group was replaced under its name (a container or pod made anew
    /// at another path): the active mode is withdrawn from the old group
    /// and applied to `group`. Returns what to say.
    pub fn rebind(&mut self, group: Group) -> Result<String, DaemonError> {
        if self.state.stepped_aside {
            self.thaw();
        }
        let w = self.active.withdraw();
        self.withdrawn.push(w);
        if let Some(cg) = self.target.cgroup.as_mut() {
            cg.group = group;
        }
        let mode = self.active.mode();
        let mut next = super::new(mode, &self.env, &self.target);
        next.apply()?;
        self.active = next;
        Ok(format!(
            "batch {}: mode {mode} applied to its new group",
            self.target.name
        ))
    }

    /// Replaces the active mode by `to`, saying why; the old mode is
    /// withdrawn first (unless `withdrawn` already).
    fn switch(&mut self, to: Mode, reason: String, withdrawn: bool) -> Result<String, DaemonError> {
        let from = self.active.mode();
        if !withdrawn {
            let w = self.active.withdraw();
            self.withdrawn.push(w);
        }
        let mut next = super::new(to, &self.env, &self.target);
        next.apply()?;
        self.active = next;
        self.state.active = to;
        self.state.switches += 1;
        let line = format!("batch {}: {from} → {to}: {reason}", self.target.name);
        self.state.last_switch = Some(line.clone());
        self.last_switch = Some(Instant::now());
        Ok(line)
    }

    /// The scheduler the active mode runs, else the one the kernel
    /// unloaded: `elfen status` and `elfen_scx_running` keep saying why the
    /// fallback runs.
    fn scheduler(&self) -> Option<super::SchedulerView> {
        self.active.scheduler().or_else(|| self.unloaded.clone())
    }

    /// One round: judges, switches, runs auto's period. Returns what to
    /// say; an error when a mode must be refused or cannot be applied.
    pub fn tick(&mut self) -> Result<Vec<String>, DaemonError> {
        let now = Instant::now();
        let mut out = Vec::new();
        let up = self.active.upkeep();
        out.extend(up.said);
        if let Some(why) = up.failed {
            // read before the switch unloads what is left of it
            let last = self.active.scheduler();
            self.fall_back(why, &mut out)?;
            self.unloaded = last;
            self.state.scheduler = self.scheduler();
        }
        if matches!(self.chooser, Chooser::Auto(_)) {
            self.tick_auto(now, &mut out)?;
            return Ok(out);
        }
        if now.duration_since(self.last_check) < FIT_EVERY {
            return Ok(out);
        }
        self.last_check = now;
        // the scheduler's counters, read (and published) once a verdict
        self.state.scheduler = self.scheduler();
        let snap = self.env.profile.snapshot(now_ns());
        let window = snap.since(self.window.as_ref().unwrap_or(&snap));
        let judged = match &self.chooser {
            Chooser::Freeze(_) => super::new(Mode::Freeze, &self.env, &self.target).fits(&window),
            _ => self.active.fits(&window),
        };
        if judged.state == FitState::Unknown && self.window.is_some() {
            // too few busy periods: the window grows until it says something
            if self.state.verdict.is_none() {
                self.state.verdict = Some(judged.clone());
            }
        } else {
            self.window = Some(snap);
            self.state.verdict = Some(judged.clone());
        }
        if self.active.mode() == Mode::Guard {
            self.env.refresh_hold(&window);
        }
        if let Chooser::Freeze(_) = self.chooser {
            self.tick_freeze(now, judged, &mut out)?;
        }
        Ok(out)
    }

    /// The active protection stopped protecting (`why`): said at WARN, and
    /// the configured fallback applied (a mode without one is re-applied).
    fn fall_back(&mut self, why: String, out: &mut Vec<String>) -> Result<(), DaemonError> {
        let to = match self.chooser {
            Chooser::Scx { fallback } => fallback,
            _ => self.active.mode(),
        };
        crate::logging::warn(format!(
            "batch {}: {} stopped protecting: {why}; {to} runs instead ([scx] fallback)",
            self.target.name,
            self.active.mode()
        ));
        self.chooser = Chooser::Fixed;
        out.push(self.switch(to, why, false)?);
        Ok(())
    }

    fn tick_freeze(
        &mut self,
        now: Instant,
        v: Verdict,
        out: &mut Vec<String>,
    ) -> Result<(), DaemonError> {
        let Chooser::Freeze(c) = &mut self.chooser else {
            return Ok(());
        };
        if v.state == FitState::Unknown {
            return Ok(());
        }
        c.streak = if c.streak.0 == v.state {
            (v.state, c.streak.1 + 1)
        } else {
            (v.state, 1)
        };
        let name = self.target.name.clone();
        if c.unfit == Unfit::Warn {
            if c.said != Some(v.state) && (v.state == FitState::Unfit || c.said.is_some()) {
                c.said = Some(v.state);
                out.push(match v.state {
                    FitState::Unfit => format!(
                        "batch {name}: WARNING: freeze {} (running it anyway: [freeze] unfit = \
                         \"warn\")",
                        v.reason
                    ),
                    _ => format!("batch {name}: freeze fits again: {}", v.reason),
                });
            }
            return Ok(());
        }
        if !c.decided && now < c.observe_until {
            return Ok(());
        }
        let first = !c.decided;
        c.decided = true;
        let freezing = self.active.mode() == Mode::Freeze;
        let dwelt = self
            .last_switch
            .is_none_or(|t| now.duration_since(t) >= FALLBACK_DWELL);
        let confirmed = first || (c.streak.1 >= FALLBACK_CONFIRM && dwelt);
        let (unfit, fallback) = (c.unfit, c.fallback);
        match v.state {
            FitState::Unfit if unfit == Unfit::Refuse => {
                return Err(DaemonError::Refused {
                    name,
                    mode: "freeze".into(),
                    reason: v.reason,
                    fallback: fallback.name().into(),
                });
            }
            FitState::Unfit if freezing && confirmed => {
                out.push(self.switch(
                    fallback,
                    format!("freeze {} ([freeze] unfit = \"fallback\")", v.reason),
                    false,
                )?);
            }
            FitState::Unfit if first => out.push(format!(
                "batch {name}: freeze {}: {fallback} runs instead ([freeze] unfit = \
                 \"fallback\")",
                v.reason
            )),
            FitState::Fits if !freezing && confirmed => {
                out.push(self.switch(Mode::Freeze, format!("freeze fits: {}", v.reason), false)?);
            }
            _ => {}
        }
        Ok(())
    }

    fn tick_auto(&mut self, now: Instant, out: &mut Vec<String>) -> Result<(), DaemonError> {
        let Chooser::Auto(mut run) = std::mem::replace(&mut self.chooser, Chooser::Fixed) else {
            return Ok(());
        };
        let r = self.auto_period(&mut run, now, out);
        self.chooser = Chooser::Auto(run);
        r
    }

    fn auto_period(
        &mut self,
        run: &mut AutoRun,
        now: Instant,
        out: &mut Vec<String>,
    ) -> Result<(), DaemonError> {
        let settle = (run.solo / 5).min(Duration::from_millis(50));
        match &mut run.phase {
            Phase::CoRun { since, snap } => {
                let since = *since;
                let co_len = run.period - run.solo;
                if snap.is_none() && now.duration_since(since) >= settle {
                    *snap = Some(self.env.profile.snapshot(now_ns()));
                }
                if now.duration_since(since) < co_len {
                    return Ok(());
                }
                let start = snap.take().unwrap_or_default();
                let corun = self.env.profile.snapshot(now_ns()).since(&start);
                if self.active.mode() == Mode::Guard {
                    self.env.refresh_hold(&corun);
                }
                // the A/B: step the batch aside (a mode that writes the
                // freezer itself is withdrawn for it; guards and idle stay)
                let writes_freezer = matches!(self.active.mode(), Mode::Freeze | Mode::Blind);
                if writes_freezer {
                    let w = self.active.withdraw();
                    self.withdrawn.push(w);
                }
                if !self.freeze_group(true) {
                    out.push(format!(
                        "batch {}: auto could not step the batch aside (its freeze failed): \
                         this period is not judged",
                        self.target.name
                    ));
                    self.active.apply()?;
                    run.phase = Phase::CoRun {
                        since: now,
                        snap: None,
                    };
                    return Ok(());
                }
                self.state.stepped_aside = true;
                run.phase = Phase::Solo {
                    since: now,
                    snap: None,
                    corun,
                };
            }
            Phase::Solo { since, snap, corun } => {
                let since = *since;
                if snap.is_none() && now.duration_since(since) >= settle {
                    *snap = Some(self.env.profile.snapshot(now_ns()));
                }
                if now.duration_since(since) < run.solo {
                    return Ok(());
                }
                let start = snap.take().unwrap_or_default();
                let solo = self.env.profile.snapshot(now_ns()).since(&start);
                let corun = std::mem::take(corun);
                let obs = Observation {
                    now_ns: now_ns(),
                    corun: Window {
                        periods: corun.busy.count,
                        busy_ns: corun.busy.sum_ns,
                    },
                    solo: Window {
                        periods: solo.busy.count,
                        busy_ns: solo.busy.sum_ns,
                    },
                };
                let (env, target) = (Arc::clone(&self.env), self.target.clone());
                let ladder = run.auto.ladder().to_vec();
                let decision = run
                    .auto
                    .observe(&obs, |r| super::new(ladder[r], &env, &target).fits(&corun));
                self.state.contention = run.auto.contention();
                self.state.verdict = Some(self.active.fits(&corun));
                run.phase = Phase::CoRun {
                    since: now,
                    snap: None,
                };
                self.thaw();
                match decision {
                    Decision::Switch { to, reason } => {
                        let withdrawn = !self.active.applied();
                        out.push(self.switch(ladder[to], reason, withdrawn)?);
                    }
                    // apply is a no-op for a mode that stayed applied
                    Decision::Stay { .. } => self.active.apply()?,
                }
            }
        }
        Ok(())
    }

    /// Freezes (`true`) or thaws the whole group through the executor;
    /// a failure is counted as the group's. Returns whether it worked.
    fn freeze_group(&self, frozen: bool) -> bool {
        let t = &self.target;
        let Some(cg) = &t.cgroup else { return false };
        let mut ex = cg.executor.lock().unwrap_or_else(|p| p.into_inner());
        let knob = if frozen {
            DaemonKnob::Freeze
        } else {
            DaemonKnob::Thaw
        };
        match crate::health::retry(|| ex.set(&cg.group, Knob::Frozen(frozen))) {
            Ok(_) => {
                if let Some(r) = &t.reporter {
                    r.succeeded(knob);
                }
                true
            }
            Err(e) => {
                if let Some(r) = &t.reporter {
                    r.failed(knob, &e);
                }
                false
            }
        }
    }

    fn thaw(&mut self) {
        self.freeze_group(false);
        self.state.stepped_aside = false;
    }
}
