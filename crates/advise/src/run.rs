//! The **run** (the record side): the LC alone, then each probe, the LC
//! alone again, then each knob — every one a window after a settling
//! time, watched every `watch` interval against the max slowdown — and the
//! study of what was recorded. Everything started here is stopped when
//! its phase ends, also on an error or Ctrl-C (the helpers and daemons
//! are RAII guards; a daemon gets one SIGTERM and restores what it
//! changed).

use crate::batch::{Helper, HelperCommand, Units};
use crate::knob::{self, DaemonProc, DaemonReading, KnobContext};
use crate::latency::{LatencyProbe, ProbeSpec};
use crate::lc::{Counters, Lc};
use crate::offered;
use crate::record::{
    AdviseResult, BatchWindow, Knob, KnobRow, LcInfo, Outcome, Params, Probe, ProbeRow,
    Recommendation, Reference, Verdict, Window,
};
use crate::study;
use anyhow::bail;
use elfen_cmd::proc::SchedClass;
use elfen_cmd::progress::Progress;
use elfen_daemon::LcTarget;
use elfen_daemon::lc::LcOwner;
use elfen_kernels::KernelKind;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// What a window measures beside the LC.
trait Subject {
    /// At the window's start.
    fn begin(&mut self);
    /// Whether it still runs (the reason when not).
    fn check(&mut self) -> Option<String>;
    /// At the window's end: its figures into `w`.
    fn end(&mut self, w: &mut Window);
}

struct Nothing;

impl Subject for Nothing {
    fn begin(&mut self) {}
    fn check(&mut self) -> Option<String> {
        None
    }
    fn end(&mut self, _: &mut Window) {}
}

/// A probe's co-runner.
struct ProbeSubject {
    helper: Helper,
    units0: u64,
    cpu0: u64,
}

impl ProbeSubject {
    fn tree_cpu(&self) -> u64 {
        elfen_cmd::proc::processes_schedstat(&elfen_cmd::proc::process_tree(self.helper.pid()))
            .on_cpu_ns
    }
}

impl Subject for ProbeSubject {
    fn begin(&mut self) {
        self.units0 = self.helper.units.get();
        self.cpu0 = self.tree_cpu();
    }
    fn check(&mut self) -> Option<String> {
        self.helper.exited()
    }
    fn end(&mut self, w: &mut Window) {
        w.batch = Some(BatchWindow {
            units: self.helper.units.get().saturating_sub(self.units0),
            cpu_ns: self.tree_cpu().saturating_sub(self.cpu0),
        });
    }
}

/// A knob's daemon and its batch command.
struct KnobSubject<'a> {
    daemon: &'a mut DaemonProc,
    units: &'a Units,
    r0: DaemonReading,
    units0: u64,
}

impl Subject for KnobSubject<'_> {
    fn begin(&mut self) {
        self.r0 = self.daemon.read();
        self.units0 = self.units.get();
    }
    fn check(&mut self) -> Option<String> {
        self.daemon
            .exited()
            .map(|e| format!("{e}: {}", self.daemon.log().join(" | ")))
    }
    fn end(&mut self, w: &mut Window) {
        let r = self.daemon.read();
        w.batch = Some(BatchWindow {
            units: self.units.get().saturating_sub(self.units0),
            cpu_ns: r.batch_cpu_ns.saturating_sub(self.r0.batch_cpu_ns),
        });
        w.daemon = Some(r.since(&self.r0));
    }
}

/// What one window gave.
struct Measured {
    window: Window,
    outcome: Outcome,
}

/// The run's state.
struct Runner<'a> {
    o: &'a Options,
    lc: Lc,
    probe: Option<LatencyProbe>,
    stop: &'a AtomicBool,
    progress: Progress,
    notes: Vec<String>,
    offered: crate::record::Offered,
}

impl Runner<'_> {
    /// Sleeps `d` in short steps; ends early on Ctrl-C or the LC's exit.
    fn sleep(&mut self, d: Duration) -> Result<(), Abort> {
        let end = Instant::now() + d;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(Abort::Interrupted);
            }
            self.lc.tick();
            if self.lc.is_lost() {
                return Err(Abort::LcLost);
            }
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }

    fn probe_failed(&mut self) {
        if let Some(e) = self.probe.as_ref().and_then(LatencyProbe::failed) {
            self.notes
                .push(format!("{e}; the latency is not known from here on"));
            self.probe = None;
        }
    }

    /// One window: settle, then measure, checking the stop rule against
    /// `reference` (if any) every watch interval.
    fn measure(
        &mut self,
        subject: &mut dyn Subject,
        reference: Option<&Reference>,
    ) -> Result<Measured, Abort> {
        self.sleep(self.o.warmup)?;
        if let Some(e) = subject.check() {
            return Ok(Measured {
                window: Window::default(),
                outcome: Outcome::NotRun { reason: e },
            });
        }
        let start = self.lc.read();
        subject.begin();
        if let Some(p) = &self.probe {
            p.reset();
        }
        let end_ns = start.at_ns + self.o.window.as_nanos() as u64;
        let mut prev: Counters = start.clone();
        let mut outcome = Outcome::Measured;
        let mut watch = study::StopWatch::default();
        loop {
            let next = (prev.at_ns + self.o.watch.as_nanos() as u64).min(end_ns);
            let wait = next.saturating_sub(elfen_shm::clock::monotonic_ns());
            self.sleep(Duration::from_nanos(wait))?;
            let now = self.lc.read();
            let after_ms = now.at_ns.saturating_sub(start.at_ns) / 1_000_000;
            if let Some(e) = subject.check() {
                outcome = Outcome::NotRun {
                    reason: format!("ended after {after_ms} ms of its window: {e}"),
                };
                prev = now;
                break;
            }
            self.probe_failed();
            let mut iv = now.since(&prev);
            iv.latency = self.probe.as_ref().map(LatencyProbe::take_watch);
            let over = reference.and_then(|r| study::over_limit(r, &iv, self.o.max_slowdown));
            if let Some(why) = watch.observe(over) {
                outcome = Outcome::Stopped {
                    after_ms,
                    reason: why,
                };
                prev = now;
                break;
            }
            let done = now.at_ns >= end_ns;
            prev = now;
            if done {
                break;
            }
        }
        let mut window = prev.since(&start);
        window.latency = self.probe.as_ref().map(LatencyProbe::take_window);
        subject.end(&mut window);
        Ok(Measured { window, outcome })
    }
}

/// The result of a run that could not start (the LC not running, not
/// under load, the probe not connecting): an error, nothing left running.
pub fn advise(o: &Options, stop: &AtomicBool) -> anyhow::Result<AdviseResult> {
    let t0 = Instant::now();
    let created_unix_s = elfen_cmd::time::now_unix_s();
    let system = elfen_topo::SystemInfo::collect();
    let offered = offered::detect(&system);
    let owner = match &o.user {
        Some(u) => LcOwner::Uid(
            u.parse()
                .ok()
                .or_else(|| elfen_cmd::proc::user_id(u))
                .ok_or_else(|| anyhow::anyhow!("--user {u:?}: no such user"))?,
        ),
        None => LcOwner::FirstFound,
    };
    let topo = elfen_topo::Topology::detect()?;
    let plan = elfen_topo::plan_pairs(&topo, o.pairs.as_deref())?;
    let lc = Lc::open(o.target.clone(), owner)?;
    let helper = HelperCommand(vec![o.exe.to_string_lossy().into_owned(), "advise".into()]);
    let mut params = Params {
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
    };
    let mut progress = Progress::new(o.progress);
    let steps = 2 + o.probes.len() + o.knobs.len();
    progress.count(steps, o.window.as_secs_f64() + o.warmup.as_secs_f64());
    progress.say(&format!(
        "LC service ({}): pid {}; kernel signal: {}",
        o.target,
        elfen_topo::format_cpu_list(&lc.pids()),
        lc.signal()
    ));
    // The probe's client runs where batch work will: on the batch lanes
    // (known once the LC's lane is); until then on every CPU but the first
    // pair's request lane.
    let first_batch: Vec<u32> = plan.pairs.iter().flat_map(|p| p.batch.clone()).collect();
    let (probe_sched, probe_note) = if offered.root {
        (SchedClass::Fifo(PROBE_FIFO_PRIORITY), None)
    } else {
        (
            SchedClass::Other,
            Some("not root: the latency probe's threads run SCHED_OTHER, so batch work at the LC's priority can delay the probe itself".to_string()),
        )
    };
    let probe = match &o.probe {
        Some(s) => Some(LatencyProbe::start(
            s,
            o.probe_rps,
            &first_batch,
            probe_sched,
        )?),
        None => None,
    };
    let mut r = Runner {
        o,
        lc,
        probe,
        stop,
        progress,
        notes: probe_note.into_iter().collect(),
        offered: offered.clone(),
    };
    if let Some(p) = &r.probe {
        r.notes.push(format!(
            "latency probe {} at {} requests/s, {}",
            p.placement, o.probe_rps, "beside the LC's own load"
        ));
    }
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
    let pids = r.lc.pids();
    let request_cpu = crate::lc::request_cpu(&solo1, &pids, &r.lc.read())
        .ok_or_else(|| anyhow::anyhow!("the LC's CPU could not be found"))?;
    let Some(pair) = plan
        .pairs
        .iter()
        .find(|p| p.request == request_cpu)
        .cloned()
    else {
        let role = if plan.pairs.iter().any(|p| p.batch.contains(&request_cpu)) {
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
    let busy_cpus: Vec<String> = solo1
        .signal_busy_ns
        .iter()
        .enumerate()
        .filter(|(_, b)| **b > 0)
        .map(|(c, b)| {
            let total: u64 = solo1.signal_busy_ns.iter().sum();
            format!("cpu {c} {:.0} %", 100.0 * *b as f64 / total.max(1) as f64)
        })
        .collect();
    if busy_cpus.len() > 1 {
        r.notes.push(format!(
            "the LC ran on several CPUs ({}): its lane is taken as cpu {request_cpu}; pin it \
             there for a clean profile",
            busy_cpus.join(", ")
        ));
    }
    let reference1 = study::reference(std::slice::from_ref(&solo1));
    r.progress.say(&format!(
        "the LC alone: busy {:.1} % of a lane on cpu {request_cpu} (partner {}), {:.0} µs per \
         busy period, {:.0} periods/s{}",
        busy_pct,
        elfen_topo::format_cpu_list(&pair.batch),
        reference1.busy_per_period_us,
        reference1.periods_per_s,
        reference1
            .p99_us
            .map_or(String::new(), |p| format!(", probe p99 {p:.0} µs"))
    ));
    if o.budget_us.is_none() {
        let (b, src) = match reference1.p99_us {
            Some(p99) => (
                o.threshold * p99,
                format!(
                    "the paper's SLO − p99 alone, with the SLO at (1 + threshold) × the probe's \
                     p99 alone ({p99:.0} µs)"
                ),
            ),
            None => (
                o.threshold * reference1.busy_per_period_us,
                "threshold × the LC's mean busy period (no latency known: give --budget-us or \
                 --latency-probe)"
                    .to_string(),
            ),
        };
        params.budget_us = (b.round() as u64).max(1);
        params.budget_source = src;
    }
    let mut result = AdviseResult {
        schema: crate::record::SCHEMA.into(),
        created_unix_s,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        system,
        params,
        offered: offered.clone(),
        lc: Some(LcInfo {
            pids,
            comm: r.lc.pids().first().and_then(|&p| elfen_cmd::proc::comm(p)),
            request_cpu,
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
    let partner = pair.batch[0];
    let aborted = run_phases(
        &mut r,
        &mut result,
        &helper,
        request_cpu,
        partner,
        &reference1,
        &pair,
    );
    match aborted {
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
    conclude(&mut result, r.notes, o);
    result.wall_s = t0.elapsed().as_secs_f64();
    Ok(result)
}

/// The probes, the second solo window, the knobs.
fn run_phases(
    r: &mut Runner<'_>,
    result: &mut AdviseResult,
    helper: &HelperCommand,
    own: u32,
    partner: u32,
    reference1: &Reference,
    pair: &elfen_topo::Pair,
) -> Result<(), Abort> {
    let o = r.o;
    let mut probes = o.probes.clone();
    let ref_probe = reference_probe(o.batch_kernel);
    if !o.knobs.is_empty() {
        if let Some(p) = ref_probe.filter(|p| !probes.contains(p)) {
            probes.insert(0, p);
            r.notes.push(format!(
                "probe {} ran as the batch reference of the knobs",
                p.name()
            ));
        }
    }
    for p in probes {
        r.progress.show(&format!("probe {}", p.name()), true);
        let row = run_probe(r, p, helper, own, partner, reference1)?;
        if Some(p) == ref_probe {
            result.batch_reference_units_per_s = batch_reference(&row, &mut r.notes);
        }
        r.progress.say(&format!(
            "probe {}: {}",
            p.name(),
            crate::format::outcome_line(&row.outcome, row.window.as_ref(), reference1)
        ));
        result.probes.push(row);
        r.progress.step_done();
    }
    r.progress.show("the LC alone again", true);
    let solo2 = r.measure(&mut Nothing, None)?.window;
    result.solo.push(solo2);
    r.progress.step_done();
    let reference = study::reference(&result.solo);
    if reference.drift > 0.10 {
        r.notes.push(format!(
            "the LC's busy share differs by {} between the solo windows: its load changed, or \
             the machine is busy; contention below ±{:.0} % is not resolved",
            study::pct(reference.drift),
            100.0 * reference.drift
        ));
    }
    if o.knobs.is_empty() {
        return Ok(());
    }
    let dir = match tempfile::Builder::new().prefix("elfen-advise-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            for k in &o.knobs {
                result.knobs.push(not_run(
                    *k,
                    format!("no directory for the daemon's state: {e}"),
                ));
            }
            return Ok(());
        }
    };
    let cx = KnobContext {
        target: o.target.clone(),
        user: o.user.clone(),
        pairs: format!("{}:{}", pair.request, pair.batch[0]),
        helper: helper.clone(),
        kernel: o.batch_kernel,
        budget_us: result.params.budget_us,
        dir: dir.path().to_path_buf(),
        offered: result.offered.clone(),
    };
    for &k in &o.knobs {
        r.progress.show(&format!("knob {}", k.name()), true);
        let row = run_knob(r, k, &cx, &reference)?;
        r.progress.say(&format!(
            "knob {}: {}",
            k.name(),
            crate::format::outcome_line(&row.outcome, row.window.as_ref(), &reference)
        ));
        result.knobs.push(row);
        r.progress.step_done();
    }
    Ok(())
}

/// Other load above this many lanes in a window is said in the notes.
const DISTURBED_LANES: f64 = 0.25;

/// Least window a batch reference is taken from (a stopped probe's
/// window is shorter than asked).
const MIN_REFERENCE_NS: u64 = 100_000_000;

/// The batch reference's work units per second, from the reference
/// probe's window — a stopped one's too, said so.
fn batch_reference(row: &ProbeRow, notes: &mut Vec<String>) -> Option<f64> {
    let w = row
        .window
        .as_ref()
        .filter(|w| w.wall_ns >= MIN_REFERENCE_NS)?;
    let b = w.batch.as_ref()?;
    if let Outcome::Stopped { after_ms, .. } = &row.outcome {
        notes.push(format!(
            "the batch reference comes from the {after_ms} ms probe {} ran before it was stopped",
            row.probe.name()
        ));
    }
    Some(b.units as f64 * 1e9 / w.wall_ns as f64)
}

fn not_run(knob: Knob, reason: String) -> KnobRow {
    KnobRow {
        knob,
        outcome: Outcome::NotRun { reason },
        window: None,
        contention: None,
        progress: None,
        daemon_cpu_lanes: None,
        daemon_own_lanes: None,
        verdict: Verdict::NotRun,
        config: None,
        daemon_pid: None,
        daemon_log: Vec::new(),
    }
}

fn run_probe(
    r: &mut Runner<'_>,
    p: Probe,
    helper: &HelperCommand,
    own: u32,
    partner: u32,
    reference: &Reference,
) -> Result<ProbeRow, Abort> {
    let row = |outcome, window| ProbeRow {
        probe: p,
        outcome,
        window,
        contention: None,
        readings: Vec::new(),
    };
    let (kernel, cpu, idle) = match p {
        Probe::HogPartner => (KernelKind::Matrix, partner, false),
        Probe::HogIdlePartner => (KernelKind::Matrix, partner, true),
        Probe::HogOwn => (KernelKind::Matrix, own, false),
        Probe::HogIdleOwn => (KernelKind::Matrix, own, true),
        Probe::StreamPartner => (KernelKind::Stream, partner, true),
        Probe::Counters | Probe::Mbm => {
            let a = if p == Probe::Counters {
                r.offered.counters.clone()
            } else {
                r.offered.mbm.clone()
            };
            let reason = if a.offered {
                format!("{}; advise does not read them yet (not built)", a.detail)
            } else {
                a.detail
            };
            return Ok(row(Outcome::NotRun { reason }, None));
        }
    };
    let mut h = match Helper::spawn(helper, kernel, cpu, idle) {
        Ok(h) => h,
        Err(e) => {
            return Ok(row(
                Outcome::NotRun {
                    reason: format!("{e:#}"),
                },
                None,
            ));
        }
    };
    // the window starts once the kernel works (Stream first fills its buffer)
    let t0 = Instant::now();
    while h.units.get() == 0 {
        if let Some(e) = h.exited() {
            return Ok(row(Outcome::NotRun { reason: e }, None));
        }
        if t0.elapsed() > Duration::from_secs(15) {
            return Ok(row(
                Outcome::NotRun {
                    reason: "the co-runner did no work within 15 s of its start".into(),
                },
                None,
            ));
        }
        r.sleep(Duration::from_millis(10))?;
    }
    let mut s = ProbeSubject {
        helper: h,
        units0: 0,
        cpu0: 0,
    };
    let m = r.measure(&mut s, Some(reference))?;
    drop(s);
    Ok(row(m.outcome, Some(m.window)))
}

fn run_knob(
    r: &mut Runner<'_>,
    k: Knob,
    cx: &KnobContext,
    reference: &Reference,
) -> Result<KnobRow, Abort> {
    if let Some(why) = knob::not_offered(k, &cx.offered) {
        return Ok(not_run(k, why));
    }
    let units = match Units::new() {
        Ok(u) => u,
        Err(e) => return Ok(not_run(k, format!("{e:#}"))),
    };
    let metrics = match knob::free_metrics_addr() {
        Ok(a) => a,
        Err(e) => return Ok(not_run(k, format!("{e:#}"))),
    };
    let page = PathBuf::from(format!(
        "/dev/shm/elfen-advise-{}-{}",
        std::process::id(),
        k.name()
    ));
    let config = knob::config_for(k, cx, &units, &page, metrics);
    let text = match knob::config_text(&config) {
        Ok(t) => t,
        Err(e) => return Ok(not_run(k, format!("the generated configuration: {e:#}"))),
    };
    let path = cx.dir.join(format!("{}.toml", k.name()));
    if let Err(e) = std::fs::write(&path, &text) {
        return Ok(not_run(k, format!("writing {}: {e}", path.display())));
    }
    let mut daemon = match DaemonProc::spawn(&r.o.exe, &path, metrics, &page) {
        Ok(d) => d,
        Err(e) => return Ok(not_run(k, format!("{e:#}"))),
    };
    let daemon_pid = daemon.pid();
    let mut row = not_run(k, String::new());
    row.config = Some(text);
    row.daemon_pid = Some(daemon_pid);
    match daemon.wait_ready(&units, Duration::from_secs(15), r.stop) {
        Err(e) if r.stop.load(Ordering::Relaxed) => {
            let _ = e;
            drop(daemon);
            return Err(Abort::Interrupted);
        }
        Err(e) => {
            let (how, log) = daemon.stop(Duration::from_secs(15));
            row.outcome = Outcome::NotRun {
                reason: format!("the daemon did not start the knob: {e}"),
            };
            row.daemon_log = log;
            row.daemon_log.push(format!("exit: {how}"));
            return Ok(row);
        }
        Ok(()) => {}
    }
    let measured = {
        let mut s = KnobSubject {
            daemon: &mut daemon,
            units: &units,
            r0: DaemonReading::default(),
            units0: 0,
        };
        r.measure(&mut s, Some(reference))
    };
    let (how, log) = daemon.stop(Duration::from_secs(15));
    row.daemon_log = log;
    row.daemon_log.push(format!("exit: {how}"));
    let left = knob::leftovers(&page, daemon_pid, &r.o.cgroup_root);
    if !left.is_empty() {
        r.notes.push(format!(
            "the daemon of knob {} left {} behind after its stop",
            k.name(),
            left.join(", ")
        ));
    }
    let m = measured?;
    row.outcome = m.outcome;
    row.window = Some(m.window);
    Ok(row)
}

/// The study of the recorded rows: contention against the final
/// reference, progress, daemon CPU, verdicts, sensitivity and the
/// recommendation.
fn conclude(result: &mut AdviseResult, mut notes: Vec<String>, o: &Options) {
    let reference = study::reference(&result.solo);
    for row in &mut result.probes {
        row.contention = row
            .window
            .as_ref()
            .filter(|w| w.wall_ns > 0)
            .map(|w| study::contention(w, &reference));
    }
    let ref_units = result.batch_reference_units_per_s;
    let ref_lanes = result
        .probes
        .iter()
        .find(|p| Some(p.probe) == reference_probe(o.batch_kernel))
        .and_then(|p| p.window.as_ref())
        .and_then(|w| Some(w.batch.as_ref()?.cpu_ns as f64 / w.wall_ns.max(1) as f64))
        .unwrap_or(1.0);
    for row in &mut result.knobs {
        let Some(w) = row.window.as_ref().filter(|w| w.wall_ns > 0) else {
            row.verdict = study::verdict(&row.outcome, None, o.threshold);
            continue;
        };
        let wall = w.wall_ns as f64;
        row.contention = Some(study::contention(w, &reference));
        row.progress = match (ref_units, &w.batch) {
            (Some(u), Some(b)) if u > 0.0 => Some(b.units as f64 * 1e9 / wall / u),
            _ => None,
        };
        if let Some(d) = &w.daemon {
            row.daemon_cpu_lanes = Some(d.cpu_ns as f64 / wall);
            row.daemon_own_lanes =
                Some(d.cpu_ns.saturating_sub(d.occupied_ns.unwrap_or(0)) as f64 / wall);
            if d.occupied_ns.is_none() && row.knob == Knob::Guard {
                notes.push(
                    "the guard's occupation could not be read from the daemon's metrics: its \
                     daemon CPU counts it as the daemon's own"
                        .into(),
                );
            }
        }
        row.verdict = study::verdict(&row.outcome, row.contention.as_ref(), o.threshold);
    }
    let windows = result
        .solo
        .iter()
        .chain(result.probes.iter().filter_map(|p| p.window.as_ref()))
        .chain(result.knobs.iter().filter_map(|k| k.window.as_ref()));
    let other = windows.map(study::other_lanes).fold(0.0, f64::max);
    if other > DISTURBED_LANES {
        notes.push(format!(
            "other processes and the host took up to {other:.2} lanes during a window (a load \
             generator running here counts among them): where that reaches the LC's lane, the \
             figures show it, not the probe or knob"
        ));
    }
    if ref_units.is_none() && !result.knobs.is_empty() {
        notes.push(
            "no batch reference was measured: batch progress is not known, and no knob is \
             recommended"
                .into(),
        );
    }
    result.sensitivity = study::sensitivity(&result.probes, o.max_slowdown);
    let predicted = study::predicted(&result.probes, o.threshold, o.max_slowdown);
    let (knob, reason) = if result.knobs.is_empty() {
        (None, "no knob was asked for (--knobs)".to_string())
    } else {
        study::recommend(&result.knobs, o.threshold, ref_lanes)
    };
    let most = result.sensitivity.first().map(|s| s.resource);
    let reason = match result.sensitivity.first() {
        Some(s) => format!(
            "the LC is most sensitive to {} ({} under {}{}); {reason}",
            s.resource.describe(),
            study::pct(s.contention),
            s.probe.name(),
            if s.stopped {
                ", stopped at the max slowdown"
            } else {
                ""
            }
        ),
        None => reason,
    };
    result.recommendation = Some(Recommendation {
        knob,
        reason,
        most_contentious: most,
        predicted,
    });
    result.reference = Some(reference);
    result.notes = notes;
}
