//! `elfen isobench failsafe`: the heartbeat fail-safe's detection time.
//! Per run: `elfen daemon` (a child process: cooperative mode, beating the
//! page every `heartbeat_ms`, staleness bound 10 beats) protects a
//! synthetic LC service busy in bursts; a cooperative batch thread in this
//! process (the runtime's `BatchThread`, futex naps) checks in a loop on
//! the batch lane. At a random moment the daemon gets SIGKILL. Measured
//! from the kill:
//!
//! - **stale**: until the page says batch threads pause
//!   (`Page::batch_mode` = stale: the heartbeat older than the bound) —
//!   the fail-safe's detection time (bounded by the staleness bound less
//!   the time since the last beat);
//! - what the batch thread does: the LC line the dead daemon left is
//!   frozen busy or idle. Frozen busy, the thread naps (it was already
//!   napping on the busy line; from the detection on, for the stale
//!   heartbeat). Frozen idle, a thread in its fast path never enters the
//!   slow path and runs on (the documented limit of the fail-safe,
//!   `docs/protocol.md`): counted, with the thread's loop still advancing
//!   a second after the detection.

use crate::common::*;
use anyhow::{Context, Result};
use elfen_results::Stat;
use elfen_runtime::{BatchOptions, BatchThread, NapChoice};
use elfen_shm::{Access, BatchMode, KillMode, Page};
use rand::Rng;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// Repetitions.
    pub runs: usize,
    /// The daemon's heartbeat, ms (the staleness bound is 10 beats).
    pub heartbeat_ms: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            runs: 10,
            heartbeat_ms: 100,
        }
    }
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct Rep {
    /// The run.
    pub run: usize,
    /// Share of samples of the LC line that said busy before the kill
    /// (the daemon wrote it).
    pub lc_busy_share: f64,
    /// SIGKILL → the page says batch threads pause, ms.
    pub stale_ms: Option<f64>,
    /// The LC line the dead daemon left says busy.
    pub frozen_busy: bool,
    /// The batch thread napped 100 ms after the detection.
    pub thread_napping: bool,
    /// The batch thread's loop still advanced between 0.1 and 1.1 s after
    /// the detection.
    pub thread_running: bool,
}

/// The summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// SIGKILL → stale, ms.
    pub stale_ms: Stat,
    /// The staleness bound, ms.
    pub bound_ms: f64,
    /// Runs whose LC line froze busy.
    pub frozen_busy_runs: usize,
    /// Of those, runs whose thread napped.
    pub frozen_busy_napping: usize,
    /// Runs whose LC line froze idle.
    pub frozen_idle_runs: usize,
    /// Of those, runs whose thread kept running (the fail-safe's limit).
    pub frozen_idle_running: usize,
}

fn wait_page(path: &Path, timeout: Duration) -> Result<Page> {
    let t0 = Instant::now();
    loop {
        if let Ok(p) = Page::attach(path, Access::Observer) {
            if p.header().heartbeat_stale_ns.load(Ordering::Acquire) > 0 {
                return Ok(p);
            }
        }
        anyhow::ensure!(
            t0.elapsed() < timeout,
            "the daemon's page {} did not come",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn one(p: &Params, helpers: &Helpers, run: usize, dir: &Path) -> Result<Rep> {
    // this thread (sampling, the kill) stays off the request lane: waking
    // there would preempt the LC and publish an idle edge just before the
    // kill (SCHED_FIFO keeps it from preempting the LC's bursts as well)
    let _pin = elfen_topo::PinGuard::with_cpus(&[1]).context("pinning to cpu 1")?;
    let name = format!("isofs{}", std::process::id() % 100_000);
    let lc = ChildGuard::new(
        helpers
            .command(&[
                "lc-helper".into(),
                format!("--name={name}"),
                "--cpu=0".into(),
                "--fifo=10".into(),
                "--busy-us=3000".into(),
                "--idle-min-us=1000".into(),
                "--idle-max-us=3000".into(),
            ])
            .spawn()
            .context("starting the LC helper")?,
    );
    let page_path = format!("/dev/shm/elfen-isobench-{}-fs{run}", std::process::id());
    let state = dir.join(format!("state-{run}.json"));
    let cfg = dir.join(format!("daemon-{run}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "page = \"{page_path}\"\nstate_file = \"{}\"\npairs = \"0:1\"\nheartbeat_ms = {}\nundelegated = \"root\"\n\
             [metrics]\nlisten = \"\"\n[memory]\nmin_available = 0\npressure = \"off\"\n\
             [lc]\ncomm = \"{name}\"\n\
             [[batch]]\nname = \"coop\"\nmode = \"cooperative\"\ncommand = [\"sleep\", \"3600\"]\n",
            state.display(),
            p.heartbeat_ms
        ),
    )?;
    let mut daemon = helpers
        .command(&["daemon".into(), format!("--config={}", cfg.display())])
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting the daemon")?;
    let cleanup = |daemon: &mut std::process::Child| {
        elfen_cmd::proc::kill_pid(daemon.id());
        let _ = daemon.wait();
        let _ = elfen_cgroup::Executor::recover(&state);
        let _ = Page::remove(&page_path);
        // the killed daemon's health record beside its page
        let _ = std::fs::remove_file(elfen_ops::health::health_path(Path::new(&page_path)));
    };
    let page = match wait_page(Path::new(&page_path), Duration::from_secs(20)) {
        Ok(pg) => Arc::new(pg),
        Err(e) => {
            cleanup(&mut daemon);
            return Err(e);
        }
    };
    // the batch thread: check in a loop on lane 1
    let stop = Arc::new(AtomicBool::new(false));
    let loops = Arc::new(AtomicU64::new(0));
    let (s2, l2, pp) = (Arc::clone(&stop), Arc::clone(&loops), page_path.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let batch = std::thread::spawn(move || {
        let t = BatchThread::open(&pp, 1, BatchOptions::default().nap(NapChoice::Futex));
        let mut t = match t {
            Ok(t) => {
                let _ = tx.send(Ok(()));
                t
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
                return;
            }
        };
        let mut x = 0u64;
        while !s2.load(Ordering::Relaxed) {
            t.check();
            for _ in 0..200 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            l2.fetch_add(1, Ordering::Relaxed);
        }
    });
    let attached = rx
        .recv()
        .map_err(|_| anyhow::anyhow!("the batch thread died"))?;
    if let Err(e) = attached {
        cleanup(&mut daemon);
        anyhow::bail!("attaching the batch thread: {e}");
    }
    // a random moment after a warm-up, the LC line sampled meanwhile
    let warm = Instant::now() + Duration::from_millis(1000 + rand::rng().random_range(0..500));
    let (mut samples, mut busy) = (0u32, 0u32);
    while Instant::now() < warm {
        samples += 1;
        busy += u32::from(
            page.lc(0)
                .is_ok_and(|l| elfen_shm::state::busy(l.state.load(Ordering::Acquire))),
        );
        std::thread::sleep(Duration::from_micros(500));
    }
    let t_kill = elfen_shm::clock::monotonic_ns();
    elfen_cmd::proc::kill_pid(daemon.id());
    let _ = daemon.wait();
    std::thread::sleep(Duration::from_millis(20));
    let frozen_busy = page
        .lc(0)
        .map(|l| elfen_shm::state::busy(l.state.load(Ordering::Acquire)))
        .unwrap_or(false);
    let bound = Duration::from_millis(10 * p.heartbeat_ms);
    let deadline = Instant::now() + bound * 5;
    let mut stale_at = None;
    while Instant::now() < deadline {
        if page.batch_mode() == BatchMode::Stale {
            stale_at = Some(elfen_shm::clock::monotonic_ns());
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    std::thread::sleep(Duration::from_millis(100));
    let napping = page
        .batch(1)
        .map(|b| b.napping.load(Ordering::Acquire) > 0)
        .unwrap_or(false);
    let l0 = loops.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    let running = loops.load(Ordering::Relaxed) > l0;
    // release the thread wherever it naps: a live controller clears the
    // bound and lets it run unmanaged
    stop.store(true, Ordering::Relaxed);
    if let Ok(c) = Page::attach(&page_path, Access::Controller) {
        let _ = c.set_heartbeat_stale(0);
        let _ = c.set_control(KillMode::Unmanaged);
    }
    let _ = batch.join();
    drop(page);
    cleanup(&mut daemon);
    drop(lc);
    Ok(Rep {
        run,
        lc_busy_share: f64::from(busy) / f64::from(samples.max(1)),
        stale_ms: stale_at.map(|t| t.saturating_sub(t_kill) as f64 / 1e6),
        frozen_busy,
        thread_napping: napping,
        thread_running: running,
    })
}

/// Runs the benchmark.
pub fn measure(p: &Params, helpers: &Helpers, stop: &AtomicBool) -> Result<Vec<Rep>> {
    need_root()?;
    let dir = crate::memory::tempfile_dir("failsafe")?;
    let mut reps = Vec::new();
    for run in 0..p.runs {
        anyhow::ensure!(!stop.load(Ordering::Relaxed), "interrupted");
        let r = one(p, helpers, run, dir.path())?;
        eprintln!(
            "run {run}: LC line busy {:.0} % before; stale after {} ms; LC line frozen {}; batch thread {}",
            100.0 * r.lc_busy_share,
            r.stale_ms.map_or("-".into(), |m| format!("{m:.1}")),
            if r.frozen_busy { "busy" } else { "idle" },
            match (r.thread_napping, r.thread_running) {
                (true, _) => "napping",
                (false, true) => "RUNNING",
                (false, false) => "stopped",
            }
        );
        reps.push(r);
    }
    Ok(reps)
}

/// The summary.
pub fn summary(p: &Params, reps: &[Rep]) -> Summary {
    let busy: Vec<&Rep> = reps.iter().filter(|r| r.frozen_busy).collect();
    let idle: Vec<&Rep> = reps.iter().filter(|r| !r.frozen_busy).collect();
    Summary {
        stale_ms: stat(&reps.iter().filter_map(|r| r.stale_ms).collect::<Vec<_>>()),
        bound_ms: 10.0 * p.heartbeat_ms as f64,
        frozen_busy_runs: busy.len(),
        frozen_busy_napping: busy.iter().filter(|r| r.thread_napping).count(),
        frozen_idle_runs: idle.len(),
        frozen_idle_running: idle
            .iter()
            .filter(|r| r.thread_running && !r.thread_napping)
            .count(),
    }
}

/// The table.
pub fn render(s: &Summary) -> String {
    format!(
        "daemon SIGKILLed → batch threads pause (heartbeat stale): {} ms (bound {:.0} ms)\n\
         LC line frozen busy: {} runs, the batch thread napping in {}\n\
         LC line frozen idle: {} runs, the batch thread still running in {} (a fast path whose \
         line never changes does not see the heartbeat)\n",
        fmt_stat(&s.stale_ms, 1),
        s.bound_ms,
        s.frozen_busy_runs,
        s.frozen_busy_napping,
        s.frozen_idle_runs,
        s.frozen_idle_running
    )
}

/// The result file.
pub fn report(p: &Params, reps: Vec<Rep>, load_before: [f64; 3]) -> Report<Params, Rep, Summary> {
    Report {
        schema: SCHEMA,
        bench: "failsafe",
        created_unix_s: elfen_cmd::time::now_unix_s(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        system: elfen_topo::SystemInfo::collect(),
        load_before,
        load_after: elfen_cmd::proc::loadavg(),
        params: p.clone(),
        summary: summary(p, &reps),
        runs: reps,
    }
}
