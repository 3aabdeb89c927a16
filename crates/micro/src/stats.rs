//! Summaries: a median with its spread over repetitions ([`Stat`]), and
//! latency percentiles from an HdrHistogram.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A median with its spread (min and max) over repetitions: the result
/// format's own type, shared with the harness.
pub use elfen_results::Stat;

/// Percentiles of a latency distribution, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ns: f64,
    /// 99th percentile.
    pub p99_ns: f64,
    /// 99.9th percentile.
    pub p999_ns: f64,
    /// Largest sample.
    pub max_ns: f64,
    /// Mean.
    pub mean_ns: f64,
    /// Fraction of samples above 2 µs (the step-aside and spin-wake target).
    pub over_2us_fraction: f64,
}

/// A latency histogram in nanoseconds: 1 ns to 100 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// Records `ns` (clamped into the histogram's range).
pub fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.max(1));
}

impl Percentiles {
    /// The percentiles of `h` (`None` if it is empty).
    pub fn of(h: &Histogram<u64>) -> Option<Percentiles> {
        if h.is_empty() {
            return None;
        }
        Some(Percentiles {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.50) as f64,
            p99_ns: h.value_at_quantile(0.99) as f64,
            p999_ns: h.value_at_quantile(0.999) as f64,
            max_ns: h.max() as f64,
            mean_ns: h.mean(),
            over_2us_fraction: h.count_between(2_001, h.high()) as f64 / h.len() as f64,
        })
    }
}

/// A small, fast, seedable PRNG (xorshift64*) for randomized hold times:
/// no allocation, no syscall.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 is replaced by a constant).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_histogram() {
        let mut h = new_histogram();
        for v in 1..=1000 {
            record(&mut h, v);
        }
        let p = Percentiles::of(&h).unwrap();
        assert_eq!(p.count, 1000);
        assert!((p.p50_ns - 500.0).abs() <= 1.0, "{p:?}");
        assert!((p.p99_ns - 990.0).abs() <= 1.0, "{p:?}");
        assert!(Percentiles::of(&new_histogram()).is_none());
    }

    #[test]
    fn rng_ranges() {
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            let x = r.range(5, 9);
            assert!((5..=9).contains(&x));
        }
    }
}
