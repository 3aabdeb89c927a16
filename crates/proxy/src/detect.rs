//! **Pause detection**: whether a replica is paused, as a pure function of
//! what the monitor observed ([`View`]) and the bounds it derived from the
//! service's measured demand ([`Bounds`], [`Demand`]).
//!
//! The control law (checked in this order; the first that holds names the
//! [`Signal`]):
//!
//! 1. **stopped** — the replica's LC thread is in state `T` (SIGSTOP,
//!    ptrace): it runs nothing until continued.
//! 2. **JVM pause** — the replica is a JVM and the profiler's BPF watch
//!    (`elfen_trace::pause::PauseWatch`, on `sched_switch`) has seen its
//!    world stopped for `pause.jvm_pause_ms`: its `VM Thread` or GC
//!    threads on a CPU, a collection or another safepoint under way. Every
//!    Java thread waits, whether a request runs or not, so it holds on an
//!    idle replica too (requests arriving meanwhile go to the other).
//!    Any of the signals below that holds while the watch sees the world
//!    stopped (a pause shorter than its bound so far) is named a JVM pause
//!    too: that is what the line's evidence comes from.
//! 3. **off CPU** — its LC line says a request runs, and the LC thread has
//!    not been on a CPU for `pause.offcpu_ms`: a stop-the-world collection,
//!    a safepoint, a preemption, a blocking fault. A request's work is done
//!    on its thread, so a running request whose thread does not run is not
//!    progressing.
//! 4. **busy too long** — the running request has run `factor` × its
//!    demand (the service time the same request had before; else the p99
//!    of recent service times), and at least `pause.floor_ms`: a request
//!    running far beyond its demand, on the CPU or off it.
//! 5. **no progress** — requests are in flight at the replica, the oldest
//!    for the stall bound (`factor` × p99 demand, at least the floor), and
//!    its LC line has not changed (no request began or ended) for as long:
//!    a replica frozen while idle, whose queue does not move.
//! 6. **timeout** — without a signal page only: the oldest request in
//!    flight has waited the stall bound. A timeout alone is the fallback,
//!    not the rule.
//!
//! A replica taken as paused stays so until its line moves again (or, with
//! no page, it answers again; after a JVM pause, once the watch sees its
//! world running again); the monitor ([`crate::monitor`]) decides what
//! follows (re-send, swap, warm).

use serde::Serialize;
use std::collections::{HashMap, VecDeque};

/// Why a replica was taken as paused (or lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Its LC thread is stopped (state `T`).
    Stopped,
    /// Its JVM is in a stop-the-world pause (seen by BPF).
    JvmPause,
    /// A request runs and its thread has been off the CPU too long.
    OffCpu,
    /// A request has run far beyond its demand.
    BusyTooLong,
    /// Requests wait and the LC line does not move.
    NoProgress,
    /// No page: the oldest request waited the stall bound.
    Timeout,
    /// The connection to it failed or closed.
    LinkLost,
}

impl Signal {
    /// Every signal, in the order of [`Signal::index`].
    pub const ALL: [Signal; 7] = [
        Signal::Stopped,
        Signal::JvmPause,
        Signal::OffCpu,
        Signal::BusyTooLong,
        Signal::NoProgress,
        Signal::Timeout,
        Signal::LinkLost,
    ];

    /// Its name in metrics and output.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Stopped => "stopped",
            Signal::JvmPause => "jvm_pause",
            Signal::OffCpu => "off_cpu",
            Signal::BusyTooLong => "busy_too_long",
            Signal::NoProgress => "no_progress",
            Signal::Timeout => "timeout",
            Signal::LinkLost => "link_lost",
        }
    }

    /// Its position in [`Signal::ALL`].
    pub fn index(self) -> usize {
        Signal::ALL.iter().position(|&s| s == self).unwrap_or(0)
    }
}

/// What the monitor saw of a replica's LC line at one poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LineView {
    /// A request runs.
    pub busy: bool,
    /// For how long the running request has run, ns.
    pub busy_for_ns: u64,
    /// For how long the line has not changed (no begin, no end), ns.
    pub unchanged_for_ns: u64,
    /// For how long the LC thread has not been on a CPU while this request
    /// runs, ns (`None`: not known — not sampled yet, or no thread id).
    pub offcpu_for_ns: Option<u64>,
    /// The running request's bound ([`Demand::running_bound_ns`]).
    pub running_bound_ns: u64,
}

/// What the monitor saw of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct View {
    /// Its LC line, where it publishes on a page.
    pub line: Option<LineView>,
    /// Its LC thread is stopped.
    pub stopped: bool,
    /// For how long its JVM's world has been stopped, ns, where a BPF
    /// watch sees it (`None`: no pause going on, or not watched).
    pub jvm_paused_for_ns: Option<u64>,
    /// Age of its oldest request in flight, ns.
    pub oldest_ns: Option<u64>,
}

/// The bounds [`assess`] applies besides the running request's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Off-CPU bound, ns (0: that signal is off).
    pub offcpu_ns: u64,
    /// JVM-pause bound, ns (0: that signal is off).
    pub jvm_pause_ns: u64,
    /// Stall bound for a line that does not move (and for the timeout
    /// fallback), ns.
    pub stall_ns: u64,
}

/// Whether the replica seen as `v` is paused, and by which signal.
pub fn assess(v: &View, b: &Bounds) -> Option<Signal> {
    if v.stopped {
        return Some(Signal::Stopped);
    }
    if b.jvm_pause_ns > 0 && v.jvm_paused_for_ns.is_some_and(|p| p >= b.jvm_pause_ns) {
        return Some(Signal::JvmPause);
    }
    let waited = v.oldest_ns.is_some_and(|o| o >= b.stall_ns);
    let seen = match v.line {
        Some(l) if l.busy => {
            if b.offcpu_ns > 0 && l.offcpu_for_ns.is_some_and(|o| o >= b.offcpu_ns) {
                Some(Signal::OffCpu)
            } else if l.busy_for_ns >= l.running_bound_ns {
                Some(Signal::BusyTooLong)
            } else {
                None
            }
        }
        Some(l) => (waited && l.unchanged_for_ns >= b.stall_ns).then_some(Signal::NoProgress),
        None => waited.then_some(Signal::Timeout),
    };
    // the line's evidence while the watch sees the JVM's world stopped
    // (a pause still shorter than its own bound): the JVM's pause
    if seen.is_some() && b.jvm_pause_ns > 0 && v.jvm_paused_for_ns.is_some() {
        return Some(Signal::JvmPause);
    }
    seen
}

/// The last `cap` values and a quantile of them: exact while the window
/// fills, then recomputed every `cap / 8` values (a sort of `cap` numbers),
/// so it lags the newest values by at most an eighth of the window.
#[derive(Debug, Clone)]
pub struct Recent {
    values: VecDeque<u64>,
    cap: usize,
    since: usize,
    q: f64,
    cached: Option<u64>,
}

impl Recent {
    /// The last `cap` values; the quantile `q` (0..1) of them.
    pub fn new(cap: usize, q: f64) -> Recent {
        Recent {
            values: VecDeque::with_capacity(cap),
            cap: cap.max(1),
            since: 0,
            q,
            cached: None,
        }
    }

    /// Adds a value.
    pub fn push(&mut self, v: u64) {
        let filling = self.values.len() < self.cap;
        if !filling {
            self.values.pop_front();
        }
        self.values.push_back(v);
        self.since += 1;
        if filling || self.since >= (self.cap / 8).max(1) {
            self.recompute();
        }
    }

    fn recompute(&mut self) {
        self.since = 0;
        let mut v: Vec<u64> = self.values.iter().copied().collect();
        if v.is_empty() {
            self.cached = None;
            return;
        }
        v.sort_unstable();
        let i = ((self.q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        self.cached = Some(v[i]);
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The quantile, once `min` values are known.
    pub fn quantile(&self, min: usize) -> Option<u64> {
        (self.values.len() >= min.max(1))
            .then_some(self.cached)
            .flatten()
    }
}

/// Entries kept in the per-request demand table before it is cleared.
const DEMAND_KEYS: usize = 1 << 16;

/// The service's demand as the proxy measured it: each request's last
/// service time (by a key of its content) and the p99 of recent ones.
#[derive(Debug, Clone)]
pub struct Demand {
    by_key: HashMap<u64, u64>,
    recent: Recent,
    factor: f64,
    floor_ns: u64,
    min_samples: usize,
}

impl Demand {
    /// A demand table for bounds of `factor` × demand, at least `floor_ns`;
    /// the p99 counts once `min_samples` service times are known.
    pub fn new(factor: f64, floor_ns: u64, min_samples: usize) -> Demand {
        Demand {
            by_key: HashMap::new(),
            recent: Recent::new(2048, 0.99),
            factor,
            floor_ns,
            min_samples,
        }
    }

    /// Records that the request with content key `key` took `ns` of
    /// service.
    pub fn record(&mut self, key: u64, ns: u64) {
        if self.by_key.len() >= DEMAND_KEYS {
            self.by_key.clear();
        }
        self.by_key.insert(key, ns);
        self.recent.push(ns);
    }

    /// The p99 of recent service times, once enough are known.
    pub fn p99_ns(&self) -> Option<u64> {
        self.recent.quantile(self.min_samples)
    }

    /// How many service times were recorded recently.
    pub fn samples(&self) -> usize {
        self.recent.len()
    }

    fn bound(&self, demand_ns: Option<u64>) -> u64 {
        let scaled = demand_ns.map_or(0, |d| (d as f64 * self.factor) as u64);
        scaled.max(self.floor_ns)
    }

    /// The bound of a running request with content key `key` (`None`: not
    /// known): `factor` × its own last service time, else × the p99, at
    /// least the floor.
    pub fn running_bound_ns(&self, key: Option<u64>) -> u64 {
        let own = key.and_then(|k| self.by_key.get(&k).copied());
        self.bound(own.or(self.p99_ns()))
    }

    /// The stall bound: `factor` × the p99, at least the floor.
    pub fn stall_bound_ns(&self) -> u64 {
        self.bound(self.p99_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn bounds() -> Bounds {
        Bounds {
            offcpu_ns: MS,
            jvm_pause_ns: MS,
            stall_ns: 5 * MS,
        }
    }

    fn busy(busy_for: u64, offcpu: Option<u64>, bound: u64) -> View {
        View {
            line: Some(LineView {
                busy: true,
                busy_for_ns: busy_for,
                unchanged_for_ns: busy_for,
                offcpu_for_ns: offcpu,
                running_bound_ns: bound,
            }),
            stopped: false,
            jvm_paused_for_ns: None,
            oldest_ns: Some(busy_for),
        }
    }

    #[test]
    fn each_signal_fires_on_its_own_evidence_and_not_before() {
        let b = bounds();
        // a short request running on its CPU: healthy
        assert_eq!(assess(&busy(MS / 2, Some(0), 4 * MS), &b), None);
        // a long request that keeps running within its own bound: healthy
        assert_eq!(assess(&busy(30 * MS, Some(0), 40 * MS), &b), None);
        // the same, beyond its bound
        assert_eq!(
            assess(&busy(41 * MS, Some(0), 40 * MS), &b),
            Some(Signal::BusyTooLong)
        );
        // its thread off the CPU for the off-CPU bound, well within the demand bound
        assert_eq!(
            assess(&busy(2 * MS, Some(MS), 40 * MS), &b),
            Some(Signal::OffCpu)
        );
        // ... but not with that signal switched off
        let off = Bounds { offcpu_ns: 0, ..b };
        assert_eq!(assess(&busy(2 * MS, Some(MS), 40 * MS), &off), None);
        // stopped wins, whatever the line says
        let mut v = busy(0, None, 40 * MS);
        v.stopped = true;
        assert_eq!(assess(&v, &b), Some(Signal::Stopped));
    }

    #[test]
    fn a_jvm_pause_seen_by_bpf_fires_at_its_bound_busy_idle_or_without_a_page() {
        let b = bounds();
        let jvm = |mut v: View, paused: Option<u64>| {
            v.jvm_paused_for_ns = paused;
            v
        };
        // a request running on its CPU while the JVM's VM thread has run
        // less than the bound (a short safepoint): healthy
        assert_eq!(
            assess(&jvm(busy(MS / 2, Some(0), 40 * MS), Some(MS / 2)), &b),
            None
        );
        // at the bound: a JVM pause, before the off-CPU bound is reached
        // and far below the request's own bound
        assert_eq!(
            assess(&jvm(busy(MS, Some(MS / 2), 40 * MS), Some(MS)), &b),
            Some(Signal::JvmPause)
        );
        // it names the cause where the off-CPU signal would fire too
        assert_eq!(
            assess(&jvm(busy(3 * MS, Some(3 * MS), 40 * MS), Some(2 * MS)), &b),
            Some(Signal::JvmPause)
        );
        // an idle replica whose world is stopped: paused (new requests
        // would wait), with nothing in flight and the line unchanged
        let idle = View {
            line: Some(LineView::default()),
            ..View::default()
        };
        assert_eq!(assess(&jvm(idle, Some(2 * MS)), &b), Some(Signal::JvmPause));
        assert_eq!(assess(&idle, &b), None);
        // no page: the watch alone, no timeout needed
        let none = View {
            oldest_ns: Some(MS),
            ..View::default()
        };
        assert_eq!(assess(&jvm(none, Some(2 * MS)), &b), Some(Signal::JvmPause));
        // the line's own evidence while the world is stopped, below the
        // JVM bound: the pause is the JVM's
        assert_eq!(
            assess(&jvm(busy(2 * MS, Some(MS), 40 * MS), Some(MS / 4)), &b),
            Some(Signal::JvmPause)
        );
        assert_eq!(
            assess(&jvm(busy(41 * MS, Some(0), 40 * MS), Some(MS / 4)), &b),
            Some(Signal::JvmPause)
        );
        // ... but a world stopped briefly is no evidence by itself
        assert_eq!(
            assess(&jvm(busy(2 * MS, Some(0), 40 * MS), Some(MS / 4)), &b),
            None
        );
        // the signal off: the same evidence is not a pause (the off-CPU
        // signal still names a stalled request)
        let off = Bounds {
            jvm_pause_ns: 0,
            ..b
        };
        assert_eq!(assess(&jvm(idle, Some(50 * MS)), &off), None);
        assert_eq!(
            assess(
                &jvm(busy(3 * MS, Some(3 * MS), 40 * MS), Some(3 * MS)),
                &off
            ),
            Some(Signal::OffCpu)
        );
        // stopped still wins
        let mut v = jvm(busy(0, None, 40 * MS), Some(5 * MS));
        v.stopped = true;
        assert_eq!(assess(&v, &b), Some(Signal::Stopped));
    }

    #[test]
    fn an_idle_line_with_waiting_requests_is_no_progress_only_when_it_does_not_move() {
        let b = bounds();
        let idle = |unchanged: u64, oldest: Option<u64>| View {
            line: Some(LineView {
                busy: false,
                unchanged_for_ns: unchanged,
                ..LineView::default()
            }),
            stopped: false,
            jvm_paused_for_ns: None,
            oldest_ns: oldest,
        };
        assert_eq!(assess(&idle(100 * MS, None), &b), None, "nothing waits");
        assert_eq!(assess(&idle(100 * MS, Some(4 * MS)), &b), None);
        assert_eq!(
            assess(&idle(2 * MS, Some(50 * MS)), &b),
            None,
            "the line moved recently: the queue is being served"
        );
        assert_eq!(
            assess(&idle(6 * MS, Some(6 * MS)), &b),
            Some(Signal::NoProgress)
        );
        // no page: a timeout alone
        let none = |oldest| View {
            line: None,
            stopped: false,
            jvm_paused_for_ns: None,
            oldest_ns: oldest,
        };
        assert_eq!(assess(&none(Some(4 * MS)), &b), None);
        assert_eq!(assess(&none(Some(5 * MS)), &b), Some(Signal::Timeout));
    }

    #[test]
    fn bounds_follow_the_measured_demand() {
        let mut d = Demand::new(4.0, 2 * MS, 10);
        assert_eq!(d.running_bound_ns(None), 2 * MS, "the floor until measured");
        assert_eq!(d.stall_bound_ns(), 2 * MS);
        for i in 0..100 {
            d.record(i, 100_000 + i * 10_000); // 0.1 .. 1.09 ms
        }
        let p99 = d.p99_ns().unwrap();
        assert!((1_070_000..=1_090_000).contains(&p99), "{p99}");
        assert_eq!(d.stall_bound_ns(), 4 * p99);
        // a request seen before is bounded by its own demand (floored)
        assert_eq!(d.running_bound_ns(Some(0)), 2 * MS);
        d.record(7, 10 * MS);
        assert_eq!(d.running_bound_ns(Some(7)), 40 * MS);
        // one never seen: by the p99
        assert_eq!(d.running_bound_ns(Some(12345)), 4 * d.p99_ns().unwrap());
    }

    #[test]
    fn recent_keeps_a_window_and_its_quantile() {
        let mut r = Recent::new(100, 0.95);
        assert_eq!(r.quantile(1), None);
        for v in 1..=100 {
            r.push(v);
        }
        assert_eq!(r.quantile(1), Some(95));
        for _ in 0..100 {
            r.push(1000);
        }
        assert_eq!(r.len(), 100);
        assert_eq!(r.quantile(1), Some(1000), "old values left the window");
        assert_eq!(r.quantile(101), None, "not enough values");
    }
}
