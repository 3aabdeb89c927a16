//! JVM pauses from scheduling events alone: HotSpot runs every
//! stop-the-world operation (a collection, a safepoint of any kind) on its
//! `VM Thread` or its `GC Thread#N` workers while the Java threads wait; a
//! **pause** is a period in which one of them is on a CPU or preempted
//! (runnable) until it sleeps again, periods less than [`PAUSE_GAP_NS`]
//! apart merged (the VM thread sleeps briefly while the Java threads reach
//! the safepoint). Concurrent collector threads
//! (`G1 Conc#…`, `G1 Refine…`) do not stop anyone and are not counted.
//! The JIT's `C1/C2 CompilerThread`s are the sign of a cold JVM.
//!
//! [`PauseTracker`] is the streaming form (fed context switches as they
//! come); [`PauseWatch`] runs it live on a process — for a proxy that must
//! know *now* that its active replica is paused.

use crate::error::TraceError;
use crate::kernel::EventSink;
use crate::record::{EndReason, Event, Signal, Switch};
use crate::recorder::{Options, Recorder};
use crate::target::{Target, TargetSpec};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Pauses of one JVM thread closer than this are one pause, ns.
pub const PAUSE_GAP_NS: u64 = 200_000;

/// What a JVM thread does, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JvmRole {
    /// Runs stop-the-world work (`VM Thread`, `GC Thread#N`).
    StopTheWorld,
    /// The JIT compiler (`C1 CompilerThre…`, `C2 CompilerThre…`).
    Compiler,
}

/// The role of a thread named `comm` (kernel names are cut at 15 bytes).
pub fn jvm_role(comm: &str) -> Option<JvmRole> {
    if comm == "VM Thread" || comm.starts_with("GC Thread#") {
        Some(JvmRole::StopTheWorld)
    } else if comm.contains("CompilerThre") {
        Some(JvmRole::Compiler)
    } else {
        None
    }
}

/// Whether process `pid` is a HotSpot JVM now: one of its threads has a
/// stop-the-world role (its `VM Thread`, which every HotSpot JVM starts
/// before running any Java code).
pub fn is_jvm(pid: u32) -> bool {
    elfen_cmd::proc::thread_ids(pid).into_iter().any(|tid| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
            .is_ok_and(|c| jvm_role(c.trim()) == Some(JvmRole::StopTheWorld))
    })
}

/// CPU time of process `pid`'s JIT compiler threads so far, ns: while it
/// grows the JVM is still compiling (cold).
pub fn jit_cpu_ns(pid: u32) -> u64 {
    elfen_cmd::proc::thread_ids(pid)
        .into_iter()
        .filter(|&t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                .is_ok_and(|c| jvm_role(c.trim()) == Some(JvmRole::Compiler))
        })
        .filter_map(|t| elfen_cmd::proc::thread_schedstat(pid, t))
        .map(|s| s.on_cpu_ns)
        .sum()
}

/// One pause: `[start_ns, end_ns)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pause {
    /// Start, ns (`CLOCK_MONOTONIC`).
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
    /// The stop-the-world threads that ran in it.
    pub threads: Vec<u32>,
}

impl Pause {
    /// Its length, ns.
    pub fn len_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// A pause going on, as [`PauseTracker::ongoing`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ongoing {
    /// Its start, ns (`CLOCK_MONOTONIC`).
    pub start_ns: u64,
    /// How long the world has been stopped so far, ns: to now while a
    /// stop-the-world thread is on a CPU (or preempted), else to the end of
    /// its last run — the gap after it (less than [`PAUSE_GAP_NS`], in which
    /// another run would join the same pause) not counted.
    pub stopped_ns: u64,
    /// A stop-the-world thread is on a CPU or runnable now.
    pub running: bool,
}

/// Pauses from context switches, as they come.
#[derive(Debug, Default)]
pub struct PauseTracker {
    /// Stop-the-world threads on a CPU now: tid → since.
    running: HashMap<u32, u64>,
    /// The pause being built: start, end of its last run so far, threads.
    current: Option<(u64, u64, Vec<u32>)>,
    done: Vec<Pause>,
}

impl PauseTracker {
    /// A tracker with no pause yet.
    pub fn new() -> PauseTracker {
        PauseTracker::default()
    }

    /// Feeds one context switch; `is_stw` says whether a thread id is a
    /// stop-the-world thread of the process watched.
    pub fn on_switch(&mut self, s: &Switch, is_stw: impl Fn(u32) -> bool) {
        // a stop-the-world thread preempted (still runnable) is still in its
        // pause: the world stays stopped until it goes to sleep
        if s.prev != 0 && s.prev_state != crate::record::RUNNABLE && is_stw(s.prev) {
            if let Some(since) = self.running.remove(&s.prev) {
                self.extend(since, s.t, s.prev);
            }
        }
        if s.next != 0 && is_stw(s.next) && !self.running.contains_key(&s.next) {
            self.close_if_apart(s.t);
            self.running.insert(s.next, s.t);
            match &mut self.current {
                Some((_, _, threads)) => {
                    if !threads.contains(&s.next) {
                        threads.push(s.next);
                    }
                }
                None => self.current = Some((s.t, s.t, vec![s.next])),
            }
        }
    }

    fn extend(&mut self, since: u64, until: u64, tid: u32) {
        match &mut self.current {
            Some((_, end, threads)) => {
                *end = (*end).max(until);
                if !threads.contains(&tid) {
                    threads.push(tid);
                }
            }
            None => self.current = Some((since, until, vec![tid])),
        }
    }

    /// Ends the current pause if nothing of it runs and its last run ended
    /// more than [`PAUSE_GAP_NS`] before `now`.
    fn close_if_apart(&mut self, now: u64) {
        if !self.running.is_empty() {
            return;
        }
        if self
            .current
            .as_ref()
            .is_some_and(|c| now > c.1 + PAUSE_GAP_NS)
        {
            let (s, e, threads) = self.current.take().expect("checked");
            self.done.push(Pause {
                start_ns: s,
                end_ns: e,
                threads,
            });
        }
    }

    /// The pause going on at `now`, if any (completed ones stay for
    /// [`PauseTracker::poll`]).
    pub fn ongoing(&mut self, now: u64) -> Option<Ongoing> {
        self.close_if_apart(now);
        let &(start_ns, last_end, _) = self.current.as_ref()?;
        let running = !self.running.is_empty();
        let end = if running { now } else { last_end };
        Some(Ongoing {
            start_ns,
            stopped_ns: end.saturating_sub(start_ns),
            running,
        })
    }

    /// The pauses completed by `now`, taken; and the start of one going
    /// on (a stop-the-world thread on a CPU, or one ran less than
    /// [`PAUSE_GAP_NS`] ago).
    pub fn poll(&mut self, now: u64) -> (Vec<Pause>, Option<u64>) {
        self.close_if_apart(now);
        (
            std::mem::take(&mut self.done),
            self.current.as_ref().map(|c| c.0),
        )
    }

    /// Every pause, the one still open closed at `end` (offline use).
    pub fn finish(mut self, end: u64) -> Vec<Pause> {
        let running: Vec<(u32, u64)> = self.running.drain().collect();
        for (tid, since) in running {
            self.extend(since, end, tid);
        }
        if let Some((s, e, threads)) = self.current.take() {
            self.done.push(Pause {
                start_ns: s,
                end_ns: e,
                threads,
            });
        }
        self.done
    }
}

/// The stop-the-world threads of the traced processes in a record, by name.
pub fn pauses_of(rec: &crate::record::TraceRecord) -> Vec<Pause> {
    let is_stw = |tid: u32| {
        rec.threads.get(&tid).is_some_and(|t| {
            rec.target.tgids.contains(&t.tgid) && jvm_role(&t.comm) == Some(JvmRole::StopTheWorld)
        })
    };
    let mut tr = PauseTracker::new();
    for e in &rec.events {
        if let Event::Switch(s) = e {
            tr.on_switch(s, is_stw);
        }
    }
    tr.finish(rec.end_ns)
}

/// Names of a live process's threads, read from `/proc` when first seen.
#[derive(Debug)]
struct Names {
    pid: u32,
    roles: HashMap<u32, Option<JvmRole>>,
}

impl Names {
    fn role(&mut self, tid: u32) -> Option<JvmRole> {
        let pid = self.pid;
        *self.roles.entry(tid).or_insert_with(|| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .ok()
                .and_then(|c| jvm_role(c.trim()))
        })
    }
}

/// A live watch on one JVM's pauses (BPF on `sched_switch`, the process's
/// own switches only; drained every millisecond).
///
/// ```no_run
/// # fn main() -> Result<(), elfen_trace::TraceError> {
/// let w = elfen_trace::pause::PauseWatch::open(1234)?;
/// if let Some(since) = w.paused_since() {
///     // the JVM has been stopped since `since` (CLOCK_MONOTONIC ns)
/// }
/// for p in w.take_pauses() { /* completed pauses since the last call */ }
/// # Ok(()) }
/// ```
pub struct PauseWatch {
    recorder: Option<Recorder>,
    tracker: Arc<Mutex<PauseTracker>>,
}

impl std::fmt::Debug for PauseWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseWatch").finish_non_exhaustive()
    }
}

impl PauseWatch {
    /// Starts watching process `pid` (needs what BPF needs: root or
    /// CAP_BPF + CAP_PERFMON, kernel BTF).
    pub fn open(pid: u32) -> Result<PauseWatch, TraceError> {
        let target = Target::resolve(TargetSpec::Pid(pid))?;
        let tracker = Arc::new(Mutex::new(PauseTracker::new()));
        let t = Arc::clone(&tracker);
        let mut names = Names {
            pid,
            roles: HashMap::new(),
        };
        let sink: EventSink = Box::new(move |e: &Event| {
            if let Event::Switch(s) = e {
                let mut stw = |tid: u32| names.role(tid) == Some(JvmRole::StopTheWorld);
                // roles looked up before the tracker is locked
                let (p, n) = (stw(s.prev), stw(s.next));
                t.lock()
                    .unwrap_or_else(|x| x.into_inner())
                    .on_switch(s, |tid| (tid == s.prev && p) || (tid == s.next && n));
            }
        });
        let opts = Options {
            signals: vec![Signal::Sched],
            lanes: Some(Vec::new()),
            ring_mib: 1,
            drain_ms: 1,
            keep_events: false,
            ..Options::default()
        };
        let recorder = Recorder::start(target, None, &opts, Some(sink))?;
        Ok(PauseWatch {
            recorder: Some(recorder),
            tracker,
        })
    }

    /// The start (`CLOCK_MONOTONIC` ns) of a pause going on now, if any.
    pub fn paused_since(&self) -> Option<u64> {
        let now = elfen_shm::clock::monotonic_ns();
        let mut t = self.tracker.lock().unwrap_or_else(|x| x.into_inner());
        let (done, cur) = t.poll(now);
        t.done = done; // keep them for take_pauses
        cur
    }

    /// The pause going on now, if any: its start and how long the world
    /// has been stopped so far (what a proxy compares with its bound).
    pub fn ongoing(&self) -> Option<Ongoing> {
        let now = elfen_shm::clock::monotonic_ns();
        self.tracker
            .lock()
            .unwrap_or_else(|x| x.into_inner())
            .ongoing(now)
    }

    /// The pauses completed since the last call.
    pub fn take_pauses(&self) -> Vec<Pause> {
        let now = elfen_shm::clock::monotonic_ns();
        self.tracker
            .lock()
            .unwrap_or_else(|x| x.into_inner())
            .poll(now)
            .0
    }

    /// Whether the watched process is still alive.
    pub fn alive(&self) -> bool {
        self.recorder.as_ref().is_some_and(|r| r.target().alive())
    }
}

impl Drop for PauseWatch {
    fn drop(&mut self) {
        if let Some(r) = self.recorder.take() {
            let _ = r.finish(EndReason::Interrupted, String::new());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sw(t: u64, prev: u32, next: u32) -> Switch {
        Switch {
            t,
            cpu: 1,
            prev,
            prev_state: 1,
            next,
        }
    }

    #[test]
    fn a_preempted_vm_thread_is_still_pausing() {
        const VM: u32 = 7;
        let stw = |t: u32| t == VM;
        let mut tr = PauseTracker::new();
        tr.on_switch(&sw(1_000_000, 0, VM), stw);
        // preempted for 3 ms by another thread: runnable, not asleep
        tr.on_switch(
            &Switch {
                prev_state: 0,
                ..sw(2_000_000, VM, 99)
            },
            stw,
        );
        assert_eq!(tr.poll(4_000_000), (vec![], Some(1_000_000)));
        tr.on_switch(&sw(5_000_000, 99, VM), stw);
        tr.on_switch(&sw(6_000_000, VM, 0), stw);
        let (done, cur) = tr.poll(7_000_000);
        assert_eq!(cur, None);
        assert_eq!((done[0].start_ns, done[0].end_ns), (1_000_000, 6_000_000));
    }

    #[test]
    fn an_ongoing_pause_counts_the_stopped_time_not_the_gap_after_it() {
        const VM: u32 = 7;
        let stw = |t: u32| t == VM;
        let mut tr = PauseTracker::new();
        assert_eq!(tr.ongoing(500_000), None);
        tr.on_switch(&sw(1_000_000, 0, VM), stw);
        let on = tr.ongoing(3_000_000).unwrap();
        assert_eq!(
            (on.start_ns, on.stopped_ns, on.running),
            (1_000_000, 2_000_000, true)
        );
        // it sleeps: the pause so far ends at its last run, even within the gap
        tr.on_switch(&sw(3_500_000, VM, 0), stw);
        let on = tr.ongoing(3_600_000).unwrap();
        assert_eq!((on.stopped_ns, on.running), (2_500_000, false));
        // past the gap: over, and handed to poll as completed
        assert_eq!(tr.ongoing(3_500_000 + PAUSE_GAP_NS + 1), None);
        let (done, cur) = tr.poll(4_000_000);
        assert_eq!((done.len(), cur), (1, None));
        assert_eq!((done[0].start_ns, done[0].end_ns), (1_000_000, 3_500_000));
    }

    #[test]
    fn roles_from_names() {
        assert_eq!(jvm_role("VM Thread"), Some(JvmRole::StopTheWorld));
        assert_eq!(jvm_role("GC Thread#3"), Some(JvmRole::StopTheWorld));
        assert_eq!(jvm_role("C2 CompilerThre"), Some(JvmRole::Compiler));
        assert_eq!(jvm_role("G1 Conc#0"), None);
        assert_eq!(jvm_role("elfen-lucene-wo"), None);
    }

    #[test]
    fn runs_of_the_vm_thread_close_together_are_one_pause() {
        const VM: u32 = 7;
        let stw = |t: u32| t == VM;
        let mut tr = PauseTracker::new();
        tr.on_switch(&sw(1_000_000, 0, VM), stw);
        tr.on_switch(&sw(1_050_000, VM, 0), stw); // waits for the safepoint
        let (done, cur) = tr.poll(1_100_000);
        assert!(done.is_empty());
        assert_eq!(cur, Some(1_000_000), "still within the gap");
        tr.on_switch(&sw(1_150_000, 0, VM), stw); // the collection
        assert_eq!(tr.poll(1_200_000).1, Some(1_000_000));
        tr.on_switch(&sw(3_000_000, VM, 0), stw);
        // another thread's switches do not matter
        tr.on_switch(&sw(3_010_000, 0, 99), stw);
        let (done, cur) = tr.poll(3_500_000);
        assert_eq!(cur, None);
        assert_eq!(
            done,
            vec![Pause {
                start_ns: 1_000_000,
                end_ns: 3_000_000,
                threads: vec![VM]
            }]
        );
        // a second pause long after, still open at the end
        tr.on_switch(&sw(9_000_000, 0, VM), stw);
        let all = tr.finish(9_400_000);
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].start_ns, all[0].end_ns), (9_000_000, 9_400_000));
    }
}
