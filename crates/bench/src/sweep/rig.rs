//! **Pre-flight** and the **rig**: everything a sweep sets up before any
//! load is sent — lanes, the signal page, the cgroups, the request set, the
//! load generator's CPUs and scheduling class, the LC service — held for
//! the sweep and torn down in reverse order on drop (service, then cgroups,
//! then the page), so also on error and Ctrl-C.
//!
//! What cannot run here is skipped with a reason rather than failing the
//! sweep: `cpuset` and `cfs_quota` need writable cgroups (root), and the
//! generator's real-time priority needs `CAP_SYS_NICE`; both are said in the
//! run record and the table.

use crate::error::{BenchError, Result};
use crate::lc::requests::{self, RequestSet};
use crate::lc::{self, LcService, Placement};
use crate::load::client::GeneratorPlace;
use crate::spec::{BenchSpec, CgroupVersion, Config, PageClock};
use elfen_cgroup::{CgroupError, Controller, Executor, Group, Hierarchy, Knob, Layout};
use elfen_cmd::proc::SchedClass;
use elfen_daemon::bell::Bell;
use elfen_daemon::config::{BlindSection, BlindWake, FreezeSection, GuardSection, SignalSection};
use elfen_daemon::protection::auto::Auto;
use elfen_daemon::protection::fit::KnobCosts;
use elfen_daemon::protection::{Env, Lane, Settings, costs};
use elfen_daemon::writer::{Edges, Hold, LcWriter, LcWriterHandle, WriterOptions};
use elfen_results::Skipped;
use elfen_shm::{Access, LaneSpec, Page, PageSpec, page_path};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// Where things run.
#[derive(Debug, Clone)]
pub struct Lanes {
    /// How lanes were paired, in words.
    pub pairing: String,
    /// The request lane's CPU.
    pub request_cpu: u32,
    /// Its batch lanes' CPUs.
    pub batch_cpus: Vec<u32>,
    /// Whether every batch lane is an SMT sibling of the request lane.
    pub batch_shares_core: bool,
    /// The CPUs of the load generator and the dispatcher.
    pub side_cpus: Vec<u32>,
    /// Page lane index of the request lane.
    pub request_lane: u32,
    /// Page lane index of each batch lane.
    pub batch_lanes: Vec<u32>,
}

impl Lanes {
    /// The request lane's CPU, then the batch lanes'.
    pub fn all_cpus(&self) -> Vec<u32> {
        std::iter::once(self.request_cpu)
            .chain(self.batch_cpus.iter().copied())
            .collect()
    }
}

/// The prefix of every cgroup the harness creates (`elfen-bench-<pid>-…`).
pub const CGROUP_PREFIX: &str = "elfen-bench-";

/// The batch cgroups of the configurations that need one, and the
/// executor that wrote them (it removes them when dropped; freezers share
/// it while they run).
#[derive(Debug, Default)]
pub struct Cgroups {
    /// The executor (`None` when no configuration needs a cgroup).
    pub executor: Option<Arc<Mutex<Executor>>>,
    /// `cpuset`: the batch lanes.
    pub cpuset: Option<Group>,
    /// `cfs_quota`: a CFS bandwidth quota.
    pub quota: Option<Group>,
    /// `cpu_idle`: `cpu.idle` set.
    pub idle: Option<Group>,
    /// `freeze`: a freezer group.
    pub freezer: Option<Group>,
    /// `blind_isolation`: a group in the cpuset and freezer hierarchies
    /// (its cpuset driven by blind isolation, frozen at zero CPUs).
    pub blind: Option<Group>,
    /// `auto`: a freezer group (its solo windows, a freeze rung).
    pub auto: Option<Group>,
}

impl Cgroups {
    /// The `cgroup.procs` file a process joins `group` through.
    pub fn procs_file(&self, group: &Group) -> Result<std::path::PathBuf> {
        let ex = self
            .executor
            .as_ref()
            .expect("groups come with their executor")
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let ctl = group.controllers()[0];
        Ok(ex
            .hierarchy()
            .group_dir(ctl, group.path())?
            .join("cgroup.procs"))
    }
}

/// The kernel signal (`lc.signal = "bpf"`): the daemon's LC signal writer
/// on the service's process, and what the daemon's modes act through
/// (`elfen_daemon::protection`): its bells (armed by the mode that sleeps
/// on them), its hold of the batch lane, the knobs' costs measured here.
pub struct KernelSignal {
    /// The writer thread.
    pub writer: LcWriterHandle,
    /// The modes' environment.
    pub env: Arc<Env>,
    /// The freezer's bell (every write of the LC line).
    pub freeze_bell: Arc<Bell>,
    /// Blind isolation's bell (busy edges of every CPU).
    pub blind_bell: Arc<Bell>,
    /// `auto`'s state per load, kept across the rounds' invocations.
    pub autos: Arc<Mutex<std::collections::HashMap<u64, Auto>>>,
}

/// Everything a sweep holds while it runs.
pub struct Rig {
    /// The kernel signal's writer, when used (dropped first).
    pub kernel: Option<KernelSignal>,
    /// The LC service (dropped next).
    pub lc: Option<Box<dyn LcService>>,
    /// The baselines' cgroups.
    pub cgroups: Cgroups,
    /// The signal page.
    pub page: Arc<Page>,
    /// Lanes.
    pub lanes: Lanes,
    /// The request set.
    pub set: Arc<RequestSet>,
    /// Where the load generator runs.
    pub generator: GeneratorPlace,
    /// The input file of batch programs that read one.
    pub batch_input: std::path::PathBuf,
    /// `blind_isolation`'s B.
    pub blind_buffer_cores: u32,
}

impl Rig {
    /// The running LC service.
    pub fn lc(&self) -> &dyn LcService {
        self.lc
            .as_deref()
            .expect("the LC service runs for the whole sweep")
    }

    /// The running LC service, mutably.
    pub fn lc_mut(&mut self) -> &mut dyn LcService {
        self.lc
            .as_deref_mut()
            .expect("the LC service runs for the whole sweep")
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The writer first, the service next, then the cgroups (the
        // executor removes the groups it created when dropped), then the
        // page.
        drop(self.kernel.take());
        drop(self.lc.take());
        drop(self.cgroups.executor.take());
    }
}

/// What pre-flight found.
pub struct Preflight {
    /// The rig, LC service not started yet.
    pub rig: Rig,
    /// The service's port, bound or checked (taken when the service starts).
    pub prepared: Option<lc::Prepared>,
    /// Configurations that cannot run here, and why.
    pub skipped: Vec<Skipped>,
    /// The generator's scheduling class, in words.
    pub generator_sched: String,
    /// Things the user should know.
    pub notes: Vec<String>,
}

/// Pre-flight: every check that can fail before any load is sent.
pub fn preflight(spec: &BenchSpec) -> Result<Preflight> {
    let mut notes = Vec::new();
    if let (true, Some(c)) = (spec.lc.is_java(), spec.lc.command.as_deref()) {
        // jar, corpus and index before anything starts: the server would
        // otherwise build a missing index for minutes, or stop half-started
        lc::lucene::preflight(c)?;
    }
    if let Some(kv) = &spec.lc.kv {
        lc::kv::preflight(kv)?;
    }
    let topo = elfen_topo::Topology::detect()?;
    let plan = elfen_topo::plan_pairs(&topo, spec.pairs.as_deref())?;
    let Some(pair) = plan.first().cloned() else {
        return Err(BenchError::Config(format!(
            "no request/batch lane pair on this machine ({}); the harness needs two lanes",
            plan.describe()
        )));
    };
    let prepared = lc::prepare(spec)?;
    let (page, request_lane, batch_lanes) = open_page(spec, &pair)?;
    let paired: Vec<u32> = std::iter::once(pair.request)
        .chain(pair.batch.iter().copied())
        .collect();
    let spare: Vec<u32> = topo
        .cpus()
        .into_iter()
        .filter(|c| !paired.contains(c))
        .collect();
    let lanes = Lanes {
        pairing: plan.describe(),
        request_cpu: pair.request,
        batch_cpus: pair.batch.clone(),
        batch_shares_core: topo
            .lanes
            .iter()
            .find(|l| l.cpu == pair.request)
            .is_some_and(|l| pair.batch.iter().all(|b| l.siblings.contains(b))),
        side_cpus: if spare.is_empty() {
            pair.batch.clone()
        } else {
            spare
        },
        request_lane,
        batch_lanes,
    };
    let (cgroups, mut skipped) = make_cgroups(spec, &lanes)?;
    skipped.extend(daemon_mode_skips(spec, &skipped));
    let set = match &spec.lc.kv {
        Some(kv) => requests::keys(&kv.name, kv.keys, kv.demand_sample, spec.seed),
        None => requests::build(
            spec.lc.requests,
            &spec.demand,
            spec.lc.tasks_path.as_deref(),
            spec.seed,
        )?,
    };
    if let Some(n) = &set.note {
        notes.push(n.clone());
    }
    if spec.configs.contains(&Config::DynamicRefresh) {
        let features = elfen_runtime::machine_features();
        notes.push(if features.perf_hw_counters {
            "dynamic_refresh: hardware counters exist, but the harness sets no reference IPC, \
             so its budget is not scaled: it runs as refresh budget"
                .to_string()
        } else {
            format!(
                "dynamic_refresh: no hardware performance counters here ({}): it runs as refresh budget",
                features
                    .perf_hw_counters_reason
                    .as_deref()
                    .unwrap_or("perf_event_open failed")
            )
        });
    }
    let (sched, generator_sched) = generator_class(spec.generator_fifo_priority);
    if sched == SchedClass::Other && spec.generator_fifo_priority > 0 {
        notes.push(generator_sched.clone());
    }
    Ok(Preflight {
        rig: Rig {
            kernel: None,
            lc: None,
            cgroups,
            page,
            generator: GeneratorPlace {
                cpus: lanes.side_cpus.clone(),
                sched,
            },
            lanes,
            set: Arc::new(set),
            batch_input: batch_input(spec)?,
            blind_buffer_cores: spec.batch.blind_buffer_cores,
        },
        prepared: Some(prepared),
        skipped,
        generator_sched,
        notes,
    })
}

/// The input file of the unmodified programs that read one (`xz`): 128
/// MiB of pseudo-text, made once and reused from the user's cache
/// directory (`$XDG_CACHE_HOME/elfen` or `~/.cache/elfen`).
fn batch_input(spec: &BenchSpec) -> Result<std::path::PathBuf> {
    use crate::batch::program::{ProgramKind, input_path, make_input};
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("elfen");
    let path = input_path(&dir);
    if spec.programs.contains(&ProgramKind::Xz) {
        make_input(&path, 128 << 20)?;
    }
    Ok(path)
}

/// Starts the LC service on the rig.
pub fn start_lc(
    spec: &BenchSpec,
    rig: &mut Rig,
    prepared: lc::Prepared,
    elfen_exe: &std::path::Path,
    stop: &AtomicBool,
) -> Result<()> {
    let svc = lc::start(
        spec,
        prepared,
        &Placement {
            request_cpu: rig.lanes.request_cpu,
            side_cpus: rig.lanes.side_cpus.clone(),
            side_sched: rig.generator.sched,
            page: rig.page.clone(),
            lane: rig.lanes.request_lane,
            elfen_exe: elfen_exe.to_path_buf(),
        },
        stop,
    )?;
    rig.lc = Some(svc);
    Ok(())
}

/// With the kernel signal (`lc.signal = "bpf"`): starts the daemon's LC
/// signal writer on the service's process — BPF on `sched_switch`, or its
/// /proc poll fallback (said in the returned note) — writing the request
/// lane's LC line, ringing the guards' and the freezer's bells. Below the
/// generator's real-time priority, so it never delays a send.
pub fn start_kernel_signal(spec: &BenchSpec, rig: &mut Rig) -> Result<Option<String>> {
    if spec.lc.signal != crate::spec::LcSignal::Bpf {
        return Ok(None);
    }
    let pid = rig.lc().child_pid().ok_or_else(|| {
        BenchError::Config("the kernel signal needs the LC service in a process of its own".into())
    })?;
    let io = |e: std::io::Error| BenchError::io("creating an eventfd", e);
    let r = rig.lanes.request_lane;
    let mut bells: Vec<(u32, Arc<Bell>)> = Vec::new();
    let mut guard_bells = Vec::new();
    for (&lane, &cpu) in rig.lanes.batch_lanes.iter().zip(&rig.lanes.batch_cpus) {
        let bell = Arc::new(Bell::busy_edges_only().map_err(io)?.for_cpu(cpu));
        bell.arm(false);
        bells.push((r, Arc::clone(&bell)));
        let l = Lane {
            cpu,
            lane,
            request_lane: r,
        };
        guard_bells.push((l, bell));
    }
    let freeze_bell = Arc::new(Bell::new().map_err(io)?);
    freeze_bell.arm(false);
    bells.push((r, Arc::clone(&freeze_bell)));
    let all = rig.lanes.all_cpus();
    let ncpus = all.iter().max().map_or(1, |&c| c + 1);
    let blind_bell = Arc::new(Bell::per_cpu(ncpus).map_err(io)?);
    blind_bell.arm(false);
    let blind = spec.configs.contains(&Config::BlindIsolation);
    let priority = match rig.generator.sched {
        SchedClass::Fifo(p) if p > 2 => p - 1,
        _ => 0,
    };
    // the writer holds its batch lane in guard mode when it has just one
    let hold = match rig.lanes.batch_cpus.as_slice() {
        [cpu] => Some(Arc::new(Hold::new(r, *cpu))),
        _ => None,
    };
    let opts = WriterOptions {
        priority,
        cpus: Some(rig.lanes.batch_cpus.clone()),
        bells,
        cpu_bells: if blind {
            vec![Arc::clone(&blind_bell)]
        } else {
            Vec::new()
        },
        extra_cpus: if blind { all.clone() } else { Vec::new() },
        hold: hold.clone(),
        source: elfen_bpf::Options {
            announce_wakeups: spec.lc.announce_wakeups,
            ..elfen_bpf::Options::default()
        },
        // batch threads running a policy nap on the LC line at each edge;
        // the daemon's modes need the edges while their bells are armed
        edges: if spec.configs.iter().any(|c| c.policy().is_some()) {
            Edges::Always
        } else {
            Edges::WhileArmed
        },
        ..WriterOptions::default()
    };
    let writer = LcWriter::spawn(
        Arc::clone(&rig.page),
        &[(rig.lanes.request_cpu, r)],
        elfen_daemon::lc::LcTarget::Pid(pid),
        opts,
    )
    .map_err(|e| BenchError::Config(format!("the kernel signal (lc.signal = \"bpf\"): {e}")))?;
    let mut note = format!(
        "LC signal: the kernel ({}), written to the request lane by the daemon's writer; the \
         service (pid {pid}) publishes nothing",
        writer.source()
    );
    let knobs = knob_costs(spec, rig, &writer, priority);
    if spec.configs.iter().any(|c| c.needs_lc_writer()) {
        note += &format!("; {}", costs::describe(&knobs));
    }
    let mode_priority = match rig.generator.sched {
        SchedClass::Fifo(p) if p > 3 => p - 2,
        _ => 1,
    };
    let settings = Settings {
        guard_priority: mode_priority,
        group_priority: mode_priority,
        thread_cpus: rig.lanes.batch_cpus.clone(),
        guard_recheck: None,
        // the daemon's default: no holding through idle gaps unless asked
        hold: GuardSection::default().hold_us,
        // the daemon's default, as `elfen daemon` runs freeze mode
        freeze_timeout: std::time::Duration::from_millis(FreezeSection::default().timeout_ms),
        blind: BlindSection {
            buffer_cores: rig.blind_buffer_cores,
            wake: BlindWake::Events,
            ..BlindSection::default()
        },
        policy: elfen_policy::PolicyConfig::simple(elfen_policy::PolicyKind::BorrowIdle),
        // the daemon's default bound on real-time spinning
        spin: GuardSection::default().spin_bound().0,
        rescan: std::time::Duration::from_millis(
            elfen_daemon::config::LcSection::default().rescan_ms,
        ),
        scx_pairs: None,
    };
    let env = Arc::new(Env::new(
        Arc::clone(&rig.page),
        guard_bells.iter().map(|(l, _)| *l).collect(),
        all,
        writer.slots().clone(),
        Arc::clone(writer.profile()),
        Arc::clone(writer.edges()),
        hold,
        guard_bells,
        settings,
        knobs,
    ));
    env.own.add(writer.tid());
    writer.quiet_threads(env.own.clone());
    env.refresh_hold(&Default::default());
    rig.kernel = Some(KernelSignal {
        writer,
        env,
        freeze_bell,
        blind_bell,
        autos: Arc::default(),
    });
    Ok(Some(note))
}

/// What the daemon's knobs cost here, for the modes this sweep runs
/// (`elfen_daemon::protection::costs`): a wake-up, a freeze of the freeze
/// group, a cpuset write of the blind group.
fn knob_costs(spec: &BenchSpec, rig: &Rig, writer: &LcWriterHandle, priority: u8) -> KnobCosts {
    let wants = |c: Config| spec.configs.contains(&c);
    let mut k = KnobCosts::default();
    if spec.configs.iter().any(|c| c.needs_lc_writer()) {
        let batch = rig.lanes.batch_cpus[0];
        k.wake_ns = costs::wake_ns(rig.lanes.request_cpu, batch, priority)
            .unwrap_or(costs::WAKE_FALLBACK_NS);
    }
    // as the daemon charges an edge with its default signal settings
    k.edge_ns = if !writer.is_bpf() {
        SignalSection::default().poll_interval_us * 1000
    } else if spec.lc.announce_wakeups {
        0
    } else {
        k.wake_ns
    };
    let ex = rig.cgroups.executor.as_ref();
    if let (true, Some(g), Some(ex)) = (wants(Config::Freeze), &rig.cgroups.freezer, ex) {
        if let Ok((f, t)) = costs::freeze_ns(ex, g) {
            k.freeze_ns = Some(f);
            k.thaw_ns = Some(t);
        }
    }
    if let (true, Some(g), Some(ex)) = (wants(Config::BlindIsolation), &rig.cgroups.blind, ex) {
        let all = rig.lanes.all_cpus();
        k.cpuset_ns = costs::cpuset_ns(ex, g, &all, &all).ok();
    }
    k
}

/// The generator's class: SCHED_FIFO at `prio` where this process may use
/// it (tried on a scratch thread), else SCHED_OTHER; and why, in words.
fn generator_class(prio: u8) -> (SchedClass, String) {
    if prio == 0 {
        return (
            SchedClass::Other,
            "SCHED_OTHER (generator_fifo_priority = 0): batch work at the LC's priority on the \
             generator's CPU can delay sends; the delay counts as latency"
                .into(),
        );
    }
    let want = SchedClass::Fifo(prio);
    let tried = std::thread::spawn(move || elfen_cmd::proc::set_sched(0, want))
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("probe thread panicked")));
    match tried {
        Ok(()) => (
            want,
            format!(
                "{}: the load generator and the LC service's dispatchers (the built-in service's; \
                 an external one's when it sets them, as --side-fifo-priority does) preempt batch \
                 work on their CPU in every configuration",
                want.name()
            ),
        ),
        Err(e) => (
            SchedClass::Other,
            format!(
                "SCHED_OTHER: real-time priority for the load generator was refused ({e}; needs \
                 root or an RLIMIT_RTPRIO), so batch work at the LC's priority on the generator's \
                 CPU can delay sends in naive, cpuset and the Elfen configurations; the delay \
                 counts as latency"
            ),
        ),
    }
}

/// Whether a cgroup error means "not permitted here" (skip) rather than a
/// fault (fail).
fn not_permitted(e: &CgroupError) -> bool {
    match e {
        CgroupError::Io { source, .. } => matches!(
            source.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        ),
        CgroupError::Unsupported { .. } => true,
        _ => false,
    }
}

/// Which of the daemon's modes cannot run in this sweep, and why: guards
/// and the freezer act on the kernel signal's busy edges, and guards run at
/// real-time priority.
fn daemon_mode_skips(spec: &BenchSpec, already: &[Skipped]) -> Vec<Skipped> {
    let root = elfen_cmd::proc::is_root();
    spec.configs
        .iter()
        .filter(|c| c.needs_lc_writer() && !already.iter().any(|s| s.config == **c))
        .filter_map(|&config| {
            let reason = if spec.lc.signal != crate::spec::LcSignal::Bpf {
                "needs the kernel signal (--lc-signal bpf): it protects an unmodified LC service, \
                 whose busy edges come from the kernel"
            } else if matches!(config, Config::Guard | Config::Auto) && !root {
                "needs real-time priority for its guard threads (run as root)"
            } else {
                return None;
            };
            Some(Skipped {
                config,
                reason: reason.into(),
            })
        })
        .collect()
}

/// The configurations that run their batch in a cgroup of their own.
const CGROUP_CONFIGS: [Config; 6] = [
    Config::Cpuset,
    Config::CfsQuota,
    Config::CpuIdle,
    Config::Freeze,
    Config::BlindIsolation,
    Config::Auto,
];

/// Creates the cgroups of `cpuset`, `cfs_quota`, `cpu_idle` and `freeze`
/// if they run; where this process may not write cgroups (not root, no such
/// controller) they are skipped with the reason.
fn make_cgroups(spec: &BenchSpec, lanes: &Lanes) -> Result<(Cgroups, Vec<Skipped>)> {
    let wants = |c: Config| spec.configs.contains(&c);
    let mut cg = Cgroups::default();
    let mut skipped = Vec::new();
    if !CGROUP_CONFIGS.into_iter().any(wants) {
        return Ok((cg, skipped));
    }
    let root = spec.cgroup.root.clone();
    let hier = match spec.cgroup.version {
        CgroupVersion::Auto => Hierarchy::detect(root),
        CgroupVersion::V1 => Hierarchy::with_layout(root, Layout::V1),
        CgroupVersion::V2 => Hierarchy::with_layout(root, Layout::V2),
        CgroupVersion::Hybrid => Hierarchy::with_layout(root, Layout::Hybrid),
    };
    let mut ex = match hier {
        Ok(h) => Executor::new(h).restore_on_drop(true),
        Err(e) => {
            for c in CGROUP_CONFIGS.into_iter().filter(|c| wants(*c)) {
                skipped.push(Skipped {
                    config: c,
                    reason: format!("no usable cgroup hierarchy: {e}"),
                });
            }
            return Ok((cg, skipped));
        }
    };
    ex.remove_stale(CGROUP_PREFIX);
    let pid = std::process::id();
    let mut attempt = |config: Config,
                       ctl: &[Controller],
                       knob: Option<Knob>,
                       ex: &mut Executor|
     -> Result<Option<Group>> {
        if !wants(config) {
            return Ok(None);
        }
        let name = format!("{CGROUP_PREFIX}{pid}-{config}");
        let made = ex.create_group(&name, ctl).and_then(|g| match knob {
            Some(k) => ex.set(&g, k).map(|_| g),
            None => Ok(g),
        });
        match made {
            Ok(g) => Ok(Some(g)),
            Err(e) if not_permitted(&e) => {
                skipped.push(Skipped {
                    config,
                    reason: format!("needs a writable cgroup (run as root): {e}"),
                });
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    };
    let cpus = Knob::CpusetCpus(lanes.batch_cpus.clone());
    cg.cpuset = attempt(Config::Cpuset, &[Controller::Cpuset], Some(cpus), &mut ex)?;
    let q = (spec.batch.cfs_quota_lanes * spec.batch.cfs_period_us as f64).round() as u64;
    let quota = Knob::CpuMax {
        quota_us: Some(q.max(1000)),
        period_us: spec.batch.cfs_period_us,
    };
    cg.quota = attempt(Config::CfsQuota, &[Controller::Cpu], Some(quota), &mut ex)?;
    // A top-level group, idle itself: its entity is what competes with the
    // LC's (the harness's) cpu group, so the whole batch yields — an idle
    // task inside a group that is not idle would only rank inside it.
    let idle = Some(Knob::CpuIdle(true));
    cg.idle = attempt(Config::CpuIdle, &[Controller::Cpu], idle, &mut ex)?;
    cg.freezer = attempt(Config::Freeze, &[Controller::Freezer], None, &mut ex)?;
    let both = [Controller::Cpuset, Controller::Freezer];
    cg.blind = attempt(Config::BlindIsolation, &both, None, &mut ex)?;
    cg.auto = attempt(Config::Auto, &[Controller::Freezer], None, &mut ex)?;
    cg.executor = Some(Arc::new(Mutex::new(ex)));
    Ok((cg, skipped))
}

/// Creates a private page (`elfen-bench-<pid>` in /dev/shm) for the pair, or
/// attaches the one given with `page` (which must exist and have the pair's
/// lanes). Returns the page and the lane indices of request and batch lanes.
fn open_page(spec: &BenchSpec, pair: &elfen_topo::Pair) -> Result<(Arc<Page>, u32, Vec<u32>)> {
    match &spec.page {
        Some(name) => {
            let path = page_path(name);
            if !path.exists() {
                return Err(BenchError::Config(format!(
                    "signal page {} does not exist (--page {name}): start the controller that \
                     creates it, or leave --page out to let the harness create a private page",
                    path.display()
                )));
            }
            let page = Page::attach(&path, Access::Controller)?;
            let lane_of = |cpu: u32| {
                page.lane_of_cpu(cpu).ok_or_else(|| {
                    BenchError::Config(format!(
                        "signal page {} has no lane for cpu {cpu}",
                        path.display()
                    ))
                })
            };
            let r = lane_of(pair.request)?;
            let b = pair
                .batch
                .iter()
                .map(|&c| lane_of(c))
                .collect::<Result<Vec<_>>>()?;
            Ok((Arc::new(page), r, b))
        }
        None => {
            let path = page_path(&format!("elfen-bench-{}", std::process::id()));
            let mut ps = PageSpec::for_pairs(
                &[(pair.request, pair.batch.clone())],
                elfen_policy::PolicyKind::BorrowIdle.id(),
                0,
            );
            ps.replace = true;
            if spec.page_clock == PageClock::Monotonic || spec.has_java_writer() {
                ps.clock = Some(elfen_shm::Clock::MONOTONIC);
            }
            let page = Page::create(&path, &ps)?;
            let b = (1..=pair.batch.len() as u32).collect();
            Ok((Arc::new(page), 0, b))
        }
    }
}

/// Writes policy, budget and nap backend into the controller lines of the
/// request lane and its batch lanes.
pub fn configure_page(rig: &Rig, policy: u32, budget_ns: u64, nap: u32) -> Result<()> {
    let lanes =
        std::iter::once(rig.lanes.request_lane).chain(rig.lanes.batch_lanes.iter().copied());
    for lane in lanes {
        let c = rig.page.read_controller(lane)?;
        rig.page.write_controller(
            lane,
            &LaneSpec {
                cpu: c.cpu,
                role: c.role,
                partners: c.partners().to_vec(),
                policy,
                budget_ns,
                nap,
                hybrid_spin_ns: c.hybrid_spin_ns,
                ref_ipc_milli: c.ref_ipc_milli,
            },
        )?;
    }
    Ok(())
}
