//! One **invocation** of a (configuration, kernel, load): its batch
//! process started as the configuration says, the load run, the batch
//! process killed — and run again, with the same seed, if the machine was
//! disturbed while it ran.
//!
//! Where batch threads run, per configuration (`docs/harness.md`):
//!
//! | config | threads | class | cgroup | checks |
//! |---|---|---|---|---|
//! | naive | one per lane, request lane included, pinned | SCHED_OTHER | - | no |
//! | sched_idle | one per lane, request lane included, pinned | SCHED_IDLE | - | no |
//! | cpuset | one per batch lane, unpinned | SCHED_OTHER | cpuset = batch lanes | no |
//! | cfs_quota | one per lane, request lane included, pinned | SCHED_OTHER | CFS quota | no |
//! | cpu_idle | one per lane, request lane included, pinned | SCHED_OTHER | `cpu.idle` = 1 | no |
//! | guard | one per batch lane, pinned | SCHED_IDLE (+ a guard thread per batch lane) | - | no |
//! | auto | one per batch lane, pinned | SCHED_IDLE (+ the mode auto chooses) | freezer (its solo windows) | no |
//! | freeze | one per batch lane, pinned | SCHED_OTHER | freezer, frozen while the lane is busy | no |
//! | blind_isolation | one per lane, unpinned | SCHED_OTHER | cpuset = all − LC-busy − B (frozen at none) | no |
//! | Elfen (4) | one per batch lane, attached to it | SCHED_OTHER | - | every unit |
//!
//! The daemon's modes are the daemon's own code (`elfen_daemon::protection`,
//! through `daemon_mode`), applied after the batch process starts and
//! withdrawn before it is killed, woken by the kernel signal's writer;
//! their policy is borrow idle. Guards run at real-time priority below the
//! generator's.

use super::daemon_mode;
use super::measure::{self, Measured, What};
use super::plan::{self, PRESWEEP_ROUND};
use super::rig::{self, Rig};
use super::wall::{Part, WallClock};
use crate::batch::{self, BatchPlan, BatchProgram, BatchRun, Start, ThreadPlan};
use crate::error::{BenchError, Result};
use crate::spec::{BenchSpec, Config};
use elfen_cmd::Progress;
use elfen_cmd::proc::SchedClass;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What every invocation of a sweep shares.
pub struct Ctx<'a> {
    /// The experiment.
    pub spec: &'a BenchSpec,
    /// The executable holding the batch worker.
    pub worker_exe: &'a Path,
    /// Ctrl-C.
    pub stop: &'a AtomicBool,
    /// Work scale of work requests (the demand calibration).
    pub work_scale: f64,
    /// Each kernel's units per second alone.
    pub alone: Vec<(BatchProgram, f64)>,
}

/// Which part of the sweep an invocation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The capacity probe.
    Probe,
    /// The knee pre-sweep.
    PreSweep,
    /// The interleaved rounds.
    Main,
}

/// One invocation to run.
#[derive(Debug, Clone, Copy)]
pub struct Inv {
    /// The configuration.
    pub config: Config,
    /// Its batch program (`None` for LC alone).
    pub batch: Option<BatchProgram>,
    /// The load.
    pub rps: f64,
    /// The budget policies' budget, µs.
    pub budget_us: Option<f64>,
    /// The round (0-based; [`PRESWEEP_ROUND`] for the probe and pre-sweep):
    /// with the load, it alone sets the seed.
    pub round: u32,
}

impl Inv {
    /// LC alone at `rps` in `round`.
    pub fn lc_alone(rps: f64, round: u32) -> Inv {
        Inv {
            config: Config::LcAlone,
            batch: None,
            rps,
            budget_us: None,
            round,
        }
    }
}

/// Returns `Err(Interrupted)` once Ctrl-C was pressed.
pub fn check_stop(stop: &AtomicBool) -> Result<()> {
    if stop.load(Ordering::Relaxed) {
        Err(BenchError::Interrupted)
    } else {
        Ok(())
    }
}

/// The threads and class a configuration's batch process runs with.
pub fn batch_plan(spec: &BenchSpec, rig: &Rig, config: Config, program: BatchProgram) -> BatchPlan {
    let l = &rig.lanes;
    let pinned = |cpus: Vec<u32>| -> Vec<ThreadPlan> {
        cpus.into_iter()
            .map(|c| ThreadPlan {
                cpu: Some(c),
                lane: None,
            })
            .collect()
    };
    // one thread per CPU, free to move (the cpuset places them)
    let free = |cpus: &[u32]| -> Vec<ThreadPlan> {
        cpus.iter()
            .map(|_| ThreadPlan {
                cpu: None,
                lane: None,
            })
            .collect()
    };
    let (threads, sched) = match config {
        Config::Naive | Config::CfsQuota | Config::CpuIdle => {
            (pinned(l.all_cpus()), SchedClass::Other)
        }
        Config::SchedIdle => (pinned(l.all_cpus()), SchedClass::Idle),
        Config::Guard | Config::Auto => (pinned(l.batch_cpus.clone()), SchedClass::Idle),
        Config::Freeze => (pinned(l.batch_cpus.clone()), SchedClass::Other),
        // one per lane, free to move: blind isolation moves them by cpuset
        Config::BlindIsolation => (free(&l.all_cpus()), SchedClass::Other),
        Config::Cpuset => (free(&l.batch_cpus), SchedClass::Other),
        c if c.policy().is_some() => (
            l.batch_lanes
                .iter()
                .map(|&lane| ThreadPlan {
                    cpu: None,
                    lane: Some(lane),
                })
                .collect(),
            SchedClass::Other,
        ),
        c => unreachable!("{c} runs no batch in the harness (validated)"),
    };
    BatchPlan {
        program,
        stream_mib: spec.batch.stream_mib,
        threads,
        page: config
            .policy()
            .is_some()
            .then(|| rig.page.path().to_path_buf()),
        nap: spec.batch.nap,
        sched,
    }
}

/// Starts the batch process of `config` with `kernel`: the page configured
/// for its policy, the process in its cgroup, its threads released.
fn start_batch(
    ctx: &Ctx,
    rig: &Rig,
    config: Config,
    program: BatchProgram,
    budget_us: Option<f64>,
    rps: f64,
) -> Result<Box<dyn BatchRun>> {
    let policy = config.policy().unwrap_or(if config.needs_lc_writer() {
        elfen_policy::PolicyKind::BorrowIdle
    } else {
        elfen_policy::PolicyKind::Unmanaged
    });
    let budget_ns = budget_us.map(|b| (b * 1e3).round() as u64).unwrap_or(0);
    rig::configure_page(rig, policy.id(), budget_ns, ctx.spec.batch.nap.id())?;
    let plan = batch_plan(ctx.spec, rig, config, program);
    let cgroup = match config {
        Config::Cpuset => rig.cgroups.cpuset.as_ref(),
        Config::CfsQuota => rig.cgroups.quota.as_ref(),
        Config::CpuIdle => rig.cgroups.idle.as_ref(),
        Config::Freeze => rig.cgroups.freezer.as_ref(),
        Config::BlindIsolation => rig.cgroups.blind.as_ref(),
        Config::Auto => rig.cgroups.auto.as_ref(),
        _ => None,
    };
    let procs = cgroup.map(|g| rig.cgroups.procs_file(g)).transpose()?;
    let bp = batch::spawn(
        Start {
            worker_exe: ctx.worker_exe,
            input: &rig.batch_input,
            cgroup_procs: procs.as_deref(),
        },
        &plan,
        Duration::from_secs(20),
    )?;
    bp.go();
    if config.needs_lc_writer() {
        return Ok(Box::new(daemon_mode::Managed::start(rig, config, bp, rps)?));
    }
    Ok(bp)
}

/// Runs one invocation: a fresh batch process (if the configuration has
/// one) is started, settles, runs through the invocation and is killed, so
/// every invocation of the interleaved rounds starts alike. An invocation
/// during which other processes or the host took more than
/// `disturbed_lanes` of the machine is run again, with the same seed (up to
/// `disturbed_retries` times and while the sweep's re-runs have taken less
/// than `rerun_budget_s`; the least disturbed attempt is kept and
/// `measured.disturbed_retries` counts the re-runs).
pub fn run_measured(
    ctx: &Ctx,
    rig: &mut Rig,
    progress: &mut Progress,
    wall: &mut WallClock,
    phase: Phase,
    inv: Inv,
) -> Result<Measured> {
    check_stop(ctx.stop)?;
    let spec = ctx.spec;
    let what = match inv.batch {
        Some(k) => format!("{} · {k} @ {:.0} rps", inv.config, inv.rps),
        None => format!("{} @ {:.0} rps", inv.config, inv.rps),
    };
    let (label, part, first) = match phase {
        Phase::Probe => (format!("capacity probe: {what}"), Part::Probe, true),
        Phase::PreSweep => (format!("knee pre-sweep: {what}"), Part::PreSweep, true),
        Phase::Main if inv.round < spec.reps => (
            format!("round {}/{} · {what}", inv.round + 1, spec.reps),
            Part::Points,
            inv.config == Config::LcAlone,
        ),
        Phase::Main => (
            format!(
                "added round {} (cap {}) · {what}",
                inv.round + 1,
                spec.max_reps
            ),
            Part::Points,
            inv.config == Config::LcAlone,
        ),
    };
    progress.show(&label, first);
    let seed = plan::invocation_seed(spec.seed, inv.rps, inv.round);
    let mut kept = attempt(ctx, rig, wall, part, inv, seed)?;
    let disturbance = |m: &Measured| m.rep.measured.as_ref().map_or(0.0, |r| r.disturbance());
    let mut retries = 0;
    while should_rerun(disturbance(&kept), retries, wall.rerun_s, spec) {
        retries += 1;
        let t = Instant::now();
        let rerun_part = if phase == Phase::Main {
            Part::Reruns
        } else {
            part
        };
        let again = attempt(ctx, rig, wall, rerun_part, inv, seed);
        wall.rerun_s += t.elapsed().as_secs_f64();
        let again = again?;
        if disturbance(&again) < disturbance(&kept) {
            kept = again;
        }
    }
    if let Some(m) = kept.rep.measured.as_mut() {
        m.disturbed_retries = retries;
    }
    if phase == Phase::Main {
        kept.rep.round = Some(inv.round + 1);
    }
    if kept
        .rep
        .measured
        .as_ref()
        .is_some_and(|m| m.connections_closed > 0)
    {
        progress.say(&format!(
            "note: the LC service closed the connection during {what}; its {} unanswered \
             requests count as errors",
            kept.rep.errors
        ));
    }
    progress.step_done();
    Ok(kept)
}

/// Whether an invocation that took `disturbance` lanes of foreign CPU and
/// steal, already re-run `retries` times, is run again, given the sweep's
/// re-runs so far took `rerun_s` seconds.
pub fn should_rerun(disturbance: f64, retries: u32, rerun_s: f64, spec: &BenchSpec) -> bool {
    disturbance > spec.disturbed_lanes
        && retries < spec.disturbed_retries
        && rerun_s < spec.rerun_budget_s
}

/// One attempt of an invocation, batch process included; its wall time is
/// charged to `part` (and the batch's start, settle and stop, in the main
/// rounds, also to the points' batch start/stop share).
fn attempt(
    ctx: &Ctx,
    rig: &mut Rig,
    wall: &mut WallClock,
    part: Part,
    inv: Inv,
    seed: u64,
) -> Result<Measured> {
    let t0 = Instant::now();
    let mut bp = match inv.batch {
        Some(k) => {
            let bp = start_batch(ctx, rig, inv.config, k, inv.budget_us, inv.rps)?;
            std::thread::sleep(Duration::from_millis(ctx.spec.batch.settle_ms));
            Some(bp)
        }
        None => None,
    };
    let started = t0.elapsed();
    let plan = plan::invocation_plan(ctx.spec, &rig.set, ctx.work_scale, inv.rps, seed);
    let alone = inv
        .batch
        .and_then(|k| ctx.alone.iter().find(|(a, _)| *a == k).map(|(_, u)| *u));
    let m = measure::run_rep(
        ctx.spec,
        rig,
        &mut bp,
        What {
            config: inv.config,
            batch: inv.batch,
            budget_us: inv.budget_us,
        },
        &plan,
        alone,
        ctx.stop,
    );
    let t1 = Instant::now();
    drop(bp);
    wall.charge(part, t0);
    if part == Part::Points {
        wall.batch_start_stop((started + t1.elapsed()).as_secs_f64());
    }
    m
}

/// The round the probe and pre-sweep invocations draw seeds from.
pub fn presweep_round(i: u32) -> u32 {
    PRESWEEP_ROUND - i
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
