//! Request spans from the signal page's LC line, read by a user-space
//! poller (the BPF program reads nothing of the page).
//!
//! The poller spins on the line's `state` word from a CPU other than the
//! request lane's (by default `SCHED_IDLE`, so it runs only where that CPU
//! has nothing else to do) and takes a consistent sample of the line at
//! every change. [`SpanTracker`] turns samples into spans: the begin is the
//! line's own `busy_since` stamp and, when the poller saw the request
//! alone, the end is `busy_since + Δbusy_ticks` — exact even if the poller
//! was preempted in between. Requests that began and ended between two
//! samples are counted as missed; a span whose end another request's
//! busy time is mixed into gets an upper bound, flagged inexact. Page-clock
//! stamps become `CLOCK_MONOTONIC` ns ([`PageTime`]), the clock of
//! `bpf_ktime_get_ns`.

use crate::error::TraceError;
use crate::record::{PollerStats, Span};
use elfen_shm::layout::{clock, role, state};
use elfen_shm::{Access, Page};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One consistent read of an LC line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LineSample {
    /// The state word (busy, begin sequence, queue length).
    pub state: u64,
    /// The running request's id (valid while busy).
    pub request_id: u64,
    /// Its begin, page clock (valid while busy).
    pub busy_since: u64,
    /// Page-clock ticks in completed requests.
    pub busy_ticks: u64,
    /// Completed requests.
    pub requests: u64,
}

/// Page clock → `CLOCK_MONOTONIC` ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageTime {
    clock: elfen_shm::clock::Clock,
    /// For a TSC page: a (tsc, monotonic ns) pair taken together.
    anchor: Option<(u64, u64)>,
}

impl PageTime {
    /// The conversion for a page clock (a TSC clock is anchored now).
    pub fn new(c: elfen_shm::clock::Clock) -> PageTime {
        let anchor = (c.kind == clock::TSC).then(|| {
            // the pair with the shortest bracket of three
            (0..3)
                .map(|_| {
                    let a = elfen_shm::clock::monotonic_ns();
                    let t = c.now();
                    let b = elfen_shm::clock::monotonic_ns();
                    (b - a, t, a + (b - a) / 2)
                })
                .min()
                .map(|(_, t, m)| (t, m))
                .expect("three samples")
        });
        PageTime { clock: c, anchor }
    }

    /// An absolute page-clock stamp in `CLOCK_MONOTONIC` ns.
    pub fn to_mono(&self, ticks: u64) -> u64 {
        match self.anchor {
            None => self.clock.ticks_to_ns(ticks),
            Some((t0, m0)) => {
                if ticks >= t0 {
                    m0 + self.clock.ticks_to_ns(ticks - t0)
                } else {
                    m0.saturating_sub(self.clock.ticks_to_ns(t0 - ticks))
                }
            }
        }
    }

    /// A page-clock duration in ns.
    pub fn dur_ns(&self, ticks: u64) -> u64 {
        self.clock.ticks_to_ns(ticks)
    }
}

/// Turns successive samples of one LC line into spans.
#[derive(Debug, Clone)]
pub struct SpanTracker {
    time: PageTime,
    last: Option<LineSample>,
    /// The request running at the last sample: (id, begin ns, queue).
    open: Option<(u64, u64, u32)>,
    spans: Vec<Span>,
    stats: PollerStats,
}

impl SpanTracker {
    /// A tracker for a line on the clock `time` converts.
    pub fn new(time: PageTime) -> SpanTracker {
        SpanTracker {
            time,
            last: None,
            open: None,
            spans: Vec::new(),
            stats: PollerStats::default(),
        }
    }

    /// Feeds one sample taken at `now_ns` (monotonic).
    pub fn observe(&mut self, s: LineSample, now_ns: u64) {
        let Some(p) = self.last else {
            // first sample: a request running now has an exact begin
            if state::busy(s.state) {
                self.open = Some((
                    s.request_id,
                    self.time.to_mono(s.busy_since),
                    state::queue_len(s.state),
                ));
            }
            self.last = Some(s);
            return;
        };
        if s.state == p.state {
            return;
        }
        self.last = Some(s);
        let begins = state::seq(s.state).wrapping_sub(state::seq(p.state)) & 0x7FFF_FFFF;
        let done = s.requests.saturating_sub(p.requests);
        let busy = state::busy(s.state);
        if begins == 0 && done == 0 {
            return; // only the queue length changed
        }
        let dticks = s.busy_ticks.saturating_sub(p.busy_ticks);
        // the next begin bounds the open request's end
        let next_begin = busy.then(|| self.time.to_mono(s.busy_since));
        if let Some((id, begin, q)) = self.open.take() {
            if done >= 1 {
                let exact = done == 1;
                let mut end = begin + self.time.dur_ns(dticks);
                if !exact {
                    self.stats.inexact += 1;
                }
                if let Some(nb) = next_begin {
                    end = end.min(nb);
                }
                end = end.min(now_ns).max(begin);
                self.spans.push(Span {
                    id,
                    begin_ns: begin,
                    end_ns: end,
                    exact_end: exact,
                    queue_at_begin: q,
                });
            }
        }
        // begins the poller never saw running: the one running now is not
        // missed
        let seen_now = u32::from(busy && begins >= 1);
        self.stats.missed += u64::from(begins.saturating_sub(seen_now));
        if busy && begins >= 1 {
            self.open = Some((
                s.request_id,
                self.time.to_mono(s.busy_since),
                state::queue_len(s.state),
            ));
        }
    }

    /// Counts one read of the state word.
    pub fn count_poll(&mut self) {
        self.stats.polls += 1;
    }

    /// The spans so far and the account; a request still running at the
    /// end has no span.
    pub fn finish(self, cpu: Option<u32>) -> (Vec<Span>, PollerStats) {
        (self.spans, PollerStats { cpu, ..self.stats })
    }
}

/// A consistent sample of lane `lane`'s LC line: the state word read
/// before and after the other fields agrees.
pub fn sample(page: &Page, lane: u32) -> Option<LineSample> {
    let l = page.lc(lane).ok()?;
    for _ in 0..64 {
        let s0 = l.state.load(Ordering::Acquire);
        let v = LineSample {
            state: s0,
            request_id: l.request_id.load(Ordering::Relaxed),
            busy_since: l.busy_since.load(Ordering::Relaxed),
            busy_ticks: l.busy_ticks.load(Ordering::Relaxed),
            requests: l.requests.load(Ordering::Relaxed),
        };
        std::sync::atomic::fence(Ordering::Acquire);
        if l.state.load(Ordering::Relaxed) == s0 {
            return Some(v);
        }
    }
    None
}

/// The LC line a trace reads: the page, attached as an observer, and the
/// request lane.
#[derive(Debug)]
pub struct LcLineTap {
    /// The page.
    pub page: Arc<Page>,
    /// The request lane.
    pub lane: u32,
}

impl LcLineTap {
    /// Attaches to `path` read-only and picks the lane: `lane`, else the
    /// request lane whose LC thread belongs to one of `tgids`, else the
    /// only request lane.
    pub fn open(path: &Path, lane: Option<u32>, tgids: &[u32]) -> Result<LcLineTap, TraceError> {
        let err = |detail: String| TraceError::Page {
            path: path.into(),
            detail,
        };
        let page = Page::attach(path, Access::Observer).map_err(|e| err(e.to_string()))?;
        let n = page.lane_count();
        if let Some(l) = lane {
            if l >= n {
                return Err(err(format!("lane {l} does not exist (the page has {n})")));
            }
            return Ok(LcLineTap {
                page: Arc::new(page),
                lane: l,
            });
        }
        let requests: Vec<u32> = (0..n)
            .filter(|&l| {
                page.read_controller(l)
                    .is_ok_and(|c| c.role == role::REQUEST)
            })
            .collect();
        let owned = requests.iter().copied().find(|&l| {
            let tid = page
                .lc(l)
                .map(|x| x.lc_tid.load(Ordering::Relaxed))
                .unwrap_or(0);
            tid != 0
                && tgids
                    .iter()
                    .any(|p| Path::new(&format!("/proc/{p}/task/{tid}")).exists())
        });
        let pick = owned.or(match requests.as_slice() {
            [one] => Some(*one),
            _ => None,
        });
        match pick {
            Some(l) => Ok(LcLineTap {
                page: Arc::new(page),
                lane: l,
            }),
            None => Err(err(format!(
                "no request lane whose LC thread belongs to the target ({} request lanes): name one with --lane",
                requests.len()
            ))),
        }
    }

    /// The LC thread the line names now (0 = none attached).
    pub fn lc_tid(&self) -> u32 {
        self.page
            .lc(self.lane)
            .map(|l| l.lc_tid.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// The request lane's CPU and its partner lanes' CPUs, from the
    /// controller lines (None where the page does not say).
    pub fn cpus(&self) -> (Option<u32>, Vec<u32>) {
        let Ok(c) = self.page.read_controller(self.lane) else {
            return (None, Vec::new());
        };
        if c.role != role::REQUEST {
            return (None, Vec::new());
        }
        let partners = c
            .partners()
            .iter()
            .filter_map(|&p| self.page.read_controller(p).ok().map(|x| x.cpu))
            .collect();
        (Some(c.cpu), partners)
    }

    /// Polls the line until `stop`, spinning (`poll_us` = 0) or sleeping
    /// `poll_us` between reads; returns the spans and the account.
    pub fn poll(
        &self,
        stop: &AtomicBool,
        poll_us: u64,
        cpu: Option<u32>,
    ) -> (Vec<Span>, PollerStats) {
        let mut tr = SpanTracker::new(PageTime::new(self.page.clock()));
        let Ok(line) = self.page.lc(self.lane) else {
            return tr.finish(cpu);
        };
        let mut last = u64::MAX;
        let mut n = 0u32;
        loop {
            let s = line.state.load(Ordering::Acquire);
            tr.count_poll();
            if s != last {
                if let Some(smp) = sample(&self.page, self.lane) {
                    last = smp.state;
                    tr.observe(smp, elfen_shm::clock::monotonic_ns());
                }
            }
            if poll_us > 0 {
                std::thread::sleep(std::time::Duration::from_micros(poll_us));
            } else {
                std::hint::spin_loop();
            }
            n = n.wrapping_add(1);
            if (poll_us > 0 || n % 256 == 0) && stop.load(Ordering::Relaxed) {
                return tr.finish(cpu);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(seq: u32, id: u64, since: u64, ticks: u64, reqs: u64, q: u32) -> LineSample {
        LineSample {
            state: state::pack(true, seq, q),
            request_id: id,
            busy_since: since,
            busy_ticks: ticks,
            requests: reqs,
        }
    }

    fn idle(seq: u32, ticks: u64, reqs: u64, q: u32) -> LineSample {
        LineSample {
            state: state::pack(false, seq, q),
            request_id: 0,
            busy_since: 0,
            busy_ticks: ticks,
            requests: reqs,
        }
    }

    fn tracker() -> SpanTracker {
        SpanTracker::new(PageTime::new(elfen_shm::clock::Clock::MONOTONIC))
    }

    #[test]
    fn each_request_seen_gets_an_exact_span() {
        let mut t = tracker();
        t.observe(idle(0, 0, 0, 0), 10);
        t.observe(busy(1, 7, 100, 0, 0, 2), 110);
        // the poller was late: the end still comes from the busy time
        t.observe(idle(1, 40, 1, 2), 900);
        t.observe(busy(2, 8, 1000, 40, 1, 1), 1001);
        // back to back: the next begin arrives with the previous end
        t.observe(busy(3, 9, 1100, 90, 2, 0), 1150);
        t.observe(idle(3, 120, 3, 0), 1200);
        let (spans, st) = t.finish(Some(1));
        let got: Vec<(u64, u64, u64, bool, u32)> = spans
            .iter()
            .map(|s| (s.id, s.begin_ns, s.end_ns, s.exact_end, s.queue_at_begin))
            .collect();
        assert_eq!(
            got,
            vec![
                (7, 100, 140, true, 2),
                (8, 1000, 1050, true, 1),
                (9, 1100, 1130, true, 0)
            ]
        );
        assert_eq!(st.missed, 0);
        assert_eq!(st.inexact, 0);
        assert_eq!(st.cpu, Some(1));
    }

    #[test]
    fn requests_between_samples_are_counted_not_invented() {
        let mut t = tracker();
        t.observe(busy(1, 1, 100, 0, 0, 0), 110);
        // two more requests began and ended, a fourth runs now
        t.observe(busy(4, 4, 500, 300, 3, 0), 510);
        t.observe(idle(4, 350, 4, 0), 600);
        let (spans, st) = t.finish(None);
        assert_eq!(st.missed, 2);
        assert_eq!(st.inexact, 1);
        // request 1's end is bounded by the busy time of all three and by
        // request 4's begin
        assert_eq!(spans[0].id, 1);
        assert!(!spans[0].exact_end);
        assert_eq!(spans[0].end_ns, 400);
        assert_eq!(
            (spans[1].id, spans[1].end_ns, spans[1].exact_end),
            (4, 550, true)
        );
    }

    #[test]
    fn queue_changes_alone_and_a_first_busy_sample() {
        let mut t = tracker();
        // attached mid-request: its begin is known
        t.observe(busy(5, 50, 1000, 0, 4, 0), 1010);
        t.observe(busy(5, 50, 1000, 0, 4, 3), 1020); // queue grew
        t.observe(idle(5, 70, 5, 3), 1100);
        let (spans, st) = t.finish(None);
        assert_eq!(spans.len(), 1);
        assert_eq!((spans[0].begin_ns, spans[0].end_ns), (1000, 1070));
        assert_eq!(st.missed, 0);
    }

    #[test]
    fn a_tsc_clock_is_anchored_to_monotonic() {
        let c = elfen_shm::clock::Clock::detect();
        let pt = PageTime::new(c);
        let now_ticks = c.now();
        let mono = elfen_shm::clock::monotonic_ns();
        let conv = pt.to_mono(now_ticks);
        assert!(conv.abs_diff(mono) < 5_000_000, "{conv} vs {mono}");
    }
}
