//! The daemon's modes in the harness: a batch process whose lanes are
//! handed back by the daemon's own guards (`guard`), freezer (`freeze`) or
//! blind isolation (`blind_isolation`) rather than by its threads' checks.
//! [`Managed`] wraps the batch process: they start after it and stop before
//! it is killed (a frozen process cannot die until thawed).

use super::rig::Rig;
use crate::batch::{BatchRun, BatchSample};
use crate::error::{BenchError, Result};
use crate::spec::Config;
use elfen_daemon::blind::{Blind, BlindHandle, BlindOptions};
use elfen_daemon::freeze::{FreezeOptions, Freezer, FreezerHandle};
use elfen_daemon::guard::{Guard, GuardHandle, GuardOptions};
use std::sync::Arc;
use std::time::Duration;

/// A batch process with its guards or its freezer.
pub struct Managed {
    guards: Vec<GuardHandle>,
    freezer: Option<FreezerHandle>,
    blind: Option<BlindHandle>,
    // Dropped last: after the guards and the freezer have stopped.
    inner: Box<dyn BatchRun>,
}

/// The real-time priority of guards and the freezer: below the
/// generator's (and the service's dispatcher's), so they never delay a
/// send or a response on the batch lane they share, and above every
/// SCHED_IDLE batch thread.
fn priority(rig: &Rig) -> u8 {
    match rig.generator.sched {
        elfen_cmd::proc::SchedClass::Fifo(p) if p > 3 => p - 2,
        _ => 1,
    }
}

impl Managed {
    /// Starts the guards (`guard`) or the freezer (`freeze`) of `inner`.
    pub fn start(rig: &Rig, config: Config, inner: Box<dyn BatchRun>) -> Result<Managed> {
        let ks = rig.kernel.as_ref().ok_or_else(|| {
            BenchError::Config(format!(
                "{config} needs the kernel signal (--lc-signal bpf)"
            ))
        })?;
        let daemon_err =
            |e: elfen_daemon::DaemonError| BenchError::Config(format!("{config}: {e}"));
        let mut m = Managed {
            guards: Vec::new(),
            freezer: None,
            blind: None,
            inner,
        };
        match config {
            Config::Guard => {
                let opts = GuardOptions {
                    priority: priority(rig),
                    ..GuardOptions::default()
                };
                for (lane, bell) in &ks.guard_bells {
                    let g = Guard::spawn(Arc::clone(&rig.page), *lane, Arc::clone(bell), opts)
                        .map_err(daemon_err)?;
                    m.guards.push(g);
                }
            }
            Config::Freeze => {
                let group = rig.cgroups.freezer.clone().ok_or_else(|| {
                    BenchError::Config("freeze: no freezer group (skipped config ran)".into())
                })?;
                let ex = Arc::clone(rig.cgroups.executor.as_ref().expect("with its group"));
                let opts = FreezeOptions {
                    policy: elfen_policy::PolicyConfig::simple(
                        elfen_policy::PolicyKind::BorrowIdle,
                    ),
                    timeout: Duration::from_millis(50),
                    max_sleep: Duration::from_millis(100),
                    priority: priority(rig),
                    cpus: Some(rig.lanes.batch_cpus.clone()),
                };
                let f = Freezer::spawn(
                    Arc::clone(&rig.page),
                    vec![rig.lanes.request_lane],
                    group,
                    ex,
                    Arc::clone(&ks.freeze_bell),
                    opts,
                )
                .map_err(daemon_err)?;
                m.freezer = Some(f);
            }
            Config::BlindIsolation => m.blind = Some(blind(rig, ks, &*m.inner)?),
            c => unreachable!("{c} is not one of the daemon's modes with a writer"),
        }
        Ok(m)
    }
}

/// Blind isolation over the pair's CPUs, reading the kernel signal's
/// per-CPU slots; the batch processes join the group's freezer too (they
/// were started in its cpuset), for the allocation of zero CPUs.
fn blind(rig: &Rig, ks: &super::rig::KernelSignal, inner: &dyn BatchRun) -> Result<BlindHandle> {
    let group = rig.cgroups.blind.clone().ok_or_else(|| {
        BenchError::Config("blind_isolation: no cgroup (skipped config ran)".into())
    })?;
    let ex = Arc::clone(rig.cgroups.executor.as_ref().expect("with its group"));
    {
        let e = ex.lock().unwrap_or_else(|p| p.into_inner());
        for pid in inner.pids() {
            e.add_process(&group, pid)
                .map_err(|e| BenchError::Config(format!("blind_isolation: {e}")))?;
        }
    }
    let opts = BlindOptions {
        buffer_cores: rig.blind_buffer_cores,
        grow_hold: Duration::from_micros(2000),
        poll: Duration::from_micros(200),
        priority: priority(rig),
        thread_cpus: Some(rig.lanes.batch_cpus.clone()),
    };
    Blind::spawn(
        Arc::clone(&rig.page),
        ks.writer.slots().clone(),
        rig.lanes.all_cpus(),
        group,
        ex,
        opts,
    )
    .map_err(|e| BenchError::Config(format!("blind_isolation: {e}")))
}

impl Drop for Managed {
    fn drop(&mut self) {
        // Blind isolation stops first (thawing when it froze), then the rest.
        if let Some(b) = self.blind.take() {
            let _ = b.stop();
        }
        // The freezer thaws when it stops; then the process may be killed.
        if let Some(f) = self.freezer.take() {
            drop(f.stop());
        }
        for g in self.guards.drain(..) {
            let _ = g.stop();
        }
    }
}

impl BatchRun for Managed {
    fn pids(&self) -> Vec<u32> {
        self.inner.pids()
    }
    fn go(&self) {
        self.inner.go();
    }
    fn alive(&mut self) -> bool {
        self.inner.alive()
    }
    fn sample(&self) -> BatchSample {
        self.inner.sample()
    }
    fn guard_occupied_ns(&self) -> u64 {
        self.guards.iter().map(GuardHandle::occupied_ns).sum()
    }
}
