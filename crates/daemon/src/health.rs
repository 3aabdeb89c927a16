//! **Failures that must not go quiet**: every knob write the daemon makes
//! while it runs (freeze, thaw, cpuset, SCHED_IDLE; `cpu.idle` and moves at
//! the start) that fails is counted per batch group and knob, and decided:
//!
//! - **retry**: a transient error (`EBUSY`, `EAGAIN`, `EINTR`) is retried
//!   at once, a few times ([`retry`]); only a write that still fails counts;
//! - **degrade**: a write that fails on a group that still exists (a
//!   freeze refused, a cpuset the kernel will not take) makes the group
//!   *degraded*: the daemon says so and protects the LC the way that is
//!   left — a freeze or blind-isolation group falls back to SCHED_IDLE on
//!   every thread (they yield to the LC's threads but share its lanes); a
//!   guard group whose threads refuse SCHED_IDLE keeps its guard;
//! - **stop**: a group whose cgroup is gone (removed under the daemon: its
//!   processes are no longer contained anywhere) is *lost*; the daemon says
//!   so loudly and, as `on_group_lost` says (default `stop`), restores
//!   everything and exits with [`EXIT_GROUP_LOST`], or keeps running with
//!   the group marked lost (`continue`).
//!
//! The counts and states are shared ([`Health`], atomics the freezer and
//! blind-isolation threads update) and published: as metrics
//! (`elfen_knob_failures_total{group,knob}`, `elfen_batch_group_lost`,
//! `elfen_batch_group_degraded`), in the health record beside the page that
//! `elfen status` shows (`elfen_ops::health`), and in the log — each
//! group's knob at its first failure and then at most once a second while
//! failures go on, with the count, never silenced.

use crate::config::Mode;
use crate::plan::GroupPlan;
use elfen_cgroup::CgroupError;
use elfen_ops::health::{
    DaemonAbout, DaemonHealth, DaemonKnob, GroupHealth, GroupState, HEALTH_SCHEMA, KnobFailures,
};
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

/// The exit status of `elfen daemon` after a batch group was lost (with
/// `on_group_lost = "stop"`), once everything was restored.
pub const EXIT_GROUP_LOST: i32 = 3;

/// Attempts of a write that fails with a transient error.
const ATTEMPTS: u32 = 3;

/// Runs `f` again (up to [`ATTEMPTS`] times, 100 µs apart) while it fails
/// with a transient error (`EBUSY`, `EAGAIN`, `EINTR`).
pub fn retry<T>(mut f: impl FnMut() -> Result<T, CgroupError>) -> Result<T, CgroupError> {
    let mut n = 1;
    loop {
        match f() {
            Err(e) if e.is_transient() && n < ATTEMPTS => {
                n += 1;
                std::thread::sleep(Duration::from_micros(100));
            }
            r => return r,
        }
    }
}

/// One group's live account.
#[derive(Debug)]
struct GroupLive {
    name: String,
    mode: Mode,
    /// Its path (a container's changes when it is made anew).
    path: Mutex<String>,
    counts: [AtomicU64; DaemonKnob::ALL.len()],
    /// The knob's last write failed.
    failing: [AtomicBool; DaemonKnob::ALL.len()],
    last_error: Mutex<[Option<String>; DaemonKnob::ALL.len()]>,
    lost: Mutex<Option<String>>,
    fallback: Mutex<Option<String>>,
    protection: Mutex<Option<elfen_ops::health::ProtectionState>>,
    /// The group follows a unit, container or pod: gone, it waits.
    follows: bool,
    waiting: Mutex<Option<String>>,
    named: Option<String>,
    owner: Option<String>,
    /// Times its freezer was thawed under the daemon while the daemon held
    /// it frozen for the LC (frozen again each time).
    owner_thaws: AtomicU64,
    /// Its owner holds it frozen: the daemon leaves its freezer alone.
    owner_holds: AtomicBool,
}

fn slot(k: DaemonKnob) -> usize {
    DaemonKnob::ALL
        .iter()
        .position(|&x| x == k)
        .expect("every knob is in ALL")
}

/// The batch groups' failures and states (see the module docs).
#[derive(Debug)]
pub struct Health {
    groups: Vec<GroupLive>,
    lc_ignored: AtomicU64,
    /// Why the daemon protects nothing now (the LC unseen on its lanes).
    lc_unseen: Mutex<Option<String>>,
    about: Mutex<Option<DaemonAbout>>,
}

/// A handle for one group's writer thread (freezer, blind isolation).
#[derive(Debug, Clone)]
pub struct GroupReporter {
    health: std::sync::Arc<Health>,
    group: usize,
}

impl GroupReporter {
    /// Reporting for group `group` (its index in the plan) of `health`.
    pub fn new(health: std::sync::Arc<Health>, group: usize) -> GroupReporter {
        GroupReporter { health, group }
    }

    /// A write of `knob` failed with `e` (after its retries).
    pub fn failed(&self, knob: DaemonKnob, e: &CgroupError) {
        self.health.failed(self.group, knob, e);
    }

    /// A write of `knob` succeeded.
    pub fn succeeded(&self, knob: DaemonKnob) {
        self.health.succeeded(self.group, knob);
    }

    /// See [`Health::owner_thawed`].
    pub fn owner_thawed(&self) {
        self.health.owner_thawed(self.group);
    }

    /// See [`Health::set_owner_holds`].
    pub fn set_owner_holds(&self, holds: bool) {
        self.health.set_owner_holds(self.group, holds);
    }
}

impl Health {
    /// An account for the plan's groups, all ok.
    pub fn new(groups: &[GroupPlan]) -> Health {
        Health {
            groups: groups
                .iter()
                .map(|g| GroupLive {
                    name: g.name.clone(),
                    mode: g.mode,
                    path: Mutex::new(g.path.to_string()),
                    counts: Default::default(),
                    failing: Default::default(),
                    last_error: Mutex::new(Default::default()),
                    lost: Mutex::new(None),
                    fallback: Mutex::new(None),
                    protection: Mutex::new(None),
                    follows: g.follows,
                    waiting: Mutex::new(None),
                    named: g.named.clone(),
                    owner: (g.owner != elfen_cgroup::Owner::Operator).then(|| g.owner.describe()),
                    owner_thaws: AtomicU64::new(0),
                    owner_holds: AtomicBool::new(false),
                })
                .collect(),
            lc_ignored: AtomicU64::new(0),
            lc_unseen: Mutex::new(None),
            about: Mutex::new(None),
        }
    }

    /// What the daemon runs (for `elfen status`).
    pub fn set_about(&self, about: DaemonAbout) {
        *self.about.lock().unwrap_or_else(|p| p.into_inner()) = Some(about);
    }

    /// The groups the LC is watched in now.
    pub fn set_lc_groups(&self, groups: Vec<String>) {
        if let Some(a) = self
            .about
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            a.lc_groups = groups;
        }
    }

    /// A write of `knob` on group `g` failed with `e`: counted; a group
    /// that is gone is lost.
    pub fn failed(&self, g: usize, knob: DaemonKnob, e: &CgroupError) {
        let vanished = e.is_not_found() || matches!(e, CgroupError::Group { .. });
        self.count_failure(g, knob, e.to_string(), vanished);
    }

    /// A write of `knob` on group `g` failed with `error`; `vanished`: the
    /// group is gone (it is lost).
    pub fn count_failure(&self, g: usize, knob: DaemonKnob, error: String, vanished: bool) {
        let Some(gl) = self.groups.get(g) else { return };
        let i = slot(knob);
        gl.counts[i].fetch_add(1, Relaxed);
        gl.failing[i].store(true, Relaxed);
        if vanished && gl.follows {
            self.set_waiting(g, format!("its cgroup is gone ({error})"));
        } else if vanished {
            self.mark_lost(g, format!("its cgroup is gone ({error})"));
        }
        gl.last_error.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(error);
    }

    /// A write of `knob` on group `g` succeeded (clears its failing flag).
    pub fn succeeded(&self, g: usize, knob: DaemonKnob) {
        if let Some(gl) = self.groups.get(g) {
            let f = &gl.failing[slot(knob)];
            if f.load(Relaxed) {
                f.store(false, Relaxed);
            }
        }
    }

    /// Group `g`'s freezer was thawed under the daemon while the daemon
    /// held it frozen for the LC (by its owner: `systemctl thaw`,
    /// `docker unpause`); the daemon freezes it again while the LC is busy.
    pub fn owner_thawed(&self, g: usize) {
        if let Some(gl) = self.groups.get(g) {
            gl.owner_thaws.fetch_add(1, Relaxed);
        }
    }

    /// Times group `g`'s freezer was thawed under the daemon.
    pub fn owner_thaws(&self, g: usize) -> u64 {
        self.groups
            .get(g)
            .map_or(0, |gl| gl.owner_thaws.load(Relaxed))
    }

    /// Whether group `g`'s owner holds it frozen (a freeze found it frozen
    /// already: `systemctl freeze`, `docker pause`, a frozen parent) until
    /// the owner thaws it; the daemon leaves its freezer alone meanwhile.
    pub fn set_owner_holds(&self, g: usize, holds: bool) {
        if let Some(gl) = self.groups.get(g) {
            gl.owner_holds.store(holds, Relaxed);
        }
    }

    /// See [`Health::set_owner_holds`].
    pub fn owner_holds(&self, g: usize) -> bool {
        self.groups
            .get(g)
            .is_some_and(|gl| gl.owner_holds.load(Relaxed))
    }

    /// Marks group `g` lost for `reason`; true the first time.
    pub fn mark_lost(&self, g: usize, reason: String) -> bool {
        let Some(gl) = self.groups.get(g) else {
            return false;
        };
        let mut l = gl.lost.lock().unwrap_or_else(|p| p.into_inner());
        if l.is_some() {
            return false;
        }
        *l = Some(reason);
        true
    }

    /// Group `g`, lost because it was gone too long, is back: no longer
    /// lost. True when it was.
    pub fn clear_lost(&self, g: usize) -> bool {
        self.groups.get(g).is_some_and(|gl| {
            gl.lost
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .is_some()
        })
    }

    /// Group `g` now lives at `path` (its container was made anew).
    pub fn set_path(&self, g: usize, path: String) {
        if let Some(gl) = self.groups.get(g) {
            *gl.path.lock().unwrap_or_else(|p| p.into_inner()) = path;
        }
    }

    /// Group `g` (one that follows a unit, container or pod) runs nothing
    /// now: its cgroup went with it. True the first time.
    pub fn set_waiting(&self, g: usize, reason: String) -> bool {
        let Some(gl) = self.groups.get(g) else {
            return false;
        };
        let mut w = gl.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let first = w.is_none();
        if first {
            *w = Some(reason);
        }
        first
    }

    /// Group `g` is back (its knobs applied again): no longer waiting, its
    /// failing knobs cleared. True if it was waiting.
    pub fn clear_waiting(&self, g: usize) -> bool {
        let Some(gl) = self.groups.get(g) else {
            return false;
        };
        let was = gl
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some();
        if was {
            gl.failing.iter().for_each(|f| f.store(false, Relaxed));
        }
        was
    }

    /// Whether group `g` waits for its unit, container or pod.
    pub fn is_waiting(&self, g: usize) -> bool {
        self.groups.get(g).is_some_and(|gl| {
            gl.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
        })
    }

    /// Records that group `g` is protected another way now (`how`).
    pub fn set_fallback(&self, g: usize, how: String) {
        if let Some(gl) = self.groups.get(g) {
            *gl.fallback.lock().unwrap_or_else(|p| p.into_inner()) = Some(how);
        }
    }

    /// Records how group `g` is protected now (its driver's state).
    pub fn set_protection(&self, g: usize, p: elfen_ops::health::ProtectionState) {
        if let Some(gl) = self.groups.get(g) {
            *gl.protection.lock().unwrap_or_else(|p| p.into_inner()) = Some(p);
        }
    }

    /// Whether group `g` has fallen back already.
    pub fn has_fallback(&self, g: usize) -> bool {
        self.groups.get(g).is_some_and(|gl| {
            gl.fallback
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
        })
    }

    /// Whether a write of `knob` on group `g` is failing now.
    pub fn failing(&self, g: usize, knob: DaemonKnob) -> bool {
        self.groups
            .get(g)
            .is_some_and(|gl| gl.failing[slot(knob)].load(Relaxed))
    }

    /// Failed writes of `knob` on group `g` so far.
    pub fn count(&self, g: usize, knob: DaemonKnob) -> u64 {
        self.groups
            .get(g)
            .map_or(0, |gl| gl.counts[slot(knob)].load(Relaxed))
    }

    /// The last error of `knob` on group `g`.
    pub fn last_error(&self, g: usize, knob: DaemonKnob) -> Option<String> {
        self.groups.get(g).and_then(|gl| {
            gl.last_error.lock().unwrap_or_else(|p| p.into_inner())[slot(knob)].clone()
        })
    }

    /// A same-named process of another user was not adopted as the LC.
    pub fn lc_ignored(&self) {
        self.lc_ignored.fetch_add(1, Relaxed);
    }

    /// The LC goes unseen on its request lanes (`Some(why)`), or is seen.
    pub fn set_lc_unseen(&self, why: Option<String>) {
        *self.lc_unseen.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }

    /// Why the LC goes unseen, while it does.
    pub fn lc_unseen(&self) -> Option<String> {
        self.lc_unseen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Group `g`'s state.
    pub fn state(&self, g: usize) -> GroupState {
        let Some(gl) = self.groups.get(g) else {
            return GroupState::Ok;
        };
        if gl.lost.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            GroupState::Lost
        } else if gl
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            GroupState::Waiting
        } else if gl.failing.iter().any(|f| f.load(Relaxed))
            || gl
                .fallback
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
        {
            GroupState::Degraded
        } else {
            GroupState::Ok
        }
    }

    /// The number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there is no group.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The record published for `elfen status` (and the metrics).
    pub fn snapshot(&self) -> DaemonHealth {
        let groups = self
            .groups
            .iter()
            .enumerate()
            .map(|(g, gl)| {
                let last = gl.last_error.lock().unwrap_or_else(|p| p.into_inner());
                let failures = DaemonKnob::ALL
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| gl.counts[i].load(Relaxed) > 0)
                    .map(|(i, &knob)| KnobFailures {
                        knob,
                        count: gl.counts[i].load(Relaxed),
                        last_error: last[i].clone().unwrap_or_default(),
                    })
                    .collect();
                let state = self.state(g);
                let reason = match state {
                    GroupState::Lost => gl.lost.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                    GroupState::Waiting => {
                        gl.waiting.lock().unwrap_or_else(|p| p.into_inner()).clone()
                    }
                    GroupState::Degraded => Some(
                        gl.fallback
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .clone()
                            .unwrap_or_else(|| "knob writes fail".to_string()),
                    ),
                    GroupState::Ok => None,
                };
                GroupHealth {
                    name: gl.name.clone(),
                    mode: gl.mode.name().to_string(),
                    path: gl.path.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                    state,
                    reason,
                    failures,
                    protection: gl
                        .protection
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .clone(),
                    named: gl.named.clone(),
                    owner: gl.owner.clone(),
                }
            })
            .collect();
        DaemonHealth {
            schema: HEALTH_SCHEMA.into(),
            pid: std::process::id(),
            lc_ignored: self.lc_ignored.load(Relaxed),
            lc_unseen: self.lc_unseen(),
            groups,
            about: self.about.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// The knobs group `g` writes while the daemon runs (its metrics are
    /// exported at 0 before any failure).
    pub fn runtime_knobs(&self, g: usize) -> &'static [DaemonKnob] {
        match self.groups.get(g).map(|gl| gl.mode) {
            Some(Mode::Freeze) => &[DaemonKnob::Freeze, DaemonKnob::Thaw, DaemonKnob::SchedIdle],
            Some(Mode::Blind) => &[
                DaemonKnob::Cpuset,
                DaemonKnob::Freeze,
                DaemonKnob::Thaw,
                DaemonKnob::SchedIdle,
            ],
            Some(Mode::Guard | Mode::Idle) => &[DaemonKnob::SchedIdle],
            Some(Mode::Auto) => &[
                DaemonKnob::Freeze,
                DaemonKnob::Thaw,
                DaemonKnob::Cpuset,
                DaemonKnob::SchedIdle,
            ],
            _ => &[],
        }
    }
}

/// What the log has said of each group's knobs: failures are logged at the
/// first one and then at most once a second, with the count since; what
/// the group's owner did to its freezer, when it happened (thaws under the
/// daemon at most once a second, with the count).
#[derive(Debug, Default)]
pub struct FailureLog {
    said: std::collections::BTreeMap<(usize, DaemonKnob), (u64, Instant)>,
    /// Per group: owner thaws said, when, and whether its owner holds it.
    owner: std::collections::BTreeMap<usize, (u64, Instant, bool)>,
}

impl FailureLog {
    /// Lines to log now about `health`.
    pub fn lines(&mut self, health: &Health) -> Vec<String> {
        let mut out = Vec::new();
        for g in 0..health.len() {
            self.owner_lines(health, g, &mut out);
            for &knob in &DaemonKnob::ALL {
                let n = health.count(g, knob);
                let (was, at) = self
                    .said
                    .get(&(g, knob))
                    .copied()
                    .unwrap_or((0, Instant::now() - Duration::from_secs(3600)));
                if n == was || at.elapsed() < Duration::from_secs(1) {
                    continue;
                }
                self.said.insert((g, knob), (n, Instant::now()));
                let gl = &health.groups[g];
                out.push(format!(
                    "batch {}: {} {} write{} of {} failed ({n} in all): {}",
                    gl.name,
                    n - was,
                    knob.name(),
                    if n - was == 1 { "" } else { "s" },
                    gl.path.lock().unwrap_or_else(|p| p.into_inner()),
                    health.last_error(g, knob).unwrap_or_default()
                ));
            }
        }
        out
    }

    /// What group `g`'s owner did to its freezer, since said.
    fn owner_lines(&mut self, health: &Health, g: usize, out: &mut Vec<String>) {
        let gl = &health.groups[g];
        let (said, at, held) = self.owner.get(&g).copied().unwrap_or((
            0,
            Instant::now() - Duration::from_secs(3600),
            false,
        ));
        let path = || gl.path.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let holds = health.owner_holds(g);
        if holds != held {
            out.push(if holds {
                format!(
                    "batch {}: {} is frozen by its owner (systemctl freeze, docker pause, a \
                     frozen parent): the daemon leaves it frozen, also at its stop, and does not \
                     thaw it until its owner does",
                    gl.name,
                    path()
                )
            } else {
                format!(
                    "batch {}: {} is thawed by its owner: the daemon freezes it for the LC \
                     again",
                    gl.name,
                    path()
                )
            });
        }
        let n = health.owner_thaws(g);
        let due = n != said && at.elapsed() >= Duration::from_secs(1);
        if due {
            out.push(format!(
                "batch {}: {} was thawed under the daemon while it held it frozen for the \
                 LC (by its owner: systemctl thaw, docker unpause): the daemon freezes it again \
                 while the LC is busy ({} time{}, {n} in all)",
                gl.name,
                path(),
                n - said,
                if n - said == 1 { "" } else { "s" }
            ));
        }
        let (said, at) = if due { (n, Instant::now()) } else { (said, at) };
        self.owner.insert(g, (said, at, holds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::GroupSource;
    use elfen_cgroup::GroupPath;

    fn plan(mode: Mode) -> GroupPlan {
        GroupPlan {
            name: "frz".into(),
            mode,
            path: GroupPath::new("batch/x").unwrap(),
            source: GroupSource::Existing,
            controllers: vec![],
            confine: None,
            idle: None,
            cpu_yield: None,
            rungs: vec![mode],
            guard_cpus: None,
            named: None,
            owner: elfen_cgroup::Owner::Operator,
            follows: false,
            iso: Default::default(),
        }
    }

    fn io(errno: i32) -> CgroupError {
        CgroupError::Io {
            path: "/sys/fs/cgroup/freezer/batch/x/freezer.state".into(),
            op: "writing \"FROZEN\"".into(),
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    #[test]
    fn transient_errors_are_retried_then_counted_once() {
        let mut calls = 0;
        let r: Result<(), _> = retry(|| {
            calls += 1;
            Err(io(libc::EBUSY))
        });
        assert!(r.is_err());
        assert_eq!(calls, ATTEMPTS, "a transient error is tried again");
        let mut calls = 0;
        let r: Result<(), _> = retry(|| {
            calls += 1;
            if calls < 2 {
                Err(io(libc::EAGAIN))
            } else {
                Ok(())
            }
        });
        assert!(r.is_ok() && calls == 2);
        let mut calls = 0;
        let _ = retry(|| -> Result<(), _> {
            calls += 1;
            Err(io(libc::EACCES))
        });
        assert_eq!(calls, 1, "a lasting error is not retried");
    }

    #[test]
    fn a_followed_group_that_vanishes_waits_instead() {
        let mut p = plan(Mode::Freeze);
        p.follows = true;
        let h = Health::new(&[p]);
        h.failed(0, DaemonKnob::Freeze, &io(libc::ENOENT));
        assert_eq!(h.state(0), GroupState::Waiting, "its unit stopped");
        assert!(h.is_waiting(0));
        let s = h.snapshot();
        assert!(s.groups[0].reason.as_deref().unwrap().contains("gone"));
        assert!(!s.troubled(), "waiting is not trouble");
        assert!(h.clear_waiting(0));
        assert_eq!(h.state(0), GroupState::Ok, "back, its failing knob cleared");
        assert_eq!(h.count(0, DaemonKnob::Freeze), 1, "the count stays");
    }

    #[test]
    fn failures_degrade_a_group_and_a_vanished_one_is_lost() {
        let h = Health::new(&[plan(Mode::Freeze)]);
        assert_eq!(h.state(0), GroupState::Ok);
        h.failed(0, DaemonKnob::Freeze, &io(libc::EACCES));
        assert_eq!(h.state(0), GroupState::Degraded);
        assert_eq!(h.count(0, DaemonKnob::Freeze), 1);
        h.succeeded(0, DaemonKnob::Freeze);
        assert_eq!(h.state(0), GroupState::Ok, "the knob works again");
        assert_eq!(h.count(0, DaemonKnob::Freeze), 1, "the count stays");
        let gone = io(libc::ENOENT);
        h.failed(0, DaemonKnob::Freeze, &gone);
        assert_eq!(h.state(0), GroupState::Lost);
        assert!(!h.mark_lost(0, "again".into()), "lost once");
        let s = h.snapshot();
        assert_eq!(s.groups[0].state, GroupState::Lost);
        assert_eq!(s.groups[0].failures[0].count, 2);
        assert!(s.groups[0].reason.as_deref().unwrap().contains("gone"));
        // the log says it at once, then at most once a second with the count
        let mut log = FailureLog::default();
        let l = log.lines(&h);
        assert_eq!(l.len(), 1, "{l:?}");
        assert!(l[0].contains("2 freeze writes") && l[0].contains("(2 in all)"));
        h.failed(0, DaemonKnob::Freeze, &gone);
        assert!(log.lines(&h).is_empty(), "not twice in a second");
    }

    #[test]
    fn what_the_owner_did_to_the_freezer_is_said() {
        let h = Health::new(&[plan(Mode::Freeze)]);
        let mut log = FailureLog::default();
        assert!(log.lines(&h).is_empty());
        h.set_owner_holds(0, true);
        let l = log.lines(&h);
        assert_eq!(l.len(), 1, "{l:?}");
        assert!(l[0].contains("frozen by its owner") && l[0].contains("batch/x"));
        assert!(log.lines(&h).is_empty(), "said once");
        h.set_owner_holds(0, false);
        let l = log.lines(&h);
        assert!(
            l.len() == 1 && l[0].contains("thawed by its owner"),
            "{l:?}"
        );
        h.owner_thawed(0);
        let l = log.lines(&h);
        assert!(
            l.len() == 1
                && l[0].contains("freezes it again while the LC is busy (1 time, 1 in all)"),
            "{l:?}"
        );
        h.owner_thawed(0);
        assert!(log.lines(&h).is_empty(), "not twice in a second");
        assert_eq!(h.owner_thaws(0), 2);
        assert_eq!(
            h.state(0),
            GroupState::Ok,
            "an owner's change is no failure"
        );
    }
}
