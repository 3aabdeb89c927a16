//! `elfen isobench memory`: a batch job that balloons next to a serving LC
//! service. Per run, two configurations side by side (order alternating):
//!
//! - **quiet**: the LC service under an open-loop load, its batch group
//!   idle (a sleeping command);
//! - **balloon**: the same, while the batch group's program grows its
//!   memory at a fixed rate (`balloon-helper`) past the daemon's memory
//!   watermark, set `headroom` below the `MemAvailable` of the run's start
//!   (so the run needs no more than about headroom + a little memory,
//!   whatever the machine; the watermark logic is the daemon's, unchanged).
//!
//! Measured: the LC's latency (from intended send times) and its major
//! page faults during the window; in the balloon configuration the time
//! from the watermark's crossing (this process reads `MemAvailable` every
//! millisecond) to the daemon seeing it and to the kill being done (the
//! group empty: its memory freed), what was killed (the kill log: only the
//! balloon's processes; the LC alive), and the kernel's OOM kills
//! (`/proc/vmstat` `oom_kill`, before and after: must not move).
//!
//! The LC service is `elfen isobench helper lc-server`: each request reads
//! random pages of a working set that is a file's pages — clean page cache
//! the kernel may evict under pressure, so a major fault shows where the
//! LC lost memory to the batch job.

use crate::common::*;
use anyhow::{Context, Result};
use elfen_ops::kills::KillLog;
use elfen_results::Stat;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// Repetitions of both configurations.
    pub runs: usize,
    /// The load.
    pub load: Load,
    /// The LC's working set, MiB (a file's pages).
    pub working_set_mib: u64,
    /// The watermark: this far below `MemAvailable` at the run's start, MiB.
    pub headroom_mib: u64,
    /// The balloon's growth, MiB/s.
    pub rate_mib_s: u64,
    /// The daemon's `[memory] poll_ms`.
    pub poll_ms: u64,
    /// The LC's CPU (the request lane).
    pub lc_cpu: u32,
    /// The load generator's (and the crossing watcher's) CPUs.
    pub generator_cpus: Vec<u32>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            runs: 5,
            load: Load {
                rps: 2000.0,
                work: 16,
                warmup_ms: 1000,
                window_ms: 8000,
            },
            working_set_mib: 256,
            headroom_mib: 1024,
            rate_mib_s: 256,
            poll_ms: 20,
            lc_cpu: 0,
            generator_cpus: vec![1],
        }
    }
}

/// One configuration's run.
#[derive(Debug, Clone, Serialize)]
pub struct Rep {
    /// `quiet` or `balloon`.
    pub config: &'static str,
    /// The run it belongs to.
    pub run: usize,
    /// The LC's latency and request counts.
    pub load: LoadResult,
    /// The LC's major faults during the load.
    pub lc_major_faults: u64,
    /// The watermark, bytes.
    pub watermark_bytes: u64,
    /// Watermark crossed (as this process's 1 ms reads saw it) → the daemon
    /// saw it, ms (balloon only; negative when the daemon's read came first).
    pub crossing_to_detect_ms: Option<f64>,
    /// Watermark crossed → the kill done (the group empty), ms.
    pub crossing_to_kill_ms: Option<f64>,
    /// Kills the daemon recorded.
    pub kills: u64,
    /// Processes those kills ended.
    pub killed_processes: u64,
    /// Killed groups other than the balloon's, or the LC gone.
    pub others_killed: bool,
    /// Kernel OOM kills during the run.
    pub oom_kills: u64,
}

/// Medians and spread per configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigSummary {
    /// The configuration.
    pub config: &'static str,
    /// LC p50, µs.
    pub p50_us: Stat,
    /// LC p99, µs.
    pub p99_us: Stat,
    /// LC p99.9, µs.
    pub p999_us: Stat,
    /// LC major faults.
    pub major_faults: Stat,
    /// Requests lost or failed, summed.
    pub errors: u64,
    /// Crossing → detected, ms.
    pub crossing_to_detect_ms: Option<Stat>,
    /// Crossing → killed, ms.
    pub crossing_to_kill_ms: Option<Stat>,
    /// Runs in which exactly the balloon was killed.
    pub balloon_killed_runs: usize,
    /// Runs in which anything else was killed.
    pub others_killed_runs: usize,
    /// Kernel OOM kills, summed.
    pub oom_kills: u64,
}

/// The summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Per configuration.
    pub configs: Vec<ConfigSummary>,
    /// Balloon p99 / quiet p99 of each run, median [min–max].
    pub p99_ratio: Stat,
}

fn summarize(reps: &[Rep]) -> Summary {
    let configs = ["quiet", "balloon"]
        .into_iter()
        .map(|c| {
            let r: Vec<&Rep> = reps.iter().filter(|r| r.config == c).collect();
            let f = |g: &dyn Fn(&Rep) -> f64| stat(&r.iter().map(|x| g(x)).collect::<Vec<_>>());
            let o = |g: &dyn Fn(&Rep) -> Option<f64>| {
                Stat::of(&r.iter().filter_map(|x| g(x)).collect::<Vec<_>>())
            };
            ConfigSummary {
                config: c,
                p50_us: f(&|x| x.load.latency_us.p50),
                p99_us: f(&|x| x.load.latency_us.p99),
                p999_us: f(&|x| x.load.latency_us.p999),
                major_faults: f(&|x| x.lc_major_faults as f64),
                errors: r.iter().map(|x| x.load.errors).sum(),
                crossing_to_detect_ms: o(&|x| x.crossing_to_detect_ms),
                crossing_to_kill_ms: o(&|x| x.crossing_to_kill_ms),
                balloon_killed_runs: r
                    .iter()
                    .filter(|x| x.kills == 1 && x.killed_processes >= 1 && !x.others_killed)
                    .count(),
                others_killed_runs: r.iter().filter(|x| x.others_killed).count(),
                oom_kills: r.iter().map(|x| x.oom_kills).sum(),
            }
        })
        .collect();
    let runs = reps.iter().map(|r| r.run).max().map_or(0, |m| m + 1);
    let ratios: Vec<f64> = (0..runs)
        .filter_map(|i| {
            let p = |c| {
                reps.iter()
                    .find(|r| r.run == i && r.config == c)
                    .map(|r| r.load.latency_us.p99)
            };
            Some(p("balloon")? / p("quiet")?)
        })
        .collect();
    Summary {
        configs,
        p99_ratio: stat(&ratios),
    }
}

/// Polls `MemAvailable` every millisecond until stopped; the first time
/// (`CLOCK_MONOTONIC` ns) it is below `watermark`.
fn crossing_watcher(
    watermark: u64,
    cpus: Vec<u32>,
    stop: Arc<AtomicBool>,
) -> (std::thread::JoinHandle<()>, Arc<AtomicU64>) {
    let at = Arc::new(AtomicU64::new(0));
    let a2 = Arc::clone(&at);
    let t = std::thread::spawn(move || {
        let _ = elfen_topo::set_current_affinity(&cpus);
        while !stop.load(Ordering::Relaxed) {
            let avail = elfen_daemon::isolation::plan::meminfo()
                .1
                .unwrap_or(u64::MAX);
            if avail < watermark && a2.load(Ordering::Relaxed) == 0 {
                a2.store(elfen_shm::clock::monotonic_ns(), Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    (t, at)
}

fn one(
    p: &Params,
    helpers: &Helpers,
    run: usize,
    balloon: bool,
    dir: &Path,
    stop: &AtomicBool,
) -> Result<Rep> {
    let port = free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let lc_name = format!("isolc{}", std::process::id() % 100_000);
    let lc = ChildGuard::new(
        helpers
            .command(&[
                "lc-server".into(),
                format!("--listen={addr}"),
                format!("--cpu={}", p.lc_cpu),
                format!("--working-set-mib={}", p.working_set_mib),
                format!("--file={}", dir.join("lc-working-set").display()),
                format!("--name={lc_name}"),
            ])
            .spawn()
            .context("starting the LC server")?,
    );
    wait_listening(addr, Duration::from_secs(60))?;
    let avail = elfen_daemon::isolation::plan::meminfo()
        .1
        .context("MemAvailable")?;
    let watermark = avail.saturating_sub(p.headroom_mib << 20);
    let kill_log = dir.join(format!("kills-{run}-{balloon}.json"));
    let command = if balloon {
        helpers.argv(&[
            "balloon".into(),
            format!("--rate-mib-s={}", p.rate_mib_s),
            format!("--max-mib={}", p.headroom_mib + 1024),
            format!("--delay-ms={}", p.load.warmup_ms),
            "--quiet".into(),
        ])
    } else {
        vec!["sleep".into(), "3600".into()]
    };
    let argv = command
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let page = format!("/dev/shm/elfen-isobench-{}-mem", std::process::id());
    let config = format!(
        "page = \"{page}\"\nstate_file = \"{}\"\npairs = \"{}:{}\"\nundelegated = \"root\"\n\
         [metrics]\nlisten = \"\"\n\
         [memory]\nmin_available = {watermark}\npoll_ms = {}\ncooldown_ms = 600000\nkill_log = \"{}\"\n\
         [lc]\npid = {}\n\
         [[batch]]\nname = \"balloon\"\nmode = \"idle\"\npriority = 0\ncommand = [{argv}]\n",
        dir.join("state.json").display(),
        p.lc_cpu,
        p.generator_cpus[0],
        p.poll_ms,
        kill_log.display(),
        lc.pid()
    );
    let oom0 = oom_kills();
    let d = InProcessDaemon::start(&config, true)?;
    let wstop = Arc::new(AtomicBool::new(false));
    let (watcher, crossed) =
        crossing_watcher(watermark, p.generator_cpus.clone(), Arc::clone(&wstop));
    let f0 = major_faults(lc.pid());
    let load = run_load(addr, &p.load, &p.generator_cpus, stop);
    let f1 = major_faults(lc.pid());
    // a late kill still counts
    std::thread::sleep(Duration::from_millis(200));
    wstop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let lc_alive = elfen_shm::pid_alive(lc.pid());
    d.stop()?;
    drop(lc);
    let load = load?;
    let log = KillLog::load(&kill_log)?.unwrap_or_default();
    let crossed = crossed.load(Ordering::Relaxed);
    let first = log.kills.first();
    let since = |t: u64| (crossed > 0).then(|| (t as f64 - crossed as f64) / 1e6);
    Ok(Rep {
        config: if balloon { "balloon" } else { "quiet" },
        run,
        load,
        lc_major_faults: f1.saturating_sub(f0),
        watermark_bytes: watermark,
        crossing_to_detect_ms: first.and_then(|k| since(k.detected_mono_ns)),
        crossing_to_kill_ms: first.and_then(|k| since(k.done_mono_ns)),
        kills: log.total(),
        killed_processes: log.kills.iter().map(|k| k.processes.len() as u64).sum(),
        others_killed: !lc_alive || log.kills.iter().any(|k| k.group != "balloon"),
        oom_kills: oom_kills().saturating_sub(oom0),
    })
}

/// Runs the benchmark; `progress` prints a line per configuration run.
pub fn measure(p: &Params, helpers: &Helpers, stop: &AtomicBool) -> Result<Vec<Rep>> {
    need_root()?;
    anyhow::ensure!(!p.generator_cpus.is_empty(), "no generator CPU");
    let dir = tempfile_dir("mem")?;
    let mut reps = Vec::new();
    for run in 0..p.runs {
        let order = if run % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for balloon in order {
            anyhow::ensure!(!stop.load(Ordering::Relaxed), "interrupted");
            let r = one(p, helpers, run, balloon, dir.path(), stop)?;
            eprintln!(
                "run {run} {:<7}: p99 {:.0} µs, {} major faults, {} errors{}",
                r.config,
                r.load.latency_us.p99,
                r.lc_major_faults,
                r.load.errors,
                match r.crossing_to_kill_ms {
                    Some(ms) => format!(", watermark → killed {ms:.1} ms"),
                    None if balloon => ", the watermark was not crossed (or no kill)".into(),
                    None => String::new(),
                }
            );
            reps.push(r);
        }
    }
    Ok(reps)
}

/// A temporary directory on the root disk (not tmpfs: the LC's working set
/// must be a disk file's evictable pages).
pub(crate) fn tempfile_dir(tag: &str) -> Result<TempDir> {
    let base = std::env::var_os("ELFEN_ISOBENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/var/tmp"));
    let d = base.join(format!("elfen-isobench-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(TempDir(d))
}

/// A directory removed when dropped.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The summary of `reps`.
pub fn summary(reps: &[Rep]) -> Summary {
    summarize(reps)
}

/// The table.
pub fn render(s: &Summary) -> String {
    let mut o = String::from(
        "config    LC p50 µs              LC p99 µs              major faults       errors  \
         watermark → killed ms   kills ok  others killed  OOM kills\n",
    );
    for c in &s.configs {
        o += &format!(
            "{:<9} {:<22} {:<22} {:<18} {:>6}  {:<22}  {:>8}  {:>13}  {:>9}\n",
            c.config,
            fmt_stat(&c.p50_us, 0),
            fmt_stat(&c.p99_us, 0),
            fmt_stat(&c.major_faults, 0),
            c.errors,
            c.crossing_to_kill_ms
                .as_ref()
                .map_or("-".into(), |s| fmt_stat(s, 1)),
            c.balloon_killed_runs,
            c.others_killed_runs,
            c.oom_kills
        );
    }
    o += &format!(
        "LC p99 with the balloon / without, per run: {}\n",
        fmt_stat(&s.p99_ratio, 2)
    );
    if let Some(c) = s.configs.iter().find(|c| c.config == "balloon") {
        if let Some(d) = &c.crossing_to_detect_ms {
            o += &format!(
                "watermark crossed → the daemon saw it: {} ms (MemAvailable is read every poll_ms)\n",
                fmt_stat(d, 1)
            );
        }
    }
    o
}

/// The result file's parameters, summary and runs, written to `json`.
pub fn report(p: &Params, reps: Vec<Rep>, load_before: [f64; 3]) -> Report<Params, Rep, Summary> {
    Report {
        schema: SCHEMA,
        bench: "memory",
        created_unix_s: elfen_cmd::time::now_unix_s(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        system: elfen_topo::SystemInfo::collect(),
        load_before,
        load_after: elfen_cmd::proc::loadavg(),
        params: p.clone(),
        summary: summarize(&reps),
        runs: reps,
    }
}
