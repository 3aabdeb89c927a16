//! **Instrumentation overhead**: each kernel with its checks against the
//! same kernel without, as work units per second.
//!
//! On the batch lane's CPU, with a real attached batch thread whose request
//! lane stays idle (every check is the fast path):
//!
//! - **C**: `c/kernels.c` built with `-finstrument-functions` (each unit's
//!   entry calls `__cyg_profile_func_enter`, i.e. `elfen_check()`, and its
//!   exit `__cyg_profile_func_exit`) against the same file built without;
//!   and on x86-64 built with `-pg -mfentry` (each unit's first instruction
//!   calls `__fentry__`, the same check in assembly) against the same;
//! - **Rust**: `Kernel::run_units` with the `BatchThread` as its check
//!   against `NoCheck`.
//!
//! Each repetition runs the checked and the unchecked kernel for `run_ms`
//! each, back to back, alternating which goes first. The overhead of a
//! repetition is `unchecked units/s ÷ checked units/s − 1` (extra time per
//! unit); the figure is its median over repetitions, with the spread.

use crate::error::MicroError;
use crate::stats::Stat;
use elfen_cmd::interrupt::interrupted;
use elfen_kernels::KernelKind;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// One kernel, one implementation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelOverhead {
    /// The kernel.
    pub kernel: KernelKind,
    /// `c` (`-finstrument-functions`), `c-fentry` (`-pg -mfentry`) or `rust`.
    pub implementation: String,
    /// What the checked variant checks with.
    pub checked_with: String,
    /// Checked variant, work units per second.
    pub checked_units_per_s: Stat,
    /// Unchecked variant, work units per second.
    pub unchecked_units_per_s: Stat,
    /// Per-repetition overhead, percent.
    pub overhead_pct: Stat,
}

/// Units per call of the run closure: enough that reading the clock between
/// calls costs nothing measurable, few enough to stop on time.
pub fn chunk_units(kind: KernelKind) -> u64 {
    match kind {
        KernelKind::Loop => 1 << 16,
        KernelKind::Matrix => 1 << 12,
        KernelKind::Flush => 1 << 6,
        KernelKind::Stream => 1 << 6,
    }
}

/// Runs `f(chunk)` until `run` has passed; returns units per second.
fn rate(run: Duration, chunk: u64, f: &mut dyn FnMut(u64)) -> f64 {
    let t = Instant::now();
    let mut units = 0u64;
    loop {
        f(chunk);
        units += chunk;
        if t.elapsed() >= run {
            break;
        }
    }
    units as f64 / t.elapsed().as_secs_f64()
}

/// Interleaves the checked and unchecked runs of one kernel.
pub fn compare(
    kind: KernelKind,
    implementation: &str,
    checked_with: &str,
    reps: usize,
    run: Duration,
    checked: &mut dyn FnMut(u64),
    unchecked: &mut dyn FnMut(u64),
) -> Result<KernelOverhead, MicroError> {
    let chunk = chunk_units(kind);
    // Warm-up: caches, branch predictors, the check's first slow path.
    rate(run / 4, chunk, checked);
    rate(run / 4, chunk, unchecked);
    let (mut c, mut u, mut o) = (vec![], vec![], vec![]);
    for rep in 0..reps {
        if interrupted() {
            return Err(MicroError::Interrupted);
        }
        let (rc, ru) = if rep % 2 == 0 {
            let rc = rate(run, chunk, checked);
            (rc, rate(run, chunk, unchecked))
        } else {
            let ru = rate(run, chunk, unchecked);
            (rate(run, chunk, checked), ru)
        };
        c.push(rc);
        u.push(ru);
        o.push((ru / rc - 1.0) * 100.0);
    }
    let s = |v: &[f64]| Stat::of(v).expect("reps >= 1");
    Ok(KernelOverhead {
        kernel: kind,
        implementation: implementation.to_string(),
        checked_with: checked_with.to_string(),
        checked_units_per_s: s(&c),
        unchecked_units_per_s: s(&u),
        overhead_pct: s(&o),
    })
}
