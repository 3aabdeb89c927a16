//! `elfen daemon measure`: what the daemon costs and how fast its guards
//! step aside, on this machine, with the daemon's own code in this process.
//!
//! Each run has up to five phases, each a fresh daemon (its own page and state
//! file) protecting a synthetic LC service (`lc-helper`, a child pinned to
//! the request lane) from an unmodified batch spinner (`spin-helper`, a
//! command the daemon starts SCHED_IDLE in its group, confined to the
//! batch lane):
//!
//! - **zero** load, guard mode: the LC sleeps; the daemon's CPU time is
//!   its idle upkeep.
//! - **half** load, guard mode: the LC is busy 500 µs, idle 250–750 µs,
//!   again (≈ 50 % busy in bursts, ~1,000 bursts/s). Measured: the
//!   daemon's CPU time *besides* the guards' occupation of the batch lane
//!   (which is the protection, not overhead), and the **step-aside**
//!   latency of every burst: the context switch of the LC thread onto the
//!   request lane (the BPF event's time) → the guard running on the batch
//!   lane, i.e. the spinner off it.
//! - **freeze**: the same LC with the batch group in freeze mode: the
//!   freeze latency (request → frozen), the thaw write, and switch → frozen.
//! - **blind**, twice: blind isolation (`B` = 0, the batch unconfined, so
//!   its cpuset follows the LC) woken at the writer's busy edges (`[blind]
//!   wake = "events"`, the default) and then polling the slots every
//!   `blind_poll_us` only (`wake = "poll"`), on an LC busy 500 µs, idle
//!   2–6 ms (a grow hold of 500 µs, so batch gets the LC's CPU back in each
//!   gap): the **reaction**, the LC's switch onto a CPU of the batch's set →
//!   the cpuset write that took it away returned (0 when the LC's wake-up
//!   announced it and the CPU was taken before the switch-in).
//!
//! CPU times are per thread (`/proc/<pid>/task/<tid>/schedstat`) over a
//! window after a warm-up: writer + guards − occupation + the upkeep
//! thread, as a share of one lane. Every run is kept in the JSON
//! (`elfen-daemon-measure/3`); the table shows medians over runs
//! (`summary.rs`: the study of the runs; `render.rs`: the table).

use crate::config::{BatchSection, BlindSection, BlindWake, Config, FreezeSection, Mode, Unfit};
use crate::daemon::Daemon;
use crate::guard::LatencySummary;
use crate::helpers::LcHelperArgs;
use crate::plan::Plan;
use anyhow::{Context, bail};
use elfen_cmd::proc::{Schedstat, thread_schedstat};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod reference;
mod render;
mod summary;

pub use reference::{WakeCharge, wake_charge};
pub use render::render;
pub use summary::{PhaseSummary, Summary, summarize};

/// Schema tag of [`MeasureReport`].
pub const SCHEMA: &str = "elfen-daemon-measure/3";

/// What to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Repetitions of the phases.
    pub runs: usize,
    /// Measured window of each phase, ms (after the warm-up).
    pub window_ms: u64,
    /// Warm-up before each window, ms.
    pub warmup_ms: u64,
    /// The lane pairing (`None`: elfen-topo's plan).
    pub pairs: Option<String>,
    /// Half load: busy period, µs.
    pub busy_us: u64,
    /// Half load: idle periods, µs (uniform).
    pub idle_us: (u64, u64),
    /// Skip the freeze phase.
    pub no_freeze: bool,
    /// Busy edges published at the LC's wake-up (`[signal]
    /// announce_wakeups`); false: at its switch-in.
    #[serde(default = "yes")]
    pub announce_wakeups: bool,
    /// Skip the two blind-isolation phases.
    #[serde(default)]
    pub no_blind: bool,
    /// The polled blind phase's interval, µs (the slots read this often).
    #[serde(default = "blind_poll_us")]
    pub blind_poll_us: u64,
    /// The helper program and the arguments before its subcommand.
    #[serde(skip)]
    pub helper: Vec<String>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            runs: 3,
            window_ms: 5000,
            warmup_ms: 500,
            pairs: None,
            busy_us: 500,
            idle_us: (250, 750),
            no_freeze: false,
            announce_wakeups: true,
            no_blind: false,
            blind_poll_us: blind_poll_us(),
            helper: Vec::new(),
        }
    }
}

/// One phase's figures.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Phase {
    /// The window, ns.
    pub window_ns: u64,
    /// LC busy time in the window (its LC line), % of the window.
    pub lc_busy_pct: f64,
    /// LC busy periods begun in the window.
    pub lc_periods: u64,
    /// Writer thread CPU, ns.
    pub writer_cpu_ns: u64,
    /// Guard threads CPU, ns.
    pub guard_cpu_ns: u64,
    /// Of the daemon's CPU (guards and the writer's hold), spinning on the
    /// batch lane while the LC was busy: the occupation, ns.
    pub occupied_ns: u64,
    /// Spinning on it through the LC's idle gaps (the hold), ns.
    #[serde(default)]
    pub held_ns: u64,
    /// Freezer thread CPU, ns.
    pub freezer_cpu_ns: u64,
    /// The upkeep thread (heartbeat, rescans), ns.
    pub upkeep_cpu_ns: u64,
    /// Writer + guards − occupation + freezer + upkeep, % of one lane.
    pub overhead_pct: f64,
    /// Times the writer was switched in during the window (its wake-ups).
    #[serde(default)]
    pub writer_runs: u64,
    /// Times the guards were switched in (wake-ups, and returns after the
    /// writer preempted them).
    #[serde(default)]
    pub guard_runs: u64,
    /// The batch spinner's CPU, % of one lane.
    pub batch_pct: f64,
    /// The LC's switch onto the request lane (the BPF event's time) → the
    /// writer running on the batch lane at SCHED_FIFO: the unmodified
    /// batch thread is off the lane from then on.
    pub off_lane: LatencySummary,
    /// The same switch → the guard running, about to occupy the lane
    /// (guard phases), or → the group frozen (freeze phase).
    pub step_aside: LatencySummary,
    /// Freeze request → frozen (freeze phase).
    pub freeze: LatencySummary,
    /// Thaw write (freeze phase).
    pub thaw: LatencySummary,
    /// LC switch onto a CPU of the batch's set → the cpuset write that
    /// took it away (blind phases).
    #[serde(default)]
    pub reaction: LatencySummary,
    /// Blind steps taken on a busy edge (woken by the writer).
    #[serde(default)]
    pub blind_woken: u64,
    /// Blind steps taken on the poll interval.
    #[serde(default)]
    pub blind_polled: u64,
}

/// One run: the machine's wake-up charge and the phases.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Run {
    /// What the kernel charges a thread on the batch lane per wake-up from
    /// the request lane, before any daemon code ([`wake_charge`]).
    #[serde(default)]
    pub wake_charge: Option<WakeCharge>,
    /// Zero load, guard mode.
    pub zero: Phase,
    /// Half load, guard mode.
    pub half: Phase,
    /// Half load, freeze mode.
    pub freeze: Option<Phase>,
    /// Blind isolation woken at busy edges.
    #[serde(default)]
    pub blind_events: Option<Phase>,
    /// Blind isolation polling the slots every `blind_poll_us`.
    #[serde(default)]
    pub blind_polled: Option<Phase>,
}

/// The JSON file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasureReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// Seconds since the Unix epoch at the start.
    pub created_unix_s: u64,
    /// The command line.
    pub command: String,
    /// The machine.
    pub system: elfen_topo::SystemInfo,
    /// What was measured.
    pub params: Params,
    /// The signal source.
    pub source: String,
    /// Load averages before the run.
    pub load_before: [f64; 3],
    /// Load averages after the run.
    pub load_after: [f64; 3],
    /// Raw record.
    pub runs: Vec<Run>,
    /// Median, min and max over runs of each phase's figures.
    pub summary: Summary,
}

/// A child process killed and reaped when dropped.
type Helper = elfen_cmd::child::ChildGuard;

/// The command line that runs a helper subcommand of this program.
pub fn helper_prefix() -> Vec<String> {
    let exe = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "elfen".into());
    let mut v = vec![exe];
    if std::env::args().nth(1).as_deref() == Some("daemon") {
        v.push("daemon".into());
    }
    v
}

fn spawn_lc(p: &Params, cpu: u32, a: &LcHelperArgs) -> anyhow::Result<Helper> {
    let mut cmd = Command::new(&p.helper[0]);
    cmd.args(&p.helper[1..])
        .arg("lc-helper")
        .args(["--cpu", &cpu.to_string()])
        .args(["--busy-us", &a.busy_us.to_string()])
        .args(["--idle-min-us", &a.idle_min_us.to_string()])
        .args(["--idle-max-us", &a.idle_max_us.to_string()])
        .stdin(Stdio::null());
    if let Some(n) = &a.name {
        cmd.args(["--name", n]);
    }
    Ok(Helper::new(cmd.spawn().with_context(|| {
        format!("starting the LC helper {}", p.helper[0])
    })?))
}

/// What a phase runs: the batch group's mode, and for blind isolation
/// what wakes its controller.
#[derive(Debug, Clone, Copy)]
enum PhaseMode {
    Guard,
    Freeze,
    Blind(BlindWake),
}

/// A daemon configuration for one phase.
fn phase_config(p: &Params, dir: &Path, lc_pid: u32, pm: PhaseMode) -> Config {
    let mut argv = p.helper.clone();
    argv.push("spin-helper".into());
    let (mode, blind) = match pm {
        PhaseMode::Guard => (Mode::Guard, BlindSection::default()),
        PhaseMode::Freeze => (Mode::Freeze, BlindSection::default()),
        PhaseMode::Blind(wake) => (
            Mode::Blind,
            BlindSection {
                buffer_cores: 0,
                grow_hold_us: 500,
                wake,
                poll_us: match wake {
                    BlindWake::Events => BlindSection::default().poll_us,
                    BlindWake::Poll => p.blind_poll_us,
                },
            },
        ),
    };
    Config {
        page: crate::config::PageSection {
            path: PathBuf::from(format!(
                "/dev/shm/elfen-daemon-measure-{}",
                std::process::id()
            )),
            ..Default::default()
        },
        state_file: dir.join("state.json"),
        pairs: p.pairs.clone(),
        lc: crate::config::LcSection {
            pid: Some(lc_pid),
            ..Default::default()
        },
        signal: crate::config::SignalSection {
            announce_wakeups: p.announce_wakeups,
            ..Default::default()
        },
        batch: vec![BatchSection {
            name: "spinner".into(),
            mode,
            command: Some(argv),
            // blind isolation hands out every CPU: its cpuset follows the LC
            confine: Some(!matches!(pm, PhaseMode::Blind(_))),
            ..Default::default()
        }],
        blind,
        // the freeze phase times the freezer's mechanics: freeze is kept
        // whatever the judgement of the service says (it is printed)
        freeze: FreezeSection {
            unfit: Unfit::Warn,
            ..FreezeSection::default()
        },
        // a measurement run from a shell: the spinner's group at the root
        // where the shell's group is not delegated (said by the daemon)
        undelegated: crate::config::Undelegated::Root,
        ..Config::default()
    }
}

fn yes() -> bool {
    true
}

fn blind_poll_us() -> u64 {
    200
}

fn stat_of(pid: u32, tid: u32) -> Schedstat {
    thread_schedstat(pid, tid).unwrap_or_default()
}

fn cpu_of(pid: u32, tid: u32) -> u64 {
    stat_of(pid, tid).on_cpu_ns
}

/// CPU counters read at the start and end of a window.
#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    at: Option<Instant>,
    writer: u64,
    guards: u64,
    writer_runs: u64,
    guard_runs: u64,
    occupied: u64,
    held: u64,
    freezer: u64,
    upkeep: u64,
    batch: u64,
    lc_busy_ticks: u64,
    lc_periods: u64,
}

fn sample(d: &Daemon, freezer_tids: &[u32]) -> Sample {
    let me = std::process::id();
    let lane = d.plan().request_lanes[0].lane;
    let lc = d.page().lc(lane).ok();
    let writer = d
        .writer()
        .map_or_else(Schedstat::default, |w| stat_of(me, w.tid()));
    let guard_tids = d.env().map(|e| e.guard_tids()).unwrap_or_default();
    let guards: Vec<Schedstat> = guard_tids.iter().map(|&t| stat_of(me, t)).collect();
    let (occupied, held) = d.env().map_or((0, 0), |e| e.spin_ns());
    Sample {
        at: Some(Instant::now()),
        writer: writer.on_cpu_ns,
        guards: guards.iter().map(|s| s.on_cpu_ns).sum(),
        writer_runs: writer.runs,
        guard_runs: guards.iter().map(|s| s.runs).sum(),
        occupied,
        held,
        freezer: freezer_tids.iter().map(|&t| cpu_of(me, t)).sum(),
        upkeep: cpu_of(me, elfen_cmd::proc::gettid()),
        batch: d
            .groups()
            .iter()
            .filter_map(|g| g.child_pid())
            .map(|p| elfen_cmd::proc::process_cpu_ns_except(p, &[]))
            .sum(),
        lc_busy_ticks: lc.map_or(0, |l| {
            l.busy_ticks.load(std::sync::atomic::Ordering::Relaxed)
        }),
        // followed at their edges, or counted by the kernel while the
        // writer is off the edges (the two never overlap)
        lc_periods: d.writer().map_or(0, |w| {
            let s = w.stats();
            s.begins.load(std::sync::atomic::Ordering::Relaxed)
                + s.kernel_periods.load(std::sync::atomic::Ordering::Relaxed)
        }),
    }
}

/// Threads of this process named like the freezer.
fn freezer_tids() -> Vec<u32> {
    let me = std::process::id();
    elfen_cmd::proc::thread_ids(me)
        .into_iter()
        .filter(|t| {
            std::fs::read_to_string(format!("/proc/{me}/task/{t}/comm"))
                .is_ok_and(|c| c.trim() == "elfen-freezer")
        })
        .collect()
}

/// The first lane pair's request CPU and first batch CPU.
fn lane_pair(p: &Params) -> anyhow::Result<(u32, u32)> {
    let topo = elfen_topo::Topology::detect()?;
    let pairs = elfen_topo::plan_pairs(&topo, p.pairs.as_deref())?;
    pairs
        .first()
        .and_then(|pair| Some((pair.request, *pair.batch.first()?)))
        .context("this machine has no lane pair (needs 2 CPUs)")
}

/// Runs the daemon for one phase; returns its figures and the source.
fn phase(
    p: &Params,
    dir: &Path,
    mode: PhaseMode,
    lc: &LcHelperArgs,
) -> anyhow::Result<(Phase, String)> {
    let (cpu, _) = lane_pair(p)?;
    let lc_child = spawn_lc(p, cpu, lc)?;
    std::thread::sleep(Duration::from_millis(20));
    let plan = Plan::resolve(&phase_config(p, dir, lc_child.pid(), mode))
        .context("daemon configuration")?;
    let mut d = Daemon::start(plan).context("starting the daemon")?;
    let source = d
        .writer()
        .map(|w| w.source().to_string())
        .unwrap_or_default();
    let run_for = |d: &mut Daemon, ms: u64| -> anyhow::Result<()> {
        let end = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < end && !elfen_cmd::interrupt::interrupted() {
            d.tick().context("daemon")?;
            std::thread::sleep(Duration::from_millis(d.plan().config.heartbeat_ms));
        }
        Ok(())
    };
    let result = (|| {
        run_for(&mut d, p.warmup_ms)?;
        let ftids = freezer_tids();
        let a = sample(&d, &ftids);
        run_for(&mut d, p.window_ms)?;
        let b = sample(&d, &ftids);
        Ok::<_, anyhow::Error>((a, b))
    })();
    let clock = d.page().clock();
    let report = d.shutdown();
    drop(lc_child);
    let (a, b) = result?;
    let window_ns =
        b.at.zip(a.at)
            .map_or(1, |(b, a)| (b - a).as_nanos().max(1) as u64);
    let guard_cpu = b.guards.saturating_sub(a.guards);
    let occupied = b.occupied.saturating_sub(a.occupied);
    let held = b.held.saturating_sub(a.held);
    let mut ph = Phase {
        window_ns,
        lc_busy_pct: clock.ticks_to_ns(b.lc_busy_ticks.saturating_sub(a.lc_busy_ticks)) as f64
            * 100.0
            / window_ns as f64,
        lc_periods: b.lc_periods.saturating_sub(a.lc_periods),
        writer_cpu_ns: b.writer.saturating_sub(a.writer),
        guard_cpu_ns: guard_cpu,
        occupied_ns: occupied,
        held_ns: held,
        freezer_cpu_ns: b.freezer.saturating_sub(a.freezer),
        upkeep_cpu_ns: b.upkeep.saturating_sub(a.upkeep),
        writer_runs: b.writer_runs.saturating_sub(a.writer_runs),
        guard_runs: b.guard_runs.saturating_sub(a.guard_runs),
        batch_pct: b.batch.saturating_sub(a.batch) as f64 * 100.0 / window_ns as f64,
        ..Phase::default()
    };
    // The guards' (and the writer's) spinning is wall time on the batch
    // lane, in which the writer may also run (it preempts a spinning guard
    // to publish the idle edge): the daemon's own cost is its CPU time
    // beyond the occupation and the hold.
    let own = (ph.writer_cpu_ns + guard_cpu + ph.freezer_cpu_ns + ph.upkeep_cpu_ns)
        .saturating_sub(occupied)
        .saturating_sub(held);
    ph.overhead_pct = own as f64 * 100.0 / window_ns as f64;
    if let Some(w) = &report.writer {
        ph.off_lane = w.wake;
    }
    if let Some(g) = report.guards.first() {
        ph.step_aside = g.step_aside;
    }
    if let Some(f) = report.freezers.first() {
        ph.step_aside = f.step_aside;
        ph.freeze = f.freeze;
        ph.thaw = f.thaw;
    }
    if let Some(b) = report.blind.first() {
        ph.reaction = b.reaction;
        ph.blind_woken = b.woken;
        ph.blind_polled = b.polled;
    }
    if !report.restored.is_clean() {
        bail!("the daemon could not restore: {}", report.restored);
    }
    Ok((ph, source))
}

/// Runs every phase `p.runs` times.
pub fn measure(p: &Params) -> anyhow::Result<(Vec<Run>, String)> {
    if !crate::plan::is_root() {
        bail!("elfen daemon measure needs root (BPF, SCHED_FIFO guards, cgroups)");
    }
    if p.runs == 0 || p.window_ms == 0 {
        bail!("--runs and --window-ms must be at least 1");
    }
    let dir = tempfile_dir()?;
    let _cleanup = elfen_cmd::interrupt::register(&[&dir.join("state.json")], &[&dir]);
    let zero = LcHelperArgs {
        cpu: None,
        fifo: None,
        name: None,
        busy_us: 0,
        idle_min_us: 100_000,
        idle_max_us: 100_000,
        duration_ms: 0,
        delay_ms: 0,
        chase_steps: 0,
        chase_kib: 4096,
    };
    let half = LcHelperArgs {
        busy_us: p.busy_us,
        idle_min_us: p.idle_us.0,
        idle_max_us: p.idle_us.1,
        ..zero.clone()
    };
    // gaps longer than the grow hold: batch gets the LC's CPU back in each
    let gaps = LcHelperArgs {
        busy_us: p.busy_us,
        idle_min_us: 2000,
        idle_max_us: 6000,
        ..zero.clone()
    };
    let mut runs = Vec::new();
    let mut source = String::new();
    let result = (|| {
        for i in 0..p.runs {
            eprintln!("run {}/{}: the machine's wake-up charge", i + 1, p.runs);
            let (request, batch) = lane_pair(p)?;
            let charge = wake_charge(
                request,
                batch,
                crate::config::DEFAULT_GUARD_PRIORITY + 1,
                Duration::from_millis(p.window_ms.min(2000)),
            )
            .context("measuring the wake-up charge")?;
            eprintln!("run {}/{}: zero load", i + 1, p.runs);
            let (z, s) = phase(p, &dir, PhaseMode::Guard, &zero)?;
            source = s;
            eprintln!("run {}/{}: half load", i + 1, p.runs);
            let (h, _) = phase(p, &dir, PhaseMode::Guard, &half)?;
            let f = if p.no_freeze {
                None
            } else {
                eprintln!("run {}/{}: freeze mode", i + 1, p.runs);
                Some(phase(p, &dir, PhaseMode::Freeze, &half)?.0)
            };
            let (be, bp) = if p.no_blind {
                (None, None)
            } else {
                eprintln!(
                    "run {}/{}: blind isolation, woken at busy edges",
                    i + 1,
                    p.runs
                );
                let e = phase(p, &dir, PhaseMode::Blind(BlindWake::Events), &gaps)?.0;
                eprintln!(
                    "run {}/{}: blind isolation, polling every {} µs",
                    i + 1,
                    p.runs,
                    p.blind_poll_us
                );
                let q = phase(p, &dir, PhaseMode::Blind(BlindWake::Poll), &gaps)?.0;
                (Some(e), Some(q))
            };
            runs.push(Run {
                wake_charge: Some(charge),
                zero: z,
                half: h,
                freeze: f,
                blind_events: be,
                blind_polled: bp,
            });
            if elfen_cmd::interrupt::interrupted() {
                break;
            }
        }
        Ok::<_, anyhow::Error>(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    Ok((runs, source))
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("elfen-daemon-measure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Writes the report atomically (temp file + rename), creating the directory.
pub fn save(r: &MeasureReport, path: &Path) -> std::io::Result<()> {
    elfen_results::save_json(r, path)
}
