//! Lanes as the kernel reports them under `/sys/devices/system/cpu`.
//!
//! A **lane** is one logical CPU (hardware thread). Lanes of one physical core are
//! *siblings* (`cpuN/topology/thread_siblings_list`); on SMT hardware they share the
//! core's pipeline, which is what lets a batch lane soak up cycles the request lane
//! leaves idle. See [`crate::pairing`] for how lanes become request/batch pairs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cpulist::{format_cpu_list, parse_cpu_list};
use crate::error::{Result, TopoError};

/// The real sysfs CPU root.
pub const SYSFS_CPU_ROOT: &str = "/sys/devices/system/cpu";

/// One online lane (logical CPU) and where it sits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaneInfo {
    /// The CPU id (`N` in `cpuN`), as used by `sched_setaffinity` and cpusets.
    pub cpu: u32,
    /// `topology/core_id`: the physical core within its package. Only unique
    /// together with `package_id`.
    pub core_id: u32,
    /// `topology/physical_package_id`: the socket.
    pub package_id: u32,
    /// Online lanes on the same physical core, including `cpu` itself, sorted.
    /// Offline siblings named by `thread_siblings_list` are filtered out.
    pub siblings: Vec<u32>,
}

/// The machine's online lanes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Topology {
    /// Online lanes only, sorted by `cpu`; never empty when built by
    /// [`Topology::from_sysfs`].
    pub lanes: Vec<LaneInfo>,
}

impl Topology {
    /// Reads the topology from a sysfs CPU root (normally [`SYSFS_CPU_ROOT`]; tests
    /// point it at a fake tree).
    ///
    /// Reads `online`, then for each online CPU `cpuN/topology/{core_id,
    /// physical_package_id,thread_siblings_list}`. CPUs not in `online` are ignored even
    /// if their directory exists. Fails, naming the file, on missing or malformed
    /// files, and on sibling lists that disagree with each other.
    pub fn from_sysfs(root: &Path) -> Result<Topology> {
        let online_path = root.join("online");
        let online = read_cpu_list(&online_path)?;
        if online.is_empty() {
            return Err(TopoError::Topology {
                path: online_path,
                what: "no online cpus".to_string(),
            });
        }
        let mut lanes = Vec::with_capacity(online.len());
        for &cpu in &online {
            let dir = cpu_dir(root, cpu).join("topology");
            let siblings_path = dir.join("thread_siblings_list");
            let mut siblings = read_cpu_list(&siblings_path)?;
            if !siblings.contains(&cpu) {
                return Err(TopoError::Parse {
                    path: siblings_path,
                    what: format!(
                        "sibling list {:?} does not contain cpu{cpu} itself",
                        format_cpu_list(&siblings)
                    ),
                });
            }
            siblings.retain(|s| online.binary_search(s).is_ok());
            lanes.push(LaneInfo {
                cpu,
                core_id: read_u32(&dir.join("core_id"))?,
                package_id: read_u32(&dir.join("physical_package_id"))?,
                siblings,
            });
        }
        let topo = Topology { lanes };
        topo.check_siblings_agree(root)?;
        Ok(topo)
    }

    /// Reads the running machine's topology from [`SYSFS_CPU_ROOT`].
    pub fn detect() -> Result<Topology> {
        Topology::from_sysfs(Path::new(SYSFS_CPU_ROOT))
    }

    /// Every lane must list exactly the same siblings as each of its siblings,
    /// otherwise pairing by core would use a lane twice.
    fn check_siblings_agree(&self, root: &Path) -> Result<()> {
        for lane in &self.lanes {
            for &s in &lane.siblings {
                let other = self.lane(s).map(|l| &l.siblings);
                if other != Some(&lane.siblings) {
                    return Err(TopoError::Topology {
                        path: root.to_path_buf(),
                        what: format!(
                            "cpu{} lists siblings {:?} but cpu{s} lists {:?}",
                            lane.cpu,
                            format_cpu_list(&lane.siblings),
                            format_cpu_list(other.map_or(&[][..], |v| v))
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Hardware threads per core: the largest online sibling count (1 = no SMT,
    /// 2 = Hyper-Threading, 4 = e.g. POWER/Xeon Phi SMT4).
    pub fn smt_ways(&self) -> usize {
        self.lanes
            .iter()
            .map(|l| l.siblings.len())
            .max()
            .unwrap_or(1)
    }

    /// Whether any core has more than one online lane.
    pub fn has_smt(&self) -> bool {
        self.smt_ways() > 1
    }

    /// The online CPU ids, sorted.
    pub fn cpus(&self) -> Vec<u32> {
        self.lanes.iter().map(|l| l.cpu).collect()
    }

    /// The lane for `cpu`, if it is online.
    pub fn lane(&self, cpu: u32) -> Option<&LaneInfo> {
        self.lanes
            .binary_search_by_key(&cpu, |l| l.cpu)
            .ok()
            .map(|i| &self.lanes[i])
    }

    /// Online lanes grouped by physical core: each group is one core's sibling list
    /// (sorted), groups ordered by their lowest cpu.
    pub fn cores(&self) -> Vec<Vec<u32>> {
        let mut by_first: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for lane in &self.lanes {
            // A hand-built lane may have no siblings; it is then a core of its own.
            let core = if lane.siblings.is_empty() {
                vec![lane.cpu]
            } else {
                lane.siblings.clone()
            };
            by_first.entry(core[0]).or_insert(core);
        }
        by_first.into_values().collect()
    }
}

/// Reads a sysfs file, mapping failures to [`TopoError::Io`] with the path.
pub(crate) fn read_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| TopoError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a file holding one unsigned integer (`core_id`, ...).
pub(crate) fn read_u32(path: &Path) -> Result<u32> {
    let text = read_string(path)?;
    let value = text.trim();
    value.parse().map_err(|_| TopoError::Parse {
        path: path.to_path_buf(),
        what: format!("expected an integer, found {value:?}"),
    })
}

/// Reads a file holding a CPU list (`online`, `thread_siblings_list`, ...).
pub(crate) fn read_cpu_list(path: &Path) -> Result<Vec<u32>> {
    let text = read_string(path)?;
    parse_cpu_list(&text).map_err(|e| TopoError::Parse {
        path: path.to_path_buf(),
        what: match e {
            TopoError::CpuList { input, reason } => {
                format!("invalid cpu list {:?}: {reason}", input.trim())
            }
            other => other.to_string(),
        },
    })
}

/// `root/cpuN`: where a lane's sysfs files live.
pub(crate) fn cpu_dir(root: &Path, cpu: u32) -> PathBuf {
    root.join(format!("cpu{cpu}"))
}
