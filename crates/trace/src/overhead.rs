//! What tracing costs: the same open-loop load against a running service
//! without and with `elfen trace` recording it, alternating in one run,
//! several repetitions; LC p50/p99/max side by side (medians and spread
//! over repetitions, the paired p99 ratio traced / untraced), and the
//! trace's volume per second (kernel records, bytes of the raw record).

use crate::error::TraceError;
use crate::lcline::LcLineTap;
use crate::load::{LoadPlan, drive};
use crate::record::EndReason;
use crate::recorder::{Options, Recorder};
use crate::target::Target;
use elfen_results::Stat;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Schema tag of [`OverheadReport`].
pub const OVERHEAD_SCHEMA: &str = "elfen-trace-overhead/1";

/// One invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverheadRun {
    /// Repetition.
    pub rep: usize,
    /// Whether `elfen trace` recorded it.
    pub traced: bool,
    /// Requests answered.
    pub requests: u64,
    /// Requests unanswered or failed.
    pub errors: u64,
    /// Latency from the intended send, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Largest, µs.
    pub max_us: f64,
    /// Traced: kernel records kept, and lost.
    pub records: u64,
    /// Records lost (ring buffer full).
    pub lost: u64,
    /// Traced: bytes of the raw record as JSON.
    pub record_bytes: u64,
    /// Traced: length of the recording, s.
    pub trace_s: f64,
}

/// Medians and spread over repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverheadSummary {
    /// Untraced p50, µs.
    pub off_p50_us: Stat,
    /// Untraced p99, µs.
    pub off_p99_us: Stat,
    /// Untraced max, µs.
    pub off_max_us: Stat,
    /// Traced p50, µs.
    pub on_p50_us: Stat,
    /// Traced p99, µs.
    pub on_p99_us: Stat,
    /// Traced max, µs.
    pub on_max_us: Stat,
    /// Per repetition, traced p99 / untraced p99.
    pub p99_ratio: Stat,
    /// Kernel records per second of trace.
    pub records_per_s: Stat,
    /// Bytes of raw record per second of trace.
    pub bytes_per_s: Stat,
}

/// The parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverheadParams {
    /// The service's address.
    pub addr: String,
    /// Load, requests per second.
    pub rps: f64,
    /// Each invocation's length, s.
    pub duration_s: f64,
    /// Repetitions (each one untraced and one traced invocation).
    pub reps: usize,
    /// The request set.
    pub requests: String,
    /// The page the spans come from, if any.
    pub page: Option<String>,
}

/// The JSON `elfen trace overhead` writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverheadReport {
    /// [`OVERHEAD_SCHEMA`].
    pub schema: String,
    /// Seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// The command line.
    pub command: String,
    /// The machine.
    pub system: elfen_topo::SystemInfo,
    /// The target.
    pub target: String,
    /// What was run.
    pub params: OverheadParams,
    /// Load average before.
    pub load_before: [f64; 3],
    /// Raw record: every invocation.
    pub runs: Vec<OverheadRun>,
    /// Derived.
    pub summary: OverheadSummary,
}

/// How to run the benchmark.
#[derive(Debug, Clone)]
pub struct Bench {
    /// The target.
    pub target: Target,
    /// The page and lane to take spans from (the poller is part of the cost).
    pub page: Option<(PathBuf, Option<u32>)>,
    /// Recording options.
    pub options: Options,
    /// The load (its `id_base` is set per invocation).
    pub load: LoadPlan,
    /// The service.
    pub addr: SocketAddr,
    /// Repetitions.
    pub reps: usize,
    /// The command line.
    pub command: String,
    /// The request set's description.
    pub requests: String,
}

fn run_one(
    b: &Bench,
    rep: usize,
    traced: bool,
    stop: &AtomicBool,
) -> Result<OverheadRun, TraceError> {
    let plan = LoadPlan {
        id_base: (rep as u64 * 2 + u64::from(traced)) << 32,
        ..b.load.clone()
    };
    let rec = if traced {
        let tap = match &b.page {
            Some((p, lane)) => Some(LcLineTap::open(p, *lane, &b.target.tgids)?),
            None => None,
        };
        Some(Recorder::start(b.target.clone(), tap, &b.options, None)?)
    } else {
        None
    };
    let res = drive(b.addr, &plan, stop)?;
    let q = |x: f64| res.hist.value_at_quantile(x) as f64 / 1e3;
    let mut run = OverheadRun {
        rep,
        traced,
        requests: res.spans.len() as u64 - res.errors,
        errors: res.errors,
        p50_us: q(0.5),
        p99_us: q(0.99),
        max_us: res.hist.max() as f64 / 1e3,
        records: 0,
        lost: 0,
        record_bytes: 0,
        trace_s: 0.0,
    };
    if let Some(r) = rec {
        let record = r.finish(EndReason::Duration, b.command.clone())?;
        run.records = record.events.len() as u64;
        run.lost = record.counts.lost;
        run.record_bytes = serde_json::to_vec(&record).map_or(0, |v| v.len() as u64);
        run.trace_s = record.duration_ns() as f64 / 1e9;
    }
    Ok(run)
}

/// Runs the benchmark: per repetition an untraced and a traced
/// invocation, in alternating order; `progress` is told each run.
pub fn run(
    b: &Bench,
    stop: &AtomicBool,
    mut progress: impl FnMut(&OverheadRun),
) -> Result<OverheadReport, TraceError> {
    if b.reps == 0 {
        return Err(TraceError::Usage("--reps must be at least 1".into()));
    }
    let load_before = elfen_cmd::proc::loadavg();
    let mut runs = Vec::new();
    for rep in 0..b.reps {
        let order = if rep % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for traced in order {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let r = run_one(b, rep, traced, stop)?;
            progress(&r);
            runs.push(r);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let pick = |traced: bool, f: fn(&OverheadRun) -> f64| {
        Stat::of(
            &runs
                .iter()
                .filter(|r| r.traced == traced)
                .map(f)
                .collect::<Vec<_>>(),
        )
        .unwrap_or(Stat::NAN)
    };
    let ratios: Vec<f64> = (0..b.reps)
        .filter_map(|rep| {
            let on = runs.iter().find(|r| r.rep == rep && r.traced)?;
            let off = runs.iter().find(|r| r.rep == rep && !r.traced)?;
            Some(on.p99_us / off.p99_us)
        })
        .collect();
    let summary = OverheadSummary {
        off_p50_us: pick(false, |r| r.p50_us),
        off_p99_us: pick(false, |r| r.p99_us),
        off_max_us: pick(false, |r| r.max_us),
        on_p50_us: pick(true, |r| r.p50_us),
        on_p99_us: pick(true, |r| r.p99_us),
        on_max_us: pick(true, |r| r.max_us),
        p99_ratio: Stat::of(&ratios).unwrap_or(Stat::NAN),
        records_per_s: pick(true, |r| r.records as f64 / r.trace_s.max(1e-9)),
        bytes_per_s: pick(true, |r| r.record_bytes as f64 / r.trace_s.max(1e-9)),
    };
    Ok(OverheadReport {
        schema: OVERHEAD_SCHEMA.into(),
        created_unix_s: elfen_cmd::time::now_unix_s(),
        command: b.command.clone(),
        system: elfen_topo::SystemInfo::collect(),
        target: b.target.spec.to_string(),
        params: OverheadParams {
            addr: b.addr.to_string(),
            rps: b.load.rps,
            duration_s: b.load.duration.as_secs_f64(),
            reps: b.reps,
            requests: b.requests.clone(),
            page: b.page.as_ref().map(|p| p.0.display().to_string()),
        },
        load_before,
        runs,
        summary,
    })
}

/// The benchmark's table.
pub fn render(r: &OverheadReport) -> String {
    let f = |s: &Stat| format!("{:>9.1} ({:.1}–{:.1})", s.median, s.min, s.max);
    let s = &r.summary;
    format!(
        "elfen trace overhead: {} at {} rps, {} × {:.1} s per mode (medians, min–max over repetitions)\n\
         {:<12} {:>24} {:>24} {:>24}\n\
         {:<12} {} {} {}\n\
         {:<12} {} {} {}\n\
         traced p99 / untraced p99 (paired per repetition): {:.2} ({:.2}–{:.2})\n\
         trace volume: {:.0} kernel records/s, {:.1} KB/s of raw record (JSON)\n\
         lost records: {}\n",
        r.target,
        r.params.rps,
        r.params.reps,
        r.params.duration_s,
        "",
        "p50 µs",
        "p99 µs",
        "max µs",
        "untraced",
        f(&s.off_p50_us),
        f(&s.off_p99_us),
        f(&s.off_max_us),
        "traced",
        f(&s.on_p50_us),
        f(&s.on_p99_us),
        f(&s.on_max_us),
        s.p99_ratio.median,
        s.p99_ratio.min,
        s.p99_ratio.max,
        s.records_per_s.median,
        s.bytes_per_s.median / 1e3,
        r.runs.iter().map(|x| x.lost).sum::<u64>()
    )
}
