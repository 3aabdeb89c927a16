//! The run: [`Daemon::start`] applies a [`Plan`] (recovery of a killed
//! predecessor first, then the page, the batch groups, the writer, the
//! knobs' costs measured here, and each group's mode through its
//! [`Driver`] — `crate::protection`), [`Daemon::tick`] keeps it going
//! (heartbeat, notices, the drivers' verdicts and switches,
//! SCHED_IDLE for new threads, commands that exit, threads that die, failed
//! knob writes and groups removed under it — [`crate::health`] — published
//! in the metrics and beside the page for `elfen status`), and
//! [`Daemon::shutdown`] gives everything back. [`run`] is the loop of
//! `elfen daemon`, until SIGTERM or SIGINT.
//!
//! The parts: `start` (what [`Daemon::start`] applies, step by step),
//! `tick` (one round of upkeep), `publish` (the health record and the
//! metrics), `shutdown` (the give-back and its [`ShutdownReport`]).

mod publish;
mod shutdown;
mod start;
mod tick;
pub mod unseen;

pub use shutdown::ShutdownReport;

use crate::batch::BatchGroup;
use crate::error::DaemonError;
use crate::health::{FailureLog, Health};
use crate::isolation::Isolation;
use crate::lc::Notice;
use crate::metrics::DaemonMetrics;
use crate::plan::Plan;
use crate::protection::{Driver, DriverState, Env, Withdrawn};
use crate::writer::LcWriterHandle;
use elfen_cgroup::{Executor, RestoreReport};
use elfen_shm::Page;
use std::os::unix::fs::DirBuilderExt;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running daemon.
#[derive(Debug)]
pub struct Daemon {
    plan: Plan,
    page: Arc<Page>,
    executor: Option<Arc<Mutex<Executor>>>,
    groups: Vec<BatchGroup>,
    writer: Option<LcWriterHandle>,
    env: Option<Arc<Env>>,
    drivers: Vec<Driver>,
    /// Reports of protections withdrawn while running (switches).
    withdrawn: Vec<Withdrawn>,
    /// The upkeep thread (the one that ticks).
    upkeep_tid: u32,
    isolation: Option<Isolation>,
    notices: Receiver<Notice>,
    next_rescan: Instant,
    metrics: Option<DaemonMetrics>,
    lc_restarts: u64,
    /// Processes followed as part of the LC service.
    lc_followed: u64,
    /// Whether the LC goes unseen on its request lanes.
    unseen: unseen::UnseenCheck,
    health: Arc<Health>,
    failure_log: FailureLog,
    /// Groups whose loss was said.
    lost_said: Vec<bool>,
    /// Since when each group that follows a unit, container or pod has
    /// been gone (waited for).
    gone_since: Vec<Option<Instant>>,
    /// The health record last published (not written again unchanged).
    published: Option<elfen_ops::health::DaemonHealth>,
    /// Whether a failure to publish it was said.
    publish_failed: bool,
    /// What start repaired of a predecessor.
    pub recovered: RestoreReport,
}

fn log(msg: impl std::fmt::Display) {
    crate::logging::info(msg);
}

impl Daemon {
    /// Applies `plan`. A state file left by a killed daemon is recovered
    /// first (what was repaired is in [`Daemon::recovered`]). If a step
    /// fails, what was applied is given back before the error returns.
    pub fn start(plan: Plan) -> Result<Daemon, DaemonError> {
        let cfg = &plan.config;
        // The metrics port first: a port in use fails before anything is applied.
        let metrics_port = match cfg.metrics.addr()? {
            Some(a) => Some(elfen_ops::metrics::bind(a).map_err(|e| {
                DaemonError::Config(crate::error::ConfigError::new(
                    "metrics.listen",
                    e.to_string(),
                ))
            })?),
            None => None,
        };
        let recovered;
        let executor = match &plan.hierarchy {
            Some(h) => {
                if let Some(dir) = cfg.state_file.parent() {
                    // writable by root only: the state file is trusted there
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(dir)
                        .map_err(|e| DaemonError::os(format!("creating {}", dir.display()), e))?;
                }
                let (ex, rep) = Executor::with_state_file(h.clone(), &cfg.state_file)?;
                recovered = rep;
                Some(Arc::new(Mutex::new(ex)))
            }
            None => {
                recovered = Executor::recover(&cfg.state_file)?;
                None
            }
        };
        let page_path = elfen_shm::page_path(&cfg.page.path.to_string_lossy());
        let page = Arc::new(Page::create(&page_path, &plan.page_spec)?);
        page.beat()?;
        // A controller is dead when it missed 10 heartbeats: batch threads
        // then pause (the heartbeat fail-safe; docs/protocol.md).
        let stale_ms = 10.0 * cfg.heartbeat_ms as f64;
        page.set_heartbeat_stale((stale_ms * 1e6) as u64)?;
        let metrics = match metrics_port {
            Some(port) => Some(
                DaemonMetrics::serve(port, Arc::clone(&page), stale_ms)
                    .map_err(|e| DaemonError::thread("metrics", e.to_string()))?,
            ),
            None => None,
        };
        let (tx, rx) = channel();
        let health = Arc::new(Health::new(&plan.groups));
        let unseen = unseen::UnseenCheck::new(
            Duration::from_millis(cfg.lc.unseen_window_ms),
            plan.request_lanes.iter().map(|r| (r.lane, r.cpu)).collect(),
        );
        let mut d = Daemon {
            next_rescan: Instant::now(),
            lost_said: vec![false; plan.groups.len()],
            gone_since: vec![None; plan.groups.len()],
            health,
            failure_log: FailureLog::default(),
            published: None,
            publish_failed: false,
            plan,
            page,
            executor,
            groups: Vec::new(),
            writer: None,
            env: None,
            drivers: Vec::new(),
            withdrawn: Vec::new(),
            upkeep_tid: elfen_cmd::proc::gettid(),
            isolation: None,
            notices: rx,
            metrics,
            lc_restarts: 0,
            lc_followed: 0,
            unseen,
            recovered,
        };
        match d.apply(tx) {
            Ok(()) => {
                d.publish_health();
                Ok(d)
            }
            Err(e) => {
                let r = d.shutdown();
                crate::logging::error(format!("start failed; given back:\n{r}"));
                Err(e)
            }
        }
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The page.
    pub fn page(&self) -> &Arc<Page> {
        &self.page
    }

    /// The writer.
    pub fn writer(&self) -> Option<&LcWriterHandle> {
        self.writer.as_ref()
    }

    /// What the groups' protections act through (`None` before start).
    pub fn env(&self) -> Option<&Arc<Env>> {
        self.env.as_ref()
    }

    /// Each group's protection now.
    pub fn modes(&self) -> Vec<DriverState> {
        self.drivers.iter().map(Driver::state).collect()
    }

    /// The batch groups.
    pub fn groups(&self) -> &[BatchGroup] {
        &self.groups
    }

    /// What memory, I/O and egress isolation set up at start.
    pub fn isolation_started(&self) -> &[String] {
        self.isolation.as_ref().map_or(&[], |i| &i.started)
    }

    /// Notices of the writer since the last call.
    pub fn notices(&self) -> Vec<Notice> {
        self.notices.try_iter().collect()
    }

    /// One line for the service manager's status: what is protected and
    /// how many batch groups.
    pub fn status_line(&self) -> String {
        format!(
            "protecting {}; {} batch group{}",
            self.plan.lc,
            self.groups.len(),
            if self.groups.len() == 1 { "" } else { "s" }
        )
    }

    /// The metrics endpoint's address, when it runs.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(DaemonMetrics::addr)
    }
}

/// `elfen daemon`: applies `plan`, keeps it until `stop` is set (the
/// SIGTERM/SIGINT flag), gives everything back. Errors after start are
/// returned after the give-back.
pub fn run(plan: Plan, stop: &AtomicBool) -> Result<ShutdownReport, DaemonError> {
    for n in &plan.notes {
        log(n);
    }
    for r in plan
        .config
        .batch
        .iter()
        .filter_map(|b| b.request_lane_risk())
    {
        crate::logging::warn(r);
    }
    log(format!("starting\n{}", plan.describe().trim_end()));
    let every = Duration::from_millis(plan.config.heartbeat_ms);
    let mut d = Daemon::start(plan)?;
    if d.recovered.is_empty() {
        log("nothing to repair from an earlier run");
    } else {
        log(format!(
            "repaired what an earlier daemon left:\n{}",
            d.recovered.to_string().trim_end()
        ));
    }
    if let Some(w) = d.writer() {
        log(format!("LC signal writer: {}", w.source()));
    }
    for l in d.isolation_started() {
        log(l);
    }
    for m in d.modes() {
        log(format!(
            "batch {}: mode {}{}",
            m.group,
            m.configured,
            if m.active == m.configured {
                String::new()
            } else {
                format!(" ({} now)", m.active)
            }
        ));
    }
    if let Some(a) = d.metrics_addr() {
        log(format!("metrics at http://{a}/metrics"));
    }
    log("running (SIGTERM or SIGINT to stop and restore)");
    // under systemd (Type=notify): ready now; the heartbeat feeds the watchdog
    let mut notifier = elfen_ops::notify::Notifier::from_env();
    if let Some(n) = &notifier {
        let _ = n.ready(&d.status_line());
    }
    let mut failure = None;
    while !stop.load(Relaxed) {
        match d.tick() {
            Ok(msgs) => msgs.into_iter().for_each(log),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        if let Some(n) = &mut notifier {
            let _ = n.watchdog();
        }
        std::thread::sleep(every);
    }
    if let Some(n) = &notifier {
        let _ = n.stopping("stopping: restoring what was changed");
    }
    for m in d.tick().unwrap_or_default() {
        log(m);
    }
    log("stopping: restoring what was changed");
    let report = d.shutdown();
    log(report.to_string().trim_end());
    match failure {
        Some(e) => Err(e),
        None if !report.restored.is_clean() => Err(DaemonError::thread(
            "restore",
            format!(
                "some values could not be restored (kept in the state file for the next start): {}",
                report.restored.failures.join("; ")
            ),
        )),
        None => Ok(report),
    }
}
