//! What a sweep runs, decided before anything runs: the loads, the order
//! of invocations (interleaved rounds) and each invocation's requests and
//! arrival times (common random numbers). Pure functions.

use crate::lc::requests::RequestSet;
use crate::load::client::InvocationPlan;
use crate::load::poisson_offsets;
use crate::spec::{BatchProgram, BenchSpec, Config};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::sync::Arc;

/// The loads: given, or fractions of the capacity alone rounded to 2
/// significant digits.
pub fn resolve_rps(spec: &BenchSpec, capacity_rps: f64) -> Vec<f64> {
    let mut v: Vec<f64> = if spec.rps.is_empty() {
        spec.rps_fractions
            .iter()
            .map(|f| round2(f * capacity_rps).max(1.0))
            .collect()
    } else {
        spec.rps.clone()
    };
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// `x` rounded to 2 significant digits.
pub fn round2(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let mag = 10f64.powf(x.log10().floor() - 1.0);
    (x / mag).round() * mag
}

/// splitmix64's finalizer: a bijective mix of 64 bits.
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How the main sweep orders and seeds its invocations (for the result
/// file).
pub const ORDER_NOTE: &str = "interleaved: per load (ascending), round 1 of every (configuration, \
     kernel) with lc_alone first, then round 2 of every one, ..., the order after lc_alone \
     rotated by one each round; then, where a verdict was open, added rounds of lc_alone and \
     the open points, ordered alike; a fresh batch process per invocation. Common random \
     numbers: the seed of an invocation depends on the sweep's seed, the load and the round \
     only, so every configuration and kernel sends the same arrivals and requests in a round; \
     a disturbed invocation run again reuses its round's seed; probe and \
     pre-sweep draw seeds of their own";

/// The round number the capacity probe and the knee pre-sweep draw their
/// seeds with: never a round of the main sweep, so their arrivals are not
/// those of round 1.
pub const PRESWEEP_ROUND: u32 = u32::MAX;

/// LC-alone invocations per load of the knee pre-sweep (rounds
/// `PRESWEEP_ROUND`, `PRESWEEP_ROUND - 1`, ...): the budgets come from their
/// median p99, the statistic the table reports, not from one invocation.
pub const PRESWEEP_REPS: u32 = 3;

/// The seed of invocation `round` (0-based) at load `rps`: **common random
/// numbers** — it depends on the sweep's seed, the load and the round only,
/// never on the configuration or the kernel, so every configuration's
/// invocation of a round sends the same requests at the same intended
/// times. A disturbed invocation run again reuses it.
pub fn invocation_seed(seed: u64, rps: f64, round: u32) -> u64 {
    mix64(mix64(seed ^ mix64(rps.to_bits())) ^ u64::from(round))
}

/// One (configuration, batch program) of a load: `lc_alone` has none.
pub type Slot = (Config, Option<BatchProgram>);

/// The (configuration, batch program) pairs of one round at a load, in the
/// order they run: `lc_alone` first (the budget policies' budget comes from
/// its round-1 invocation), then every batch configuration with each
/// program — the Elfen configurations only with programs that check.
pub fn round_slots(batch_configs: &[Config], batches: &[BatchProgram]) -> Vec<Slot> {
    let mut v: Vec<Slot> = vec![(Config::LcAlone, None)];
    for &b in batches {
        for &c in batch_configs.iter().filter(|c| c.has_batch()) {
            if c.policy().is_none() || b.checks() {
                v.push((c, Some(b)));
            }
        }
    }
    v
}

/// The order of one round at a load: `slots` (indices into the load's
/// [`round_slots`], LC alone's `0` first) with LC alone first — the
/// budget policies' budget comes from round 1's — and the rest rotated by
/// the round (0-based), so no configuration always runs furthest from its
/// round's LC alone and slow drift of the host hits every one alike.
pub fn round_order(slots: &[usize], round: u32) -> Vec<usize> {
    let (head, rest): (Vec<usize>, Vec<usize>) = slots.iter().partition(|&&i| i == 0);
    let mut v = head;
    if !rest.is_empty() {
        let k = round as usize % rest.len();
        v.extend(rest[k..].iter().chain(&rest[..k]));
    }
    v
}

/// What an invocation sends, from its seed alone: Poisson arrivals at `rps`
/// over warm-up and window, then the request sequence (shuffled passes over
/// the set) drawn from the same generator. Nothing about the configuration
/// enters, so equal seeds send equal invocations.
pub fn invocation_plan(
    spec: &BenchSpec,
    set: &Arc<RequestSet>,
    work_scale: f64,
    rps: f64,
    seed: u64,
) -> InvocationPlan {
    let mut rng = SmallRng::seed_from_u64(seed);
    let warmup_ns = (spec.warmup_s * 1e9) as u64;
    let duration_ns = (spec.window_s(rps) * 1e9) as u64;
    let offsets = poisson_offsets(rps, warmup_ns + duration_ns, &mut rng);
    let picks = set.sequence(offsets.len(), &mut rng);
    InvocationPlan {
        offsets,
        picks,
        set: set.clone(),
        work_scale,
        warmup_ns,
        duration_ns,
        drain_ns: (spec.drain_s * 1e9) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lc::requests;
    use crate::spec::{DemandSpec, RequestsKind};

    #[test]
    fn automatic_loads_round_to_two_digits() {
        let spec = BenchSpec {
            rps_fractions: vec![0.2, 0.4, 0.4],
            ..BenchSpec::default()
        };
        assert_eq!(resolve_rps(&spec, 3333.0), vec![670.0, 1300.0]);
        let given = BenchSpec {
            rps: vec![300.0, 100.0],
            ..BenchSpec::default()
        };
        assert_eq!(resolve_rps(&given, 1.0), vec![100.0, 300.0]);
        assert_eq!(round2(1234.0), 1200.0);
        assert_eq!(round2(0.0), 0.0);
    }

    #[test]
    fn seeds_are_common_to_every_configuration_of_a_round() {
        let s = |rps: f64, round: u32| invocation_seed(1, rps, round);
        let mut seen = std::collections::HashSet::new();
        for rps in [440.0, 800.0, 1200.0] {
            for round in 0..5 {
                assert!(seen.insert(s(rps, round)), "{rps} rps round {round}");
            }
            for i in 0..PRESWEEP_REPS {
                assert!(
                    seen.insert(s(rps, PRESWEEP_ROUND - i)),
                    "pre-sweep {rps} {i}"
                );
            }
        }
        assert_ne!(invocation_seed(1, 800.0, 0), invocation_seed(2, 800.0, 0));
        // Equal seeds send equal invocations: same arrivals, same requests.
        let spec = BenchSpec {
            duration_s: 0.2,
            warmup_s: 0.05,
            ..BenchSpec::default()
        };
        let set = Arc::new(
            requests::build(
                RequestsKind::Demand,
                &DemandSpec::Exponential {
                    mean_us: 300.0,
                    set_size: 100,
                },
                None,
                1,
            )
            .unwrap(),
        );
        let a = invocation_plan(&spec, &set, 1.0, 800.0, s(800.0, 1));
        let b = invocation_plan(&spec, &set, 1.0, 800.0, s(800.0, 1));
        assert_eq!((&a.offsets, &a.picks), (&b.offsets, &b.picks));
        assert!(a.offsets.len() > 100, "{}", a.offsets.len());
        // the window holds min_requests: 300 requests at 300 rps need 1 s
        let low = BenchSpec {
            min_requests: 300,
            ..spec.clone()
        };
        let p = invocation_plan(&low, &set, 1.0, 300.0, s(300.0, 1));
        assert_eq!(p.duration_ns, 1_000_000_000);
        let measured = p.offsets.iter().filter(|&&t| t >= p.warmup_ns).count();
        assert!((200..400).contains(&measured), "{measured}");
        let c = invocation_plan(&spec, &set, 1.0, 800.0, s(800.0, 2));
        assert_ne!(a.offsets, c.offsets, "rounds differ");
        assert_ne!(a.picks[..50], c.picks[..50], "rounds differ");
    }

    #[test]
    fn rounds_interleave_every_configuration_with_lc_alone_first() {
        let cfgs = [Config::Naive, Config::BorrowIdle, Config::LcAlone];
        use crate::spec::{KernelKind, ProgramKind};
        let ks = [
            BatchProgram::Kernel(KernelKind::Stream),
            BatchProgram::Kernel(KernelKind::Matrix),
        ];
        let slots = round_slots(&cfgs, &ks);
        assert_eq!(
            slots,
            vec![
                (Config::LcAlone, None),
                (Config::Naive, Some(ks[0])),
                (Config::BorrowIdle, Some(ks[0])),
                (Config::Naive, Some(ks[1])),
                (Config::BorrowIdle, Some(ks[1])),
            ]
        );
        // unmodified programs cannot run the Elfen configurations
        let xz = BatchProgram::Program(ProgramKind::Xz);
        assert_eq!(
            round_slots(&cfgs, &[xz]),
            vec![(Config::LcAlone, None), (Config::Naive, Some(xz))]
        );
        // LC alone first in every round; the rest rotate round by round
        let all: Vec<usize> = (0..slots.len()).collect();
        assert_eq!(round_order(&all, 0), vec![0, 1, 2, 3, 4]);
        assert_eq!(round_order(&all, 1), vec![0, 2, 3, 4, 1]);
        assert_eq!(round_order(&all, 5), vec![0, 2, 3, 4, 1]);
        // over as many rounds as slots, every slot takes every position
        for slot in 1..5 {
            let mut at: Vec<usize> = (0..4)
                .map(|r| {
                    round_order(&all, r)
                        .iter()
                        .position(|&i| i == slot)
                        .unwrap()
                })
                .collect();
            at.sort_unstable();
            assert_eq!(at, vec![1, 2, 3, 4], "slot {slot}");
        }
        // an added round: LC alone and the open slots only
        assert_eq!(round_order(&[0, 2, 4], 3), vec![0, 4, 2]);
        assert_eq!(round_order(&[0], 7), vec![0]);
    }
}
