//! **Latency from intended send times**: [`Accounting`] takes each
//! answer's latency from the time its request was *due*, not sent, so a
//! stall — of the service, the network or the sender itself — shows up as
//! latency for every request due during it (no coordinated omission).
//! Requests due during the warm-up are sent but not recorded; requests
//! never answered by the end count as errors *and* are recorded with the
//! latency they had reached. Latencies go into an HdrHistogram
//! ([`new_histogram`]), read as percentiles by [`percentiles_us`].

use hdrhistogram::Histogram;

/// A latency histogram in nanoseconds (1 ns .. 1 hour, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")
}

/// Latency accounting from intended send times.
#[derive(Debug)]
pub struct Accounting {
    t0_ns: u64,
    offsets: Vec<u64>,
    warmup_ns: u64,
    answered: Vec<bool>,
    hist: Histogram<u64>,
    recorded: u64,
    duplicates: u64,
    failed: u64,
}

/// What an invocation's accounting found.
#[derive(Debug)]
pub struct Outcome {
    /// Latencies (ns) of the measured requests, answered or not.
    pub hist: Histogram<u64>,
    /// Measured requests answered.
    pub requests: u64,
    /// Measured requests never answered (recorded with the latency reached
    /// at the end) or answered with an error status, plus responses for
    /// unknown or repeated ids.
    pub errors: u64,
}

impl Accounting {
    /// Accounting for requests intended at `t0_ns + offsets[i]`; those
    /// intended before `t0_ns + warmup_ns` are not recorded.
    pub fn new(t0_ns: u64, offsets: Vec<u64>, warmup_ns: u64) -> Accounting {
        let n = offsets.len();
        Accounting {
            t0_ns,
            offsets,
            warmup_ns,
            answered: vec![false; n],
            hist: new_histogram(),
            recorded: 0,
            duplicates: 0,
            failed: 0,
        }
    }

    /// Whether request `id` is in the measured window.
    pub fn measured(&self, id: usize) -> bool {
        self.offsets.get(id).is_some_and(|&o| o >= self.warmup_ns)
    }

    /// Records the response to request `id` arriving at `now_ns`; returns
    /// its latency (ns) if it is measured.
    pub fn on_response(&mut self, id: usize, now_ns: u64) -> Option<u64> {
        let Some(&off) = self.offsets.get(id) else {
            self.duplicates += 1;
            return None;
        };
        if std::mem::replace(&mut self.answered[id], true) {
            self.duplicates += 1;
            return None;
        }
        if off < self.warmup_ns {
            return None;
        }
        let lat = now_ns.saturating_sub(self.t0_ns + off).max(1);
        self.hist.saturating_record(lat);
        self.recorded += 1;
        Some(lat)
    }

    /// Records that request `id` failed (an error status) at `now_ns`: it is
    /// answered, counted as an error and, if measured, recorded with its
    /// latency (a failure is never faster than a success).
    pub fn on_failure(&mut self, id: usize, now_ns: u64) {
        if self.on_response(id, now_ns).is_some() {
            self.recorded -= 1;
            self.failed += 1;
        }
    }

    /// Whether every request has been answered.
    pub fn all_answered(&self) -> bool {
        self.answered.iter().all(|&a| a)
    }

    /// Ends the accounting at `now_ns`: each measured request still
    /// unanswered is an error and is recorded with latency `now − intended`.
    pub fn finish(mut self, now_ns: u64) -> Outcome {
        let mut missing = 0;
        for (i, &off) in self.offsets.iter().enumerate() {
            if off >= self.warmup_ns && !self.answered[i] {
                missing += 1;
                self.hist
                    .saturating_record(now_ns.saturating_sub(self.t0_ns + off).max(1));
            }
        }
        Outcome {
            hist: self.hist,
            requests: self.recorded,
            errors: missing + self.duplicates + self.failed,
        }
    }
}

/// p50/p95/p99/p99.9/max/mean of a ns histogram, in µs.
pub fn percentiles_us(h: &Histogram<u64>) -> elfen_results::Percentiles {
    let q = |x: f64| h.value_at_quantile(x) as f64 / 1e3;
    if h.is_empty() {
        return elfen_results::Percentiles {
            p50: 0.0,
            p95: 0.0,
            p99: 0.0,
            p999: 0.0,
            max: 0.0,
            mean: 0.0,
        };
    }
    elfen_results::Percentiles {
        p50: q(0.5),
        p95: q(0.95),
        p99: q(0.99),
        p999: q(0.999),
        max: h.max() as f64 / 1e3,
        mean: h.mean() / 1e3,
    }
}

/// The accounting as a connection's receiver: an answer with an error is
/// a failure (recorded with its latency), the others responses.
impl crate::conn::Receive for Accounting {
    fn answered(&mut self, a: &crate::conn::Answer, now_ns: u64) {
        if a.ok {
            self.on_response(a.id as usize, now_ns);
        } else {
            self.on_failure(a.id as usize, now_ns);
        }
    }
    fn done(&self) -> bool {
        self.all_answered()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::run_sender;
    use crate::clock::{Clock, FakeClock};
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_stalled_server_shows_up_as_latency_for_every_queued_request() {
        // 100 requests intended every 1 ms from t0 = 1 s; the first 10 are
        // warm-up. The server answers each 100 µs after it is sent, except
        // that it stalls from 30 ms to 80 ms, then drains its queue at 100 µs
        // per request.
        let clock = FakeClock::at(1_000_000_000);
        let t0 = clock.now_ns();
        let offsets: Vec<u64> = (0..100).map(|i| i * 1_000_000).collect();
        let mut acc = Accounting::new(t0, offsets.clone(), 10_000_000);
        let stop = AtomicBool::new(false);
        let mut sent_at = Vec::new();
        let (n, err) = run_sender(&clock, t0, offsets.iter().copied(), &stop, |i, _| {
            sent_at.push((i, clock.now_ns()));
            Ok(())
        });
        assert_eq!((n, err.is_none()), (100, true));
        let mut server_free = 0u64;
        let mut lat_ms = Vec::new();
        for (i, sent) in sent_at {
            let mut start = sent.max(server_free);
            if (t0 + 30_000_000..t0 + 80_000_000).contains(&start) {
                start = t0 + 80_000_000;
            }
            let done = start + 100_000;
            server_free = done;
            if let Some(l) = acc.on_response(i, done) {
                lat_ms.push((i, l as f64 / 1e6));
            }
        }
        for &(i, l) in &lat_ms {
            let intended = i as f64;
            if (30.0..80.0).contains(&intended) {
                // every request due during the stall waited for its end
                assert!(l >= 80.0 - intended, "request {i}: {l} ms");
            } else if intended >= 80.0 + 6.0 {
                // long after the stall, back to the 100 µs service time
                assert!(l < 0.2, "request {i}: {l} ms");
            }
        }
        let out = acc.finish(clock.now_ns());
        assert_eq!(out.requests, 90, "warm-up excluded");
        assert_eq!(out.errors, 0);
        let p = percentiles_us(&out.hist);
        assert!(p.max >= 49_900.0 && p.max <= 50_200.0, "max {}", p.max);
        assert!(p.p50 > 100.0, "the stall is not hidden: {}", p.p50);
    }

    #[test]
    fn a_stalled_sender_does_not_hide_latency() {
        // The sender itself stalls 20 ms at request 5: later requests go out
        // late, and their latency counts from when they were due.
        let clock = FakeClock::at(0);
        let offsets: Vec<u64> = (0..20).map(|i| i * 1_000_000).collect();
        let mut acc = Accounting::new(0, offsets.clone(), 0);
        let stop = AtomicBool::new(false);
        let (n, _) = run_sender(&clock, 0, offsets.iter().copied(), &stop, |i, _| {
            if i == 5 {
                clock.advance(20_000_000);
            }
            // answered the moment it is sent
            acc.on_response(i, clock.now_ns());
            Ok(())
        });
        assert_eq!(n, 20);
        let out = acc.finish(clock.now_ns());
        // requests 6..=19 were due at 6..19 ms but sent at 25 ms: 19 ms .. 6 ms late
        let p = percentiles_us(&out.hist);
        assert!(p.max >= 18_900.0, "max {}", p.max);
    }

    #[test]
    fn unanswered_requests_are_errors_with_latency() {
        let offsets = vec![0, 1_000, 2_000, 3_000];
        let mut acc = Accounting::new(100, offsets, 1_500);
        assert!(acc.on_response(0, 200).is_none(), "warm-up");
        assert_eq!(acc.on_response(2, 2_600), Some(500));
        assert!(acc.on_response(2, 2_700).is_none(), "duplicate");
        assert!(acc.on_response(9, 2_700).is_none(), "unknown id");
        assert!(!acc.all_answered());
        let out = acc.finish(10_100);
        assert_eq!(out.requests, 1);
        assert_eq!(out.errors, 1 + 2, "request 3 missing, 2 bad responses");
        assert_eq!(out.hist.len(), 2);
        assert!(out.hist.max() >= 6_990, "request 3 waited 7 us by the end");
    }

    #[test]
    fn failed_requests_are_errors_with_latency() {
        let mut acc = Accounting::new(0, vec![0, 1_000], 0);
        acc.on_failure(0, 5_000);
        assert!(acc.on_response(1, 1_500).is_some());
        acc.on_failure(1, 9_000);
        let out = acc.finish(10_000);
        assert_eq!(
            (out.requests, out.errors),
            (1, 1 + 1),
            "one failure, one duplicate"
        );
        assert_eq!(out.hist.len(), 2);
        assert!(out.hist.max() >= 4_990, "the failure's latency is kept");
    }
}
