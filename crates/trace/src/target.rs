//! What to trace: a process by pid or by name, the processes of a cgroup
//! (v1 or v2: its `cgroup.procs`, re-read during the trace so processes
//! that join are traced too), or a systemd unit (its control group).

use crate::error::TraceError;
use std::path::{Path, PathBuf};

/// How the user named the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// A process id.
    Pid(u32),
    /// A process name (`/proc/<pid>/comm`); exactly one process must match.
    Comm(String),
    /// A cgroup directory (v1 or v2).
    Cgroup(PathBuf),
    /// A systemd unit (`elfen-lucene.service`): its control group.
    Unit(String),
}

impl std::fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetSpec::Pid(p) => write!(f, "pid {p}"),
            TargetSpec::Comm(c) => write!(f, "comm {c}"),
            TargetSpec::Cgroup(p) => write!(f, "cgroup {}", p.display()),
            TargetSpec::Unit(u) => write!(f, "unit {u}"),
        }
    }
}

/// The processes traced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// How it was named.
    pub spec: TargetSpec,
    /// The processes now.
    pub tgids: Vec<u32>,
    /// The cgroup whose members are the target (cgroups and units).
    pub cgroup: Option<PathBuf>,
}

/// Whether `/proc/<pid>` names a live process (a thread group leader).
fn is_process(pid: u32) -> bool {
    elfen_bpf::proc::check_process(pid).is_ok()
}

/// The process's name.
pub fn comm_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The process's command line, spaces between the arguments (empty when
/// gone).
pub fn cmdline_of(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Every process whose `comm` is `name`.
pub fn pids_named(name: &str) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| comm_of(p).as_deref() == Some(name))
        .collect();
    out.sort_unstable();
    out
}

/// The control group of a systemd unit, from `systemctl show`: the first
/// of the v2, hybrid (`unified`) and v1 `systemd` hierarchies that holds
/// it.
pub fn unit_cgroup(unit: &str) -> Result<PathBuf, TraceError> {
    let out = std::process::Command::new("systemctl")
        .args(["show", "--property=ControlGroup", "--value", unit])
        .output()
        .map_err(|e| TraceError::Target(format!("unit {unit}: running systemctl: {e}")))?;
    let cg = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || cg.is_empty() {
        return Err(TraceError::Target(format!(
            "unit {unit}: systemd knows no control group for it (not loaded or not running){}",
            stderr_tail(&out.stderr)
        )));
    }
    let rel = cg.trim_start_matches('/');
    for root in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/systemd",
    ] {
        let dir = Path::new(root).join(rel);
        if dir.join("cgroup.procs").is_file() {
            return Ok(dir);
        }
    }
    Err(TraceError::Target(format!(
        "unit {unit}: its control group {cg} is in none of /sys/fs/cgroup, /sys/fs/cgroup/unified, /sys/fs/cgroup/systemd"
    )))
}

fn stderr_tail(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s = s.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!(" ({s})")
    }
}

impl Target {
    /// Finds the processes `spec` names. Fails on a pid that does not
    /// exist or names a thread, a name that matches no or several
    /// processes, or a cgroup without processes.
    pub fn resolve(spec: TargetSpec) -> Result<Target, TraceError> {
        match &spec {
            TargetSpec::Pid(pid) => {
                elfen_bpf::proc::check_process(*pid).map_err(|e| match e {
                    elfen_bpf::BpfError::NoSuchProcess { pid } => TraceError::NoSuchProcess { pid },
                    other => TraceError::Target(other.to_string()),
                })?;
                Ok(Target {
                    tgids: vec![*pid],
                    spec,
                    cgroup: None,
                })
            }
            TargetSpec::Comm(name) => {
                let me = std::process::id();
                let pids: Vec<u32> = pids_named(name).into_iter().filter(|&p| p != me).collect();
                match pids.as_slice() {
                    [] => Err(TraceError::Target(format!("no process is named '{name}'"))),
                    [one] => Ok(Target {
                        tgids: vec![*one],
                        spec,
                        cgroup: None,
                    }),
                    many => Err(TraceError::Target(format!(
                        "{} processes are named '{name}' ({}): name one with --pid",
                        many.len(),
                        many.iter()
                            .map(|p| format!("{p}: {}", cmdline_of(*p)))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ))),
                }
            }
            TargetSpec::Cgroup(dir) => Target::of_cgroup(spec.clone(), dir.clone()),
            TargetSpec::Unit(unit) => {
                let dir = unit_cgroup(unit)?;
                Target::of_cgroup(spec.clone(), dir)
            }
        }
    }

    fn of_cgroup(spec: TargetSpec, dir: PathBuf) -> Result<Target, TraceError> {
        if !dir.join("cgroup.procs").is_file() {
            return Err(TraceError::Target(format!(
                "{}: not a cgroup directory (no cgroup.procs)",
                dir.display()
            )));
        }
        let tgids = cgroup_members(&dir);
        if tgids.is_empty() {
            return Err(TraceError::Target(format!(
                "{}: the cgroup holds no process",
                dir.display()
            )));
        }
        Ok(Target {
            spec,
            tgids,
            cgroup: Some(dir),
        })
    }

    /// Processes of the target's cgroup now that it did not have before
    /// (they are added to `tgids`); none for a pid or a name.
    pub fn refresh(&mut self) -> Vec<u32> {
        let Some(dir) = &self.cgroup else {
            return Vec::new();
        };
        let new: Vec<u32> = cgroup_members(dir)
            .into_iter()
            .filter(|p| !self.tgids.contains(p))
            .collect();
        self.tgids.extend(&new);
        new
    }

    /// Whether any traced process is still alive.
    pub fn alive(&self) -> bool {
        self.tgids.iter().any(|&p| is_process(p))
    }
}

/// The thread group leaders in a cgroup directory (`cgroup.procs`).
fn cgroup_members(dir: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = elfen_bpf::proc::cgroup_procs(dir)
        .into_iter()
        .filter(|&p| is_process(p))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_resolve_and_bad_ones_are_named() {
        let me = std::process::id();
        let t = Target::resolve(TargetSpec::Pid(me)).unwrap();
        assert_eq!(t.tgids, vec![me]);
        assert!(t.alive());
        let e = Target::resolve(TargetSpec::Pid(0x3fff_fff0)).unwrap_err();
        assert!(e.to_string().contains("no process 1073741808"), "{e}");
        let e = Target::resolve(TargetSpec::Comm("no-such-elfen-process".into())).unwrap_err();
        assert!(e.to_string().contains("no process is named"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = Target::resolve(TargetSpec::Cgroup(dir.path().into())).unwrap_err();
        assert!(e.to_string().contains("not a cgroup directory"), "{e}");
        // a fake cgroup directory with this process in it
        std::fs::write(dir.path().join("cgroup.procs"), format!("{me}\n")).unwrap();
        let mut t = Target::resolve(TargetSpec::Cgroup(dir.path().into())).unwrap();
        assert_eq!(t.tgids, vec![me]);
        assert!(t.refresh().is_empty());
        assert!(cmdline_of(me).contains("elfen_trace"), "{}", cmdline_of(me));
    }

    #[test]
    fn an_unknown_unit_is_named() {
        let e = Target::resolve(TargetSpec::Unit("elfen-no-such-unit.service".into())).unwrap_err();
        assert!(
            e.to_string().contains("unit elfen-no-such-unit.service"),
            "{e}"
        );
    }

    #[test]
    fn a_child_is_found_by_name() {
        // a copy of sleep under a name no other process has
        let dir = tempfile::tempdir().unwrap();
        let name = format!("elfen-t{}", std::process::id() % 100_000);
        let exe = dir.path().join(&name);
        std::fs::copy("/bin/sleep", &exe).unwrap();
        let mut child = std::process::Command::new(&exe).arg("30").spawn().unwrap();
        let pid = child.id();
        let t = std::time::Instant::now();
        while comm_of(pid).as_deref() != Some(name.as_str()) {
            assert!(t.elapsed().as_secs() < 10, "the child never got its name");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let got = Target::resolve(TargetSpec::Comm(name.clone()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(got.unwrap().tgids, vec![pid]);
    }
}
