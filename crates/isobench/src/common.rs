//! What the benchmarks share: how helper programs are started, the daemon
//! run in this process, the open-loop load against an LC service (the
//! harness's generator), /proc readings, and the result file.

use anyhow::{Context, Result};
use elfen_bench::lc::requests::{Request, RequestSet};
use elfen_bench::load::client::{GeneratorPlace, InvocationPlan, run_invocation};
use elfen_bench::spec::RequestsKind;
use elfen_cmd::proc::SchedClass;
use elfen_daemon::config::Config;
use elfen_daemon::plan::Plan;
use elfen_daemon::{Daemon, ShutdownReport};
use elfen_results::{Percentiles, Stat};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How helper programs (the LC server, the balloon, a daemon to SIGKILL)
/// are started: `elfen isobench helper …` from the `elfen` binary, or a
/// program that takes the helper's arguments as they are (the tests'
/// `elfen-isobench-helper`, this crate's binary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Helpers {
    /// `<elfen> isobench helper <args>`.
    Cli(PathBuf),
    /// `<program> <args>`.
    Program(PathBuf),
}

impl Helpers {
    /// For the `elfen` binary running now.
    pub fn cli() -> Helpers {
        Helpers::Cli(std::env::current_exe().unwrap_or_else(|_| "elfen".into()))
    }

    /// The argv that runs helper `args`.
    pub fn argv(&self, args: &[String]) -> Vec<String> {
        match self {
            Helpers::Cli(exe) => [
                exe.to_string_lossy().into_owned(),
                "isobench".into(),
                "helper".into(),
            ]
            .into_iter()
            .chain(args.iter().cloned())
            .collect(),
            Helpers::Program(exe) => std::iter::once(exe.to_string_lossy().into_owned())
                .chain(args.iter().cloned())
                .collect(),
        }
    }

    /// A command running helper `args` (stdin closed).
    pub fn command(&self, args: &[String]) -> Command {
        let argv = self.argv(args);
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).stdin(Stdio::null());
        c
    }
}

/// A child process, SIGKILLed and reaped when dropped.
pub use elfen_cmd::child::ChildGuard;

/// The OOM killer's kills since boot; a process's major page faults.
pub use elfen_cmd::proc::{major_faults, oom_kills};

/// The daemon, run in this process from a configuration text, its upkeep
/// on a thread of its own; its messages are printed and kept.
pub struct InProcessDaemon {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<ShutdownReport>>,
    /// Everything it said.
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl InProcessDaemon {
    /// Resolves and starts `config_text`; fails as `elfen daemon` would.
    pub fn start(config_text: &str, quiet: bool) -> Result<InProcessDaemon> {
        let config = Config::parse(config_text).context("the daemon's configuration")?;
        let plan = Plan::resolve(&config).context("the daemon's configuration")?;
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let say = {
            let lines = Arc::clone(&lines);
            move |l: String| {
                if !quiet {
                    eprintln!("  daemon: {l}");
                }
                lines.lock().unwrap_or_else(|p| p.into_inner()).push(l);
            }
        };
        for n in &plan.notes {
            say(format!("note: {n}"));
        }
        let every = Duration::from_millis(plan.config.heartbeat_ms);
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = Arc::clone(&stop);
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("isobench-daemon".into())
            .spawn(move || {
                let mut d = match Daemon::start(plan) {
                    Ok(d) => {
                        for l in d.isolation_started() {
                            say(l.clone());
                        }
                        let _ = tx.send(Ok(()));
                        d
                    }
                    Err(e) => {
                        let _ = tx.send(Err(anyhow::anyhow!("starting the daemon: {e}")));
                        return ShutdownReport::default();
                    }
                };
                while !s2.load(Ordering::Relaxed) {
                    match d.tick() {
                        Ok(m) => m.into_iter().for_each(&say),
                        Err(e) => {
                            say(format!("stopped: {e}"));
                            break;
                        }
                    }
                    std::thread::sleep(every);
                }
                for m in d.tick().unwrap_or_default() {
                    say(m);
                }
                let r = d.shutdown();
                say(r.to_string());
                r
            })
            .context("starting the daemon's thread")?;
        rx.recv()
            .context("the daemon's thread ended before it started")??;
        Ok(InProcessDaemon {
            stop,
            thread: Some(thread),
            lines,
        })
    }

    /// Whether it said something containing `text`.
    pub fn said(&self, text: &str) -> bool {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|l| l.contains(text))
    }

    /// Stops it and returns its report; an error when something it
    /// changed could not be given back (a cgroup left behind, a value not
    /// restored), naming each.
    pub fn stop(mut self) -> Result<ShutdownReport> {
        self.stop.store(true, Ordering::Relaxed);
        let report = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        anyhow::ensure!(
            report.restored.is_clean(),
            "the daemon could not give everything back: {}",
            report.restored.failures.join("; ")
        );
        Ok(report)
    }
}

impl Drop for InProcessDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One open-loop load of an LC service: requests of `work` at `rps`
/// (Poisson), `warmup` then `window`; latency from each request's intended
/// send time (the harness's generator, `elfen_bench::load`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Load {
    /// Requests per second.
    pub rps: f64,
    /// Work per request, the service's `arg`.
    pub work: u64,
    /// Warm-up, ms (sent, not recorded).
    pub warmup_ms: u64,
    /// Measured window, ms.
    pub window_ms: u64,
}

/// What one load measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    /// Latency percentiles, µs.
    pub latency_us: Percentiles,
    /// Measured requests answered.
    pub requests: u64,
    /// Measured requests lost or failed.
    pub errors: u64,
    /// Requests sent in the window, per second.
    pub rps_achieved: f64,
}

/// Runs `load` against `addr`, the generator on `cpus`.
pub fn run_load(
    addr: SocketAddr,
    load: &Load,
    cpus: &[u32],
    stop: &AtomicBool,
) -> Result<LoadResult> {
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(0x150_bec4);
    let span = (load.warmup_ms + load.window_ms) * 1_000_000;
    let offsets = elfen_bench::load::poisson_offsets(load.rps, span, &mut rng);
    let set = Arc::new(RequestSet {
        kind: RequestsKind::Demand,
        requests: vec![Request {
            arg: load.work,
            payload: Box::new([]),
        }],
        source: format!("{} units of work per request", load.work),
        note: None,
        keys: None,
    });
    let plan = InvocationPlan {
        picks: vec![0; offsets.len()],
        offsets,
        set,
        work_scale: 1.0,
        warmup_ns: load.warmup_ms * 1_000_000,
        duration_ns: load.window_ms * 1_000_000,
        drain_ns: 2_000_000_000,
    };
    let place = GeneratorPlace {
        cpus: cpus.to_vec(),
        sched: SchedClass::Other,
    };
    let r = run_invocation(
        addr,
        &elfen_bench::lc::Protocol::Wire,
        &plan,
        &place,
        stop,
        |_| {},
    )
    .map_err(|e| anyhow::anyhow!("the load against {addr}: {e}"))?;
    Ok(LoadResult {
        latency_us: elfen_bench::load::percentiles_us(&r.outcome.hist),
        requests: r.outcome.requests,
        errors: r.outcome.errors,
        rps_achieved: r.rps_achieved,
    })
}

/// Waits until `addr` answers a TCP connect (at most `timeout`).
pub fn wait_listening(addr: SocketAddr, timeout: Duration) -> Result<()> {
    let t0 = std::time::Instant::now();
    loop {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return Ok(());
        }
        anyhow::ensure!(
            t0.elapsed() < timeout,
            "nothing listens at {addr} after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Median, min and max of `xs` (NaN when empty).
pub fn stat(xs: &[f64]) -> Stat {
    Stat::of(xs).unwrap_or(Stat::NAN)
}

/// `median [min–max]`.
pub fn fmt_stat(s: &Stat, digits: usize) -> String {
    format!("{:.d$} [{:.d$}–{:.d$}]", s.median, s.min, s.max, d = digits)
}

/// The result file every benchmark writes.
#[derive(Debug, Serialize)]
pub struct Report<P: Serialize, R: Serialize, S: Serialize> {
    /// `elfen-isobench/1`.
    pub schema: &'static str,
    /// Which benchmark.
    pub bench: &'static str,
    /// Seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// The command line.
    pub command: String,
    /// The machine.
    pub system: elfen_topo::SystemInfo,
    /// Load averages before and after.
    pub load_before: [f64; 3],
    /// After.
    pub load_after: [f64; 3],
    /// The parameters.
    pub params: P,
    /// Every repetition, raw.
    pub runs: Vec<R>,
    /// Medians and spread over the repetitions.
    pub summary: S,
}

/// The result file's schema tag.
pub const SCHEMA: &str = "elfen-isobench/1";

/// Writes `r` as JSON to `path` (or `results/isobench-<bench>-<time>.json`)
/// and says where.
pub fn save<P: Serialize, R: Serialize, S: Serialize>(
    r: &Report<P, R, S>,
    path: Option<&Path>,
) -> Result<PathBuf> {
    let p = path.map(Path::to_path_buf).unwrap_or_else(|| {
        Path::new("results").join(format!("isobench-{}-{}.json", r.bench, r.created_unix_s))
    });
    elfen_results::save_json(r, &p).with_context(|| format!("saving {}", p.display()))?;
    Ok(p)
}

/// Fails unless this process may do what the benchmarks do (root: cgroups,
/// BPF, namespaces, loop devices).
pub fn need_root() -> Result<()> {
    anyhow::ensure!(
        elfen_cmd::proc::is_root(),
        "the isolation benchmarks need root (cgroups, BPF, network namespaces, loop devices)"
    );
    Ok(())
}
