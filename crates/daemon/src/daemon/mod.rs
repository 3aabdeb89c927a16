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

use crate::batch::{BatchGroup, LaunchEnv};
use crate::bell::Bell;
use crate::blind::BlindReport;
use crate::config::{Mode, OnGroupLost};
use crate::error::DaemonError;
use crate::freeze::FreezeReport;
use crate::guard::GuardReport;
use crate::health::{FailureLog, GroupReporter, Health};
use crate::isolation::Isolation;
use crate::lc::{DiscoveryOptions, Notice};
use crate::metrics::{DaemonCpu, DaemonMetrics, KnobCount, ModeState};
use crate::plan::Plan;
use crate::protection::fit::KnobCosts;
use crate::protection::{Cgroup, Driver, DriverState, Env, Lane, Settings, Target, Withdrawn};
use crate::writer::{Hold, LcWriter, LcWriterHandle, WriterOptions, WriterReport};
use elfen_cgroup::{Executor, RestoreReport};
use elfen_ops::health::{DaemonKnob, GroupState};
use elfen_shm::Page;
use serde::Serialize;
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
    health: Arc<Health>,
    failure_log: FailureLog,
    /// Groups whose loss was said.
    lost_said: Vec<bool>,
    /// The health record last published (not written again unchanged).
    published: Option<elfen_ops::health::DaemonHealth>,
    /// Whether a failure to publish it was said.
    publish_failed: bool,
    /// What start repaired of a predecessor.
    pub recovered: RestoreReport,
}

/// What [`Daemon::shutdown`] did.
#[derive(Debug, Default, Serialize)]
pub struct ShutdownReport {
    /// The writer's counters (or its error).
    pub writer: Option<WriterReport>,
    /// The writer's error, if it stopped with one.
    pub writer_error: Option<String>,
    /// Each guard.
    pub guards: Vec<GuardReport>,
    /// Each freezer.
    pub freezers: Vec<FreezeReport>,
    /// Each blind-isolation controller.
    pub blind: Vec<BlindReport>,
    /// Each group's protection at the stop: its mode, switches, verdict.
    pub modes: Vec<DriverState>,
    /// The writer's hold of its batch lane (guard mode): (occupied, held,
    /// spins, busy periods caught while spinning).
    pub writer_hold: Option<(u64, u64, u64, u64)>,
    /// Memory, I/O and egress isolation.
    pub isolation: Vec<String>,
    /// Commands stopped, classes restored.
    pub groups: Vec<String>,
    /// The executor's restore.
    pub restored: RestoreReport,
    /// The batch groups' states and failed knob writes.
    pub health: Option<elfen_ops::health::DaemonHealth>,
}

impl std::fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(w) = &self.writer {
            writeln!(
                f,
                "writer: {} events, {} busy periods, {} reconciled from the slots ({} stale), {} \
                 dropped by BPF; busy edge → writer running {}",
                w.events, w.begins, w.reconciled, w.stale, w.dropped, w.wake
            )?;
        }
        if let Some(e) = &self.writer_error {
            writeln!(f, "writer stopped with an error: {e}")?;
        }
        if let Some((occ, held, spins, caught)) = self.writer_hold {
            writeln!(
                f,
                "writer's hold of its batch lane: {spins} spins, {:.1} ms occupied while the LC was \
                 busy, {:.1} ms held through idle gaps, {caught} busy periods caught without a \
                 wake-up",
                occ as f64 / 1e6,
                held as f64 / 1e6
            )?;
        }
        for g in &self.guards {
            writeln!(
                f,
                "guard lane {} (cpu {}): {} occupations, {:.1} ms occupied, {:.1} ms held, {} \
                 caught while holding, {} wake-ups; step-aside {}",
                g.lane,
                g.cpu,
                g.occupations,
                g.occupied_ns as f64 / 1e6,
                g.held_ns as f64 / 1e6,
                g.caught,
                g.wakes,
                g.step_aside
            )?;
        }
        for z in &self.freezers {
            writeln!(
                f,
                "freezer {}: {} freezes ({} late), {} thaws, {} failed writes; freeze {}; thaw {}; \
                 step-aside {}",
                z.group,
                z.freezes,
                z.late,
                z.thaws,
                z.failed_writes,
                z.freeze,
                z.thaw,
                z.step_aside
            )?;
        }
        for b in &self.blind {
            writeln!(
                f,
                "blind isolation {}: {} cpuset changes ({} shrinks, {} freezes), {} steps on busy \
                 edges, {} on the poll; LC switch → its CPU taken from batch {}{}",
                b.group,
                b.cpuset_changes,
                b.shrinks,
                b.freezes,
                b.woken,
                b.polled,
                b.reaction,
                if b.errors.is_empty() {
                    String::new()
                } else {
                    format!("; errors: {}", b.errors.join("; "))
                }
            )?;
        }
        for m in &self.modes {
            if m.switches > 0 || m.configured != m.active {
                writeln!(
                    f,
                    "batch {}: mode {} ran {} at the stop ({} switches{})",
                    m.group,
                    m.configured,
                    m.active,
                    m.switches,
                    m.last_switch
                        .as_deref()
                        .map_or(String::new(), |l| format!("; last: {l}"))
                )?;
            }
        }
        for g in &self.groups {
            writeln!(f, "{g}")?;
        }
        for g in self.health.iter().flat_map(|h| &h.groups) {
            if g.state == GroupState::Ok && g.failures.is_empty() {
                continue;
            }
            let failed: Vec<String> = g
                .failures
                .iter()
                .map(|k| format!("{} {}", k.knob.name(), k.count))
                .collect();
            writeln!(
                f,
                "batch {}: {}{}{}",
                g.name,
                g.state.word(),
                g.reason
                    .as_deref()
                    .map_or(String::new(), |r| format!(" — {r}")),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!("; failed writes: {}", failed.join(", "))
                }
            )?;
        }
        for l in &self.isolation {
            writeln!(f, "{l}")?;
        }
        if self.restored.is_empty() {
            writeln!(f, "cgroups: nothing to restore")
        } else {
            write!(f, "cgroups restored:\n{}", self.restored)
        }
    }
}

/// The SCHED_FIFO priority of freezer and blind-isolation threads: the
/// guards', or one above the writer's when a group may guard — they share
/// the batch lanes, and a thread at a spinning guard's (or the holding
/// writer's) priority would wait for that occupation (the very time it
/// must freeze) to end.
fn group_thread_priority(plan: &Plan) -> u8 {
    let p = plan.config.guard.priority;
    if plan.groups.iter().any(|g| g.rungs.contains(&Mode::Guard)) {
        plan.config
            .writer_priority()
            .max(p)
            .saturating_add(1)
            .min(99)
    } else {
        p
    }
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
        let mut d = Daemon {
            next_rescan: Instant::now(),
            lost_said: vec![false; plan.groups.len()],
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

    fn apply(&mut self, tx: std::sync::mpsc::Sender<Notice>) -> Result<(), DaemonError> {
        let plan = self.plan.clone();
        let cfg = &plan.config;
        let env = LaunchEnv {
            page: self.page.path().to_path_buf(),
            lane: match plan.batch_lanes.as_slice() {
                [one] => Some(one.lane),
                _ => None,
            },
        };
        if let (Some(ex), Some(h)) = (&self.executor, &plan.hierarchy) {
            // on a systemd host: into its delegated leaf, and no write above it
            crate::batch::enter_delegated_leaf(&plan.placement, h)?;
            let mut ex = ex.lock().unwrap_or_else(|p| p.into_inner());
            ex.set_delegated(plan.placement.boundary());
        }
        for g in &plan.groups {
            let ex = self.executor.as_ref().expect("a hierarchy for groups");
            let mut ex = ex.lock().unwrap_or_else(|p| p.into_inner());
            self.groups.push(BatchGroup::setup(&mut ex, g, &env)?);
        }
        if let Some(ex) = &self.executor {
            self.isolation = Some(Isolation::start(&plan, ex, &self.groups)?);
        }
        // Every bell a group's modes may need, wired into the writer now
        // and armed by the protection that sleeps on it.
        let io = |e| DaemonError::os("eventfd", e);
        let may_guard = plan.groups.iter().any(|g| g.rungs.contains(&Mode::Guard));
        let mut bells: Vec<(u32, Arc<Bell>)> = Vec::new();
        let mut guard_bells = Vec::new();
        if may_guard {
            for b in &plan.batch_lanes {
                let bell = Arc::new(Bell::busy_edges_only().map_err(io)?.for_cpu(b.cpu));
                bell.arm(false);
                bells.push((b.request_lane, Arc::clone(&bell)));
                let lane = Lane {
                    cpu: b.cpu,
                    lane: b.lane,
                    request_lane: b.request_lane,
                };
                guard_bells.push((lane, bell));
            }
        }
        let all_cpus = elfen_topo::Topology::detect()
            .map_err(|e| DaemonError::thread("blind isolation", e.to_string()))?
            .cpus();
        let ncpus = all_cpus.iter().max().map_or(1, |&c| c + 1);
        let (mut freeze_bells, mut blind_bells, mut cpu_bells) =
            (Vec::new(), Vec::new(), Vec::new());
        for g in &plan.groups {
            let fb = if g.rungs.contains(&Mode::Freeze) {
                let bell = Arc::new(Bell::new().map_err(io)?);
                bell.arm(false);
                for r in &plan.request_lanes {
                    bells.push((r.lane, Arc::clone(&bell)));
                }
                Some(bell)
            } else {
                None
            };
            let bb = if g.rungs.contains(&Mode::Blind) {
                let bell = Arc::new(Bell::per_cpu(ncpus).map_err(io)?);
                bell.arm(false);
                cpu_bells.push(Arc::clone(&bell));
                Some(bell)
            } else {
                None
            };
            freeze_bells.push(fb);
            blind_bells.push(bb);
        }
        let hold = writer_hold(&plan, may_guard).map(Arc::new);
        let opts = WriterOptions {
            source: elfen_bpf::Options {
                watched_cpus: None,
                poll_interval_us: cfg.signal.poll_interval_us,
                fallback: cfg.signal.fallback,
                announce_wakeups: cfg.signal.announce_wakeups,
            },
            priority: cfg.writer_priority(),
            cpus: Some(plan.writer_cpus.clone()),
            discovery: DiscoveryOptions {
                liveness: Duration::from_millis(cfg.lc.liveness_ms),
                rescan: Duration::from_millis(cfg.lc.rescan_ms),
                lost_rescan: Duration::from_millis(cfg.lc.lost_rescan_ms),
                owner: plan.lc_owner.0,
            },
            max_wait: Duration::from_millis(100),
            notices: Some(tx),
            bells,
            extra_cpus: if cpu_bells.is_empty() {
                Vec::new()
            } else {
                all_cpus.clone()
            },
            cpu_bells,
            hold: hold.clone(),
        };
        let lanes: Vec<(u32, u32)> = plan.request_lanes.iter().map(|r| (r.cpu, r.lane)).collect();
        let writer = LcWriter::spawn(Arc::clone(&self.page), &lanes, plan.lc.clone(), opts)?;
        let costs = self.knob_costs(&plan, &writer);
        log(crate::protection::costs::describe(&costs));
        let settings = Settings {
            guard_priority: cfg.guard.priority,
            group_priority: group_thread_priority(&plan),
            thread_cpus: plan.writer_cpus.clone(),
            guard_recheck: (cfg.guard.recheck_us > 0)
                .then(|| Duration::from_micros(cfg.guard.recheck_us)),
            hold: cfg.guard.hold_us,
            freeze_timeout: Duration::from_millis(cfg.freeze.timeout_ms),
            blind: cfg.blind.clone(),
            policy: plan.policy,
        };
        let env = Arc::new(Env::new(
            Arc::clone(&self.page),
            plan.batch_lanes
                .iter()
                .map(|b| Lane {
                    cpu: b.cpu,
                    lane: b.lane,
                    request_lane: b.request_lane,
                })
                .collect(),
            all_cpus,
            writer.slots().clone(),
            Arc::clone(writer.profile()),
            Arc::clone(writer.edges()),
            hold,
            guard_bells,
            settings,
            costs,
        ));
        env.own.add(writer.tid());
        env.own.add(self.upkeep_tid);
        let hold_ns = env.refresh_hold(&Default::default());
        if may_guard {
            log(format!(
                "guard hold: {} ({:.0} µs now){}",
                cfg.guard.hold_us,
                hold_ns as f64 / 1e3,
                match env.writer_hold.as_deref() {
                    Some(h) => format!(
                        "; the writer holds batch cpu {} itself (its only CPU)",
                        h.cpu
                    ),
                    None => String::new(),
                }
            ));
        }
        self.writer = Some(writer);
        self.env = Some(Arc::clone(&env));
        for (i, g) in plan.groups.iter().enumerate() {
            let ex = Arc::clone(self.executor.as_ref().expect("a hierarchy for groups"));
            let target = Target {
                index: i,
                name: g.name.clone(),
                cgroup: Some(Cgroup {
                    group: self.groups[i].group.clone(),
                    executor: ex,
                }),
                reporter: Some(GroupReporter::new(Arc::clone(&self.health), i)),
                freeze_bell: freeze_bells[i].clone(),
                blind_bell: blind_bells[i].clone(),
                request_lanes: plan.request_lanes.iter().map(|r| r.lane).collect(),
                confine: g.guard_cpus.clone(),
                yields: g.idle.is_some(),
                sched_idle: Arc::clone(&self.groups[i].sched_idle),
            };
            let (d, said) = Driver::start(&env, target, g.mode, &cfg.freeze, &cfg.auto)?;
            said.into_iter().for_each(log);
            for t in d.active().tids() {
                env.own.add(t);
            }
            self.drivers.push(d);
        }
        self.health.set_about(elfen_ops::health::DaemonAbout {
            lc: plan.lc.to_string(),
            lc_groups: Vec::new(),
            host: plan.host.describe(),
            placement: plan.placement.describe(),
            policy: plan.describe_policy(),
            source: self
                .writer
                .as_ref()
                .map_or(String::new(), |w| w.source().to_string()),
        });
        Ok(())
    }

    /// The knobs' costs here (`crate::protection::costs`), measured for
    /// the modes the groups may run.
    fn knob_costs(&self, plan: &Plan, writer: &LcWriterHandle) -> KnobCosts {
        use crate::protection::costs;
        let cfg = &plan.config;
        let rungs: Vec<Mode> = plan.groups.iter().flat_map(|g| g.rungs.clone()).collect();
        let dynamic = rungs
            .iter()
            .any(|m| matches!(m, Mode::Guard | Mode::Freeze | Mode::Blind));
        let mut c = KnobCosts::default();
        if dynamic {
            let (req, bat) = (
                plan.request_lanes[0].cpu,
                plan.batch_lanes
                    .first()
                    .map_or(plan.writer_cpus[0], |b| b.cpu),
            );
            c.wake_ns = match costs::wake_ns(req, bat, cfg.writer_priority()) {
                Ok(ns) => ns,
                Err(e) => {
                    log(format!(
                        "the charge of a wake-up could not be measured ({e}): {} µs assumed",
                        costs::WAKE_FALLBACK_NS / 1000
                    ));
                    costs::WAKE_FALLBACK_NS
                }
            };
        }
        c.edge_ns = if !writer.is_bpf() {
            cfg.signal.poll_interval_us * 1000
        } else if cfg.signal.announce_wakeups {
            0
        } else {
            c.wake_ns
        };
        let ex = self.executor.as_ref();
        for (i, g) in plan.groups.iter().enumerate() {
            let Some(ex) = ex else { break };
            if g.rungs.contains(&Mode::Freeze) && c.freeze_ns.is_none() {
                match costs::freeze_ns(ex, &self.groups[i].group) {
                    Ok((f, t)) => {
                        c.freeze_ns = Some(f);
                        c.thaw_ns = Some(t);
                    }
                    Err(e) => log(format!(
                        "batch {}: a freeze could not be timed ({e}): freeze is judged unknown",
                        g.name
                    )),
                }
            }
            if g.rungs.contains(&Mode::Blind) && c.cpuset_ns.is_none() {
                let all: Vec<u32> = elfen_topo::Topology::detect()
                    .map(|t| t.cpus())
                    .unwrap_or_default();
                let base = g.confine.clone().unwrap_or_else(|| all.clone());
                match costs::cpuset_ns(ex, &self.groups[i].group, &base, &all) {
                    Ok(ns) => c.cpuset_ns = Some(ns),
                    Err(e) => log(format!(
                        "batch {}: a cpuset write could not be timed ({e}): blind is judged unknown",
                        g.name
                    )),
                }
            }
        }
        c
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

    /// One round of upkeep: heartbeat; SCHED_IDLE for new threads and
    /// exited commands every `lc.rescan_ms`, and a look that every batch
    /// group's cgroup is still there; failed knob writes said, fallbacks
    /// engaged, the health published. Returns what to report; an error
    /// when a thread of the daemon died or a group was lost with
    /// `on_group_lost = "stop"` (the run must end).
    pub fn tick(&mut self) -> Result<Vec<String>, DaemonError> {
        let _ = self.page.beat();
        let notices = self.notices();
        for n in &notices {
            match n {
                Notice::Restarted { .. } => self.lc_restarts += 1,
                Notice::Ignored { .. } => self.health.lc_ignored(),
                Notice::Moved { groups } => self.health.set_lc_groups(groups.clone()),
                _ => {}
            }
        }
        let mut out: Vec<String> = notices.iter().map(|n| n.to_string()).collect();
        let mut refused = None;
        for d in &mut self.drivers {
            match d.tick() {
                Ok(said) => out.extend(said),
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        self.note_own_threads();
        if let Some(ex) = &self.executor {
            let ex = ex.lock().unwrap_or_else(|p| p.into_inner());
            for (i, g) in self.groups.iter_mut().enumerate() {
                // a mode that wants SCHED_IDLE (idle as a fallback): at once
                if g.sched_idle.load(Relaxed) {
                    g.idle_threads(&ex, Some((&self.health, i)));
                }
            }
        }
        if let Some(iso) = &self.isolation {
            out.extend(iso.messages());
        }
        let now = Instant::now();
        if now >= self.next_rescan {
            self.next_rescan = now + Duration::from_millis(self.plan.config.lc.rescan_ms);
            if let Some(ex) = &self.executor {
                let mut ex = ex.lock().unwrap_or_else(|p| p.into_inner());
                for (i, g) in self.groups.iter_mut().enumerate() {
                    let n = g.idle_threads(&ex, Some((&self.health, i)));
                    if n > 0 {
                        out.push(format!(
                            "batch {}: {n} new threads set SCHED_IDLE",
                            g.plan.name
                        ));
                    }
                    if g.plan.follows {
                        out.extend(follow(g, i, &mut ex, &self.health));
                        if self.health.is_waiting(i) {
                            continue;
                        }
                    }
                    if !g.is_owned() && g.present(&ex) {
                        out.extend(reassert(g, &mut ex));
                    }
                    for &c in g.group.controllers() {
                        let Ok(dir) = ex.hierarchy().group_dir(c, g.group.path()) else {
                            continue;
                        };
                        if !dir.is_dir() {
                            self.health.mark_lost(
                                i,
                                format!(
                                    "its cgroup {} was removed while the daemon ran",
                                    dir.display()
                                ),
                            );
                        }
                    }
                    out.extend(g.poll_exit(&ex));
                }
            }
            if let (Some(iso), Some(ex)) = (&mut self.isolation, &self.executor) {
                out.extend(iso.tick(&mut ex.lock().unwrap_or_else(|p| p.into_inner())));
            }
        }
        self.fall_back();
        out.extend(self.failure_log.lines(&self.health));
        let lost = self.newly_lost(&mut out);
        self.publish_modes();
        self.update_metrics();
        self.publish_health();
        if let Some(e) = refused {
            out.into_iter().for_each(log);
            return Err(e);
        }
        match self.ended(lost) {
            Some(e) => {
                // said before the error ends the run
                out.into_iter().for_each(log);
                Err(e)
            }
            None => Ok(out),
        }
    }

    /// Why the run must end: a group lost (with `on_group_lost = "stop"`),
    /// a thread of the daemon gone.
    fn ended(&mut self, lost: Option<(String, String)>) -> Option<DaemonError> {
        if let (Some((name, path)), OnGroupLost::Stop) = (lost, self.plan.config.on_group_lost) {
            return Some(DaemonError::GroupLost { name, path });
        }
        if self.writer.as_ref().is_some_and(|w| !w.is_running()) {
            let err = self.writer.take().map(LcWriterHandle::stop);
            return Some(match err {
                Some(Err(e)) => e,
                _ => DaemonError::thread("lc writer", "stopped"),
            });
        }
        if self.isolation.as_ref().is_some_and(|i| !i.is_running()) {
            return Some(DaemonError::thread(
                "memory or I/O isolation",
                "its thread ended",
            ));
        }
        if let Some(d) = self.drivers.iter().find(|d| !d.is_running()) {
            return Some(DaemonError::thread(
                d.active().mode().name(),
                format!("a thread of batch group {}'s protection ended", d.index()),
            ));
        }
        None
    }

    /// The threads the protections run now, for blind isolation's count
    /// of idle CPUs.
    fn note_own_threads(&self) {
        let Some(env) = &self.env else { return };
        for d in &self.drivers {
            for t in d.active().tids() {
                env.own.add(t);
            }
        }
    }

    /// Each driver's state into the health record (`elfen status`).
    fn publish_modes(&self) {
        let hold = self.env.as_ref().map(|e| e.hold());
        for d in &self.drivers {
            let st = d.state();
            let p = elfen_ops::health::ProtectionState {
                active: st.active.name().to_string(),
                switches: st.switches,
                last_switch: st.last_switch.clone(),
                fit: st
                    .verdict
                    .as_ref()
                    .map(|v| format!("{} {}: {}", v.mode, v.state.word(), v.reason)),
                contention_pct: st.contention.map(|c| c * 100.0),
                hold_us: (st.active == Mode::Guard).then(|| hold.unwrap_or(0) as f64 / 1e3),
            };
            self.health.set_protection(d.index(), p);
        }
    }

    /// The daemon's CPU so far, split: its own work, the occupation that
    /// is the protection, lane time held through idle gaps (ns).
    pub fn cpu(&self) -> DaemonCpu {
        let me = std::process::id();
        let cpu = |t: u32| elfen_cmd::proc::thread_schedstat(me, t).map_or(0, |s| s.on_cpu_ns);
        let mut tids: Vec<u32> = self.writer.iter().map(LcWriterHandle::tid).collect();
        tids.push(self.upkeep_tid);
        if let Some(env) = &self.env {
            tids.extend(env.guard_tids());
        }
        for d in &self.drivers {
            tids.extend(d.active().tids());
        }
        tids.sort_unstable();
        tids.dedup();
        let total: u64 = tids.into_iter().map(cpu).sum::<u64>()
            + self.env.as_ref().map_or(0, |e| e.retired_cpu_ns());
        let (occupied_ns, held_ns) = self.env.as_ref().map_or((0, 0), |e| e.spin_ns());
        DaemonCpu {
            own_ns: total.saturating_sub(occupied_ns).saturating_sub(held_ns),
            occupied_ns,
            held_ns,
        }
    }

    /// A freeze or blind-isolation group whose freezes or cpuset writes
    /// fail (the group still there) falls back to SCHED_IDLE, once.
    fn fall_back(&mut self) {
        for (i, g) in self.groups.iter_mut().enumerate() {
            let knobs: &[DaemonKnob] = match g.mode() {
                Mode::Freeze => &[DaemonKnob::Freeze],
                Mode::Blind => &[DaemonKnob::Cpuset, DaemonKnob::Freeze],
                _ => continue,
            };
            if self.health.state(i) != GroupState::Degraded
                || self.health.has_fallback(i)
                || !knobs.iter().any(|&k| self.health.failing(i, k))
            {
                continue;
            }
            g.fall_back_to_sched_idle();
            let how = format!(
                "{} writes fail: its threads are put SCHED_IDLE instead (they yield to the LC's \
                 threads but share its lanes)",
                if g.mode() == Mode::Freeze {
                    "freeze"
                } else {
                    "cpuset or freeze"
                }
            );
            crate::logging::warn(format!("batch {}: DEGRADED: {how}", g.plan.name));
            self.health.set_fallback(i, how);
            // at once, not at the next rescan
            if let Some(ex) = &self.executor {
                let ex = ex.lock().unwrap_or_else(|p| p.into_inner());
                g.idle_threads(&ex, Some((&self.health, i)));
            }
        }
    }

    /// Says each group lost since the last tick (loudly); returns the first
    /// one's name and path.
    fn newly_lost(&mut self, out: &mut Vec<String>) -> Option<(String, String)> {
        let mut first = None;
        let snap = self.health.snapshot();
        for (i, g) in snap.groups.iter().enumerate() {
            if g.state != GroupState::Lost || self.lost_said[i] {
                continue;
            }
            self.lost_said[i] = true;
            let then = match self.plan.config.on_group_lost {
                OnGroupLost::Stop => "the daemon stops (on_group_lost = \"stop\")",
                OnGroupLost::Continue => {
                    "the daemon carries on without it (on_group_lost = \"continue\")"
                }
            };
            out.push(format!(
                "LOST: batch {} ({}): {}: its processes are no longer contained; {then}",
                g.name,
                g.path,
                g.reason.as_deref().unwrap_or("its cgroup is gone")
            ));
            first.get_or_insert((g.name.clone(), g.path.clone()));
        }
        first
    }

    /// Writes the health record beside the page when it changed.
    fn publish_health(&mut self) {
        let h = self.health.snapshot();
        if self.published.as_ref() == Some(&h) {
            return;
        }
        match h.write(self.page.path()) {
            Ok(()) => self.published = Some(h),
            Err(e) if !self.publish_failed => {
                self.publish_failed = true;
                log(format!(
                    "cannot publish the daemon's health at {}: {e} (elfen status will not show \
                     it; the metrics do)",
                    elfen_ops::health::health_path(self.page.path()).display()
                ));
            }
            Err(_) => {}
        }
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

    fn update_metrics(&self) {
        let Some(m) = &self.metrics else { return };
        let guards = self
            .env
            .as_ref()
            .map(|e| e.guard_counts())
            .unwrap_or_default();
        let (events, reconciled) = self.writer.as_ref().map_or((0, 0), |w| {
            let s = w.stats();
            (s.events.load(Relaxed), s.reconciled.load(Relaxed))
        });
        let repaired = self.recovered.actions.len() as u64;
        let restarts = self.lc_restarts;
        let cpuset_changes = self
            .drivers
            .iter()
            .filter(|d| d.active().mode() == Mode::Blind)
            .map(|d| d.active().cost().cycles)
            .sum::<u64>()
            + self.withdrawn_cpuset_changes();
        let h = self.health.snapshot();
        let mut knob_failures = Vec::new();
        for (i, g) in h.groups.iter().enumerate() {
            for &knob in &DaemonKnob::ALL {
                let failures = self.health.count(i, knob);
                if failures > 0 || self.health.runtime_knobs(i).contains(&knob) {
                    knob_failures.push(KnobCount {
                        group: g.name.clone(),
                        knob,
                        failures,
                    });
                }
            }
        }
        let groups = h.groups.iter().map(|g| (g.name.clone(), g.state)).collect();
        let modes = self
            .drivers
            .iter()
            .map(|d| {
                let st = d.state();
                ModeState {
                    group: st.group.clone(),
                    rungs: self.plan.groups[d.index()].rungs.clone(),
                    active: st.active,
                    switches: st.switches,
                    fits: st.verdict.as_ref().map(|v| (v.mode, v.state)),
                    contention: st.contention,
                }
            })
            .collect();
        let cpu = self.cpu();
        let hold_ns = self.env.as_ref().map_or(0, |e| e.hold());
        let (periods, busy) = self.writer.as_ref().map_or((0, Default::default()), |w| {
            let b = w.profile().busy.snapshot();
            (b.count, b)
        });
        let isolation = self
            .isolation
            .as_ref()
            .map(Isolation::counts)
            .unwrap_or_default();
        m.update(|s| {
            s.isolation = isolation;
            s.cpuset_changes = cpuset_changes;
            s.guards = guards;
            s.writer_events = events;
            s.writer_reconciled = reconciled;
            s.lc_restarts = restarts;
            s.lc_ignored = h.lc_ignored;
            s.repaired = repaired;
            s.knob_failures = knob_failures;
            s.groups = groups;
            s.modes = modes;
            s.cpu = cpu;
            s.hold_ns = hold_ns;
            s.busy_periods = periods;
            s.busy = busy;
        });
    }

    /// cpuset writes of blind isolation that was withdrawn (switches).
    fn withdrawn_cpuset_changes(&self) -> u64 {
        self.withdrawn
            .iter()
            .map(|w| match w {
                Withdrawn::Blind(b) => b.cpuset_changes,
                _ => 0,
            })
            .sum()
    }

    /// Gives everything back: thaws (freezers), ends the LC lines' open
    /// requests (writer), stops guards, stops commands and restores
    /// scheduling classes, restores every recorded cgroup value and
    /// removes the groups it created, removes the page.
    pub fn shutdown(mut self) -> ShutdownReport {
        // A deliberate stop: instrumented programs still attached to the
        // page (it is unlinked, they keep their mapping) must not pause for
        // good on the heartbeat that stops now — borrowing is off, batch
        // runs unmanaged. (A crash leaves the bound set: they pause, the
        // safe side, until a new daemon beats on a page they attach to.)
        let _ = self.page.set_heartbeat_stale(0);
        let _ = self.page.set_control(elfen_shm::KillMode::Unmanaged);
        let mut r = ShutdownReport {
            modes: self.modes(),
            isolation: self
                .isolation
                .take()
                .map(Isolation::stop)
                .unwrap_or_default(),
            ..ShutdownReport::default()
        };
        // The writer first: its LC lines end their open requests, so a
        // guard occupying its lane lets go.
        match self.writer.take().map(LcWriterHandle::stop) {
            Some(Ok(w)) => r.writer = Some(w),
            Some(Err(e)) => r.writer_error = Some(e.to_string()),
            None => {}
        }
        if let Some(h) = self.env.as_ref().and_then(|e| e.writer_hold.as_deref()) {
            r.writer_hold = Some((
                h.occupied_ns.load(Relaxed),
                h.held_ns.load(Relaxed),
                h.spins.load(Relaxed),
                h.caught.load(Relaxed),
            ));
        }
        // Freezers thaw and blind isolation gives every CPU back as they
        // stop; guards stop with the last group that guards.
        let mut withdrawn = std::mem::take(&mut self.withdrawn);
        for d in self.drivers.drain(..) {
            withdrawn.extend(d.stop());
        }
        for w in withdrawn {
            match w {
                Withdrawn::Guards(g) => r.guards.extend(g),
                Withdrawn::Freezer(f) => r.freezers.push(f),
                Withdrawn::Blind(b) => r.blind.push(b),
                Withdrawn::Nothing => {}
            }
        }
        {
            let ex = self
                .executor
                .as_ref()
                .map(|e| e.lock().unwrap_or_else(|p| p.into_inner()));
            for g in &mut self.groups {
                r.groups
                    .extend(g.stop(ex.as_deref(), Duration::from_secs(2)));
            }
        }
        self.groups.clear();
        if let Some(ex) = &self.executor {
            r.restored = ex.lock().unwrap_or_else(|p| p.into_inner()).restore_all();
        }
        r.health = Some(self.health.snapshot());
        let _ = std::fs::remove_file(elfen_ops::health::health_path(self.page.path()));
        r
    }
}

/// The writer's hold of its batch lane: where guards may run, the policy
/// is borrow idle, and the writer has exactly one CPU, a batch lane (it
/// then occupies that lane itself while it holds).
fn writer_hold(plan: &Plan, may_guard: bool) -> Option<Hold> {
    if !may_guard || plan.policy.kind != elfen_policy::PolicyKind::BorrowIdle {
        return None;
    }
    let [cpu] = plan.writer_cpus.as_slice() else {
        return None;
    };
    let b = plan.batch_lanes.iter().find(|b| b.cpu == *cpu)?;
    Some(Hold::new(b.request_lane, *cpu))
}

/// A batch group that follows a unit, container or pod: its group gone,
/// it waits (said once); back, its knobs are applied again (said).
fn follow(
    g: &mut BatchGroup,
    i: usize,
    ex: &mut elfen_cgroup::Executor,
    health: &Health,
) -> Option<String> {
    let what = g
        .plan
        .named
        .clone()
        .unwrap_or_else(|| g.plan.path.to_string());
    if !g.present(ex) {
        return health
            .set_waiting(
                i,
                format!(
                    "{what} runs nothing now: its cgroup {} is gone",
                    g.plan.path
                ),
            )
            .then(|| {
                format!(
                    "batch {}: {what} stopped (its cgroup {} is gone): waiting for it",
                    g.plan.name, g.plan.path
                )
            });
    }
    if !health.is_waiting(i) {
        return None;
    }
    Some(match g.reapply(ex) {
        Ok(_) => {
            health.clear_waiting(i);
            format!(
                "batch {}: {what} is back (cgroup {}): its knobs are applied again",
                g.plan.name, g.plan.path
            )
        }
        Err(e) => format!(
            "batch {}: {what} is back but its knobs could not be applied yet: {e}",
            g.plan.name
        ),
    })
}

/// An existing group's start knobs written again where its owner wrote
/// over them (said, with what).
fn reassert(g: &mut BatchGroup, ex: &mut elfen_cgroup::Executor) -> Option<String> {
    match g.reapply(ex) {
        Ok(w) if w.is_empty() => None,
        Ok(w) => Some(format!(
            "batch {}: {} changed under the daemon (by the group's owner: systemd writes a \
             unit's CPU settings again at a daemon-reload): written again",
            g.plan.name,
            w.join(", ")
        )),
        Err(e) => Some(format!(
            "batch {}: its knobs could not be checked: {e}",
            g.plan.name
        )),
    }
}

/// `elfen daemon`: applies `plan`, keeps it until `stop` is set (the
/// SIGTERM/SIGINT flag), gives everything back. Errors after start are
/// returned after the give-back.
pub fn run(plan: Plan, stop: &AtomicBool) -> Result<ShutdownReport, DaemonError> {
    for n in &plan.notes {
        log(n);
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
