//! A small **cgroup executor**: the only code that writes cgroup files.
//!
//! The `cpuset` and `cfs_quota` configurations need two knobs: a cpuset
//! (`cpuset.cpus`) and a CFS bandwidth quota (v1 `cpu.cfs_quota_us` /
//! `cpu.cfs_period_us`, v2 `cpu.max`). Strategies (the sweep) decide the
//! values; this executor creates `elfen-*` cgroups under a configurable
//! root, writes only values that differ from what the file holds
//! (koordinator's habit), moves a process in, and removes the cgroups again
//! — on drop, so also on error and Ctrl-C. Tests point the root at a
//! temporary directory and assert file contents.
//!
//! Layouts:
//!
//! - **v1** (also the hybrid v1 + `unified` layout of the development VMs,
//!   whose v2 tree has no controllers): `<root>/cpuset/<name>/` and
//!   `<root>/cpu/<name>/`; a v1 cpuset needs `cpuset.mems` (copied from the
//!   parent) before a task may join.
//! - **v2**: `<root>/<name>/`, with `+cpu +cpuset` enabled in the root's
//!   `cgroup.subtree_control`.

use crate::config::{CgroupSpec, CgroupVersion};
use crate::error::{BenchError, Result};
use std::path::{Path, PathBuf};

/// The prefix of every cgroup the harness creates.
pub const PREFIX: &str = "elfen-bench-";

/// A cgroup controller the harness uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    /// `cpuset`.
    Cpuset,
    /// `cpu` (CFS bandwidth).
    Cpu,
}

impl Controller {
    fn name(self) -> &'static str {
        match self {
            Controller::Cpuset => "cpuset",
            Controller::Cpu => "cpu",
        }
    }
}

/// Resolved cgroup version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Per-controller hierarchies.
    V1,
    /// The unified hierarchy.
    V2,
}

/// The executor: a root and a version.
#[derive(Debug, Clone)]
pub struct CgroupFs {
    root: PathBuf,
    version: Version,
}

fn cg_err(path: &Path, what: &str, source: std::io::Error) -> BenchError {
    BenchError::Cgroup {
        path: path.display().to_string(),
        what: what.to_string(),
        source,
    }
}

impl CgroupFs {
    /// An executor for `spec` (with `auto`: v2 if the root's
    /// `cgroup.controllers` lists both `cpu` and `cpuset`, else v1).
    pub fn new(spec: &CgroupSpec) -> CgroupFs {
        let version = match spec.version {
            CgroupVersion::V1 => Version::V1,
            CgroupVersion::V2 => Version::V2,
            CgroupVersion::Auto => {
                let ctl = std::fs::read_to_string(spec.root.join("cgroup.controllers"))
                    .unwrap_or_default();
                let has = |c: &str| ctl.split_whitespace().any(|w| w == c);
                if has("cpu") && has("cpuset") {
                    Version::V2
                } else {
                    Version::V1
                }
            }
        };
        CgroupFs {
            root: spec.root.clone(),
            version,
        }
    }

    /// The version driven.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The directory of cgroup `name` for `ctl`.
    pub fn dir(&self, name: &str, ctl: Controller) -> PathBuf {
        match self.version {
            Version::V1 => self.root.join(ctl.name()).join(name),
            Version::V2 => self.root.join(name),
        }
    }

    /// Creates cgroup `name` (which must start with [`PREFIX`]) for `ctl`.
    /// An existing directory of that name is reused.
    pub fn create(&self, name: &str, ctl: Controller) -> Result<Cgroup> {
        assert!(name.starts_with(PREFIX), "harness cgroups are {PREFIX}*");
        if self.version == Version::V1 && !self.root.join(ctl.name()).is_dir() {
            return Err(cg_err(
                &self.root.join(ctl.name()),
                "no v1 controller hierarchy here (set cgroup.root / cgroup.version)",
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        if self.version == Version::V2 {
            let sc = self.root.join("cgroup.subtree_control");
            let cur = std::fs::read_to_string(&sc).unwrap_or_default();
            let want = ctl.name();
            if !cur.split_whitespace().any(|w| w == want) {
                write_file(&sc, &format!("+{want}"))?;
            }
        }
        let dir = self.dir(name, ctl);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(cg_err(&dir, "creating", e)),
        }
        Ok(Cgroup {
            dir,
            parent: self.dir("", ctl),
            version: self.version,
            controller: ctl,
            removed: false,
        })
    }

    /// Removes leftover harness cgroups of processes that no longer run
    /// (named `elfen-bench-<pid>-…`); returns the ones removed.
    pub fn remove_stale(&self) -> Vec<PathBuf> {
        let parents: Vec<PathBuf> = match self.version {
            Version::V1 => vec![self.root.join("cpuset"), self.root.join("cpu")],
            Version::V2 => vec![self.root.clone()],
        };
        let mut removed = Vec::new();
        for p in parents {
            let Ok(rd) = std::fs::read_dir(&p) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let Some(rest) = name.strip_prefix(PREFIX) else {
                    continue;
                };
                let pid: Option<i32> = rest.split('-').next().and_then(|s| s.parse().ok());
                if let Some(pid) = pid {
                    if !pid_alive(pid) && std::fs::remove_dir(e.path()).is_ok() {
                        removed.push(e.path());
                    }
                }
            }
        }
        removed
    }
}

/// Whether process `pid` exists.
pub fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Writes `value` to `path` unless the file already holds it.
pub fn write_file(path: &Path, value: &str) -> Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|cur| cur.trim() == value.trim()) {
        return Ok(());
    }
    std::fs::write(path, value).map_err(|e| cg_err(path, &format!("writing {value:?}"), e))
}

/// One harness cgroup; removed on drop.
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    parent: PathBuf,
    version: Version,
    controller: Controller,
    removed: bool,
}

impl Cgroup {
    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Confines the cgroup to `cpus` (cpuset cgroups).
    pub fn set_cpus(&self, cpus: &[u32]) -> Result<()> {
        assert_eq!(self.controller, Controller::Cpuset);
        let list = elfen_topo::format_cpu_list(cpus);
        if self.version == Version::V1 {
            // A v1 cpuset takes no task until mems is set; use the parent's.
            let mems = std::fs::read_to_string(self.parent.join("cpuset.mems"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            let mems = if mems.is_empty() {
                "0".to_string()
            } else {
                mems
            };
            write_file(&self.dir.join("cpuset.mems"), &mems)?;
        }
        write_file(&self.dir.join("cpuset.cpus"), &list)
    }

    /// Caps the cgroup at `quota_us` of CPU time per `period_us` (cpu
    /// cgroups). `quota = lanes × period`: 0.5 lanes is half a CPU.
    pub fn set_quota(&self, quota_us: u64, period_us: u64) -> Result<()> {
        assert_eq!(self.controller, Controller::Cpu);
        match self.version {
            Version::V1 => {
                // Period first: the kernel checks the quota against it.
                write_file(&self.dir.join("cpu.cfs_period_us"), &period_us.to_string())?;
                write_file(&self.dir.join("cpu.cfs_quota_us"), &quota_us.to_string())
            }
            Version::V2 => write_file(
                &self.dir.join("cpu.max"),
                &format!("{quota_us} {period_us}"),
            ),
        }
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    pub fn add_process(&self, pid: u32) -> Result<()> {
        let f = self.dir.join("cgroup.procs");
        std::fs::write(&f, pid.to_string())
            .map_err(|e| cg_err(&f, &format!("moving process {pid} in"), e))
    }

    /// Removes the cgroup (its processes must have exited); retries for a
    /// moment while the kernel finishes tearing a killed process down.
    pub fn remove(mut self) -> Result<()> {
        self.removed = true;
        remove_dir_retrying(&self.dir)
    }
}

fn remove_dir_retrying(dir: &Path) -> Result<()> {
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // A real cgroup directory holds only kernel files, which rmdir
            // ignores; a test's temp directory holds ordinary files.
            Err(_) if !is_cgroupfs(dir) && std::fs::remove_dir_all(dir).is_ok() => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(cg_err(
        dir,
        "removing",
        last.unwrap_or_else(|| std::io::Error::other("busy")),
    ))
}

fn is_cgroupfs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the struct we pass; the path is NUL-terminated.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return false;
    }
    const CGROUP_SUPER_MAGIC: i64 = 0x27e0eb;
    const CGROUP2_SUPER_MAGIC: i64 = 0x63677270;
    let t = s.f_type as i64;
    t == CGROUP_SUPER_MAGIC || t == CGROUP2_SUPER_MAGIC
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if !self.removed {
            let _ = remove_dir_retrying(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_v1() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("cpuset")).unwrap();
        std::fs::create_dir(d.path().join("cpu")).unwrap();
        std::fs::write(d.path().join("cpuset/cpuset.mems"), "0\n").unwrap();
        d
    }

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    #[test]
    fn v1_cpuset_and_quota_files() {
        let root = fake_v1();
        let fs = CgroupFs::new(&CgroupSpec {
            root: root.path().into(),
            version: CgroupVersion::Auto,
        });
        assert_eq!(fs.version(), Version::V1);
        let cs = fs
            .create("elfen-bench-1-cpuset", Controller::Cpuset)
            .unwrap();
        cs.set_cpus(&[1, 2, 3]).unwrap();
        cs.add_process(4242).unwrap();
        let d = root.path().join("cpuset/elfen-bench-1-cpuset");
        assert_eq!(read(d.join("cpuset.cpus")), "1-3");
        assert_eq!(read(d.join("cpuset.mems")), "0", "copied from the parent");
        assert_eq!(read(d.join("cgroup.procs")), "4242");
        let q = fs.create("elfen-bench-1-quota", Controller::Cpu).unwrap();
        q.set_quota(50_000, 100_000).unwrap();
        let d2 = root.path().join("cpu/elfen-bench-1-quota");
        assert_eq!(read(d2.join("cpu.cfs_quota_us")), "50000");
        assert_eq!(read(d2.join("cpu.cfs_period_us")), "100000");
        cs.remove().unwrap();
        assert!(!d.exists());
        drop(q);
        assert!(!d2.exists(), "removed on drop");
    }

    #[test]
    fn v2_files_and_subtree_control() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(
            root.path().join("cgroup.controllers"),
            "cpuset cpu io memory\n",
        )
        .unwrap();
        let fs = CgroupFs::new(&CgroupSpec {
            root: root.path().into(),
            version: CgroupVersion::Auto,
        });
        assert_eq!(fs.version(), Version::V2);
        let q = fs.create("elfen-bench-9-quota", Controller::Cpu).unwrap();
        q.set_quota(25_000, 100_000).unwrap();
        assert_eq!(
            read(root.path().join("elfen-bench-9-quota/cpu.max")),
            "25000 100000"
        );
        assert_eq!(read(root.path().join("cgroup.subtree_control")), "+cpu");
        let cs = fs
            .create("elfen-bench-9-cpuset", Controller::Cpuset)
            .unwrap();
        cs.set_cpus(&[1]).unwrap();
        assert_eq!(
            read(root.path().join("elfen-bench-9-cpuset/cpuset.cpus")),
            "1"
        );
        assert!(
            !root
                .path()
                .join("elfen-bench-9-cpuset/cpuset.mems")
                .exists()
        );
    }

    #[test]
    fn unchanged_values_are_not_rewritten_and_errors_name_the_file() {
        let root = fake_v1();
        let f = root.path().join("x");
        write_file(&f, "5").unwrap();
        let t0 = std::fs::metadata(&f).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write_file(&f, "5").unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().modified().unwrap(), t0);
        let fs = CgroupFs::new(&CgroupSpec {
            root: root.path().join("nowhere"),
            version: CgroupVersion::V1,
        });
        let e = fs
            .create("elfen-bench-1-cpuset", Controller::Cpuset)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nowhere") && e.contains("cpuset"), "{e}");
    }

    #[test]
    fn stale_cgroups_of_dead_processes_are_removed() {
        let root = fake_v1();
        let fs = CgroupFs::new(&CgroupSpec {
            root: root.path().into(),
            version: CgroupVersion::V1,
        });
        let me = std::process::id();
        std::fs::create_dir(root.path().join(format!("cpu/{PREFIX}{me}-quota"))).unwrap();
        // pid 0x7fff_fff0 does not exist
        std::fs::create_dir(root.path().join(format!("cpu/{PREFIX}2147483632-quota"))).unwrap();
        std::fs::create_dir(root.path().join("cpu/other")).unwrap();
        let removed = fs.remove_stale();
        assert_eq!(removed.len(), 1);
        assert!(root.path().join(format!("cpu/{PREFIX}{me}-quota")).exists());
        assert!(root.path().join("cpu/other").exists());
    }
}
