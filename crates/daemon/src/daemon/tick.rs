//! [`Daemon::tick`]: one round of upkeep, and the checks of the groups
//! that follow a unit, container or pod or whose owner writes over them.

use super::unseen::Verdict;
use super::{Daemon, log};
use crate::batch::BatchGroup;
use crate::config::{Mode, OnGroupLost};
use crate::error::DaemonError;
use crate::health::Health;
use crate::lc::Notice;
use crate::writer::LcWriterHandle;
use elfen_ops::health::{DaemonKnob, GroupState};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// While the LC goes unseen, its WARN is said again every this many
/// windows (once a minute with the default window).
const UNSEEN_REPEAT: u64 = 12;

impl Daemon {
    /// One round of upkeep: heartbeat; SCHED_IDLE for new threads and
    /// exited commands every `lc.rescan_ms`, and a look that every batch
    /// group's cgroup is still there; failed knob writes said, fallbacks
    /// engaged, the health published. Returns what to report; an error
    /// when a thread of the daemon died or a group was lost with
    /// `on_group_lost = "stop"` (the run must end).
    pub fn tick(&mut self) -> Result<Vec<String>, DaemonError> {
        let _ = self.page.beat();
        let notices = self.notices();
        for n in &notices {
            match n {
                Notice::Restarted { .. } => self.lc_restarts += 1,
                Notice::Ignored { .. } => self.health.lc_ignored(),
                Notice::Moved { groups } => self.health.set_lc_groups(groups.clone()),
                Notice::Followed { procs, .. } => self.lc_followed += procs.len() as u64,
                _ => {}
            }
        }
        let mut out: Vec<String> = notices
            .iter()
            .filter(|n| !n.is_quiet())
            .map(|n| n.to_string())
            .collect();
        let mut refused = None;
        for d in &mut self.drivers {
            match d.tick() {
                Ok(said) => out.extend(said),
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        self.note_own_threads();
        if let Some(ex) = &self.executor {
            let ex = ex.lock().unwrap_or_else(|p| p.into_inner());
            for (i, g) in self.groups.iter_mut().enumerate() {
                // a mode that wants SCHED_IDLE (idle as a fallback): at once
                if g.sched_idle.load(Relaxed) {
                    g.idle_threads(&ex, Some((&self.health, i)));
                }
            }
        }
        if let Some(iso) = &self.isolation {
            out.extend(iso.messages());
        }
        let now = Instant::now();
        if now >= self.next_rescan {
            self.next_rescan = now + Duration::from_millis(self.plan.config.lc.rescan_ms);
            // groups made anew at another path, for their modes to follow
            // once the executor is free (a mode's apply takes it)
            let mut moved_to = Vec::new();
            if let Some(ex) = &self.executor {
                let mut ex = ex.lock().unwrap_or_else(|p| p.into_inner());
                for (i, g) in self.groups.iter_mut().enumerate() {
                    let n = g.idle_threads(&ex, Some((&self.health, i)));
                    if n > 0 {
                        out.push(format!(
                            "batch {}: {n} new threads set SCHED_IDLE",
                            g.plan.name
                        ));
                    }
                    if g.plan.follows {
                        if let Some((line, group)) =
                            moved(g, i, &mut ex, &self.plan.config, &self.health)
                        {
                            out.push(line);
                            moved_to.push((i, group));
                        }
                        out.extend(follow(g, i, &mut ex, &self.health));
                        if self.health.is_waiting(i) {
                            let since = *self.gone_since[i].get_or_insert(now);
                            gone_too_long(g, i, since, now, &self.plan.config, &self.health);
                            continue;
                        }
                        self.gone_since[i] = None;
                        if self.health.state(i) != GroupState::Lost {
                            // back after a loss (on_group_lost = "continue")
                            self.lost_said[i] = false;
                        }
                    }
                    if !g.is_owned() && g.present(&ex) {
                        out.extend(reassert(g, &mut ex));
                    }
                    // an operator's group removed is lost now; a followed
                    // one removed since `follow` looked (a container
                    // stopping now) is `follow`'s to see at the next tick:
                    // waiting, lost only after group_gone_ms
                    let watched = if g.plan.follows {
                        &[][..]
                    } else {
                        g.group.controllers()
                    };
                    for &c in watched {
                        let Ok(dir) = ex.hierarchy().group_dir(c, g.group.path()) else {
                            continue;
                        };
                        if !dir.is_dir() {
                            self.health.mark_lost(
                                i,
                                format!(
                                    "its cgroup {} was removed while the daemon ran: its \
                                     processes are no longer contained",
                                    dir.display()
                                ),
                            );
                        }
                    }
                    out.extend(g.poll_exit(&ex));
                }
            }
            for (i, group) in moved_to {
                let Some(d) = self.drivers.iter_mut().find(|d| d.index() == i) else {
                    continue;
                };
                match d.rebind(group) {
                    Ok(line) => out.push(line),
                    Err(e) => {
                        refused.get_or_insert(e);
                    }
                }
            }
            if let (Some(iso), Some(ex)) = (&mut self.isolation, &self.executor) {
                out.extend(iso.tick(&mut ex.lock().unwrap_or_else(|p| p.into_inner())));
            }
        }
        self.fall_back();
        out.extend(self.check_unseen());
        out.extend(self.failure_log.lines(&self.health));
        let lost = self.newly_lost(&mut out);
        self.publish_modes();
        self.update_metrics();
        self.publish_health();
        if let Some(e) = refused {
            out.into_iter().for_each(log);
            return Err(e);
        }
        match self.ended(lost) {
            Some(e) => {
                // said before the error ends the run
                out.into_iter().for_each(log);
                Err(e)
            }
            None => Ok(out),
        }
    }

    /// The check that the LC is seen on its request lanes
    /// ([`super::unseen`]), when a window ends: an LC that goes unseen is
    /// said at WARN (at once, then every [`UNSEEN_REPEAT`] windows while
    /// it lasts) and put in the health record; seen again, said.
    fn check_unseen(&mut self) -> Option<String> {
        let w = self.writer.as_ref()?;
        if !self.unseen.due(Instant::now()) {
            return None;
        }
        let lc = w.lc_pids();
        let mut batch = Vec::new();
        if let Some(ex) = &self.executor {
            let ex = ex.lock().unwrap_or_else(|p| p.into_inner());
            for g in &self.groups {
                batch.extend(ex.procs(&g.group).unwrap_or_default());
            }
        }
        match self.unseen.tick(&self.page, w.slots(), &lc, &batch)? {
            Verdict::Unseen(msg) => {
                let n = self.unseen.windows();
                if self.health.lc_unseen().is_none() || n % UNSEEN_REPEAT == 0 {
                    crate::logging::warn(format!(
                        "LC UNSEEN ({n} window{} so far): {msg}",
                        if n == 1 { "" } else { "s" }
                    ));
                }
                self.health.set_lc_unseen(Some(msg));
                None
            }
            Verdict::SeenAgain => {
                self.health.set_lc_unseen(None);
                Some("the LC service is seen busy on its request lanes again".to_string())
            }
        }
    }

    /// Why the run must end: a group lost (with `on_group_lost = "stop"`),
    /// a thread of the daemon gone.
    fn ended(&mut self, lost: Option<(String, String)>) -> Option<DaemonError> {
        if let (Some((name, path)), OnGroupLost::Stop) = (lost, self.plan.config.on_group_lost) {
            return Some(DaemonError::GroupLost { name, path });
        }
        if self.writer.as_ref().is_some_and(|w| !w.is_running()) {
            let err = self.writer.take().map(LcWriterHandle::stop);
            return Some(match err {
                Some(Err(e)) => e,
                _ => DaemonError::thread("lc writer", "stopped"),
            });
        }
        if self.isolation.as_ref().is_some_and(|i| !i.is_running()) {
            return Some(DaemonError::thread(
                "memory or I/O isolation",
                "its thread ended",
            ));
        }
        if let Some(d) = self.drivers.iter().find(|d| !d.is_running()) {
            return Some(DaemonError::thread(
                d.active().mode().name(),
                format!("a thread of batch group {}'s protection ended", d.index()),
            ));
        }
        None
    }

    /// The threads the protections run now, for blind isolation's count
    /// of idle CPUs.
    fn note_own_threads(&self) {
        let Some(env) = &self.env else { return };
        for d in &self.drivers {
            for t in d.active().tids() {
                env.own.add(t);
            }
        }
    }

    /// A freeze or blind-isolation group whose freezes or cpuset writes
    /// fail (the group still there) falls back to SCHED_IDLE, once.
    fn fall_back(&mut self) {
        for (i, g) in self.groups.iter_mut().enumerate() {
            let knobs: &[DaemonKnob] = match g.mode() {
                Mode::Freeze => &[DaemonKnob::Freeze],
                Mode::Blind => &[DaemonKnob::Cpuset, DaemonKnob::Freeze],
                _ => continue,
            };
            if self.health.state(i) != GroupState::Degraded
                || self.health.has_fallback(i)
                || !knobs.iter().any(|&k| self.health.failing(i, k))
            {
                continue;
            }
            g.fall_back_to_sched_idle();
            let how = format!(
                "{} writes fail: its threads are put SCHED_IDLE instead (they yield to the LC's \
                 threads but share its lanes)",
                if g.mode() == Mode::Freeze {
                    "freeze"
                } else {
                    "cpuset or freeze"
                }
            );
            crate::logging::warn(format!("batch {}: DEGRADED: {how}", g.plan.name));
            self.health.set_fallback(i, how);
            // at once, not at the next rescan
            if let Some(ex) = &self.executor {
                let ex = ex.lock().unwrap_or_else(|p| p.into_inner());
                g.idle_threads(&ex, Some((&self.health, i)));
            }
        }
    }

    /// Says each group lost since the last tick (loudly); returns the first
    /// one's name and path.
    fn newly_lost(&mut self, out: &mut Vec<String>) -> Option<(String, String)> {
        let mut first = None;
        let snap = self.health.snapshot();
        for (i, g) in snap.groups.iter().enumerate() {
            if g.state != GroupState::Lost || self.lost_said[i] {
                continue;
            }
            self.lost_said[i] = true;
            let then = match self.plan.config.on_group_lost {
                OnGroupLost::Stop => "the daemon stops (on_group_lost = \"stop\")",
                OnGroupLost::Continue => {
                    "the daemon carries on without it (on_group_lost = \"continue\")"
                }
            };
            out.push(format!(
                "LOST: batch {} ({}): {}; {then}",
                g.name,
                g.path,
                g.reason
                    .as_deref()
                    .unwrap_or("its cgroup is gone: its processes are no longer contained")
            ));
            first.get_or_insert((g.name.clone(), g.path.clone()));
        }
        first
    }
}

/// A batch group named by a container or pod, gone from its path but
/// running again at another (made anew under the same name: a new id):
/// the group moves there and its knobs are applied. Returns what to say
/// and the new group, for its mode to follow. A move that fails is tried
/// again at the next rescan.
fn moved(
    g: &mut BatchGroup,
    i: usize,
    ex: &mut elfen_cgroup::Executor,
    config: &crate::config::Config,
    health: &Health,
) -> Option<(String, elfen_cgroup::Group)> {
    let b = config.batch.iter().position(|b| b.name == g.plan.name)?;
    let section = &config.batch[b];
    if !section.may_move() || g.present(ex) {
        return None;
    }
    let (path, how) = crate::placement::batch_group(b, section, config, ex.hierarchy()).ok()??;
    if path == g.plan.path {
        return None;
    }
    let old = g.rebind(ex, path, how.clone()).ok()?;
    let new = g.plan.path.to_string();
    health.set_path(i, new.clone());
    health.clear_waiting(i);
    health.clear_lost(i);
    let applied = match g.reapply(ex) {
        Ok(_) => "its knobs are applied again".to_string(),
        Err(e) => format!("its knobs could not be applied yet: {e}"),
    };
    Some((
        format!(
            "batch {}: {how} was made anew (cgroup {new}, was {old}): followed, {applied}",
            g.plan.name
        ),
        g.group.clone(),
    ))
}

/// A group that follows a unit, container or pod, gone since `since`:
/// lost (as `on_group_lost` says) once that is `group_gone_ms` ago.
fn gone_too_long(
    g: &BatchGroup,
    i: usize,
    since: Instant,
    now: Instant,
    config: &crate::config::Config,
    health: &Health,
) {
    let limit = Duration::from_millis(config.group_gone_ms);
    let gone = now.saturating_duration_since(since);
    if config.group_gone_ms == 0 || gone < limit {
        return;
    }
    let what = g
        .plan
        .named
        .clone()
        .unwrap_or_else(|| g.plan.path.to_string());
    health.mark_lost(
        i,
        format!(
            "{what} has been gone for {:.0} s (group_gone_ms = {})",
            gone.as_secs_f64(),
            config.group_gone_ms
        ),
    );
}

/// A batch group that follows a unit, container or pod: its group gone,
/// it waits (said once); back, its knobs are applied again (said).
fn follow(
    g: &mut BatchGroup,
    i: usize,
    ex: &mut elfen_cgroup::Executor,
    health: &Health,
) -> Option<String> {
    let what = g
        .plan
        .named
        .clone()
        .unwrap_or_else(|| g.plan.path.to_string());
    if !g.present(ex) {
        return health
            .set_waiting(
                i,
                format!(
                    "{what} runs nothing now: its cgroup {} is gone",
                    g.plan.path
                ),
            )
            .then(|| {
                format!(
                    "batch {}: {what} stopped (its cgroup {} is gone): waiting for it",
                    g.plan.name, g.plan.path
                )
            });
    }
    if !health.is_waiting(i) {
        return None;
    }
    Some(match g.reapply(ex) {
        Ok(_) => {
            health.clear_waiting(i);
            let was_lost = if health.clear_lost(i) {
                " (it had been lost: no longer)"
            } else {
                ""
            };
            format!(
                "batch {}: {what} is back (cgroup {}): its knobs are applied again{was_lost}",
                g.plan.name, g.plan.path
            )
        }
        Err(e) => format!(
            "batch {}: {what} is back but its knobs could not be applied yet: {e}",
            g.plan.name
        ),
    })
}

/// An existing group's start knobs written again where its owner wrote
/// over them (said, with what).
fn reassert(g: &mut BatchGroup, ex: &mut elfen_cgroup::Executor) -> Option<String> {
    match g.reapply(ex) {
        Ok(w) if w.is_empty() => None,
        Ok(w) => Some(format!(
            "batch {}: {} changed under the daemon (by the group's owner: systemd writes a \
             unit's CPU settings again at a daemon-reload): written again",
            g.plan.name,
            w.join(", ")
        )),
        Err(e) => Some(format!(
            "batch {}: its knobs could not be checked: {e}",
            g.plan.name
        )),
    }
}
