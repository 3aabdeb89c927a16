//! Cluster **fan-out** (PerfIso's IndexServe, TLA → MLA → index servers): a
//! request goes to all `K` leaf servers at once and completes when the
//! slowest leaf answers, so a per-server tail becomes the end-to-end median
//! as `K` grows (with `K` leaves, the end-to-end p50 is roughly the
//! per-leaf `0.5^(1/K)` quantile).
//!
//! Every leaf sees the same arrival instants (one arrival stream) and draws
//! its own demands (independent streams), under the same configuration.

use crate::engine::{RunOutput, RunSpec, run};
use crate::stats::percentiles_us;
use elfen_results::Percentiles;

/// What a fan-out run measured.
#[derive(Debug, Clone)]
pub struct FanoutOutput {
    /// The leaves' figures added up (lane times, events, …) with
    /// `latencies_ns` the end-to-end latencies (max over leaves) and
    /// `util_cores` the cores of all leaves, so utilization is per core of
    /// the whole cluster.
    pub merged: RunOutput,
    /// End-to-end latency percentiles, µs.
    pub end_to_end: Percentiles,
    /// Each leaf's own latency percentiles, µs.
    pub leaf: Vec<Percentiles>,
}

/// Derives a stream seed from a base seed and a stream number (splitmix64).
pub fn stream_seed(base: u64, stream: u64) -> u64 {
    let mut z = base ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs `spec` on `leaves` leaf servers (leaf `k` draws demands from
/// `stream_seed(spec.demand_seed, k)`; one leaf uses `spec.demand_seed` as is).
pub fn run_fanout(spec: &RunSpec<'_>, leaves: u32) -> FanoutOutput {
    if leaves <= 1 {
        let mut merged = run(spec);
        let mut scratch = merged.latencies_ns.clone();
        let p = percentiles_us(&mut scratch);
        // Keep the arrival-ordered latencies; percentiles came from a copy.
        merged.latencies_ns.shrink_to_fit();
        return FanoutOutput {
            merged,
            end_to_end: p,
            leaf: vec![p],
        };
    }
    let mut merged: Option<RunOutput> = None;
    let mut leaf = Vec::with_capacity(leaves as usize);
    let mut scratch = Vec::new();
    for k in 0..leaves {
        let s = RunSpec {
            demand_seed: stream_seed(spec.demand_seed, u64::from(k)),
            ..spec.clone()
        };
        let out = run(&s);
        scratch.clear();
        scratch.extend_from_slice(&out.latencies_ns);
        leaf.push(percentiles_us(&mut scratch));
        merged = Some(match merged {
            None => out,
            Some(mut m) => {
                debug_assert_eq!(m.window_ns, out.window_ns, "leaves share arrivals");
                for (e, l) in m.latencies_ns.iter_mut().zip(&out.latencies_ns) {
                    *e = (*e).max(*l);
                }
                m.lc_lane_ns += out.lc_lane_ns;
                m.batch_alone_lane_ns += out.batch_alone_lane_ns;
                m.batch_corun_lane_ns += out.batch_corun_lane_ns;
                m.naps += out.naps;
                m.wakes += out.wakes;
                m.events += out.events;
                m.stale_events += out.stale_events;
                m.corun_max_ns = m.corun_max_ns.max(out.corun_max_ns);
                m.corun_sum_ns += out.corun_sum_ns;
                m.util_cores += out.util_cores;
                m.batch_threads += out.batch_threads;
                if let (Some(a), Some(b)) = (&mut m.idle_us, &out.idle_us) {
                    merge_counts(a, b);
                }
                m
            }
        });
    }
    let mut merged = merged.expect("leaves >= 2");
    // Co-run per request is per leaf sub-request; the sum is over all of them.
    merged.corun_sum_ns /= u64::from(leaves);
    scratch.clear();
    scratch.extend_from_slice(&merged.latencies_ns);
    let end_to_end = percentiles_us(&mut scratch);
    FanoutOutput {
        merged,
        end_to_end,
        leaf,
    }
}

/// Adds `b`'s counts (and sums) into `a` (same edges).
pub fn merge_counts(a: &mut elfen_results::Distribution, b: &elfen_results::Distribution) {
    if a.edges != b.edges {
        return;
    }
    for (x, y) in a.counts.iter_mut().zip(&b.counts) {
        *x += y;
    }
    if a.sums.len() == b.sums.len() {
        for (x, y) in a.sums.iter_mut().zip(&b.sums) {
            *x += y;
        }
    }
}
