//! **Validation against the machine**: [`Plan::resolve`] turns a checked
//! [`Config`] into a [`Plan`] — lanes, the LC target, each batch group's
//! cgroup, controllers and knobs — or refuses it with the field and the
//! reason. It only reads (`/proc`, sysfs, the cgroup tree, the page and
//! state files): nothing is applied until every check has passed.
//!
//! The parts: `lc` (the LC service and whose processes it adopts), `page`
//! (the signal page and who may attach), `state_file` (the executor's
//! state file), `group` (each batch group's plan) and `cpu_yield` (how a
//! group in the cpu controller yields as a whole).

mod cpu_yield;
mod group;
mod lc;
mod page;
mod scx;
mod state_file;

use group::{GroupContext, group_plan};
use lc::lc_target;
use page::{check_page, page_access_notes};
use state_file::check_state_file;

pub use cpu_yield::CpuYield;

use crate::config::{Config, FreezerChoice, IdleMethod, Mode};
use crate::error::ConfigError;
use crate::lc::{LcOwner, LcTarget};
use crate::placement::{self, Placement};
use elfen_cgroup::{
    Controller, FreezerBackend, GroupPath, Hierarchy, HostSituation, Layout, Owner,
};
use elfen_policy::PolicyConfig;
use elfen_runtime::NapChoice;
use elfen_shm::{PageSpec, nap};
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
    /// Whether a core of this machine runs more than one lane (SMT
    /// siblings): the pairs are then siblings.
    pub smt: bool,
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
        let scx_unavailable = config
            .batch
            .iter()
            .any(|b| b.mode == Mode::Scx)
            .then(|| scx::unavailable_at(Path::new(elfen_scx::kernel::SYSFS_DIR)))
            .flatten();
        for (i, b) in config.batch.iter().enumerate() {
            let here = scx::mode_here(i, b, config, scx_unavailable.clone(), &mut notes)?;
            let b = here.as_ref().unwrap_or(b);
            let mut g = group_plan(i, b, &ctx, &mut notes)?;
            scx::check_group(i, &g, &lc, &hierarchy)?;
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
            smt: topo.has_smt(),
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
