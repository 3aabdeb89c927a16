//! The C side of the fast-path and overhead sections: `elfen.h`'s
//! `elfen_check()` (`c/check_loop.c`) and the C kernels built with
//! `-finstrument-functions`, with `-pg -mfentry` and without, on the calling
//! thread attached through libelfen (`crates/capi`).

use crate::ckernel::{CBuild, CKernel};
use crate::error::MicroError;
use crate::fastpath::{self, CheckCost};
use crate::overhead::{self, KernelOverhead};
use crate::setup::{BATCH_LANE, BenchPage};
use crate::suite::Params;
use elfen_cmd::Progress;
use elfen_kernels::KernelKind;
use elfen_runtime::BatchOptions;
use std::time::Duration;

unsafe extern "C" {
    fn elfen_micro_loop_check(n: u64);
    fn elfen_micro_loop_empty(n: u64);
}

/// Detaches the calling thread from libelfen when dropped.
struct Attached;

impl Attached {
    fn new(page: &BenchPage, opts: BatchOptions) -> Result<Attached, MicroError> {
        elfen::batch::attach_current_thread(page.page().clone(), BATCH_LANE, opts)
            .map_err(|e| MicroError::CApi(e.to_string()))?;
        Ok(Attached)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        elfen::batch::detach_current_thread();
    }
}

/// Measures `elfen_check()`'s cost and pushes the C kernels' overheads.
pub fn measure(
    page: &BenchPage,
    opts: BatchOptions,
    params: &Params,
    run: Duration,
    progress: &Progress,
    overheads: &mut Vec<KernelOverhead>,
) -> Result<CheckCost, MicroError> {
    let _attached = Attached::new(page, opts)?;
    progress.say("fast path: C elfen_check()");
    let cost = fastpath::compare(
        params.fast_path_iterations,
        params.reps,
        // SAFETY: plain loops; elfen_check() reads this thread's libelfen
        // state, which attach armed.
        &mut |n| unsafe { elfen_micro_loop_check(n) },
        &mut |n| unsafe { elfen_micro_loop_empty(n) },
    )?;
    let checked = [
        (
            CBuild::Instrumented,
            "c",
            "-finstrument-functions: libelfen's __cyg_profile_func_enter runs elfen_check() at \
             every unit's entry (and the empty __cyg_profile_func_exit at its exit)",
        ),
        (
            CBuild::Fentry,
            "c-fentry",
            "-pg -mfentry: libelfen's __fentry__ runs the same check as every unit's first \
             instruction, before its prologue (no arguments, no exit hook)",
        ),
    ];
    for (build, implementation, checked_with) in checked {
        if !build.available() {
            progress.say(&format!(
                "overhead: C {} build skipped (x86-64 only)",
                build.name()
            ));
            continue;
        }
        for kind in KernelKind::ALL {
            progress.say(&format!("overhead: C {} {kind}", build.name()));
            let mut checked = CKernel::new(kind, build);
            let mut plain = CKernel::new(kind, CBuild::Plain);
            overheads.push(overhead::compare(
                kind,
                implementation,
                checked_with,
                params.reps,
                run,
                &mut |n| checked.run_units(n),
                &mut |n| plain.run_units(n),
            )?);
        }
    }
    Ok(cost)
}
