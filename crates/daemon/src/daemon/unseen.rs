//! **A protection that protects nothing is never silent.** Every `[lc]
//! unseen_window_ms` the daemon compares what the LC service did with what
//! its request lanes showed: the CPU time of the adopted LC processes
//! (`/proc/<pid>/stat`), the CPU time of the batch groups' processes, and
//! the LC lines of the request lanes on the page (a begin, a completed
//! request, a lane busy now) — and, where blind isolation follows the LC
//! on every CPU, the busy periods the signal source counted on those CPUs.
//! When the LC used CPU and so did batch work, but not one LC busy period
//! was seen where a protection acts on it, nothing stepped aside for the
//! service: the daemon says so at WARN, names where the LC's
//! threads ran, and keeps saying it in the health record (`elfen status`)
//! and the metric `elfen_lc_unseen` until a busy period is seen again.
//!
//! The causes it points at: the service runs on other CPUs than the
//! request lanes (`pairs`), or the processes that serve the requests are
//! not the ones adopted.

use crate::lc::procs::{boot_ticks_now, read_stat};
use elfen_bpf::SlotReader;
use elfen_shm::Page;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The least CPU (a share of one CPU over the window) that counts as
/// "used": 1 %, and never less than [`MIN_CPU_MS`].
pub const MIN_CPU_SHARE: f64 = 0.01;

/// Two clock ticks: less is below what `/proc` can tell from nothing.
pub const MIN_CPU_MS: f64 = 20.0;

/// What one window showed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Its length, s.
    pub secs: f64,
    /// CPU the adopted LC processes used in it, ms.
    pub lc_cpu_ms: f64,
    /// CPU the batch groups' processes used in it, ms.
    pub batch_cpu_ms: f64,
    /// Whether a request lane showed the LC busy (a begin, a completed
    /// request, or busy now).
    pub lc_seen: bool,
}

impl Window {
    /// The least CPU that counts as used in it, ms.
    pub fn min_cpu_ms(&self) -> f64 {
        (self.secs * 1000.0 * MIN_CPU_SHARE).max(MIN_CPU_MS)
    }

    /// Whether the LC evidently ran while batch work did, and no request
    /// lane ever showed it busy.
    pub fn unseen(&self) -> bool {
        !self.lc_seen
            && self.lc_cpu_ms >= self.min_cpu_ms()
            && self.batch_cpu_ms >= self.min_cpu_ms()
    }
}

/// CPU time of a changing set of processes, by differences: a process
/// counts from the first read of it, or from its start when it started
/// after the previous read.
#[derive(Debug, Default)]
pub struct CpuOf {
    /// Per pid: its start (so a reused pid is not taken for it) and its
    /// CPU at the last read, clock ticks.
    last: BTreeMap<u32, (u64, u64)>,
    /// When the last read was, clock ticks since boot.
    read_at: u64,
}

impl CpuOf {
    /// The CPU `pids` used since the last call, ms.
    pub fn since_last(&mut self, pids: &[u32]) -> f64 {
        let now = boot_ticks_now();
        let mut next = BTreeMap::new();
        let mut ticks = 0u64;
        for &p in pids {
            let Some(s) = read_stat(p) else { continue };
            ticks += match self.last.get(&p) {
                Some(&(start, was)) if start == s.start_ticks => s.cpu_ticks.saturating_sub(was),
                _ if self.read_at > 0 && s.start_ticks >= self.read_at => s.cpu_ticks,
                _ => 0,
            };
            next.insert(p, (s.start_ticks, s.cpu_ticks));
        }
        self.last = next;
        self.read_at = now;
        ticks as f64 * 1000.0 / elfen_cmd::proc::ticks_per_s()
    }
}

/// What the request lanes' LC lines show: begins and completed requests
/// summed, and whether one is busy now; with the busy periods the source
/// counted on the CPUs `also`, and whether one runs the LC now.
fn lanes_mark(page: &Page, lanes: &[u32], slots: &SlotReader, also: &[u32]) -> (u64, bool) {
    let mut sum = 0u64;
    let mut busy = false;
    for &c in also {
        let Ok(s) = slots.snapshot(c) else { continue };
        busy |= s.lc();
        sum = sum.wrapping_add(s.lc_periods);
    }
    for &l in lanes {
        let Ok(lc) = page.lc(l) else { continue };
        let s = lc.state.load(std::sync::atomic::Ordering::Acquire);
        busy |= elfen_shm::state::busy(s);
        sum = sum
            .wrapping_add(u64::from(elfen_shm::state::seq(s)))
            .wrapping_add(lc.requests.load(std::sync::atomic::Ordering::Acquire));
    }
    (sum, busy)
}

/// The CPUs the threads of `pids` last ran on (`/proc`), sorted.
fn last_cpus(pids: &[u32]) -> Vec<u32> {
    let mut cpus: Vec<u32> = pids
        .iter()
        .flat_map(|&p| {
            elfen_cmd::proc::thread_ids(p)
                .into_iter()
                .filter_map(move |t| elfen_bpf::proc::task_state(p, t).map(|(_, c)| c))
        })
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// The check (see the module docs).
#[derive(Debug)]
pub struct UnseenCheck {
    window: Duration,
    /// The request lanes: page lane, CPU.
    lanes: Vec<(u32, u32)>,
    /// CPUs whose busy periods count besides (blind isolation's).
    also: Vec<u32>,
    started: Option<Instant>,
    mark: (u64, bool),
    lc: CpuOf,
    batch: CpuOf,
    /// What is said now (while the LC goes unseen).
    now: Option<String>,
    /// Windows found unseen so far.
    windows: u64,
}

/// What a window changed.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The LC went unseen in this window (said at WARN).
    Unseen(String),
    /// It was unseen, and a busy period was seen again.
    SeenAgain,
}

impl UnseenCheck {
    /// A check of the request lanes `lanes` (page lane, CPU) every `window`.
    pub fn new(window: Duration, lanes: Vec<(u32, u32)>) -> UnseenCheck {
        UnseenCheck {
            window,
            lanes,
            also: Vec::new(),
            started: None,
            mark: (0, false),
            lc: CpuOf::default(),
            batch: CpuOf::default(),
            now: None,
            windows: 0,
        }
    }

    /// Busy periods on `cpus` count too (blind isolation follows the LC on
    /// them, through the writer's bells).
    pub fn count_also(&mut self, cpus: Vec<u32>) {
        self.also = cpus;
    }

    /// The warning in force (`None`: the LC was seen, or not judged yet).
    pub fn warning(&self) -> Option<&str> {
        self.now.as_deref()
    }

    /// Windows found unseen so far.
    pub fn windows(&self) -> u64 {
        self.windows
    }

    /// Whether a window ends (or the first begins) at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.started
            .is_none_or(|t0| now.saturating_duration_since(t0) >= self.window)
    }

    /// Judges the window that ends now, if one is due: `lc` the adopted LC
    /// processes, `batch` the batch groups' processes.
    pub fn tick(
        &mut self,
        page: &Page,
        slots: &SlotReader,
        lc: &[u32],
        batch: &[u32],
    ) -> Option<Verdict> {
        let now = Instant::now();
        let lanes: Vec<u32> = self.lanes.iter().map(|&(l, _)| l).collect();
        let Some(t0) = self.started else {
            // the first window starts here
            self.started = Some(now);
            self.mark = lanes_mark(page, &lanes, slots, &self.also);
            self.lc.since_last(lc);
            self.batch.since_last(batch);
            return None;
        };
        if now.saturating_duration_since(t0) < self.window {
            return None;
        }
        let mark = lanes_mark(page, &lanes, slots, &self.also);
        let w = Window {
            secs: now.saturating_duration_since(t0).as_secs_f64(),
            lc_cpu_ms: self.lc.since_last(lc),
            batch_cpu_ms: self.batch.since_last(batch),
            lc_seen: mark.0 != self.mark.0 || mark.1 || self.mark.1,
        };
        self.mark = mark;
        self.started = Some(now);
        if w.unseen() {
            self.windows += 1;
            let mut cpus: Vec<u32> = self.lanes.iter().map(|&(_, c)| c).collect();
            cpus.extend(&self.also);
            cpus.sort_unstable();
            cpus.dedup();
            let where_ = if self.also.is_empty() {
                "on its request lanes"
            } else {
                "on its request lanes or where blind isolation follows it"
            };
            let msg = format!(
                "the LC service used {:.0} ms of CPU in the last {:.1} s and batch work {:.0} ms, \
                 but no LC busy period was seen {where_} (CPU {}): nothing stepped aside for it. \
                 Its threads last ran on CPU {} (pid {}). The request lanes (pairs) must be the \
                 CPUs the service runs on, and the processes serving its requests must be the \
                 ones adopted",
                w.lc_cpu_ms,
                w.secs,
                w.batch_cpu_ms,
                list(&cpus),
                list(&last_cpus(lc)),
                list(lc)
            );
            self.now = Some(msg.clone());
            return Some(Verdict::Unseen(msg));
        }
        if w.lc_seen && self.now.take().is_some() {
            return Some(Verdict::SeenAgain);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(lc_cpu_ms: f64, batch_cpu_ms: f64, lc_seen: bool) -> Window {
        Window {
            secs: 5.0,
            lc_cpu_ms,
            batch_cpu_ms,
            lc_seen,
        }
    }

    #[test]
    fn unseen_only_when_the_lc_and_batch_both_ran_and_no_lane_saw_it() {
        assert_eq!(w(0.0, 0.0, false).min_cpu_ms(), 50.0, "1 % of 5 s");
        let short = Window {
            secs: 0.5,
            ..w(0.0, 0.0, false)
        };
        assert_eq!(short.min_cpu_ms(), MIN_CPU_MS, "never under two ticks");
        assert!(
            w(400.0, 2000.0, false).unseen(),
            "served, batch ran, unseen"
        );
        assert!(!w(400.0, 2000.0, true).unseen(), "seen: protected");
        assert!(!w(10.0, 2000.0, false).unseen(), "an idle LC shows nothing");
        assert!(
            !w(400.0, 0.0, false).unseen(),
            "no batch: nothing to protect from"
        );
        assert!(!w(49.0, 2000.0, false).unseen());
        assert!(w(50.0, 50.0, false).unseen());
    }

    #[test]
    fn cpu_is_counted_by_differences_per_process() {
        let mut c = CpuOf::default();
        let me = std::process::id();
        assert_eq!(c.since_last(&[me]), 0.0, "the first read is a start");
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let ms = c.since_last(&[me]);
        assert!(ms > 0.0, "this process spun: {ms} ms");
        assert_eq!(c.since_last(&[]), 0.0, "no process, no CPU");
        assert_eq!(c.since_last(&[me]), 0.0, "read again: a first read");
        assert_eq!(c.since_last(&[u32::MAX]), 0.0, "no such process");
    }
}
