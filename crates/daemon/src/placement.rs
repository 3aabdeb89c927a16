//! **Where the daemon's groups live, and which groups it may touch how** —
//! part of [`crate::plan`]: the host's names for the LC and the batch
//! groups resolved ([`elfen_cgroup::HostNames`]), the daemon's own groups
//! placed where the host allows ([`Placement`]), and the groups systemd or
//! the kubelet owns given only the knobs documented for them
//! ([`owned_group_checks`]).
//!
//! - **No manager** (systemd is not PID 1, or the hierarchy is v1 or
//!   hybrid): the daemon's groups are `elfen-daemon-<pid>/<name>` at the
//!   root of each hierarchy, as on a development host.
//! - **systemd on cgroup v2**: the daemon creates groups only below its own
//!   group, and only if systemd delegated it (`Delegate=yes` on its unit):
//!   it moves itself into the leaf `<its group>/daemon` (a group that hands
//!   resources to children holds no process itself) and starts each
//!   command in `<its group>/batch-<name>`, turning controllers on only in
//!   its own group's `cgroup.subtree_control`. Not delegated, a command is
//!   refused, naming the unit to change — unless `undelegated = "root"`
//!   asks for the root of each hierarchy (said). Its own group's resource files
//!   stay systemd's: the unit's `CPUWeight=idle` (the packaged unit sets
//!   it) is what makes its batch yield as a whole.

use crate::config::{BatchSection, Config, Mode, Undelegated};
use crate::error::ConfigError;
use crate::lc::LcTarget;
use crate::subtree::GroupTarget;
use elfen_cgroup::{
    Controller, Delegation, GroupPath, Hierarchy, HostFiles, HostNames, HostSituation, Owner,
    SelectError,
};

fn err(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(field, reason)
}

/// Where the daemon creates the groups of the commands it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// `elfen-daemon-<pid>/<name>` at the root of each hierarchy.
    Root,
    /// Below the daemon's own group, delegated to it.
    Delegated {
        /// Its group (the unit's, or a scope's).
        base: GroupPath,
        /// Its unit, if the group is named like one.
        unit: Option<String>,
    },
}

impl Placement {
    /// The group of the command of batch group `name`.
    pub fn command_group(&self, name: &str) -> Result<GroupPath, String> {
        match self {
            Placement::Root => {
                GroupPath::new(&format!("elfen-daemon-{}/{name}", std::process::id()))
            }
            Placement::Delegated { base, .. } => base.join(&format!("batch-{name}")),
        }
        .map_err(|e| e.to_string())
    }

    /// The leaf the daemon moves itself into (delegated placement).
    pub fn daemon_leaf(&self) -> Option<GroupPath> {
        match self {
            Placement::Root => None,
            Placement::Delegated { base, .. } => base.join("daemon").ok(),
        }
    }

    /// The group the executor must not write above (delegated placement).
    pub fn boundary(&self) -> Option<GroupPath> {
        match self {
            Placement::Root => None,
            Placement::Delegated { base, .. } => Some(base.clone()),
        }
    }

    /// One line for `--check` and the start.
    pub fn describe(&self) -> String {
        match self {
            Placement::Root => format!(
                "commands' groups: elfen-daemon-{}/<name> at the root of each hierarchy",
                std::process::id()
            ),
            Placement::Delegated { base, unit } => format!(
                "commands' groups: {base}/batch-<name>, the daemon itself in {base}/daemon \
                 (delegated to it{})",
                unit.as_ref().map_or(String::new(), |u| format!(" by {u}"))
            ),
        }
    }

    /// Decides the placement of `config`'s commands on `host`: below the
    /// daemon's own group where it is delegated, at the root of each
    /// hierarchy where no manager owns it; where systemd manages it and the
    /// daemon's group is not delegated, commands are refused naming the
    /// unit to change, unless `undelegated = "root"` (then said by
    /// [`undelegated_note`]).
    pub fn decide(config: &Config, host: &HostSituation) -> Result<Placement, ConfigError> {
        match &host.delegation {
            Delegation::NoManager => Ok(Placement::Root),
            Delegation::Delegated { unit, .. } => {
                let own = host.own_group.clone().unwrap_or_else(GroupPath::root);
                // a second start in one process: it is in its leaf already
                let base = if own.name() == "daemon" {
                    own.parent().unwrap_or(own)
                } else {
                    own
                };
                Ok(Placement::Delegated {
                    base,
                    unit: unit.clone(),
                })
            }
            Delegation::NotDelegated { unit, why } => {
                let Some(i) = first_command(config) else {
                    // nothing to create: named groups need no delegation
                    return Ok(Placement::Root);
                };
                match config.undelegated {
                    Undelegated::Root => Ok(Placement::Root),
                    Undelegated::Refuse => Err(err(
                        format!("batch[{i}].command"),
                        format!(
                            "systemd manages this host's cgroups and the daemon's group {} is \
                             not delegated to it ({why}), so it may not create the command's \
                             group; {}; or run the batch work as a unit of its own and name it \
                             (slice = \"batch.slice\", unit = …); or set undelegated = \"root\" \
                             to make the group at the root of the hierarchy, beside systemd's",
                            own_group_name(host),
                            delegation_fix(unit.as_deref())
                        ),
                    )),
                }
            }
        }
    }
}

/// The index of the first `[[batch]]` group with a `command` (whose group
/// the daemon creates), if any.
fn first_command(config: &Config) -> Option<usize> {
    config.batch.iter().position(|b| b.command.is_some())
}

/// The daemon's own group, for messages.
fn own_group_name(host: &HostSituation) -> String {
    host.own_group
        .as_ref()
        .map_or("unknown".into(), |g| g.to_string())
}

/// How to delegate the daemon's group: its unit `unit` changed, or the
/// packaged unit.
fn delegation_fix(unit: Option<&str>) -> String {
    match unit {
        Some(u) => format!(
            "set Delegate=yes on {u} (systemctl edit {u}: [Service] Delegate=yes), or run the \
             daemon as the packaged elfen-daemon.service"
        ),
        None => "run the daemon as the packaged elfen-daemon.service (Delegate=yes)".into(),
    }
}

/// The warning for groups of commands made at the root of a tree systemd
/// manages (`undelegated = "root"`), where the daemon's own group is not
/// delegated to it (naming the unit to change); `None` where there is
/// nothing to say.
pub fn undelegated_note(config: &Config, host: &HostSituation) -> Option<String> {
    let Delegation::NotDelegated { unit, why } = &host.delegation else {
        return None;
    };
    if config.undelegated != Undelegated::Root {
        return None;
    }
    let i = first_command(config)?;
    Some(format!(
        "WARNING batch[{i}].command: systemd manages this host's cgroups and the daemon's group \
         {} is not delegated to it ({why}): the groups of commands are made at the root of \
         the hierarchy, beside systemd's, as undelegated = \"root\" asks (systemd does not \
         manage them, but a unit's settings may change the root's controllers under them); \
         {} to have them below the daemon's own group; or run the batch work as a unit of its \
         own and name it (slice = \"batch.slice\", unit = …)",
        own_group_name(host),
        delegation_fix(unit.as_deref())
    ))
}

/// The resolver of the host's names for `config` on `h` (systemctl asked
/// where systemd runs, for `--check` and the start).
/// systemctl's answers are paths of the host's own tree: it is not asked
/// about another root (a copy, a test's tree).
pub fn host_names(config: &Config, h: &Hierarchy, systemctl: bool) -> HostNames {
    let own_tree = config.cgroup_root == std::path::Path::new(elfen_cgroup::DEFAULT_ROOT);
    HostNames::new(h, HostFiles::under(&config.host_root)).with_systemctl(systemctl && own_tree)
}

/// `[lc]` by a host name: the groups it names now (a stopped unit, a QoS
/// class without pods: waited for, said in the notes); `None` for `pid`
/// and `comm`.
pub fn lc_groups(
    config: &Config,
    h: &Hierarchy,
    notes: &mut Vec<String>,
) -> Result<Option<LcTarget>, ConfigError> {
    let Some((selector, key)) = config.lc.selector()? else {
        return Ok(None);
    };
    let field = format!("lc.{key}");
    let names = host_names(config, h, true);
    match names.resolve(&selector) {
        Ok(found) if found.is_empty() => notes.push(format!(
            "LC {selector}: no group of it exists now; the daemon waits for one"
        )),
        Ok(found) => {
            for r in &found {
                let at = match &selector {
                    elfen_cgroup::Selector::Dir(_) => String::new(),
                    _ => format!(" is {} (found by {})", r.dir().display(), r.found_by),
                };
                notes.push(format!(
                    "LC {selector}{at}{}",
                    if r.v2 {
                        ": watched by id in the kernel with every group below"
                    } else {
                        ": cgroup v1, its processes and those of the groups below are watched by \
                         pid (re-read every liveness_ms)"
                    }
                ));
            }
        }
        Err(SelectError::NotRunning { detail, .. }) => notes.push(format!(
            "LC {selector} is not running ({detail}); the daemon waits for it"
        )),
        Err(e @ SelectError::Invalid { .. }) => return Err(err(field, e.to_string())),
        Err(e) => {
            return Err(err(field, format!("{e}; nothing applied")));
        }
    }
    Ok(Some(LcTarget::Groups(GroupTarget {
        selector,
        names: names.with_systemctl(false),
    })))
}

/// `[[batch]]` by a host name: its one group; `None` for `cgroup` and
/// `command`.
pub fn batch_group(
    i: usize,
    b: &BatchSection,
    config: &Config,
    h: &Hierarchy,
) -> Result<Option<(GroupPath, String)>, ConfigError> {
    let Some((selector, key)) = b.selector(&format!("batch[{i}]"))? else {
        return Ok(None);
    };
    let field = format!("batch[{i}].{key}");
    let names = host_names(config, h, true);
    let found = names.resolve(&selector).map_err(|e| {
        err(
            &field,
            match e {
                SelectError::NotRunning { .. } => {
                    format!("{e}: a batch group must exist when the daemon starts; nothing applied")
                }
                e => format!("{e}; nothing applied"),
            },
        )
    })?;
    match found.as_slice() {
        [one] => Ok(Some((
            one.path.clone(),
            format!("{selector} (found by {})", one.found_by),
        ))),
        [] => Err(err(field, format!("{selector}: no group of it exists now"))),
        many => Err(err(
            field,
            format!(
                "{selector} names {} groups ({}): a batch group is one group",
                many.len(),
                many.iter()
                    .map(|r| r.path.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// What the daemon may write on an existing batch group that systemd or
/// the kubelet owns (docs/daemon.md, "Whose groups"): never a process moved,
/// never a group created or removed in it; its `cpu.idle`, `cgroup.freeze`
/// (or v1 `freezer.state`) and `cpuset.cpus` — the last one not where the
/// kubelet's CPU manager assigns CPUs to pods (policy `static`). What the
/// owner may write over is said in the notes.
pub fn owned_group_checks(
    i: usize,
    b: &BatchSection,
    path: &GroupPath,
    host: &HostSituation,
    files: &HostFiles,
    writes_cpuset: bool,
    notes: &mut Vec<String>,
) -> Result<Owner, ConfigError> {
    let owner = Owner::of(path, host.systemd);
    match &owner {
        Owner::Operator => {}
        Owner::Kubelet => {
            if let Some((policy, file)) = files.cpu_manager_policy() {
                if policy == "static" && writes_cpuset {
                    let (field, what) = if b.mode == Mode::Blind {
                        ("mode", "blind isolation drives the group's cpuset")
                    } else {
                        ("confine", "confinement writes the group's cpuset")
                    };
                    return Err(err(
                        format!("batch[{i}].{field}"),
                        format!(
                            "{path} is the kubelet's and its CPU manager runs the static policy \
                             ({}): it assigns pods their CPUs through their cpusets, and {what}; \
                             the daemon leaves those alone — use mode idle or freeze with \
                             confine = false, or keep the pods off the request lanes through the \
                             kubelet (reservedSystemCPUs)",
                            file.display()
                        ),
                    ));
                }
            }
            notes.push(format!(
                "batch {}: {path} is the kubelet's: the daemon writes only its cpu.idle, freezer \
                 and{} cpuset there, never moves its processes; the kubelet rewrites cpu.weight and \
                 cpu.max, not those",
                b.name,
                if writes_cpuset { "" } else { " (not here)" }
            ));
        }
        Owner::Systemd { unit } => {
            notes.push(format!(
                "batch {}: {path} is systemd's ({unit}): the daemon writes only its cpu.idle, \
                 freezer and cpuset there and never moves its processes; systemd writes cpu.idle \
                 back from CPUWeight= and cpuset.cpus from AllowedCPUs= when it applies {unit}'s \
                 properties (daemon-reload, set-property){} — set CPUWeight=idle{} on {unit} to make \
                 them its own",
                b.name,
                if writes_cpuset { "" } else { " (no cpuset written here)" },
                if writes_cpuset {
                    " and AllowedCPUs= to the batch lanes"
                } else {
                    ""
                }
            ));
        }
    }
    Ok(owner)
}

/// Under delegation, every controller a command's group needs must be
/// delegated to the daemon's group (listed in its `cgroup.controllers`).
pub fn check_delegated_controllers(
    i: usize,
    placement: &Placement,
    h: &Hierarchy,
    controllers: &[Controller],
) -> Result<(), ConfigError> {
    let Placement::Delegated { base, unit } = placement else {
        return Ok(());
    };
    let Some(tree) = h.unified() else {
        return Ok(());
    };
    let file = tree.join(base.as_str()).join("cgroup.controllers");
    let have = std::fs::read_to_string(&file).unwrap_or_default();
    let missing: Vec<&str> = controllers
        .iter()
        .filter_map(|c| c.v2_name())
        .filter(|n| !have.split_whitespace().any(|w| w == *n))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(err(
        format!("batch[{i}].mode"),
        format!(
            "the {} controller{} not delegated to the daemon's group {base} ({}: {:?}); set \
             Delegate=yes on {}",
            missing.join(", "),
            if missing.len() > 1 { "s are" } else { " is" },
            file.display(),
            have.trim(),
            unit.as_deref().unwrap_or("its unit")
        ),
    ))
}

/// Under delegation: whether the daemon's own group yields as a whole
/// (`cpu.idle` = 1, the unit's `CPUWeight=idle`); a note if not, since its
/// batch groups then yield only among its children.
pub fn delegated_yield_note(placement: &Placement, h: &Hierarchy) -> Option<String> {
    let Placement::Delegated { base, unit } = placement else {
        return None;
    };
    let tree = h.unified()?;
    let idle = std::fs::read_to_string(tree.join(base.as_str()).join("cpu.idle"))
        .is_ok_and(|t| t.trim() == "1");
    (!idle).then(|| {
        format!(
            "the daemon's group {base} is not idle (cpu.idle is not 1): the groups of its \
             commands yield to the LC only among its children, and {base} competes with the LC \
             at its weight; set CPUWeight=idle on {} (the packaged unit does)",
            unit.as_deref().unwrap_or("its unit")
        )
    })
}
