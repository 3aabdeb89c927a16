//! A description of the machine stored with every result file, so results can be
//! re-read later and compared across machines. Collection never fails: whatever
//! cannot be read is `None`.

use std::path::{Path, PathBuf};

use crate::cpulist::format_cpu_list;
use crate::features::Features;
use crate::topology::{SYSFS_CPU_ROOT, Topology, cpu_dir, read_cpu_list, read_string};

/// How cgroups are mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupMode {
    /// Only v1 controller hierarchies.
    V1,
    /// The unified v2 hierarchy at the cgroup root (`cgroup.controllers` exists).
    V2,
    /// v1 controllers plus a v2 tree at `<root>/unified`.
    Hybrid,
}

/// Where [`SystemInfo::collect_from`] reads; tests point these at a temp dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysPaths {
    /// The sysfs CPU root (`/sys/devices/system/cpu`).
    pub cpu_root: PathBuf,
    /// procfs (`/proc`), for `cpuinfo` and `meminfo`.
    pub proc_root: PathBuf,
    /// The cgroup mount root (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
}

impl Default for SysPaths {
    fn default() -> SysPaths {
        SysPaths {
            cpu_root: PathBuf::from(SYSFS_CPU_ROOT),
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

/// The machine a result was measured on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SystemInfo {
    /// `uname` nodename.
    pub hostname: Option<String>,
    /// `uname` release, e.g. `6.8.0-45-generic`.
    pub kernel_release: Option<String>,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
    /// Number of online lanes.
    pub online_cpu_count: Option<usize>,
    /// Online lanes in cpu-list syntax (`0-3,8`).
    pub online_cpus: Option<String>,
    /// Hardware threads per core (1 = no SMT); `None` if the topology is unreadable.
    pub smt_ways: Option<usize>,
    /// L2 cache size in bytes, as seen by the first online CPU.
    pub l2_bytes: Option<u64>,
    /// L3 (last-level) cache size in bytes, as seen by the first online CPU.
    pub l3_bytes: Option<u64>,
    /// `MemTotal` from `/proc/meminfo`, in bytes.
    pub mem_total_bytes: Option<u64>,
    /// cgroup v1, v2 or hybrid.
    pub cgroup_mode: Option<CgroupMode>,
    /// CPU and OS features relevant to elfen.
    pub features: Features,
}

impl SystemInfo {
    /// Collects information about the running machine.
    pub fn collect() -> SystemInfo {
        SystemInfo::collect_from(&SysPaths::default())
    }

    /// Collects with sysfs/procfs/cgroup files read under `paths`. `uname`, CPUID and
    /// `perf_event_open` always describe the running machine.
    pub fn collect_from(paths: &SysPaths) -> SystemInfo {
        let uts = uname();
        let online = read_cpu_list(&paths.cpu_root.join("online")).ok();
        let first_cpu = online.as_ref().and_then(|c| c.first().copied());
        let cache = |level| first_cpu.and_then(|cpu| cache_size(&paths.cpu_root, cpu, level));
        let proc_file = |name| read_string(&paths.proc_root.join(name)).ok();
        SystemInfo {
            hostname: uts.as_ref().map(|u| u.0.clone()),
            kernel_release: uts.map(|u| u.1),
            cpu_model: proc_file("cpuinfo").and_then(|t| cpu_model(&t)),
            online_cpu_count: online.as_ref().map(Vec::len),
            online_cpus: online.as_deref().map(format_cpu_list),
            smt_ways: Topology::from_sysfs(&paths.cpu_root)
                .ok()
                .map(|t| t.smt_ways()),
            l2_bytes: cache(2),
            l3_bytes: cache(3),
            mem_total_bytes: proc_file("meminfo").and_then(|t| mem_total(&t)),
            cgroup_mode: cgroup_mode(&paths.cgroup_root),
            features: Features::detect_at(&paths.cpu_root),
        }
    }
}

/// `(nodename, release)` from `uname(2)`.
fn uname() -> Option<(String, String)> {
    // SAFETY: `utsname` is plain C data; all-zero is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    let field = |chars: &[libc::c_char]| {
        let bytes: Vec<u8> = chars
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some((field(&uts.nodename), field(&uts.release)))
}

/// The first `model name` in `/proc/cpuinfo` text.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

/// `MemTotal` in bytes from `/proc/meminfo` text (`MemTotal:  16337516 kB`).
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// Size in bytes of the data/unified cache of `level` seen by `cpu`, from
/// `cpuN/cache/index*/{level,type,size}`.
fn cache_size(cpu_root: &Path, cpu: u32, level: u32) -> Option<u64> {
    let entries = std::fs::read_dir(cpu_dir(cpu_root, cpu).join("cache")).ok()?;
    entries.flatten().find_map(|entry| {
        let dir = entry.path();
        let read = |name| read_string(&dir.join(name)).ok();
        let is_level = read("level")?.trim().parse::<u32>().ok()? == level;
        let kind = read("type")?;
        let holds_data = matches!(kind.trim(), "Unified" | "Data");
        if is_level && holds_data {
            parse_size(&read("size")?)
        } else {
            None
        }
    })
}

/// Parses a sysfs cache size: `48K`, `2048K`, `32M`, or plain bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// v2 if the root is a cgroup2 mount, hybrid if a v2 tree sits at `unified`, v1 if
/// the root has any hierarchy, `None` if there is no cgroup root.
fn cgroup_mode(root: &Path) -> Option<CgroupMode> {
    if root.join("cgroup.controllers").is_file() {
        Some(CgroupMode::V2)
    } else if root.join("unified").is_dir() {
        Some(CgroupMode::Hybrid)
    } else if std::fs::read_dir(root).ok()?.next().is_some() {
        Some(CgroupMode::V1)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_and_cache_text() {
        assert_eq!(
            cpu_model("processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\n").as_deref(),
            Some("Intel(R) Xeon(R)")
        );
        assert_eq!(cpu_model("processor\t: 0\n"), None);
        assert_eq!(
            mem_total("MemTotal:       16337516 kB\nMemFree: 1 kB\n"),
            Some(16337516 * 1024)
        );
        assert_eq!(mem_total("MemTotal: lots\n"), None);
        assert_eq!(parse_size("48K\n"), Some(48 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size(""), None);
    }
}
