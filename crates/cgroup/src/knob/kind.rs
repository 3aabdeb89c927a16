//! [`KnobKind`]: which knob, without its value — the key under which an
//! origin is recorded.

use super::parse::{
    V1_UNLIMITED_FROM, parse_list, parse_u64, v1_device_value, v2_io_max, v2_io_weight, v2_max,
};
use super::{Device, Knob};
use crate::error::{CgroupError, Result};
use crate::layout::Controller;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Which knob (without its value): the key under which an original value is
/// recorded. [`Knob::CpuWeight`] and [`Knob::CpuShares`] are one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KnobKind {
    /// `cpuset.cpus`.
    CpusetCpus,
    /// `cpuset.mems`.
    CpusetMems,
    /// CFS bandwidth.
    CpuMax,
    /// `cpu.idle`.
    CpuIdle,
    /// Weight / shares.
    CpuWeight,
    /// Freezer.
    Frozen,
    /// Memory limit.
    MemoryMax,
    /// Memory soft limit.
    MemoryHigh,
    /// I/O limits of one device.
    IoMax(Device),
    /// I/O weight.
    IoWeight,
    /// The BFQ scheduler's I/O weight.
    IoBfqWeight,
}

impl KnobKind {
    /// The controller whose hierarchy holds it.
    pub fn controller(self) -> Controller {
        match self {
            KnobKind::CpusetCpus | KnobKind::CpusetMems => Controller::Cpuset,
            KnobKind::CpuMax | KnobKind::CpuIdle | KnobKind::CpuWeight => Controller::Cpu,
            KnobKind::Frozen => Controller::Freezer,
            KnobKind::MemoryMax | KnobKind::MemoryHigh => Controller::Memory,
            KnobKind::IoMax(_) | KnobKind::IoWeight | KnobKind::IoBfqWeight => Controller::Io,
        }
    }

    /// Its files, in the order they are written (`v2`: the controller is
    /// served by a v2 tree).
    pub fn files(self, v2: bool) -> &'static [&'static str] {
        match (self, v2) {
            (KnobKind::CpusetCpus, _) => &["cpuset.cpus"],
            (KnobKind::CpusetMems, _) => &["cpuset.mems"],
            (KnobKind::CpuMax, false) => &["cpu.cfs_period_us", "cpu.cfs_quota_us"],
            (KnobKind::CpuMax, true) => &["cpu.max"],
            (KnobKind::CpuIdle, _) => &["cpu.idle"],
            (KnobKind::CpuWeight, false) => &["cpu.shares"],
            (KnobKind::CpuWeight, true) => &["cpu.weight"],
            (KnobKind::Frozen, false) => &["freezer.state"],
            (KnobKind::Frozen, true) => &["cgroup.freeze"],
            (KnobKind::MemoryMax, false) => &["memory.limit_in_bytes"],
            (KnobKind::MemoryMax, true) => &["memory.max"],
            (KnobKind::MemoryHigh, false) => &["memory.soft_limit_in_bytes"],
            (KnobKind::MemoryHigh, true) => &["memory.high"],
            (KnobKind::IoMax(_), false) => &[
                "blkio.throttle.read_bps_device",
                "blkio.throttle.write_bps_device",
                "blkio.throttle.read_iops_device",
                "blkio.throttle.write_iops_device",
            ],
            (KnobKind::IoMax(_), true) => &["io.max"],
            (KnobKind::IoWeight, false) => &["blkio.bfq.weight"],
            (KnobKind::IoWeight, true) => &["io.weight"],
            (KnobKind::IoBfqWeight, false) => &["blkio.bfq.weight"],
            (KnobKind::IoBfqWeight, true) => &["io.bfq.weight"],
        }
    }

    /// Why a file of this knob may be missing, for `Unsupported` errors.
    pub(crate) fn missing_reason(self, v2: bool) -> String {
        match (self, v2) {
            (KnobKind::CpuIdle, false) => {
                "this kernel's v1 cpu controller has no cpu.idle (it came with Linux 5.15)".into()
            }
            (KnobKind::IoWeight | KnobKind::IoBfqWeight, false) => {
                "this kernel's v1 blkio controller has no blkio.bfq.weight (the BFQ I/O scheduler \
                 is not built in or not loaded)"
                    .into()
            }
            (KnobKind::IoBfqWeight, true) => {
                "no io.bfq.weight in this v2 group: the io controller is not enabled in the \
                 parent's cgroup.subtree_control, or the BFQ I/O scheduler is not loaded (no \
                 device uses it)"
                    .into()
            }
            (KnobKind::IoWeight, true) => {
                "no io.weight in this v2 group: the io controller is not enabled in the parent's \
                 cgroup.subtree_control, or the kernel lacks the iocost controller"
                    .into()
            }
            (_, true) => format!(
                "no such file in this v2 group: is the {} controller enabled in the parent's \
                 cgroup.subtree_control?",
                self.controller().v2_name().unwrap_or("core")
            ),
            (_, false) => format!(
                "no such file in this v1 {} group (kernel without it?)",
                self.controller().v1_name()
            ),
        }
    }

    /// Reads the current value (native form) from group directory `dir`.
    pub(crate) fn read(self, dir: &Path, v2: bool) -> Result<Knob> {
        let files = self.files(v2);
        let path = |i: usize| dir.join(files[i]);
        let text = |i: usize| crate::fsio::read_trim(&path(i));
        Ok(match (self, v2) {
            (KnobKind::CpusetCpus, _) => Knob::CpusetCpus(parse_list(&path(0), &text(0)?)?),
            (KnobKind::CpusetMems, _) => Knob::CpusetMems(parse_list(&path(0), &text(0)?)?),
            (KnobKind::CpuMax, false) => {
                let period_us = parse_u64(&path(0), &text(0)?)?;
                let q = text(1)?;
                let quota_us = if q == "-1" {
                    None
                } else {
                    Some(parse_u64(&path(1), &q)?)
                };
                Knob::CpuMax {
                    quota_us,
                    period_us,
                }
            }
            (KnobKind::CpuMax, true) => {
                let t = text(0)?;
                let mut it = t.split_whitespace();
                let q = it.next().unwrap_or("");
                let quota_us = if q == "max" {
                    None
                } else {
                    Some(parse_u64(&path(0), q)?)
                };
                let period_us = match it.next() {
                    Some(p) => parse_u64(&path(0), p)?,
                    None => {
                        return Err(CgroupError::parse(path(0), t, "expected \"QUOTA PERIOD\""));
                    }
                };
                Knob::CpuMax {
                    quota_us,
                    period_us,
                }
            }
            (KnobKind::CpuIdle, _) => Knob::CpuIdle(parse_u64(&path(0), &text(0)?)? != 0),
            (KnobKind::CpuWeight, false) => Knob::CpuShares(parse_u64(&path(0), &text(0)?)?),
            (KnobKind::CpuWeight, true) => {
                Knob::CpuWeight(parse_u64(&path(0), &text(0)?)?.min(u64::from(u32::MAX)) as u32)
            }
            (KnobKind::Frozen, false) => {
                let t = text(0)?;
                match t.as_str() {
                    "THAWED" => Knob::Frozen(false),
                    "FROZEN" | "FREEZING" => Knob::Frozen(true),
                    _ => {
                        return Err(CgroupError::parse(
                            path(0),
                            t,
                            "expected THAWED, FREEZING or FROZEN",
                        ));
                    }
                }
            }
            (KnobKind::Frozen, true) => Knob::Frozen(parse_u64(&path(0), &text(0)?)? != 0),
            (KnobKind::MemoryMax, false) => {
                let v = parse_u64(&path(0), &text(0)?)?;
                // Unlimited reads as PAGE_COUNTER_MAX pages in bytes
                // (9223372036854771712 with 4 KiB pages).
                Knob::MemoryMax((v < V1_UNLIMITED_FROM).then_some(v))
            }
            (KnobKind::MemoryMax, true) => Knob::MemoryMax(v2_max(&path(0), &text(0)?)?),
            (KnobKind::MemoryHigh, false) => {
                let v = parse_u64(&path(0), &text(0)?)?;
                Knob::MemoryHigh((v < V1_UNLIMITED_FROM).then_some(v))
            }
            (KnobKind::MemoryHigh, true) => Knob::MemoryHigh(v2_max(&path(0), &text(0)?)?),
            (KnobKind::IoMax(device), false) => Knob::IoMax {
                device,
                read_bps: v1_device_value(&path(0), &text(0)?, device)?,
                write_bps: v1_device_value(&path(1), &text(1)?, device)?,
                read_iops: v1_device_value(&path(2), &text(2)?, device)?,
                write_iops: v1_device_value(&path(3), &text(3)?, device)?,
            },
            (KnobKind::IoMax(device), true) => {
                let [read_bps, write_bps, read_iops, write_iops] =
                    v2_io_max(&path(0), &text(0)?, device)?;
                Knob::IoMax {
                    device,
                    read_bps,
                    write_bps,
                    read_iops,
                    write_iops,
                }
            }
            (KnobKind::IoWeight, false) => {
                Knob::IoWeight(parse_u64(&path(0), &text(0)?)?.min(u64::from(u32::MAX)) as u32)
            }
            (KnobKind::IoWeight, true) => Knob::IoWeight(v2_io_weight(&path(0), &text(0)?)?),
            (KnobKind::IoBfqWeight, false) => {
                Knob::IoBfqWeight(parse_u64(&path(0), &text(0)?)?.min(u64::from(u32::MAX)) as u32)
            }
            (KnobKind::IoBfqWeight, true) => Knob::IoBfqWeight(v2_io_weight(&path(0), &text(0)?)?),
        })
    }
}
