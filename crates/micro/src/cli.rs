//! `elfen micro`: the micro-benchmarks (the Elfen paper's Figure 8, done our
//! way), printed as a table and saved as JSON.
use crate::report::{self, ClockInfo, MicroReport};
use crate::setup::{BenchPage, Lanes};
use crate::suite::{self, Params};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use elfen_cmd::Progress;
use elfen_cmd::proc::{MachineTicks, loadavg, process_ticks};
use std::path::{Path, PathBuf};

/// The micro-benchmarks' subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Micro-benchmarks: nap/wake latency per nap backend, check cost, instrumentation overhead.
    #[command(long_about = LONG_ABOUT, after_long_help = FIGURES)]
    Micro(MicroArgs),
}

const LONG_ABOUT: &str = "\
Micro-benchmarks of elfen's mechanism (the Elfen paper's Figure 8, done our way): how fast a \
batch thread steps aside when a request begins and comes back when it ends, per nap backend; \
what a check costs; what the checks cost the batch kernels. Prints a table and saves every raw \
figure as JSON (default results/micro-<UTC time>.json; re-print with --show FILE).

The LC thread runs on the request lane's CPU and the batch thread on its partner batch lane's \
CPU (elfen_topo::plan_pairs: SMT siblings, --pairs, or CPUs 0 and 1 on a 2-vCPU machine), over \
a fresh signal page (borrow idle) in a temporary directory under /dev/shm that is removed at \
the end, on error and on Ctrl-C. Threads are unpinned afterwards. Timestamps are the page \
clock (TSC). Run it on an otherwise idle machine: the load average before the run and the share of CPU \
time other processes used during it are recorded.";

const FIGURES: &str = "\
FIGURES

Step-aside latency (per nap backend: spin, futex, hybrid; umwait and mwaitx are reported as \
unavailable with the runtime's detection reason where the CPU or OS lacks them)
    From just before the LC thread's request_begin() to the moment the LC thread, spinning on \
    the batch line, sees `napping` >= 1. The batch thread increments `napping` in its slow path \
    right before it enters the nap, after its policy decided to nap: from then on it runs no \
    batch code. Includes the cross-CPU trip of the LC's `state` line to the batch thread and of \
    the batch line back. p50 / p99 / p99.9 over >= 10,000 toggles (HdrHistogram). Before each \
    toggle the batch thread runs batch code (a Loop unit per check) for a random 5-50 us.

Wake latency
    From just before request_end() (including the LC's FUTEX_WAKE when a batch thread sleeps \
    in the OS) to the moment the LC thread sees the batch thread's `resumed` counter move: the \
    batch thread's check returned and it runs batch code again. Requests are held for a \
    random 10-100 us, so futex naps are asleep in the kernel, and the hybrid nap (spin 50 us, \
    then futex) is woken from its spin in some toggles and from the OS in others; the table \
    splits hybrid's wakes by which (from the batch line's `sleepers` at request_end()).

Disturbed samples
    The host pauses a vCPU ~1,300 times a second for ~10 us, which dominates p99. A sample is \
    disturbed when the LC thread sees a gap > --disturb-us (default 5) between consecutive \
    clock reads of its spin loop during the sample, or (step-aside) the batch thread sees one \
    in the batch-code part of its loop. Every percentile is given over all samples AND over \
    undisturbed samples, with the fraction disturbed; nothing is dropped silently. Pauses of \
    the batch vCPU inside a nap are invisible from outside, so 'undisturbed' may still hold a few.

Fast-path cost, ns per check
    On the batch lane, with a real attached batch thread whose request lane stays idle: a \
    tight loop of BatchThread::check() (Rust) minus the same loop without it; and the same in \
    C with elfen.h's inline elfen_check() on a thread attached through libelfen. A/B runs \
    interleaved; median and spread over --reps repetitions.

Instrumentation overhead, units/s and %
    Each batch kernel (loop: one empty call per unit; matrix: one 5x5 multiply; flush: zero \
    32 KB; stream: 4 KB of stores over 64 MB) with checks vs the same kernel without: C built \
    with -finstrument-functions (elfen_check() at every unit's entry, via libelfen's hook \
    __cyg_profile_func_enter) vs the same C built without; on x86-64 C built with -pg \
    -mfentry (the same check in libelfen's __fentry__, called before each unit's prologue) \
    vs the same; Rust with BatchThread::check() at every unit vs NoCheck. \
    Overhead = unchecked units/s / checked units/s - 1, per A/B repetition (interleaved, \
    --run-ms each); median and spread over --reps repetitions. Loop, an empty call, is the \
    worst case.

Stream interference
    A pointer chase on the request lane while the batch lane runs Loop (compute only: the \
    baseline) or the Stream kernel storing plainly or non-temporally: ns per hop and \
    slowdown against the baseline, at 1.5, 2, 3 and 4 times the L2. The mode \
    whose largest slowdown over the sizes is larger by at least 5 % is named worse (the \
    geometric mean over sizes is shown too); the Stream kernel's default is chosen from \
    these figures (docs/micro.md).

Host pauses
    Both lanes read the clock in a tight loop for 2 s (--quick 0.1 s) before the toggles; \
    every gap > --disturb-us is a pause. Pauses per second, fraction of time paused, pause \
    lengths: the fraction paused is the chance that the batch vCPU is paused when a request \
    begins or ends, which no nap backend can hide and the disturbance filter cannot see.

Targets (benchmarks, never pass/fail of a test): fast path <= 1 ns; overhead <= 2 % on Matrix \
and Flush; step-aside p99 <= 2 us with spin and hybrid; wake p99 <= 2 us with spin, <= 100 us \
with futex. The table says met or MISSED for each, over all samples and over undisturbed ones.

--quick runs every figure briefly (500 toggles, short A/B runs): for smoke tests, not quoting. \
--runs N repeats the whole benchmark and reports the median and spread over the runs.";

/// Arguments of `elfen micro`.
#[derive(Debug, Args)]
pub struct MicroArgs {
    /// Write the JSON result here (default: results/micro-<UTC time>.json).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Every figure, briefly (500 toggles, 10 ms A/B runs): a smoke test, not for quoting.
    #[arg(long)]
    pub quick: bool,
    /// Repeat the whole benchmark N times; report medians and spread over the runs.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub runs: usize,
    /// Toggles per nap backend (default 20,000; --quick 500).
    #[arg(long, value_name = "N")]
    pub toggles: Option<u64>,
    /// A/B repetitions of the fast-path and overhead comparisons (default 21; --quick 3).
    #[arg(long, value_name = "N")]
    pub reps: Option<usize>,
    /// Length of each overhead A/B run in ms (default 50; --quick 10).
    #[arg(long, value_name = "MS")]
    pub run_ms: Option<u64>,
    /// Repetitions of each stream-interference condition per chase size (default 5; --quick 1).
    #[arg(long, value_name = "N")]
    pub stream_reps: Option<usize>,
    /// A clock gap above this (µs) marks a latency sample disturbed.
    #[arg(long, value_name = "US", default_value_t = 5.0)]
    pub disturb_us: f64,
    /// Request:batch CPU pairing (e.g. "0:1"); the first pair is measured.
    #[arg(long, value_name = "SPEC")]
    pub pairs: Option<String>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Print the table of a saved result file and exit (measures nothing).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "quick", "runs", "toggles", "reps", "run_ms", "stream_reps", "pairs"])]
    pub show: Option<PathBuf>,
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Micro(args) => run(args),
        }
    }
}

fn run(args: MicroArgs) -> anyhow::Result<()> {
    if let Some(file) = &args.show {
        let r =
            MicroReport::load(file).with_context(|| format!("cannot show {}", file.display()))?;
        print!("{}", report::render(&r));
        return Ok(());
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if !(args.disturb_us > 0.0 && args.disturb_us.is_finite()) {
        bail!("--disturb-us must be a positive number of microseconds");
    }
    let mut params = if args.quick {
        Params::quick()
    } else {
        Params::full()
    };
    if let Some(n) = args.toggles {
        if n == 0 {
            bail!("--toggles must be at least 1");
        }
        params.toggle.toggles = n;
    }
    if let Some(n) = args.reps {
        if n == 0 {
            bail!("--reps must be at least 1");
        }
        params.reps = n;
    }
    if let Some(n) = args.stream_reps {
        if n == 0 {
            bail!("--stream-reps must be at least 1");
        }
        params.stream_reps = n;
    }
    if let Some(ms) = args.run_ms {
        if ms == 0 {
            bail!("--run-ms must be at least 1");
        }
        params.run_ms = ms;
    }
    params.toggle.disturb_ns = (args.disturb_us * 1000.0).round() as u64;

    elfen_cmd::interrupt::install();
    let created_unix_s = elfen_cmd::time::now_unix_s();
    let json_path = args.json.clone().unwrap_or_else(|| {
        Path::new("results").join(format!(
            "micro-{}.json",
            elfen_cmd::time::utc_stamp(created_unix_s)
        ))
    });
    let progress = Progress::new(!args.quiet);
    let lanes = Lanes::plan(args.pairs.as_deref()).context("choosing the lanes to measure")?;
    progress.say(&format!(
        "lanes: request cpu {} ↔ batch cpu {} ({})",
        lanes.request_cpu, lanes.batch_cpu, lanes.pairing
    ));
    let load_before = loadavg();
    let me = std::process::id();
    let (machine0, own0) = (MachineTicks::now(), process_ticks(me));
    let page = BenchPage::create(&lanes).context("creating the benchmark's signal page")?;
    progress.say(&format!("signal page {}", page.path().display()));
    let clock = page.page().clock();
    let hybrid_spin_ns = page
        .page()
        .read_controller(crate::setup::BATCH_LANE)
        .map(|c| c.hybrid_spin_ns)
        .unwrap_or(0);
    let mut runs = Vec::new();
    for r in 0..args.runs {
        if args.runs > 1 {
            progress.say(&format!("run {}/{}", r + 1, args.runs));
        }
        let one = suite::run_once(&page, &lanes, &params, &progress)
            .with_context(|| format!("micro-benchmark run {}", r + 1))?;
        runs.push(one);
    }
    drop(page);
    let load_after = loadavg();
    // Others' share of the machine: time charged to other processes
    // (user + nice + system, interrupt time left out), over all CPU time.
    let others_busy_fraction = {
        let m = MachineTicks::now().since(&machine0);
        let own = process_ticks(me).saturating_sub(own0);
        m.process_busy.saturating_sub(own) as f64 / m.total.max(1) as f64
    };
    let summary = report::summarize(&runs);
    let report = MicroReport {
        schema: report::SCHEMA.to_string(),
        created_unix_s,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        params,
        load_before,
        load_after,
        others_busy_fraction,
        system: elfen_topo::SystemInfo::collect(),
        lanes,
        clock: ClockInfo {
            kind: if clock.kind == elfen_shm::layout::clock::TSC {
                "tsc".into()
            } else {
                "monotonic_ns".into()
            },
            ticks_per_sec: clock.ticks_per_sec,
        },
        hybrid_spin_ns,
        runs,
        summary,
    };
    report
        .save(&json_path)
        .with_context(|| format!("saving the results to {}", json_path.display()))?;
    print!("{}", report::render(&report));
    println!("\nsaved {}", json_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {}
