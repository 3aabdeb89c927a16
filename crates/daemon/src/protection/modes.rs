//! The five modes behind [`super::Protection`]: each wraps its mechanism
//! (`crate::guard`, `crate::freeze`, `crate::blind`, the group's yield) and
//! measures what it costs from the moment it is applied.

use super::fit::{self, Verdict};
use super::profile::ProfileSnapshot;
use super::{Cost, Env, Protection, Target, Withdrawn};
use crate::blind::{Blind, BlindHandle, BlindOptions, BlindWaking};
use crate::config::{BlindWake, Mode};
use crate::error::DaemonError;
use crate::freeze::{FreezeOptions, Freezer, FreezerHandle};
use elfen_cgroup::Knob;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

pub(super) fn new(mode: Mode, env: &Arc<Env>, target: &Target) -> Box<dyn Protection> {
    let base = Base {
        env: Arc::clone(env),
        target: target.clone(),
        applied: false,
    };
    match mode {
        Mode::Cooperative => Box::new(Cooperative(base)),
        Mode::Idle => Box::new(Idle(base)),
        Mode::Guard => Box::new(Guarding {
            base,
            at_apply: Cost::default(),
        }),
        Mode::Freeze => Box::new(Freezing {
            base,
            freezer: None,
        }),
        Mode::Blind => Box::new(Blinding { base, blind: None }),
        Mode::Scx => Box::new(super::scx::Scx::new(env, target)),
        // auto is not a protection but a driver over them (`driver`);
        // asked for one, it is the cheapest
        Mode::Auto => Box::new(Idle(base)),
    }
}

/// What every mode holds.
#[derive(Debug)]
struct Base {
    env: Arc<Env>,
    target: Target,
    applied: bool,
}

impl Base {
    fn judge(&self, mode: Mode, window: &ProfileSnapshot, hold_ns: u64) -> Verdict {
        fit::judge(mode, window, &self.env.costs(), hold_ns)
    }
}

use super::thread_cpu as cpu_ns;

/// `cooperative`: the batch threads nap themselves.
#[derive(Debug)]
struct Cooperative(Base);

impl Protection for Cooperative {
    fn mode(&self) -> Mode {
        Mode::Cooperative
    }
    fn apply(&mut self) -> Result<(), DaemonError> {
        self.0.applied = true;
        Ok(())
    }
    fn withdraw(&mut self) -> Withdrawn {
        self.0.applied = false;
        Withdrawn::Nothing
    }
    fn cost(&self) -> Cost {
        Cost::default()
    }
    fn fits(&self, window: &ProfileSnapshot) -> Verdict {
        self.0.judge(Mode::Cooperative, window, 0)
    }
    fn applied(&self) -> bool {
        self.0.applied
    }
}

/// `idle`: the group yields as a whole (set up at start); a group that
/// does not by its set-up gets SCHED_IDLE on every thread.
#[derive(Debug)]
struct Idle(Base);

impl Protection for Idle {
    fn mode(&self) -> Mode {
        Mode::Idle
    }
    fn apply(&mut self) -> Result<(), DaemonError> {
        if !self.0.target.yields {
            self.0.target.sched_idle.store(true, Relaxed);
        }
        self.0.applied = true;
        Ok(())
    }
    fn withdraw(&mut self) -> Withdrawn {
        // threads already SCHED_IDLE stay so until the stop (harmless under
        // any other mode); new ones are no longer changed
        self.0.target.sched_idle.store(false, Relaxed);
        self.0.applied = false;
        Withdrawn::Nothing
    }
    fn cost(&self) -> Cost {
        Cost::default()
    }
    fn fits(&self, window: &ProfileSnapshot) -> Verdict {
        self.0.judge(Mode::Idle, window, 0)
    }
    fn applied(&self) -> bool {
        self.0.applied
    }
}

/// `guard`: the shared guards (and the writer's hold) while applied.
#[derive(Debug)]
struct Guarding {
    base: Base,
    /// The guards' counters when applied (the guards may be older).
    at_apply: Cost,
}

impl Guarding {
    fn totals(&self) -> Cost {
        let env = &self.base.env;
        let (occupied_ns, held_ns) = env.spin_ns();
        let mut cpu_ns: u64 = env.guard_tids().into_iter().map(cpu_ns).sum();
        let mut cycles: u64 = env.guard_counts().iter().map(|g| g.occupations).sum();
        if let Some(w) = &env.writer_hold {
            // the writer's spinning is this mode's; the writer's own work
            // is the signal's, counted apart
            cpu_ns += w.occupied_ns.load(Relaxed) + w.held_ns.load(Relaxed);
            cycles += w.spins.load(Relaxed);
        }
        Cost {
            cpu_ns,
            occupied_ns,
            held_ns,
            bounded_ns: env.bounded_ns(),
            cycles,
        }
    }
}

impl Protection for Guarding {
    fn mode(&self) -> Mode {
        Mode::Guard
    }
    fn apply(&mut self) -> Result<(), DaemonError> {
        if self.base.applied {
            return Ok(());
        }
        let t = &self.base.target;
        if let Some(c) = &t.confine {
            // batch work must not flee to a request lane while guarded
            let g = t.cgroup(Mode::Guard)?;
            let mut ex = g.executor.lock().unwrap_or_else(|p| p.into_inner());
            ex.set(&g.group, Knob::CpusetCpus(c.clone()))?;
        }
        if !t.yields {
            t.sched_idle.store(true, Relaxed);
        }
        self.base.env.acquire_guards()?;
        self.base.applied = true;
        self.at_apply = self.totals();
        Ok(())
    }
    fn withdraw(&mut self) -> Withdrawn {
        if !self.base.applied {
            return Withdrawn::Nothing;
        }
        self.base.applied = false;
        Withdrawn::Guards(self.base.env.release_guards())
    }
    fn cost(&self) -> Cost {
        if !self.base.applied {
            return Cost::default();
        }
        let (now, a) = (self.totals(), self.at_apply);
        Cost {
            cpu_ns: now.cpu_ns.saturating_sub(a.cpu_ns),
            occupied_ns: now.occupied_ns.saturating_sub(a.occupied_ns),
            held_ns: now.held_ns.saturating_sub(a.held_ns),
            bounded_ns: now.bounded_ns.saturating_sub(a.bounded_ns),
            cycles: now.cycles.saturating_sub(a.cycles),
        }
    }
    fn fits(&self, window: &ProfileSnapshot) -> Verdict {
        let env = &self.base.env;
        let hold = fit::hold_ns(
            env.settings.hold,
            env.costs().wake_ns,
            window.gaps.mean_ns(),
        );
        self.base.judge(Mode::Guard, window, hold)
    }
    fn applied(&self) -> bool {
        self.base.applied
    }
    fn tids(&self) -> Vec<u32> {
        self.base.env.guard_tids()
    }
}

/// `freeze`: the group's freezer thread while applied.
#[derive(Debug)]
struct Freezing {
    base: Base,
    freezer: Option<(FreezerHandle, u64)>,
}

impl Protection for Freezing {
    fn mode(&self) -> Mode {
        Mode::Freeze
    }
    fn apply(&mut self) -> Result<(), DaemonError> {
        if self.freezer.is_some() {
            return Ok(());
        }
        let (env, t) = (&self.base.env, &self.base.target);
        let cg = t.cgroup(Mode::Freeze)?;
        let bell = t
            .freeze_bell
            .clone()
            .ok_or_else(|| DaemonError::thread("freezer", "no bell wired for this group"))?;
        let s = &env.settings;
        let opts = FreezeOptions {
            policy: s.policy,
            timeout: s.freeze_timeout,
            max_sleep: Duration::from_millis(100),
            priority: s.group_priority,
            cpus: Some(s.thread_cpus.clone()),
            bound: s.spin,
        };
        bell.arm(true);
        let f = Freezer::spawn_reporting(
            Arc::clone(&env.page),
            t.request_lanes.clone(),
            cg.group.clone(),
            Arc::clone(&cg.executor),
            bell,
            opts,
            t.reporter.clone(),
        );
        let f = match f {
            Ok(f) => f,
            Err(e) => {
                if let Some(b) = &t.freeze_bell {
                    b.arm(false);
                }
                return Err(e);
            }
        };
        env.own.add(f.tid());
        let at = cpu_ns(f.tid());
        self.freezer = Some((f, at));
        self.base.applied = true;
        Ok(())
    }
    fn withdraw(&mut self) -> Withdrawn {
        let Some((f, _)) = self.freezer.take() else {
            return Withdrawn::Nothing;
        };
        if let Some(b) = &self.base.target.freeze_bell {
            b.arm(false);
        }
        self.base.env.own.remove(f.tid());
        self.base.env.retire(f.tid(), (0, 0));
        self.base.applied = false;
        Withdrawn::Freezer(f.stop())
    }
    fn cost(&self) -> Cost {
        self.freezer
            .as_ref()
            .map_or_else(Cost::default, |(f, at)| Cost {
                cpu_ns: cpu_ns(f.tid()).saturating_sub(*at),
                cycles: f.freezes(),
                ..Cost::default()
            })
    }
    fn fits(&self, window: &ProfileSnapshot) -> Verdict {
        self.base.judge(Mode::Freeze, window, 0)
    }
    fn applied(&self) -> bool {
        self.base.applied
    }
    fn is_running(&self) -> bool {
        self.freezer.as_ref().is_none_or(|(f, _)| f.is_running())
    }
    fn tids(&self) -> Vec<u32> {
        self.freezer.iter().map(|(f, _)| f.tid()).collect()
    }
}

/// `blind`: the group's blind-isolation thread while applied.
#[derive(Debug)]
struct Blinding {
    base: Base,
    blind: Option<(BlindHandle, u64)>,
}

impl Protection for Blinding {
    fn mode(&self) -> Mode {
        Mode::Blind
    }
    fn apply(&mut self) -> Result<(), DaemonError> {
        if self.blind.is_some() {
            return Ok(());
        }
        let (env, t) = (&self.base.env, &self.base.target);
        let cg = t.cgroup(Mode::Blind)?;
        let s = &env.settings;
        let waking = match (s.blind.wake, &t.blind_bell) {
            (BlindWake::Events, Some(b)) => {
                b.arm(true);
                BlindWaking::Events(Arc::clone(b))
            }
            _ => BlindWaking::Poll,
        };
        let opts = BlindOptions {
            buffer_cores: s.blind.buffer_cores,
            grow_hold: Duration::from_micros(s.blind.grow_hold_us),
            poll: Duration::from_micros(s.blind.poll_us),
            waking,
            priority: s.group_priority,
            thread_cpus: Some(s.thread_cpus.clone()),
            own: env.own.clone(),
            release: t.confine.clone(),
            bound: s.spin,
        };
        let b = Blind::spawn_reporting(
            Arc::clone(&env.page),
            env.slots.clone(),
            env.all_cpus.clone(),
            cg.group.clone(),
            Arc::clone(&cg.executor),
            opts,
            t.reporter.clone(),
        );
        let b = match b {
            Ok(b) => b,
            Err(e) => {
                if let Some(b) = &t.blind_bell {
                    b.arm(false);
                }
                return Err(e);
            }
        };
        let at = cpu_ns(b.tid());
        self.blind = Some((b, at));
        self.base.applied = true;
        Ok(())
    }
    fn withdraw(&mut self) -> Withdrawn {
        let Some((b, _)) = self.blind.take() else {
            return Withdrawn::Nothing;
        };
        if let Some(bell) = &self.base.target.blind_bell {
            bell.arm(false);
        }
        self.base.env.retire(b.tid(), (0, 0));
        self.base.applied = false;
        Withdrawn::Blind(b.stop())
    }
    fn cost(&self) -> Cost {
        self.blind
            .as_ref()
            .map_or_else(Cost::default, |(b, at)| Cost {
                cpu_ns: cpu_ns(b.tid()).saturating_sub(*at),
                cycles: b.cpuset_changes(),
                ..Cost::default()
            })
    }
    fn fits(&self, window: &ProfileSnapshot) -> Verdict {
        let hold = self.base.env.settings.blind.grow_hold_us * 1000;
        self.base.judge(Mode::Blind, window, hold)
    }
    fn applied(&self) -> bool {
        self.base.applied
    }
    fn is_running(&self) -> bool {
        self.blind.as_ref().is_none_or(|(b, _)| b.is_running())
    }
    fn tids(&self) -> Vec<u32> {
        self.blind.iter().map(|(b, _)| b.tid()).collect()
    }
}
