//! Memory: each batch group's soft and hard limits (through the
//! executor), and the machine watermark below which batch work is killed —
//! the lowest `priority` group first, a whole group at a time, never the
//! LC, never a process outside the batch groups (PerfIso: "when memory
//! runs very low, secondary processes are killed").
//!
//! **The watermark.** A thread of its own (on the daemon's CPUs, never a
//! request lane) sleeps in `poll(2)` on
//!
//! - a **PSI trigger** on `/proc/pressure/memory` (`some 200000 2000000`:
//!   some task stalled on memory for 200 ms of a 2 s window), where the
//!   kernel has PSI: the kernel wakes the thread as soon as reclaim starts
//!   to stall tasks — event-driven, no polling;
//! - with a timeout of `[memory] poll_ms`: `MemAvailable` (`/proc/meminfo`)
//!   has no event of its own (it can fall far before anything stalls), so
//!   it is also read at that bounded interval.
//!
//! Each wake-up reads `MemAvailable`; below `min_available` (or on a
//! pressure event, with `pressure_kills`) the group to kill is chosen — the lowest priority among
//! the groups that have processes, the one using the most memory among
//! equals — and killed whole ([`super::kill`]). Then it waits `cooldown_ms`
//! for the memory to come back before it kills again. Every kill is
//! logged, counted (metrics) and appended to the kill log `elfen status`
//! reads.
//!
//! **Limits.** `memory_high` is written first (v2 `memory.high` throttles
//! and reclaims, never kills; v1 `memory.soft_limit_in_bytes` is reclaimed
//! first when the machine runs short). `memory_max` below what the group
//! uses now is applied at the group's use instead — v2 would reclaim or
//! OOM-kill inside the group, v1 refuses the write — and lowered towards
//! the configured value at each rescan as the use falls.

use super::kill::{KillOutcome, kill_group};
use super::plan::{GroupIso, IsolationPlan};
use crate::error::DaemonError;
use crate::lc::LcTarget;
use crate::units::human_bytes;
use crate::worker::Worker;
use elfen_cgroup::{Executor, Group, Knob};
use elfen_ops::kills::{BatchKill, KillLog};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Round a limit up to whole MiB (what is applied instead of a limit below
/// the group's use).
pub(crate) fn round_up_mib(b: u64) -> u64 {
    b.div_ceil(1 << 20) * (1 << 20)
}

/// Applies a group's memory limits; returns what to say. `applied_max`
/// gets the hard limit in force (which may be above the configured one).
pub fn apply_limits(
    ex: &mut Executor,
    name: &str,
    group: &Group,
    iso: &GroupIso,
    applied_max: &mut Option<u64>,
) -> Result<Vec<String>, DaemonError> {
    let mut out = Vec::new();
    if let Some(h) = iso.memory_high {
        ex.set(group, Knob::MemoryHigh(Some(h)))?;
        out.push(format!(
            "batch {name}: memory soft limit {}",
            human_bytes(h)
        ));
    }
    if let Some(m) = iso.memory_max {
        let used = ex.memory_current(group).unwrap_or(0);
        let target = if used > m { round_up_mib(used) } else { m };
        match ex.set(group, Knob::MemoryMax(Some(target))) {
            Ok(_) => {}
            Err(e) if crate::isolation::errno(&e) == Some(libc::EBUSY) => {
                // v1: the kernel could not reclaim below the value
                let now = round_up_mib(ex.memory_current(group).unwrap_or(used).max(target));
                ex.set(group, Knob::MemoryMax(Some(now)))?;
                *applied_max = Some(now);
                out.push(format!(
                    "batch {name}: memory_max {} refused by the kernel (it could not reclaim \
                     the group below it): {} applied, lowered at each rescan",
                    human_bytes(m),
                    human_bytes(now)
                ));
                return Ok(out);
            }
            Err(e) => return Err(e.into()),
        }
        *applied_max = Some(target);
        out.push(if target > m {
            format!(
                "batch {name}: memory_max {} is below what the group uses ({}): {} applied, \
                 lowered at each rescan as the use falls",
                human_bytes(m),
                human_bytes(used),
                human_bytes(target)
            )
        } else {
            format!("batch {name}: memory hard limit {}", human_bytes(m))
        });
    }
    Ok(out)
}

/// At a rescan: lowers a hard limit applied above the configured one as
/// far as the group's use allows. Returns what to say when it moved.
pub fn relower(
    ex: &mut Executor,
    name: &str,
    group: &Group,
    iso: &GroupIso,
    applied_max: &mut Option<u64>,
) -> Option<String> {
    let (Some(want), Some(now)) = (iso.memory_max, *applied_max) else {
        return None;
    };
    if now <= want {
        return None;
    }
    let used = ex.memory_current(group).ok()?;
    let next = if used <= want {
        want
    } else {
        round_up_mib(used)
    };
    if next >= now || ex.set(group, Knob::MemoryMax(Some(next))).is_err() {
        return None;
    }
    *applied_max = Some(next);
    Some(format!(
        "batch {name}: memory hard limit lowered to {}{}",
        human_bytes(next),
        if next == want { " (as configured)" } else { "" }
    ))
}

/// A group the watermark may kill.
#[derive(Debug, Clone)]
pub struct Victim {
    /// Its name.
    pub name: String,
    /// Its priority.
    pub priority: i32,
    /// Its handle.
    pub group: Group,
}

/// How the watcher runs.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Kill below this `MemAvailable`, bytes (0: off).
    pub min_available: u64,
    /// The PSI trigger, when pressure is watched.
    pub psi_trigger: Option<String>,
    /// Whether a pressure event kills by itself.
    pub pressure_kills: bool,
    /// How the watermark is watched, in words (for the kill's reason).
    pub poll: Duration,
    /// Wait after a kill.
    pub cooldown: Duration,
    /// The kill log.
    pub kill_log: PathBuf,
    /// CPUs the thread runs on.
    pub cpus: Vec<u32>,
}

impl WatchOptions {
    /// From the plan.
    pub fn of(iso: &IsolationPlan, cfg: &crate::config::Config, cpus: &[u32]) -> WatchOptions {
        WatchOptions {
            min_available: iso.min_available,
            psi_trigger: iso.psi_trigger.clone(),
            pressure_kills: iso.pressure_kills,
            poll: Duration::from_millis(cfg.memory.poll_ms),
            cooldown: Duration::from_millis(cfg.memory.cooldown_ms),
            kill_log: cfg.memory.kill_log.clone(),
            cpus: cpus.to_vec(),
        }
    }
}

/// Counters the metrics read.
#[derive(Debug, Default)]
pub struct WatchCounts {
    /// `MemAvailable` at the last read, bytes.
    pub available: AtomicU64,
    /// PSI trigger events.
    pub pressure_events: AtomicU64,
    /// Kills per victim (index as given).
    pub kills: Vec<AtomicU64>,
    /// Processes killed per victim.
    pub killed: Vec<AtomicU64>,
}

/// The running watcher.
#[derive(Debug)]
pub struct MemoryWatch {
    worker: Worker<()>,
    counts: Arc<WatchCounts>,
    /// Whether the PSI trigger is in use.
    pub psi: bool,
}

impl MemoryWatch {
    /// Starts the watcher over `victims`; kill messages go to `log`.
    pub fn start(
        victims: Vec<Victim>,
        executor: Arc<Mutex<Executor>>,
        lc: LcTarget,
        opts: WatchOptions,
        log: Sender<String>,
    ) -> Result<MemoryWatch, DaemonError> {
        let counts = Arc::new(WatchCounts {
            kills: victims.iter().map(|_| AtomicU64::new(0)).collect(),
            killed: victims.iter().map(|_| AtomicU64::new(0)).collect(),
            ..WatchCounts::default()
        });
        let c2 = Arc::clone(&counts);
        let bell = Arc::new(crate::bell::Bell::new().map_err(|e| DaemonError::os("eventfd", e))?);
        let b2 = Arc::clone(&bell);
        let (worker, psi) = Worker::start(
            "elfen-memory",
            Some(bell),
            move || {
                elfen_topo::set_current_affinity(&opts.cpus)
                    .map_err(|e| DaemonError::thread("memory watermark", e.to_string()))?;
                let psi = match &opts.psi_trigger {
                    Some(t) => Some(super::plan::open_trigger(t).map_err(|e| {
                        DaemonError::os(
                            format!("writing the PSI trigger {t:?} to /proc/pressure/memory"),
                            e,
                        )
                    })?),
                    None => None,
                };
                let on = psi.is_some();
                Ok(((opts, psi), on))
            },
            move |(opts, psi), stop| {
                run(&victims, &executor, &lc, &opts, psi, &b2, stop, &c2, &log)
            },
            || (),
        )?;
        Ok(MemoryWatch {
            worker,
            counts,
            psi,
        })
    }

    /// The counters.
    pub fn counts(&self) -> &WatchCounts {
        &self.counts
    }

    /// Whether the thread runs.
    pub fn is_running(&self) -> bool {
        self.worker.is_running()
    }

    /// Stops the thread.
    pub fn stop(self) {
        self.worker.stop();
    }
}

/// Sleeps until the PSI trigger fires, the bell rings, or `timeout`;
/// returns whether pressure fired.
fn wait(psi: Option<&OwnedFd>, bell: &crate::bell::Bell, timeout: Duration) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: bell.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: psi.map_or(-1, AsRawFd::as_raw_fd),
            events: libc::POLLPRI,
            revents: 0,
        },
    ];
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: two valid pollfd entries (fd -1 is ignored by poll).
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n > 0 && fds[0].revents != 0 {
        bell.clear();
    }
    n > 0 && fds[1].revents & libc::POLLPRI != 0
}

#[allow(clippy::too_many_arguments)]
fn run(
    victims: &[Victim],
    executor: &Mutex<Executor>,
    lc: &LcTarget,
    opts: &WatchOptions,
    psi: Option<OwnedFd>,
    bell: &crate::bell::Bell,
    stop: &AtomicBool,
    counts: &WatchCounts,
    log: &Sender<String>,
) {
    let mut kill_log = KillLog::new(std::process::id());
    let mut quiet_until = std::time::Instant::now();
    while !stop.load(Relaxed) {
        let pressure = wait(psi.as_ref(), bell, opts.poll);
        if stop.load(Relaxed) {
            break;
        }
        let detected = elfen_shm::clock::monotonic_ns();
        if pressure {
            counts.pressure_events.fetch_add(1, Relaxed);
        }
        let avail = super::plan::meminfo().1.unwrap_or(u64::MAX);
        counts.available.store(avail, Relaxed);
        let low = opts.min_available > 0 && avail < opts.min_available;
        let pressure = pressure && opts.pressure_kills;
        if !(low || pressure) || std::time::Instant::now() < quiet_until {
            continue;
        }
        let reason = if low {
            format!(
                "MemAvailable {} MiB < {} MiB",
                avail >> 20,
                opts.min_available >> 20
            )
        } else {
            format!(
                "memory pressure ({})",
                opts.psi_trigger.as_deref().unwrap_or("")
            )
        };
        let Some((i, used)) = choose(victims, executor) else {
            let _ = log.send(format!(
                "memory: {reason}, but no batch group has processes to kill"
            ));
            quiet_until = std::time::Instant::now() + opts.cooldown;
            continue;
        };
        let v = &victims[i];
        let out: KillOutcome = kill_group(executor, &v.group, lc);
        let done = elfen_shm::clock::monotonic_ns();
        counts.kills[i].fetch_add(1, Relaxed);
        counts.killed[i].fetch_add(out.killed.len() as u64, Relaxed);
        let _ = log.send(format!(
            "memory: {reason}: killed batch group {} (priority {}, {} used, {} processes{}{}) \
             {:.1} ms after the watermark was seen",
            v.name,
            v.priority,
            human_bytes(used),
            out.killed.len(),
            if out.spared.is_empty() {
                String::new()
            } else {
                format!(", spared {:?} (the LC's or the daemon's)", out.spared)
            },
            if out.left.is_empty() {
                String::new()
            } else {
                format!(", {} still there", out.left.len())
            },
            (done - detected) as f64 / 1e6
        ));
        kill_log.push(BatchKill {
            unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            group: v.name.clone(),
            priority: v.priority,
            reason,
            available_bytes: avail,
            group_bytes: used,
            processes: out.killed,
            left: out.left,
            detected_mono_ns: detected,
            done_mono_ns: done,
        });
        if let Err(e) = kill_log.save(&opts.kill_log) {
            let _ = log.send(format!(
                "memory: cannot write the kill log {}: {e}",
                opts.kill_log.display()
            ));
        }
        quiet_until = std::time::Instant::now() + opts.cooldown;
    }
}

/// The group to kill: lowest priority among those with processes, the
/// largest memory use among equals; with its use — the memory
/// controller's count where the group is in it (it has `memory_high` or
/// `memory_max`), else the resident memory of its processes.
fn choose(victims: &[Victim], executor: &Mutex<Executor>) -> Option<(usize, u64)> {
    let ex = executor.lock().unwrap_or_else(|p| p.into_inner());
    victims
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let procs = ex.procs(&v.group).ok().filter(|p| !p.is_empty())?;
            let used = if v.group.has(elfen_cgroup::Controller::Memory) {
                ex.memory_current(&v.group)
                    .unwrap_or_else(|_| resident_bytes(&procs))
            } else {
                resident_bytes(&procs)
            };
            Some((i, v.priority, used))
        })
        .min_by_key(|&(_, p, used)| (p, std::cmp::Reverse(used)))
        .map(|(i, _, used)| (i, used))
}

/// The resident memory of `pids` (`/proc/<pid>/statm`'s second field, in
/// pages), summed: pages they share are counted for each. A process gone
/// meanwhile counts 0.
fn resident_bytes(pids: &[u32]) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/statm")).ok())
        .filter_map(|t| t.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * page)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::resident_bytes;

    #[test]
    fn resident_bytes_counts_touched_memory_and_nothing_for_a_gone_process() {
        let me = [std::process::id()];
        let before = resident_bytes(&me);
        assert!(before > 0, "this process's resident memory");
        // 32 MiB, every page written, held while measured
        let held = vec![1u8; 32 << 20];
        let after = resident_bytes(&me);
        assert!(
            after >= before + (24 << 20),
            "32 MiB touched: {before} -> {after} bytes"
        );
        assert_eq!(std::hint::black_box(&held)[held.len() - 1], 1);
        // pid_max is at most 2^22: this pid never exists
        assert_eq!(resident_bytes(&[u32::MAX]), 0);
    }
}
