//! **Stream interference**: how much each Stream store mode slows an
//! L3-resident pointer chase running on the other lane — the measurement
//! behind the Stream kernel's default mode.
//!
//! A *pointer chase* walks a random cyclic permutation of 64-byte nodes in
//! an 8 MB buffer (4× a vCPU's L2 on the development machines, well inside
//! the L3), one dependent load per hop, on the request lane's CPU; it reports
//! ns per hop. Three co-runners take turns on the batch lane's CPU (Rust
//! kernels, no checks): the **baseline** is the Loop kernel — compute only,
//! it touches no memory, but it occupies the batch lane as the others do, so
//! other processes of a shared machine do not fill the L3 from there in the
//! baseline alone — then Stream storing plainly, then Stream storing
//! non-temporally. The three conditions are interleaved (rotating order) for
//! `reps` repetitions; the slowdown of a repetition is its Stream ns/hop over
//! its baseline ns/hop.

use crate::error::{MicroError, panic_text};
use crate::interrupt::interrupted;
use crate::progress::Progress;
use crate::setup::Lanes;
use crate::stats::{Rng, Stat};
use elfen_kernels::{Kernel, KernelConfig, KernelKind, NoCheck, StreamMode};
use elfen_topo::PinGuard;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Bytes of the pointer chase's buffer.
pub const CHASE_BYTES: usize = 8 << 20;

/// One node of the chase: the index of the next node, padded to a line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Node {
    next: usize,
    _pad: [usize; 7],
}

/// A random single-cycle permutation of `n` nodes (Sattolo's algorithm), so
/// the walk visits every node before repeating and no prefetcher can guess.
fn chase_buffer(n: usize, seed: u64) -> Vec<Node> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        let j = (rng.next_u64() % i as u64) as usize;
        order.swap(i, j);
    }
    let mut nodes = vec![
        Node {
            next: 0,
            _pad: [0; 7]
        };
        n
    ];
    for i in 0..n {
        nodes[order[i]].next = order[(i + 1) % n];
    }
    nodes
}

/// Chases for `dur`; returns ns per hop.
fn chase(nodes: &[Node], dur: Duration) -> f64 {
    let mut p = 0usize;
    let mut hops = 0u64;
    let t0 = Instant::now();
    loop {
        for _ in 0..4096 {
            p = nodes[p].next;
        }
        hops += 4096;
        if t0.elapsed() >= dur {
            break;
        }
    }
    std::hint::black_box(p);
    t0.elapsed().as_nanos() as f64 / hops as f64
}

/// The figure: per condition, ns per hop and the slowdown against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamInterference {
    /// Size of the chase's buffer, bytes.
    pub chase_bytes: usize,
    /// Size of the stream's buffer, bytes.
    pub stream_bytes: usize,
    /// Length of each measured chase, ms.
    pub run_ms: u64,
    /// The chase next to the Loop kernel (compute only), ns per hop.
    pub baseline_ns_per_hop: Stat,
    /// With plain stores on the other lane, ns per hop.
    pub plain_ns_per_hop: Stat,
    /// With non-temporal stores on the other lane, ns per hop.
    pub non_temporal_ns_per_hop: Stat,
    /// Plain co-run / baseline, per repetition.
    pub plain_slowdown: Stat,
    /// Non-temporal co-run / baseline, per repetition.
    pub non_temporal_slowdown: Stat,
    /// Stream units (4 KB chunks) per second while co-running, plain.
    pub plain_stream_units_per_s: Stat,
    /// Stream units per second while co-running, non-temporal.
    pub non_temporal_stream_units_per_s: Stat,
    /// The mode with the larger median slowdown.
    pub worse: StreamMode,
    /// The kernels crate's default ([`StreamMode::DEFAULT`]).
    pub kernels_default: StreamMode,
}

/// Runs the measurement: `reps` repetitions of baseline / plain / non-temporal.
pub fn measure(
    lanes: &Lanes,
    reps: usize,
    run: Duration,
    progress: &Progress,
) -> Result<StreamInterference, MicroError> {
    let _pin = PinGuard::new(lanes.request_cpu)?;
    let nodes = chase_buffer(CHASE_BYTES / 64, 0x5EED);
    // Warm the chase's buffer into the caches and the TLB.
    chase(&nodes, Duration::from_millis(20));
    let stream_bytes = elfen_kernels::STREAM_BYTES;
    let stream = |m: StreamMode| {
        let cfg = KernelConfig {
            stream_mode: m,
            stream_bytes,
        };
        Kernel::with_config(KernelKind::Stream, cfg)
    };
    let mut baseline_kernel = Kernel::new(KernelKind::Loop);
    let mut plain_kernel = stream(StreamMode::Plain)?;
    let mut nt_kernel = stream(StreamMode::NonTemporal)?;
    let (mut base, mut plain, mut nt) = (vec![], vec![], vec![]);
    let (mut plain_units, mut nt_units) = (vec![], vec![]);
    for rep in 0..reps {
        progress.say(&format!(
            "stream interference: repetition {}/{reps}",
            rep + 1
        ));
        let mut order = [None, Some(StreamMode::Plain), Some(StreamMode::NonTemporal)];
        order.rotate_left(rep % 3);
        for cond in order {
            if interrupted() {
                return Err(MicroError::Interrupted);
            }
            match cond {
                None => base.push(corun(lanes, &nodes, &mut baseline_kernel, run)?.0),
                Some(StreamMode::Plain) => {
                    let (ns, ups) = corun(lanes, &nodes, &mut plain_kernel, run)?;
                    plain.push(ns);
                    plain_units.push(ups);
                }
                Some(StreamMode::NonTemporal) => {
                    let (ns, ups) = corun(lanes, &nodes, &mut nt_kernel, run)?;
                    nt.push(ns);
                    nt_units.push(ups);
                }
            }
        }
    }
    let ratio = |co: &[f64]| -> Vec<f64> { co.iter().zip(&base).map(|(c, a)| c / a).collect() };
    let s = |v: &[f64]| Stat::of(v).expect("reps >= 1");
    let plain_slowdown = s(&ratio(&plain));
    let non_temporal_slowdown = s(&ratio(&nt));
    Ok(StreamInterference {
        chase_bytes: CHASE_BYTES,
        stream_bytes,
        run_ms: run.as_millis() as u64,
        baseline_ns_per_hop: s(&base),
        plain_ns_per_hop: s(&plain),
        non_temporal_ns_per_hop: s(&nt),
        worse: if plain_slowdown.median >= non_temporal_slowdown.median {
            StreamMode::Plain
        } else {
            StreamMode::NonTemporal
        },
        plain_slowdown,
        non_temporal_slowdown,
        plain_stream_units_per_s: s(&plain_units),
        non_temporal_stream_units_per_s: s(&nt_units),
        kernels_default: StreamMode::DEFAULT,
    })
}

/// The chase with `co` running on the batch lane: (ns/hop, `co`'s units/s).
fn corun(
    lanes: &Lanes,
    nodes: &[Node],
    co: &mut Kernel,
    run: Duration,
) -> Result<(f64, f64), MicroError> {
    let stop = AtomicBool::new(false);
    let units = AtomicU64::new(0);
    let started = AtomicBool::new(false);
    let batch_cpu = lanes.batch_cpu;
    std::thread::scope(|s| {
        let h = s.spawn(|| -> Result<(), MicroError> {
            let _pin = PinGuard::new(batch_cpu)?;
            started.store(true, Relaxed);
            co.run_until(&mut NoCheck, &stop, &units, 64);
            Ok(())
        });
        while !started.load(Relaxed) && !h.is_finished() {
            std::thread::yield_now();
        }
        // Let the stream reach its steady state before measuring.
        std::thread::sleep(Duration::from_millis(10));
        let u0 = units.load(Relaxed);
        let t0 = Instant::now();
        let ns = chase(nodes, run);
        let ups = (units.load(Relaxed) - u0) as f64 / t0.elapsed().as_secs_f64();
        stop.store(true, Relaxed);
        h.join()
            .map_err(|p| MicroError::Panicked(panic_text(p)))??;
        Ok((ns, ups))
    })
}
