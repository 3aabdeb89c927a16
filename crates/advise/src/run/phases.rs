//! The **phases** after the first solo window: each probe with its
//! co-runner, the second solo window, each knob with its daemon.

use super::window::{Nothing, Runner, Subject};
use super::{Abort, reference_probe};
use crate::batch::{Helper, HelperCommand, Units};
use crate::knob::{self, DaemonProc, DaemonReading, KnobContext};
use crate::record::{
    AdviseResult, BatchWindow, Knob, KnobRow, Outcome, Probe, ProbeRow, Reference, Verdict, Window,
};
use crate::study;
use elfen_kernels::KernelKind;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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

/// The probes, the second solo window, the knobs.
pub(super) fn run_phases(
    r: &mut Runner<'_>,
    result: &mut AdviseResult,
    helper: &HelperCommand,
    reference1: &Reference,
    pair: &elfen_topo::Pair,
) -> Result<(), Abort> {
    let o = r.o;
    let (own, partner) = (pair.request, pair.batch[0]);
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
    if let Some(why) = knob::not_offered(&cx.offered) {
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
