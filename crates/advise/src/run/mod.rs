//! The **run** (the record side): the LC alone, then each probe, the LC
//! alone again, then each knob — every one a window after a settling
//! time, watched every `watch` interval against the max slowdown — and the
//! study of what was recorded. Everything started here is stopped when
//! its phase ends, also on an error or Ctrl-C (the helpers and daemons
//! are RAII guards; a daemon gets one SIGTERM and restores what it
//! changed).
//!
//! [`window`] measures one window, [`phases`] runs the probes and knobs,
//! [`conclude`] applies the study.

mod conclude;
mod phases;
mod window;

use crate::batch::HelperCommand;
use crate::latency::{LatencyProbe, ProbeSpec};
use crate::lc::Lc;
use crate::offered;
use crate::record::{AdviseResult, Knob, LcInfo, Params, Probe, Reference, Window};
use crate::study;
use anyhow::bail;
use elfen_cmd::proc::SchedClass;
use elfen_cmd::progress::Progress;
use elfen_daemon::LcTarget;
use elfen_daemon::lc::LcOwner;
use elfen_kernels::KernelKind;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use window::{Nothing, Runner};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The LC service.
    pub target: LcTarget,
    /// Whose processes a name adopts (`[lc] user`).
    pub user: Option<String>,
    /// Lane pairing (`None`: elfen-topo's plan).
    pub pairs: Option<String>,
    /// Measured window.
    pub window: Duration,
    /// Settling time before each window.
    pub warmup: Duration,
    /// Watch interval of the stop rule.
    pub watch: Duration,
    /// The stop rule's limit, × solo.
    pub max_slowdown: f64,
    /// The verdict's threshold on contention.
    pub threshold: f64,
    /// The busy floor, % of a lane.
    pub min_busy_pct: f64,
    /// The knobs' batch kernel.
    pub batch_kernel: KernelKind,
    /// The latency probe.
    pub probe: Option<ProbeSpec>,
    /// Its rate.
    pub probe_rps: f64,
    /// The budget policies' budget (`None`: from the solo run).
    pub budget_us: Option<u64>,
    /// Probes to run.
    pub probes: Vec<Probe>,
    /// Knobs to run.
    pub knobs: Vec<Knob>,
    /// The `elfen` executable (the daemon and the batch helper).
    pub exe: PathBuf,
    /// Where the cgroup hierarchies are (checked for leftovers).
    pub cgroup_root: PathBuf,
    /// Print progress.
    pub progress: bool,
}

/// The latency probe's SCHED_FIFO priority: above the daemon's default
/// guard and writer priorities (50, 51), so that a guard occupying the
/// batch lane never delays advise's own requests (a client on another
/// machine is not delayed by it either).
pub const PROBE_FIFO_PRIORITY: u8 = 60;

/// Why a run ended early.
#[derive(Debug)]
enum Abort {
    /// Ctrl-C.
    Interrupted,
    /// The LC exited.
    LcLost,
}

/// The kernel the batch reference (no daemon, SCHED_IDLE on the partner
/// lane) runs: the probe that runs the knobs' batch kernel so.
fn reference_probe(kernel: KernelKind) -> Option<Probe> {
    match kernel {
        KernelKind::Stream => Some(Probe::StreamPartner),
        KernelKind::Matrix => Some(Probe::HogIdlePartner),
        _ => None,
    }
}

/// The user whose processes a name adopts (`--user`: a name or a uid).
fn owner(user: Option<&str>) -> anyhow::Result<LcOwner> {
    Ok(match user {
        Some(u) => LcOwner::Uid(
            u.parse()
                .ok()
                .or_else(|| elfen_cmd::proc::user_id(u))
                .ok_or_else(|| anyhow::anyhow!("--user {u:?}: no such user"))?,
        ),
        None => LcOwner::FirstFound,
    })
}

/// What was asked, as recorded (the budget is filled in after the first
/// solo window when not given).
fn params(o: &Options) -> Params {
    Params {
        target: o.target.to_string(),
        window_s: o.window.as_secs_f64(),
        warmup_s: o.warmup.as_secs_f64(),
        watch_ms: o.watch.as_millis() as u64,
        max_slowdown: o.max_slowdown,
        threshold: o.threshold,
        min_busy_pct: o.min_busy_pct,
        batch_kernel: o.batch_kernel.to_string(),
        latency_probe: o.probe.as_ref().map(|p| p.text.clone()),
        probe_rps: o.probe_rps,
        budget_us: o.budget_us.unwrap_or(0),
        budget_source: "--budget-us".into(),
        pairs: o.pairs.clone(),
        probes: o.probes.clone(),
        knobs: o.knobs.clone(),
    }
}

/// Starts the latency probe (if asked for) on `cpus`: SCHED_FIFO
/// [`PROBE_FIFO_PRIORITY`] as root, else SCHED_OTHER with a note.
fn start_probe(
    o: &Options,
    root: bool,
    cpus: &[u32],
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<LatencyProbe>> {
    let Some(spec) = &o.probe else {
        return Ok(None);
    };
    let sched = if root {
        SchedClass::Fifo(PROBE_FIFO_PRIORITY)
    } else {
        notes.push(
            "not root: the latency probe's threads run SCHED_OTHER, so batch work at the LC's \
             priority can delay the probe itself"
                .into(),
        );
        SchedClass::Other
    };
    let p = LatencyProbe::start(spec, o.probe_rps, cpus, sched)?;
    notes.push(format!(
        "latency probe {} at {} requests/s, beside the LC's own load",
        p.placement, o.probe_rps
    ));
    Ok(Some(p))
}

/// The LC's lane pair from its first solo window: the CPU it ran on most
/// must be a request lane. Notes an LC that ran on several CPUs.
fn lane_pair(
    solo: &Window,
    lc: &Lc,
    plan: &elfen_topo::PairPlan,
    notes: &mut Vec<String>,
) -> anyhow::Result<elfen_topo::Pair> {
    let request_cpu = crate::lc::request_cpu(solo, &lc.pids(), &lc.read())
        .ok_or_else(|| anyhow::anyhow!("the LC's CPU could not be found"))?;
    let Some(pair) = plan.iter().find(|p| p.request == request_cpu).cloned() else {
        let role = if plan.iter().any(|p| p.batch.contains(&request_cpu)) {
            "a batch lane"
        } else {
            "in no lane pair"
        };
        bail!(
            "the LC service ran on cpu {request_cpu}, {role} of {}: pin it to a request lane, or \
             give --pairs with cpu {request_cpu} as a request lane",
            plan.describe()
        );
    };
    let total: u64 = solo.signal_busy_ns.iter().sum();
    let busy_cpus: Vec<String> = solo
        .signal_busy_ns
        .iter()
        .enumerate()
        .filter(|(_, b)| **b > 0)
        .map(|(c, b)| format!("cpu {c} {:.0} %", 100.0 * *b as f64 / total.max(1) as f64))
        .collect();
    if busy_cpus.len() > 1 {
        notes.push(format!(
            "the LC ran on several CPUs ({}): its lane is taken as cpu {request_cpu}; pin it \
             there for a clean profile",
            busy_cpus.join(", ")
        ));
    }
    Ok(pair)
}

/// The budget policies' budget when not given, µs, and where it came
/// from: the paper's SLO − p99 alone with the SLO at (1 + threshold) ×
/// the probe's p99 alone; without a probe, threshold × the mean busy
/// period.
fn auto_budget(r: &Reference, threshold: f64) -> (u64, String) {
    let (b, src) = match r.p99_us {
        Some(p99) => (
            threshold * p99,
            format!(
                "the paper's SLO − p99 alone, with the SLO at (1 + threshold) × the probe's p99 \
                 alone ({p99:.0} µs)"
            ),
        ),
        None => (
            threshold * r.busy_per_period_us,
            "threshold × the LC's mean busy period (no latency known: give --budget-us or \
             --latency-probe)"
                .to_string(),
        ),
    };
    ((b.round() as u64).max(1), src)
}

/// Runs `elfen advise`. An LC that is not running or not under load, a
/// probe that cannot connect: an error, nothing left running or changed.
/// Ctrl-C or the LC's exit later: the record of what was measured, marked
/// `interrupted`.
pub fn advise(o: &Options, stop: &AtomicBool) -> anyhow::Result<AdviseResult> {
    let t0 = Instant::now();
    let created_unix_s = elfen_cmd::time::now_unix_s();
    let system = elfen_topo::SystemInfo::collect();
    let offered = offered::detect(&system);
    let topo = elfen_topo::Topology::detect()?;
    let plan = elfen_topo::plan_pairs(&topo, o.pairs.as_deref())?;
    let lc = Lc::open(o.target.clone(), owner(o.user.as_deref())?)?;
    let mut progress = Progress::new(o.progress);
    progress.count(
        2 + o.probes.len() + o.knobs.len(),
        o.window.as_secs_f64() + o.warmup.as_secs_f64(),
    );
    progress.say(&format!(
        "LC service ({}): pid {}; kernel signal: {}",
        o.target,
        elfen_topo::format_cpu_list(&lc.pids()),
        lc.signal()
    ));
    // The probe's client runs on the batch lanes, where batch work will.
    let batch_cpus: Vec<u32> = plan.iter().flat_map(|p| p.batch.clone()).collect();
    let mut notes = Vec::new();
    let probe = start_probe(o, offered.root, &batch_cpus, &mut notes)?;
    let mut r = Runner {
        o,
        lc,
        probe,
        stop,
        progress,
        notes,
    };
    r.progress.show("the LC alone", true);
    let solo1 = match r.measure(&mut Nothing, None) {
        Ok(m) => m.window,
        Err(Abort::Interrupted) => bail!("interrupted before anything was measured"),
        Err(Abort::LcLost) => bail!("the LC service ({}) exited", o.target),
    };
    r.progress.step_done();
    let busy_pct = 100.0 * study::cpu_per_s(&solo1);
    if busy_pct < o.min_busy_pct {
        bail!(
            "the LC service ({}, pid {}) is not under load: busy {busy_pct:.2} % of a lane over \
             {:.1} s (the floor is {} %, --min-busy-pct): start its load first; nothing was \
             changed",
            o.target,
            elfen_topo::format_cpu_list(&r.lc.pids()),
            o.window.as_secs_f64(),
            o.min_busy_pct
        );
    }
    let pair = lane_pair(&solo1, &r.lc, &plan, &mut r.notes)?;
    let reference1 = study::reference(std::slice::from_ref(&solo1));
    r.progress.say(&format!(
        "the LC alone: busy {busy_pct:.1} % of a lane on cpu {} (partner {}), {:.0} µs per busy \
         period, {:.0} periods/s{}",
        pair.request,
        elfen_topo::format_cpu_list(&pair.batch),
        reference1.busy_per_period_us,
        reference1.periods_per_s,
        reference1
            .p99_us
            .map_or(String::new(), |p| format!(", probe p99 {p:.0} µs"))
    ));
    let mut params = params(o);
    if o.budget_us.is_none() {
        (params.budget_us, params.budget_source) = auto_budget(&reference1, o.threshold);
    }
    let mut result = AdviseResult {
        schema: crate::record::SCHEMA.into(),
        created_unix_s,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        system,
        params,
        offered,
        lc: Some(LcInfo {
            pids: r.lc.pids(),
            comm: r.lc.pids().first().and_then(|&p| elfen_cmd::proc::comm(p)),
            request_cpu: pair.request,
            batch_cpus: pair.batch.clone(),
            pairs: format!("{pair} ({})", plan.source),
            signal: r.lc.signal(),
        }),
        solo: vec![solo1],
        reference: None,
        probes: Vec::new(),
        knobs: Vec::new(),
        batch_reference_units_per_s: None,
        sensitivity: Vec::new(),
        recommendation: None,
        notes: Vec::new(),
        wall_s: 0.0,
        interrupted: false,
    };
    let helper = HelperCommand(vec![o.exe.to_string_lossy().into_owned(), "advise".into()]);
    match phases::run_phases(&mut r, &mut result, &helper, &reference1, &pair) {
        Ok(()) => {}
        Err(Abort::Interrupted) => {
            result.interrupted = true;
            r.notes
                .push("interrupted: the record holds what was measured".into());
        }
        Err(Abort::LcLost) => {
            result.interrupted = true;
            r.notes.push(format!(
                "the LC service ({}) exited during the run: the record holds what was measured",
                o.target
            ));
        }
    }
    r.progress.finish();
    if let Some(p) = r.probe.take() {
        p.stop();
    }
    conclude::conclude(&mut result, r.notes, o);
    result.wall_s = t0.elapsed().as_secs_f64();
    Ok(result)
}
