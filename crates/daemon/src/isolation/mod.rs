//! PerfIso's other resources: **memory** (soft and hard limits per batch
//! group; a machine watermark below which batch work is killed, lowest
//! priority first), **disk I/O** (bandwidth / IOPS limits and weights per
//! group; a shared budget divided by deficit-weighted round robin) and
//! **egress** (batch traffic at low priority through a cgroup-skb BPF
//! program).
//!
//! | piece | module |
//! |---|---|
//! | `[memory]`, `[io]`, `[egress]` and the `[[batch]]` keys; file checks | [`config`] |
//! | checks against the machine: devices, PSI, cgroup BPF, weights | [`plan`] |
//! | limits and the watermark thread | [`memory`] |
//! | killing a whole group | [`kill`] |
//! | limits, weights and the budget thread | [`io`] |
//! | the egress program's attachments | [`egress`] |
//! | limits an operator's group lost to its owner, written again | [`reassert`] |
//!
//! [`Isolation`] is what the daemon runs: started after the batch groups
//! are set up, ticked at every rescan, stopped before the executor
//! restores (every cgroup value went through it, so SIGTERM restores and
//! the next start after SIGKILL repairs, as for everything else).

pub mod config;
pub mod egress;
pub mod io;
pub mod kill;
pub mod memory;
pub mod plan;
pub mod reassert;

use crate::batch::BatchGroup;
use crate::error::DaemonError;
use crate::plan::Plan;
use elfen_cgroup::{CgroupError, Executor};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};

/// The errno of a cgroup I/O error.
pub(crate) fn errno(e: &CgroupError) -> Option<i32> {
    match e {
        CgroupError::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

/// Counters of memory, I/O and egress isolation, for the metrics.
#[derive(Debug, Clone, Default)]
pub struct IsolationCounts {
    /// Per batch group: (name, kills, processes killed).
    pub kills: Vec<(String, u64, u64)>,
    /// `MemAvailable` at the watermark's last read, bytes (`None`: not
    /// watched).
    pub available_bytes: Option<u64>,
    /// PSI trigger events.
    pub pressure_events: u64,
    /// `io.max` writes of the I/O budget.
    pub io_budget_changes: u64,
    /// Packets sent at low priority (`None`: no group asks for it).
    pub egress_packets: Option<u64>,
}

/// Memory, I/O and egress isolation of a running daemon.
#[derive(Debug)]
pub struct Isolation {
    /// (name, group, plan, hard memory limit in force).
    groups: Vec<(String, elfen_cgroup::Group, plan::GroupIso, Option<u64>)>,
    /// Per group: whether it is an operator's (existing) group, whose
    /// owner may write over its limits.
    existing: Vec<bool>,
    /// The `[io]` budget's device (its `io.max` is the budget thread's).
    budget_device: Option<elfen_cgroup::Device>,
    memory: Option<memory::MemoryWatch>,
    io: Option<io::IoBudgetController>,
    egress: Option<egress::Egress>,
    log: Receiver<String>,
    /// What start did, to report.
    pub started: Vec<String>,
}

impl Isolation {
    /// Applies every group's limits and starts the watermark, the I/O
    /// budget and the egress marking. On error, what was applied is in the
    /// executor's record (the caller restores it).
    pub fn start(
        plan: &Plan,
        executor: &Arc<Mutex<Executor>>,
        groups: &[BatchGroup],
    ) -> Result<Isolation, DaemonError> {
        let cfg = &plan.config;
        let iso = &plan.isolation;
        let (tx, rx) = channel();
        let mut started = Vec::new();
        let mut mine = Vec::new();
        {
            let mut ex = executor.lock().unwrap_or_else(|p| p.into_inner());
            for g in groups {
                let gi = g.plan.iso.clone();
                let mut applied = None;
                started.extend(memory::apply_limits(
                    &mut ex,
                    &g.plan.name,
                    &g.group,
                    &gi,
                    &mut applied,
                )?);
                started.extend(io::apply_limits(&mut ex, &g.plan.name, &g.group, &gi)?);
                mine.push((g.plan.name.clone(), g.group.clone(), gi, applied));
            }
        }
        let mut me = Isolation {
            groups: mine,
            existing: groups
                .iter()
                .map(|g| g.plan.source == crate::plan::GroupSource::Existing)
                .collect(),
            budget_device: iso.io_budget.as_ref().map(|b| b.device.device),
            memory: None,
            io: None,
            egress: None,
            log: rx,
            started,
        };
        if iso.min_available > 0 || iso.psi_trigger.is_some() {
            let victims = me
                .groups
                .iter()
                .map(|(name, group, gi, _)| memory::Victim {
                    name: name.clone(),
                    priority: gi.priority,
                    group: group.clone(),
                })
                .collect();
            let w = memory::MemoryWatch::start(
                victims,
                Arc::clone(executor),
                plan.lc.clone(),
                memory::WatchOptions::of(iso, cfg, &plan.writer_cpus),
                tx.clone(),
            )?;
            me.started.push(format!("memory watermark: {}", iso.watch));
            me.memory = Some(w);
        } else {
            me.started
                .push("memory watermark: off (min_available = 0, pressure off)".into());
        }
        if let Some(b) = &iso.io_budget {
            let sharers = me
                .groups
                .iter()
                .map(|(name, group, gi, _)| io::Sharer {
                    name: name.clone(),
                    group: group.clone(),
                    iso: gi.clone(),
                })
                .collect();
            me.started.push(format!(
                "I/O budget of {}: {} shared by weight every {} ms (deficit-weighted round robin)",
                b.device,
                budget_words(b.limits),
                b.period_ms
            ));
            me.io = Some(io::IoBudgetController::start(
                b.clone(),
                sharers,
                Arc::clone(executor),
                plan.writer_cpus.clone(),
                tx.clone(),
            )?);
        }
        if let Some(marking) = iso.egress {
            let mut ex = executor.lock().unwrap_or_else(|p| p.into_inner());
            let gs: Vec<_> = me
                .groups
                .iter()
                .map(|(n, g, gi, _)| (n.clone(), g.clone(), gi.clone()))
                .collect();
            if let Some((e, notes)) = egress::Egress::start(&mut ex, marking, &gs)? {
                me.started.extend(notes);
                me.egress = Some(e);
            }
        }
        Ok(me)
    }

    /// At a rescan: hard memory limits lowered as the use allows, an
    /// operator's group's limits written again where its owner wrote over
    /// them, members of an operator's group joining its v2 group; and what
    /// the threads said (kills). Returns the lines to log.
    pub fn tick(&mut self, ex: &mut Executor) -> Vec<String> {
        let mut out: Vec<String> = self.log.try_iter().collect();
        for (i, (name, group, gi, applied)) in self.groups.iter_mut().enumerate() {
            out.extend(memory::relower(ex, name, group, gi, applied));
            if self.existing.get(i) == Some(&true) {
                out.extend(reassert::reassert(
                    ex,
                    name,
                    group,
                    gi,
                    applied,
                    self.budget_device,
                ));
            }
        }
        if let Some(e) = &self.egress {
            out.extend(e.tick(ex));
        }
        out
    }

    /// What the threads said since the last call (without the rescan work).
    pub fn messages(&self) -> Vec<String> {
        self.log.try_iter().collect()
    }

    /// The counters.
    pub fn counts(&self) -> IsolationCounts {
        let mut c = IsolationCounts::default();
        if let Some(m) = &self.memory {
            let k = m.counts();
            c.kills = self
                .groups
                .iter()
                .enumerate()
                .map(|(i, (n, ..))| {
                    (
                        n.clone(),
                        k.kills[i].load(Relaxed),
                        k.killed[i].load(Relaxed),
                    )
                })
                .collect();
            let a = k.available.load(Relaxed);
            c.available_bytes = (a > 0).then_some(a);
            c.pressure_events = k.pressure_events.load(Relaxed);
        }
        c.io_budget_changes = self.io.as_ref().map_or(0, io::IoBudgetController::changes);
        c.egress_packets = self.egress.as_ref().map(egress::Egress::packets);
        c
    }

    /// Whether its threads run.
    pub fn is_running(&self) -> bool {
        self.memory
            .as_ref()
            .is_none_or(memory::MemoryWatch::is_running)
            && self
                .io
                .as_ref()
                .is_none_or(io::IoBudgetController::is_running)
    }

    /// Stops the threads and detaches the egress program; what to report.
    /// (The executor restores the limits afterwards.)
    pub fn stop(self) -> Vec<String> {
        let mut out: Vec<String> = self.log.try_iter().collect();
        let counts = self.counts();
        if let Some(m) = self.memory {
            m.stop();
            let total: u64 = counts.kills.iter().map(|k| k.1).sum();
            out.push(format!(
                "memory watermark: {total} batch group kills{}",
                if total == 0 {
                    String::new()
                } else {
                    format!(
                        " ({})",
                        counts
                            .kills
                            .iter()
                            .filter(|k| k.1 > 0)
                            .map(|k| format!("{} ×{}", k.0, k.1))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ));
        }
        if let Some(i) = self.io {
            let n = i.changes();
            i.stop();
            out.push(format!("I/O budget: {n} io.max changes"));
        }
        if let Some(e) = self.egress {
            out.push(e.stop());
        }
        out
    }
}

pub(crate) fn budget_words(l: [Option<u64>; 4]) -> String {
    let names = ["read", "write", "read", "write"];
    (0..4)
        .filter_map(|d| {
            l[d].map(|v| {
                if d < 2 {
                    format!("{} {}/s", names[d], crate::units::human_bytes(v))
                } else {
                    format!("{} {v} IOPS", names[d])
                }
            })
        })
        .collect::<Vec<_>>()
        .join(", ")
}
