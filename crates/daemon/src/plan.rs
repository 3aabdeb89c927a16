//! **Validation against the machine**: [`Plan::resolve`] turns a checked
//! [`Config`] into a [`Plan`] — lanes, the LC target, each batch group's
//! cgroup, controllers and knobs — or refuses it with the field and the
//! reason. It only reads (`/proc`, sysfs, the cgroup tree, the page and
//! state files): nothing is applied until every check has passed.

use crate::config::{Config, FreezerChoice, IdleMethod, Mode};
use crate::error::ConfigError;
use crate::lc::LcTarget;
use elfen_cgroup::{Controller, FreezerBackend, GroupPath, Hierarchy, Layout, StateRecord};
use elfen_policy::PolicyConfig;
use elfen_runtime::NapChoice;
use elfen_shm::{Page, PageSpec, nap};
use elfen_topo::{Pair, Topology};
use std::path::{Path, PathBuf};

/// A request lane of the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLane {
    /// Its CPU.
    pub cpu: u32,
    /// Its index in the page.
    pub lane: u32,
}

/// A batch lane of the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLane {
    /// Its CPU.
    pub cpu: u32,
    /// Its index in the page.
    pub lane: u32,
    /// The request lane it is paired with (index in the page).
    pub request_lane: u32,
}

/// Where a batch group's processes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupSource {
    /// An existing group (opened; its changed values restored at exit).
    Existing,
    /// A command the daemon starts in a group it creates (removed at exit).
    Launch {
        /// The program, resolved.
        program: PathBuf,
        /// The arguments after it.
        args: Vec<String>,
    },
}

/// One batch group, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// Its name.
    pub name: String,
    /// Its mode.
    pub mode: Mode,
    /// The group path below each controller's root.
    pub path: GroupPath,
    /// Existing or launched.
    pub source: GroupSource,
    /// The controllers it is opened or created in.
    pub controllers: Vec<Controller>,
    /// Its cpuset, when confined to the batch lanes.
    pub confine: Option<Vec<u32>>,
    /// How it yields (guard and idle modes): `CpuIdle` or `SchedIdle`.
    pub idle: Option<IdleMethod>,
    /// Its memory, I/O and egress isolation.
    pub iso: crate::isolation::plan::GroupIso,
}

/// A configuration resolved against this machine.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The configuration.
    pub config: Config,
    /// The lane pairs and where they came from.
    pub pairs: Vec<Pair>,
    /// One line on the pairing.
    pub pairing: String,
    /// The page's request lanes.
    pub request_lanes: Vec<RequestLane>,
    /// The page's batch lanes.
    pub batch_lanes: Vec<BatchLane>,
    /// The page to create.
    pub page_spec: PageSpec,
    /// A page left by a dead daemon (its pid) to replace.
    pub stale_page: Option<u32>,
    /// A state file left by a dead daemon (its pid) to recover first.
    pub stale_state: Option<u32>,
    /// The LC service.
    pub lc: LcTarget,
    /// The policy of every lane.
    pub policy: PolicyConfig,
    /// The cgroup hierarchy, when a group needs one.
    pub hierarchy: Option<Hierarchy>,
    /// The batch groups.
    pub groups: Vec<GroupPlan>,
    /// CPUs of the writer and freezer threads.
    pub writer_cpus: Vec<u32>,
    /// Memory, I/O and egress isolation, machine-wide.
    pub isolation: crate::isolation::plan::IsolationPlan,
    /// What the operator should know (not errors).
    pub notes: Vec<String>,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(field, reason)
}

pub use elfen_cmd::proc::is_root;

impl Plan {
    /// Checks `config` (already [`Config::check`]ed) against the machine.
    pub fn resolve(config: &Config) -> Result<Plan, ConfigError> {
        config.check()?;
        let topo = Topology::detect().map_err(|e| err("pairs", e.to_string()))?;
        let plan = elfen_topo::plan_pairs(&topo, config.pairs.as_deref())
            .map_err(|e| err("pairs", e.to_string()))?;
        if plan.is_empty() {
            return Err(err(
                "pairs",
                "this machine has no lane pair (a request lane needs a batch lane: 2 CPUs at least)",
            ));
        }
        let pairing = plan.describe();
        let pairs = plan.into_pairs();
        let (request_lanes, batch_lanes) = lanes_of(&pairs);
        let batch_cpus: Vec<u32> = batch_lanes.iter().map(|b| b.cpu).collect();
        let writer_cpus = match &config.signal.cpus {
            Some(c) => {
                if let Some(bad) = c.iter().find(|&&x| topo.lane(x).is_none()) {
                    return Err(err(
                        "signal.cpus",
                        format!("cpu {bad} is not online (online: {})", cpus(&topo.cpus())),
                    ));
                }
                c.clone()
            }
            None => batch_cpus.clone(),
        };
        let mut notes = vec![pairing.clone()];
        let policy = config.policy.policy_config();
        let nap_choice: NapChoice = config
            .policy
            .nap
            .parse()
            .map_err(|e: elfen_runtime::nap::UnknownNapName| err("policy.nap", e.to_string()))?;
        nap_choice
            .resolve(elfen_runtime::machine_features())
            .map_err(|e| err("policy.nap", e.to_string()))?;
        let mut page_spec = PageSpec::for_pairs(
            &pairs
                .iter()
                .map(|p| (p.request, p.batch.clone()))
                .collect::<Vec<_>>(),
            policy.kind.id(),
            policy.budget_ns,
        );
        for l in &mut page_spec.lanes {
            l.nap = nap_choice.id();
            l.ref_ipc_milli = policy.ref_ipc.map_or(0, |r| (r * 1000.0).round() as u32);
        }
        debug_assert!(page_spec.lanes.iter().all(|l| l.nap <= nap::MWAITX));
        let lc = lc_target(config, &mut notes)?;
        let stale_page = check_page(config, &mut page_spec)?;
        page_access_notes(config, &page_spec, &mut notes);
        let stale_state = check_state_file(&config.state_file)?;
        check_privileges(config)?;
        let hierarchy = hierarchy(config)?;
        let isolation = crate::isolation::plan::resolve(config, &mut notes)?;
        let mut groups = Vec::new();
        for (i, b) in config.batch.iter().enumerate() {
            let mut g = group_plan(i, b, &hierarchy, &batch_cpus)?;
            crate::isolation::plan::resolve_group(
                i, b, &hierarchy, &mut g, &isolation, &mut notes,
            )?;
            groups.push(g);
        }
        if let Some(p) = stale_page {
            notes.push(format!(
                "page {} was left by pid {p}, which is gone: it is replaced",
                config.page.path.display()
            ));
        }
        if let Some(p) = stale_state {
            notes.push(format!(
                "state file {} was left by pid {p}, which is gone: its changes are undone first",
                config.state_file.display()
            ));
        }
        Ok(Plan {
            config: config.clone(),
            pairs,
            pairing,
            request_lanes,
            batch_lanes,
            page_spec,
            stale_page,
            stale_state,
            lc,
            policy,
            hierarchy: Some(hierarchy),
            groups,
            writer_cpus,
            isolation,
            notes,
        })
    }

    /// The batch lanes paired with request lane `lane`.
    pub fn batch_of(&self, lane: u32) -> impl Iterator<Item = &BatchLane> {
        self.batch_lanes
            .iter()
            .filter(move |b| b.request_lane == lane)
    }

    /// A summary for `--check` and the start of a run.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "page {} ({} lanes); {}\nLC service: {}\npolicy: {}{}\n",
            self.config.page.path.display(),
            self.page_spec.lanes.len(),
            self.pairing,
            self.lc,
            self.policy.kind,
            if self.policy.kind.uses_budget() {
                format!(" (budget {} µs)", self.policy.budget_ns / 1000)
            } else {
                String::new()
            }
        );
        for g in &self.groups {
            let what = match &g.source {
                GroupSource::Existing => format!("cgroup {}", g.path),
                GroupSource::Launch { program, args } => format!(
                    "command {} {} in new group {}",
                    program.display(),
                    args.join(" "),
                    g.path
                ),
            };
            s += &format!("batch {}: mode {}, {what}", g.name, g.mode.name());
            if let Some(c) = &g.confine {
                s += &format!(", cpuset {}", cpus(c));
            }
            match g.idle {
                Some(IdleMethod::CpuIdle) => s += ", cpu.idle",
                Some(IdleMethod::SchedIdle) => s += ", SCHED_IDLE threads",
                _ => {}
            }
            s += "\n";
        }
        s += &crate::isolation::plan::describe(&self.isolation, &self.groups);
        s
    }
}

fn cpus(c: &[u32]) -> String {
    elfen_topo::format_cpu_list(c)
}

/// Page lanes laid out as `PageSpec::for_pairs` does: pair by pair,
/// request lane first.
fn lanes_of(pairs: &[Pair]) -> (Vec<RequestLane>, Vec<BatchLane>) {
    let (mut req, mut bat) = (Vec::new(), Vec::new());
    let mut next = 0u32;
    for p in pairs {
        let r = next;
        req.push(RequestLane {
            cpu: p.request,
            lane: r,
        });
        next += 1;
        for &b in &p.batch {
            bat.push(BatchLane {
                cpu: b,
                lane: next,
                request_lane: r,
            });
            next += 1;
        }
    }
    (req, bat)
}

fn lc_target(config: &Config, notes: &mut Vec<String>) -> Result<LcTarget, ConfigError> {
    let lc = &config.lc;
    if let Some(pid) = lc.pid {
        elfen_bpf::proc::check_process(pid).map_err(|e| err("lc.pid", e.to_string()))?;
        if pid == std::process::id() {
            return Err(err("lc.pid", "that is the daemon itself"));
        }
        return Ok(LcTarget::Pid(pid));
    }
    if let Some(dir) = &lc.cgroup {
        if !dir.join("cgroup.procs").is_file() {
            return Err(err(
                "lc.cgroup",
                format!(
                    "{} is not a cgroup directory (no cgroup.procs)",
                    dir.display()
                ),
            ));
        }
        if !crate::lc::is_cgroup2(dir) {
            notes.push(format!(
                "LC cgroup {} is cgroup v1: its processes are watched by pid (cgroup.procs re-read every {} ms)",
                dir.display(),
                lc.rescan_ms
            ));
        }
        return Ok(LcTarget::Cgroup(dir.clone()));
    }
    let name = lc.comm.clone().expect("checked: one selector");
    if crate::lc::find_by_name(&name).is_empty() {
        notes.push(format!(
            "no process named {name:?} runs now: the daemon waits for it"
        ));
    }
    Ok(LcTarget::Comm(name))
}

/// A page at the path refuses a second daemon while its creator lives; a
/// file there that is not the daemon's to replace (another user's, not a
/// signal page) is refused, saying whose it is and how to clear it; the
/// batch group, if named, becomes the batch segment's group.
fn check_page(config: &Config, spec: &mut PageSpec) -> Result<Option<u32>, ConfigError> {
    let path = elfen_shm::page_path(&config.page.path.to_string_lossy());
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Err(err("page", "needs a directory"));
    };
    if !dir.is_dir() {
        return Err(err(
            "page",
            format!("directory {} does not exist", dir.display()),
        ));
    }
    if let Some(g) = &config.page.batch_group {
        *spec = spec.clone().with_batch_group(batch_gid(g)?);
    }
    let Some(holder) = Page::holder(&path) else {
        return Ok(None);
    };
    let clear = format!("remove it (rm {}) or choose another page", path.display());
    if !holder.trusted_by(elfen_shm::users::euid()) {
        return Err(err(
            "page",
            format!(
                "{} exists and is not the daemon's to use or replace ({}): another user holds \
                 the name; {clear}",
                path.display(),
                holder.describe()
            ),
        ));
    }
    if !holder.signal_page {
        return Err(err(
            "page",
            format!(
                "{} exists and is not a signal page (no ELFENSIG magic); {clear}",
                path.display()
            ),
        ));
    }
    if holder.creator_alive {
        return Err(err(
            "page",
            format!(
                "{} is in use: its creator, pid {}, is running (another daemon?); choose another page",
                path.display(),
                holder.creator_pid
            ),
        ));
    }
    spec.replace = true;
    Ok(Some(holder.creator_pid))
}

/// `[page] batch_group` as a gid: a group name, or a gid.
fn batch_gid(g: &crate::config::GroupRef) -> Result<u32, ConfigError> {
    use crate::config::GroupRef;
    match g {
        GroupRef::Id(gid) => Ok(*gid),
        GroupRef::Name(n) => elfen_shm::users::group_id(n)
            .or_else(|| n.parse().ok())
            .ok_or_else(|| {
                err(
                    "page.batch_group",
                    format!("no group named {n:?} (see /etc/group; a gid also works)"),
                )
            }),
    }
}

/// Who may attach cooperative batch threads, said where it matters: a
/// cooperative group needs its batch programs to write the page's batch
/// lines, which only the daemon's user and the batch group may.
fn page_access_notes(config: &Config, spec: &PageSpec, notes: &mut Vec<String>) {
    let coop: Vec<&str> = config
        .batch
        .iter()
        .filter(|b| b.mode == Mode::Cooperative)
        .map(|b| b.name.as_str())
        .collect();
    if coop.is_empty() {
        return;
    }
    let me = elfen_shm::users::describe_user(elfen_shm::users::euid());
    match spec.batch_gid {
        Some(g) => notes.push(format!(
            "page: batch threads of {me} and of {} may attach (cooperative {})",
            elfen_shm::users::describe_group(g),
            coop.join(", ")
        )),
        None => {
            // other users' processes already in a cooperative group's cgroup
            let others = cooperative_uids(config);
            notes.push(format!(
                "page: no [page] batch_group: only processes of {me} may attach cooperative batch \
                 threads (cooperative {}){}; name a batch_group for batch programs of other users",
                coop.join(", "),
                if others.is_empty() {
                    String::new()
                } else {
                    format!(
                        " — processes of {} in their groups now cannot",
                        others
                            .iter()
                            .map(|&u| elfen_shm::users::describe_user(u))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ));
        }
    }
}

/// The uids (other than this process's) of processes now in the existing
/// cgroups of cooperative batch groups (best effort: any controller's
/// `cgroup.procs` under the cgroup root).
fn cooperative_uids(config: &Config) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let me = elfen_shm::users::euid();
    let mut uids = Vec::new();
    for b in config.batch.iter().filter(|b| b.mode == Mode::Cooperative) {
        let Some(g) = &b.cgroup else { continue };
        let rel = g.trim_matches('/');
        let dirs = std::fs::read_dir(&config.cgroup_root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|c| c.path().join(rel))
            .chain([config.cgroup_root.join(rel)]);
        for d in dirs {
            let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) else {
                continue;
            };
            for pid in procs.split_whitespace() {
                if let Ok(m) = std::fs::metadata(format!("/proc/{pid}")) {
                    if m.uid() != me && !uids.contains(&m.uid()) {
                        uids.push(m.uid());
                    }
                }
            }
        }
    }
    uids
}

/// A state file of a live daemon refuses a second one.
fn check_state_file(path: &Path) -> Result<Option<u32>, ConfigError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if dir.exists() && !dir.is_dir() {
            return Err(err(
                "state_file",
                format!("{} is not a directory", dir.display()),
            ));
        }
    }
    let rec = StateRecord::load(path).map_err(|e| err("state_file", e.to_string()))?;
    match rec {
        Some(r) if r.pid != std::process::id() && elfen_shm::pid_alive(r.pid) => Err(err(
            "state_file",
            format!(
                "{} belongs to pid {}, which is running (another daemon?)",
                path.display(),
                r.pid
            ),
        )),
        Some(r) => Ok(Some(r.pid)),
        None => Ok(None),
    }
}

fn check_privileges(config: &Config) -> Result<(), ConfigError> {
    if is_root() {
        return Ok(());
    }
    for (i, b) in config.batch.iter().enumerate() {
        if b.mode != Mode::Cooperative || b.confined() {
            return Err(err(
                format!("batch[{i}].mode"),
                format!(
                    "mode {}{} needs root (SCHED_FIFO, cgroups, other processes' scheduling)",
                    b.mode.name(),
                    if b.confined() { " with confine" } else { "" }
                ),
            ));
        }
        if b.command.is_some() {
            return Err(err(
                format!("batch[{i}].command"),
                "starting a command in a group of its own needs root (cgroups)",
            ));
        }
    }
    if config.writer_priority() > 0 {
        return Err(err(
            "signal.priority",
            "a SCHED_FIFO writer needs root; set 0 to run it SCHED_OTHER",
        ));
    }
    Ok(())
}

/// The cgroup hierarchy (every batch group is a cgroup: an operator's, or
/// one the daemon creates for a command).
fn hierarchy(config: &Config) -> Result<Hierarchy, ConfigError> {
    let h =
        Hierarchy::detect(&config.cgroup_root).map_err(|e| err("cgroup_root", e.to_string()))?;
    let h = match config.freezer {
        FreezerChoice::Auto => h,
        FreezerChoice::V1 => h
            .with_freezer(FreezerBackend::V1)
            .map_err(|e| err("freezer", e.to_string()))?,
        FreezerChoice::V2 => h
            .with_freezer(FreezerBackend::V2)
            .map_err(|e| err("freezer", e.to_string()))?,
    };
    Ok(h)
}

fn group_plan(
    i: usize,
    b: &crate::config::BatchSection,
    h: &Hierarchy,
    batch_cpus: &[u32],
) -> Result<GroupPlan, ConfigError> {
    let f = |k: &str| format!("batch[{i}].{k}");
    let idle = match (b.mode, b.idle_method) {
        (Mode::Guard | Mode::Idle, IdleMethod::Auto) => Some(if h.layout() == Layout::V2 {
            IdleMethod::CpuIdle
        } else {
            IdleMethod::SchedIdle
        }),
        (Mode::Guard | Mode::Idle, m) => Some(m),
        _ => None,
    };
    let mut controllers = Vec::new();
    if matches!(b.mode, Mode::Freeze | Mode::Blind) {
        controllers.push(Controller::Freezer);
    }
    if b.confined() || b.mode == Mode::Blind {
        controllers.push(Controller::Cpuset);
    }
    if idle == Some(IdleMethod::CpuIdle) {
        controllers.push(Controller::Cpu);
    }
    let (path, source) = match (&b.cgroup, &b.command) {
        (Some(g), _) => (
            GroupPath::new(g).map_err(|e| err(f("cgroup"), e.to_string()))?,
            GroupSource::Existing,
        ),
        (None, Some(argv)) => (
            GroupPath::new(&format!("elfen-daemon-{}/{}", std::process::id(), b.name))
                .map_err(|e| err(f("name"), e.to_string()))?,
            GroupSource::Launch {
                program: resolve_program(&argv[0]).map_err(|r| err(f("command"), r))?,
                args: argv[1..].to_vec(),
            },
        ),
        (None, None) => unreachable!("checked: one of cgroup, command"),
    };
    if controllers.is_empty() {
        // membership only (threads to list, a place for a command)
        let pick = [Controller::Cpu, Controller::Freezer, Controller::Cpuset]
            .into_iter()
            .find(|&c| match source {
                GroupSource::Existing => h.group_dir(c, &path).is_ok_and(|d| d.is_dir()),
                GroupSource::Launch { .. } => h.supports(c),
            });
        let Some(c) = pick else {
            return Err(err(
                f("cgroup"),
                format!("no group {path} in the cpu, freezer or cpuset hierarchy"),
            ));
        };
        controllers.push(c);
    }
    let field = if matches!(source, GroupSource::Existing) {
        f("cgroup")
    } else {
        f("mode")
    };
    for &c in &controllers {
        let root = h
            .controller_root(c)
            .map_err(|e| err(field.clone(), e.to_string()))?;
        let dir = h
            .group_dir(c, &path)
            .map_err(|e| err(field.clone(), e.to_string()))?;
        match source {
            GroupSource::Existing if !dir.is_dir() => {
                return Err(err(
                    field,
                    format!("no such group: {} does not exist", dir.display()),
                ));
            }
            GroupSource::Launch { .. } if dir.exists() => {
                return Err(err(field, format!("{} exists already", dir.display())));
            }
            _ => {}
        }
        if c == Controller::Cpu && idle == Some(IdleMethod::CpuIdle) {
            let offered = if dir.is_dir() {
                dir.join("cpu.idle").exists()
            } else {
                child_offers(&root, "cpu.idle")
            };
            if !offered {
                return Err(err(
                    f("idle_method"),
                    "cpu.idle is not offered here (kernel < 5.15?): use sched_idle",
                ));
            }
        }
    }
    Ok(GroupPlan {
        name: b.name.clone(),
        mode: b.mode,
        path,
        source,
        controllers,
        confine: b.confined().then(|| batch_cpus.to_vec()),
        idle,
        iso: Default::default(),
    })
}

/// Whether a group below `root` has `file` (the root group lacks some
/// files its children have); true when `root` has no child to look at.
fn child_offers(root: &Path, file: &str) -> bool {
    let Ok(rd) = std::fs::read_dir(root) else {
        return false;
    };
    let dirs: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.is_empty() || dirs.iter().any(|d| d.join(file).exists())
}

/// The program a command names: a path that exists, or a name in `$PATH`.
fn resolve_program(p: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let exec = |c: &Path| {
        std::fs::metadata(c).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if p.contains('/') {
        let c = PathBuf::from(p);
        return if exec(&c) {
            Ok(c)
        } else {
            Err(format!("{p} is not an executable file"))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| exec(c))
        .ok_or_else(|| format!("program {p:?} is not found in PATH"))
}
