//! Each batch group's plan: its yield, controllers, path and source,
//! checked against the cgroup tree.

use super::cpu_yield::{
    child_offers, cpu_yield, cpu_yield_notes, in_cpu_controller, in_root_cpu_group, membership,
};
use super::{GroupPlan, GroupSource, err};
use crate::config::{Config, IdleMethod, Mode};
use crate::error::ConfigError;
use crate::placement::{self, Placement};
use elfen_cgroup::{Controller, GroupPath, Hierarchy, HostSituation, Layout, Owner, StateRecord};
use std::path::{Path, PathBuf};

/// What every group's plan is made against.
pub(super) struct GroupContext<'a> {
    pub(super) config: &'a Config,
    pub(super) h: &'a Hierarchy,
    pub(super) host: &'a HostSituation,
    pub(super) placement: &'a Placement,
    pub(super) batch_cpus: &'a [u32],
}

pub(super) fn group_plan(
    i: usize,
    b: &crate::config::BatchSection,
    ctx: &GroupContext<'_>,
    notes: &mut Vec<String>,
) -> Result<GroupPlan, ConfigError> {
    let (config, h, batch_cpus) = (ctx.config, ctx.h, ctx.batch_cpus);
    let f = |k: &str| format!("batch[{i}].{k}");
    let rungs = b.mode.rungs(config);
    let may_guard = rungs.contains(&Mode::Guard);
    let idle = idle_method(b, h);
    if b.mode == Mode::Auto && !h.supports(Controller::Freezer) {
        return Err(err(
            f("mode"),
            "auto steps the batch aside with the freezer to measure contention (its A/B), and \
             no freezer is offered here (cgroup v1 freezer or v2 cgroup.freeze)",
        ));
    }
    let mut controllers = mode_controllers(b, &rungs, may_guard, idle);
    let (path, source, named) = group_source(i, b, ctx, &f)?;
    let existing = matches!(source, GroupSource::Existing);
    let mut confined = b.confined();
    if existing && idle_unconfinable(b, h, &path) {
        // its manager keeps the cpuset off: idle's default confinement
        // cannot be had, and saying so beats refusing to protect at all
        confined = false;
        controllers.retain(|&c| c != Controller::Cpuset);
        notes.push(format!(
            "batch {}: mode idle confines a group to the batch lanes by default, but {path} has no \
             cpuset (the controller is off in its parent's cgroup.subtree_control, its manager's \
             file): it runs on every CPU, the request lanes included, where a memory-streaming \
             batch raised an LC's p99 x1.4-23 in our measurements (x0.9-1.1 confined). To confine \
             it, have its manager turn cpuset on for it (systemd: AllowedCPUs= on the slice); \
             confine = false says it is meant",
            b.name
        ));
    }
    let owner = if existing {
        let files = elfen_cgroup::HostFiles::under(&ctx.config.host_root);
        let writes_cpuset = confined || b.mode == Mode::Blind;
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
    let cpu_idle_offered = check_group_dirs(ctx, &f, &path, &source, &controllers, idle)
        .map_err(|e| idle_confinement_hint(b, e))?;
    let cpu_yield = (idle.is_some() && controllers.contains(&Controller::Cpu))
        .then(|| cpu_yield(h, &path, existing, delegated, cpu_idle_offered));
    if let Some(y) = &cpu_yield {
        cpu_yield_notes(b, h, y, &path, existing, cpu_idle_offered, notes);
    }
    Ok(GroupPlan {
        name: b.name.clone(),
        mode: b.mode,
        path,
        source,
        controllers,
        confine: confined.then(|| batch_cpus.to_vec()),
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

/// Whether `b` is an idle group confined by default (not by the config)
/// whose existing v2 group has no cpuset files: its parent's manager keeps
/// the controller off, so the daemon cannot confine it.
fn idle_unconfinable(b: &crate::config::BatchSection, h: &Hierarchy, path: &GroupPath) -> bool {
    b.mode == Mode::Idle
        && b.confine.is_none()
        && h.is_v2(Controller::Cpuset)
        && h.group_dir(Controller::Cpuset, path)
            .is_ok_and(|d| d.is_dir() && !d.join("cpuset.cpus").exists())
}

/// An existing group missing from the cpuset hierarchy that mode idle
/// confines by default: says why the cpuset is needed and how not to.
fn idle_confinement_hint(b: &crate::config::BatchSection, e: ConfigError) -> ConfigError {
    if b.mode == Mode::Idle && b.confine.is_none() && e.reason.contains("/cpuset/") {
        ConfigError::new(
            e.field.clone(),
            format!(
                "{}: mode idle confines the group to the batch lanes by default (its cpuset): \
                 create it in the cpuset hierarchy too, or set confine = false to let it run on \
                 the request lanes (said at start)",
                e.reason
            ),
        )
    } else {
        e
    }
}

/// How a group in a yielding mode (guard, idle, auto) yields: its
/// `idle_method`, `auto` resolved by the layout; `cpu.idle` in mode scx;
/// `None` in other modes.
fn idle_method(b: &crate::config::BatchSection, h: &Hierarchy) -> Option<IdleMethod> {
    match (b.mode, b.idle_method) {
        // the scheduler owns the threads' policy: the group yields as a whole
        (Mode::Scx, _) => Some(IdleMethod::CpuIdle),
        (Mode::Guard | Mode::Idle | Mode::Auto, IdleMethod::Auto) => {
            Some(if h.layout() == Layout::V2 {
                IdleMethod::CpuIdle
            } else {
                IdleMethod::SchedIdle
            })
        }
        (Mode::Guard | Mode::Idle | Mode::Auto, m) => Some(m),
        _ => None,
    }
}

/// The controllers the group's modes write: the freezer (auto, freeze,
/// blind), the cpuset (confined, guard, blind), cpu (`cpu.idle`).
fn mode_controllers(
    b: &crate::config::BatchSection,
    rungs: &[Mode],
    may_guard: bool,
    idle: Option<IdleMethod>,
) -> Vec<Controller> {
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
    controllers
}

/// The group's path and where its processes come from: an operator's
/// cgroup, a command in a group the daemon creates, or a group the host
/// names (with how it was found).
fn group_source(
    i: usize,
    b: &crate::config::BatchSection,
    ctx: &GroupContext<'_>,
    f: &impl Fn(&str) -> String,
) -> Result<(GroupPath, GroupSource, Option<String>), ConfigError> {
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
            let (p, how) = placement::batch_group(i, b, ctx.config, ctx.h)?
                .expect("checked: one of cgroup, command or a host name");
            named = Some(how);
            (p, GroupSource::Existing)
        }
    };
    Ok((path, source, named))
}

/// Each controller's group directory checked: an existing group's is
/// there, a command's is not (unless a killed predecessor left it), and
/// `cpu.idle` is offered where the group yields by it. Returns whether
/// `cpu.idle` is offered.
fn check_group_dirs(
    ctx: &GroupContext<'_>,
    f: &impl Fn(&str) -> String,
    path: &GroupPath,
    source: &GroupSource,
    controllers: &[Controller],
    idle: Option<IdleMethod>,
) -> Result<bool, ConfigError> {
    let h = ctx.h;
    let existing = matches!(source, GroupSource::Existing);
    let field = if existing { f("cgroup") } else { f("mode") };
    let mut cpu_idle_offered = true;
    for &c in controllers {
        let root = h
            .controller_root(c)
            .map_err(|e| err(field.clone(), e.to_string()))?;
        let dir = h
            .group_dir(c, path)
            .map_err(|e| err(field.clone(), e.to_string()))?;
        match source {
            GroupSource::Existing if !dir.is_dir() => {
                return Err(err(
                    field,
                    format!("no such group: {} does not exist", dir.display()),
                ));
            }
            GroupSource::Launch { .. } if dir.exists() && !left_by_predecessor(ctx, path) => {
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
    Ok(cpu_idle_offered)
}

/// Whether the group of a command at `path` is one a killed predecessor
/// created (recorded in the state file, which the start recovers first).
fn left_by_predecessor(ctx: &GroupContext<'_>, path: &GroupPath) -> bool {
    StateRecord::load(&ctx.config.state_file)
        .ok()
        .flatten()
        .is_some_and(|r| r.created.iter().any(|c| &c.group == path))
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
