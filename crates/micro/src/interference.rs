//! **Stream interference**: how much each Stream store mode slows a pointer
//! chase running on the other lane — the measurement behind the Stream
//! kernel's default mode.
//!
//! A *pointer chase* walks a random single-cycle permutation of 64-byte
//! nodes, one dependent load per hop, on the request lane's CPU, and reports
//! ns per hop. Its buffer is backed by transparent huge pages where the OS
//! allows (`MADV_HUGEPAGE`), so the figure is about caches, not page walks.
//! It runs at several working-set sizes — 1.5, 2, 3 and 4 times the lane's
//! L2 (3, 4, 6 and 8 MB on the development VMs): past the L2, so every hop
//! that misses it goes to the shared L3 or to memory. Three co-runners take
//! turns on the batch lane's CPU (Rust kernels, no checks): the **baseline**
//! is the Loop kernel — compute only, it touches no memory, but it occupies
//! the batch lane as the others do, so other processes of a shared machine
//! do not fill the caches from there during the baseline alone — then Stream
//! storing plainly, then Stream storing non-temporally. The three conditions
//! are interleaved (rotating order) for `reps` repetitions per size; the
//! slowdown of a repetition is its Stream ns/hop over its baseline ns/hop.
//! A co-runner hurts an LC as much as it hurts the working set it hurts
//! most, so the verdict compares, per mode, the **largest** median slowdown
//! over the sizes: the mode whose largest slowdown is larger by at least
//! [`MEASURABLE`] is the **worse** one; below that the figure says neither is
//! measurably worse. (The geometric mean over the sizes is reported too; it
//! dilutes the effect with sizes neither mode can touch, and on the
//! development VMs its sign flipped between quiet invocations.)

use crate::error::{MicroError, panic_text};
use crate::setup::Lanes;
use crate::stats::{Rng, Stat};
use elfen_cmd::Progress;
use elfen_cmd::interrupt::interrupted;
use elfen_kernels::{Kernel, KernelConfig, KernelKind, NoCheck, StreamMode};
use elfen_topo::PinGuard;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The L2 size assumed where sysfs does not say (the development VMs').
pub const DEFAULT_L2_BYTES: usize = 2 << 20;
/// Working-set sizes, in quarters of the L2: 1.5×, 2×, 3×, 4×.
const SIZES_QUARTER_L2: [usize; 4] = [6, 8, 12, 16];
const HUGE: usize = 2 << 20;
const NODE: usize = 64;

/// A chase buffer: an anonymous mapping aligned to 2 MB, with huge pages
/// asked for, holding a random single-cycle permutation (Sattolo's
/// algorithm: the walk visits every node before repeating, and no
/// prefetcher can guess the next one).
struct Chase {
    map: *mut libc::c_void,
    map_len: usize,
    nodes: *const usize,
    n: usize,
}

impl Chase {
    fn new(bytes: usize, seed: u64) -> Result<Chase, MicroError> {
        let n = bytes / NODE;
        let map_len = bytes + HUGE;
        // SAFETY: an anonymous private mapping; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(MicroError::Io {
                what: format!("map a {bytes}-byte pointer-chase buffer"),
                source: std::io::Error::last_os_error(),
            });
        }
        let base = (map as usize + HUGE - 1) & !(HUGE - 1);
        // SAFETY: advice on a range inside our mapping; failure only means
        // small pages.
        unsafe { libc::madvise(base as *mut _, bytes, libc::MADV_HUGEPAGE) };
        let nodes = base as *mut usize;
        let mut order: Vec<usize> = (0..n).collect();
        let mut rng = Rng::new(seed);
        for i in (1..n).rev() {
            let j = (rng.next_u64() % i as u64) as usize;
            order.swap(i, j);
        }
        for i in 0..n {
            // SAFETY: node order[i] lies inside the mapping (n nodes of 64
            // bytes from `base`, which leaves `bytes` before the end).
            unsafe { *nodes.add(order[i] * (NODE / 8)) = order[(i + 1) % n] };
        }
        Ok(Chase {
            map,
            map_len,
            nodes,
            n,
        })
    }

    /// Chases for `dur`; returns ns per hop.
    fn run(&self, dur: Duration) -> f64 {
        let mut p = 0usize;
        let mut hops = 0u64;
        let t0 = Instant::now();
        loop {
            for _ in 0..4096 {
                // SAFETY: every stored index is < n, so every node read is
                // inside the buffer.
                p = unsafe { *self.nodes.add(p * (NODE / 8)) };
            }
            hops += 4096;
            if t0.elapsed() >= dur {
                break;
            }
        }
        std::hint::black_box(p);
        debug_assert!(p < self.n);
        t0.elapsed().as_nanos() as f64 / hops as f64
    }
}

impl Drop for Chase {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// One working-set size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChaseSize {
    /// Size of the chase's buffer, bytes.
    pub chase_bytes: usize,
    /// The chase next to the Loop kernel (compute only), ns per hop.
    pub baseline_ns_per_hop: Stat,
    /// Next to Stream with plain stores, ns per hop.
    pub plain_ns_per_hop: Stat,
    /// Next to Stream with non-temporal stores, ns per hop.
    pub non_temporal_ns_per_hop: Stat,
    /// Plain / baseline, per repetition.
    pub plain_slowdown: Stat,
    /// Non-temporal / baseline, per repetition.
    pub non_temporal_slowdown: Stat,
}

/// The figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamInterference {
    /// Size of the stream's buffer, bytes.
    pub stream_bytes: usize,
    /// The L2 the sizes are relative to, bytes.
    pub l2_bytes: usize,
    /// Length of each measured chase, ms.
    pub run_ms: u64,
    /// Per working-set size.
    pub sizes: Vec<ChaseSize>,
    /// Largest median plain slowdown over the sizes (0 in files written
    /// before this figure existed).
    #[serde(default)]
    pub plain_slowdown_max: f64,
    /// Largest median non-temporal slowdown over the sizes.
    #[serde(default)]
    pub non_temporal_slowdown_max: f64,
    /// Geometric mean over the sizes of the median plain slowdowns.
    pub plain_slowdown_geomean: f64,
    /// Geometric mean over the sizes of the median non-temporal slowdowns.
    pub non_temporal_slowdown_geomean: f64,
    /// Stream units (4 KB chunks) per second while co-running, plain.
    pub plain_stream_units_per_s: Stat,
    /// Stream units per second while co-running, non-temporal.
    pub non_temporal_stream_units_per_s: Stat,
    /// The mode with the larger largest slowdown, if it is larger by at
    /// least [`MEASURABLE`].
    pub worse: Option<StreamMode>,
    /// The kernels crate's default ([`StreamMode::DEFAULT`]).
    pub kernels_default: StreamMode,
}

fn stat(v: &[f64]) -> Stat {
    Stat::of(v).expect("at least one repetition")
}

/// The smallest relative difference between the two modes' geometric-mean
/// slowdowns that names one of them worse (5 %).
pub const MEASURABLE: f64 = 0.05;

/// The worse mode given each mode's slowdown figure, `None` when they
/// differ by less than [`MEASURABLE`].
pub fn worse_of(plain: f64, non_temporal: f64) -> Option<StreamMode> {
    if plain >= non_temporal * (1.0 + MEASURABLE) {
        Some(StreamMode::Plain)
    } else if non_temporal >= plain * (1.0 + MEASURABLE) {
        Some(StreamMode::NonTemporal)
    } else {
        None
    }
}

/// Geometric mean.
pub fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len().max(1) as f64).exp()
}

/// Runs the measurement: per size, `reps` repetitions of baseline / plain /
/// non-temporal.
pub fn measure(
    lanes: &Lanes,
    l2_bytes: Option<u64>,
    reps: usize,
    run: Duration,
    progress: &Progress,
) -> Result<StreamInterference, MicroError> {
    let l2 = l2_bytes
        .map(|b| b as usize)
        .filter(|&b| b >= 64 << 10)
        .unwrap_or(DEFAULT_L2_BYTES);
    let _pin = PinGuard::new(lanes.request_cpu)?;
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
    let (mut plain_units, mut nt_units) = (vec![], vec![]);
    let mut sizes = Vec::new();
    for q in SIZES_QUARTER_L2 {
        let bytes = (l2 / 4 * q) / NODE * NODE;
        let chase = Chase::new(bytes, 0x5EED ^ bytes as u64)?;
        chase.run(Duration::from_millis(20)); // warm caches and TLB
        let (mut base, mut plain, mut nt) = (vec![], vec![], vec![]);
        for rep in 0..reps {
            progress.say(&format!(
                "stream interference: {:.1} MB chase, repetition {}/{reps}",
                bytes as f64 / (1 << 20) as f64,
                rep + 1
            ));
            let mut order = [None, Some(StreamMode::Plain), Some(StreamMode::NonTemporal)];
            order.rotate_left(rep % 3);
            for cond in order {
                if interrupted() {
                    return Err(MicroError::Interrupted);
                }
                match cond {
                    None => base.push(corun(lanes, &chase, &mut baseline_kernel, run)?.0),
                    Some(StreamMode::Plain) => {
                        let (ns, ups) = corun(lanes, &chase, &mut plain_kernel, run)?;
                        plain.push(ns);
                        plain_units.push(ups);
                    }
                    Some(StreamMode::NonTemporal) => {
                        let (ns, ups) = corun(lanes, &chase, &mut nt_kernel, run)?;
                        nt.push(ns);
                        nt_units.push(ups);
                    }
                }
            }
        }
        let ratio = |co: &[f64]| -> Vec<f64> { co.iter().zip(&base).map(|(c, b)| c / b).collect() };
        sizes.push(ChaseSize {
            chase_bytes: bytes,
            baseline_ns_per_hop: stat(&base),
            plain_ns_per_hop: stat(&plain),
            non_temporal_ns_per_hop: stat(&nt),
            plain_slowdown: stat(&ratio(&plain)),
            non_temporal_slowdown: stat(&ratio(&nt)),
        });
    }
    let p: Vec<f64> = sizes.iter().map(|s| s.plain_slowdown.median).collect();
    let n: Vec<f64> = sizes
        .iter()
        .map(|s| s.non_temporal_slowdown.median)
        .collect();
    let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (mp, mn) = (max(&p), max(&n));
    Ok(StreamInterference {
        stream_bytes,
        l2_bytes: l2,
        run_ms: run.as_millis() as u64,
        sizes,
        plain_slowdown_max: mp,
        non_temporal_slowdown_max: mn,
        plain_slowdown_geomean: geomean(&p),
        non_temporal_slowdown_geomean: geomean(&n),
        plain_stream_units_per_s: stat(&plain_units),
        non_temporal_stream_units_per_s: stat(&nt_units),
        worse: worse_of(mp, mn),
        kernels_default: StreamMode::DEFAULT,
    })
}

/// The chase with `co` running on the batch lane: (ns/hop, `co`'s units/s).
fn corun(
    lanes: &Lanes,
    chase: &Chase,
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
        // Let the co-runner reach its steady state before measuring.
        std::thread::sleep(Duration::from_millis(10));
        let u0 = units.load(Relaxed);
        let t0 = Instant::now();
        let ns = chase.run(run);
        let ups = (units.load(Relaxed) - u0) as f64 / t0.elapsed().as_secs_f64();
        stop.store(true, Relaxed);
        h.join()
            .map_err(|p| MicroError::Panicked(panic_text(p)))??;
        Ok((ns, ups))
    })
}
