//! From a run's raw output to the shared result format's [`Rep`].

use crate::engine::RunOutput;
use elfen_results::{Percentiles, Rep, SimulatedRep, Utilization};

/// Nearest-rank percentiles (µs) of latencies in ns. Reorders `lat_ns`.
/// An empty slice gives NaNs.
pub fn percentiles_us(lat_ns: &mut [u64]) -> Percentiles {
    let n = lat_ns.len();
    if n == 0 {
        return Percentiles {
            p50: f64::NAN,
            p95: f64::NAN,
            p99: f64::NAN,
            p999: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
        };
    }
    let rank = |q: f64| ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
    let mut out = [0.0f64; 4];
    let mut from = 0;
    for (k, q) in [0.50, 0.95, 0.99, 0.999].into_iter().enumerate() {
        // Each selection leaves everything after the chosen rank >= it, so
        // the next (higher) rank is searched only there.
        let i = rank(q).max(from);
        let (_, v, _) = lat_ns[from..].select_nth_unstable(i - from);
        out[k] = *v as f64 / 1e3;
        from = i;
    }
    let max = *lat_ns[from..].iter().max().expect("non-empty") as f64 / 1e3;
    let sum: u128 = lat_ns.iter().map(|&x| u128::from(x)).sum();
    Percentiles {
        p50: out[0],
        p95: out[1],
        p99: out[2],
        p999: out[3],
        max,
        mean: sum as f64 / n as f64 / 1e3,
    }
}

/// The utilization of a run as the paper defines it, per worker core.
pub fn utilization(out: &RunOutput) -> Utilization {
    let denom = out.window_ns as f64 * f64::from(out.util_cores);
    let lc = out.lc_lane_ns as f64 / denom;
    let batch = (out.batch_alone_lane_ns + out.batch_corun_lane_ns) as f64 / denom;
    Utilization {
        lc,
        batch,
        total: lc + batch,
    }
}

/// Builds the [`Rep`] of one run; `latency_us` are its (possibly
/// end-to-end) latency percentiles, `corun_rate` the batch kind's progress
/// rate while co-running.
pub fn rep_of(out: &RunOutput, latency_us: Percentiles, corun_rate: f64) -> Rep {
    let window_s = out.window_ns as f64 / 1e9;
    let n = out.latencies_ns.len() as u64;
    let has_batch = out.batch_threads > 0;
    let units = (out.batch_alone_lane_ns as f64 + out.batch_corun_lane_ns as f64 * corun_rate)
        / out.window_ns as f64;
    let per_s = |x: u64| x as f64 / window_s;
    let u = utilization(out);
    Rep {
        round: None,
        rps_achieved: n.saturating_sub(1) as f64 / window_s,
        requests: n,
        errors: 0,
        latency_us,
        utilization: u,
        batch_units_per_s: has_batch.then_some(units),
        batch_progress: has_batch.then(|| units / f64::from(out.batch_threads)),
        naps_per_s: has_batch.then(|| per_s(out.naps)),
        wakes_per_s: has_batch.then(|| per_s(out.wakes)),
        budget_us: None,
        histogram: None,
        measured: None,
        simulated: Some(SimulatedRep {
            events: out.events,
            worker_cores: out.util_cores,
            batch_threads: out.batch_threads,
            utilization_lane_sum: u.total * f64::from(out.util_cores),
            corun_per_request_max_us: out.corun_max_ns as f64 / 1e3,
            corun_per_request_mean_us: out.corun_sum_ns as f64 / n.max(1) as f64 / 1e3,
            batch_lc_slowdown: None,
            batch_corun_rate: None,
            fanout: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=1000).rev().map(|x| x * 1000).collect();
        let p = percentiles_us(&mut v);
        assert_eq!(
            (p.p50, p.p95, p.p99, p.p999, p.max),
            (500.0, 950.0, 990.0, 999.0, 1000.0)
        );
        assert!((p.mean - 500.5).abs() < 1e-9);
        let mut one = vec![7000];
        let p = percentiles_us(&mut one);
        assert_eq!((p.p50, p.p99, p.max), (7.0, 7.0, 7.0));
        assert!(percentiles_us(&mut []).p99.is_nan());
    }
}
