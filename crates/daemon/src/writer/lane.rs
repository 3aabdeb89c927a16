//! One request lane as the writer drives it: each event to its LC line and
//! bells, the busy periods and gaps recorded, and the lane reconciled with
//! its CPU's slot.

use super::{LaneEdges, WriterStats};
use crate::bell::Bell;
use crate::protection::profile::Profile;
use elfen_bpf::LcEvent;
use elfen_bpf::contract::ANNOUNCE_NS;
use elfen_runtime::LcLane;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// One request lane as the writer drives it.
pub(super) struct Lane {
    pub(super) cpu: u32,
    pub(super) lc: LcLane,
    pub(super) bells: Vec<Arc<Bell>>,
    pub(super) next_id: u64,
    /// A busy edge published at the LC's wake-up, its switch-in not yet
    /// seen.
    pub(super) announced: Option<Announced>,
    /// The current busy period's start (its busy edge), ns.
    pub(super) busy_start_ns: u64,
    /// The last idle edge, ns (0: none yet).
    pub(super) idle_since_ns: u64,
    /// The kernel's count of busy periods ended on the lane's CPU and
    /// their time (ns) when last added to the LC line (off the edges).
    pub(super) counted: (u64, u64),
}

/// Where a lane's transitions are recorded.
pub(super) struct Record<'a> {
    pub(super) stats: &'a WriterStats,
    pub(super) profile: &'a Profile,
    pub(super) edges: &'a LaneEdges,
    /// The batch CPU whose guard need not be rung (the writer holds it).
    pub(super) holding_cpu: Option<u32>,
}

/// A busy edge announced by a WAKE event.
#[derive(Debug, Clone, Copy)]
pub(super) struct Announced {
    /// The wake-up (`CLOCK_MONOTONIC` ns).
    pub(super) event_ns: u64,
    /// When the writer published it (ran on its CPU).
    pub(super) published_ns: u64,
}

/// One event of a lane's CPU, handled when the writer runs at `woke_ns`.
/// The off-lane time (`wake`) is the LC's switch-in → the writer running
/// on the batch lane to publish the busy edge: 0 when the LC's wake-up
/// announced the edge before the switch-in.
pub(super) fn on_event(
    l: &mut Lane,
    e: &LcEvent,
    woke_ns: u64,
    wake: &mut hdrhistogram::Histogram<u64>,
    rec: &Record<'_>,
) {
    if e.woken {
        l.announced = Some(Announced {
            event_ns: e.time_ns,
            published_ns: woke_ns,
        });
        set_busy(l, true, e.time_ns, None, rec);
        return;
    }
    if e.busy {
        let published = l.announced.take().map_or(woke_ns, |a| a.published_ns);
        let _ = wake.record(published.saturating_sub(e.time_ns).max(1));
    } else {
        l.announced = None;
    }
    let busy_ns = (!e.busy && e.busy_ns > 0).then_some(e.busy_ns);
    set_busy(l, e.busy, e.time_ns, busy_ns, rec);
}

/// How long a slot must have shown the same non-LC task before the writer
/// asks /proc whether that task still runs there.
const STALE_AFTER_NS: u64 = 5_000_000;

/// Whether `cpu`'s slot names a task that, by /proc, no longer runs there
/// although no switch was recorded since (the kernel has been seen to
/// switch back to a preempted task without the `sched_switch` tracepoint,
/// for BPF and ftrace alike). The idle task (tid 0) is taken at its word.
pub(super) fn slot_is_stale(s: &elfen_bpf::SlotSnapshot, cpu: u32, now_ns: u64) -> bool {
    if s.tid == 0 || !s.valid() || now_ns.saturating_sub(s.switch_ns) < STALE_AFTER_NS {
        return false;
    }
    elfen_bpf::proc::task_state(s.tgid, s.tid).is_none_or(|(state, c)| state != 'R' || c != cpu)
}

/// What a lane's LC line should say, given whether its slot shows an LC
/// task running (`runs_lc`): busy while it does, and from an announced
/// wake-up until the switch-in. A woken LC task that has not run here
/// `ANNOUNCE_NS` later never will: the announcement is dropped (at the next
/// wake-up: no timer for it, and its switch-in's event would not have woken
/// this thread either).
pub(super) fn reconciled(l: &mut Lane, runs_lc: bool, now_ns: u64) -> bool {
    match l.announced {
        _ if runs_lc => true,
        Some(a) if now_ns.saturating_sub(a.event_ns) < ANNOUNCE_NS => true,
        Some(_) => {
            l.announced = None;
            false
        }
        None => false,
    }
}

/// Writes one transition to a lane's LC line at `time_ns` and rings its
/// bells (nothing when the line already says so); records the busy period
/// that ended (`busy_ns` when the source measured it on the CPU) or the
/// gap that did. The guard on the CPU the writer holds is not rung.
pub(super) fn set_busy(
    l: &mut Lane,
    busy: bool,
    time_ns: u64,
    busy_ns: Option<u64>,
    rec: &Record<'_>,
) {
    if busy == l.lc.is_busy() {
        return;
    }
    if busy {
        l.lc.request_begin(l.next_id);
        l.next_id += 1;
        rec.stats.begins.fetch_add(1, Relaxed);
        if l.idle_since_ns > 0 {
            rec.profile
                .record_gap(time_ns.saturating_sub(l.idle_since_ns).max(1));
        }
        l.busy_start_ns = time_ns;
        for b in &l.bells {
            if rec.holding_cpu.is_some() && b.sleeper_cpu() == rec.holding_cpu {
                continue;
            }
            b.ring_busy(time_ns);
        }
    } else {
        l.lc.request_end();
        rec.stats.ends.fetch_add(1, Relaxed);
        let len = busy_ns.unwrap_or_else(|| time_ns.saturating_sub(l.busy_start_ns));
        if l.busy_start_ns > 0 {
            rec.profile.record_busy(len.max(1));
        }
        l.idle_since_ns = time_ns;
        rec.edges.set(l.lc.lane(), time_ns);
        l.bells
            .iter()
            .filter(|b| !b.busy_only())
            .for_each(|b| b.ring_if_armed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::latency_histogram;
    use elfen_cmd::proc::gettid;
    use elfen_shm::Page;
    use elfen_shm::PageSpec;

    fn lane(dir: &std::path::Path) -> Lane {
        let spec = PageSpec::for_pairs(&[(0, vec![1])], 0, 0);
        let page = Arc::new(Page::create(dir.join("sig"), &spec).unwrap());
        Lane {
            cpu: 0,
            lc: LcLane::attach(page, 0).unwrap(),
            bells: Vec::new(),
            next_id: 1,
            announced: None,
            busy_start_ns: 0,
            idle_since_ns: 0,
            counted: (0, 0),
        }
    }

    struct Rec {
        stats: WriterStats,
        profile: Profile,
        edges: LaneEdges,
    }

    impl Rec {
        fn new() -> Rec {
            Rec {
                stats: WriterStats::default(),
                profile: Profile::default(),
                edges: LaneEdges::new(2),
            }
        }
        fn rec(&self) -> Record<'_> {
            Record {
                stats: &self.stats,
                profile: &self.profile,
                edges: &self.edges,
                holding_cpu: None,
            }
        }
    }

    fn event(busy: bool, woken: bool, time_ns: u64) -> LcEvent {
        LcEvent {
            cpu: 0,
            busy,
            woken,
            time_ns,
            tid: 7,
            tgid: 7,
            cgroup_id: 0,
            busy_ns: 0,
        }
    }

    #[test]
    fn an_announced_edge_is_busy_until_the_switch_in_and_timed_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = lane(dir.path());
        let r = Rec::new();
        let mut wake = latency_histogram();
        // woken at 1,000 ns, published when the writer ran at 5,000
        on_event(
            &mut l,
            &event(true, true, 1_000),
            5_000,
            &mut wake,
            &r.rec(),
        );
        assert!(l.lc.is_busy(), "published at the wake-up");
        // before the switch-in the slot shows no LC task: still busy
        assert!(reconciled(&mut l, false, 1_000 + ANNOUNCE_NS - 1));
        // the switch-in at 9,000: the writer was there 4,000 ns before it
        on_event(
            &mut l,
            &event(true, false, 9_000),
            20_000,
            &mut wake,
            &r.rec(),
        );
        assert!(l.announced.is_none());
        assert_eq!(wake.len(), 1);
        assert!(wake.max() <= 1, "off-lane 0 (recorded as 1 ns)");
        assert_eq!(r.stats.begins.load(Relaxed), 1, "one request, not two");
        on_event(
            &mut l,
            &event(false, false, 30_000),
            31_000,
            &mut wake,
            &r.rec(),
        );
        assert!(!l.lc.is_busy());
        // not announced: timed from the switch-in to the writer running
        on_event(
            &mut l,
            &event(true, false, 40_000),
            52_000,
            &mut wake,
            &r.rec(),
        );
        assert_eq!(wake.len(), 2);
        assert!(wake.max() >= 11_900, "{}", wake.max());
    }

    #[test]
    fn a_woken_lc_task_that_never_runs_here_is_dropped_after_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = lane(dir.path());
        let r = Rec::new();
        let mut wake = latency_histogram();
        on_event(
            &mut l,
            &event(true, true, 1_000),
            2_000,
            &mut wake,
            &r.rec(),
        );
        assert!(reconciled(&mut l, false, 1_000 + ANNOUNCE_NS / 2));
        assert!(l.announced.is_some());
        assert!(
            !reconciled(&mut l, false, 1_000 + ANNOUNCE_NS),
            "window over"
        );
        assert!(l.announced.is_none());
        // the slot decides once the LC runs
        assert!(reconciled(&mut l, true, 0));
    }

    #[test]
    fn a_slot_is_stale_when_its_task_no_longer_runs_there() {
        let _pin = elfen_topo::PinGuard::new(0).unwrap();
        let me = std::process::id();
        let now = elfen_shm::clock::monotonic_ns();
        let slot = |tgid: u32, tid: u32, switch_ns: u64| elfen_bpf::SlotSnapshot {
            cpu: 0,
            flags: elfen_bpf::contract::flags::VALID,
            switch_ns,
            tid,
            tgid,
            ..Default::default()
        };
        let old = now - 10 * STALE_AFTER_NS;
        // this thread runs on cpu 0: the slot is right
        assert!(!slot_is_stale(&slot(me, gettid(), old), 0, now));
        // the same thread named for another CPU, a sleeping thread, a gone
        // one: stale
        assert!(slot_is_stale(&slot(me, gettid(), old), 1, now));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ttx, trx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            ttx.send(gettid()).unwrap();
            rx.recv().ok();
        });
        let tid = trx.recv().unwrap();
        let asleep = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            elfen_bpf::proc::task_state(me, tid).is_some_and(|(s, _)| s == 'S')
        });
        assert!(asleep);
        assert!(slot_is_stale(&slot(me, tid, old), 0, now));
        tx.send(()).unwrap();
        sleeper.join().unwrap();
        assert!(slot_is_stale(&slot(me, u32::MAX, old), 0, now));
        // the idle task, a recent switch, a slot never written: taken as is
        assert!(!slot_is_stale(&slot(0, 0, old), 0, now));
        assert!(!slot_is_stale(&slot(me, tid, now - 1000), 0, now));
        let mut never = slot(me, tid, old);
        never.flags = 0;
        assert!(!slot_is_stale(&never, 0, now));
    }
}
