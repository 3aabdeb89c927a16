//! **Open-loop arrivals**: Poisson send times drawn before anything is
//! sent ([`poisson_offsets`], or unbounded: [`poisson_arrivals`]), so each
//! request has an *intended* send time independent of how the service
//! behaves, and the sender ([`run_sender`]) that sends each request at its
//! intended time, or at once if it is late, never waiting for answers.

use crate::clock::Clock;
use rand::Rng;
use rand_distr::{Distribution, Exp};
use std::sync::atomic::{AtomicBool, Ordering};

/// Intended send offsets (ns from the start) of a Poisson process at `rps`
/// over `span_ns`: cumulative sums of exponential inter-arrival times.
pub fn poisson_offsets(rps: f64, span_ns: u64, rng: &mut impl Rng) -> Vec<u64> {
    let mut out = Vec::with_capacity((rps * span_ns as f64 / 1e9 * 1.1) as usize + 16);
    out.extend(poisson_arrivals(rps, rng).take_while(|&t| t < span_ns));
    out
}

/// The intended send offsets (ns from the start) of a Poisson process at
/// `rps`, without end: the same draws as [`poisson_offsets`], for a load
/// that runs until it is stopped.
pub fn poisson_arrivals(rps: f64, rng: &mut impl Rng) -> impl Iterator<Item = u64> + '_ {
    let exp = Exp::new(rps / 1e9).expect("rps > 0 was validated");
    let mut t = 0f64;
    std::iter::from_fn(move || {
        t += exp.sample(rng);
        Some(t as u64)
    })
}

/// Longest single sleep of the sender, ns: a stop is seen within it.
const SLEEP_PIECE_NS: u64 = 50_000_000;

/// Sends request `i` at `t0 + offsets[i]` for every `i` (late requests at
/// once; `send` is given `i` and that due time, ns), until the offsets end or `stop` is set (seen within 50 ms, also
/// while waiting). Returns how many were sent; stops early if `send` fails
/// (returning the error).
pub fn run_sender<C: Clock + ?Sized>(
    clock: &C,
    t0_ns: u64,
    offsets: impl IntoIterator<Item = u64>,
    stop: &AtomicBool,
    mut send: impl FnMut(usize, u64) -> std::io::Result<()>,
) -> (usize, Option<std::io::Error>) {
    let mut sent = 0;
    for (i, off) in offsets.into_iter().enumerate() {
        let due = t0_ns + off;
        loop {
            if stop.load(Ordering::Relaxed) {
                return (i, None);
            }
            let now = clock.now_ns();
            if now >= due {
                break;
            }
            clock.sleep_until_ns(due.min(now + SLEEP_PIECE_NS));
        }
        if let Err(e) = send(i, due) {
            return (i, Some(e));
        }
        sent = i + 1;
    }
    (sent, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn poisson_arrivals_have_the_right_statistics() {
        let mut rng = SmallRng::seed_from_u64(5);
        let rps = 1000.0;
        let span = 100_000_000_000u64; // 100 s
        let o = poisson_offsets(rps, span, &mut rng);
        let n = o.len() as f64;
        // count: Poisson(100000), sd 316
        assert!((n - 100_000.0).abs() < 1500.0, "count {n}");
        assert!(o.windows(2).all(|w| w[0] <= w[1]) && *o.last().unwrap() < span);
        // exponential gaps: mean 1 ms, coefficient of variation 1
        let gaps: Vec<f64> = o.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((mean / 1e6 - 1.0).abs() < 0.02, "mean gap {mean}");
        assert!((sd / mean - 1.0).abs() < 0.03, "cv {}", sd / mean);
        // counts in 10 ms windows: mean 10 and variance 10 (Poisson)
        let mut counts = vec![0f64; (span / 10_000_000) as usize];
        for &t in &o {
            counts[(t / 10_000_000) as usize] += 1.0;
        }
        let m = counts.iter().sum::<f64>() / counts.len() as f64;
        let var = counts.iter().map(|c| (c - m).powi(2)).sum::<f64>() / counts.len() as f64;
        assert!(
            (var / m - 1.0).abs() < 0.1,
            "index of dispersion {}",
            var / m
        );
    }

    #[test]
    fn stop_ends_the_sender() {
        let clock = FakeClock::at(0);
        let stop = AtomicBool::new(false);
        let (n, _) = run_sender(&clock, 0, [0, 10, 20], &stop, |i, _| {
            if i == 1 {
                stop.store(true, Ordering::Relaxed);
            }
            Ok(())
        });
        assert_eq!(n, 2);
        let (n, e) = run_sender(&clock, 0, [0, 10], &AtomicBool::new(false), |_, _| {
            Err(std::io::Error::other("boom"))
        });
        assert_eq!((n, e.unwrap().to_string()), (0, "boom".to_string()));
    }
}
