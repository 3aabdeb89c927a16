//! Disk I/O: each batch group's static limits (`io.max` / blkio throttle:
//! bandwidth and IOPS per device) and kernel weights (v2 `io.weight` for
//! iocost and `io.bfq.weight` for BFQ, v1 `blkio.bfq.weight`), and the `[io]`
//! budget — PerfIso's deficit-weighted round robin (the law is
//! `elfen_policy::dwrr`, its comment says it) re-dividing a total batch
//! budget of one device among the groups by `io_weight` every
//! `period_ms`, through each group's `io.max` on that device (capped by the
//! group's static limit there).
//!
//! The controller thread runs on the daemon's CPUs (never a request lane),
//! reads each group's I/O counters on the device (v2 `io.stat`, v1
//! `blkio.throttle.io_service_bytes` / `io_serviced`), divides, and writes
//! only the limits that changed (the executor skips equal values).

use super::plan::{GroupIso, IoBudget};
use crate::error::DaemonError;
use crate::worker::Worker;
use elfen_cgroup::{Device, Executor, Group, IoStat, Knob};
use elfen_policy::dwrr::{DwrrGroup, divide};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Applies a group's static I/O limits and kernel weight.
pub fn apply_limits(
    ex: &mut Executor,
    name: &str,
    group: &Group,
    iso: &GroupIso,
) -> Result<Vec<String>, DaemonError> {
    let mut out = Vec::new();
    for k in &iso.io_max {
        ex.set(group, k.clone())?;
        out.push(format!("batch {name}: {k}"));
    }
    if let Some(w) = iso.io_weight {
        ex.set(group, Knob::IoWeight(w))?;
        out.push(format!("batch {name}: I/O weight {w}"));
    }
    if let Some(w) = iso.io_bfq_weight {
        ex.set(group, Knob::IoBfqWeight(w))?;
        out.push(format!("batch {name}: BFQ weight {w}"));
    }
    Ok(out)
}

/// A group's static limit on `device` (`None` per dimension: none).
fn static_caps(iso: &GroupIso, device: Device) -> [Option<u64>; 4] {
    for k in &iso.io_max {
        if let Knob::IoMax {
            device: d,
            read_bps,
            write_bps,
            read_iops,
            write_iops,
        } = k
        {
            if *d == device {
                return [*read_bps, *write_bps, *read_iops, *write_iops];
            }
        }
    }
    [None; 4]
}

/// One group under the budget.
#[derive(Debug, Clone)]
pub struct Sharer {
    /// Its name.
    pub name: String,
    /// Its handle.
    pub group: Group,
    /// Its plan (weight, static caps).
    pub iso: GroupIso,
}

/// The running budget controller.
#[derive(Debug)]
pub struct IoBudgetController {
    worker: Worker<()>,
    changes: Arc<AtomicU64>,
}

impl IoBudgetController {
    /// Starts the controller of `budget` over `groups`, on `cpus`.
    pub fn start(
        budget: IoBudget,
        groups: Vec<Sharer>,
        executor: Arc<Mutex<Executor>>,
        cpus: Vec<u32>,
        log: Sender<String>,
    ) -> Result<IoBudgetController, DaemonError> {
        let changes = Arc::new(AtomicU64::new(0));
        let c2 = Arc::clone(&changes);
        let (worker, ()) = Worker::start(
            "elfen-io-budget",
            None,
            move || {
                elfen_topo::set_current_affinity(&cpus)
                    .map_err(|e| DaemonError::thread("I/O budget", e.to_string()))?;
                Ok(((), ()))
            },
            move |(), stop| run(&budget, &groups, &executor, stop, &c2, &log),
            || (),
        )?;
        Ok(IoBudgetController { worker, changes })
    }

    /// `io.max` writes so far.
    pub fn changes(&self) -> u64 {
        self.changes.load(Relaxed)
    }

    /// Whether the thread runs.
    pub fn is_running(&self) -> bool {
        self.worker.is_running()
    }

    /// Stops it (the executor restores the groups' limits with the rest).
    pub fn stop(self) {
        self.worker.stop();
    }
}

/// A dimension's counter in an [`IoStat`].
fn counter(s: &IoStat, dim: usize) -> u64 {
    [s.read_bytes, s.write_bytes, s.read_ios, s.write_ios][dim]
}

fn run(
    budget: &IoBudget,
    groups: &[Sharer],
    executor: &Mutex<Executor>,
    stop: &AtomicBool,
    changes: &AtomicU64,
    log: &Sender<String>,
) {
    let period = Duration::from_millis(budget.period_ms);
    let dev = budget.device.device;
    let dims: Vec<usize> = (0..4).filter(|&d| budget.limits[d].is_some()).collect();
    let mut state: Vec<Vec<DwrrGroup>> = dims
        .iter()
        .map(|_| {
            groups
                .iter()
                .map(|g| DwrrGroup::new(g.iso.budget_weight))
                .collect()
        })
        .collect();
    let read = |ex: &Executor| -> Vec<IoStat> {
        groups
            .iter()
            .map(|g| ex.io_stat(&g.group, dev).unwrap_or_default())
            .collect()
    };
    let mut last = read(&executor.lock().unwrap_or_else(|p| p.into_inner()));
    let mut last_t = Instant::now();
    let mut used = vec![0.0; groups.len()];
    let mut applied = vec![[None::<u64>; 4]; groups.len()];
    let mut errors = 0;
    let mut next = Instant::now();
    while !stop.load(Relaxed) {
        let secs = last_t.elapsed().as_secs_f64().max(1e-3);
        let mut ex = executor.lock().unwrap_or_else(|p| p.into_inner());
        let now = read(&ex);
        last_t = Instant::now();
        // allowances per dimension, in units per second
        let mut limits = vec![[None::<u64>; 4]; groups.len()];
        for (k, &d) in dims.iter().enumerate() {
            for i in 0..groups.len() {
                // per second → per period, the law's unit
                used[i] = counter(&now[i].since(&last[i]), d) as f64 / secs * period.as_secs_f64();
            }
            let b = budget.limits[d].unwrap_or(0) as f64 * period.as_secs_f64();
            let a = divide(b, &mut state[k], &used);
            for (i, g) in groups.iter().enumerate() {
                let mut rate = (a[i] / period.as_secs_f64()).round().max(1.0) as u64;
                // within 5 % of the limit in force: keep it (each write
                // restarts the kernel's throttling slice)
                if let Some(old) = applied[i][d] {
                    if (rate as f64 - old as f64).abs() <= 0.05 * old as f64 {
                        rate = old;
                    }
                }
                let cap = static_caps(&g.iso, dev)[d];
                limits[i][d] = Some(cap.map_or(rate, |c| c.min(rate)));
            }
        }
        last = now;
        for (i, g) in groups.iter().enumerate() {
            applied[i] = limits[i];
            let caps = static_caps(&g.iso, dev);
            let v = |d: usize| limits[i][d].or(caps[d]);
            let knob = Knob::IoMax {
                device: dev,
                read_bps: v(0),
                write_bps: v(1),
                read_iops: v(2),
                write_iops: v(3),
            };
            match ex.set(&g.group, knob) {
                Ok(r) if !r.is_noop() => {
                    changes.fetch_add(1, Relaxed);
                }
                Ok(_) => {}
                Err(e) => {
                    errors += 1;
                    if errors <= 3 {
                        let _ = log.send(format!(
                            "I/O budget: batch {}: {e}{}",
                            g.name,
                            if errors == 3 {
                                " (further errors not shown)"
                            } else {
                                ""
                            }
                        ));
                    }
                }
            }
        }
        drop(ex);
        next += period;
        let now = Instant::now();
        if next < now {
            next = now + period;
        }
        while !stop.load(Relaxed) && Instant::now() < next {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(20)));
        }
    }
}
