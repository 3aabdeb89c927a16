//! The daemon's modes in the harness: a batch process whose lanes are
//! handed back by the daemon's own code (`elfen_daemon::protection`) —
//! guards (`guard`), the freezer (`freeze`), blind isolation
//! (`blind_isolation`) or `auto` — rather than by its threads' checks.
//! [`Managed`] wraps the batch process: a [`Driver`] applies the mode after
//! the process started, a thread of its own (`elfen-auto`) ticks it (the
//! fit checks, freeze's fallback, auto's A/B periods, SCHED_IDLE where a
//! fallback wants it), and it is withdrawn before the process is killed (a
//! frozen process cannot die until thawed). `auto`'s state machine is kept
//! per load across the rounds, so each invocation continues where the
//! previous one at that load left off.

use super::rig::Rig;
use crate::batch::{BatchRun, BatchSample};
use crate::error::{BenchError, Result};
use crate::spec::Config;
use elfen_daemon::config::{AutoSection, FreezeSection, Mode};
use elfen_daemon::protection::{Cgroup, Driver, Env, Target};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the driver is ticked.
const TICK: Duration = Duration::from_millis(10);

/// `auto` in a harness invocation of a few seconds: a period of 1 s (a
/// solo window of 100 ms), a decision per period, switches 2 s apart.
fn auto_settings() -> AutoSection {
    AutoSection {
        period_ms: 1000,
        solo_ms: 100,
        confirm: 1,
        min_dwell_s: 2,
        step_down_s: 10,
        ..AutoSection::default()
    }
}

/// A batch process with the daemon's mode around it.
pub struct Managed {
    driver: Arc<Mutex<Option<Driver>>>,
    ticker: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
    env: Arc<Env>,
    autos: Arc<Mutex<std::collections::HashMap<u64, elfen_daemon::protection::auto::Auto>>>,
    rps_key: u64,
    /// Occupation and hold when the mode was applied (the writer's hold
    /// counts for the whole sweep).
    spin_at_start: (u64, u64),
    // Dropped last: after the mode is withdrawn.
    inner: Box<dyn BatchRun>,
}

/// Threads of the batch processes `pids` put SCHED_IDLE (a fallback to
/// idle mode wants them so).
fn idle_threads(pids: &[u32], done: &mut Vec<u32>) {
    for &p in pids {
        for t in elfen_cmd::proc::thread_ids(p) {
            if !done.contains(&t)
                && elfen_cmd::proc::set_sched(t, elfen_cmd::proc::SchedClass::Idle).is_ok()
            {
                done.push(t);
            }
        }
    }
}

impl Managed {
    /// Applies `config`'s mode to `inner` at load `rps`.
    pub fn start(rig: &Rig, config: Config, inner: Box<dyn BatchRun>, rps: f64) -> Result<Managed> {
        let ks = rig.kernel.as_ref().ok_or_else(|| {
            BenchError::Config(format!(
                "{config} needs the kernel signal (--lc-signal bpf)"
            ))
        })?;
        let (mode, group) = match config {
            Config::Guard => (Mode::Guard, None),
            Config::Freeze => (Mode::Freeze, rig.cgroups.freezer.clone()),
            Config::BlindIsolation => (Mode::Blind, rig.cgroups.blind.clone()),
            Config::Auto => (Mode::Auto, rig.cgroups.auto.clone()),
            c => unreachable!("{c} is not one of the daemon's modes with a writer"),
        };
        if mode != Mode::Guard && group.is_none() {
            return Err(BenchError::Config(format!(
                "{config}: no cgroup (a skipped configuration ran)"
            )));
        }
        let cgroup = group.map(|group| Cgroup {
            group,
            executor: Arc::clone(rig.cgroups.executor.as_ref().expect("with its group")),
        });
        if let (Mode::Blind, Some(cg)) = (mode, &cgroup) {
            // the processes join the blind group's freezer too (they were
            // started in its cpuset), for the allocation of zero CPUs
            let e = cg.executor.lock().unwrap_or_else(|p| p.into_inner());
            for pid in inner.pids() {
                e.add_process(&cg.group, pid)
                    .map_err(|e| BenchError::Config(format!("{config}: {e}")))?;
            }
        }
        let target = Target {
            index: 0,
            name: config.name().to_string(),
            cgroup,
            reporter: None,
            freeze_bell: Some(Arc::clone(&ks.freeze_bell)),
            blind_bell: Some(Arc::clone(&ks.blind_bell)),
            request_lanes: vec![rig.lanes.request_lane],
            // the batch process is pinned to the batch lanes already
            confine: None,
            // guard and auto batch runs SCHED_IDLE; freeze's and blind's
            // do not (a fallback to idle makes them)
            yields: matches!(config, Config::Guard | Config::Auto),
            sched_idle: Arc::default(),
        };
        let sched_idle = Arc::clone(&target.sched_idle);
        let rps_key = rps.to_bits();
        let kept = (mode == Mode::Auto)
            .then(|| {
                ks.autos
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&rps_key)
            })
            .flatten();
        let spin_at_start = ks.env.spin_ns();
        let (driver, said) = Driver::resume(
            &ks.env,
            target,
            mode,
            &FreezeSection::default(),
            &auto_settings(),
            kept,
        )
        .map_err(|e| BenchError::Config(format!("{config}: {e}")))?;
        for l in said {
            eprintln!("elfen bench: {l}");
        }
        let driver = Arc::new(Mutex::new(Some(driver)));
        let stop = Arc::new(AtomicBool::new(false));
        let (d2, s2, pids) = (Arc::clone(&driver), Arc::clone(&stop), inner.pids());
        let ticker = std::thread::Builder::new()
            .name("elfen-auto".into())
            .spawn(move || {
                let mut idled = Vec::new();
                while !s2.load(Relaxed) {
                    std::thread::sleep(TICK);
                    let mut d = d2.lock().unwrap_or_else(|p| p.into_inner());
                    let Some(d) = d.as_mut() else { break };
                    match d.tick() {
                        Ok(said) => said.iter().for_each(|l| eprintln!("elfen bench: {l}")),
                        Err(e) => eprintln!("elfen bench: {config}: {e}"),
                    }
                    if sched_idle.load(Relaxed) {
                        idle_threads(&pids, &mut idled);
                    }
                }
            })
            .map_err(|e| BenchError::io("starting the mode's ticker thread", e))?;
        Ok(Managed {
            driver,
            ticker: Some((ticker, stop)),
            env: Arc::clone(&ks.env),
            autos: Arc::clone(&ks.autos),
            rps_key,
            spin_at_start,
            inner,
        })
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        if let Some((t, stop)) = self.ticker.take() {
            stop.store(true, Relaxed);
            let _ = t.join();
        }
        // withdrawn (thawed, CPUs given back, guards stopped) before the
        // process is killed; auto's state kept for the next invocation
        let d = self.driver.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(d) = d {
            let (_, auto) = d.stop_keeping();
            if let Some(a) = auto {
                self.autos
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(self.rps_key, a);
            }
        }
    }
}

/// The guards' and the writer's spinning since `at` (occupied, held), ns.
fn spin_since(env: &Env, at: (u64, u64)) -> (u64, u64) {
    let (o, h) = env.spin_ns();
    (o.saturating_sub(at.0), h.saturating_sub(at.1))
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
        spin_since(&self.env, self.spin_at_start).0
    }
    fn guard_held_ns(&self) -> u64 {
        spin_since(&self.env, self.spin_at_start).1
    }
}
