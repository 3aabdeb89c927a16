//! [`Daemon::shutdown`]: everything given back, and what it did.

use super::Daemon;
use crate::blind::BlindReport;
use crate::freeze::FreezeReport;
use crate::guard::GuardReport;
use crate::isolation::Isolation;
use crate::protection::{DriverState, Withdrawn};
use crate::writer::{LcWriterHandle, WriterReport};
use elfen_cgroup::RestoreReport;
use elfen_ops::health::GroupState;
use serde::Serialize;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// What [`Daemon::shutdown`] did.
#[derive(Debug, Default, Serialize)]
pub struct ShutdownReport {
    /// The writer's counters (or its error).
    pub writer: Option<WriterReport>,
    /// The writer's error, if it stopped with one.
    pub writer_error: Option<String>,
    /// Each guard.
    pub guards: Vec<GuardReport>,
    /// Each freezer.
    pub freezers: Vec<FreezeReport>,
    /// Each blind-isolation controller.
    pub blind: Vec<BlindReport>,
    /// Each sched_ext scheduler unloaded, in words.
    pub schedulers: Vec<String>,
    /// Each group's protection at the stop: its mode, switches, verdict.
    pub modes: Vec<DriverState>,
    /// The writer's hold of its batch lane (guard mode): (occupied, held,
    /// spins, busy periods caught while spinning).
    pub writer_hold: Option<(u64, u64, u64, u64)>,
    /// Memory, I/O and egress isolation.
    pub isolation: Vec<String>,
    /// Commands stopped, classes restored.
    pub groups: Vec<String>,
    /// The executor's restore.
    pub restored: RestoreReport,
    /// The batch groups' states and failed knob writes.
    pub health: Option<elfen_ops::health::DaemonHealth>,
}

impl std::fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(w) = &self.writer {
            writeln!(
                f,
                "writer: {} events, {} busy periods followed at their edges and {} counted by \
                 the kernel (off the edges), {} reconciled from the slots ({} stale), {} dropped \
                 by BPF, {} windows at SCHED_OTHER past its real-time bound; busy edge → writer \
                 running {}",
                w.events,
                w.begins,
                w.kernel_periods,
                w.reconciled,
                w.stale,
                w.dropped,
                w.rt_demotions,
                w.wake
            )?;
        }
        if let Some(e) = &self.writer_error {
            writeln!(f, "writer stopped with an error: {e}")?;
        }
        if let Some((occ, held, spins, caught)) = self.writer_hold {
            writeln!(
                f,
                "writer's hold of its batch lane: {spins} spins, {:.1} ms occupied while the LC was \
                 busy, {:.1} ms held through idle gaps, {caught} busy periods caught without a \
                 wake-up",
                occ as f64 / 1e6,
                held as f64 / 1e6
            )?;
        }
        for g in &self.guards {
            writeln!(
                f,
                "guard lane {} (cpu {}): {} occupations, {:.1} ms occupied ({} spins ended by the \
                 real-time bound, {:.1} ms occupied past it at SCHED_OTHER), {:.1} ms held, {} \
                 caught while holding, {} wake-ups; step-aside {}",
                g.lane,
                g.cpu,
                g.occupations,
                g.occupied_ns as f64 / 1e6,
                g.cuts,
                g.bounded_ns as f64 / 1e6,
                g.held_ns as f64 / 1e6,
                g.caught,
                g.wakes,
                g.step_aside
            )?;
        }
        for z in &self.freezers {
            writeln!(
                f,
                "freezer {}: {} freezes ({} late), {} thaws, {} failed writes; freeze {}; thaw {}; \
                 step-aside {}",
                z.group,
                z.freezes,
                z.late,
                z.thaws,
                z.failed_writes,
                z.freeze,
                z.thaw,
                z.step_aside
            )?;
        }
        for b in &self.blind {
            writeln!(
                f,
                "blind isolation {}: {} cpuset changes ({} shrinks, {} freezes), {} steps on busy \
                 edges, {} on the poll; LC switch → its CPU taken from batch {}{}",
                b.group,
                b.cpuset_changes,
                b.shrinks,
                b.freezes,
                b.woken,
                b.polled,
                b.reaction,
                if b.errors.is_empty() {
                    String::new()
                } else {
                    format!("; errors: {}", b.errors.join("; "))
                }
            )?;
        }
        for s in &self.schedulers {
            writeln!(f, "{s}")?;
        }
        for m in &self.modes {
            if m.switches > 0 || m.configured != m.active {
                writeln!(
                    f,
                    "batch {}: mode {} ran {} at the stop ({} switches{})",
                    m.group,
                    m.configured,
                    m.active,
                    m.switches,
                    m.last_switch
                        .as_deref()
                        .map_or(String::new(), |l| format!("; last: {l}"))
                )?;
            }
        }
        for g in &self.groups {
            writeln!(f, "{g}")?;
        }
        for g in self.health.iter().flat_map(|h| &h.groups) {
            if g.state == GroupState::Ok && g.failures.is_empty() {
                continue;
            }
            let failed: Vec<String> = g
                .failures
                .iter()
                .map(|k| format!("{} {}", k.knob.name(), k.count))
                .collect();
            writeln!(
                f,
                "batch {}: {}{}{}",
                g.name,
                g.state.word(),
                g.reason
                    .as_deref()
                    .map_or(String::new(), |r| format!(" — {r}")),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!("; failed writes: {}", failed.join(", "))
                }
            )?;
        }
        for l in &self.isolation {
            writeln!(f, "{l}")?;
        }
        if self.restored.is_empty() {
            writeln!(f, "cgroups: nothing to restore")
        } else {
            write!(f, "cgroups restored:\n{}", self.restored)
        }
    }
}

impl Daemon {
    /// Gives everything back: thaws (freezers), ends the LC lines' open
    /// requests (writer), stops guards, stops commands and restores
    /// scheduling classes, restores every recorded cgroup value and
    /// removes the groups it created, removes the page.
    pub fn shutdown(mut self) -> ShutdownReport {
        // A deliberate stop: instrumented programs still attached to the
        // page (it is unlinked, they keep their mapping) must not pause for
        // good on the heartbeat that stops now — borrowing is off, batch
        // runs unmanaged. (A crash leaves the bound set: they pause, the
        // safe side, until a new daemon beats on a page they attach to.)
        let _ = self.page.set_heartbeat_stale(0);
        let _ = self.page.set_control(elfen_shm::KillMode::Unmanaged);
        let mut r = ShutdownReport {
            modes: self.modes(),
            isolation: self
                .isolation
                .take()
                .map(Isolation::stop)
                .unwrap_or_default(),
            ..ShutdownReport::default()
        };
        // The writer first: its LC lines end their open requests, so a
        // guard occupying its lane lets go.
        match self.writer.take().map(LcWriterHandle::stop) {
            Some(Ok(w)) => r.writer = Some(w),
            Some(Err(e)) => r.writer_error = Some(e.to_string()),
            None => {}
        }
        if let Some(h) = self.env.as_ref().and_then(|e| e.writer_hold.as_deref()) {
            r.writer_hold = Some((
                h.occupied_ns.load(Relaxed),
                h.held_ns.load(Relaxed),
                h.spins.load(Relaxed),
                h.caught.load(Relaxed),
            ));
        }
        // Freezers thaw and blind isolation gives every CPU back as they
        // stop; guards stop with the last group that guards.
        let mut withdrawn = std::mem::take(&mut self.withdrawn);
        for d in self.drivers.drain(..) {
            withdrawn.extend(d.stop());
        }
        for w in withdrawn {
            match w {
                Withdrawn::Guards(g) => r.guards.extend(g),
                Withdrawn::Freezer(f) => r.freezers.push(f),
                Withdrawn::Blind(b) => r.blind.push(b),
                Withdrawn::Scheduler(u) => r.schedulers.push(unloaded_line(&u)),
                Withdrawn::Nothing => {}
            }
        }
        {
            let ex = self
                .executor
                .as_ref()
                .map(|e| e.lock().unwrap_or_else(|p| p.into_inner()));
            for g in &mut self.groups {
                r.groups
                    .extend(g.stop(ex.as_deref(), Duration::from_secs(2)));
            }
        }
        self.groups.clear();
        if let Some(ex) = &self.executor {
            r.restored = ex.lock().unwrap_or_else(|p| p.into_inner()).restore_all();
        }
        r.health = Some(self.health.snapshot());
        let _ = std::fs::remove_file(elfen_ops::health::health_path(self.page.path()));
        r
    }
}

/// A sched_ext scheduler's unload in words.
fn unloaded_line(u: &elfen_scx::Unloaded) -> String {
    let st = &u.stats;
    let mut s = format!(
        "sched_ext scheduler elfen_lanes unloaded: {} batch threads back to their policy; {} LC \
         switch-ins, {} sibling kicks, {} dispatches held, {} batch starts beside the LC",
        u.restored, st.lc_in, st.kick_preempt, st.held, st.ran_held
    );
    if let Some(e) = &u.exit {
        s += &format!("; the kernel had unloaded it: {e}");
    }
    if !u.not_restored.is_empty() {
        s += &format!("; not restored: {}", u.not_restored.join("; "));
    }
    s
}
