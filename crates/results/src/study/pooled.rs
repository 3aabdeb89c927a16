//! **Pooled p99 ratios**: the LC's p99 over every paired round's requests
//! at once, over LC alone's p99 over the same rounds' requests — the p99 a
//! user means, from all the tail samples the rounds hold rather than the
//! few of one round (a 1 s round at 750 rps puts 7 requests above its p99).
//! Its interval comes from a paired bootstrap over rounds: resample the
//! rounds with replacement, pool each side's histograms of the resampled
//! rounds, take the ratio; the interval is the spread of those ratios. The
//! rounds stay whole (each configuration's invocation of a round and LC
//! alone's of the same round go together), so the host's drift between
//! rounds, which pairing cancels, is kept out, and its noise within a round
//! counts as often as the round is drawn. The percentile interval is
//! widened about the estimate by `sqrt(n / (n - 1))`, the spread that
//! resampling `n` rounds leaves out.

use crate::{Point, histogram};

/// Fewest paired rounds the pooled ratio and its interval are taken over
/// (with fewer, a bootstrap over rounds has too few distinct resamples to
/// be trusted and the per-round rule of [`super::verdict_rule`] applies).
pub const MIN_POOLED_ROUNDS: usize = 5;

/// Bootstrap resamples behind a pooled interval.
pub const RESAMPLES: usize = 1000;

/// The quantile pooled.
const Q: f64 = 0.99;

/// A pooled p99 ratio and its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pooled {
    /// Pooled p99 of the point / pooled p99 of LC alone, same rounds.
    pub ratio: f64,
    /// The interval of the ratio at the asked confidence.
    pub interval: (f64, f64),
    /// The rounds pooled.
    pub rounds: usize,
}

/// One side's rounds as counts over a common grid of latency values
/// (ascending), one row per round.
struct Side {
    values: Vec<u64>,
    counts: Vec<Vec<u64>>,
    totals: Vec<u64>,
}

impl Side {
    fn new(hists: &[hdrhistogram::Histogram<u64>]) -> Side {
        let rows: Vec<Vec<(u64, u64)>> = hists
            .iter()
            .map(|h| {
                h.iter_recorded()
                    .map(|v| {
                        (
                            h.highest_equivalent(v.value_iterated_to()),
                            v.count_at_value(),
                        )
                    })
                    .collect()
            })
            .collect();
        let mut values: Vec<u64> = rows.iter().flatten().map(|&(v, _)| v).collect();
        values.sort_unstable();
        values.dedup();
        let counts = rows
            .iter()
            .map(|row| {
                let mut c = vec![0u64; values.len()];
                for &(v, n) in row {
                    let i = values.binary_search(&v).expect("a value of the grid");
                    c[i] += n;
                }
                c
            })
            .collect();
        Side {
            values,
            counts,
            totals: hists.iter().map(|h| h.len()).collect(),
        }
    }

    /// The `Q` quantile of the rounds pooled `weights[r]` times each.
    fn quantile(&self, weights: &[u64]) -> Option<u64> {
        let total: u64 = weights.iter().zip(&self.totals).map(|(w, t)| w * t).sum();
        if total == 0 {
            return None;
        }
        // the smallest value with at least `rank` values at or below it,
        // found from the top: what lies above it is fewer than
        // `total - rank + 1`
        let rank = ((Q * total as f64).ceil() as u64).max(1);
        let mut above = 0u64;
        for b in (0..self.values.len()).rev() {
            above += weights
                .iter()
                .zip(&self.counts)
                .map(|(w, c)| w * c[b])
                .sum::<u64>();
            if total - above < rank {
                return Some(self.values[b]);
            }
        }
        self.values.first().copied()
    }
}

/// SplitMix64: a small, seeded, reproducible generator (the same file
/// always gives the same interval).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The pooled p99 ratio of `p` to `base` over the rounds both measured
/// with a histogram, and its `confidence` interval (percentile bootstrap
/// over rounds, [`RESAMPLES`] draws, seeded by the point's load and round
/// count). `None` with fewer than [`MIN_POOLED_ROUNDS`] such rounds, a rep
/// without a round or a histogram, or a side with no request.
pub fn pooled_p99_ratio(p: &Point, base: &Point, confidence: f64) -> Option<Pooled> {
    // every rep of `p` paired by its round with one of `base`
    let pairs = super::paired_reps(p, base);
    if pairs.len() != p.reps.len() || p.reps.iter().any(|r| r.round.is_none()) {
        return None;
    }
    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    for (r, b) in pairs {
        mine.push(histogram::decode(r.histogram.as_deref()?)?);
        theirs.push(histogram::decode(b.histogram.as_deref()?)?);
    }
    let n = mine.len();
    if n < MIN_POOLED_ROUNDS {
        return None;
    }
    let (mine, theirs) = (Side::new(&mine), Side::new(&theirs));
    let ratio_of = |w: &[u64]| -> Option<f64> {
        let b = theirs.quantile(w)?;
        (b > 0).then(|| mine.quantile(w).map(|m| m as f64 / b as f64))?
    };
    let ratio = ratio_of(&vec![1; n])?;
    let mut rng = SplitMix(p.rps_target.to_bits() ^ (n as u64).rotate_left(32));
    let mut draws = Vec::with_capacity(RESAMPLES);
    let mut w = vec![0u64; n];
    for _ in 0..RESAMPLES {
        w.iter_mut().for_each(|x| *x = 0);
        for _ in 0..n {
            w[rng.below(n)] += 1;
        }
        if let Some(r) = ratio_of(&w) {
            draws.push(r);
        }
    }
    if draws.is_empty() {
        return None;
    }
    draws.sort_by(f64::total_cmp);
    // a draw's distance from the estimate, widened by sqrt(n / (n - 1)):
    // resampling n rounds understates their spread by that factor
    let widen = (n as f64 / (n - 1) as f64).sqrt();
    let at = |q: f64| {
        let d = draws[((q * (draws.len() - 1) as f64).round() as usize).min(draws.len() - 1)];
        ratio + (d - ratio) * widen
    };
    let tail = (1.0 - confidence) / 2.0;
    Some(Pooled {
        ratio,
        interval: (at(tail), at(1.0 - tail)),
        rounds: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rep;
    use hdrhistogram::Histogram;

    /// A point whose round `i` recorded `per_round[i]` (ns).
    fn point(rps: f64, per_round: &[Vec<u64>]) -> Point {
        let reps: Vec<Rep> = per_round
            .iter()
            .enumerate()
            .map(|(i, vals)| {
                let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
                for &v in vals {
                    h.record(v).unwrap();
                }
                let mut r = crate::tests::rep(i as u32 + 1, 1.0, 1.0);
                r.histogram = histogram::encode(&h);
                r
            })
            .collect();
        Point {
            config: crate::Config::BorrowIdle,
            label: None,
            batch: None,
            rps_target: rps,
            summary: crate::Summary::of(&reps, None),
            reps,
            idle_periods: None,
            service: None,
        }
    }

    /// 1000 values: 990 at 1 ms, then the tail at `tail_ns`.
    fn round(tail_ns: u64) -> Vec<u64> {
        let mut v = vec![1_000_000; 985];
        v.extend(std::iter::repeat_n(tail_ns, 15));
        v
    }

    #[test]
    fn pooled_ratio_is_the_ratio_of_pooled_p99s_with_a_bootstrap_interval() {
        // LC alone's tail at 2 ms in every round; the point's at 2 ms in
        // half the rounds and 3 ms in the rest
        let base = point(500.0, &vec![round(2_000_000); 8]);
        let rounds: Vec<Vec<u64>> = (0..8)
            .map(|i| round(if i % 2 == 0 { 2_000_000 } else { 3_000_000 }))
            .collect();
        let p = point(500.0, &rounds);
        let got = pooled_p99_ratio(&p, &base, 0.75).unwrap();
        assert_eq!(got.rounds, 8);
        // pooled: 60 of the 8000 values at 3 ms, 60 at 2 ms: the p99 (rank
        // 7920, the 81st from the top) is 2 ms
        assert!((got.ratio - 1.0).abs() < 0.01, "{got:?}");
        let (lo, hi) = got.interval;
        assert!(lo <= got.ratio && got.ratio <= hi, "{got:?}");
        assert!(hi > 1.0, "some resamples draw mostly 3 ms rounds: {got:?}");
        // the same file, the same interval
        assert_eq!(pooled_p99_ratio(&p, &base, 0.75), Some(got));
        // a uniform 1.5x tail gives 1.5x with no spread
        let slow = point(500.0, &vec![round(3_000_000); 8]);
        let got = pooled_p99_ratio(&slow, &base, 0.75).unwrap();
        assert!((got.ratio - 1.5).abs() < 0.01, "{got:?}");
        assert!((got.interval.0 - 1.5).abs() < 0.01 && (got.interval.1 - 1.5).abs() < 0.01);
    }

    #[test]
    fn too_few_rounds_or_a_missing_histogram_gives_none() {
        let base = point(500.0, &vec![round(2_000_000); 8]);
        let few = point(500.0, &vec![round(2_000_000); MIN_POOLED_ROUNDS - 1]);
        assert_eq!(pooled_p99_ratio(&few, &base, 0.75), None);
        let mut p = point(500.0, &vec![round(2_000_000); 8]);
        p.reps[3].histogram = None;
        assert_eq!(pooled_p99_ratio(&p, &base, 0.75), None);
        p.reps[3].histogram = Some("garbage".into());
        assert_eq!(pooled_p99_ratio(&p, &base, 0.75), None);
    }
}
