//! **Fast-path cost**: nanoseconds per check on the path every check takes
//! while nothing changes.
//!
//! On the batch lane's CPU, with a real attached batch thread whose request
//! lane stays idle (so every check is the fast path: one relaxed load of
//! the request lane's `state`, one compare, a not-taken branch):
//!
//! - **Rust**: a loop of `n` iterations of `BatchThread::check()` plus an
//!   empty `asm!` that only keeps the loop counter alive, minus the same loop
//!   without the check;
//! - **C**: the same two loops in C (`c/check_loop.c`), with `elfen.h`'s
//!   `static inline elfen_check()` on a thread attached through libelfen.
//!
//! Each repetition runs both loops back to back, alternating which goes
//! first; the figure is the per-repetition difference divided by `n`, as a
//! median with its spread. In a loop this tight the out-of-order core
//! overlaps the check's load and compare with the loop's own work, so the
//! figure is the *marginal* cost of a check, not its latency.

use crate::error::MicroError;
use crate::stats::Stat;
use elfen_cmd::interrupt::interrupted;
use elfen_runtime::BatchThread;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Keeps `i` alive without touching memory.
#[inline(always)]
fn keep(i: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: an empty asm that only names a register.
    unsafe {
        core::arch::asm!("/* {0} */", in(reg) i, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::hint::black_box(i);
}

#[inline(never)]
fn rust_with_check(bt: &mut BatchThread, n: u64) {
    for i in 0..n {
        bt.check();
        keep(i);
    }
}

#[inline(never)]
fn rust_without_check(n: u64) {
    for i in 0..n {
        keep(i);
    }
}

/// One implementation's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckCost {
    /// Iterations per loop.
    pub iterations: u64,
    /// The loop with the check, ns per iteration.
    pub with_check_ns_per_iter: Stat,
    /// The loop without, ns per iteration.
    pub without_check_ns_per_iter: Stat,
    /// Their per-repetition difference: ns per check.
    pub ns_per_check: Stat,
}

/// The figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FastPath {
    /// `BatchThread::check()` in Rust.
    pub rust: CheckCost,
    /// `elfen_check()` from `elfen.h` in C (`None` with the reason if the C
    /// API could not be used).
    pub c: Option<CheckCost>,
    /// Why `c` is missing.
    pub c_unavailable: Option<String>,
}

/// Times `f(n)` and returns ns per iteration.
fn per_iter(n: u64, f: &mut dyn FnMut(u64)) -> f64 {
    let t = Instant::now();
    f(n);
    t.elapsed().as_nanos() as f64 / n as f64
}

/// Interleaves `with` and `without` for `reps` repetitions.
pub(crate) fn compare(
    n: u64,
    reps: usize,
    with: &mut dyn FnMut(u64),
    without: &mut dyn FnMut(u64),
) -> Result<CheckCost, MicroError> {
    // Warm up both (and take the check's first slow path).
    with(n / 10 + 1);
    without(n / 10 + 1);
    let (mut a, mut b, mut d) = (vec![], vec![], vec![]);
    for rep in 0..reps {
        if interrupted() {
            return Err(MicroError::Interrupted);
        }
        let (x, y) = if rep % 2 == 0 {
            let x = per_iter(n, with);
            (x, per_iter(n, without))
        } else {
            let y = per_iter(n, without);
            (per_iter(n, with), y)
        };
        a.push(x);
        b.push(y);
        d.push(x - y);
    }
    let s = |v: &[f64]| Stat::of(v).expect("reps >= 1");
    Ok(CheckCost {
        iterations: n,
        with_check_ns_per_iter: s(&a),
        without_check_ns_per_iter: s(&b),
        ns_per_check: s(&d),
    })
}

/// The Rust figure, on the calling thread (attached as `bt`, request lane
/// idle).
pub fn rust_cost(bt: &mut BatchThread, n: u64, reps: usize) -> Result<CheckCost, MicroError> {
    compare(n, reps, &mut |k| rust_with_check(bt, k), &mut |k| {
        rust_without_check(k)
    })
}
