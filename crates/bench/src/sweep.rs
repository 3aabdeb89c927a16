//! The **sweep**: every configuration at every load, one run.
//!
//! 1. Pre-flight, before any load is sent: lanes, the port, the signal page
//!    (created, or attached with `--page`), the cgroups, the request set,
//!    the batch worker executable.
//! 2. The LC service starts and calibrates its chase alone.
//! 3. **Demand alone** (Figure 1): every request of the set once, one at a
//!    time; its mean gives the capacity the automatic loads derive from.
//! 4. **Batch alone**: each kernel for `batch.alone_s` on one batch lane,
//!    no load — the progress baseline.
//! 5. The SLO: given, or the knee of an LC-alone pre-sweep (median p99 of
//!    [`PRESWEEP_REPS`] invocations per load).
//! 6. Per load, ascending, in **interleaved rounds**: round 1 of every
//!    (configuration, kernel) — `lc_alone` first, whose round-1 p99 sets
//!    the automatic budget of that load — then round 2 of every one, and so
//!    on, so slow drift of the host hits every configuration alike. Every
//!    invocation starts its own batch process.
//! 7. **Common random numbers**: the seed of an invocation depends on the
//!    load and the round only ([`invocation_seed`]), so within a round every
//!    configuration sends the same arrivals and the same requests, and a
//!    ratio to LC alone in the same round compares configurations, not
//!    draws (`elfen report`'s paired ratio).
//!
//! The result file is saved (atomically) after every round and on
//! interruption, with every point's finished invocations (`reps`) and
//! summaries over them, so an interrupted sweep keeps what it measured.
//! `spec.resolved.wall_breakdown_s` says where the wall time went.

use crate::batch::{self, BatchPlan, BatchProcess, BatchSample, ThreadPlan};
use crate::cgroup::{Cgroup, CgroupFs, Controller};
use crate::client::{Edge, InvocationPlan, run_invocation};
use crate::config::{Auto, BenchSpec, ConfigKind, KernelKind, NapKind, Placement};
use crate::demand::{self, RequestSet};
use crate::error::{BenchError, Result};
use crate::loadgen::{encode_histogram, mono_ns, percentiles_us, poisson_offsets};
use crate::service::{self, Service, ServiceConfig, latency_buckets};
use elfen_results::{Distribution, Point, Rep, ResultFile, Source, Summary, Utilization};
use elfen_shm::{Access, LaneSpec, Page, PageSpec, page_path};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How to run a sweep.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The experiment (defaults filled in).
    pub spec: BenchSpec,
    /// The command line, for the result file.
    pub command: String,
    /// Where the result file goes.
    pub json_path: PathBuf,
    /// The executable that runs the hidden batch-worker subcommand.
    pub worker_exe: PathBuf,
    /// Print the live progress line (stderr).
    pub progress: bool,
}

/// What a sweep produced.
#[derive(Debug)]
pub struct SweepOutcome {
    /// The result file (also saved at `json_path`).
    pub result: ResultFile,
    /// Where it was saved.
    pub json_path: PathBuf,
    /// Stopped by Ctrl-C: `result` holds the points finished before.
    pub interrupted: bool,
    /// Things the user should know (fallbacks taken, …).
    pub notes: Vec<String>,
}

/// Where things run.
#[derive(Debug, Clone)]
pub struct Lanes {
    /// The request lane's CPU.
    pub request_cpu: u32,
    /// Its batch lanes' CPUs.
    pub batch_cpus: Vec<u32>,
    /// The CPUs of the load generator and the dispatcher.
    pub side_cpus: Vec<u32>,
    /// Page lane index of the request lane.
    pub request_lane: u32,
    /// Page lane index of each batch lane.
    pub batch_lanes: Vec<u32>,
}

/// The knee of a p99-vs-load curve (Kneedle on the normalized curve, with
/// the zero-load point `(0, p99_at_zero)` prepended): the load whose point
/// lies farthest below the chord from the origin to the last point.
/// Returns the index into `points` (`(rps, p99)`, ascending rps).
pub fn knee_index(points: &[(f64, f64)], p99_at_zero: f64) -> Option<usize> {
    if points.is_empty() {
        return None;
    }
    let xmax = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let y0 = p99_at_zero.min(points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min));
    let ymax = points.iter().map(|p| p.1).fold(f64::MIN, f64::max);
    if xmax <= 0.0 || ymax - y0 <= ymax * 1e-6 {
        return Some(points.len() - 1);
    }
    let mut best = (f64::MIN, points.len() - 1);
    for (i, &(x, y)) in points.iter().enumerate() {
        let d = x / xmax - (y - y0) / (ymax - y0);
        if d > best.0 + 1e-12 {
            best = (d, i);
        }
    }
    Some(best.1)
}

/// The SLO and where it came from: given, or the highest LC-alone p99 at
/// any load up to the knee (so LC alone meets it at the knee and at every
/// lower load, even where the curve is not monotonic — on these VMs a lightly
/// loaded request lane is slower: see docs/harness.md, "Noise").
pub fn derive_slo(
    spec: &BenchSpec,
    lc_alone: &[(f64, f64)],
    p99_at_zero: f64,
) -> (Option<f64>, String) {
    if let Auto::Value(ms) = spec.slo_p99_ms {
        return (Some(ms * 1e3), format!("given: {ms} ms"));
    }
    match knee_index(lc_alone, p99_at_zero) {
        Some(i) => (
            Some(lc_alone[..=i].iter().map(|p| p.1).fold(0.0, f64::max)),
            format!(
                "auto: the highest LC-alone p99 up to the knee of its p99-vs-RPS curve ({:.0} rps)",
                lc_alone[i].0
            ),
        ),
        None => (None, "none: no LC-alone points".into()),
    }
}

/// The budget for the budget policies at a load: given, or the SLO headroom
/// there (SLO − LC-alone p99, at least 0), as the paper derives it.
pub fn budget_us(spec: &BenchSpec, slo_us: Option<f64>, lc_p99_us: Option<f64>) -> f64 {
    match spec.budget_us {
        Auto::Value(v) => v,
        Auto::Auto => match (slo_us, lc_p99_us) {
            (Some(s), Some(p)) => (s - p).max(0.0),
            _ => 0.0,
        },
    }
}

/// The loads: given, or fractions of the capacity alone rounded to 2
/// significant digits.
pub fn resolve_rps(spec: &BenchSpec, capacity_rps: f64) -> Vec<f64> {
    let mut v: Vec<f64> = if spec.rps.is_empty() {
        spec.rps_fractions
            .iter()
            .map(|f| round2(f * capacity_rps).max(1.0))
            .collect()
    } else {
        spec.rps.clone()
    };
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

fn round2(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let mag = 10f64.powf(x.log10().floor() - 1.0);
    (x / mag).round() * mag
}

/// splitmix64's finalizer: a bijective mix of 64 bits.
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How the main sweep orders its invocations (for the result file).
pub const ORDER_NOTE: &str = "interleaved: per load (ascending), round 1 of every (configuration, \
     kernel) with lc_alone first, then round 2 of every one, ...; a fresh batch process per \
     invocation";

/// How invocations are seeded (for the result file).
pub const SEEDS_NOTE: &str = "common random numbers: the seed of an invocation depends on the \
     sweep's seed, the load and the round only, so every configuration and kernel sends the same \
     arrivals and requests in a round; a disturbed invocation run again reuses its round's seed; \
     probe and pre-sweep draw seeds of their own";

/// Where the automatic budget comes from (for the result file).
pub const BUDGET_NOTE: &str = "auto: SLO minus the p99 of round 1's lc_alone invocation at the \
     load (run just before the budget configurations of round 1), at least 0";

/// The round number the capacity probe and the knee pre-sweep draw their
/// seeds with: never a round of the main sweep, so their arrivals are not
/// those of round 1.
pub const PRESWEEP_ROUND: u32 = u32::MAX;

/// LC-alone invocations per load of the knee pre-sweep (rounds
/// `PRESWEEP_ROUND`, `PRESWEEP_ROUND - 1`, ...): the SLO comes from their
/// median p99, the statistic the table reports, not from one invocation
/// (one invocation's p99 varies 2x and more between invocations here).
pub const PRESWEEP_REPS: u32 = 3;

/// The seed of invocation `round` (0-based) at load `rps`: **common random
/// numbers** — it depends on the sweep's seed, the load and the round only,
/// never on the configuration or the kernel, so every configuration's
/// invocation of a round sends the same requests at the same intended
/// times. A disturbed invocation run again reuses it (so the kept attempt of
/// a round has that round's draw, whichever attempt is kept).
pub fn invocation_seed(seed: u64, rps: f64, round: u32) -> u64 {
    mix64(mix64(seed ^ mix64(rps.to_bits())) ^ u64::from(round))
}

/// One (configuration, kernel) of a load: `lc_alone` has no kernel.
pub type Slot = (ConfigKind, Option<KernelKind>);

/// The (configuration, kernel) pairs of one round at a load, in the order
/// they run: `lc_alone` first (the budget policies' budget comes from its
/// round-1 invocation), then every batch configuration with each kernel.
pub fn round_slots(batch_configs: &[ConfigKind], kernels: &[KernelKind]) -> Vec<Slot> {
    let mut v: Vec<Slot> = vec![(ConfigKind::LcAlone, None)];
    for &k in kernels {
        for &c in batch_configs.iter().filter(|c| c.has_batch()) {
            v.push((c, Some(k)));
        }
    }
    v
}

/// The invocations of one load, interleaved: round 1 of every slot, then
/// round 2 of every slot, … — `(round, slot index)`, rounds 0-based — so
/// slow drift of the host hits every configuration alike.
pub fn interleaved(slots: usize, reps: u32) -> Vec<(u32, usize)> {
    (0..reps)
        .flat_map(|r| (0..slots).map(move |i| (r, i)))
        .collect()
}

/// The invocations of one point collected so far.
#[derive(Debug, Clone)]
struct PointAcc {
    config: ConfigKind,
    kernel: Option<KernelKind>,
    rps: f64,
    reps: Vec<Rep>,
    idle: Distribution,
    service: Distribution,
}

impl PointAcc {
    fn new(config: ConfigKind, kernel: Option<KernelKind>, rps: f64) -> PointAcc {
        PointAcc {
            config,
            kernel,
            rps,
            reps: Vec::new(),
            idle: crate::service::idle_buckets(),
            service: latency_buckets(),
        }
    }

    fn push(&mut self, (rep, idle, service): (Rep, Distribution, Distribution)) {
        merge(&mut self.idle, &idle);
        merge(&mut self.service, &service);
        self.reps.push(rep);
    }

    fn point(&self, slo_us: Option<f64>) -> Point {
        let mut distributions = BTreeMap::new();
        distributions.insert("idle_periods".into(), self.idle.clone());
        distributions.insert("service".into(), self.service.clone());
        Point {
            config: self.config.name().into(),
            batch: self.kernel.map(|k| k.name().to_string()),
            rps_target: self.rps,
            summary: Summary::of(&self.reps, slo_us),
            reps: self.reps.clone(),
            distributions,
        }
    }
}

/// The points of the result file: every point with at least one finished
/// invocation (`reps` holds exactly those), summaries over them.
fn points_of(accs: &[PointAcc], slo_us: Option<f64>) -> Vec<Point> {
    accs.iter()
        .filter(|a| !a.reps.is_empty())
        .map(|a| a.point(slo_us))
        .collect()
}

/// Which part of the sweep an invocation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The capacity probe.
    Probe,
    /// The knee pre-sweep.
    PreSweep,
    /// The interleaved rounds.
    Main,
}

/// The parts of the wall-time breakdown, in the order printed.
const PARTS: [&str; 9] = [
    "setup",
    "probe",
    "batch_alone",
    "pre_sweep",
    "points",
    "points_batch_start_stop",
    "re_runs",
    "saving",
    "other",
];

struct Progress {
    /// Invocations planned and done (re-runs are not counted).
    total: usize,
    done: usize,
    /// When the counted invocations started (the ETA's clock).
    started: Instant,
    tty: bool,
    enabled: bool,
    guess_inv_s: f64,
    /// Wall time by part of the sweep ([`PARTS`]), s.
    parts: BTreeMap<&'static str, f64>,
    /// Wall time spent re-running disturbed invocations, every phase, s
    /// (against `rerun_budget_s`).
    rerun_s: f64,
}

impl Progress {
    fn charge(&mut self, part: &'static str, since: Instant) {
        debug_assert!(PARTS.contains(&part));
        *self.parts.entry(part).or_insert(0.0) += since.elapsed().as_secs_f64();
    }

    fn eta_s(&self) -> f64 {
        let per = if self.done > 0 {
            self.started.elapsed().as_secs_f64() / self.done as f64
        } else {
            self.guess_inv_s
        };
        per * self.total.saturating_sub(self.done) as f64
    }

    /// The live line; without a terminal, one line per round (`first`).
    fn show(&self, label: &str, first: bool) {
        if !self.enabled {
            return;
        }
        let eta = self.eta_s().round() as u64;
        let line = format!(
            "[{:>3}/{}] {label} · ETA {}m{:02}s",
            (self.done + 1).min(self.total.max(1)),
            self.total,
            eta / 60,
            eta % 60
        );
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[2K{line}");
        } else if first {
            let _ = writeln!(e, "{line}");
        }
        let _ = e.flush();
    }

    fn say(&self, msg: &str) {
        if !self.enabled {
            return;
        }
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[2K");
        }
        let _ = writeln!(e, "{msg}");
    }

    fn finish(&self) {
        if self.enabled && self.tty {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        }
    }
}

/// Everything a sweep holds while it runs; dropped in reverse order
/// (service, then cgroups, then the page).
struct Rig {
    page: Arc<Page>,
    cpuset: Option<Cgroup>,
    quota: Option<Cgroup>,
    service: Option<Service>,
    lanes: Lanes,
    set: RequestSet,
    worker_tid: u32,
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(s) = self.service.take() {
            s.stop();
        }
        if let Some(c) = self.cpuset.take() {
            let _ = c.remove();
        }
        if let Some(c) = self.quota.take() {
            let _ = c.remove();
        }
    }
}

/// Runs the sweep.
pub fn run(opts: SweepOptions, stop: &AtomicBool) -> Result<SweepOutcome> {
    let spec = opts.spec.clone();
    spec.validate()?;
    let started = Instant::now();
    let load_before = loadavg();
    let mut notes = Vec::new();

    // ---------------------------------------------------------------- pre-flight
    let topo = elfen_topo::Topology::detect()?;
    let plan = elfen_topo::plan_pairs(&topo, spec.pairs.as_deref())?;
    let Some(pair) = plan.first().cloned() else {
        return Err(BenchError::Config(format!(
            "no request/batch lane pair on this machine ({}); the harness needs two lanes",
            plan.describe()
        )));
    };
    let listener = service::bind(spec.port)?;
    if !opts.worker_exe.is_file() {
        return Err(BenchError::Batch(format!(
            "worker executable {} not found",
            opts.worker_exe.display()
        )));
    }
    let (page, request_lane, batch_lanes) = open_page(&spec, &pair)?;
    let paired: Vec<u32> = std::iter::once(pair.request)
        .chain(pair.batch.iter().copied())
        .collect();
    let spare: Vec<u32> = topo
        .cpus()
        .into_iter()
        .filter(|c| !paired.contains(c))
        .collect();
    let lanes = Lanes {
        request_cpu: pair.request,
        batch_cpus: pair.batch.clone(),
        side_cpus: if spare.is_empty() {
            pair.batch.clone()
        } else {
            spare
        },
        request_lane,
        batch_lanes,
    };
    let needs_cg = |c: ConfigKind| spec.configs.contains(&c);
    let cgfs = CgroupFs::new(&spec.cgroup);
    let pid = std::process::id();
    let (cpuset, quota) = if needs_cg(ConfigKind::Cpuset) || needs_cg(ConfigKind::CfsQuota) {
        cgfs.remove_stale();
        let cpuset = if needs_cg(ConfigKind::Cpuset) {
            let cg = cgfs.create(
                &format!("{}{pid}-cpuset", crate::cgroup::PREFIX),
                Controller::Cpuset,
            )?;
            cg.set_cpus(&lanes.batch_cpus)?;
            Some(cg)
        } else {
            None
        };
        let quota = if needs_cg(ConfigKind::CfsQuota) {
            let cg = cgfs.create(
                &format!("{}{pid}-quota", crate::cgroup::PREFIX),
                Controller::Cpu,
            )?;
            let q = (spec.batch.cfs_quota_lanes * spec.batch.cfs_period_us as f64).round() as u64;
            cg.set_quota(q.max(1000), spec.batch.cfs_period_us)?;
            Some(cg)
        } else {
            None
        };
        (cpuset, quota)
    } else {
        (None, None)
    };
    let set = demand::build(&spec.demand, spec.seed)?;
    if let Some(n) = &set.note {
        notes.push(n.clone());
    }
    let features = elfen_runtime::machine_features().clone();
    if spec.configs.contains(&ConfigKind::DynamicRefresh) {
        notes.push(if features.perf_hw_counters {
            "dynamic_refresh: hardware counters exist, but the harness sets no reference IPC, \
             so its budget is not scaled: it runs as refresh budget"
                .to_string()
        } else {
            format!(
                "dynamic_refresh: no hardware performance counters here ({}): it runs as refresh budget",
                features
                    .perf_hw_counters_reason
                    .as_deref()
                    .unwrap_or("perf_event_open failed")
            )
        });
    }

    // The sweep's own thread stays off the request lane, like the generator.
    let _pin = elfen_topo::PinGuard::with_cpus(&lanes.side_cpus)?;
    let mut progress = Progress {
        total: 0,
        done: 0,
        started: Instant::now(),
        tty: unsafe { libc::isatty(2) } == 1,
        enabled: opts.progress,
        guess_inv_s: spec.duration_s + spec.warmup_s + 0.15,
        parts: BTreeMap::new(),
        rerun_s: 0.0,
    };
    progress.say(&format!(
        "elfen bench: request lane cpu {}, batch lane(s) cpu {}, generator on cpu {}; {}",
        lanes.request_cpu,
        elfen_topo::format_cpu_list(&lanes.batch_cpus),
        elfen_topo::format_cpu_list(&lanes.side_cpus),
        set.source
    ));
    for n in &notes {
        progress.say(&format!("note: {n}"));
    }

    // ---------------------------------------------------------------- service
    let svc = Service::start(
        listener,
        ServiceConfig {
            request_cpu: lanes.request_cpu,
            side_cpus: lanes.side_cpus.clone(),
            working_set_bytes: (spec.service.working_set_kib * 1024) as usize,
            calibrate_ms: spec.service.calibrate_ms,
            page: Some((page.clone(), lanes.request_lane)),
        },
    )?;
    let worker_tid = find_worker_tid();
    let mut rig = Rig {
        page,
        cpuset,
        quota,
        service: Some(svc),
        lanes,
        set,
        worker_tid,
    };
    let svc = rig.service.as_ref().expect("service");
    let hot_steps_per_us = svc.steps_per_us();
    let addr = svc.addr();

    let mut result = ResultFile::new(
        Source::Measured,
        opts.command.clone(),
        json!({}),
        serde_json::to_value(elfen_topo::SystemInfo::collect()).unwrap_or(json!({})),
    );
    let mut resolved = serde_json::Map::new();
    resolved.insert("steps_per_us_hot".into(), json!(hot_steps_per_us));
    resolved.insert("demand_source".into(), json!(rig.set.source));
    resolved.insert("request_set_size".into(), json!(rig.set.demands_us.len()));
    resolved.insert(
        "lanes".into(),
        json!({
            "pairing": plan.describe(),
            "request_cpu": rig.lanes.request_cpu,
            "batch_cpus": rig.lanes.batch_cpus,
            "generator_cpus": rig.lanes.side_cpus,
            "page": rig.page.path().display().to_string(),
        }),
    );
    resolved.insert(
        "batch_sched_class".into(),
        json!("SCHED_IDLE in every configuration: the LC worker, load generator and dispatcher always preempt batch threads"),
    );
    resolved.insert("nap_backend".into(), json!(spec.batch.nap.name()));
    resolved.insert(
        "stream_mode".into(),
        json!(elfen_kernels::StreamMode::DEFAULT.name()),
    );
    resolved.insert(
        "utilization_method".into(),
        json!(utilization_method(spec.batch.nap)),
    );
    resolved.insert("notes".into(), json!(notes));
    resolved.insert("load_before".into(), json!(load_before));

    // ---------------------------------------------------------------- demand alone
    // The start-up calibration times a continuous, cache-hot chase; requests
    // separated by idle time run slower (lines evicted, TLB cold). So the
    // request set is run once alone and the rate corrected to make its mean
    // service time the nominal mean; the second pass is Figure 1.
    progress.say("measuring the demand alone (Figure 1) ...");
    let nominal = rig.set.mean_us();
    let first = service::measure_demand(addr, &rig.set.demands_us, hot_steps_per_us, stop)?;
    let factor = first.iter().sum::<f64>() / first.len().max(1) as f64 / nominal;
    let (steps_per_us, demand_us) = if factor.is_finite() && (factor - 1.0).abs() > 0.05 {
        let s = hot_steps_per_us / factor;
        (
            s,
            service::measure_demand(addr, &rig.set.demands_us, s, stop)?,
        )
    } else {
        (hot_steps_per_us, first)
    };
    resolved.insert("steps_per_us".into(), json!(steps_per_us));
    resolved.insert("steps_correction".into(), json!(1.0 / factor));
    let mut dd = latency_buckets();
    for &d in &demand_us {
        dd.record(d);
    }
    let mean_demand = demand_us.iter().sum::<f64>() / demand_us.len().max(1) as f64;
    let mut sorted = demand_us.clone();
    sorted.sort_by(f64::total_cmp);
    let demand_p99 = sorted[((sorted.len() - 1) as f64 * 0.99).round() as usize];
    result.distributions.insert("demand".into(), dd);
    let closed_capacity = 1e6 / mean_demand;
    resolved.insert("demand_alone_mean_us".into(), json!(mean_demand));
    resolved.insert("demand_alone_p99_us".into(), json!(demand_p99));
    resolved.insert("closed_loop_capacity_rps".into(), json!(closed_capacity));
    // Under open-loop load requests run slower than back to back (on these
    // VMs 1.5-3x after idle gaps: see docs/harness.md, "Noise"), so the
    // automatic loads derive from the mean service time measured by one LC
    // alone invocation at 30% of the back-to-back capacity.
    progress.charge("setup", started);
    let empty = BTreeMap::new();
    let pctx = PointCtx {
        opts: &opts,
        spec: &spec,
        addr,
        steps_per_us,
        alone: &empty,
        stop,
    };
    let capacity = if spec.rps.is_empty() {
        let probe_rps = round2(0.3 * closed_capacity).max(1.0);
        progress.total = 1;
        let (probe, _, _) = run_measured(
            &pctx,
            &mut rig,
            &mut progress,
            Phase::Probe,
            Inv::lc_alone(probe_rps, PRESWEEP_ROUND),
        )?;
        let service_us = probe.utilization.lc / probe_rps * 1e6;
        resolved.insert("open_loop_probe_rps".into(), json!(probe_rps));
        resolved.insert("open_loop_service_mean_us".into(), json!(service_us));
        if service_us.is_finite() && service_us > 0.0 {
            1e6 / service_us
        } else {
            closed_capacity
        }
    } else {
        closed_capacity
    };
    resolved.insert("capacity_rps".into(), json!(capacity));
    let rps = resolve_rps(&spec, capacity);
    resolved.insert("rps".into(), json!(rps));

    // ---------------------------------------------------------------- batch alone
    let batch_configs = spec.batch_configs();
    let t = Instant::now();
    let mut alone: BTreeMap<String, f64> = BTreeMap::new();
    if !batch_configs.is_empty() {
        for &k in &spec.kernels {
            check_stop(stop)?;
            progress.say(&format!(
                "measuring {k} alone on cpu {} ...",
                rig.lanes.batch_cpus[0]
            ));
            let ups = batch_alone(&opts, &rig, k, stop)?;
            alone.insert(k.name().into(), ups);
        }
    }
    resolved.insert("batch_alone_units_per_s".into(), json!(alone));
    progress.charge("batch_alone", t);

    let mut spec_json = serde_json::to_value(&spec).unwrap_or(json!({}));
    let set_spec = |result: &mut ResultFile,
                    spec_json: &mut serde_json::Value,
                    resolved: &serde_json::Map<String, serde_json::Value>| {
        if let Some(o) = spec_json.as_object_mut() {
            o.insert(
                "resolved".into(),
                serde_json::Value::Object(resolved.clone()),
            );
        }
        result.spec = spec_json.clone();
    };
    set_spec(&mut result, &mut spec_json, &resolved);
    let t = Instant::now();
    result.save(&opts.json_path)?;
    progress.charge("saving", t);

    let presweep = if spec.slo_p99_ms.value().is_some() {
        0
    } else {
        rps.len() * PRESWEEP_REPS as usize
    };
    let slots = round_slots(&batch_configs, &spec.kernels);
    progress.total = presweep + rps.len() * slots.len() * spec.reps as usize;
    progress.done = 0;
    progress.started = Instant::now();
    let mut interrupted = false;
    let ctx = PointCtx {
        opts: &opts,
        spec: &spec,
        addr,
        steps_per_us,
        alone: &alone,
        stop,
    };

    // ---------------------------------------------------------------- the SLO
    // With `auto`, a quick LC-alone pre-sweep ([`PRESWEEP_REPS`] invocations
    // per load, median p99, with seeds of their own) finds the knee; the LC-alone points of the table
    // are measured again below, interleaved with the batch configurations.
    let (slo_us, slo_source) = if spec.slo_p99_ms.value().is_some() {
        derive_slo(&spec, &[], demand_p99)
    } else {
        let mut pre: Vec<(f64, f64)> = Vec::new();
        let mut pre_all: Vec<(f64, Vec<f64>)> = Vec::new();
        'loads: for &r in &rps {
            let mut p99s = Vec::with_capacity(PRESWEEP_REPS as usize);
            for i in 0..PRESWEEP_REPS {
                match run_measured(
                    &ctx,
                    &mut rig,
                    &mut progress,
                    Phase::PreSweep,
                    Inv::lc_alone(r, PRESWEEP_ROUND - i),
                ) {
                    Ok((rep, _, _)) => p99s.push(rep.latency_us.p99),
                    Err(BenchError::Interrupted) => {
                        interrupted = true;
                        break 'loads;
                    }
                    Err(e) => return Err(e),
                }
            }
            let mut sorted = p99s.clone();
            sorted.sort_by(f64::total_cmp);
            pre.push((r, sorted[sorted.len() / 2]));
            pre_all.push((r, p99s));
        }
        resolved.insert("knee_presweep_p99_us".into(), json!(pre));
        resolved.insert("knee_presweep_p99_us_all".into(), json!(pre_all));
        let (slo, src) = derive_slo(&spec, &pre, demand_p99);
        (
            slo,
            format!(
                "{src}, from an LC-alone pre-sweep (median p99 of {PRESWEEP_REPS} invocations per load)"
            ),
        )
    };
    resolved.insert("slo_p99_us".into(), json!(slo_us));
    resolved.insert("slo_source".into(), json!(slo_source));
    resolved.insert("order".into(), json!(ORDER_NOTE));
    resolved.insert("seeds".into(), json!(SEEDS_NOTE));
    resolved.insert(
        "budget_source".into(),
        json!(match spec.budget_us {
            Auto::Value(_) => "given".to_string(),
            Auto::Auto => BUDGET_NOTE.to_string(),
        }),
    );
    resolved.insert("reps_planned".into(), json!(spec.reps));
    set_spec(&mut result, &mut spec_json, &resolved);
    let t = Instant::now();
    result.save(&opts.json_path)?;
    progress.charge("saving", t);
    if let Some(s) = slo_us {
        progress.say(&format!("SLO p99 {:.2} ms ({slo_source})", s / 1e3));
    }

    // ---------------------------------------------------------------- every load
    // Per load, in rounds: round 1 of every (configuration, kernel), LC
    // alone first, then round 2 of every one, …; every configuration's
    // invocation of a round draws the same seed. The file is saved after
    // every round.
    let mut accs: Vec<PointAcc> = Vec::new();
    let mut budgets: BTreeMap<String, f64> = BTreeMap::new();
    'outer: for &r in &rps {
        if interrupted {
            break;
        }
        let first = accs.len();
        accs.extend(slots.iter().map(|&(c, k)| PointAcc::new(c, k, r)));
        let mut budget = spec.budget_us.value();
        for (round, i) in interleaved(slots.len(), spec.reps) {
            let (config, kernel) = slots[i];
            let inv = Inv {
                config,
                kernel,
                rps: r,
                budget_us: config.uses_budget().then(|| budget.unwrap_or(0.0)),
                round,
            };
            match run_measured(&ctx, &mut rig, &mut progress, Phase::Main, inv) {
                Ok(m) => accs[first + i].push(m),
                Err(BenchError::Interrupted) => {
                    interrupted = true;
                    break 'outer;
                }
                Err(e) => return Err(e),
            }
            if config == ConfigKind::LcAlone && round == 0 && budget.is_none() {
                let lc_p99 = accs[first].reps[0].latency_us.p99;
                let b = budget_us(&spec, slo_us, Some(lc_p99));
                budget = Some(b);
                budgets.insert(format!("{r}"), b);
                resolved.insert("budget_us_by_rps".into(), json!(budgets));
                set_spec(&mut result, &mut spec_json, &resolved);
            }
            if i + 1 == slots.len() {
                let t = Instant::now();
                result.points = points_of(&accs, slo_us);
                result.save(&opts.json_path)?;
                progress.charge("saving", t);
            }
        }
    }
    // An interruption keeps every invocation finished so far.
    result.points = points_of(&accs, slo_us);
    progress.finish();
    resolved.insert("load_after".into(), json!(loadavg()));
    resolved.insert("interrupted".into(), json!(interrupted));
    set_spec(&mut result, &mut spec_json, &resolved);
    let t = Instant::now();
    result.save(&opts.json_path)?;
    progress.charge("saving", t);
    // The breakdown covers the sweep up to here; the final save repeats
    // with it (a few ms, not counted).
    let wall = started.elapsed().as_secs_f64();
    let known: f64 = progress
        .parts
        .iter()
        .filter(|(k, _)| **k != "points_batch_start_stop")
        .map(|(_, v)| v)
        .sum();
    progress.parts.insert("other", (wall - known).max(0.0));
    let breakdown: serde_json::Map<String, serde_json::Value> = PARTS
        .iter()
        .filter_map(|k| progress.parts.get(k).map(|v| ((*k).to_string(), json!(v))))
        .collect();
    resolved.insert("wall_s".into(), json!(wall));
    resolved.insert(
        "wall_breakdown_s".into(),
        serde_json::Value::Object(breakdown),
    );
    set_spec(&mut result, &mut spec_json, &resolved);
    result.save(&opts.json_path)?;
    drop(rig);
    Ok(SweepOutcome {
        result,
        json_path: opts.json_path.clone(),
        interrupted,
        notes,
    })
}

/// How batch utilization is counted, for the result file and the report.
pub fn utilization_method(nap: NapKind) -> String {
    let elfen = match nap {
        NapKind::Futex => {
            "Elfen batch threads nap in futex (off-CPU), so their on-CPU time is batch execution"
        }
        NapKind::Spin | NapKind::Hybrid => {
            "Elfen batch threads nap by spinning (on-CPU), so their execution is the runtime's \
             run time (wake to nap) minus the share of their run-queue wait that falls in it \
             (wait spread over run and nap time in proportion), capped by on-CPU time; \
             extra.batch_util_low/high bound it"
        }
    };
    format!(
        "utilization = sum over lanes of busy fraction (one fully busy lane = 1.0). LC: time the \
         worker spends in requests (begin to end of each). Batch: time batch code executed, \
         summed over batch threads: unmanaged threads never nap, so their on-CPU time from \
         /proc/<pid>/task/<tid>/schedstat (excludes time preempted or throttled); {elfen}. \
         The harness's own threads (generator, dispatcher) are not counted; their share is \
         extra.harness_util."
    )
}

/// `/proc/loadavg`: the 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn check_stop(stop: &AtomicBool) -> Result<()> {
    if stop.load(Ordering::Relaxed) {
        Err(BenchError::Interrupted)
    } else {
        Ok(())
    }
}

fn find_worker_tid() -> u32 {
    let pid = std::process::id();
    for tid in crate::sys::thread_ids(pid) {
        if std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
            .is_ok_and(|c| c.trim() == "elfen-lc-worker")
        {
            return tid;
        }
    }
    0
}

/// Creates a private page (`elfen-bench-<pid>` in /dev/shm) for the pair, or
/// attaches the one given with `page` (which must exist and have the pair's
/// lanes). Returns the page and the lane indices of request and batch lanes.
fn open_page(spec: &BenchSpec, pair: &elfen_topo::Pair) -> Result<(Arc<Page>, u32, Vec<u32>)> {
    match &spec.page {
        Some(name) => {
            let path = page_path(name);
            if !path.exists() {
                return Err(BenchError::Config(format!(
                    "signal page {} does not exist (--page {name}): start the controller that \
                     creates it, or leave --page out to let the harness create a private page",
                    path.display()
                )));
            }
            let page = Page::attach(&path, Access::Controller)?;
            let lane_of = |cpu: u32| {
                page.lane_of_cpu(cpu).ok_or_else(|| {
                    BenchError::Config(format!(
                        "signal page {} has no lane for cpu {cpu}",
                        path.display()
                    ))
                })
            };
            let r = lane_of(pair.request)?;
            let b = pair
                .batch
                .iter()
                .map(|&c| lane_of(c))
                .collect::<Result<Vec<_>>>()?;
            Ok((Arc::new(page), r, b))
        }
        None => {
            let path = page_path(&format!("elfen-bench-{}", std::process::id()));
            let mut ps = PageSpec::for_pairs(
                &[(pair.request, pair.batch.clone())],
                elfen_policy::PolicyKind::BorrowIdle.id(),
                0,
            );
            ps.replace = true;
            let page = Page::create(&path, &ps)?;
            let b = (1..=pair.batch.len() as u32).collect();
            Ok((Arc::new(page), 0, b))
        }
    }
}

struct PointCtx<'a> {
    opts: &'a SweepOptions,
    spec: &'a BenchSpec,
    addr: std::net::SocketAddr,
    steps_per_us: f64,
    alone: &'a BTreeMap<String, f64>,
    stop: &'a AtomicBool,
}

fn nap_id(n: NapKind) -> u32 {
    match n {
        NapKind::Spin => elfen_shm::nap::SPIN,
        NapKind::Futex => elfen_shm::nap::FUTEX,
        NapKind::Hybrid => elfen_shm::nap::HYBRID,
    }
}

/// Writes policy, budget and nap backend into the controller lines of the
/// request lane and its batch lanes.
fn configure_page(rig: &Rig, policy: u32, budget_ns: u64, nap: u32) -> Result<()> {
    let lanes =
        std::iter::once(rig.lanes.request_lane).chain(rig.lanes.batch_lanes.iter().copied());
    for lane in lanes {
        let c = rig.page.read_controller(lane)?;
        rig.page.write_controller(
            lane,
            &LaneSpec {
                cpu: c.cpu,
                role: c.role,
                partners: c.partners().to_vec(),
                policy,
                budget_ns,
                nap,
                hybrid_spin_ns: c.hybrid_spin_ns,
                ref_ipc_milli: c.ref_ipc_milli,
            },
        )?;
    }
    Ok(())
}

fn batch_plan(spec: &BenchSpec, rig: &Rig, config: ConfigKind, kernel: KernelKind) -> BatchPlan {
    let l = &rig.lanes;
    let threads: Vec<ThreadPlan> = if config.policy().is_some() {
        l.batch_lanes
            .iter()
            .map(|&lane| ThreadPlan {
                cpu: None,
                lane: Some(lane),
            })
            .collect()
    } else {
        match config.placement() {
            Placement::None => Vec::new(),
            Placement::BatchLanes => l
                .batch_cpus
                .iter()
                .map(|&c| ThreadPlan {
                    cpu: Some(c),
                    lane: None,
                })
                .collect(),
            Placement::EveryLane => std::iter::once(l.request_cpu)
                .chain(l.batch_cpus.iter().copied())
                .map(|c| ThreadPlan {
                    cpu: Some(c),
                    lane: None,
                })
                .collect(),
            Placement::CgroupBatchLanes => l
                .batch_cpus
                .iter()
                .map(|_| ThreadPlan {
                    cpu: None,
                    lane: None,
                })
                .collect(),
        }
    };
    BatchPlan {
        kernel,
        stream_mib: spec.batch.stream_mib,
        threads,
        page: config
            .policy()
            .is_some()
            .then(|| rig.page.path().to_path_buf()),
        nap: spec.batch.nap,
    }
}

fn start_batch(
    ctx: &PointCtx,
    rig: &Rig,
    config: ConfigKind,
    kernel: KernelKind,
    budget_us: Option<f64>,
) -> Result<BatchProcess> {
    let policy = config
        .policy()
        .unwrap_or(elfen_policy::PolicyKind::Unmanaged);
    let budget_ns = budget_us.map(|b| (b * 1e3).round() as u64).unwrap_or(0);
    configure_page(rig, policy.id(), budget_ns, nap_id(ctx.spec.batch.nap))?;
    let plan = batch_plan(ctx.spec, rig, config, kernel);
    let bp = BatchProcess::spawn(&ctx.opts.worker_exe, &plan, Duration::from_secs(20))?;
    match config {
        ConfigKind::Cpuset => rig
            .cpuset
            .as_ref()
            .expect("cpuset cgroup created in pre-flight")
            .add_process(bp.pid())?,
        ConfigKind::CfsQuota => rig
            .quota
            .as_ref()
            .expect("quota cgroup created in pre-flight")
            .add_process(bp.pid())?,
        _ => {}
    }
    bp.go();
    Ok(bp)
}

/// Units per second of `kernel` alone on the first batch lane (no load).
fn batch_alone(
    opts: &SweepOptions,
    rig: &Rig,
    kernel: KernelKind,
    stop: &AtomicBool,
) -> Result<f64> {
    let plan = BatchPlan {
        kernel,
        stream_mib: opts.spec.batch.stream_mib,
        threads: vec![ThreadPlan {
            cpu: Some(rig.lanes.batch_cpus[0]),
            lane: None,
        }],
        page: None,
        nap: opts.spec.batch.nap,
    };
    let bp = BatchProcess::spawn(&opts.worker_exe, &plan, Duration::from_secs(20))?;
    bp.go();
    std::thread::sleep(Duration::from_millis(opts.spec.batch.settle_ms));
    let s0 = bp.sample();
    let until = Instant::now() + Duration::from_secs_f64(opts.spec.batch.alone_s);
    while Instant::now() < until {
        check_stop(stop)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = bp.sample().since(&s0);
    let secs = d.at_ns as f64 / 1e9;
    Ok(d.total().units as f64 / secs.max(1e-9))
}

/// Counters at a window edge.
struct EdgeSample {
    at_ns: u64,
    lc_busy_ns: u64,
    harness_cpu_ns: u64,
    batch: Option<BatchSample>,
    /// Machine busy and steal ticks (`/proc/stat`).
    machine: (u64, u64),
    /// Ticks of this process and the batch process.
    own_ticks: u64,
}

/// One invocation to run.
#[derive(Debug, Clone, Copy)]
struct Inv {
    config: ConfigKind,
    kernel: Option<KernelKind>,
    rps: f64,
    budget_us: Option<f64>,
    /// The round (0-based; [`PRESWEEP_ROUND`] for the probe and pre-sweep):
    /// with the load, it alone sets the seed.
    round: u32,
}

impl Inv {
    fn lc_alone(rps: f64, round: u32) -> Inv {
        Inv {
            config: ConfigKind::LcAlone,
            kernel: None,
            rps,
            budget_us: None,
            round,
        }
    }
}

/// A measured invocation: its `Rep` and the idle-period and service-time
/// distributions of its window.
type Measured = (Rep, Distribution, Distribution);

/// Runs one invocation: a fresh batch process (if the configuration has
/// one) is started, settles, runs through the invocation and is killed, so
/// every invocation of the interleaved rounds starts alike. An invocation
/// during which other processes or the host took more than
/// `disturbed_lanes` of the machine is run again, with the same seed (up to
/// `disturbed_retries` times and while the sweep's re-runs have taken less
/// than `rerun_budget_s`; the least disturbed attempt is kept and
/// `extra.disturbed_retries` counts the re-runs).
fn run_measured(
    ctx: &PointCtx,
    rig: &mut Rig,
    progress: &mut Progress,
    phase: Phase,
    inv: Inv,
) -> Result<Measured> {
    check_stop(ctx.stop)?;
    let spec = ctx.spec;
    let what = match inv.kernel {
        Some(k) => format!("{} · {k} @ {:.0} rps", inv.config, inv.rps),
        None => format!("{} @ {:.0} rps", inv.config, inv.rps),
    };
    let (label, part, first) = match phase {
        Phase::Probe => (format!("capacity probe: {what}"), "probe", true),
        Phase::PreSweep => (format!("knee pre-sweep: {what}"), "pre_sweep", true),
        Phase::Main => (
            format!("round {}/{} · {what}", inv.round + 1, spec.reps),
            "points",
            inv.config == ConfigKind::LcAlone,
        ),
    };
    progress.show(&label, first);
    let seed = invocation_seed(spec.seed, inv.rps, inv.round);
    let mut kept = attempt(ctx, rig, progress, part, inv, seed)?;
    let mut retries = 0;
    while should_rerun(disturbance(&kept.0), retries, progress.rerun_s, spec) {
        retries += 1;
        let t = Instant::now();
        let again = attempt(
            ctx,
            rig,
            progress,
            if phase == Phase::Main {
                "re_runs"
            } else {
                part
            },
            inv,
            seed,
        );
        progress.rerun_s += t.elapsed().as_secs_f64();
        let again = again?;
        if disturbance(&again.0) < disturbance(&kept.0) {
            kept = again;
        }
    }
    kept.0
        .extra
        .insert("disturbed_retries".into(), f64::from(retries));
    if phase == Phase::Main {
        kept.0
            .extra
            .insert("round".into(), f64::from(inv.round + 1));
    }
    progress.done += 1;
    Ok(kept)
}

/// Whether an invocation that took `disturbance` lanes of foreign CPU and
/// steal, already re-run `retries` times, is run again, given the sweep's
/// re-runs so far took `rerun_s` seconds.
fn should_rerun(disturbance: f64, retries: u32, rerun_s: f64, spec: &BenchSpec) -> bool {
    disturbance > spec.disturbed_lanes
        && retries < spec.disturbed_retries
        && rerun_s < spec.rerun_budget_s
}

/// One attempt of an invocation, batch process included; its wall time is
/// charged to `part` (and the batch's start, settle and stop, in the main
/// rounds, also to `points_batch_start_stop`).
fn attempt(
    ctx: &PointCtx,
    rig: &mut Rig,
    progress: &mut Progress,
    part: &'static str,
    inv: Inv,
    seed: u64,
) -> Result<Measured> {
    let t0 = Instant::now();
    let mut bp = match inv.kernel {
        Some(k) => {
            let bp = start_batch(ctx, rig, inv.config, k, inv.budget_us)?;
            std::thread::sleep(Duration::from_millis(ctx.spec.batch.settle_ms));
            Some(bp)
        }
        None => None,
    };
    let started = t0.elapsed();
    let m = run_rep(ctx, rig, &mut bp, inv, seed);
    let t1 = Instant::now();
    drop(bp);
    let overhead = started + t1.elapsed();
    progress.charge(part, t0);
    if part == "points" {
        *progress
            .parts
            .entry("points_batch_start_stop")
            .or_insert(0.0) += overhead.as_secs_f64();
    }
    m
}

/// What an invocation sends, from its seed alone: Poisson arrivals at `rps`
/// over warm-up and window, then the request sequence (shuffled passes over
/// the set) drawn from the same generator. Nothing about the configuration
/// enters, so equal seeds send equal invocations.
pub fn invocation_plan(
    spec: &BenchSpec,
    set: &RequestSet,
    steps_per_us: f64,
    rps: f64,
    seed: u64,
) -> InvocationPlan {
    let mut rng = SmallRng::seed_from_u64(seed);
    let warmup_ns = (spec.warmup_s * 1e9) as u64;
    let duration_ns = (spec.duration_s * 1e9) as u64;
    let offsets = poisson_offsets(rps, warmup_ns + duration_ns, &mut rng);
    let steps: Vec<u64> = set
        .sequence(offsets.len(), &mut rng)
        .iter()
        .map(|d| (d * steps_per_us).round().max(1.0) as u64)
        .collect();
    InvocationPlan {
        offsets,
        steps,
        warmup_ns,
        duration_ns,
        drain_ns: (spec.drain_s * 1e9) as u64,
    }
}

/// One invocation of a point: its `Rep` and the idle-period and
/// service-time distributions of its measured window.
fn run_rep(
    ctx: &PointCtx,
    rig: &mut Rig,
    bp: &mut Option<BatchProcess>,
    inv: Inv,
    seed: u64,
) -> Result<Measured> {
    let spec = ctx.spec;
    let Inv {
        config,
        kernel,
        rps,
        budget_us,
        ..
    } = inv;
    let elfen = config.policy().is_some();
    let svc = rig.service.as_ref().expect("service");
    let stats = svc.stats().clone();
    check_stop(ctx.stop)?;
    let mut idle_kept = crate::service::idle_buckets();
    let mut service_kept = latency_buckets();
    {
        let plan = invocation_plan(spec, &rig.set, ctx.steps_per_us, rps, seed);
        let mut edges: Vec<EdgeSample> = Vec::new();
        let exclude = [rig.worker_tid];
        let inv = run_invocation(ctx.addr, &plan, &rig.lanes.side_cpus, ctx.stop, |edge| {
            if edge == Edge::Start {
                stats.start_recording();
            }
            edges.push(EdgeSample {
                at_ns: mono_ns(),
                lc_busy_ns: stats.busy_now_ns(),
                harness_cpu_ns: crate::sys::process_cpu_ns_except(&exclude),
                batch: bp.as_ref().map(|b| b.sample()),
                machine: crate::sys::machine_ticks(),
                own_ticks: crate::sys::process_ticks(std::process::id())
                    + bp.as_ref()
                        .map_or(0, |b| crate::sys::process_ticks(b.pid())),
            });
            if edge == Edge::End {
                let (idle, service) = stats.stop_recording();
                idle_kept = idle;
                service_kept = service;
            }
        })?;
        if let Some(b) = bp.as_mut() {
            if !b.alive() {
                return Err(BenchError::Batch(format!(
                    "the {config} batch process (pid {}) died during the invocation",
                    b.pid()
                )));
            }
        }
        let [e0, e1] = &edges[..] else {
            return Err(BenchError::Service("window edges missing".into()));
        };
        let window_s = (e1.at_ns - e0.at_ns) as f64 / 1e9;
        let lc = (e1.lc_busy_ns - e0.lc_busy_ns) as f64 / 1e9 / window_s;
        let harness = (e1.harness_cpu_ns.saturating_sub(e0.harness_cpu_ns)) as f64 / 1e9 / window_s;
        let mut extra = BTreeMap::new();
        extra.insert("window_s".into(), window_s);
        extra.insert("harness_util".into(), harness);
        // Other processes on this machine (and the host's steal), so a point
        // measured under foreign load can be recognized.
        let hz = crate::sys::ticks_per_s();
        let busy = e1.machine.0.saturating_sub(e0.machine.0) as f64;
        let own = e1.own_ticks.saturating_sub(e0.own_ticks) as f64;
        extra.insert(
            "foreign_util".into(),
            ((busy - own) / hz / window_s).max(0.0),
        );
        extra.insert(
            "steal_util".into(),
            e1.machine.1.saturating_sub(e0.machine.1) as f64 / hz / window_s,
        );
        extra.insert("sent".into(), inv.sent as f64);
        let (mut batch_util, mut units_per_s, mut progress_v, mut naps, mut wakes) =
            (0.0, None, None, None, None);
        if let (Some(b0), Some(b1)) = (&e0.batch, &e1.batch) {
            let d = b1.since(b0);
            let (mut est, mut lo, mut hi) = (0.0, 0.0, 0.0);
            for t in &d.threads {
                let (e, l, h) = batch::executed_ns(t, elfen, spec.batch.nap);
                est += e;
                lo += l;
                hi += h;
            }
            let secs = d.at_ns as f64 / 1e9;
            batch_util = est / 1e9 / secs;
            let tot = d.total();
            extra.insert("batch_util_low".into(), lo / 1e9 / secs);
            extra.insert("batch_util_high".into(), hi / 1e9 / secs);
            extra.insert(
                "batch_on_cpu_util".into(),
                tot.on_cpu_ns as f64 / 1e9 / secs,
            );
            extra.insert("batch_wait_util".into(), tot.wait_ns as f64 / 1e9 / secs);
            let ups = tot.units as f64 / secs;
            units_per_s = Some(ups);
            if let Some(a) = kernel.and_then(|k| ctx.alone.get(k.name())) {
                if *a > 0.0 {
                    progress_v = Some(ups / a);
                }
            }
            if elfen {
                naps = Some(tot.naps as f64 / secs);
                wakes = Some(tot.wakes as f64 / secs);
                extra.insert("corun_util".into(), tot.corun_ns as f64 / 1e9 / secs);
                extra.insert("nap_util".into(), tot.nap_ns as f64 / 1e9 / secs);
            }
        }
        if let Some(b) = budget_us {
            extra.insert("budget_us".into(), b);
        }
        if inv.service_us.total() > 0 {
            for (name, d, q) in [
                ("service_p50_us", &inv.service_us, 0.5),
                ("service_p99_us", &inv.service_us, 0.99),
                ("queued_p99_us", &inv.queued_us, 0.99),
                ("outside_p50_us", &inv.outside_us, 0.5),
                ("outside_p99_us", &inv.outside_us, 0.99),
            ] {
                extra.insert(name.into(), d.quantile(q).unwrap_or(0.0));
            }
        }
        let rep = Rep {
            rps_achieved: inv.rps_achieved,
            requests: inv.outcome.requests,
            errors: inv.outcome.errors,
            latency_us: percentiles_us(&inv.outcome.hist),
            utilization: Utilization {
                lc,
                batch: batch_util,
                total: lc + batch_util,
            },
            batch_units_per_s: units_per_s,
            batch_progress: progress_v,
            naps_per_s: naps,
            wakes_per_s: wakes,
            histogram: if spec.keep_histograms {
                encode_histogram(&inv.outcome.hist)
            } else {
                None
            },
            extra,
        };
        Ok((rep, idle_kept, service_kept))
    }
}

/// Lanes' worth of CPU taken by other processes and by the host during an
/// invocation's window.
fn disturbance(r: &Rep) -> f64 {
    r.extra.get("foreign_util").copied().unwrap_or(0.0)
        + r.extra.get("steal_util").copied().unwrap_or(0.0)
}

fn merge(into: &mut Distribution, from: &Distribution) {
    if into.edges == from.edges {
        for (a, b) in into.counts.iter_mut().zip(&from.counts) {
            *a += b;
        }
        if into.sums.len() == from.sums.len() {
            for (a, b) in into.sums.iter_mut().zip(&from.sums) {
                *a += b;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knee_is_where_the_curve_turns_up() {
        // flat, then a wall: the knee is the last point before it
        let pts = [
            (100.0, 1.0),
            (200.0, 1.1),
            (300.0, 1.3),
            (400.0, 3.0),
            (500.0, 9.0),
        ];
        assert_eq!(knee_index(&pts, 0.9), Some(2));
        // linear: every point is on the chord; the first maximum wins
        let lin = [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)];
        assert!(knee_index(&lin, 0.0).is_some());
        // flat everywhere: the highest load
        assert_eq!(knee_index(&[(1.0, 5.0), (2.0, 5.0)], 5.0), Some(1));
        assert_eq!(knee_index(&[], 1.0), None);
    }

    #[test]
    fn slo_and_budget_derivation() {
        let mut spec = BenchSpec::default();
        let pts = [(100.0, 1000.0), (200.0, 1200.0), (300.0, 4000.0)];
        let (slo, src) = derive_slo(&spec, &pts, 900.0);
        assert_eq!(slo, Some(1200.0));
        // not monotonic below the knee: the SLO covers every load up to it
        let u = [
            (100.0, 1500.0),
            (200.0, 1200.0),
            (300.0, 1250.0),
            (400.0, 5000.0),
        ];
        assert_eq!(derive_slo(&spec, &u, 1000.0).0, Some(1500.0));
        assert!(src.contains("knee") && src.contains("200"), "{src}");
        assert_eq!(budget_us(&spec, slo, Some(1000.0)), 200.0);
        assert_eq!(budget_us(&spec, slo, Some(4000.0)), 0.0, "never negative");
        spec.slo_p99_ms = Auto::Value(5.0);
        spec.budget_us = Auto::Value(300.0);
        assert_eq!(derive_slo(&spec, &pts, 900.0).0, Some(5000.0));
        assert_eq!(budget_us(&spec, Some(5000.0), Some(1000.0)), 300.0);
    }

    #[test]
    fn automatic_loads_round_to_two_digits() {
        let spec = BenchSpec {
            rps_fractions: vec![0.2, 0.4, 0.4],
            ..BenchSpec::default()
        };
        assert_eq!(resolve_rps(&spec, 3333.0), vec![670.0, 1300.0]);
        let given = BenchSpec {
            rps: vec![300.0, 100.0],
            ..BenchSpec::default()
        };
        assert_eq!(resolve_rps(&given, 1.0), vec![100.0, 300.0]);
        assert_eq!(round2(1234.0), 1200.0);
        assert_eq!(round2(0.0), 0.0);
    }

    #[test]
    fn reruns_stop_at_the_retry_limit_and_the_time_budget() {
        let spec = BenchSpec::default(); // 0.05 lanes, 2 retries, 60 s
        assert!(!should_rerun(0.04, 0, 0.0, &spec), "not disturbed");
        assert!(should_rerun(0.06, 0, 0.0, &spec));
        assert!(should_rerun(0.06, 1, 59.9, &spec));
        assert!(!should_rerun(0.06, 2, 0.0, &spec), "retry limit");
        assert!(!should_rerun(0.9, 0, 60.0, &spec), "budget spent");
        let none = BenchSpec {
            rerun_budget_s: 0.0,
            ..BenchSpec::default()
        };
        assert!(!should_rerun(0.9, 0, 0.0, &none));
    }

    #[test]
    fn seeds_are_common_to_every_configuration_of_a_round() {
        // The seed takes no configuration or kernel at all: equal for every
        // (configuration, kernel) of a load and round, by construction.
        let s = |rps: f64, round: u32| invocation_seed(1, rps, round);
        assert_eq!(s(800.0, 0), s(800.0, 0));
        let mut seen = std::collections::HashSet::new();
        for rps in [440.0, 800.0, 1200.0] {
            for round in 0..5 {
                assert!(seen.insert(s(rps, round)), "{rps} rps round {round}");
            }
            for i in 0..PRESWEEP_REPS {
                assert!(
                    seen.insert(s(rps, PRESWEEP_ROUND - i)),
                    "pre-sweep {rps} {i}"
                );
            }
        }
        assert_ne!(invocation_seed(1, 800.0, 0), invocation_seed(2, 800.0, 0));
        // Equal seeds send equal invocations: same arrivals, same requests.
        let spec = BenchSpec {
            duration_s: 0.2,
            warmup_s: 0.05,
            ..BenchSpec::default()
        };
        let set = demand::build(
            &crate::config::DemandSpec::Exponential {
                mean_us: 300.0,
                set_size: 100,
            },
            1,
        )
        .unwrap();
        let a = invocation_plan(&spec, &set, 50.0, 800.0, s(800.0, 1));
        let b = invocation_plan(&spec, &set, 50.0, 800.0, s(800.0, 1));
        assert_eq!((&a.offsets, &a.steps), (&b.offsets, &b.steps));
        assert!(a.offsets.len() > 100, "{}", a.offsets.len());
        let c = invocation_plan(&spec, &set, 50.0, 800.0, s(800.0, 2));
        assert_ne!(a.offsets, c.offsets, "rounds differ");
        assert_ne!(a.steps[..50], c.steps[..50], "rounds differ");
    }

    #[test]
    fn rounds_interleave_every_configuration_with_lc_alone_first() {
        let cfgs = [
            ConfigKind::Naive,
            ConfigKind::BorrowIdle,
            ConfigKind::LcAlone,
        ];
        let ks = [KernelKind::Stream, KernelKind::Matrix];
        let slots = round_slots(&cfgs, &ks);
        assert_eq!(
            slots,
            vec![
                (ConfigKind::LcAlone, None),
                (ConfigKind::Naive, Some(KernelKind::Stream)),
                (ConfigKind::BorrowIdle, Some(KernelKind::Stream)),
                (ConfigKind::Naive, Some(KernelKind::Matrix)),
                (ConfigKind::BorrowIdle, Some(KernelKind::Matrix)),
            ]
        );
        let order = interleaved(slots.len(), 3);
        assert_eq!(order.len(), 15);
        // round r of every slot before round r + 1 of any
        for (n, &(round, i)) in order.iter().enumerate() {
            assert_eq!((round as usize, i), (n / 5, n % 5));
        }
        assert!(interleaved(5, 0).is_empty());
    }

    #[test]
    fn an_interrupted_sweep_keeps_its_partial_points() {
        let rep = |p99: f64| Rep {
            rps_achieved: 800.0,
            requests: 800,
            errors: 0,
            latency_us: elfen_results::Percentiles {
                p50: p99 / 4.0,
                p95: p99 / 2.0,
                p99,
                p999: p99,
                max: p99,
                mean: p99 / 3.0,
            },
            utilization: Utilization {
                lc: 0.5,
                batch: 0.0,
                total: 0.5,
            },
            batch_units_per_s: None,
            batch_progress: None,
            naps_per_s: None,
            wakes_per_s: None,
            histogram: None,
            extra: BTreeMap::new(),
        };
        let empty = || (crate::service::idle_buckets(), latency_buckets());
        let mut accs: Vec<PointAcc> = round_slots(&[ConfigKind::BorrowIdle], &[KernelKind::Stream])
            .iter()
            .map(|&(c, k)| PointAcc::new(c, k, 800.0))
            .collect();
        accs.push(PointAcc::new(ConfigKind::LcAlone, None, 1600.0));
        // two rounds of lc_alone, one of borrow idle: stopped in round 2
        for p99 in [1000.0, 3000.0] {
            let (i, s) = empty();
            accs[0].push((rep(p99), i, s));
        }
        let (i, s) = empty();
        accs[1].push((rep(2000.0), i, s));
        let pts = points_of(&accs, Some(2500.0));
        assert_eq!(pts.len(), 2, "the point without invocations is left out");
        assert_eq!(pts[0].reps.len(), 2);
        assert_eq!(pts[0].summary.latency_us["p99"].median, 2000.0);
        assert_eq!(pts[0].summary.slo_met, Some(true));
        assert_eq!(pts[1].reps.len(), 1);
        assert_eq!(pts[1].batch.as_deref(), Some("stream"));
        assert!(pts[1].distributions.contains_key("idle_periods"));
    }
}
