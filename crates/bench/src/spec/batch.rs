//! The batch side of a spec ([`BatchSpec`]) and where cgroups are written
//! ([`CgroupSpec`]).

use super::positive;
use crate::error::BenchError;
use elfen_runtime::NapChoice;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::path::PathBuf;

/// The batch side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchSpec {
    /// Nap backend of the Elfen configurations (spin, futex, hybrid; auto,
    /// umwait and mwaitx where the machine has them).
    #[serde(serialize_with = "ser_nap", deserialize_with = "de_nap")]
    pub nap: NapChoice,
    /// `cfs_quota`: the quota in lanes (0.5 = half of one lane per period).
    pub cfs_quota_lanes: f64,
    /// `cfs_quota`: the CFS period, µs.
    pub cfs_period_us: u64,
    /// `blind_isolation`: CPUs kept free of batch for the LC (PerfIso's B).
    pub blind_buffer_cores: u32,
    /// How long each batch program runs alone (progress baseline), s.
    pub alone_s: f64,
    /// How long a freshly started batch process runs before the first
    /// invocation of a point (it also allocates and touches its buffers), ms.
    pub settle_ms: u64,
    /// Stream kernel buffer, MiB (`elfen-kernels`' default is 64).
    pub stream_mib: u64,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            nap: NapChoice::Spin,
            cfs_quota_lanes: 0.5,
            cfs_period_us: 100_000,
            blind_buffer_cores: 0,
            alone_s: 1.0,
            settle_ms: 50,
            stream_mib: 64,
        }
    }
}

fn ser_nap<S: Serializer>(n: &NapChoice, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(n.name())
}

fn de_nap<'de, D: Deserializer<'de>>(d: D) -> Result<NapChoice, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

impl BatchSpec {
    pub(super) fn validate(&self) -> Result<(), BenchError> {
        positive("batch.cfs_quota_lanes", self.cfs_quota_lanes)?;
        if !(1_000..=1_000_000).contains(&self.cfs_period_us) {
            return Err(BenchError::Config(format!(
                "batch.cfs_period_us must be in 1000..=1000000 (the kernel's limits), got {}",
                self.cfs_period_us
            )));
        }
        positive("batch.alone_s", self.alone_s)?;
        if self.stream_mib == 0 {
            return Err(BenchError::Config(
                "batch.stream_mib must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// cgroup layout to drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupVersion {
    /// Detected from the root.
    Auto,
    /// Controller hierarchies `<root>/cpu`, `<root>/cpuset`, ….
    V1,
    /// The unified hierarchy at `<root>`.
    V2,
    /// v1 controllers plus a v2 tree at `<root>/unified`.
    Hybrid,
}

/// Where and how cgroups are written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CgroupSpec {
    /// The cgroup mount root.
    pub root: PathBuf,
    /// Which version to drive.
    pub version: CgroupVersion,
}

impl Default for CgroupSpec {
    fn default() -> Self {
        CgroupSpec {
            root: PathBuf::from("/sys/fs/cgroup"),
            version: CgroupVersion::Auto,
        }
    }
}
