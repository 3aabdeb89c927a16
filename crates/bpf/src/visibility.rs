//! The figures of `elfen bpf visibility`: how soon user space learns of a
//! context switch.
//!
//! A *switcher* thread pinned to the LC CPU sleeps for random short
//! intervals; every wake-up is a context switch into it. Three observers:
//!
//! - **visibility** (BPF slots): a poller pinned to another CPU spins on
//!   the LC CPU's mmapped slot; latency = the poller's `CLOCK_MONOTONIC`
//!   when it first sees the new `seq` − the `switch_ns` BPF recorded.
//! - **event** (BPF ring buffer): the process watches its own tgid, so
//!   each switch-in of the switcher is an LC busy transition; a thread
//!   pinned to the other CPU sleeps in epoll on the ring buffer; latency =
//!   its clock after waking − the event's `time_ns`.
//! - **poll** (fallback): the same with the /proc poll source; the
//!   switcher spins for three scan intervals after each wake-up so a scan
//!   can see it; latency = the event's time (the scan) − the switcher's own
//!   clock read right after it woke.

use crate::contract::LcEvent;
use crate::poll::PollSource;
use crate::sched::SchedSource;
use crate::{BpfError, Options};
use elfen_cmd::proc::gettid;
use elfen_shm::clock::monotonic_ns;
use hdrhistogram::Histogram;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

/// What one run measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Visibility samples per run.
    pub samples: u64,
    /// Event samples per run.
    pub event_samples: u64,
    /// Poll-fallback samples per run.
    pub poll_samples: u64,
    /// CPU the switcher (the "LC" thread) runs on.
    pub lc_cpu: u32,
    /// CPU the poller / event waiter runs on.
    pub observer_cpu: u32,
    /// Switcher sleep range (µs) for visibility.
    pub sleep_us: [u64; 2],
    /// Switcher sleep range (µs) for events (long enough for the waiter to fall asleep).
    pub event_sleep_us: [u64; 2],
    /// Switcher spin after each wake-up (µs), visibility and event modes.
    pub busy_us: u64,
    /// Poll fallback scan interval (µs).
    pub poll_interval_us: u64,
    /// Give up on a measurement after this many seconds.
    pub timeout_s: u64,
}

impl Params {
    /// Defaults for a CPU pair.
    pub fn new(lc_cpu: u32, observer_cpu: u32) -> Params {
        Params {
            samples: 10_000,
            event_samples: 2_000,
            poll_samples: 200,
            lc_cpu,
            observer_cpu,
            sleep_us: [20, 200],
            event_sleep_us: [100, 1000],
            busy_us: 10,
            poll_interval_us: 1000,
            timeout_s: 60,
        }
    }
}

/// Latency percentiles of one measurement (ns).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// Samples recorded.
    pub samples: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Switches the observer saw no fresh sample for (slot overwritten
    /// before it was seen, or event of another kind); informational.
    pub missed: u64,
}

/// Latency histogram: 1 ns .. 10 s, 3 significant digits.
pub(crate) struct Hist {
    h: Histogram<u64>,
    missed: u64,
}

impl Hist {
    pub(crate) fn new() -> Hist {
        Hist {
            h: Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds"),
            missed: 0,
        }
    }
    pub(crate) fn record(&mut self, ns: u64) {
        self.h.saturating_record(ns.max(1));
    }
    pub(crate) fn len(&self) -> u64 {
        self.h.len()
    }
    pub(crate) fn latency(&self) -> Option<Latency> {
        (!self.h.is_empty()).then(|| Latency {
            samples: self.h.len(),
            p50_ns: self.h.value_at_quantile(0.5),
            p90_ns: self.h.value_at_quantile(0.9),
            p99_ns: self.h.value_at_quantile(0.99),
            max_ns: self.h.max(),
            mean_ns: self.h.mean(),
            missed: self.missed,
        })
    }
}

/// The thread that switches in and out of the LC CPU.
struct Switcher {
    stop: AtomicBool,
    tid: AtomicU32,
    /// Its clock right after its latest wake-up (poll mode).
    woke_ns: AtomicU64,
}

impl Switcher {
    fn new() -> Switcher {
        Switcher {
            stop: AtomicBool::new(false),
            tid: AtomicU32::new(0),
            woke_ns: AtomicU64::new(0),
        }
    }

    /// Sleeps a random time in `sleep_us`, spins `busy_ns`, until stopped.
    fn run(&self, cpu: u32, sleep_us: [u64; 2], busy_ns: u64) -> anyhow::Result<()> {
        elfen_topo::pin_current_thread(cpu)?;
        self.tid.store(gettid(), Release);
        let mut rng = rand::rng();
        while !self.stop.load(Relaxed) {
            let us = rng.random_range(sleep_us[0]..=sleep_us[1].max(sleep_us[0]));
            std::thread::sleep(Duration::from_micros(us));
            let t = monotonic_ns();
            self.woke_ns.store(t, Release);
            while monotonic_ns() - t < busy_ns {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    fn wait_tid(&self) -> u32 {
        loop {
            let t = self.tid.load(Acquire);
            if t != 0 {
                return t;
            }
            std::thread::yield_now();
        }
    }
}

/// Runs `observe` on a thread pinned to the observer CPU while a switcher
/// runs on the LC CPU; returns what `observe` returns.
fn with_switcher<T: Send>(
    p: &Params,
    sleep_us: [u64; 2],
    busy_ns: u64,
    observe: impl FnOnce(&Switcher) -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    let sw = Switcher::new();
    std::thread::scope(|s| {
        let sw = &sw;
        let h = s.spawn(move || sw.run(p.lc_cpu, sleep_us, busy_ns));
        let r = s
            .spawn(move || {
                elfen_topo::pin_current_thread(p.observer_cpu)?;
                let r = observe(sw);
                sw.stop.store(true, Relaxed);
                r
            })
            .join()
            .map_err(|_| anyhow::anyhow!("observer thread panicked"))?;
        sw.stop.store(true, Relaxed);
        h.join()
            .map_err(|_| anyhow::anyhow!("switcher thread panicked"))??;
        r
    })
}

/// (a) Visibility of a switch in the mmapped slot to a spinning poller.
pub fn measure_visibility(src: &SchedSource, p: &Params) -> anyhow::Result<Option<Latency>> {
    let slots = src.slots().clone();
    let busy_ns = p.busy_us * 1000;
    with_switcher(p, p.sleep_us, busy_ns, |sw| {
        let tid = sw.wait_tid();
        let slot = slots.slot(p.lc_cpu).ok_or(BpfError::CpuOutOfRange {
            cpu: p.lc_cpu,
            count: slots.cpus(),
        })?;
        let mut h = Hist::new();
        let mut last = slot.seq();
        let end = Instant::now() + Duration::from_secs(p.timeout_s);
        let mut n = 0u64;
        while h.len() < p.samples {
            let s = slot.seq();
            if s == last || s & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let now = monotonic_ns();
            let Some(snap) = slot.read(p.lc_cpu) else {
                continue;
            };
            if snap.tid == tid && snap.seq == s {
                h.record(now.saturating_sub(snap.switch_ns));
            } else if snap.tid == tid {
                h.missed += 1;
            }
            last = snap.seq;
            n += 1;
            if n % 1024 == 0 && Instant::now() > end {
                break;
            }
        }
        Ok(h.latency())
    })
}

/// (b) Latency of the ring-buffer event to a thread sleeping in epoll.
pub fn measure_events(src: &mut SchedSource, p: &Params) -> anyhow::Result<Option<Latency>> {
    src.set_watched_cpus(&[p.lc_cpu])?;
    src.watch_tgid(std::process::id())?;
    let busy_ns = p.busy_us * 1000;
    let r = with_switcher(p, p.event_sleep_us, busy_ns, |sw| {
        let tid = sw.wait_tid();
        let mut h = Hist::new();
        let end = Instant::now() + Duration::from_secs(p.timeout_s);
        src.wait_events(Duration::ZERO, |_| {})?; // drop what came before
        // The event that woke this thread for each busy edge: the WAKE
        // announcing it, or its BUSY when it was not announced (a BUSY
        // after a WAKE does not wake the reader).
        let mut announced = false;
        while h.len() < p.event_samples && Instant::now() < end {
            src.wait_events(Duration::from_millis(100), |e: LcEvent| {
                let now = monotonic_ns();
                let ours = e.tid == tid && e.cpu == p.lc_cpu;
                if e.woken {
                    if ours {
                        h.record(now.saturating_sub(e.time_ns));
                    }
                    announced = true;
                } else if e.busy {
                    if ours && !announced {
                        h.record(now.saturating_sub(e.time_ns));
                    } else if !ours {
                        h.missed += 1;
                    }
                    announced = false;
                }
            })?;
        }
        Ok(h.latency())
    });
    src.unwatch_tgid(std::process::id())?;
    r
}

/// (c) Detection latency of the coarse poll fallback.
pub fn measure_poll(p: &Params) -> anyhow::Result<Option<Latency>> {
    let interval = Duration::from_micros(p.poll_interval_us);
    let busy_ns = 3 * p.poll_interval_us * 1000;
    let sleep_us = [2 * p.poll_interval_us, 10 * p.poll_interval_us];
    with_switcher(p, sleep_us, busy_ns, |sw| {
        let tid = sw.wait_tid();
        // Opened on the observer thread, so the scanner inherits its CPU
        // and never shows up as a running thread of ours on the LC CPU.
        let mut src = PollSource::open(interval, Some(&[p.lc_cpu]))?;
        src.watch_tgid(std::process::id())?;
        let mut h = Hist::new();
        let end = Instant::now() + Duration::from_secs(p.timeout_s);
        while h.len() < p.poll_samples && Instant::now() < end {
            src.wait_events(Duration::from_millis(100), |e: LcEvent| {
                if e.busy && !e.woken && e.tid == tid && e.cpu == p.lc_cpu {
                    let woke = sw.woke_ns.load(Acquire);
                    h.record(e.time_ns.saturating_sub(woke));
                } else if e.busy && !e.woken {
                    h.missed += 1;
                }
            })?;
        }
        Ok(h.latency())
    })
}

/// The figures of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    /// (a) slot visibility to a spinning poller; `None` without BPF.
    pub visibility: Option<Latency>,
    /// (b) ring-buffer event to a sleeping thread; `None` without BPF.
    pub event: Option<Latency>,
    /// (c) the poll fallback's detection latency.
    pub poll: Option<Latency>,
}

/// One run of all three measurements (BPF ones only if `bpf` is given).
pub fn run_once(bpf: Option<&mut SchedSource>, p: &Params, poll: bool) -> anyhow::Result<Run> {
    let (visibility, event) = match bpf {
        Some(src) => (measure_visibility(src, p)?, measure_events(src, p)?),
        None => (None, None),
    };
    let poll = if poll { measure_poll(p)? } else { None };
    Ok(Run {
        visibility,
        event,
        poll,
    })
}

/// Opens the BPF source for the measurements, or says why not.
pub fn open_bpf() -> Result<SchedSource, BpfError> {
    SchedSource::open(&Options::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_summary() {
        let mut h = Hist::new();
        assert!(h.latency().is_none());
        for ns in 1..=100 {
            h.record(ns * 10);
        }
        h.missed = 2;
        let l = h.latency().unwrap();
        assert_eq!((l.samples, l.missed), (100, 2));
        assert!(l.p50_ns >= 495 && l.p50_ns <= 505, "{l:?}");
        assert!(l.p99_ns <= l.max_ns && l.max_ns >= 999);
    }

    #[test]
    fn poll_measurement_runs_briefly() {
        let n = crate::proc::possible_cpus().unwrap();
        let mut p = Params::new(n - 1, 0);
        p.poll_samples = 3;
        p.timeout_s = 10;
        let l = measure_poll(&p)
            .unwrap()
            .expect("the poll source saw the switcher");
        assert!(l.samples >= 1);
    }
}
