//! [`PollSource`]: the **coarse** fallback for machines where the BPF
//! program cannot load. A scanner thread reads `/proc/<tgid>/task/*/stat`
//! of every watched process at a fixed interval (default 1 ms) and takes a
//! CPU as LC-busy when a watched thread is in state `R` with that CPU as
//! the one it last ran on.
//!
//! Coarse in three ways: it sees a state change only at the next scan (up
//! to one interval late, plus the scan itself); `R` also means *runnable*
//! (waiting for the CPU), so a preempted LC thread still counts as busy;
//! and a busy period shorter than the interval may be missed entirely.
//! Each scan costs a few /proc reads per watched thread, so the interval
//! trades detection latency against the scanner's own CPU time.
//!
//! It writes the same [`CpuSlot`]s (heap memory, same seqlock) and the
//! same [`LcEvent`]s as the BPF source; `switch_ns` and event times are
//! the scan that saw the change, `cgroup_id` is 0.

use crate::contract::{ABI, CpuSlot, LcEvent, flags};
use crate::error::BpfError;
use crate::proc;
use crate::slots::{Backing, SlotReader};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64, fence};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the scanner reads, changed by the owner.
#[derive(Default)]
struct Watch {
    tgids: BTreeSet<u32>,
    cgroups: Vec<PathBuf>,
    cpus: Vec<bool>,
}

struct Shared {
    watch: Mutex<Watch>,
    events: Mutex<VecDeque<LcEvent>>,
    ready: Condvar,
    stop: AtomicBool,
    scans: AtomicU64,
}

/// The coarse /proc polling signal source (see the module docs).
pub struct PollSource {
    shared: Arc<Shared>,
    slots: SlotReader,
    interval: Duration,
    scanner: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for PollSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollSource")
            .field("interval", &self.interval)
            .field("cpus", &self.slots.cpus())
            .finish()
    }
}

/// Writes one slot under its seqlock (the scanner is its only writer).
fn write_slot(s: &CpuSlot, now: u64, tid: u32, tgid: u32, lc: bool, watched: bool) -> u64 {
    let was_lc = s.lc();
    let mut ended_ns = 0;
    let seq = s.seq.load(Relaxed);
    s.seq.store(seq.wrapping_add(1), Relaxed);
    fence(Release);
    s.switch_ns.store(now, Relaxed);
    s.tid.store(tid, Relaxed);
    s.tgid.store(tgid, Relaxed);
    if lc && !was_lc {
        s.lc_since_ns.store(now, Relaxed);
        s.lc_periods.fetch_add(1, Relaxed);
    } else if !lc && was_lc {
        ended_ns = now.saturating_sub(s.lc_since_ns.load(Relaxed));
        s.lc_busy_ns.fetch_add(ended_ns, Relaxed);
    }
    let f =
        flags::VALID | if lc { flags::LC } else { 0 } | if watched { flags::WATCHED } else { 0 };
    s.flags.store(f, Relaxed);
    s.abi.store(ABI, Relaxed);
    s.seq.store(seq.wrapping_add(2), Release);
    ended_ns
}

fn scan_once(
    shared: &Shared,
    slots: &SlotReader,
    running: &mut Vec<(u32, u32)>,
    per_cpu: &mut [Option<(u32, u32)>],
) {
    let (tgids, cpus) = {
        let w = shared.watch.lock().unwrap_or_else(|p| p.into_inner());
        let mut t = w.tgids.clone();
        for dir in &w.cgroups {
            t.extend(proc::cgroup_subtree_procs(dir));
        }
        (t, w.cpus.clone())
    };
    per_cpu.fill(None);
    for &tgid in &tgids {
        running.clear();
        proc::running_threads(tgid, running);
        for &(tid, cpu) in running.iter() {
            if let Some(e) = per_cpu.get_mut(cpu as usize) {
                e.get_or_insert((tid, tgid));
            }
        }
    }
    let now = elfen_shm::clock::monotonic_ns();
    let mut new_events = Vec::new();
    for (cpu, who) in per_cpu.iter().enumerate() {
        let Some(slot) = slots.slot(cpu as u32) else {
            break;
        };
        let watched = cpus.get(cpu).copied().unwrap_or(false);
        let (tid, tgid) = who.unwrap_or((0, 0));
        let lc = who.is_some();
        let was = slot.lc();
        let changed = lc != was
            || (lc && slot.tid.load(Relaxed) != tid)
            || slot.flags.load(Relaxed) & flags::VALID == 0
            || (slot.flags.load(Relaxed) & flags::WATCHED != 0) != watched;
        if !changed {
            continue;
        }
        let ended_ns = write_slot(slot, now, tid, tgid, lc, watched);
        if watched && lc != was {
            new_events.push(LcEvent {
                cpu: cpu as u32,
                busy: lc,
                woken: false,
                time_ns: now,
                tid,
                tgid,
                cgroup_id: 0,
                busy_ns: ended_ns,
            });
        }
    }
    shared.scans.fetch_add(1, Relaxed);
    if !new_events.is_empty() {
        shared
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(new_events);
        shared.ready.notify_all();
    }
}

impl PollSource {
    /// Starts the scanner thread, scanning every `interval` (at least
    /// 100 µs). Every CPU in `watched_cpus` (default all) emits events.
    pub fn open(interval: Duration, watched_cpus: Option<&[u32]>) -> Result<PollSource, BpfError> {
        let interval = interval.max(Duration::from_micros(100));
        let n = proc::possible_cpus()?;
        let slots = SlotReader::new(
            Backing::Heap((0..n).map(|_| CpuSlot::default()).collect()),
            n,
        );
        let shared = Arc::new(Shared {
            watch: Mutex::new(Watch {
                cpus: vec![true; n as usize],
                ..Watch::default()
            }),
            events: Mutex::default(),
            ready: Condvar::new(),
            stop: AtomicBool::new(false),
            scans: AtomicU64::new(0),
        });
        let mut me = PollSource {
            shared: Arc::clone(&shared),
            slots: slots.clone(),
            interval,
            scanner: None,
        };
        if let Some(cpus) = watched_cpus {
            me.set_watched_cpus(cpus)?;
        }
        let handle = std::thread::Builder::new()
            .name("elfen-poll".into())
            .spawn(move || {
                let mut running = Vec::new();
                let mut per_cpu = vec![None; n as usize];
                let mut next = Instant::now();
                while !shared.stop.load(Relaxed) {
                    scan_once(&shared, &slots, &mut running, &mut per_cpu);
                    next += interval;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now; // fell behind: no burst of catch-up scans
                    }
                }
            })
            .map_err(|source| BpfError::Io {
                path: "(scanner thread)".into(),
                source,
            })?;
        me.scanner = Some(handle);
        Ok(me)
    }

    /// The scan interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Number of possible CPUs (slots).
    pub fn cpus(&self) -> u32 {
        self.slots.cpus()
    }

    /// Scans done so far.
    pub fn scans(&self) -> u64 {
        self.shared.scans.load(Relaxed)
    }

    /// A reader of the per-CPU slots for any thread.
    pub fn slots(&self) -> &SlotReader {
        &self.slots
    }

    /// A consistent copy of `cpu`'s slot.
    pub fn snapshot(&self, cpu: u32) -> Result<crate::SlotSnapshot, BpfError> {
        self.slots.snapshot(cpu)
    }

    /// Whether an LC task runs on `cpu` now (one load).
    #[inline]
    pub fn lc_busy(&self, cpu: u32) -> bool {
        self.slots.lc_busy(cpu)
    }

    fn watch(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.shared.watch.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Scans process `tgid`'s threads from the next scan on (same checks
    /// as the BPF source: not 0, exists, is a process).
    pub fn watch_tgid(&mut self, tgid: u32) -> Result<(), BpfError> {
        proc::check_process(tgid)?;
        self.watch().tgids.insert(tgid);
        Ok(())
    }

    /// Stops scanning `tgid`; returns whether it was watched.
    pub fn unwatch_tgid(&mut self, tgid: u32) -> Result<bool, BpfError> {
        Ok(self.watch().tgids.remove(&tgid))
    }

    /// Scans the processes listed in the `cgroup.procs` of a cgroup
    /// directory and of every group below it at every scan. Returns the
    /// cgroup's id.
    pub fn watch_cgroup_path(&mut self, dir: &Path) -> Result<u64, BpfError> {
        let id = proc::cgroup_id(dir)?;
        let mut w = self.watch();
        if !w.cgroups.iter().any(|d| d == dir) {
            w.cgroups.push(dir.to_path_buf());
        }
        Ok(id)
    }

    /// Stops scanning the subtree at `dir`; returns whether it was watched.
    pub fn unwatch_cgroup_path(&mut self, dir: &Path) -> bool {
        let mut w = self.watch();
        let before = w.cgroups.len();
        w.cgroups.retain(|d| d != dir);
        w.cgroups.len() != before
    }

    /// Makes exactly `cpus` emit transition events.
    pub fn set_watched_cpus(&mut self, cpus: &[u32]) -> Result<(), BpfError> {
        let count = self.cpus();
        if let Some(&cpu) = cpus.iter().find(|&&c| c >= count) {
            return Err(BpfError::CpuOutOfRange { cpu, count });
        }
        let mut w = self.watch();
        w.cpus = (0..count).map(|c| cpus.contains(&c)).collect();
        Ok(())
    }

    /// The processes watched.
    pub fn watched_tgids(&self) -> Vec<u32> {
        self.watch().tgids.iter().copied().collect()
    }

    /// The CPUs that emit transition events.
    pub fn watched_cpus(&self) -> Vec<u32> {
        let w = self.watch();
        (0..w.cpus.len() as u32)
            .filter(|&c| w.cpus[c as usize])
            .collect()
    }

    /// Calls `f` for every transition event queued or arriving within
    /// `timeout`; returns how many.
    pub fn wait_events(
        &mut self,
        timeout: Duration,
        f: impl FnMut(LcEvent),
    ) -> Result<usize, BpfError> {
        let deadline = Instant::now() + timeout;
        let mut q = self.shared.events.lock().unwrap_or_else(|p| p.into_inner());
        while q.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                return Ok(0);
            }
            q = self
                .shared
                .ready
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let batch: Vec<LcEvent> = q.drain(..).collect();
        drop(q);
        let n = batch.len();
        batch.into_iter().for_each(f);
        Ok(n)
    }

    /// A one-line description for run-time reports.
    pub fn describe(&self) -> String {
        let w = self.watch();
        format!(
            "poll (COARSE): /proc/<tgid>/task/*/stat every {} µs, state R + last CPU; \
             {} CPUs, events on {} watched CPUs; watching {} processes, {} cgroups",
            self.interval.as_micros(),
            self.cpus(),
            w.cpus.iter().filter(|&&b| b).count(),
            w.tgids.len(),
            w.cgroups.len()
        )
    }
}

impl Drop for PollSource {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        if let Some(h) = self.scanner.take() {
            let _ = h.join();
        }
    }
}
