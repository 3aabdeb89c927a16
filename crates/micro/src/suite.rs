//! One run of the whole benchmark: every section, in a fixed order.

use crate::cside;
use crate::error::{MicroError, panic_text};
use crate::fastpath::{self, FastPath};
use crate::interference::{self, StreamInterference};
use crate::overhead::{self, KernelOverhead};
use crate::pauses::{self, HostPauses};
use crate::setup::{BATCH_LANE, BenchPage, Lanes};
use crate::toggle::{self, BackendResult, ToggleParams};
use elfen_cmd::Progress;
use elfen_kernels::{Kernel, KernelKind, NoCheck};
use elfen_runtime::{BatchOptions, BatchThread, NapChoice};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Everything that sets how long and how precisely the benchmark runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// `--quick` was given.
    pub quick: bool,
    /// Step-aside / wake toggles.
    pub toggle: ToggleParams,
    /// A/B repetitions of the fast-path and overhead comparisons.
    pub reps: usize,
    /// Length of each overhead run, ms.
    pub run_ms: u64,
    /// Iterations of each fast-path loop.
    pub fast_path_iterations: u64,
    /// Repetitions of the stream-interference conditions, per size.
    pub stream_reps: usize,
    /// Length of each pointer chase, ms.
    pub stream_run_ms: u64,
    /// How long each lane is watched for host pauses, ms.
    pub pauses_ms: u64,
}

impl Params {
    /// The full benchmark.
    pub fn full() -> Params {
        Params {
            quick: false,
            toggle: ToggleParams::full(),
            reps: 21,
            run_ms: 50,
            fast_path_iterations: 200_000_000,
            stream_reps: 5,
            stream_run_ms: 250,
            pauses_ms: 2_000,
        }
    }

    /// `--quick`: every figure, short (for smoke tests; not for quoting).
    pub fn quick() -> Params {
        Params {
            quick: true,
            toggle: ToggleParams::quick(),
            reps: 3,
            run_ms: 10,
            fast_path_iterations: 2_000_000,
            stream_reps: 1,
            stream_run_ms: 20,
            pauses_ms: 100,
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Pauses of the two vCPUs, watched before the latency toggles.
    pub host_pauses: HostPauses,
    /// Step-aside and wake latency per nap backend.
    pub backends: Vec<BackendResult>,
    /// Fast-path cost per check.
    pub fast_path: FastPath,
    /// Instrumentation overhead per kernel and implementation.
    pub overhead: Vec<KernelOverhead>,
    /// Plain vs non-temporal Stream against a pointer chase.
    pub stream_interference: StreamInterference,
}

/// Runs every section once.
pub fn run_once(
    page: &BenchPage,
    lanes: &Lanes,
    params: &Params,
    progress: &Progress,
) -> Result<RunResult, MicroError> {
    progress.say("host pauses of both lanes");
    let host_pauses = pauses::measure(
        lanes,
        page.page().clock(),
        Duration::from_millis(params.pauses_ms),
        params.toggle.disturb_ns,
    )?;
    progress.say("step-aside and wake latency per nap backend");
    let backends = toggle::measure_all(page, lanes, &params.toggle, progress)?;
    progress.say("fast-path cost and instrumentation overhead (batch lane)");
    let (fast_path, overhead) = batch_side(page, params, progress)?;
    progress.say("stream interference (plain vs non-temporal stores)");
    let stream_interference = interference::measure(
        lanes,
        elfen_topo::SystemInfo::collect().l2_bytes,
        params.stream_reps,
        Duration::from_millis(params.stream_run_ms),
        progress,
    )?;
    Ok(RunResult {
        host_pauses,
        backends,
        fast_path,
        overhead,
        stream_interference,
    })
}

/// The fast-path and overhead sections, on a thread attached to the batch
/// lane (pinned there by attach) whose request lane stays idle.
fn batch_side(
    page: &BenchPage,
    params: &Params,
    progress: &Progress,
) -> Result<(FastPath, Vec<KernelOverhead>), MicroError> {
    let run = Duration::from_millis(params.run_ms);
    std::thread::scope(|s| {
        s.spawn(|| -> Result<(FastPath, Vec<KernelOverhead>), MicroError> {
            let opts = BatchOptions::default().nap(NapChoice::Spin);
            let mut overhead = Vec::new();
            let rust = {
                let mut bt = BatchThread::attach(page.page().clone(), BATCH_LANE, opts.clone())?;
                progress.say("fast path: Rust BatchThread::check");
                let rust = fastpath::rust_cost(&mut bt, params.fast_path_iterations, params.reps)?;
                for kind in KernelKind::ALL {
                    progress.say(&format!("overhead: Rust {kind}"));
                    let mut checked = Kernel::new(kind);
                    let mut unchecked = Kernel::new(kind);
                    overhead.push(overhead::compare(
                        kind,
                        "rust",
                        "BatchThread::check() at every unit",
                        params.reps,
                        run,
                        &mut |n| checked.run_units(n, &mut bt),
                        &mut |n| unchecked.run_units(n, &mut NoCheck),
                    )?);
                }
                rust
            };
            let (c, c_unavailable) =
                match cside::measure(page, opts, params, run, progress, &mut overhead) {
                    Ok(c) => (Some(c), None),
                    Err(MicroError::Interrupted) => return Err(MicroError::Interrupted),
                    Err(e) => (None, Some(e.to_string())),
                };
            Ok((
                FastPath {
                    rust,
                    c,
                    c_unavailable,
                },
                overhead,
            ))
        })
        .join()
        .map_err(|p| MicroError::Panicked(panic_text(p)))?
    })
}
