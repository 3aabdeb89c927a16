//! [`Daemon::start`]'s steps: the batch groups, the bells, the writer, the
//! knobs' costs, the protections' settings and each group's driver.

use super::{Daemon, log};
use crate::batch::{BatchGroup, LaunchEnv};
use crate::bell::Bell;
use crate::config::Mode;
use crate::error::DaemonError;
use crate::health::GroupReporter;
use crate::isolation::Isolation;
use crate::lc::{DiscoveryOptions, Notice};
use crate::plan::Plan;
use crate::protection::fit::KnobCosts;
use crate::protection::{Cgroup, Driver, Env, Lane, Settings, Target};
use crate::writer::{Edges, Hold, LcWriter, LcWriterHandle, WriterOptions};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

impl Daemon {
    pub(super) fn apply(&mut self, tx: Sender<Notice>) -> Result<(), DaemonError> {
        let plan = self.plan.clone();
        let cfg = &plan.config;
        self.setup_groups(&plan)?;
        let may_guard = plan.groups.iter().any(|g| g.rungs.contains(&Mode::Guard));
        let (bells, all_cpus) = Bells::wire(&plan, may_guard)?;
        let hold = writer_hold(&plan, may_guard).map(Arc::new);
        let (spin, said) = cfg.guard.spin_bound();
        let opts = writer_options(
            &plan,
            tx,
            bells.writer,
            bells.cpu,
            &all_cpus,
            hold.clone(),
            spin,
        );
        self.unseen.count_also(opts.extra_cpus.clone());
        let lanes: Vec<(u32, u32)> = plan.request_lanes.iter().map(|r| (r.cpu, r.lane)).collect();
        let writer = LcWriter::spawn(Arc::clone(&self.page), &lanes, plan.lc.clone(), opts)?;
        let costs = self.knob_costs(&plan, &writer);
        log(crate::protection::costs::describe(&costs));
        if may_guard || cfg.writer_priority() > 0 {
            log(said);
        }
        let env = Arc::new(
            Env::new(
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
                bells.guard,
                settings(&plan, spin),
                costs,
            )
            .with_lc_pids(writer.lc_pids_shared()),
        );
        env.own.add(writer.tid());
        env.own.add(self.upkeep_tid);
        writer.quiet_threads(env.own.clone());
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
        self.start_drivers(&plan, &env, &bells.freeze, &bells.blind)?;
        self.health.set_about(self.about(&plan));
        Ok(())
    }

    /// The batch groups opened or created (on a systemd host inside the
    /// daemon's delegated leaf), then their memory, I/O and egress
    /// isolation.
    fn setup_groups(&mut self, plan: &Plan) -> Result<(), DaemonError> {
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
            let kept = ex
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .affinities_kept();
            if kept > 0 {
                log(format!(
                    "turning the cpuset controller on reset the CPU affinity of {kept} pinned \
                     thread(s) in other groups (cgroup v2, kernels before 6.2): each got its own back"
                ));
            }
            self.isolation = Some(Isolation::start(plan, ex, &self.groups)?);
        }
        Ok(())
    }

    /// Each group's mode started through its [`Driver`]; the threads it
    /// runs counted as the daemon's own.
    fn start_drivers(
        &mut self,
        plan: &Plan,
        env: &Arc<Env>,
        freeze_bells: &[Option<Arc<Bell>>],
        blind_bells: &[Option<Arc<Bell>>],
    ) -> Result<(), DaemonError> {
        let cfg = &plan.config;
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
            let (d, said) = if g.mode == Mode::Scx {
                Driver::start_scx(env, target, &cfg.scx)?
            } else {
                Driver::start(env, target, g.mode, &cfg.freeze, &cfg.auto)?
            };
            said.into_iter().for_each(log);
            for t in d.active().tids() {
                env.own.add(t);
            }
            self.drivers.push(d);
        }
        Ok(())
    }

    /// What `elfen status` says of the run: the LC, the host, the
    /// placement, the policy and the writer's source.
    fn about(&self, plan: &Plan) -> elfen_ops::health::DaemonAbout {
        elfen_ops::health::DaemonAbout {
            lc: plan.lc.to_string(),
            lc_groups: Vec::new(),
            host: plan.host.describe(),
            placement: plan.placement.describe(),
            policy: plan.describe_policy(),
            source: self
                .writer
                .as_ref()
                .map_or(String::new(), |w| w.source().to_string()),
        }
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

/// Every bell a group's modes may need, wired into the writer at start
/// and armed by the protection that sleeps on it.
struct Bells {
    /// The writer rings these at a request lane's edges (guards' and
    /// freezers').
    writer: Vec<(u32, Arc<Bell>)>,
    /// One per batch lane, where a group may guard.
    guard: Vec<(Lane, Arc<Bell>)>,
    /// Each group's freezer bell, where it may freeze.
    freeze: Vec<Option<Arc<Bell>>>,
    /// Each group's blind-isolation bell, where it may run blind.
    blind: Vec<Option<Arc<Bell>>>,
    /// The per-CPU bells the writer rings on any CPU (blind isolation).
    cpu: Vec<Arc<Bell>>,
}

impl Bells {
    /// The bells of `plan`'s groups, and every CPU of the machine.
    fn wire(plan: &Plan, may_guard: bool) -> Result<(Bells, Vec<u32>), DaemonError> {
        let io = |e| DaemonError::os("eventfd", e);
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
        let bells = Bells {
            writer: bells,
            guard: guard_bells,
            freeze: freeze_bells,
            blind: blind_bells,
            cpu: cpu_bells,
        };
        Ok((bells, all_cpus))
    }
}

/// The writer's options: its source, priority, CPUs, discovery, the bells
/// it rings (per request lane, per CPU) and the bound on its real-time work.
fn writer_options(
    plan: &Plan,
    tx: Sender<Notice>,
    bells: Vec<(u32, Arc<Bell>)>,
    cpu_bells: Vec<Arc<Bell>>,
    all_cpus: &[u32],
    hold: Option<Arc<Hold>>,
    bound: crate::rt::SpinBound,
) -> WriterOptions {
    let cfg = &plan.config;
    WriterOptions {
        source: elfen_bpf::Options {
            watched_cpus: None,
            poll_interval_us: cfg.signal.poll_interval_us,
            fallback: cfg.signal.fallback,
            announce_wakeups: cfg.signal.announce_wakeups,
            ..elfen_bpf::Options::default()
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
            all_cpus.to_vec()
        },
        cpu_bells,
        hold,
        bound,
        edges: writer_edges(plan),
    }
}

/// When the writer follows every busy edge: always where a group may be
/// cooperative (its instrumented threads nap on the LC lines), else only
/// while a guard, freezer or blind isolation woken by it is applied.
fn writer_edges(plan: &Plan) -> Edges {
    if plan
        .groups
        .iter()
        .any(|g| g.rungs.contains(&Mode::Cooperative))
    {
        Edges::Always
    } else {
        Edges::WhileArmed
    }
}

/// The protections' settings from the file and the plan, with the bound
/// on real-time spinning (`crate::rt`).
fn settings(plan: &Plan, spin: crate::rt::SpinBound) -> Settings {
    let cfg = &plan.config;
    Settings {
        guard_priority: cfg.guard.priority,
        group_priority: group_thread_priority(plan),
        thread_cpus: plan.writer_cpus.clone(),
        guard_recheck: (cfg.guard.recheck_us > 0)
            .then(|| Duration::from_micros(cfg.guard.recheck_us)),
        hold: cfg.guard.hold_us,
        freeze_timeout: Duration::from_millis(cfg.freeze.timeout_ms),
        blind: cfg.blind.clone(),
        policy: plan.policy,
        spin,
        rescan: Duration::from_millis(cfg.lc.rescan_ms),
        scx_pairs: (!plan.smt).then(|| {
            // one partner per CPU: a request lane's first batch lane
            plan.request_lanes
                .iter()
                .filter_map(|r| Some((r.cpu, plan.batch_of(r.lane).next()?.cpu)))
                .collect()
        }),
    }
}
