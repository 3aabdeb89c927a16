//! The configuration of PerfIso's other resources: the `[memory]`, `[io]`
//! and `[egress]` tables, the `[[batch]]` keys they add (`priority`,
//! `memory_high`, `memory_max`, `io`, `io_weight`, `egress`), and the
//! checks that need only the file. Checks against the machine are in
//! [`super::plan`].

use crate::error::ConfigError;
use crate::units::{ByteSize, MemAmount};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Default kill log (`memory.kill_log`).
pub const DEFAULT_KILL_LOG: &str = "/run/elfen/batch-kills.json";

/// Which line of `/proc/pressure/memory` the watermark watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PressureLine {
    /// Time in which *some* task stalled on memory (default): the first
    /// sign that the kernel reclaims.
    #[default]
    Some,
    /// Time in which *every* non-idle task stalled on memory (on a machine
    /// with few runnable tasks, one batch job in reclaim is enough).
    Full,
    /// Pressure is not watched.
    Off,
}

impl PressureLine {
    /// The word PSI uses (`some` / `full`).
    pub fn word(self) -> &'static str {
        match self {
            PressureLine::Full => "full",
            PressureLine::Some => "some",
            PressureLine::Off => "off",
        }
    }
}

/// `[memory]`: the machine watermark below which batch work is killed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySection {
    /// Kill batch work while `MemAvailable` (`/proc/meminfo`) is below this:
    /// bytes (`"1G"`) or a share of `MemTotal` (`"2%"`, the default); `0`
    /// turns the free-memory watermark off.
    pub min_available: MemAmount,
    /// The PSI line watched (`some`, the default; `full`; `off`): a PSI
    /// trigger on it wakes the watermark's check at once (the kernel wakes
    /// the daemon; no polling).
    pub pressure: PressureLine,
    /// The trigger: memory stalls above this share of `pressure_window_ms`
    /// (default 10 %).
    pub pressure_pct: u32,
    /// Whether the trigger kills by itself (default false: it wakes the
    /// check of `MemAvailable`, which decides). A batch job reclaiming its
    /// own memory stalls too, so pressure alone says little about the LC.
    pub pressure_kills: bool,
    /// The PSI window, ms (500..=10000, default 2000; without
    /// `CAP_SYS_RESOURCE` the kernel takes only whole multiples of 2 s).
    pub pressure_window_ms: u64,
    /// How often `MemAvailable` is read, ms (default 50).
    pub poll_ms: u64,
    /// After a kill, how long to wait for the memory to come back before
    /// the next kill, ms (default 1000).
    pub cooldown_ms: u64,
    /// Where kills are recorded (default `/run/elfen/batch-kills.json`,
    /// where `elfen status` looks).
    pub kill_log: PathBuf,
}

impl Default for MemorySection {
    fn default() -> Self {
        MemorySection {
            min_available: MemAmount::Percent(2.0),
            pressure: PressureLine::Some,
            pressure_pct: 10,
            pressure_kills: false,
            pressure_window_ms: 2000,
            poll_ms: 50,
            cooldown_ms: 1000,
            kill_log: PathBuf::from(DEFAULT_KILL_LOG),
        }
    }
}

/// `[io]`: a total I/O budget of one device that the batch groups share by
/// `io_weight` (PerfIso's deficit-weighted round robin, re-divided every
/// `period_ms` through each group's `io.max`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IoSection {
    /// The device (`"/dev/vda"` or `"254:0"`); none: no shared budget.
    pub device: Option<String>,
    /// Read budget of all batch groups together, bytes/s.
    pub read_bps: Option<ByteSize>,
    /// Write budget, bytes/s.
    pub write_bps: Option<ByteSize>,
    /// Read budget, I/O operations/s.
    pub read_iops: Option<u64>,
    /// Write budget, I/O operations/s.
    pub write_iops: Option<u64>,
    /// How often the budget is re-divided, ms (default 200).
    pub period_ms: u64,
}

impl Default for IoSection {
    fn default() -> Self {
        IoSection {
            device: None,
            read_bps: None,
            write_bps: None,
            read_iops: None,
            write_iops: None,
            period_ms: 200,
        }
    }
}

impl IoSection {
    /// Whether a shared budget is configured.
    pub fn budgeted(&self) -> bool {
        self.device.is_some()
    }
}

/// What to do where low-priority egress cannot work here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WhenUnsupported {
    /// Refuse to start (default).
    #[default]
    Refuse,
    /// Start without it, saying why.
    Warn,
}

/// `[egress]`: how batch traffic is marked low priority.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressSection {
    /// The `skb->priority` given to packets of `egress = "low"` groups
    /// (default 1, `TC_PRIO_FILLER`: the last of the three bands of
    /// `pfifo_fast` and of a default `prio` qdisc; 0..=15 are the TC_PRIO
    /// values a priomap knows; `htb` and `hfsc` take a class id
    /// `0xMMMMmmmm` = `MMMM:mmmm` as the class itself).
    pub priority: u32,
    /// Also set this firewall mark (0: leave the mark alone), for `fw`
    /// filters of `htb` / `hfsc` classes.
    pub mark: u32,
    /// `refuse` (default) or `warn` where cgroup BPF or a cgroup2 tree is
    /// missing.
    pub unsupported: WhenUnsupported,
}

impl Default for EgressSection {
    fn default() -> Self {
        EgressSection {
            priority: 1,
            mark: 0,
            unsupported: WhenUnsupported::Refuse,
        }
    }
}

/// `[[batch]] egress`: the group's network traffic class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EgressClass {
    /// Untouched (default).
    #[default]
    Normal,
    /// Sent at `[egress] priority` (behind the LC's traffic in a priority
    /// qdisc).
    Low,
}

/// `[[batch]] io = [ { device = …, read_bps = … } ]`: static limits of one
/// device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct IoLimitSection {
    /// The device (`"/dev/vda"` or `"254:0"`): a whole disk.
    pub device: String,
    /// Read limit, bytes/s.
    pub read_bps: Option<ByteSize>,
    /// Write limit, bytes/s.
    pub write_bps: Option<ByteSize>,
    /// Read limit, operations/s.
    pub read_iops: Option<u64>,
    /// Write limit, operations/s.
    pub write_iops: Option<u64>,
}

/// The `[[batch]]` keys of this module, as [`crate::config::BatchSection`]
/// holds them.
#[derive(Debug, Clone, Copy)]
pub struct BatchKeys<'a> {
    /// `priority`.
    pub priority: i32,
    /// `memory_high`.
    pub memory_high: Option<ByteSize>,
    /// `memory_max`.
    pub memory_max: Option<ByteSize>,
    /// `io`.
    pub io: &'a [IoLimitSection],
    /// `io_weight`.
    pub io_weight: Option<u32>,
    /// `egress`.
    pub egress: EgressClass,
}

fn e(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(field, reason)
}

/// File-only checks of the tables.
pub fn check_tables(memory: &MemorySection, io: &IoSection) -> Result<(), ConfigError> {
    if memory.poll_ms == 0 {
        return Err(e("memory.poll_ms", "must be at least 1"));
    }
    if memory.pressure != PressureLine::Off {
        if !(500..=10_000).contains(&memory.pressure_window_ms) {
            return Err(e(
                "memory.pressure_window_ms",
                format!(
                    "{} ms: PSI windows are 500..=10000 ms",
                    memory.pressure_window_ms
                ),
            ));
        }
        if !(1..=100).contains(&memory.pressure_pct) {
            return Err(e(
                "memory.pressure_pct",
                format!(
                    "{} %: 1..=100 (pressure = \"off\" turns it off)",
                    memory.pressure_pct
                ),
            ));
        }
    }
    if memory.kill_log.as_os_str().is_empty() {
        return Err(e("memory.kill_log", "must name a file"));
    }
    if io.period_ms < 10 {
        return Err(e("io.period_ms", "must be at least 10"));
    }
    let dims = [
        io.read_bps.map(|b| b.0),
        io.write_bps.map(|b| b.0),
        io.read_iops,
        io.write_iops,
    ];
    if dims.contains(&Some(0)) {
        return Err(e("io", "a budget of 0 (leave it out for none)"));
    }
    match (&io.device, dims.iter().any(Option::is_some)) {
        (Some(d), false) => {
            return Err(e(
                "io",
                format!(
                    "device {d:?} has no budget: give read_bps, write_bps, read_iops or write_iops"
                ),
            ));
        }
        (None, true) => return Err(e("io.device", "a budget needs its device")),
        (Some(d), true) if d.is_empty() => return Err(e("io.device", "must not be empty")),
        _ => {}
    }
    Ok(())
}

/// File-only checks of one group's keys (`f(key)` names the field).
pub fn check_batch(f: &dyn Fn(&str) -> String, k: BatchKeys<'_>) -> Result<(), ConfigError> {
    if let (Some(h), Some(m)) = (k.memory_high, k.memory_max) {
        if h > m {
            return Err(e(
                f("memory_high"),
                format!("{h} is above memory_max ({m}): the soft limit must be the lower one"),
            ));
        }
    }
    for (n, v) in [("memory_high", k.memory_high), ("memory_max", k.memory_max)] {
        if v.is_some_and(|b| b.0 < 1 << 20) {
            return Err(e(
                f(n),
                format!("{}: below 1 MiB", v.unwrap_or(ByteSize(0))),
            ));
        }
    }
    for (j, l) in k.io.iter().enumerate() {
        let g = |x: &str| f(&format!("io[{j}].{x}"));
        if l.device.is_empty() {
            return Err(e(g("device"), "a device (\"/dev/vda\" or \"254:0\")"));
        }
        let v = [
            l.read_bps.map(|b| b.0),
            l.write_bps.map(|b| b.0),
            l.read_iops,
            l.write_iops,
        ];
        if v.iter().all(Option::is_none) {
            return Err(e(
                f(&format!("io[{j}]")),
                "no limit: give read_bps, write_bps, read_iops or write_iops",
            ));
        }
        if v.contains(&Some(0)) {
            return Err(e(
                f(&format!("io[{j}]")),
                "a limit of 0 (leave it out for none)",
            ));
        }
        if k.io[..j].iter().any(|o| o.device == l.device) {
            return Err(e(g("device"), format!("{:?} is listed twice", l.device)));
        }
    }
    if let Some(w) = k.io_weight {
        if !(1..=10_000).contains(&w) {
            return Err(e(f("io_weight"), format!("{w}: 1..=10000 (default 100)")));
        }
    }
    Ok(())
}
