//! The LC service's **busy-period profile**: how long it runs each time it
//! gets its CPU (a busy period: switch-in to switch-away of its threads on
//! a request lane) and how long the gaps between busy periods are. The LC
//! signal writer sees every transition and records both, lock-free, in
//! [`Profile`]; anyone takes a [`ProfileSnapshot`] and the difference of
//! two snapshots is a window ([`ProfileSnapshot::since`]). Whether a mode
//! can follow the service (`super::fit`) and `auto`'s contention
//! (`super::auto`) are computed from windows.
//!
//! The histogram is log-linear: four buckets per power of two from 1 ns to
//! ~17 s (a value's bucket is known within 25 %), plus the exact count and
//! sum, so means are exact and quantiles within a bucket.
//!
//! The BPF signal source keeps the same histograms in the kernel, per CPU
//! (`elfen_bpf::StatsReader`, the same buckets): while the writer is not
//! woken per edge ([`Profile::count_in_kernel`]) the busy periods and gaps
//! of that time are the kernel's, read at each snapshot; and the LC's
//! wake-to-run delay (a wake-up to its switch-in) comes from the kernel
//! alone.

use elfen_bpf::{HistCounts, LcCounts, StatsReader};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Sub-buckets per power of two.
const SUB: usize = 4;
/// Powers of two covered (1 ns .. 2^34 ns ≈ 17 s; longer values land in
/// the last bucket).
const OCTAVES: usize = 34;
/// Buckets in a histogram.
pub const BUCKETS: usize = SUB * OCTAVES;
// the kernel's histograms are added bucket by bucket
const _: () = assert!(BUCKETS == elfen_bpf::contract::HIST_BUCKETS);

/// The bucket of `v` ns.
fn bucket(v: u64) -> usize {
    let v = v.max(1);
    let octave = 63 - v.leading_zeros() as usize;
    let sub = if octave >= 2 {
        ((v >> (octave - 2)) & 0b11) as usize
    } else {
        // 1, 2, 3: exact enough
        (v as usize).saturating_sub(1 << octave).min(SUB - 1)
    };
    (octave * SUB + sub).min(BUCKETS - 1)
}

/// The smallest value of bucket `i`, ns.
fn bucket_low(i: usize) -> u64 {
    let (octave, sub) = (i / SUB, (i % SUB) as u64);
    let base = 1u64 << octave;
    if octave >= 2 {
        base + sub * (base >> 2)
    } else {
        base + sub
    }
}

/// A representative value of bucket `i` (the middle of its range), ns.
fn bucket_mid(i: usize) -> u64 {
    let lo = bucket_low(i);
    let hi = if i + 1 < BUCKETS {
        bucket_low(i + 1)
    } else {
        lo * 2
    };
    lo + (hi.saturating_sub(lo)) / 2
}

/// A lock-free histogram of durations (one writer or many; readers copy it).
#[derive(Debug)]
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one duration.
    pub fn record(&self, ns: u64) {
        self.buckets[bucket(ns)].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    /// Adds counts taken elsewhere (the kernel's, same buckets).
    fn add(&self, c: &HistCounts) {
        for (b, &n) in self.buckets.iter().zip(&c.buckets) {
            b.fetch_add(n, Relaxed);
        }
        self.count.fetch_add(c.count, Relaxed);
        self.sum_ns.fetch_add(c.sum_ns, Relaxed);
    }

    /// A copy.
    pub fn snapshot(&self) -> HistSnapshot {
        HistSnapshot {
            buckets: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            count: self.count.load(Relaxed),
            sum_ns: self.sum_ns.load(Relaxed),
        }
    }
}

/// A copy of a [`Histogram`] (or the difference of two).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistSnapshot {
    /// Counts per bucket.
    pub buckets: Vec<u64>,
    /// Values recorded.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: u64,
}

impl Default for HistSnapshot {
    fn default() -> Self {
        HistSnapshot {
            buckets: vec![0; BUCKETS],
            count: 0,
            sum_ns: 0,
        }
    }
}

impl HistSnapshot {
    /// A snapshot of the given values (tests, the simulator's figures).
    pub fn of(values: &[u64]) -> HistSnapshot {
        let h = Histogram::default();
        values.iter().for_each(|&v| h.record(v));
        h.snapshot()
    }

    /// What was recorded after `earlier`.
    pub fn since(&self, earlier: &HistSnapshot) -> HistSnapshot {
        HistSnapshot {
            buckets: self
                .buckets
                .iter()
                .zip(earlier.buckets.iter().chain(std::iter::repeat(&0)))
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            count: self.count.saturating_sub(earlier.count),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
        }
    }

    /// Counts of the kernel's (same buckets) as a snapshot.
    pub fn of_kernel(c: &HistCounts) -> HistSnapshot {
        HistSnapshot {
            buckets: c.buckets.clone(),
            count: c.count,
            sum_ns: c.sum_ns,
        }
    }

    /// Adds counts of the kernel's (same buckets).
    fn plus(mut self, c: &HistCounts) -> HistSnapshot {
        for (b, &n) in self.buckets.iter_mut().zip(&c.buckets) {
            *b += n;
        }
        self.count += c.count;
        self.sum_ns += c.sum_ns;
        self
    }

    /// The mean, ns (0 when empty).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// The `q` quantile (0..=1), within its bucket (0 when empty).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let n: u64 = self.buckets.iter().sum();
        if n == 0 {
            return 0;
        }
        let want = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= want {
                return bucket_mid(i);
            }
        }
        bucket_mid(BUCKETS - 1)
    }

    /// The share of values at least `ns` (0 when empty; a value in the
    /// bucket of `ns` counts as its share of that bucket's range).
    pub fn share_at_least(&self, ns: u64) -> f64 {
        let n: u64 = self.buckets.iter().sum();
        if n == 0 {
            return 0.0;
        }
        let b = bucket(ns);
        let above: u64 = self.buckets[b + 1..].iter().sum();
        let (lo, hi) = (
            bucket_low(b),
            if b + 1 < BUCKETS {
                bucket_low(b + 1)
            } else {
                bucket_low(b) * 2
            },
        );
        let part = if hi > lo {
            (hi.saturating_sub(ns)) as f64 / (hi - lo) as f64
        } else {
            1.0
        };
        (above as f64 + part * self.buckets[b] as f64) / n as f64
    }

    /// `E[min(v, cap)]`: the mean of the values cut at `cap` ns.
    pub fn mean_capped_ns(&self, cap: u64) -> f64 {
        let n: u64 = self.buckets.iter().sum();
        if n == 0 {
            return 0.0;
        }
        let total: f64 = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, &c)| c as f64 * bucket_mid(i).min(cap) as f64)
            .sum();
        total / n as f64
    }
}

/// What the writer records: busy periods and the gaps between them, over
/// every request lane — itself at each edge, or the kernel while it is not
/// woken per edge.
#[derive(Debug)]
pub struct Profile {
    /// Busy periods (the LC on its CPU) the writer recorded, ns.
    busy: Histogram,
    /// Idle gaps (an idle edge to the next busy edge) it recorded, ns.
    gaps: Histogram,
    /// When recording began (`CLOCK_MONOTONIC` ns).
    started_ns: u64,
    /// The kernel's counters of the request lanes, once followed.
    kernel: Mutex<Option<Kernel>>,
}

/// The kernel's counters of the request lanes' CPUs.
#[derive(Debug)]
struct Kernel {
    stats: StatsReader,
    cpus: Vec<u32>,
    /// When they were first followed.
    start: LcCounts,
    /// When the kernel began counting for the writer (`None` while the
    /// writer records each edge itself).
    base: Option<LcCounts>,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            busy: Histogram::default(),
            gaps: Histogram::default(),
            started_ns: crate::guard::monotonic_now_ns(),
            kernel: Mutex::new(None),
        }
    }
}

impl Profile {
    /// Records a busy period that ended (the writer, at an idle edge).
    pub fn record_busy(&self, ns: u64) {
        self.busy.record(ns);
    }

    /// Records a gap that ended (the writer, at a busy edge).
    pub fn record_gap(&self, ns: u64) {
        self.gaps.record(ns);
    }

    /// Follows the kernel's counters of `cpus` (the request lanes): their
    /// wake-to-run delays from now on, and their busy periods and gaps
    /// while [`Profile::count_in_kernel`] says so.
    pub fn follow_kernel(&self, stats: StatsReader, cpus: Vec<u32>) {
        let start = stats.sum(&cpus);
        *self.kernel.lock().unwrap_or_else(|p| p.into_inner()) = Some(Kernel {
            stats,
            cpus,
            start,
            base: None,
        });
    }

    /// Whether the kernel counts the busy periods and gaps (the writer is
    /// not woken per edge) from now on, or the writer records them again:
    /// what the kernel counted meanwhile joins the writer's records.
    /// Nothing without [`Profile::follow_kernel`].
    pub fn count_in_kernel(&self, on: bool) {
        let mut k = self.kernel.lock().unwrap_or_else(|p| p.into_inner());
        let Some(k) = k.as_mut() else { return };
        let now = k.stats.sum(&k.cpus);
        if let Some(base) = k.base.take() {
            let d = now.since(&base);
            self.busy.add(&d.busy);
            self.gaps.add(&d.gaps);
        }
        if on {
            k.base = Some(now);
        }
    }

    /// Whether the kernel counts the busy periods and gaps now.
    pub fn counted_in_kernel(&self) -> bool {
        self.kernel
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|k| k.base.is_some())
    }

    /// Everything recorded so far, as a window from the start.
    pub fn since_start(&self, now_ns: u64) -> ProfileSnapshot {
        let mut w = self.snapshot(now_ns);
        w.at_ns = now_ns.saturating_sub(self.started_ns);
        w
    }

    /// A copy, taken at `at_ns` (`CLOCK_MONOTONIC`).
    pub fn snapshot(&self, at_ns: u64) -> ProfileSnapshot {
        let (mut busy, mut gaps) = (self.busy.snapshot(), self.gaps.snapshot());
        let mut wake = HistSnapshot::default();
        if let Some(k) = self
            .kernel
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let now = k.stats.sum(&k.cpus);
            if let Some(base) = &k.base {
                let d = now.since(base);
                busy = busy.plus(&d.busy);
                gaps = gaps.plus(&d.gaps);
            }
            wake = HistSnapshot::of_kernel(&now.wake.since(&k.start.wake));
        }
        ProfileSnapshot {
            at_ns,
            busy,
            gaps,
            wake,
        }
    }
}

/// A copy of a [`Profile`], or a window (the difference of two).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileSnapshot {
    /// When it was taken (for a window: its length), ns.
    pub at_ns: u64,
    /// Busy periods.
    pub busy: HistSnapshot,
    /// Gaps.
    pub gaps: HistSnapshot,
    /// The LC's wake-to-run delays (a wake-up to its switch-in on a request
    /// lane; the kernel's, empty without the BPF source).
    #[serde(default)]
    pub wake: HistSnapshot,
}

impl ProfileSnapshot {
    /// The window from `earlier` to this one (`at_ns` is its length).
    pub fn since(&self, earlier: &ProfileSnapshot) -> ProfileSnapshot {
        ProfileSnapshot {
            at_ns: self.at_ns.saturating_sub(earlier.at_ns),
            busy: self.busy.since(&earlier.busy),
            gaps: self.gaps.since(&earlier.gaps),
            wake: self.wake.since(&earlier.wake),
        }
    }

    /// Busy periods per second in a window (0 for an empty one).
    pub fn rate_per_s(&self) -> f64 {
        if self.at_ns == 0 {
            0.0
        } else {
            self.busy.count as f64 * 1e9 / self.at_ns as f64
        }
    }

    /// The LC's busy share of one request lane in a window.
    pub fn busy_share(&self) -> f64 {
        if self.at_ns == 0 {
            0.0
        } else {
            self.busy.sum_ns as f64 / self.at_ns as f64
        }
    }

    /// One line: `busy periods p50 27 µs, p90 60 µs, mean 31 µs (9,800/s)`.
    pub fn describe(&self) -> String {
        if self.busy.count == 0 {
            return "no busy period seen".into();
        }
        format!(
            "busy periods p50 {}, p90 {}, mean {} ({:.0}/s)",
            us(self.busy.quantile_ns(0.5) as f64),
            us(self.busy.quantile_ns(0.9) as f64),
            us(self.busy.mean_ns()),
            self.rate_per_s()
        )
    }
}

/// `27 µs`, `1.5 ms`.
pub fn us(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.0} µs", ns / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_within_a_quarter() {
        let mut last = 0;
        for v in [1u64, 2, 3, 4, 5, 7, 8, 100, 1000, 27_000, 1 << 30, u64::MAX] {
            let b = bucket(v);
            assert!(b >= last, "{v}");
            last = b;
            if v < (1 << 33) {
                let lo = bucket_low(b);
                assert!(lo <= v && v as f64 <= lo as f64 * 1.26, "{v}: {lo}");
            }
        }
    }

    #[test]
    fn buckets_are_the_kernels() {
        for s in 0..64 {
            let p = 1u64 << s;
            for v in [p, p + 1, p + p / 4, p + p / 2, p + 3 * (p / 4), p | (p - 1)] {
                assert_eq!(bucket(v), elfen_bpf::contract::hist_bucket(v), "{v}");
            }
        }
        assert_eq!(bucket(0), elfen_bpf::contract::hist_bucket(0));
    }

    #[test]
    fn windows_means_quantiles_and_shares() {
        let h = Histogram::default();
        for v in [10_000u64, 20_000, 30_000, 40_000] {
            h.record(v);
        }
        let a = h.snapshot();
        for _ in 0..4 {
            h.record(1_000_000);
        }
        let w = h.snapshot().since(&a);
        assert_eq!((w.count, w.sum_ns), (4, 4_000_000));
        assert_eq!(a.mean_ns(), 25_000.0);
        let p50 = a.quantile_ns(0.5) as f64;
        assert!((16_000.0..=26_000.0).contains(&p50), "{p50}");
        assert!(a.share_at_least(5_000) > 0.99);
        assert!(a.share_at_least(100_000) < 0.01);
        let s = a.share_at_least(25_000);
        assert!((0.3..=0.7).contains(&s), "{s}");
        // E[min(v, 15 µs)]: 10 and 15, 15, 15
        let m = a.mean_capped_ns(15_000);
        assert!((12_000.0..=15_000.0).contains(&m), "{m}");
        assert_eq!(HistSnapshot::default().quantile_ns(0.9), 0);
    }
}
