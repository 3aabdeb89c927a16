//! One **measured invocation**: the load runs, counters are sampled at the
//! two edges of the measured window, and the window's [`Rep`] is built:
//! latency (from intended send times), utilization (LC from the signal
//! page, batch from the batch process), batch progress, naps, and how
//! disturbed the machine was.

use super::rig::Rig;
use crate::batch::{self, BatchRun, BatchSample};
use crate::error::{BenchError, Result};
use crate::load::client::{
    Edge, InvocationPlan, InvocationResult, latency_buckets, run_invocation,
};
use crate::load::percentiles_us;
use crate::spec::{BatchProgram, BenchSpec, Config, LcSignal};
use elfen_cmd::proc::{self, MachineTicks};
use elfen_results::{
    BatchTimes, DaemonTimes, Distribution, LatencyBreakdown, MeasuredRep, Rep, Utilization,
};
use elfen_runtime::NapChoice;
use elfen_shm::Page;
use std::sync::atomic::AtomicBool;

/// Names of the daemon's threads (`elfen_daemon`'s workers) the harness
/// runs in its process: the kernel signal's writer, guards, the freezer,
/// blind isolation.
fn is_daemon_thread(comm: &str) -> bool {
    matches!(
        comm,
        "elfen-lc-writer" | "elfen-freezer" | "elfen-blind" | "elfen-auto"
    ) || comm.starts_with("elfen-guard-")
}

/// The daemon's threads in process `pid`.
fn daemon_tids(pid: u32) -> Vec<u32> {
    proc::thread_ids(pid)
        .into_iter()
        .filter(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                .is_ok_and(|c| is_daemon_thread(c.trim()))
        })
        .collect()
}

/// Counters at a window edge.
struct EdgeSample {
    at_ns: u64,
    lc_busy_ns: u64,
    harness_cpu_ns: u64,
    /// The daemon's threads' on-CPU time, and their guards' occupation.
    daemon_ns: u64,
    occupied_ns: u64,
    held_ns: u64,
    batch: Option<BatchSample>,
    machine: MachineTicks,
    /// Ticks of this process, the batch process and an external service.
    own_ticks: u64,
}

/// What one measured invocation produced: its `Rep` and the window's
/// idle periods and service times.
pub struct Measured {
    /// The record.
    pub rep: Rep,
    /// Idle periods of the request lane (where the service records them).
    pub idle: Option<Distribution>,
    /// Service times of the measured requests.
    pub service: Distribution,
}

/// What the invocation is.
#[derive(Debug, Clone, Copy)]
pub struct What {
    /// The configuration.
    pub config: Config,
    /// Its batch program.
    pub batch: Option<BatchProgram>,
    /// The budget policies' budget, µs.
    pub budget_us: Option<f64>,
}

/// Runs the load of `plan` against the rig's service, with the batch
/// process `bp` (if any) running, and builds the window's record.
/// `alone_units_per_s` is the batch kernel's rate alone (for progress).
pub fn run_rep(
    spec: &BenchSpec,
    rig: &mut Rig,
    bp: &mut Option<Box<dyn BatchRun>>,
    what: What,
    plan: &InvocationPlan,
    alone_units_per_s: Option<f64>,
    stop: &AtomicBool,
) -> Result<Measured> {
    let elfen = what.config.policy().is_some();
    rig.lc_mut().check()?;
    let me = std::process::id();
    // the daemon's threads started before the window (with the batch)
    let daemon = daemon_tids(me);
    let mut exclude = rig.lc().worker_tids();
    exclude.extend(&daemon);
    let service_pid = rig.lc().child_pid();
    let page = rig.page.clone();
    let probes = Probes {
        me,
        exclude,
        daemon: &daemon,
        page: &page,
        lane: rig.lanes.request_lane,
        service_pid,
    };
    let mut edges: Vec<EdgeSample> = Vec::with_capacity(2);
    let mut idle = None;
    let lc = rig.lc.as_deref().expect("LC service");
    let protocol = lc.protocol();
    let inv: InvocationResult =
        run_invocation(lc.addr(), &protocol, plan, &rig.generator, stop, |edge| {
            if edge == Edge::Start {
                lc.start_idle_recording();
            }
            edges.push(probes.sample(bp.as_deref()));
            if edge == Edge::End {
                idle = lc.stop_idle_recording();
            }
        })?;
    batch_alive(bp, what)?;
    rig.lc_mut().check()?;
    let [e0, e1] = &edges[..] else {
        return Err(BenchError::Service("window edges missing".into()));
    };
    let lc_util = lc_utilization(spec, e0, e1, &inv);
    let mut measured = window_measures(e0, e1, &inv, &daemon);
    let mut rep = window_rep(spec, what, &inv, lc_util);
    if let (Some(b0), Some(b1)) = (&e0.batch, &e1.batch) {
        let d = b1.since(b0);
        add_batch(spec, elfen, alone_units_per_s, &d, &mut rep, &mut measured);
    }
    rep.measured = Some(measured);
    Ok(Measured {
        rep,
        idle,
        service: if inv.service_us.total() > 0 {
            inv.service_us
        } else {
            latency_buckets()
        },
    })
}

/// What a window edge samples: this process's CPU time (but the threads
/// in `exclude`), the daemon's threads, the request lane's busy time on
/// the page, the batch process, and the ticks of this process, the batch
/// process and the service's process.
struct Probes<'a> {
    me: u32,
    exclude: Vec<u32>,
    daemon: &'a [u32],
    page: &'a Page,
    lane: u32,
    service_pid: Option<u32>,
}

impl Probes<'_> {
    /// The counters now, with the batch process `bp` (if any).
    fn sample(&self, bp: Option<&dyn BatchRun>) -> EdgeSample {
        let me = self.me;
        EdgeSample {
            at_ns: elfen_shm::clock::monotonic_ns(),
            lc_busy_ns: self.page.lc_busy_ns(self.lane).unwrap_or(0),
            harness_cpu_ns: proc::process_cpu_ns_except(me, &self.exclude),
            daemon_ns: self
                .daemon
                .iter()
                .filter_map(|&t| proc::thread_schedstat(me, t))
                .map(|s| s.on_cpu_ns)
                .sum(),
            occupied_ns: bp.map_or(0, |b| b.guard_occupied_ns()),
            held_ns: bp.map_or(0, |b| b.guard_held_ns()),
            batch: bp.map(|b| b.sample()),
            machine: MachineTicks::now(),
            own_ticks: proc::process_ticks(me)
                + bp.map_or(0, |b| {
                    b.pids().into_iter().map(proc::process_ticks).sum::<u64>()
                })
                + self.service_pid.map_or(0, proc::process_ticks),
        }
    }
}

/// An error if the batch process died during the invocation.
fn batch_alive(bp: &mut Option<Box<dyn BatchRun>>, what: What) -> Result<()> {
    if let Some(b) = bp.as_mut() {
        if !b.alive() {
            return Err(BenchError::Batch(format!(
                "the {} batch process (pids {:?}) died during the invocation",
                what.config,
                b.pids()
            )));
        }
    }
    Ok(())
}

/// The LC lane's utilization over the window from `e0` to `e1`: its busy
/// time on the page, or for a service that publishes nothing the sum of
/// the service times it reports.
fn lc_utilization(
    spec: &BenchSpec,
    e0: &EdgeSample,
    e1: &EdgeSample,
    inv: &InvocationResult,
) -> f64 {
    let window_s = (e1.at_ns - e0.at_ns) as f64 / 1e9;
    match spec.lc.signal {
        LcSignal::Api | LcSignal::Bpf => {
            (e1.lc_busy_ns.saturating_sub(e0.lc_busy_ns)) as f64 / 1e9 / window_s
        }
        LcSignal::None => inv.window_service_ns as f64 / 1e9 / window_s,
    }
}

/// The window's measurements besides latency and utilization: the
/// harness's, other processes' and the daemon's shares, the host's steal,
/// the latency breakdown (the batch's times are added later).
fn window_measures(
    e0: &EdgeSample,
    e1: &EdgeSample,
    inv: &InvocationResult,
    daemon: &[u32],
) -> MeasuredRep {
    let window_s = (e1.at_ns - e0.at_ns) as f64 / 1e9;
    let hz = proc::ticks_per_s();
    let machine = e1.machine.since(&e0.machine);
    let own = e1.own_ticks.saturating_sub(e0.own_ticks) as f64;
    MeasuredRep {
        window_s,
        sent: inv.sent as u64,
        harness_util: e1.harness_cpu_ns.saturating_sub(e0.harness_cpu_ns) as f64 / 1e9 / window_s,
        // Other processes on this machine, and the host's steal, so a point
        // measured under foreign load can be recognized.
        foreign_util: ((machine.process_busy as f64 - own) / hz / window_s).max(0.0),
        steal_util: machine.steal as f64 / hz / window_s,
        disturbed_retries: 0,
        connections_closed: u32::from(inv.connection_closed),
        breakdown: (inv.service_us.total() > 0).then(|| LatencyBreakdown {
            service_p50_us: inv.service_us.quantile(0.5).unwrap_or(0.0),
            service_p99_us: inv.service_us.quantile(0.99).unwrap_or(0.0),
            queued_p99_us: inv.queued_us.quantile(0.99).unwrap_or(0.0),
            outside_p50_us: inv.outside_us.quantile(0.5).unwrap_or(0.0),
            outside_p99_us: inv.outside_us.quantile(0.99).unwrap_or(0.0),
        }),
        batch: None,
        daemon: (!daemon.is_empty()).then(|| DaemonTimes {
            on_cpu_util: e1.daemon_ns.saturating_sub(e0.daemon_ns) as f64 / 1e9 / window_s,
            occupied_util: e1.occupied_ns.saturating_sub(e0.occupied_ns) as f64 / 1e9 / window_s,
            held_util: e1.held_ns.saturating_sub(e0.held_ns) as f64 / 1e9 / window_s,
        }),
    }
}
/// The window's record: latency, the LC lane's utilization (`lc_util`),
/// the budget; the batch's part is added by [`add_batch`].
fn window_rep(spec: &BenchSpec, what: What, inv: &InvocationResult, lc_util: f64) -> Rep {
    Rep {
        round: None,
        rps_achieved: inv.rps_achieved,
        requests: inv.outcome.requests,
        errors: inv.outcome.errors,
        latency_us: percentiles_us(&inv.outcome.hist),
        utilization: Utilization {
            lc: lc_util,
            batch: 0.0,
            total: lc_util,
        },
        batch_units_per_s: None,
        batch_progress: None,
        naps_per_s: None,
        wakes_per_s: None,
        budget_us: what.budget_us,
        histogram: if spec.keep_histograms {
            elfen_results::histogram::encode(&inv.outcome.hist)
        } else {
            None
        },
        measured: None,
        simulated: None,
    }
}

/// Adds the batch process's window `d` (its samples' difference) to `rep`
/// (utilization, progress, naps) and `measured` (its times); `elfen`: its
/// threads run Elfen's runtime (they nap); `alone_units_per_s`: the batch
/// kernel's rate alone.
fn add_batch(
    spec: &BenchSpec,
    elfen: bool,
    alone_units_per_s: Option<f64>,
    d: &BatchSample,
    rep: &mut Rep,
    measured: &mut MeasuredRep,
) {
    let (mut est, mut lo, mut hi) = (0.0, 0.0, 0.0);
    for t in &d.threads {
        let (e, l, h) = batch::executed_ns(t, elfen, spec.batch.nap);
        est += e;
        lo += l;
        hi += h;
    }
    let secs = d.at_ns as f64 / 1e9;
    let tot = d.total();
    let util = |ns: f64| ns / 1e9 / secs;
    let lc_util = rep.utilization.lc;
    rep.utilization.batch = util(est);
    rep.utilization.total = lc_util + rep.utilization.batch;
    let ups = tot.units as f64 / secs;
    rep.batch_units_per_s = Some(ups);
    rep.batch_progress = alone_units_per_s.filter(|a| *a > 0.0).map(|a| ups / a);
    if elfen {
        rep.naps_per_s = Some(tot.naps as f64 / secs);
        rep.wakes_per_s = Some(tot.wakes as f64 / secs);
    }
    measured.batch = Some(BatchTimes {
        util_low: util(lo),
        util_high: util(hi),
        on_cpu_util: util(tot.on_cpu_ns as f64),
        wait_util: util(tot.wait_ns as f64),
        corun_util: elfen.then(|| util(tot.corun_ns as f64)),
        nap_util: elfen.then(|| util(tot.nap_ns as f64)),
    });
}

/// How batch utilization is counted, for the result file and the report.
pub fn utilization_method(nap: NapChoice) -> String {
    let elfen = if nap == NapChoice::Futex {
        "Elfen batch threads nap in futex (off-CPU), so their on-CPU time is batch execution"
    } else {
        "Elfen batch threads nap on-CPU (spinning), so their execution is the runtime's run time \
         (wake to nap) minus the share of their run-queue wait that falls in it (wait spread over \
         run and nap time in proportion), capped by on-CPU time; measured.batch.util_low/high \
         bound it"
    };
    format!(
        "utilization = sum over lanes of busy fraction (one fully busy lane = 1.0). LC: the request \
         lane's busy time on the signal page's LC line (begin to end of each request, as the \
         service publishes it; for a service that publishes nothing, the sum of the service \
         times it reports). Batch: time batch code executed, summed over batch threads: \
         baseline threads never nap, so their on-CPU time from /proc/<pid>/task/<tid>/schedstat \
         (excludes time preempted or throttled); {elfen}. The harness's own threads (generator, \
         dispatcher) are not counted; their share is measured.harness_util. The daemon's threads \
         the harness runs (the kernel signal's writer, guards, freezer, blind isolation) are not \
         counted either: their on-CPU time is measured.daemon.on_cpu_util, and \
         occupied_util the wall time guards occupied their lanes (the protection itself)."
    )
}
