//! The recording of a ladder step — one replica of the service with its
//! hazards under the bench's load, traced and studied — and `elfen trace
//! overhead`.

use super::{Ctx, HazardRank, StepTrace, hazards_arg, rank, study_pcts};
use crate::replicas::Replicas;
use crate::spec::{LadderSpec, Restart, Variant};
use anyhow::Context;
use elfen_cmd::proc::SchedClass;
use elfen_trace::lcline::LcLineTap;
use elfen_trace::load::{LoadPlan, LoadResult, drive};
use elfen_trace::overhead::OverheadReport;
use elfen_trace::record::{EndReason, TraceRecord};
use elfen_trace::recorder::{Options, Recorder};
use elfen_trace::report::{StudyParams, TraceReport};
use elfen_trace::target::{Target, TargetSpec};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn sched_for_clients() -> SchedClass {
    if elfen_cmd::proc::is_root() {
        SchedClass::Fifo(10)
    } else {
        SchedClass::Other
    }
}

/// Sleeps `d` unless `stop` is set first; false if it was.
fn nap(d: Duration, stop: &AtomicBool) -> bool {
    let t = Instant::now();
    while t.elapsed() < d {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20).min(d.saturating_sub(t.elapsed())));
    }
    !stop.load(Ordering::Relaxed)
}

/// Waits (up to 60 s) until the JVM's JIT compiler threads ran less than
/// 5 ms in the last 500 ms: a warm JVM, whose trace shows its hazards
/// rather than the tail of its warm-up.
fn jit_quiet(pid: u32, stop: &AtomicBool) {
    let t = Instant::now();
    let mut last = elfen_trace::pause::jit_cpu_ns(pid);
    while t.elapsed() < Duration::from_secs(60) && nap(Duration::from_millis(500), stop) {
        let now = elfen_trace::pause::jit_cpu_ns(pid);
        if now.saturating_sub(last) < 5_000_000 {
            return;
        }
        last = now;
    }
    eprintln!("elfen proxy bench: the JIT still compiles after 60 s: tracing anyway");
}

/// Traces one replica of the service with hazards `on` under the bench's
/// load; studies it at the configured percentile, and deeper while no
/// removable hazard is named; saves the reports; returns the ranking.
pub(super) fn trace_step(
    c: &Ctx,
    l: &LadderSpec,
    k: usize,
    on: &[String],
) -> anyhow::Result<(Vec<HazardRank>, StepTrace)> {
    let v = Variant {
        name: format!("trace{k}"),
        args: hazards_arg(on),
        env: Default::default(),
        restart: Restart::Variant,
        ways: None,
    };
    eprintln!(
        "elfen proxy bench: ladder step {k}: tracing the service with {}",
        v.args
    );
    let reps = Replicas::start(c.spec, c.command, &v, c.dir.path(), true, c.stop)
        .with_context(|| format!("ladder step {k}: starting the service"))?;
    let pid = reps.pid(0).context("the traced replica")?;
    let target = Target::resolve(TargetSpec::Pid(pid))?;
    let tap = lc_tap(&reps, &target, k)?;
    if !on.iter().any(|h| h == "cold-start") {
        jit_quiet(pid, c.stop);
    }
    let rec = start_recorder(target, tap, k)?;
    nap(Duration::from_secs_f64(l.trace.idle_s), c.stop);
    let plan = step_load(c, l, k, &reps);
    let load = drive(reps.addrs[0], &plan, c.stop);
    let record = rec.finish(
        EndReason::Duration,
        format!("elfen proxy bench: ladder step {k} ({})", v.args),
    )?;
    drop(reps);
    let load = load?;
    anyhow::ensure!(
        !c.stop.load(Ordering::Relaxed),
        "interrupted while tracing ladder step {k}"
    );
    let path = PathBuf::from(format!("{}-step{k}-trace.json", c.out_prefix.display()));
    let studied = study_step(c, l, k, on, &record, &load, &path)?;
    let q = |x: f64| load.hist.value_at_quantile(x) as f64 / 1e6;
    let trace = StepTrace {
        ranked_at_pct: studied.ranked_at_pct,
        ranking_report: studied.ranking_path.display().to_string(),
        report: path.display().to_string(),
        requests: studied.report.requests,
        studied: studied.report.slow.len(),
        p99_ms: q(0.99),
        max_ms: load.hist.max() as f64 / 1e6,
        duration_s: record.duration_ns() as f64 / 1e9,
        records: record.events.len() as u64,
        lost: record.counts.lost,
    };
    Ok((studied.ranking, trace))
}

/// The traced replica's LC line, once the service has published its LC
/// thread there (up to 30 s).
fn lc_tap(reps: &Replicas, target: &Target, k: usize) -> anyhow::Result<LcLineTap> {
    let t = Instant::now();
    loop {
        match LcLineTap::open(reps.page.path(), Some(0), &target.tgids) {
            Ok(tap) if tap.lc_tid() != 0 => return Ok(tap),
            _ if t.elapsed() > Duration::from_secs(30) => {
                anyhow::bail!("ladder step {k}: the service published no LC thread in 30 s")
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Starts `elfen trace` on `target`, saying which signals it cannot record.
fn start_recorder(target: Target, tap: LcLineTap, k: usize) -> anyhow::Result<Recorder> {
    // the LC line read every 50 µs by a real-time poller: a busy side CPU
    // (a cold JVM's compiler) cannot starve it
    let opts = Options {
        poll_us: 50,
        poller_sched: if elfen_cmd::proc::is_root() {
            SchedClass::Fifo(5)
        } else {
            SchedClass::Idle
        },
        ..Options::default()
    };
    let rec = Recorder::start(target, Some(tap), &opts, None)
        .with_context(|| format!("ladder step {k}: elfen trace (or give ladder.order)"))?;
    for s in rec.signals() {
        if let Some(why) = s.skipped.as_ref().filter(|w| *w != "not asked for") {
            eprintln!(
                "elfen proxy bench: ladder step {k}: signal {} not recorded: {why}",
                s.signal.name()
            );
        }
    }
    Ok(rec)
}

/// The load of step `k`: the ladder's trace rate (or the bench's), on the
/// traced replica's side CPUs, with ids apart from the bench's.
fn step_load(c: &Ctx, l: &LadderSpec, k: usize, reps: &Replicas) -> LoadPlan {
    let rps = if l.trace.rps > 0.0 {
        l.trace.rps
    } else {
        c.spec.load.rps
    };
    LoadPlan {
        rps,
        duration: Duration::from_secs_f64(l.trace.duration_s),
        drain: Duration::from_secs(3),
        set: c.set.clone(),
        seed: c.spec.load.seed.wrapping_add(k as u64),
        id_base: 1_000_000,
        cpus: reps.side_cpus(0),
        sched: sched_for_clients(),
    }
}

/// What the studies of one step's trace gave.
struct Studied {
    /// The study at the configured percentile.
    report: TraceReport,
    /// The ranking of the first study that named a removable hazard (or
    /// of the deepest).
    ranking: Vec<HazardRank>,
    /// That study's percentile.
    ranked_at_pct: f64,
    /// Where its report was saved.
    ranking_path: PathBuf,
}

/// Studies the trace at the configured percentile (saved at `path`, with
/// its text, its Perfetto events if asked, and its head printed), then
/// deeper while no removable hazard is named (each saved beside it).
fn study_step(
    c: &Ctx,
    l: &LadderSpec,
    k: usize,
    on: &[String],
    record: &TraceRecord,
    load: &LoadResult,
    path: &Path,
) -> anyhow::Result<Studied> {
    let pcts = study_pcts(l.trace.above_pct, load.spans.len() as u64);
    let mut first = None;
    let mut ranked = None;
    for (i, &pct) in pcts.iter().enumerate() {
        let params = StudyParams {
            above_pct: pct,
            ..StudyParams::default()
        };
        let report = elfen_trace::study::study(record, &load.spans, params);
        let at = if i == 0 {
            path.to_path_buf()
        } else {
            PathBuf::from(format!(
                "{}-step{k}-trace-p{pct}.json",
                c.out_prefix.display()
            ))
        };
        report.save(&at)?;
        let text = elfen_trace::render::text::text(&report, 5);
        let _ = std::fs::write(at.with_extension("txt"), &text);
        if i == 0 {
            if l.trace.perfetto {
                let events = elfen_trace::render::perfetto::events(record, &load.spans, &report);
                elfen_trace::render::perfetto::write(
                    &path.with_extension("perfetto.json"),
                    &events,
                )?;
            }
            eprint!(
                "{}",
                text.lines()
                    .take(16)
                    .map(|l| format!("    {l}\n"))
                    .collect::<String>()
            );
            first = Some(report.clone());
        }
        let ranking = rank(&report.counts, on, &l.keep);
        let named = ranking
            .iter()
            .any(|r| r.removable && (r.hazard_top > 0 || r.attributed > 0));
        if named || i + 1 == pcts.len() {
            if i > 0 {
                eprintln!(
                    "    no removable hazard named above p{}: ranked above p{pct} ({})",
                    l.trace.above_pct,
                    at.display()
                );
            }
            ranked = Some((ranking, pct, at));
            break;
        }
    }
    let report = first.expect("studied at least once");
    let (ranking, ranked_at_pct, ranking_path) = ranked.expect("ranked");
    Ok(Studied {
        report,
        ranking,
        ranked_at_pct,
        ranking_path,
    })
}

/// `elfen trace overhead` on one replica of the service with every hazard
/// off: the same load untraced and traced, alternating.
pub fn overhead(c: &Ctx, l: &LadderSpec) -> anyhow::Result<OverheadReport> {
    let v = Variant {
        name: "overhead".into(),
        args: hazards_arg(&[]),
        env: Default::default(),
        restart: Restart::Variant,
        ways: None,
    };
    let reps = Replicas::start(c.spec, c.command, &v, c.dir.path(), true, c.stop)
        .context("starting the service for elfen trace overhead")?;
    let pid = reps.pid(0).context("the traced replica")?;
    jit_quiet(pid, c.stop);
    let rps = if l.overhead.rps > 0.0 {
        l.overhead.rps
    } else {
        c.spec.load.rps
    };
    let b = elfen_trace::overhead::Bench {
        target: Target::resolve(TargetSpec::Pid(pid))?,
        page: Some((reps.page.path().to_path_buf(), Some(0))),
        options: Options::default(),
        load: LoadPlan {
            rps,
            duration: Duration::from_secs_f64(l.overhead.duration_s),
            drain: Duration::from_secs(2),
            set: c.set.clone(),
            seed: c.spec.load.seed,
            id_base: 0,
            cpus: reps.side_cpus(0),
            sched: sched_for_clients(),
        },
        addr: reps.addrs[0],
        reps: l.overhead.reps,
        command: format!("elfen proxy bench: elfen trace overhead ({})", v.args),
        requests: c.set.source.clone(),
    };
    eprintln!(
        "elfen proxy bench: elfen trace overhead: {} × {} s untraced and traced at {rps} rps",
        l.overhead.reps, l.overhead.duration_s
    );
    let r = elfen_trace::overhead::run(&b, c.stop, |r| {
        eprintln!(
            "  rep {} {:<9} p50 {:>8.1} µs  p99 {:>9.1} µs  max {:>9.1} µs",
            r.rep,
            if r.traced { "traced" } else { "untraced" },
            r.p50_us,
            r.p99_us,
            r.max_us
        )
    })?;
    Ok(r)
}
