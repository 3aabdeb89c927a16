//! What the daemon publishes while it runs: each group's protection and
//! health beside the page (`elfen status`), its CPU, and the metrics.

use super::{Daemon, log};
use crate::config::Mode;
use crate::isolation::Isolation;
use crate::metrics::{DaemonCpu, KnobCount, ModeState};
use crate::protection::Withdrawn;
use crate::writer::LcWriterHandle;
use elfen_ops::health::DaemonKnob;
use std::sync::atomic::Ordering::Relaxed;

impl Daemon {
    /// Each driver's state into the health record (`elfen status`).
    pub(super) fn publish_modes(&self) {
        let hold = self.env.as_ref().map(|e| e.hold());
        for d in &self.drivers {
            let st = d.state();
            let p = elfen_ops::health::ProtectionState {
                active: st.active.name().to_string(),
                switches: st.switches,
                last_switch: st.last_switch.clone(),
                fit: st
                    .verdict
                    .as_ref()
                    .map(|v| format!("{} {}: {}", v.mode, v.state.word(), v.reason)),
                contention_pct: st.contention.map(|c| c * 100.0),
                hold_us: (st.active == Mode::Guard).then(|| hold.unwrap_or(0) as f64 / 1e3),
                scheduler: st.scheduler.as_ref().map(|s| s.line()),
            };
            self.health.set_protection(d.index(), p);
        }
    }

    /// The daemon's CPU so far, split: its own work, the occupation that
    /// is the protection, lane time held through idle gaps (ns).
    pub fn cpu(&self) -> DaemonCpu {
        let me = std::process::id();
        let cpu = |t: u32| elfen_cmd::proc::thread_schedstat(me, t).map_or(0, |s| s.on_cpu_ns);
        let mut tids: Vec<u32> = self.writer.iter().map(LcWriterHandle::tid).collect();
        tids.push(self.upkeep_tid);
        if let Some(env) = &self.env {
            tids.extend(env.guard_tids());
        }
        for d in &self.drivers {
            tids.extend(d.active().tids());
        }
        tids.sort_unstable();
        tids.dedup();
        let total: u64 = tids.into_iter().map(cpu).sum::<u64>()
            + self.env.as_ref().map_or(0, |e| e.retired_cpu_ns());
        let (occupied_ns, held_ns) = self.env.as_ref().map_or((0, 0), |e| e.spin_ns());
        DaemonCpu {
            own_ns: total.saturating_sub(occupied_ns).saturating_sub(held_ns),
            occupied_ns,
            held_ns,
        }
    }

    /// Writes the health record beside the page when it changed.
    pub(super) fn publish_health(&mut self) {
        let h = self.health.snapshot();
        if self.published.as_ref() == Some(&h) {
            return;
        }
        match h.write(self.page.path()) {
            Ok(()) => self.published = Some(h),
            Err(e) if !self.publish_failed => {
                self.publish_failed = true;
                log(format!(
                    "cannot publish the daemon's health at {}: {e} (elfen status will not show \
                     it; the metrics do)",
                    elfen_ops::health::health_path(self.page.path()).display()
                ));
            }
            Err(_) => {}
        }
    }

    pub(super) fn update_metrics(&self) {
        let Some(m) = &self.metrics else { return };
        let guards = self
            .env
            .as_ref()
            .map(|e| e.guard_counts())
            .unwrap_or_default();
        let (events, reconciled, off_edges) = self.writer.as_ref().map_or((0, 0, false), |w| {
            let s = w.stats();
            (
                s.events.load(Relaxed),
                s.reconciled.load(Relaxed),
                s.off_edges.load(Relaxed),
            )
        });
        let repaired = self.recovered.actions.len() as u64;
        let restarts = self.lc_restarts;
        let followed = self.lc_followed;
        let cpuset_changes = self
            .drivers
            .iter()
            .filter(|d| d.active().mode() == Mode::Blind)
            .map(|d| d.active().cost().cycles)
            .sum::<u64>()
            + self.withdrawn_cpuset_changes();
        let h = self.health.snapshot();
        let mut knob_failures = Vec::new();
        for (i, g) in h.groups.iter().enumerate() {
            for &knob in &DaemonKnob::ALL {
                let failures = self.health.count(i, knob);
                if failures > 0 || self.health.runtime_knobs(i).contains(&knob) {
                    knob_failures.push(KnobCount {
                        group: g.name.clone(),
                        knob,
                        failures,
                    });
                }
            }
        }
        let groups = h.groups.iter().map(|g| (g.name.clone(), g.state)).collect();
        let modes = self
            .drivers
            .iter()
            .map(|d| {
                let st = d.state();
                ModeState {
                    group: st.group.clone(),
                    rungs: self.plan.groups[d.index()].rungs.clone(),
                    active: st.active,
                    switches: st.switches,
                    fits: st.verdict.as_ref().map(|v| (v.mode, v.state)),
                    contention: st.contention,
                    scheduler: st.scheduler.clone(),
                }
            })
            .collect();
        let cpu = self.cpu();
        let hold_ns = self.env.as_ref().map_or(0, |e| e.hold());
        let (periods, busy) = self.writer.as_ref().map_or((0, Default::default()), |w| {
            let b = w.profile().snapshot(elfen_shm::clock::monotonic_ns()).busy;
            (b.count, b)
        });
        let isolation = self
            .isolation
            .as_ref()
            .map(Isolation::counts)
            .unwrap_or_default();
        m.update(|s| {
            s.isolation = isolation;
            s.cpuset_changes = cpuset_changes;
            s.guards = guards;
            s.writer_events = events;
            s.writer_reconciled = reconciled;
            s.writer_off_edges = off_edges;
            s.lc_restarts = restarts;
            s.lc_ignored = h.lc_ignored;
            s.lc_followed = followed;
            s.lc_unseen = h.lc_unseen.is_some();
            s.repaired = repaired;
            s.knob_failures = knob_failures;
            s.groups = groups;
            s.modes = modes;
            s.cpu = cpu;
            s.hold_ns = hold_ns;
            s.busy_periods = periods;
            s.busy = busy;
        });
    }

    /// cpuset writes of blind isolation that was withdrawn (switches).
    fn withdrawn_cpuset_changes(&self) -> u64 {
        self.withdrawn
            .iter()
            .map(|w| match w {
                Withdrawn::Blind(b) => b.cpuset_changes,
                _ => 0,
            })
            .sum()
    }
}
