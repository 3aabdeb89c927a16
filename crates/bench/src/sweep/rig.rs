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
use elfen_results::Skipped;
use elfen_shm::{Access, LaneSpec, Page, PageSpec, page_path};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Where things run.
#[derive(Debug, Clone)]
pub struct Lanes {
    /// How lanes were paired, in words.
    pub pairing: String,
    /// The request lane's CPU.
    pub request_cpu: u32,
    /// Its batch lanes' CPUs.
    pub batch_cpus: Vec<u32>,
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

/// The batch cgroups of the baselines that need one, and the executor that
/// wrote them (it removes them when dropped).
#[derive(Debug, Default)]
pub struct Cgroups {
    /// The executor (`None` when no configuration needs a cgroup).
    pub executor: Option<Executor>,
    /// `cpuset`: the batch lanes.
    pub cpuset: Option<Group>,
    /// `cfs_quota`: a CFS bandwidth quota.
    pub quota: Option<Group>,
}

impl Cgroups {
    /// The `cgroup.procs` file a process joins `group` through.
    pub fn procs_file(&self, group: &Group) -> Result<std::path::PathBuf> {
        let ex = self
            .executor
            .as_ref()
            .expect("groups come with their executor");
        let ctl = group.controllers()[0];
        Ok(ex
            .hierarchy()
            .group_dir(ctl, group.path())?
            .join("cgroup.procs"))
    }
}

/// Everything a sweep holds while it runs.
pub struct Rig {
    /// The LC service (dropped first).
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
        // The service first, then the cgroups (the executor removes the
        // groups it created when dropped), then the page.
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
        side_cpus: if spare.is_empty() {
            pair.batch.clone()
        } else {
            spare
        },
        request_lane,
        batch_lanes,
    };
    let (cgroups, skipped) = make_cgroups(spec, &lanes)?;
    let set = requests::build(
        spec.lc.requests,
        &spec.demand,
        spec.lc.tasks_path.as_deref(),
        spec.seed,
    )?;
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
        },
        stop,
    )?;
    rig.lc = Some(svc);
    Ok(())
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
                "{}: the load generator and the built-in service's dispatcher preempt batch work \
                 on their CPU in every configuration",
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

/// Creates the cgroups of `cpuset` and `cfs_quota` if they run; where this
/// process may not write cgroups (not root, no such controller) they are
/// skipped with the reason.
fn make_cgroups(spec: &BenchSpec, lanes: &Lanes) -> Result<(Cgroups, Vec<Skipped>)> {
    let wants = |c: Config| spec.configs.contains(&c);
    let mut cg = Cgroups::default();
    let mut skipped = Vec::new();
    if !wants(Config::Cpuset) && !wants(Config::CfsQuota) {
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
            for c in [Config::Cpuset, Config::CfsQuota]
                .into_iter()
                .filter(|c| wants(*c))
            {
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
    let mut attempt =
        |config: Config, ctl: Controller, knob: Knob, ex: &mut Executor| -> Result<Option<Group>> {
            let name = format!("{CGROUP_PREFIX}{pid}-{config}");
            let made = ex
                .create_group(&name, &[ctl])
                .and_then(|g| ex.set(&g, knob).map(|_| g));
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
    if wants(Config::Cpuset) {
        cg.cpuset = attempt(
            Config::Cpuset,
            Controller::Cpuset,
            Knob::CpusetCpus(lanes.batch_cpus.clone()),
            &mut ex,
        )?;
    }
    if wants(Config::CfsQuota) {
        let q = (spec.batch.cfs_quota_lanes * spec.batch.cfs_period_us as f64).round() as u64;
        cg.quota = attempt(
            Config::CfsQuota,
            Controller::Cpu,
            Knob::CpuMax {
                quota_us: Some(q.max(1000)),
                period_us: spec.batch.cfs_period_us,
            },
            &mut ex,
        )?;
    }
    cg.executor = Some(ex);
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
            if spec.page_clock == PageClock::Monotonic {
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
