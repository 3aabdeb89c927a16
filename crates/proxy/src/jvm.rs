//! The **JVM pause watch**: for each replica that is a HotSpot JVM, the
//! profiler's live pause detector (`elfen_trace::pause::PauseWatch`: BPF on
//! `sched_switch`, the process's own context switches) says whether its
//! world is stopped now — its `VM Thread` or GC threads on a CPU, a
//! collection or another safepoint under way — and counts the pauses it
//! saw. The monitor turns "stopped for `pause.jvm_pause_ms`" into the
//! `jvm_pause` signal ([`crate::detect`]).
//!
//! A watch needs what BPF needs (root or CAP_BPF + CAP_PERFMON, kernel
//! BTF). Where it cannot be opened the signal is off for that replica and
//! the reason is kept ([`WatchState`]): said at start, in the status line,
//! the record and the metrics. Replicas that are not JVMs (no `VM Thread`)
//! are not watched. The process is the one the proxy started, else the one
//! whose thread publishes the replica's LC line; when it changes (a
//! restart), the watch is opened again on a thread of its own, so the
//! monitor never waits for BPF to load.

use elfen_trace::pause::{PauseWatch, is_jvm};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Whether a replica's JVM is watched, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchState {
    /// Switched off by the configuration (`pause.jvm_pause_ms = 0`, or a
    /// hedge mode without pause detection).
    Disabled,
    /// The proxy knows no process of the replica (yet): not started by it,
    /// and no LC thread on its line.
    NoProcess,
    /// Being opened.
    Opening,
    /// Watched.
    On,
    /// Its process is not a HotSpot JVM (no `VM Thread`).
    NotJvm,
    /// BPF could not be used (not privileged, no BTF, …): the detail says
    /// why.
    NoBpf,
}

impl WatchState {
    /// Every state, for the metrics.
    pub const ALL: [WatchState; 6] = [
        WatchState::Disabled,
        WatchState::NoProcess,
        WatchState::Opening,
        WatchState::On,
        WatchState::NotJvm,
        WatchState::NoBpf,
    ];

    /// Its name in metrics and the record.
    pub fn name(self) -> &'static str {
        match self {
            WatchState::Disabled => "disabled",
            WatchState::NoProcess => "no_process",
            WatchState::Opening => "opening",
            WatchState::On => "on",
            WatchState::NotJvm => "not_jvm",
            WatchState::NoBpf => "no_bpf",
        }
    }
}

#[derive(Default)]
struct Slot {
    pid: u32,
    state: Option<WatchState>,
    detail: String,
    watch: Option<PauseWatch>,
    generation: u64,
}

/// Pauses a watch saw, counted.
#[derive(Debug, Default)]
pub struct PauseCounts {
    /// Completed pauses.
    pub pauses: AtomicU64,
    /// Their total length, ns.
    pub pause_ns: AtomicU64,
    /// The longest, ns.
    pub longest_ns: AtomicU64,
}

/// The two replicas' watches.
pub struct JvmWatches {
    disabled: Option<String>,
    fifo_priority: u8,
    slots: [Mutex<Slot>; 2],
    /// Pauses seen per replica.
    pub counts: [PauseCounts; 2],
}

impl std::fmt::Debug for JvmWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JvmWatches")
            .field("disabled", &self.disabled)
            .finish_non_exhaustive()
    }
}

/// The process (thread group) of thread `tid`.
pub fn tgid_of(tid: u32) -> Option<u32> {
    if tid == 0 {
        return None;
    }
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

impl JvmWatches {
    /// Watches that open on [`JvmWatches::track`]; `disabled` (why) keeps
    /// them off. Their BPF drain threads run at `fifo_priority` (0:
    /// normal), like the proxy's monitor.
    pub fn new(disabled: Option<String>, fifo_priority: u8) -> Arc<JvmWatches> {
        Arc::new(JvmWatches {
            disabled,
            fifo_priority,
            slots: Default::default(),
            counts: Default::default(),
        })
    }

    fn slot(&self, r: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.slots[r].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replica `r` runs as process `pid` (0: not known). When that changes,
    /// the old watch closes and a new one opens — on a thread of its own,
    /// which this call waits for when `wait` is set (at start, so the
    /// watch is on before the first client request).
    pub fn track(self: &Arc<Self>, r: usize, pid: u32, wait: bool) {
        let generation = {
            let mut s = self.slot(r);
            if let Some(why) = &self.disabled {
                if s.state != Some(WatchState::Disabled) {
                    s.state = Some(WatchState::Disabled);
                    s.detail = why.clone();
                }
                return;
            }
            if s.state.is_some() && s.pid == pid {
                return;
            }
            s.pid = pid;
            s.watch = None;
            s.generation += 1;
            s.detail.clear();
            if pid == 0 {
                s.state = Some(WatchState::NoProcess);
                return;
            }
            s.state = Some(WatchState::Opening);
            s.generation
        };
        let me = self.clone();
        let prio = self.fifo_priority;
        // the recorder's drain thread inherits this thread's scheduling
        let opener = std::thread::Builder::new()
            .name(format!("elfen-proxy-jvm{r}"))
            .spawn(move || {
                crate::link::enter_priority(prio);
                let (state, detail, watch) = if !is_jvm(pid) {
                    (
                        WatchState::NotJvm,
                        format!("process {pid} has no VM Thread"),
                        None,
                    )
                } else {
                    match PauseWatch::open(pid) {
                        Ok(w) => (WatchState::On, format!("pid {pid}"), Some(w)),
                        Err(e) => (WatchState::NoBpf, e.to_string(), None),
                    }
                };
                let mut s = me.slot(r);
                if s.generation == generation {
                    s.state = Some(state);
                    s.detail = detail;
                    s.watch = watch;
                }
            });
        match opener {
            Ok(h) if wait => {
                let _ = h.join();
            }
            Ok(_) => {}
            Err(e) => {
                let mut s = self.slot(r);
                s.state = Some(WatchState::NoBpf);
                s.detail = format!("starting the watch's thread: {e}");
            }
        }
    }

    /// For how long replica `r`'s world has been stopped, ns, if a pause
    /// is going on and the replica is watched.
    pub fn stopped_for_ns(&self, r: usize) -> Option<u64> {
        let s = self.slot(r);
        s.watch.as_ref()?.ongoing().map(|o| o.stopped_ns)
    }

    /// Counts the pauses of replica `r` completed since the last call.
    pub fn collect(&self, r: usize) {
        let pauses = {
            let s = self.slot(r);
            match &s.watch {
                Some(w) => w.take_pauses(),
                None => return,
            }
        };
        let c = &self.counts[r];
        for p in pauses {
            c.pauses.fetch_add(1, Relaxed);
            c.pause_ns.fetch_add(p.len_ns(), Relaxed);
            c.longest_ns.fetch_max(p.len_ns(), Relaxed);
        }
    }

    /// Counts what the watches saw and closes them (their BPF programs
    /// detached); the states and counts stay for the record.
    pub fn close(&self) {
        for r in 0..2 {
            self.collect(r);
            let w = self.slot(r).watch.take();
            drop(w);
        }
    }

    /// Replica `r`'s watch state and its detail (the process watched, or
    /// why it is not).
    pub fn state(&self, r: usize) -> (WatchState, String) {
        let s = self.slot(r);
        (s.state.unwrap_or(WatchState::NoProcess), s.detail.clone())
    }

    /// Replica `r`'s watch in words: `on (pid 12)`, `off: …`.
    pub fn describe(&self, r: usize) -> String {
        match self.state(r) {
            (WatchState::On, d) => format!("on ({d})"),
            (WatchState::Opening, _) => "opening".into(),
            (WatchState::NoProcess, _) => "off: no process known".into(),
            (_, d) => format!("off: {d}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_say_why_a_replica_is_not_watched() {
        let w = JvmWatches::new(Some("pause.jvm_pause_ms = 0".into()), 0);
        w.track(0, std::process::id(), true);
        assert_eq!(w.state(0).0, WatchState::Disabled);
        assert!(
            w.describe(0).contains("jvm_pause_ms = 0"),
            "{}",
            w.describe(0)
        );
        assert_eq!(w.stopped_for_ns(0), None);

        let w = JvmWatches::new(None, 0);
        w.track(0, 0, true);
        assert_eq!(w.state(0).0, WatchState::NoProcess);
        // this test binary is no JVM: never watched, no BPF loaded
        w.track(1, std::process::id(), true);
        assert_eq!(w.state(1).0, WatchState::NotJvm, "{}", w.describe(1));
        assert_eq!(w.stopped_for_ns(1), None);
        w.collect(1);
        assert_eq!(w.counts[1].pauses.load(Relaxed), 0);
    }

    #[test]
    fn the_process_of_a_thread() {
        assert_eq!(tgid_of(std::process::id()), Some(std::process::id()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv();
        });
        let live = rx.recv().unwrap();
        assert_eq!(tgid_of(live), Some(std::process::id()));
        done_tx.send(()).unwrap();
        h.join().unwrap();
        assert_eq!(tgid_of(0), None);
    }
}
