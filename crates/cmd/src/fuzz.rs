//! Bounded, seeded fuzzing in the normal test run (feature `fuzz`).
//!
//! [`run`] drives a `proptest` strategy for a fixed number of cases from a
//! seed fixed by the target's name, so every run tries the same inputs and
//! a failure reproduces; it prints the cases run and the time, and appends
//! them to the test log ([`crate::skip::LOG_ENV`]). A failing case is
//! shrunk and shown; keep it as a regular regression test beside the fix.

use crate::skip::{Entry, append, suite};
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use std::fmt::Debug;
use std::time::Instant;

/// The fixed seed of `target`: FNV-1a of its name, spread over 32 bytes.
fn seed(target: &str) -> [u8; 32] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = [0u8; 32];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        for b in target.bytes().chain([i as u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        chunk.copy_from_slice(&h.to_le_bytes());
    }
    out
}

/// Runs `test` on `cases` inputs drawn from `strategy`; panics with the
/// smallest failing input (a panic inside `test` is a failure too).
pub fn run<S>(
    target: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    run_inner(target, cases, strategy, test, true);
}

/// [`run`], appending to the test log when `log`.
fn run_inner<S>(
    target: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
    log: bool,
) where
    S: Strategy,
    S::Value: Debug,
{
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed(target));
    let mut runner = TestRunner::new_with_rng(config, rng);
    let t0 = Instant::now();
    let result = runner.run(&strategy, test);
    let seconds = t0.elapsed().as_secs_f64();
    println!("fuzz {target}: {cases} cases in {seconds:.2} s (seed fixed by the target's name)");
    if log {
        append(&Entry::Fuzz {
            suite: suite(),
            target: target.to_string(),
            cases: u64::from(cases),
            seconds,
        });
    }
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, input)) => {
            panic!("fuzz {target}: {why}\nsmallest failing input: {input:#?}")
        }
        Err(TestError::Abort(why)) => panic!("fuzz {target}: aborted: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_seed_is_fixed_by_the_name() {
        assert_eq!(seed("a"), seed("a"));
        assert_ne!(seed("a"), seed("b"));
    }

    #[test]
    fn a_failing_case_is_shrunk_and_reported() {
        let r = std::panic::catch_unwind(|| {
            run_inner(
                "shrinks",
                500,
                0u32..1000,
                |x| {
                    prop_assert!(x < 500);
                    Ok(())
                },
                false,
            )
        });
        let msg = r.unwrap_err();
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("smallest failing input: 500"), "{msg}");
        // and a passing target runs every case
        let n = std::sync::atomic::AtomicU32::new(0);
        run_inner(
            "counts",
            300,
            any::<u8>(),
            |_| {
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            },
            false,
        );
        assert!(n.into_inner() >= 300);
    }
}
