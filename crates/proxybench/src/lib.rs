//! # elfen-proxybench — `elfen proxy bench`
//!
//! A **lab** crate: harness, measurement or workload
//! (`docs/architecture.md`); no product crate depends on it.
//!
//! An LC service driven by the load kit's open-loop connection
//! (`elfen_load`: Poisson arrivals, latency from the intended send
//! time) in several **ways** side by side — straight to
//! replica A (`alone`), through the proxy forwarding only (`forward`),
//! with local-node redundancy (`proxy`), with a timeout hedge at a
//! percentile (`hedge`) — in interleaved rounds whose ways share arrivals
//! and request order, for each **variant** of the service (a hazard
//! switched on). It prints client-observed p50/p99/max per way (median and
//! min–max over rounds), the latency each way adds to `alone` in the same
//! round, the hedge rate, the work done twice and the backup's busy time,
//! and saves everything as JSON.
//!
//! With a `[ladder]` the variants are **the thesis's table, ours**
//! ([`ladder`]): every hazard on, then each fixed in turn in the order the
//! profiler (`elfen trace`) ranks them, then the kept ones behind the
//! proxy; with `elfen trace`'s overhead; the table is also written as
//! markdown beside the JSON ([`table`]).
//!
//! It is a lab crate of its own, over the proxy (`elfen-proxy`) and the
//! harness library (`elfen-bench`: the generator's arrivals, sender and
//! accounting; request sets; the Lucene command and pre-flight), so the
//! proxy an operator runs depends on no measurement code, and the harness
//! need not depend on the proxy (which would close a cycle through the
//! profiler, `elfen-trace`, that the proxy uses and that uses the harness).
//! Presets: `configs/proxy/bench-overhead.toml` (the proxy's added
//! latency, the default), `configs/proxy/bench-lucene.toml`
//! (Lucene alone, behind the proxy, behind a timeout hedge, hazards off and
//! on) and `configs/proxy/bench-tailor.toml` (the ladder).
//!
//! | piece | module |
//! |---|---|
//! | the bench's settings (TOML, presets, variants, ways, the ladder's) | [`spec`] |
//! | the two replicas, started per variant, restarted as asked | [`replicas`] |
//! | one invocation's generator over the proxy's framing (an HTTP variant) | [`load`] |
//! | the record, summaries per way | [`record`] |
//! | the ladder: hazards fixed in the profiler's order | [`ladder`] |
//! | the markdown table | [`table`] |
//! | its errors | [`error`] |
//! | `elfen proxy …` with `bench` beside the proxy's own subcommands | [`cli`] |
#![deny(missing_docs)]

pub mod cli;
pub mod error;
pub mod ladder;
pub mod load;
pub mod record;
pub mod replicas;
pub mod spec;
pub mod table;

use crate::error::Result;
use anyhow::Context;
use clap::Args;
use elfen_cmd::proc::SchedClass;
use elfen_cmd::progress::Progress;
use elfen_load::requests::{self, RequestSet};
use elfen_load::{percentiles_us, poisson_offsets};
use elfen_proxy::ProxyError;
use elfen_proxy::proxy::Proxy;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use record::{BenchRecord, InvocationRecord, SCHEMA};
use replicas::Replicas;
use spec::{BenchSpec, Restart, Variant, Way};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Arguments of `elfen proxy bench`; options override the file's keys.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// TOML file (configs/proxy/bench-*.toml); default: the added-latency
    /// preset (the built-in service as two `elfen serve` replicas).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write the JSON here (default: `results/proxy-bench-<UTC time>.json`).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Rounds (invocations of each way).
    #[arg(long)]
    pub invocations: Option<usize>,
    /// Measured window of an invocation, s.
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Requests per second.
    #[arg(long)]
    pub rps: Option<f64>,
    /// Ways, comma-separated: alone, forward, proxy, hedge (alone always
    /// runs).
    #[arg(long, value_name = "LIST")]
    pub ways: Option<String>,
    /// Only these variants of the file, comma-separated (a `[ladder]`'s
    /// steps run unless `--no-ladder`).
    #[arg(long, value_name = "LIST")]
    pub variants: Option<String>,
    /// The ladder's fixes in this order instead of the profiler's (no
    /// tracing), e.g. `nagle,untouched-heap,cold-start`.
    #[arg(long, value_name = "LIST")]
    pub ladder_order: Option<String>,
    /// Leave out the file's `[ladder]`.
    #[arg(long)]
    pub no_ladder: bool,
}

/// The ways variant `v` of `spec` runs, in the order they are reported:
/// `alone` first.
pub(crate) fn ways_of(spec: &BenchSpec, v: &Variant) -> Vec<Way> {
    let mut w = vec![Way::Alone];
    for &x in v.ways.as_ref().unwrap_or(&spec.ways) {
        if !w.contains(&x) {
            w.push(x);
        }
    }
    w
}

/// Runs the bench.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    let stop = elfen_cmd::interrupt::install();
    let mut spec = spec_of(&a)?;
    let command = replicas::service_command(&spec)?;
    let set = Arc::new(requests::build(
        spec.service.requests,
        &spec.service.demand,
        spec.service.tasks_path.as_deref(),
        spec.load.seed,
    )?);
    if let Some(n) = &set.note {
        eprintln!("elfen proxy bench: note: {n}");
    }
    let started = elfen_cmd::time::now_unix_s();
    let json = a.json.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "results/proxy-bench-{}.json",
            elfen_cmd::time::utc_stamp(started)
        ))
    });
    if let Some(d) = json.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let loadavg_before = elfen_cmd::proc::loadavg();
    // the replicas, the tracer and the generator pin threads to the lanes:
    // one lane user at a time
    let _lanes = elfen_cmd::LaneLock::acquire().context("taking the lane lock")?;
    let dir = replicas::tempfile_dir()?;
    let mut ladder_rec = None;
    let mut interrupted = false;
    if let Some(l) = spec.ladder.clone() {
        let ctx = ladder::Ctx {
            spec: &spec,
            command: &command,
            set: &set,
            dir: &dir,
            out_prefix: &json.with_extension(""),
            stop,
        };
        let plan = ladder::plan(&ctx, &l)?;
        interrupted = plan.interrupted;
        spec.variants.splice(0..0, plan.variants);
        ladder_rec = Some(ladder::LadderRecord {
            spec: l,
            steps: plan.steps,
            overhead: None,
        });
    }
    announce(&spec, &set, loadavg_before[0]);
    let mut out = Output {
        json: json.clone(),
        record: BenchRecord {
            schema: SCHEMA.into(),
            spec,
            started_unix_s: started,
            loadavg: [loadavg_before, loadavg_before],
            interrupted: true,
            invocations: Vec::new(),
            summary: Vec::new(),
            ladder: ladder_rec,
        },
    };
    // what the ladder's traces found is kept even if nothing else runs
    out.save()?;
    let mut inv = Vec::new();
    let done = if interrupted {
        Ok(true)
    } else {
        let spec = out.record.spec.clone();
        rounds(&spec, &command, &set, &dir, stop, &mut inv, &mut |inv| {
            out.record.invocations = inv.to_vec();
            out.checkpoint()
        })
    };
    out.record.invocations = inv;
    interrupted = match done {
        Ok(i) => i,
        Err(e) => {
            // the invocations done are kept, the record says it was cut short
            let _ = out.save();
            return Err(e);
        }
    };
    let spec = out.record.spec.clone();
    if let Some(l) = out.record.ladder.as_mut() {
        if l.spec.overhead.reps > 0 && !interrupted {
            let ctx = ladder::Ctx {
                spec: &spec,
                command: &command,
                set: &set,
                dir: &dir,
                out_prefix: &json.with_extension(""),
                stop,
            };
            match ladder::overhead(&ctx, &l.spec) {
                Ok(o) => l.overhead = Some(o),
                Err(_) if stop.load(Ordering::Relaxed) => interrupted = true,
                Err(e) => {
                    let _ = out.save();
                    return Err(e.context("elfen trace overhead"));
                }
            }
        }
    }
    out.record.interrupted = interrupted;
    out.record.loadavg[1] = elfen_cmd::proc::loadavg();
    out.save()?;
    println!("{}", record::table(&out.record.summary));
    if let Some(o) = out.record.ladder.as_ref().and_then(|l| l.overhead.as_ref()) {
        print!("{}", elfen_trace::overhead::render(o));
    }
    println!(
        "elfen proxy bench: written to {} and {}{}",
        json.display(),
        json.with_extension("md").display(),
        if interrupted {
            " (interrupted: the rounds done)"
        } else {
            ""
        }
    );
    Ok(())
}

/// The bench file (or the default), with the command line's overrides,
/// checked.
fn spec_of(a: &BenchArgs) -> anyhow::Result<BenchSpec> {
    let mut spec = match &a.config {
        Some(p) => BenchSpec::load(p)?,
        None => BenchSpec::default(),
    };
    if let Some(n) = a.invocations {
        spec.load.invocations = n;
    }
    if let Some(d) = a.duration_s {
        spec.load.duration_s = d;
    }
    if let Some(r) = a.rps {
        spec.load.rps = r;
    }
    if let Some(w) = &a.ways {
        spec.ways = w
            .split(',')
            .map(|x| match x.trim() {
                "alone" => Ok(Way::Alone),
                "proxy" => Ok(Way::Proxy),
                "hedge" => Ok(Way::Hedge),
                "forward" => Ok(Way::Forward),
                o => Err(anyhow::anyhow!(
                    "--ways: {o:?} is not alone, forward, proxy or hedge"
                )),
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(v) = &a.variants {
        let want: Vec<&str> = v.split(',').map(str::trim).collect();
        for w in &want {
            anyhow::ensure!(
                spec.variants.iter().any(|x| x.name == *w),
                "--variants: no variant {w:?} (the file has {})",
                spec.variants
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        spec.variants.retain(|x| want.contains(&x.name.as_str()));
    }
    if a.ways.is_some() {
        for v in &mut spec.variants {
            v.ways = None;
        }
    }
    if a.no_ladder {
        spec.ladder = None;
    }
    if let Some(o) = &a.ladder_order {
        let l = spec.ladder.get_or_insert_with(Default::default);
        l.order = o.split(',').map(|h| h.trim().to_string()).collect();
    }
    spec.validate()?;
    Ok(spec)
}

/// What is about to run: the requests, the load, the variants and their
/// ways, the load average.
fn announce(spec: &BenchSpec, set: &RequestSet, loadavg: f64) {
    eprintln!(
        "elfen proxy bench: {} at {} rps, {} × {} s (+{} s warm-up) per way; variants {}; load average {:.2}",
        set.source,
        spec.load.rps,
        spec.load.invocations,
        spec.load.duration_s,
        spec.load.warmup_s,
        spec.variants
            .iter()
            .map(|v| format!(
                "{} ({}{})",
                v.name,
                ways_of(spec, v)
                    .iter()
                    .map(|w| w.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                if v.args.is_empty() {
                    String::new()
                } else {
                    format!("; {}", v.args)
                }
            ))
            .collect::<Vec<_>>()
            .join(", "),
        loadavg
    );
}

/// The bench's record and where it goes: written after every invocation
/// (marked cut short until the end), so a run stopped by Ctrl-C, an error
/// or a kill keeps what it measured.
struct Output {
    json: PathBuf,
    record: BenchRecord,
}

impl Output {
    /// Summarizes and writes the JSON and the markdown beside it.
    fn save(&mut self) -> anyhow::Result<()> {
        self.record.summary = record::summarize(&self.record.spec, &self.record.invocations);
        let json = &self.json;
        elfen_results::save_json(&self.record, json)
            .with_context(|| format!("writing {}", json.display()))?;
        let md = json.with_extension("md");
        std::fs::write(&md, table::markdown(&self.record))
            .with_context(|| format!("writing {}", md.display()))
    }

    /// [`Output::save`] mid-run: the record says it is cut short.
    fn checkpoint(&mut self) -> anyhow::Result<()> {
        self.record.interrupted = true;
        self.record.loadavg[1] = elfen_cmd::proc::loadavg();
        self.save()
    }
}

/// Runs every variant's rounds, appending to `inv` and calling `saved`
/// after each invocation; returns whether a Ctrl-C cut them short (the
/// invocations done stay in `inv` on an error too).
fn rounds(
    spec: &BenchSpec,
    command: &str,
    set: &Arc<RequestSet>,
    dir: &replicas::TempDir,
    stop: &AtomicBool,
    inv: &mut Vec<InvocationRecord>,
    saved: &mut dyn FnMut(&[InvocationRecord]) -> anyhow::Result<()>,
) -> anyhow::Result<bool> {
    let place = load::Place {
        cpus: elfen_topo::current_affinity().unwrap_or_default(),
        sched: if elfen_cmd::proc::is_root() {
            SchedClass::Fifo(10)
        } else {
            SchedClass::Other
        },
    };
    let mut progress = Progress::new(true);
    let total: usize = spec
        .variants
        .iter()
        .map(|v| ways_of(spec, v).len() * spec.load.invocations)
        .sum();
    progress.count(
        total,
        spec.load.warmup_s + spec.load.duration_s + spec.load.drain_s.min(1.0),
    );
    for v in &spec.variants {
        let ways = ways_of(spec, v);
        // a variant run alone only needs no replica B
        let only_a = ways == [Way::Alone];
        let mut reps = Replicas::start(spec, command, v, dir.path(), only_a, stop)
            .with_context(|| format!("variant {}: starting the replicas", v.name))?;
        if v.restart == Restart::Active && !only_a {
            warm_backup(spec, &reps, set, &place, stop)
                .with_context(|| format!("variant {}: warming replica B", v.name))?;
        }
        for round in 0..spec.load.invocations {
            let mut rng = SmallRng::seed_from_u64(spec.load.seed.wrapping_add(round as u64));
            let span_ns = ((spec.load.warmup_s + spec.load.duration_s) * 1e9) as u64;
            let offsets = poisson_offsets(spec.load.rps, span_ns, &mut rng);
            let picks = set.sequence(offsets.len(), &mut rng);
            let n = ways.len();
            for k in 0..n {
                let way = ways[(k + round) % n];
                if stop.load(Ordering::Relaxed) {
                    return Ok(true);
                }
                match v.restart {
                    Restart::Invocation if !only_a => reps.restart(stop)?,
                    Restart::Invocation => reps.restart_one(0, stop)?,
                    Restart::Active => reps.restart_one(0, stop)?,
                    Restart::Variant => {}
                }
                progress.show(
                    &format!(
                        "{} round {}/{} {}",
                        v.name,
                        round + 1,
                        spec.load.invocations,
                        way.name()
                    ),
                    false,
                );
                match one(spec, &reps, way, set, &offsets, &picks, &place, stop) {
                    Ok(mut r) => {
                        r.variant = v.name.clone();
                        r.round = round;
                        progress.step_done();
                        progress.say(&progress_line(spec, &r, progress.steps(), progress.eta_s()));
                        inv.push(r);
                        saved(inv)?;
                    }
                    Err(e) if e.is_interrupted() => {
                        return Ok(true);
                    }
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("variant {}, way {}", v.name, way.name()));
                    }
                }
            }
        }
    }
    progress.finish();
    Ok(false)
}

/// One invocation's line: `[done/total] variant round way` and its
/// figures, then the time left at the pace so far.
fn progress_line(
    spec: &BenchSpec,
    r: &InvocationRecord,
    (done, total): (usize, usize),
    eta_s: f64,
) -> String {
    let eta = eta_s.round() as u64;
    format!(
        "[{done}/{total}] {} round {}/{} {:<8} p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  {} errors{} · ETA {}m{:02}s",
        r.variant,
        r.round + 1,
        spec.load.invocations,
        r.way.name(),
        r.latency_us.p50 / 1e3,
        r.latency_us.p99 / 1e3,
        r.latency_us.max / 1e3,
        r.errors,
        r.proxy
            .as_ref()
            .map(|s| format!(
                ", {} hedged, {} swaps, {} served twice",
                s.hedges_total, s.swaps, s.duplicate_work
            ))
            .unwrap_or_default(),
        eta / 60,
        eta % 60
    )
}

/// Sends replica B the load alone for `load.backup_warm_s` (answers not
/// recorded): a backup that served before the active one restarts.
fn warm_backup(
    spec: &BenchSpec,
    reps: &Replicas,
    set: &Arc<RequestSet>,
    place: &load::Place,
    stop: &AtomicBool,
) -> Result<()> {
    let span_ns = (spec.load.backup_warm_s * 1e9) as u64;
    if span_ns == 0 {
        return Ok(());
    }
    let mut rng = SmallRng::seed_from_u64(spec.load.seed ^ 0x5eed);
    let offsets = poisson_offsets(spec.load.rps, span_ns, &mut rng);
    let picks = set.sequence(offsets.len(), &mut rng);
    let plan = load::Plan {
        offsets: &offsets,
        requests: picks
            .iter()
            .map(|&k| {
                let k = k as usize;
                (set.arg(k, 1.0), set.payload(k))
            })
            .collect(),
        warmup_ns: span_ns,
        drain_ns: (spec.load.drain_s * 1e9) as u64,
    };
    load::invocation(spec.service.protocol, reps.addrs[1], &plan, place, stop)
        .map_err(|e| ProxyError::io(format!("warming {}", reps.addrs[1]), e))?;
    Ok(())
}

/// One invocation of `way`.
#[allow(clippy::too_many_arguments)]
fn one(
    spec: &BenchSpec,
    reps: &Replicas,
    way: Way,
    set: &Arc<RequestSet>,
    offsets: &[u64],
    picks: &[u32],
    place: &load::Place,
    stop: &AtomicBool,
) -> Result<InvocationRecord> {
    let proxy = match way.mode() {
        Some(mode) => {
            let mut c = spec.proxy.clone();
            c.hedge = mode;
            c.protocol = spec.service.protocol;
            c.listen = "127.0.0.1:0".into();
            c.metrics = None;
            c.replicas.command = None;
            c.replicas.addrs = reps.addrs.iter().map(ToString::to_string).collect();
            c.replicas.page = Some(reps.page.path().to_path_buf());
            c.replicas.lanes = vec![0, 1];
            Some(Proxy::start(c, stop)?)
        }
        None => None,
    };
    let addr = proxy.as_ref().map_or(reps.addrs[0], Proxy::addr);
    let busy0 = reps.page.lc_busy_ns(1).ok();
    let warmup_ns = (spec.load.warmup_s * 1e9) as u64;
    let drain_ns = (spec.load.drain_s * 1e9) as u64;
    let plan = load::Plan {
        offsets,
        requests: picks
            .iter()
            .map(|&k| {
                let k = k as usize;
                (set.arg(k, 1.0), set.payload(k))
            })
            .collect(),
        warmup_ns,
        drain_ns,
    };
    let (outcome, sent) = load::invocation(spec.service.protocol, addr, &plan, place, stop)
        .map_err(|e| ProxyError::io(format!("the load on {addr}"), e))?;
    if stop.load(Ordering::Relaxed) {
        return Err(ProxyError::Interrupted.into());
    }
    let busy1 = reps.page.lc_busy_ns(1).ok();
    Ok(InvocationRecord {
        variant: String::new(),
        way,
        round: 0,
        latency_us: percentiles_us(&outcome.hist),
        requests: outcome.requests,
        errors: outcome.errors,
        sent,
        proxy: proxy.map(Proxy::stop),
        backup_busy_ms: busy0
            .zip(busy1)
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1e6),
    })
}
