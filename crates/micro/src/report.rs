//! The result file (`elfen-micro/1` JSON); [`render`] prints the table from it.
//!
//! A file holds the parameters, the machine, every run's raw figures and a
//! summary: for latencies, the median over runs of each run's percentile
//! (with the spread over runs); for the A/B comparisons, with one run the
//! median and spread over its repetitions, with several runs the median and
//! spread of the run medians. `elfen micro --show FILE` re-prints the table
//! from a file without measuring.

use crate::error::MicroError;
use crate::setup::Lanes;
use crate::stats::{Percentiles, Stat};
use crate::suite::{Params, RunResult};
use crate::toggle::Latency;
use elfen_kernels::{KernelKind, StreamMode};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub use crate::render::render;

/// The schema tag of micro-benchmark result files.
pub const SCHEMA: &str = "elfen-micro/1";

/// The page clock used for every timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockInfo {
    /// `tsc` or `monotonic_ns`.
    pub kind: String,
    /// Ticks per second.
    pub ticks_per_sec: u64,
}

/// A whole result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicroReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// Start of the run, Unix seconds.
    pub created_unix_s: u64,
    /// The command line.
    pub command: String,
    /// How the benchmark ran.
    pub params: Params,
    /// `/proc/loadavg` (1, 5, 15 min) before measuring.
    pub load_before: [f64; 3],
    /// `/proc/loadavg` after measuring (includes this benchmark's own two
    /// busy threads).
    pub load_after: [f64; 3],
    /// Share of the machine's CPU time charged to *other* processes while
    /// the benchmark ran: `/proc/stat` user + nice + system time
    /// (`elfen_cmd::proc::MachineTicks::process_busy`; interrupt, softirq
    /// and steal time left out) minus this process's, over all CPU time. 0
    /// on a quiet machine; anything else competed with the measuring threads.
    pub others_busy_fraction: f64,
    /// The machine.
    pub system: elfen_topo::SystemInfo,
    /// The lanes measured.
    pub lanes: Lanes,
    /// The page clock.
    pub clock: ClockInfo,
    /// Hybrid nap spin bound on the page, ns.
    pub hybrid_spin_ns: u32,
    /// Every run, raw.
    pub runs: Vec<RunResult>,
    /// Medians and spread over the runs, and the targets.
    pub summary: Summary,
}

/// p50 / p99 / p99.9 over runs, ns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Median.
    pub p50_ns: Stat,
    /// 99th percentile.
    pub p99_ns: Stat,
    /// 99.9th percentile.
    pub p999_ns: Stat,
    /// Samples per run (median).
    pub samples: f64,
    /// Fraction of samples above 2 µs.
    pub over_2us_fraction: Stat,
}

/// A latency over all samples and undisturbed ones, over runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyPair {
    /// Every sample.
    pub all: LatencySummary,
    /// Samples without a detected host pause.
    pub undisturbed: Option<LatencySummary>,
    /// Fraction of samples marked disturbed.
    pub disturbed_fraction: Stat,
}

/// One backend over runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendSummary {
    /// Backend name.
    pub backend: String,
    /// Whether it ran.
    pub available: bool,
    /// Why unavailable, or why chosen.
    pub reason: String,
    /// Step-aside latency.
    pub step_aside: Option<LatencyPair>,
    /// Wake latency.
    pub wake: Option<LatencyPair>,
    /// Wake latency of toggles woken from the OS.
    pub wake_from_os: Option<LatencyPair>,
    /// Wake latency of toggles woken from a spin.
    pub wake_from_spin: Option<LatencyPair>,
    /// Fraction of toggles woken from the OS.
    pub os_wake_fraction: Option<Stat>,
}

/// One kernel's overhead over runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadSummary {
    /// The kernel.
    pub kernel: KernelKind,
    /// `c` (`-finstrument-functions`), `c-fentry` (`-pg -mfentry`) or `rust`.
    pub implementation: String,
    /// Checked, units/s.
    pub checked_units_per_s: Stat,
    /// Unchecked, units/s.
    pub unchecked_units_per_s: Stat,
    /// Overhead, percent.
    pub overhead_pct: Stat,
}

/// A target and whether it is met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// What is measured.
    pub figure: String,
    /// The target, in words.
    pub target: String,
    /// The limit, in `unit`.
    pub limit: f64,
    /// The unit of `limit` and the measured values.
    pub unit: String,
    /// Measured (median over runs) over all samples.
    pub measured: Option<f64>,
    /// Measured over undisturbed samples (latency targets only).
    pub measured_undisturbed: Option<f64>,
    /// `measured <= limit`.
    pub met: Option<bool>,
    /// `measured_undisturbed <= limit`.
    pub met_undisturbed: Option<bool>,
}

/// One chase size over runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChaseSizeSummary {
    /// Chase buffer, bytes.
    pub chase_bytes: usize,
    /// Next to Loop, ns per hop.
    pub baseline_ns_per_hop: Stat,
    /// Plain / baseline.
    pub plain_slowdown: Stat,
    /// Non-temporal / baseline.
    pub non_temporal_slowdown: Stat,
}

/// One lane's host pauses over runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseSummary {
    /// The CPU.
    pub cpu: u32,
    /// `request` or `batch`.
    pub lane: String,
    /// Pauses per second.
    pub pauses_per_s: Stat,
    /// Fraction of time paused.
    pub paused_fraction: Stat,
    /// Median pause, ns.
    pub pause_p50_ns: Stat,
    /// Longest pause, ns.
    pub pause_max_ns: Stat,
}

/// Medians and spread over runs, and the targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of runs.
    pub runs: usize,
    /// Host pauses per lane.
    pub host_pauses: Vec<PauseSummary>,
    /// Per backend.
    pub backends: Vec<BackendSummary>,
    /// Rust `BatchThread::check`, ns per check.
    pub fast_path_rust_ns_per_check: Stat,
    /// C `elfen_check()`, ns per check.
    pub fast_path_c_ns_per_check: Option<Stat>,
    /// Why the C figures are missing.
    pub c_unavailable: Option<String>,
    /// Per kernel and implementation.
    pub overhead: Vec<OverheadSummary>,
    /// Per chase size: baseline ns/hop and the slowdowns.
    pub stream_sizes: Vec<ChaseSizeSummary>,
    /// Largest plain slowdown over sizes (NaN in older files).
    #[serde(default = "nan_stat")]
    pub stream_plain_slowdown_max: Stat,
    /// Largest non-temporal slowdown over sizes.
    #[serde(default = "nan_stat")]
    pub stream_non_temporal_slowdown_max: Stat,
    /// Geometric mean over sizes of the plain slowdown.
    pub stream_plain_slowdown_geomean: Stat,
    /// Geometric mean over sizes of the non-temporal slowdown.
    pub stream_non_temporal_slowdown_geomean: Stat,
    /// The mode with the larger (median over runs) largest slowdown, if
    /// measurably larger (`interference::MEASURABLE`).
    pub stream_worse: Option<StreamMode>,
    /// The kernels crate's default.
    pub stream_default: StreamMode,
    /// The targets (docs/micro.md, "Targets").
    pub targets: Vec<Target>,
}

fn nan_stat() -> Stat {
    Stat {
        median: f64::NAN,
        min: f64::NAN,
        max: f64::NAN,
    }
}

fn spread(v: &[f64]) -> Stat {
    Stat::of(v).unwrap_or_else(nan_stat)
}

/// Stat over runs of a per-run spread: the run's own with one run, the
/// spread of run medians with several.
fn over_runs(v: &[Stat]) -> Stat {
    match v {
        [one] => *one,
        _ => spread(&v.iter().map(|s| s.median).collect::<Vec<_>>()),
    }
}

fn latency_summary(ps: &[Percentiles]) -> Option<LatencySummary> {
    if ps.is_empty() {
        return None;
    }
    let f = |g: fn(&Percentiles) -> f64| spread(&ps.iter().map(g).collect::<Vec<_>>());
    Some(LatencySummary {
        p50_ns: f(|p| p.p50_ns),
        p99_ns: f(|p| p.p99_ns),
        p999_ns: f(|p| p.p999_ns),
        samples: f(|p| p.count as f64).median,
        over_2us_fraction: f(|p| p.over_2us_fraction),
    })
}

fn latency_pair(ls: &[&Latency]) -> Option<LatencyPair> {
    let all: Vec<Percentiles> = ls.iter().filter_map(|l| l.all).collect();
    let und: Vec<Percentiles> = ls.iter().filter_map(|l| l.undisturbed).collect();
    Some(LatencyPair {
        all: latency_summary(&all)?,
        undisturbed: latency_summary(&und),
        disturbed_fraction: spread(&ls.iter().map(|l| l.disturbed_fraction).collect::<Vec<_>>()),
    })
}

/// Summarizes `runs` (at least one).
pub fn summarize(runs: &[RunResult]) -> Summary {
    let first = &runs[0];
    let backends = first
        .backends
        .iter()
        .enumerate()
        .map(|(i, b0)| {
            let per: Vec<_> = runs.iter().map(|r| &r.backends[i]).collect();
            let pick = |f: fn(&crate::toggle::BackendResult) -> Option<&Latency>| {
                latency_pair(&per.iter().filter_map(|b| f(b)).collect::<Vec<_>>())
            };
            let osf: Vec<f64> = per.iter().filter_map(|b| b.os_wake_fraction).collect();
            BackendSummary {
                backend: b0.backend.clone(),
                available: b0.available,
                reason: b0.reason.clone(),
                step_aside: pick(|b| b.step_aside.as_ref()),
                wake: pick(|b| b.wake.as_ref()),
                wake_from_os: pick(|b| b.wake_from_os.as_ref()),
                wake_from_spin: pick(|b| b.wake_from_spin.as_ref()),
                os_wake_fraction: (!osf.is_empty()).then(|| spread(&osf)),
            }
        })
        .collect::<Vec<_>>();
    let fast_rust = over_runs(
        &runs
            .iter()
            .map(|r| r.fast_path.rust.ns_per_check)
            .collect::<Vec<_>>(),
    );
    let c: Vec<Stat> = runs
        .iter()
        .filter_map(|r| r.fast_path.c.as_ref().map(|c| c.ns_per_check))
        .collect();
    let fast_c = (!c.is_empty()).then(|| over_runs(&c));
    let overhead = first
        .overhead
        .iter()
        .enumerate()
        .map(|(i, o0)| {
            let per: Vec<_> = runs.iter().map(|r| &r.overhead[i]).collect();
            let f = |g: fn(&crate::overhead::KernelOverhead) -> Stat| {
                over_runs(&per.iter().map(|o| g(o)).collect::<Vec<_>>())
            };
            OverheadSummary {
                kernel: o0.kernel,
                implementation: o0.implementation.clone(),
                checked_units_per_s: f(|o| o.checked_units_per_s),
                unchecked_units_per_s: f(|o| o.unchecked_units_per_s),
                overhead_pct: f(|o| o.overhead_pct),
            }
        })
        .collect::<Vec<_>>();
    let stream_sizes = first
        .stream_interference
        .sizes
        .iter()
        .enumerate()
        .map(|(i, z0)| {
            let per: Vec<_> = runs
                .iter()
                .map(|r| &r.stream_interference.sizes[i])
                .collect();
            let f = |g: fn(&crate::interference::ChaseSize) -> Stat| {
                over_runs(&per.iter().map(|z| g(z)).collect::<Vec<_>>())
            };
            ChaseSizeSummary {
                chase_bytes: z0.chase_bytes,
                baseline_ns_per_hop: f(|z| z.baseline_ns_per_hop),
                plain_slowdown: f(|z| z.plain_slowdown),
                non_temporal_slowdown: f(|z| z.non_temporal_slowdown),
            }
        })
        .collect();
    let gm = |g: fn(&crate::interference::StreamInterference) -> f64| {
        spread(
            &runs
                .iter()
                .map(|r| g(&r.stream_interference))
                .collect::<Vec<_>>(),
        )
    };
    let plain_max = gm(|s| s.plain_slowdown_max);
    let nt_max = gm(|s| s.non_temporal_slowdown_max);
    let host_pauses = first
        .host_pauses
        .lanes
        .iter()
        .enumerate()
        .map(|(i, l0)| {
            let per: Vec<_> = runs.iter().map(|r| &r.host_pauses.lanes[i]).collect();
            let f = |g: &dyn Fn(&crate::pauses::LanePauses) -> f64| {
                spread(&per.iter().map(|l| g(l)).collect::<Vec<_>>())
            };
            PauseSummary {
                cpu: l0.cpu,
                lane: l0.lane.clone(),
                pauses_per_s: f(&|l| l.pauses_per_s),
                paused_fraction: f(&|l| l.paused_fraction),
                pause_p50_ns: f(&|l| l.pause_ns.map_or(f64::NAN, |p| p.p50_ns)),
                pause_max_ns: f(&|l| l.pause_ns.map_or(f64::NAN, |p| p.max_ns)),
            }
        })
        .collect();
    let mut s = Summary {
        runs: runs.len(),
        host_pauses,
        backends,
        fast_path_rust_ns_per_check: fast_rust,
        fast_path_c_ns_per_check: fast_c,
        c_unavailable: runs.iter().find_map(|r| r.fast_path.c_unavailable.clone()),
        overhead,
        stream_sizes,
        stream_plain_slowdown_max: plain_max,
        stream_non_temporal_slowdown_max: nt_max,
        stream_plain_slowdown_geomean: gm(|s| s.plain_slowdown_geomean),
        stream_non_temporal_slowdown_geomean: gm(|s| s.non_temporal_slowdown_geomean),
        stream_worse: crate::interference::worse_of(plain_max.median, nt_max.median),
        stream_default: StreamMode::DEFAULT,
        targets: Vec::new(),
    };
    s.targets = targets(&s);
    s
}

fn targets(s: &Summary) -> Vec<Target> {
    let mut t = Vec::new();
    let mut plain = |figure: String, target: &str, limit: f64, unit: &str, m: Option<f64>| {
        t.push(Target {
            figure,
            target: target.to_string(),
            limit,
            unit: unit.to_string(),
            measured: m,
            measured_undisturbed: None,
            met: m.map(|m| m <= limit),
            met_undisturbed: None,
        })
    };
    plain(
        "fast path, Rust BatchThread::check()".into(),
        "<= 1 ns per check",
        1.0,
        "ns",
        Some(s.fast_path_rust_ns_per_check.median),
    );
    plain(
        "fast path, C elfen_check()".into(),
        "<= 1 ns per check",
        1.0,
        "ns",
        s.fast_path_c_ns_per_check.map(|x| x.median),
    );
    for imp in ["c", "c-fentry", "rust"] {
        for k in [KernelKind::Matrix, KernelKind::Flush] {
            let m = s
                .overhead
                .iter()
                .find(|o| o.kernel == k && o.implementation == imp)
                .map(|o| o.overhead_pct.median);
            plain(
                format!("instrumentation overhead, {imp} {k}"),
                "<= 2 %",
                2.0,
                "%",
                m,
            );
        }
    }
    let lat = |backend: &str, wake: bool| -> (Option<f64>, Option<f64>) {
        let b = s.backends.iter().find(|b| b.backend == backend);
        let p = b.and_then(|b| {
            if wake {
                b.wake.as_ref()
            } else {
                b.step_aside.as_ref()
            }
        });
        (
            p.map(|p| p.all.p99_ns.median / 1000.0),
            p.and_then(|p| p.undisturbed.as_ref().map(|u| u.p99_ns.median / 1000.0)),
        )
    };
    for (backend, wake, limit) in [
        ("spin", false, 2.0),
        ("hybrid", false, 2.0),
        ("spin", true, 2.0),
        ("futex", true, 100.0),
    ] {
        let (m, u) = lat(backend, wake);
        t.push(Target {
            figure: format!(
                "{} p99, {backend}",
                if wake { "wake" } else { "step-aside" }
            ),
            target: format!("<= {limit} µs"),
            limit,
            unit: "µs".into(),
            measured: m,
            measured_undisturbed: u,
            met: m.map(|m| m <= limit),
            met_undisturbed: u.map(|u| u <= limit),
        });
    }
    t
}

impl MicroReport {
    /// Writes the file atomically (temp file + rename), creating its
    /// directory.
    pub fn save(&self, path: &Path) -> Result<(), MicroError> {
        elfen_results::save_json(self, path).map_err(|source| MicroError::Io {
            what: format!("write {}", path.display()),
            source,
        })
    }

    /// Reads a file written by [`MicroReport::save`].
    pub fn load(path: &Path) -> Result<MicroReport, MicroError> {
        let text = std::fs::read_to_string(path).map_err(|source| MicroError::Io {
            what: format!("read {}", path.display()),
            source,
        })?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| MicroError::Setup(format!("{}: not JSON: {e}", path.display())))?;
        let found = v.get("schema").and_then(|s| s.as_str()).unwrap_or("");
        if found != SCHEMA {
            return Err(MicroError::Setup(format!(
                "{}: schema is {found:?}, this build reads {SCHEMA:?}",
                path.display()
            )));
        }
        serde_json::from_value(v).map_err(|e| MicroError::Setup(format!("{}: {e}", path.display())))
    }
}
