//! Knobs: one typed enum for every value the executor writes, with its file
//! names per layout, its parser and its formatter.
//!
//! Values are compared in the file's *native* form (after [`Knob::native`]),
//! so a cpulist `0,1` equals `0-1`, a v1 weight is compared as `cpu.shares`,
//! and a memory limit is compared in whole pages as the kernel stores it.
//!
//! File map (v1 name / v2 name):
//!
//! | knob | v1 | v2 |
//! |---|---|---|
//! | [`Knob::CpusetCpus`] | `cpuset.cpus` | `cpuset.cpus` |
//! | [`Knob::CpusetMems`] | `cpuset.mems` | `cpuset.mems` |
//! | [`Knob::CpuMax`] | `cpu.cfs_period_us`, `cpu.cfs_quota_us` | `cpu.max` |
//! | [`Knob::CpuIdle`] | `cpu.idle` (kernels ≥ 5.15) | `cpu.idle` |
//! | [`Knob::CpuWeight`] / [`Knob::CpuShares`] | `cpu.shares` | `cpu.weight` |
//! | [`Knob::Frozen`] | `freezer.state` | `cgroup.freeze` |
//! | [`Knob::MemoryMax`] | `memory.limit_in_bytes` | `memory.max` |
//! | [`Knob::MemoryHigh`] | `memory.soft_limit_in_bytes` | `memory.high` |
//! | [`Knob::IoMax`] | `blkio.throttle.{read,write}_{bps,iops}_device` | `io.max` |
//! | [`Knob::IoWeight`] | `blkio.bfq.weight` | `io.weight` |
//! | [`Knob::IoBfqWeight`] | `blkio.bfq.weight` | `io.bfq.weight` |

//!
//! The parts: this file ([`Device`], [`Knob`], its files, parsing and
//! native form), `kind` ([`KnobKind`], a knob without its value), `parse`
//! (the kernel files' formats, and weight ↔ shares).

mod kind;
mod parse;

pub use kind::KnobKind;
pub use parse::{shares_to_weight, weight_to_shares};

use crate::error::{CgroupError, Result};
use crate::layout::Controller;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A block device, `major:minor` (`8:0` is `/dev/sda`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Device {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Device, String> {
        let (a, b) = s
            .split_once(':')
            .ok_or_else(|| format!("device {s:?}: expected major:minor"))?;
        let p = |t: &str| {
            t.parse::<u32>()
                .map_err(|_| format!("device {s:?}: {t:?} is not a number"))
        };
        Ok(Device {
            major: p(a)?,
            minor: p(b)?,
        })
    }
}

impl TryFrom<String> for Device {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Device, String> {
        s.parse()
    }
}

impl From<Device> for String {
    fn from(d: Device) -> String {
        d.to_string()
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// A value the executor can set on a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// `cpuset.cpus`: the CPUs the group may run on (empty: none in v1, the
    /// parent's in v2).
    CpusetCpus(#[serde(with = "cpulist_serde")] Vec<u32>),
    /// `cpuset.mems`: the memory nodes (a v1 cpuset takes no task while it
    /// is empty).
    CpusetMems(#[serde(with = "cpulist_serde")] Vec<u32>),
    /// CFS bandwidth: at most `quota_us` of CPU time per `period_us`
    /// (`quota = lanes × period`); `None` is unlimited. The kernel accepts
    /// quotas ≥ 1 ms and periods of 1 ms to 1 s.
    CpuMax {
        /// CPU time per period, µs; `None` = unlimited (v1 `-1`, v2 `max`).
        quota_us: Option<u64>,
        /// The period, µs.
        period_us: u64,
    },
    /// `cpu.idle`: the group's tasks run as `SCHED_IDLE` against its siblings.
    CpuIdle(bool),
    /// Relative CPU weight in v2 units: 1..=10000, default 100.
    ///
    /// On v1 it is written as `cpu.shares = round(weight × 1024 / 100)`
    /// (clamped to 2..=262144), the conversion the kernel itself uses
    /// between the two files, so default 100 is default 1024 and ratios
    /// between groups are kept. (runc's `1 + (shares − 2) × 9999 / 262142`
    /// maps 1024 to 39, not 100, and is not used.)
    CpuWeight(u32),
    /// Relative CPU weight in v1 units (`cpu.shares`, 2..=262144, default
    /// 1024); on v2 written as `cpu.weight = round(shares × 100 / 1024)`.
    /// Originals read on v1 are recorded in this form so that restoring
    /// them is exact.
    CpuShares(u64),
    /// The freezer: `true` = frozen (v1 `FROZEN`, v2 `cgroup.freeze` `1`).
    /// Reading v1's `FREEZING` counts as `true` (requested, in progress).
    Frozen(bool),
    /// Memory limit in bytes (`None` = unlimited); the kernel keeps it in
    /// whole pages, rounded down. Past it the kernel reclaims the group's
    /// memory and, when it cannot, its OOM killer acts inside the group.
    MemoryMax(Option<u64>),
    /// Memory soft limit in bytes (`None` = none). v2 `memory.high`: above
    /// it the group's allocations are throttled and reclaimed, never
    /// OOM-killed. v1 `memory.soft_limit_in_bytes`: the group's memory is
    /// reclaimed down to it first when the machine runs short (no
    /// throttling). Kept in whole pages, rounded down.
    MemoryHigh(Option<u64>),
    /// Bandwidth and IOPS limits of one block device (`None` = unlimited):
    /// one `io.max` line on v2, four `blkio.throttle.*_device` files on v1.
    IoMax {
        /// The device (a whole disk: the kernel refuses partitions).
        device: Device,
        /// Read limit, bytes/s.
        read_bps: Option<u64>,
        /// Write limit, bytes/s.
        write_bps: Option<u64>,
        /// Read limit, I/O operations/s.
        #[serde(default)]
        read_iops: Option<u64>,
        /// Write limit, I/O operations/s.
        #[serde(default)]
        write_iops: Option<u64>,
    },
    /// Proportional I/O weight of the group against its siblings (default
    /// 100): v2 `io.weight` (its `default` line; 1..=10000), v1
    /// `blkio.bfq.weight` (1..=1000). The kernel honours it only where the
    /// device's scheduler does: BFQ on v1, the iocost controller (enabled
    /// in `io.cost.qos`) on v2.
    IoWeight(u32),
    /// The BFQ I/O scheduler's weight of the group against its siblings
    /// (1..=1000, default 100): v2 `io.bfq.weight` (its `default` line),
    /// v1 `blkio.bfq.weight` (the file [`Knob::IoWeight`] writes there:
    /// set one of the two on v1). On v2, BFQ reads only this file, iocost
    /// only `io.weight`; the file exists while BFQ is loaded.
    IoBfqWeight(u32),
}

impl Knob {
    /// Which knob this is.
    pub fn kind(&self) -> KnobKind {
        match self {
            Knob::CpusetCpus(_) => KnobKind::CpusetCpus,
            Knob::CpusetMems(_) => KnobKind::CpusetMems,
            Knob::CpuMax { .. } => KnobKind::CpuMax,
            Knob::CpuIdle(_) => KnobKind::CpuIdle,
            Knob::CpuWeight(_) | Knob::CpuShares(_) => KnobKind::CpuWeight,
            Knob::Frozen(_) => KnobKind::Frozen,
            Knob::MemoryMax(_) => KnobKind::MemoryMax,
            Knob::MemoryHigh(_) => KnobKind::MemoryHigh,
            Knob::IoMax { device, .. } => KnobKind::IoMax(*device),
            Knob::IoWeight(_) => KnobKind::IoWeight,
            Knob::IoBfqWeight(_) => KnobKind::IoBfqWeight,
        }
    }

    /// The controller whose hierarchy holds it.
    pub fn controller(&self) -> Controller {
        self.kind().controller()
    }

    /// Checks the value and converts it to the native form of a v1 (`v2 =
    /// false`) or v2 file: weight ↔ shares, memory rounded down to pages.
    /// `file` names the file in errors.
    pub(crate) fn native(&self, v2: bool, file: &Path) -> Result<Knob> {
        let bad = |reason: &str| CgroupError::invalid(file, self.to_string(), reason);
        Ok(match *self {
            Knob::CpuMax {
                quota_us,
                period_us,
            } => {
                if !(1_000..=1_000_000).contains(&period_us) {
                    return Err(bad("the CFS period must be 1000..=1000000 µs"));
                }
                if quota_us.is_some_and(|q| q < 1_000) {
                    return Err(bad("the CFS quota must be at least 1000 µs"));
                }
                self.clone()
            }
            Knob::CpuWeight(w) => {
                if !(1..=10_000).contains(&w) {
                    return Err(bad("cpu weight must be 1..=10000"));
                }
                if v2 {
                    self.clone()
                } else {
                    Knob::CpuShares(weight_to_shares(w))
                }
            }
            Knob::CpuShares(s) => {
                if !(2..=262_144).contains(&s) {
                    return Err(bad("cpu shares must be 2..=262144"));
                }
                if v2 {
                    Knob::CpuWeight(shares_to_weight(s))
                } else {
                    self.clone()
                }
            }
            Knob::MemoryMax(Some(b)) | Knob::MemoryHigh(Some(b)) => {
                let page = crate::fsio::page_size();
                if b < page {
                    return Err(bad("a memory limit below one page"));
                }
                match self {
                    Knob::MemoryMax(_) => Knob::MemoryMax(Some(b / page * page)),
                    _ => Knob::MemoryHigh(Some(b / page * page)),
                }
            }
            Knob::IoMax {
                read_bps,
                write_bps,
                read_iops,
                write_iops,
                ..
            } if [read_bps, write_bps, read_iops, write_iops].contains(&Some(0)) => {
                return Err(bad("an I/O limit of 0 (use None for unlimited)"));
            }
            Knob::IoWeight(w) => {
                let top = if v2 { 10_000 } else { 1_000 };
                if !(1..=top).contains(&w) {
                    return Err(bad(if v2 {
                        "io.weight must be 1..=10000"
                    } else {
                        "blkio.bfq.weight must be 1..=1000"
                    }));
                }
                self.clone()
            }
            Knob::IoBfqWeight(w) => {
                if !(1..=1_000).contains(&w) {
                    return Err(bad(if v2 {
                        "io.bfq.weight must be 1..=1000"
                    } else {
                        "blkio.bfq.weight must be 1..=1000"
                    }));
                }
                self.clone()
            }
            _ => self.clone(),
        })
    }

    /// The writes (file name, value) that change a group from `current` to
    /// `self`, both native; files whose value stays are left out.
    pub(crate) fn writes(&self, current: &Knob, v2: bool) -> Vec<(&'static str, String)> {
        let files = self.kind().files(v2);
        match (self, current, v2) {
            (Knob::CpusetCpus(c), _, _) | (Knob::CpusetMems(c), _, _) => {
                vec![(files[0], elfen_topo::format_cpu_list(c))]
            }
            (
                Knob::CpuMax {
                    quota_us,
                    period_us,
                },
                Knob::CpuMax {
                    quota_us: old_q,
                    period_us: old_p,
                },
                false,
            ) => {
                let q = quota_us.map_or("-1".to_string(), |q| q.to_string());
                let period = (period_us != old_p).then(|| (files[0], period_us.to_string()));
                let quota = (quota_us != old_q).then(|| (files[1], q));
                // Control law for v1 CFS writes: the kernel checks every
                // single write against the hierarchy (a child's
                // quota/period may not exceed its parent's). Writing first
                // the file that lowers the ratio keeps each intermediate
                // ratio ≤ max(old, new): a smaller (or newly limited) quota
                // goes first, otherwise the period does.
                let quota_first = match (quota_us, old_q) {
                    (Some(n), Some(o)) => n < o,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                let mut out: Vec<_> = if quota_first {
                    [quota, period].into_iter().flatten().collect()
                } else {
                    [period, quota].into_iter().flatten().collect()
                };
                if out.is_empty() {
                    out.push((files[1], self.value_string(false)));
                }
                out
            }
            (
                Knob::IoMax {
                    device,
                    read_bps,
                    write_bps,
                    read_iops,
                    write_iops,
                },
                Knob::IoMax {
                    read_bps: old_rb,
                    write_bps: old_wb,
                    read_iops: old_ri,
                    write_iops: old_wi,
                    ..
                },
                false,
            ) => {
                // v1 takes one value per file; 0 removes the device's limit.
                let v = |x: &Option<u64>| format!("{device} {}", x.unwrap_or(0));
                [
                    (read_bps, old_rb),
                    (write_bps, old_wb),
                    (read_iops, old_ri),
                    (write_iops, old_wi),
                ]
                .into_iter()
                .enumerate()
                .filter(|(_, (new, old))| new != old)
                .map(|(i, (new, _))| (files[i], v(new)))
                .collect()
            }
            _ => vec![(files[0], self.value_string(v2))],
        }
    }

    /// The writes (file name, value) that lift every I/O limit of `device`:
    /// v2 `max` for each of `io.max`'s limits, v1 `0` (no limit) in each
    /// `blkio.throttle.*_device` file.
    pub(crate) fn io_unlimited_writes(device: Device, v2: bool) -> Vec<(&'static str, String)> {
        let unlimited = Knob::IoMax {
            device,
            read_bps: None,
            write_bps: None,
            read_iops: None,
            write_iops: None,
        };
        let files = unlimited.kind().files(v2);
        if v2 {
            vec![(files[0], unlimited.value_string(true))]
        } else {
            files.iter().map(|&f| (f, format!("{device} 0"))).collect()
        }
    }

    /// The value as written to its (single) file in native form.
    fn value_string(&self, v2: bool) -> String {
        let opt = |x: Option<u64>, none: &str| x.map_or(none.to_string(), |v| v.to_string());
        match (self, v2) {
            (Knob::CpusetCpus(c), _) | (Knob::CpusetMems(c), _) => elfen_topo::format_cpu_list(c),
            (
                Knob::CpuMax {
                    quota_us,
                    period_us,
                },
                true,
            ) => format!("{} {period_us}", opt(*quota_us, "max")),
            (Knob::CpuMax { quota_us, .. }, false) => opt(*quota_us, "-1"),
            (Knob::CpuIdle(b), _) => u8::from(*b).to_string(),
            (Knob::CpuWeight(w), _) => w.to_string(),
            (Knob::CpuShares(s), _) => s.to_string(),
            (Knob::Frozen(b), false) => if *b { "FROZEN" } else { "THAWED" }.to_string(),
            (Knob::Frozen(b), true) => u8::from(*b).to_string(),
            (Knob::MemoryMax(m), false) | (Knob::MemoryHigh(m), false) => opt(*m, "-1"),
            (Knob::MemoryMax(m), true) | (Knob::MemoryHigh(m), true) => opt(*m, "max"),
            (
                Knob::IoMax {
                    device,
                    read_bps,
                    write_bps,
                    read_iops,
                    write_iops,
                },
                _,
            ) => format!(
                "{device} rbps={} wbps={} riops={} wiops={}",
                opt(*read_bps, "max"),
                opt(*write_bps, "max"),
                opt(*read_iops, "max"),
                opt(*write_iops, "max")
            ),
            (Knob::IoWeight(w), true) | (Knob::IoBfqWeight(w), true) => format!("default {w}"),
            (Knob::IoWeight(w), false) | (Knob::IoBfqWeight(w), false) => w.to_string(),
        }
    }
}

impl std::fmt::Display for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |x: Option<u64>| x.map_or("max".to_string(), |v| v.to_string());
        match self {
            Knob::CpusetCpus(c) => write!(f, "cpus={}", elfen_topo::format_cpu_list(c)),
            Knob::CpusetMems(c) => write!(f, "mems={}", elfen_topo::format_cpu_list(c)),
            Knob::CpuMax {
                quota_us,
                period_us,
            } => write!(f, "cpu.max={} {period_us}", opt(*quota_us)),
            Knob::CpuIdle(b) => write!(f, "cpu.idle={}", u8::from(*b)),
            Knob::CpuWeight(w) => write!(f, "cpu.weight={w}"),
            Knob::CpuShares(s) => write!(f, "cpu.shares={s}"),
            Knob::Frozen(b) => write!(f, "frozen={b}"),
            Knob::MemoryMax(m) => write!(f, "memory.max={}", opt(*m)),
            Knob::MemoryHigh(m) => write!(f, "memory.high={}", opt(*m)),
            Knob::IoMax {
                device,
                read_bps,
                write_bps,
                read_iops,
                write_iops,
            } => write!(
                f,
                "io.max={device} rbps={} wbps={} riops={} wiops={}",
                opt(*read_bps),
                opt(*write_bps),
                opt(*read_iops),
                opt(*write_iops)
            ),
            Knob::IoWeight(w) => write!(f, "io.weight={w}"),
            Knob::IoBfqWeight(w) => write!(f, "io.bfq.weight={w}"),
        }
    }
}

/// CPU and node lists serialise as the kernel's list syntax (`"0-3,8"`).
mod cpulist_serde {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&elfen_topo::format_cpu_list(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        let s = String::deserialize(d)?;
        elfen_topo::parse_cpu_list(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::parse::{v2_io_max, v2_io_weight};
    use super::*;

    #[test]
    fn weight_conversion_matches_the_kernel() {
        assert_eq!(weight_to_shares(100), 1024);
        assert_eq!(shares_to_weight(1024), 100);
        assert_eq!(weight_to_shares(1), 10);
        assert_eq!(weight_to_shares(10_000), 102_400);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(262_144), 10_000);
        for w in [1, 7, 50, 100, 333, 10_000] {
            assert_eq!(shares_to_weight(weight_to_shares(w)), w);
        }
    }

    #[test]
    fn cfs_writes_keep_the_ratio_bounded() {
        let k = |q: Option<u64>, p| Knob::CpuMax {
            quota_us: q,
            period_us: p,
        };
        // Smaller quota: quota first.
        let w = k(Some(10_000), 20_000).writes(&k(Some(50_000), 100_000), false);
        assert_eq!(
            w,
            [
                ("cpu.cfs_quota_us", "10000".to_string()),
                ("cpu.cfs_period_us", "20000".to_string())
            ]
        );
        // Unlimited: period first, then -1.
        let w = k(None, 50_000).writes(&k(Some(50_000), 100_000), false);
        assert_eq!(
            w,
            [
                ("cpu.cfs_period_us", "50000".to_string()),
                ("cpu.cfs_quota_us", "-1".to_string())
            ]
        );
        // Only the changed file.
        let w = k(Some(20_000), 100_000).writes(&k(None, 100_000), false);
        assert_eq!(w, [("cpu.cfs_quota_us", "20000".to_string())]);
        assert_eq!(
            k(None, 100_000).writes(&k(Some(1_000), 100_000), true),
            [("cpu.max", "max 100000".to_string())]
        );
    }

    #[test]
    fn knobs_serialise_readably() {
        let k = Knob::CpusetCpus(vec![0, 1, 2, 5]);
        assert_eq!(
            serde_json::to_string(&k).unwrap(),
            r#"{"cpuset_cpus":"0-2,5"}"#
        );
        let io = Knob::IoMax {
            device: Device { major: 8, minor: 0 },
            read_bps: Some(1 << 20),
            write_bps: None,
            read_iops: None,
            write_iops: Some(100),
        };
        let s = serde_json::to_string(&io).unwrap();
        assert!(s.contains(r#""device":"8:0""#), "{s}");
        assert_eq!(serde_json::from_str::<Knob>(&s).unwrap(), io);
        // A record written before the IOPS limits existed still reads.
        let old = r#"{"io_max":{"device":"8:0","read_bps":1048576,"write_bps":null}}"#;
        assert_eq!(
            serde_json::from_str::<Knob>(old).unwrap(),
            Knob::IoMax {
                device: Device { major: 8, minor: 0 },
                read_bps: Some(1 << 20),
                write_bps: None,
                read_iops: None,
                write_iops: None,
            }
        );
    }

    #[test]
    fn io_files_parse_every_limit_and_the_weight() {
        let p = Path::new("io.max");
        let d = Device { major: 7, minor: 3 };
        let t =
            "8:0 rbps=1 wbps=max riops=max wiops=max\n7:3 rbps=max wbps=2048 riops=50 wiops=max\n";
        assert_eq!(
            v2_io_max(p, t, d).unwrap(),
            [None, Some(2048), Some(50), None]
        );
        assert_eq!(v2_io_max(p, "", d).unwrap(), [None; 4]);
        assert_eq!(v2_io_weight(p, "default 250\n8:0 50\n").unwrap(), 250);
        assert_eq!(v2_io_weight(p, "100\n").unwrap(), 100);
        assert!(v2_io_weight(p, "8:0 50\n").is_err());
        // v1 writes only the files whose value changes; 0 lifts a limit.
        let k = |rb, ri| Knob::IoMax {
            device: d,
            read_bps: rb,
            write_bps: None,
            read_iops: ri,
            write_iops: None,
        };
        assert_eq!(
            k(Some(4096), None).writes(&k(None, Some(10)), false),
            [
                ("blkio.throttle.read_bps_device", "7:3 4096".to_string()),
                ("blkio.throttle.read_iops_device", "7:3 0".to_string())
            ]
        );
        assert_eq!(
            k(Some(4096), None).writes(&k(None, None), true),
            [(
                "io.max",
                "7:3 rbps=4096 wbps=max riops=max wiops=max".to_string()
            )]
        );
        assert_eq!(
            Knob::IoWeight(300).writes(&Knob::IoWeight(100), true),
            [("io.weight", "default 300".to_string())]
        );
        assert_eq!(
            Knob::IoBfqWeight(300).writes(&Knob::IoBfqWeight(100), true),
            [("io.bfq.weight", "default 300".to_string())]
        );
        assert_eq!(
            Knob::IoBfqWeight(300).writes(&Knob::IoBfqWeight(100), false),
            [("blkio.bfq.weight", "300".to_string())]
        );
        let f = Path::new("io.bfq.weight");
        assert!(Knob::IoBfqWeight(1001).native(true, f).is_err());
        assert!(Knob::IoBfqWeight(0).native(false, f).is_err());
        assert_eq!(
            Knob::IoBfqWeight(1000).native(true, f).unwrap(),
            Knob::IoBfqWeight(1000)
        );
    }
}
