//! **Validation against the machine**: [`Plan::resolve`] turns a checked
//! [`Config`] into a [`Plan`] — lanes, the LC target, each batch group's
//! cgroup, controllers and knobs — or refuses it with the field and the
//! reason. It only reads (`/proc`, sysfs, the cgroup tree, the page and
//! state files): nothing is applied until every check has passed.

use crate::config::{Config, FreezerChoice, IdleMethod, Mode};
use crate::error::ConfigError;
use crate::lc::{LcOwner, LcTarget};
use crate::placement::{self, Placement};
use elfen_cgroup::{
    Controller, FreezerBackend, GroupPath, Hierarchy, HostSituation, Knob, Layout, Owner,
    StateRecord,
};
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
    /// A yielding group that is a group of the cpu controller: how it
    /// yields as a whole (its threads' SCHED_IDLE alone would not).
    pub cpu_yield: Option<CpuYield>,
    /// The modes it may run (its mode; freeze's fallback; auto's ladder).
    pub rungs: Vec<Mode>,
    /// The cpuset guard mode confines it to, when it may guard.
    pub guard_cpus: Option<Vec<u32>>,
    /// How the host names it (`slice batch.slice (found by …)`), when it
    /// was named so.
    pub named: Option<String>,
    /// Who manages it (systemd, the kubelet, nobody).
    pub owner: Owner,
    /// Its name follows a unit, container or pod that may stop and come
    /// back: gone, it is waited for (not lost); back at the same path, its
    /// knobs are applied again.
    pub follows: bool,
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
    /// Whose processes its name adopts, and why (for the plan's summary).
    pub lc_owner: (LcOwner, String),
    /// The policy of every lane.
    pub policy: PolicyConfig,
    /// The cgroup hierarchy, when a group needs one.
    pub hierarchy: Option<Hierarchy>,
    /// The batch groups.
    pub groups: Vec<GroupPlan>,
    /// CPUs of the writer and freezer threads.
    pub writer_cpus: Vec<u32>,
    /// This process on this host: systemd, the layout, its own group and
    /// whether that is delegated.
    pub host: HostSituation,
    /// Where the groups of commands are created.
    pub placement: Placement,
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
        Plan::resolve_with(config, None)
    }

    /// [`Plan::resolve`] as if this process were in `host`'s situation
    /// (systemd, its own group, delegation); `None`: detected.
    pub fn resolve_with(config: &Config, host: Option<HostSituation>) -> Result<Plan, ConfigError> {
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
        let hierarchy = hierarchy(config)?;
        let host =
            host.unwrap_or_else(|| HostSituation::detect(hierarchy.layout(), hierarchy.unified()));
        let (lc, lc_owner) = match placement::lc_groups(config, &hierarchy, &mut notes)? {
            Some(t) => (t, (LcOwner::FirstFound, String::new())),
            None => lc_target(config, &mut notes)?,
        };
        let stale_page = check_page(config, &mut page_spec)?;
        page_access_notes(config, &page_spec, &mut notes);
        let (stale_state, reused) = check_state_file(&config.state_file)?;
        notes.extend(reused);
        check_privileges(config)?;
        let placement = Placement::decide(config, &host)?;
        notes.extend(placement::undelegated_note(config, &host));
        let isolation = crate::isolation::plan::resolve(config, &mut notes)?;
        let mut groups = Vec::new();
        let ctx = GroupContext {
            config,
            h: &hierarchy,
            host: &host,
            placement: &placement,
            batch_cpus: &batch_cpus,
        };
        for (i, b) in config.batch.iter().enumerate() {
            let mut g = group_plan(i, b, &ctx, &mut notes)?;
            crate::isolation::plan::resolve_group(
                i, b, &hierarchy, &mut g, &isolation, &mut notes,
            )?;
            groups.push(g);
        }
        if groups
            .iter()
            .any(|g| g.cpu_yield.is_some() && matches!(g.source, GroupSource::Launch { .. }))
        {
            notes.extend(placement::delegated_yield_note(&placement, &hierarchy));
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
            lc_owner,
            policy,
            hierarchy: Some(hierarchy),
            groups,
            writer_cpus,
            host,
            placement,
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

    /// The policy in words (`refresh_budget (budget 500 µs)`).
    pub fn describe_policy(&self) -> String {
        if self.policy.kind.uses_budget() {
            format!(
                "{} (budget {} µs)",
                self.policy.kind,
                self.policy.budget_ns / 1000
            )
        } else {
            self.policy.kind.to_string()
        }
    }

    /// A summary for `--check` and the start of a run.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "host: {}\n{}\npage {} ({} lanes); {}\nLC service: {}{}\npolicy: {}{}\n",
            self.host.describe(),
            self.placement.describe(),
            self.config.page.path.display(),
            self.page_spec.lanes.len(),
            self.pairing,
            self.lc,
            if self.lc_owner.1.is_empty() {
                String::new()
            } else {
                format!(", {}", self.lc_owner.1)
            },
            self.policy.kind,
            if self.policy.kind.uses_budget() {
                format!(" (budget {} µs)", self.policy.budget_ns / 1000)
            } else {
                String::new()
            }
        );
        for g in &self.groups {
            let what = match &g.source {
                GroupSource::Existing => match &g.named {
                    Some(n) => format!("{n}: cgroup {}", g.path),
                    None => format!("cgroup {}", g.path),
                },
                GroupSource::Launch { program, args } => format!(
                    "command {} {} in new group {}",
                    program.display(),
                    args.join(" "),
                    g.path
                ),
            };
            s += &format!("batch {}: mode {}, {what}", g.name, g.mode.name());
            if g.rungs.len() > 1 {
                let names: Vec<&str> = g.rungs.iter().map(|m| m.name()).collect();
                s += &format!(
                    ", {} {}",
                    if g.mode == Mode::Auto {
                        "ladder"
                    } else {
                        "modes"
                    },
                    names.join(" → ")
                );
            }
            if let Some(c) = &g.confine {
                s += &format!(", cpuset {}", cpus(c));
            }
            if g.idle == Some(IdleMethod::SchedIdle) {
                s += ", SCHED_IDLE threads";
            }
            match &g.cpu_yield {
                Some(y) => s += &format!(", {}", y.describe()),
                None if g.idle.is_some() => {
                    s += ", no cpu group of its own (its threads are tasks of the root cpu group)"
                }
                None => {}
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

fn lc_target(
    config: &Config,
    notes: &mut Vec<String>,
) -> Result<(LcTarget, (LcOwner, String)), ConfigError> {
    let lc = &config.lc;
    let describe = elfen_cmd::proc::describe_user;
    let user = match &lc.user {
        Some(u) => Some(elfen_cmd::proc::user_id(u.trim()).ok_or_else(|| {
            err(
                "lc.user",
                format!("no user named {u:?} (the password database), and not a uid"),
            )
        })?),
        None => None,
    };
    if let Some(pid) = lc.pid {
        elfen_bpf::proc::check_process(pid).map_err(|e| err("lc.pid", e.to_string()))?;
        if pid == std::process::id() {
            return Err(err("lc.pid", "that is the daemon itself"));
        }
        let uids = elfen_cmd::proc::uids(pid)
            .ok_or_else(|| err("lc.pid", format!("cannot read /proc/{pid}/status")))?;
        let owner = match user {
            Some(u) if !crate::lc::owned_by(uids, u) => {
                return Err(err(
                    "lc.pid",
                    format!(
                        "pid {pid} runs as {}, not lc.user {}",
                        describe(uids.0),
                        describe(u)
                    ),
                ));
            }
            Some(u) => (
                LcOwner::Uid(u),
                format!("restarts of {} only ([lc] user)", describe(u)),
            ),
            None => (
                LcOwner::Uid(uids.0),
                format!("restarts of {} only (its user)", describe(uids.0)),
            ),
        };
        return Ok((LcTarget::Pid(pid), owner));
    }
    let name = lc.comm.clone().expect("checked: one selector");
    let running = crate::lc::find_by_name(&name);
    if running.is_empty() {
        notes.push(format!(
            "no process named {name:?} runs now: the daemon waits for it"
        ));
    }
    let owner = comm_owner(&name, user, &running, notes);
    Ok((LcTarget::Comm(name), owner))
}

/// Whose processes named `name` are the LC: `user` (`[lc] user`), else the
/// owner of the oldest of `running`, else the first found; same-named
/// processes of another user that run now are noted.
fn comm_owner(
    name: &str,
    user: Option<u32>,
    running: &[u32],
    notes: &mut Vec<String>,
) -> (LcOwner, String) {
    let describe = elfen_cmd::proc::describe_user;
    let owner = match (user, crate::lc::oldest_owner(running)) {
        (Some(u), _) => (
            LcOwner::Uid(u),
            format!("processes of {} only ([lc] user)", describe(u)),
        ),
        (None, Some((u, pid))) => (
            LcOwner::Uid(u),
            format!(
                "processes of {} only (the owner of the oldest one now, pid {pid}; set [lc] user to choose)",
                describe(u)
            ),
        ),
        (None, None) => (
            LcOwner::FirstFound,
            "processes of one user only: the owner of the first found (set [lc] user to choose)"
                .to_string(),
        ),
    };
    if let LcOwner::Uid(u) = owner.0 {
        let others: Vec<String> = running
            .iter()
            .filter_map(|&p| Some((p, elfen_cmd::proc::uids(p)?)))
            .filter(|&(_, uids)| !crate::lc::owned_by(uids, u))
            .map(|(p, uids)| format!("pid {p} ({})", describe(uids.0)))
            .collect();
        if !others.is_empty() {
            notes.push(format!(
                "processes named {name:?} of another user are not adopted: {}",
                others.join(", ")
            ));
        }
    }
    owner
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
    // a creator pid reused by a program started after the page: gone
    let pid = holder.creator_pid;
    let written = (holder.created_unix_s > 0).then_some(holder.created_unix_s);
    if let elfen_cmd::proc::Holder::Running(p) = elfen_cmd::proc::holder(pid, None, written) {
        return Err(err(
            "page",
            format!(
                "{} is in use: its creator, {p}, is running (another daemon?); stop it \
                 (kill -TERM {pid}) or choose another page",
                path.display()
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

/// A state file of a live daemon refuses a second one; one whose writer is
/// gone — its pid free, or reused by another program (a later start than
/// the one recorded, or than the file's last write) — is recovered first.
/// A file or directory another user could have written is refused
/// (`StateRecord::load`). Returns the dead writer's pid and, when its pid
/// is reused, a note saying by what.
fn check_state_file(path: &Path) -> Result<(Option<u32>, Option<String>), ConfigError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if dir.exists() && !dir.is_dir() {
            return Err(err(
                "state_file",
                format!("{} is not a directory", dir.display()),
            ));
        }
    }
    let rec = StateRecord::load(path).map_err(|e| err("state_file", e.to_string()))?;
    let Some(r) = rec else {
        return Ok((None, None));
    };
    if r.pid == std::process::id() {
        return Ok((Some(r.pid), None));
    }
    let written = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    match elfen_cmd::proc::holder(r.pid, r.pid_start, written) {
        elfen_cmd::proc::Holder::Running(p) => Err(err(
            "state_file",
            format!(
                "{} is held by {p}, which is running (another daemon on this state file?): \
                 stop it (kill -TERM {}) or give this daemon another state_file",
                path.display(),
                p.pid
            ),
        )),
        elfen_cmd::proc::Holder::Reused(p) => Ok((
            Some(r.pid),
            Some(format!(
                "state file {}: its writer, pid {}, is gone; that pid now belongs to another \
                 program ({p}, started after the file was written)",
                path.display(),
                r.pid
            )),
        )),
        elfen_cmd::proc::Holder::Gone => Ok((Some(r.pid), None)),
    }
}

fn check_privileges(config: &Config) -> Result<(), ConfigError> {
    if is_root() {
        return Ok(());
    }
    for (i, b) in config.batch.iter().enumerate() {
        if b.mode == Mode::Auto {
            return Err(err(
                format!("batch[{i}].mode"),
                format!(
                    "auto has no knob it may use here: its ladder ({}) needs root — cgroups for \
                     the group's yield, its confinement and the freeze that steps the batch \
                     aside for its measurements, SCHED_FIFO for guards, the freezer and blind \
                     isolation",
                    config
                        .auto
                        .ladder
                        .iter()
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
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
    let layout = h.layout();
    let h = match config.freezer {
        FreezerChoice::Auto => h,
        FreezerChoice::V1 => h.with_freezer(FreezerBackend::V1).map_err(|_| {
            err(
                "freezer",
                format!(
                    "\"v1\" asks for the v1 freezer hierarchy (freezer.state), but {}: use \
                     \"auto\" or \"v2\"",
                    if layout == Layout::V2 {
                        "this host is cgroup v2 only (cgroup.freeze)".to_string()
                    } else {
                        format!(
                            "no v1 freezer hierarchy is mounted under {}",
                            config.cgroup_root.display()
                        )
                    }
                ),
            )
        })?,
        FreezerChoice::V2 => h.with_freezer(FreezerBackend::V2).map_err(|_| {
            err(
                "freezer",
                format!(
                    "\"v2\" asks for cgroup.freeze of a v2 tree, but this host is cgroup v1 only \
                     (no v2 tree at {}): use \"auto\" or \"v1\"",
                    config.cgroup_root.join("unified").display()
                ),
            )
        })?,
    };
    Ok(h)
}

/// How a batch group in the cpu controller yields **as a whole**. A
/// task's SCHED_IDLE ranks it only among the tasks of its own cpu group:
/// the group's entity competes with its siblings (the LC's group, or the
/// LC's tasks in the root) at its weight — 1024 shares, 100 on v2 — so a
/// batch group that is not idle itself runs as if at the LC's priority,
/// whatever its threads' class. `cpu.idle` = 1 makes the group's entity
/// idle among its siblings (v2, and v1 since Linux 5.15); without it the
/// group gets the minimum weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuYield {
    /// The cpu-controller groups written, outermost first: the top group
    /// the daemon creates (`elfen-daemon-<pid>`) when the batch group is
    /// its own, then the batch group.
    pub groups: Vec<GroupPath>,
    /// What each gets: `cpu.idle` = 1, or the minimum weight.
    pub knob: Knob,
}

impl CpuYield {
    /// In words, for `--check` and the start: which groups get what.
    pub fn describe(&self) -> String {
        let groups: Vec<&str> = self.groups.iter().map(GroupPath::as_str).collect();
        match self.knob {
            Knob::CpuIdle(_) => format!("cpu.idle = 1 on cpu group {}", groups.join(", ")),
            ref k => format!(
                "{k} (the minimum: cpu.idle is not offered here) on cpu group {}",
                groups.join(", ")
            ),
        }
    }
}

/// Where a group's processes are listed from, when no mode needs a
/// controller: one that changes nothing about them. The freezer (and a
/// cpuset the daemon does not confine) leave scheduling alone; a group of
/// the cpu controller does not (its entity competes at its weight), so it
/// comes last, and only for an existing group (reading its members changes
/// nothing) or a group whose mode makes it yield as a whole.
fn membership(
    h: &Hierarchy,
    path: &GroupPath,
    source: &GroupSource,
    yields: bool,
) -> Result<Controller, String> {
    let existing = matches!(source, GroupSource::Existing);
    let pick = [Controller::Freezer, Controller::Cpuset, Controller::Cpu]
        .into_iter()
        .filter(|&c| existing || yields || c != Controller::Cpu)
        .find(|&c| {
            if existing {
                h.group_dir(c, path).is_ok_and(|d| d.is_dir())
            } else {
                h.supports(c)
            }
        });
    pick.ok_or_else(|| {
        if existing {
            format!("no group {path} in the freezer, cpuset or cpu hierarchy")
        } else {
            "no freezer or cpuset hierarchy to hold the command's group (a group of the cpu \
             controller would change how its processes are scheduled)"
                .to_string()
        }
    })
}

/// Whether group `path` exists as a group of the cpu controller: its
/// directory in the v1 `cpu` hierarchy, or (v2) a directory whose cpu
/// controller is enabled (it has `cpu.weight`).
fn in_cpu_controller(h: &Hierarchy, path: &GroupPath) -> bool {
    let Ok(dir) = h.group_dir(Controller::Cpu, path) else {
        return false;
    };
    if h.is_v2(Controller::Cpu) {
        dir.join("cpu.weight").is_file()
    } else {
        dir.is_dir()
    }
}

/// Whether this process (the daemon, whose cpu group a command it starts
/// inherits) is in the root group of the cpu controller.
fn in_root_cpu_group(h: &Hierarchy) -> bool {
    h.group_of(std::process::id(), Controller::Cpu)
        .map_or(true, |g| g.is_root())
}

/// Cpu groups above an existing batch group (up to the root's children)
/// that are not idle: the batch group yields only among their children.
fn busy_ancestors(h: &Hierarchy, path: &GroupPath) -> Vec<String> {
    let mut out = Vec::new();
    let mut p = path.parent();
    while let Some(a) = p.filter(|a| !a.is_root()) {
        let idle = h
            .group_dir(Controller::Cpu, &a)
            .ok()
            .and_then(|d| std::fs::read_to_string(d.join("cpu.idle")).ok())
            .is_some_and(|t| t.trim() == "1");
        if !idle {
            out.push(a.as_str().to_string());
        }
        p = a.parent();
    }
    out
}

/// What every group's plan is made against.
struct GroupContext<'a> {
    config: &'a Config,
    h: &'a Hierarchy,
    host: &'a HostSituation,
    placement: &'a Placement,
    batch_cpus: &'a [u32],
}

fn group_plan(
    i: usize,
    b: &crate::config::BatchSection,
    ctx: &GroupContext<'_>,
    notes: &mut Vec<String>,
) -> Result<GroupPlan, ConfigError> {
    let (config, h, batch_cpus) = (ctx.config, ctx.h, ctx.batch_cpus);
    let f = |k: &str| format!("batch[{i}].{k}");
    let rungs = b.mode.rungs(config);
    let may_guard = rungs.contains(&Mode::Guard);
    let idle = match (b.mode, b.idle_method) {
        (Mode::Guard | Mode::Idle | Mode::Auto, IdleMethod::Auto) => {
            Some(if h.layout() == Layout::V2 {
                IdleMethod::CpuIdle
            } else {
                IdleMethod::SchedIdle
            })
        }
        (Mode::Guard | Mode::Idle | Mode::Auto, m) => Some(m),
        _ => None,
    };
    if b.mode == Mode::Auto && !h.supports(Controller::Freezer) {
        return Err(err(
            f("mode"),
            "auto steps the batch aside with the freezer to measure contention (its A/B), and \
             no freezer is offered here (cgroup v1 freezer or v2 cgroup.freeze)",
        ));
    }
    let mut controllers = Vec::new();
    if b.mode == Mode::Auto
        || rungs
            .iter()
            .any(|m| matches!(m, Mode::Freeze | Mode::Blind))
    {
        controllers.push(Controller::Freezer);
    }
    if b.confined() || may_guard || rungs.contains(&Mode::Blind) {
        controllers.push(Controller::Cpuset);
    }
    if idle == Some(IdleMethod::CpuIdle) {
        controllers.push(Controller::Cpu);
    }
    let mut named = None;
    let (path, source) = match (&b.cgroup, &b.command) {
        (Some(g), _) => (
            GroupPath::new(g).map_err(|e| err(f("cgroup"), e.to_string()))?,
            GroupSource::Existing,
        ),
        (None, Some(argv)) => (
            ctx.placement
                .command_group(&b.name)
                .map_err(|e| err(f("name"), e))?,
            GroupSource::Launch {
                program: resolve_program(&argv[0]).map_err(|r| err(f("command"), r))?,
                args: argv[1..].to_vec(),
            },
        ),
        (None, None) => {
            let (p, how) = placement::batch_group(i, b, ctx.config, h)?
                .expect("checked: one of cgroup, command or a host name");
            named = Some(how);
            (p, GroupSource::Existing)
        }
    };
    let existing = matches!(source, GroupSource::Existing);
    let owner = if existing {
        let files = elfen_cgroup::HostFiles::under(&ctx.config.host_root);
        let writes_cpuset = b.confined() || b.mode == Mode::Blind;
        placement::owned_group_checks(i, b, &path, ctx.host, &files, writes_cpuset, notes)?
    } else {
        Owner::Operator
    };
    let delegated = matches!(ctx.placement, Placement::Delegated { .. });
    if controllers.is_empty() {
        // membership only (threads to list, a place for a command)
        let c = membership(h, &path, &source, idle.is_some())
            .map_err(|r| err(if existing { f("cgroup") } else { f("command") }, r))?;
        controllers.push(c);
    }
    // An operator's group that is a cpu group holds its threads there
    // (its entity competes with the LC's): a yielding mode adopts it. A
    // command started outside the cpu controller stays in the daemon's
    // own cpu group: where that is not the root, it gets an idle one.
    let adopt = if existing {
        in_cpu_controller(h, &path)
    } else {
        h.supports(Controller::Cpu) && !in_root_cpu_group(h)
    };
    if idle.is_some() && adopt && !controllers.contains(&Controller::Cpu) {
        controllers.push(Controller::Cpu);
    }
    if !existing {
        placement::check_delegated_controllers(i, ctx.placement, h, &controllers)?;
    }
    let field = if existing { f("cgroup") } else { f("mode") };
    let mut cpu_idle_offered = true;
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
            GroupSource::Launch { .. } if dir.exists() && !left_by_predecessor(ctx, &path) => {
                return Err(err(field, format!("{} exists already", dir.display())));
            }
            _ => {}
        }
        if c == Controller::Cpu {
            cpu_idle_offered = if dir.is_dir() {
                dir.join("cpu.idle").exists()
            } else {
                child_offers(&root, "cpu.idle")
            };
            if idle == Some(IdleMethod::CpuIdle) && !cpu_idle_offered {
                return Err(err(
                    f("idle_method"),
                    "cpu.idle is not offered here (kernel < 5.15?): use sched_idle",
                ));
            }
        }
    }
    let cpu_yield = (idle.is_some() && controllers.contains(&Controller::Cpu)).then(|| {
        let mut groups = Vec::new();
        if let (false, false, Some(top)) = (existing, delegated, path.lineage().first()) {
            // the daemon's own top group competes with the LC's (delegated,
            // its group is the unit's: CPUWeight=idle there is systemd's)
            if *top != path {
                groups.push(top.clone());
            }
        }
        groups.push(path.clone());
        let knob = if cpu_idle_offered {
            Knob::CpuIdle(true)
        } else if h.is_v2(Controller::Cpu) {
            Knob::CpuWeight(1)
        } else {
            Knob::CpuShares(2)
        };
        CpuYield { groups, knob }
    });
    if let Some(y) = &cpu_yield {
        if !cpu_idle_offered {
            notes.push(format!(
                "batch {}: cpu.idle is not offered here (it came with Linux 5.15), so its cpu \
                 group yields as a whole only by weight: {}; a busy batch still gets a small \
                 share of a CPU the LC wants",
                b.name,
                y.describe()
            ));
        }
        if existing {
            let above = busy_ancestors(h, &path);
            if !above.is_empty() {
                notes.push(format!(
                    "batch {}: cpu group {} above {path} is not idle (cpu.idle = 0): the batch \
                     yields only among its children there, and competes with the LC at that \
                     group's weight; set cpu.idle = 1 on it, or move the batch",
                    b.name,
                    above.join(", ")
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
        cpu_yield,
        guard_cpus: may_guard.then(|| batch_cpus.to_vec()),
        rungs,
        named,
        owner,
        follows: b.follows(),
        iso: Default::default(),
    })
}

/// Whether the group of a command at `path` is one a killed predecessor
/// created (recorded in the state file, which the start recovers first).
fn left_by_predecessor(ctx: &GroupContext<'_>, path: &GroupPath) -> bool {
    StateRecord::load(&ctx.config.state_file)
        .ok()
        .flatten()
        .is_some_and(|r| r.created.iter().any(|c| &c.group == path))
}

/// Whether a group below `root` has `file` of the cpu controller (the root
/// group lacks some files its children have). Children with the controller
/// on (`cpu.weight` on v2, `cpu.shares` on v1) tell. Where none has it on —
/// no child, or a v2 root that has not turned the controller on for its
/// children (a systemd host whose units set no CPU property): the daemon
/// turns it on when it creates its group — the kernel's version does:
/// `cpu.idle` came with Linux 5.15.
fn child_offers(root: &Path, file: &str) -> bool {
    let Ok(rd) = std::fs::read_dir(root) else {
        return false;
    };
    let on: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && (p.join("cpu.weight").exists() || p.join("cpu.shares").exists()))
        .collect();
    if on.is_empty() {
        return kernel_at_least(5, 15);
    }
    on.iter().any(|d| d.join(file).exists())
}

/// Whether the running kernel's release is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = rel.trim().split(|c: char| !c.is_ascii_digit());
    let num = |s: Option<&str>| s.and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
    (num(it.next()), num(it.next())) >= (major, minor)
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
