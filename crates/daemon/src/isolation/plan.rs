//! Memory, I/O and egress resolved against the machine: devices named by
//! number, the watermark in bytes, PSI present or not, the kernel I/O
//! weight offered and honoured or not, cgroup BPF usable or not. Reading
//! only; problems come back as `field: reason`, facts the operator should
//! know as notes.

use super::config::{EgressClass, PressureLine, WhenUnsupported};
use crate::config::{BatchSection, Config};
use crate::error::ConfigError;
use crate::plan::{GroupPlan, GroupSource};
use crate::units::human_bytes;
use elfen_cgroup::{Controller, Device, GroupPath, Hierarchy, Knob, KnobKind};
use std::path::{Path, PathBuf};

/// A block device, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDevice {
    /// Its numbers.
    pub device: Device,
    /// Its kernel name (`vda`).
    pub name: String,
    /// The I/O scheduler in use (`mq-deadline`, `bfq`, `none`).
    pub scheduler: String,
}

impl std::fmt::Display for BlockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.device)
    }
}

/// One batch group's memory, I/O and egress.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupIso {
    /// Kill order (lowest first).
    pub priority: i32,
    /// `memory_high`, bytes.
    pub memory_high: Option<u64>,
    /// `memory_max`, bytes.
    pub memory_max: Option<u64>,
    /// Static `io.max` limits, one knob per device.
    pub io_max: Vec<Knob>,
    /// The kernel I/O weight to set (where the group offers the file):
    /// v2 `io.weight` (iocost), v1 `blkio.bfq.weight` (BFQ; at most 1000).
    pub io_weight: Option<u32>,
    /// v2: the BFQ scheduler's weight to set (`io.bfq.weight`, where the
    /// group offers it: BFQ is loaded; at most 1000). BFQ reads only this
    /// file on v2, iocost only `io.weight`: both are written, as systemd
    /// writes them for `IOWeight=`.
    pub io_bfq_weight: Option<u32>,
    /// Its share of the `[io]` budget (default 100).
    pub budget_weight: u32,
    /// Low-priority egress.
    pub egress: bool,
    /// The group's directory in the v2 tree is created (and the group's
    /// processes moved there) for the BPF program: an operator's group on
    /// a hybrid layout.
    pub egress_mirror: bool,
}

/// The `[io]` budget, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoBudget {
    /// The device.
    pub device: BlockDevice,
    /// Read bytes/s, write bytes/s, read IOPS, write IOPS (`None`: not
    /// budgeted).
    pub limits: [Option<u64>; 4],
    /// The re-division period, ms.
    pub period_ms: u64,
}

/// The machine-wide part.
#[derive(Debug, Clone, PartialEq)]
pub struct IsolationPlan {
    /// `MemTotal`, bytes.
    pub mem_total: u64,
    /// Kill below this `MemAvailable`, bytes (0: off).
    pub min_available: u64,
    /// The PSI trigger written to `/proc/pressure/memory`
    /// (`"some 200000 2000000"`), when pressure is watched and PSI exists.
    pub psi_trigger: Option<String>,
    /// Whether pressure kills by itself (else it only wakes the check of
    /// `MemAvailable`).
    pub pressure_kills: bool,
    /// How the watermark is watched, in words.
    pub watch: String,
    /// The shared I/O budget.
    pub io_budget: Option<IoBudget>,
    /// Egress marking: `(priority, mark)`, when some group is `low` and it
    /// works here.
    pub egress: Option<(u32, u32)>,
}

/// Reads `MemTotal` and `MemAvailable` (bytes) from `/proc/meminfo` text.
pub fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// `/proc/meminfo`'s `MemTotal` and `MemAvailable`, bytes.
pub fn meminfo() -> (Option<u64>, Option<u64>) {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default())
}

/// The machine-wide checks; `notes` gets what to say.
pub fn resolve(config: &Config, notes: &mut Vec<String>) -> Result<IsolationPlan, ConfigError> {
    let m = &config.memory;
    let (total, avail) = meminfo();
    let total = total
        .ok_or_else(|| ConfigError::new("memory", "cannot read MemTotal from /proc/meminfo"))?;
    let min_available = m.min_available.bytes(total);
    if min_available > total {
        return Err(ConfigError::new(
            "memory.min_available",
            format!(
                "{} is above this machine's memory ({} MemTotal)",
                human_bytes(min_available),
                human_bytes(total)
            ),
        ));
    }
    if let Some(a) = avail.filter(|&a| min_available > a) {
        notes.push(format!(
            "memory: MemAvailable is {} now, below the watermark {}: batch work is killed \
             as soon as the daemon starts",
            human_bytes(a),
            human_bytes(min_available)
        ));
    }
    let psi = Path::new("/proc/pressure/memory").exists();
    let psi_trigger = if m.pressure != PressureLine::Off && psi {
        psi_trigger(m.pressure, m.pressure_pct, m.pressure_window_ms, notes)
    } else {
        None
    };
    let mut watch = if min_available > 0 {
        format!(
            "MemAvailable below {} (read every {} ms)",
            human_bytes(min_available),
            m.poll_ms
        )
    } else {
        "free memory not watched (min_available = 0)".to_string()
    };
    match (&psi_trigger, m.pressure) {
        (Some(t), _) => {
            watch += &format!(
                "; memory pressure: a PSI trigger \"{t}\" (stall µs per window µs) on \
                 /proc/pressure/memory wakes the check at once{}",
                if m.pressure_kills {
                    ", and kills by itself"
                } else {
                    ""
                }
            )
        }
        (None, PressureLine::Off) => {}
        (None, _) if !psi => {
            watch +=
                "; memory pressure not watched: this kernel has no PSI (/proc/pressure/memory)";
        }
        (None, _) => watch += "; memory pressure not watched (see above)",
    }
    let io_budget = match &config.io.device {
        Some(d) => {
            let io = &config.io;
            Some(IoBudget {
                device: resolve_device("io.device", d)?,
                limits: [
                    io.read_bps.map(|b| b.0),
                    io.write_bps.map(|b| b.0),
                    io.read_iops,
                    io.write_iops,
                ],
                period_ms: io.period_ms,
            })
        }
        None => None,
    };
    let egress = egress(config, notes)?;
    Ok(IsolationPlan {
        mem_total: total,
        min_available,
        psi_trigger,
        pressure_kills: m.pressure_kills,
        watch,
        io_budget,
        egress,
    })
}

/// The PSI trigger for `line` above `pct` % of `window_ms`, tried on
/// `/proc/pressure/memory` (and dropped at once). Without
/// `CAP_SYS_RESOURCE` the kernel takes only windows of whole multiples of
/// 2 s: the window is rounded up (the share kept) and that is said; any
/// other refusal is said and pressure is not watched.
fn psi_trigger(
    line: PressureLine,
    pct: u32,
    window_ms: u64,
    notes: &mut Vec<String>,
) -> Option<String> {
    let make = |w_ms: u64| {
        let w = w_ms * 1000;
        format!("{} {} {w}", line.word(), w * u64::from(pct) / 100)
    };
    let t = make(window_ms);
    match open_trigger(&t) {
        Ok(_) => Some(t),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && window_ms % 2000 != 0 => {
            let w = window_ms.div_ceil(2000) * 2000;
            let t2 = make(w);
            match open_trigger(&t2) {
                Ok(_) => {
                    notes.push(format!(
                        "memory: the kernel refused a PSI window of {window_ms} ms (without \
                         CAP_SYS_RESOURCE it takes whole multiples of 2 s): {w} ms is used"
                    ));
                    Some(t2)
                }
                Err(e) => {
                    notes.push(format!(
                        "memory: pressure not watched: the kernel refused the PSI trigger {t:?} \
                         and {t2:?}: {e}"
                    ));
                    None
                }
            }
        }
        Err(e) => {
            notes.push(format!(
                "memory: pressure not watched: the kernel refused the PSI trigger {t:?}: {e}"
            ));
            None
        }
    }
}

/// Opens `/proc/pressure/memory` and writes `trigger` (kept while the fd is
/// open; the kernel then flags the fd `POLLPRI` at each crossing).
pub fn open_trigger(trigger: &str) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let path = c"/proc/pressure/memory";
    // SAFETY: a NUL-terminated path; the fd is owned below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let t = std::ffi::CString::new(trigger).map_err(std::io::Error::other)?;
    let b = t.as_bytes_with_nul();
    // SAFETY: writes the trigger including its NUL, as the kernel documents.
    if unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), b.len()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// Whether low-priority egress works here: a cgroup2 tree and a loadable
/// cgroup-skb program. `None` when no group asks for it, or (with
/// `unsupported = "warn"`) when it cannot work, said in a note.
fn egress(config: &Config, notes: &mut Vec<String>) -> Result<Option<(u32, u32)>, ConfigError> {
    let Some(i) = config
        .batch
        .iter()
        .position(|b| b.egress == EgressClass::Low)
    else {
        return Ok(None);
    };
    let why = match Hierarchy::detect(&config.cgroup_root)
        .and_then(|h| h.controller_root(Controller::Unified))
    {
        Err(e) => Some(e.to_string()),
        Ok(_) => elfen_bpf::egress::probe().err().map(|e| e.to_string()),
    };
    match (why, config.egress.unsupported) {
        (None, _) => Ok(Some((config.egress.priority, config.egress.mark))),
        (Some(w), WhenUnsupported::Refuse) => Err(ConfigError::new(
            format!("batch[{i}].egress"),
            format!(
                "low-priority egress is not supported here: {w} (set [egress] unsupported = \
                 \"warn\" to start without it)"
            ),
        )),
        (Some(w), WhenUnsupported::Warn) => {
            notes.push(format!(
                "egress: not supported here, batch traffic is sent at normal priority: {w}"
            ));
            Ok(None)
        }
    }
}

/// One group's part: sets `g.iso` and adds the controllers it needs to
/// `g.controllers`.
pub fn resolve_group(
    i: usize,
    b: &BatchSection,
    h: &Hierarchy,
    g: &mut GroupPlan,
    iso: &IsolationPlan,
    notes: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let existing = g.source == GroupSource::Existing;
    let path = &g.path;
    let controllers = &mut g.controllers;
    let f = |k: &str| format!("batch[{i}].{k}");
    let before = controllers.clone();
    let mut need = |c: Controller| {
        if !controllers.contains(&c) {
            controllers.push(c);
        }
    };
    let memory = b.memory_high.is_some() || b.memory_max.is_some();
    if memory {
        need(Controller::Memory);
    }
    let mut io_max = Vec::new();
    for (j, l) in b.io.iter().enumerate() {
        let dev = resolve_device(&f(&format!("io[{j}].device")), &l.device)?;
        io_max.push(Knob::IoMax {
            device: dev.device,
            read_bps: l.read_bps.map(|x| x.0),
            write_bps: l.write_bps.map(|x| x.0),
            read_iops: l.read_iops,
            write_iops: l.write_iops,
        });
    }
    let io = !io_max.is_empty() || b.io_weight.is_some() || iso.io_budget.is_some();
    if io {
        need(Controller::Io);
    }
    let egress = b.egress == EgressClass::Low && iso.egress.is_some();
    let mirror = egress && existing && h.layout() == elfen_cgroup::Layout::Hybrid;
    if egress && !mirror {
        need(Controller::Unified);
    }
    for &c in controllers.iter().filter(|c| !before.contains(c)) {
        let field = f(match c {
            Controller::Memory => "memory_max",
            Controller::Io => "io",
            _ => "egress",
        });
        let dir = h
            .group_dir(c, path)
            .map_err(|e| ConfigError::new(field.clone(), e.to_string()))?;
        if existing && !dir.is_dir() {
            return Err(ConfigError::new(
                field,
                format!(
                    "the group is not in the {c} hierarchy: {} does not exist",
                    dir.display()
                ),
            ));
        }
        if !existing
            && dir.exists()
            && !before
                .iter()
                .any(|&b| h.group_dir(b, path).ok() == Some(dir.clone()))
        {
            return Err(ConfigError::new(
                field,
                format!("{} exists already", dir.display()),
            ));
        }
    }
    let io_weight = b.io_weight.filter(|_| io);
    if let Some(w) = io_weight {
        weight_notes(b, w, h, path, existing, iso, &io_max, notes);
    }
    let v2 = h.is_v2(Controller::Io);
    let offered = |k: KnobKind| weight_offered(h, path, existing, k);
    if memory && existing {
        usage_notes(b, h, path, notes);
    }
    g.iso = GroupIso {
        priority: b.priority,
        memory_high: b.memory_high.map(|x| x.0),
        memory_max: b.memory_max.map(|x| x.0),
        io_max,
        io_weight: io_weight
            .filter(|_| offered(KnobKind::IoWeight))
            .map(|w| if v2 { w } else { bfq_weight(w) }),
        io_bfq_weight: io_weight
            .filter(|_| v2 && offered(KnobKind::IoBfqWeight))
            .map(bfq_weight),
        budget_weight: b.io_weight.unwrap_or(100),
        egress,
        egress_mirror: mirror,
    };
    Ok(())
}

/// BFQ's weights are 1..=1000: `io_weight` above is applied as 1000.
pub fn bfq_weight(w: u32) -> u32 {
    w.min(1000)
}

/// Whether the group has (or a new group will have) the weight file of
/// `kind` ([`KnobKind::IoWeight`] or [`KnobKind::IoBfqWeight`]).
fn weight_offered(h: &Hierarchy, path: &GroupPath, existing: bool, kind: KnobKind) -> bool {
    let file = kind.files(h.is_v2(Controller::Io))[0];
    let Ok(dir) = h.group_dir(Controller::Io, path) else {
        return false;
    };
    if existing {
        return dir.join(file).exists();
    }
    // a new group: as its siblings show it (the root lacks the file)
    let Ok(root) = h.controller_root(Controller::Io) else {
        return false;
    };
    let entries: Vec<PathBuf> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    if entries.iter().any(|p| p.join(file).exists()) {
        return true;
    }
    if !h.is_v2(Controller::Io) {
        // v1: BFQ's statistics files in the root say it is there
        return entries.iter().any(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("blkio.bfq."))
        });
    }
    // v2, where no sibling has the io controller on yet (the executor
    // turns it on for the new group): iocost's files are in the root when
    // it is built; BFQ's appear in every group once it is registered,
    // which a device's scheduler list shows
    match kind {
        KnobKind::IoWeight => root.join("io.cost.qos").exists(),
        KnobKind::IoBfqWeight => bfq_registered(),
        _ => false,
    }
}

/// Whether the BFQ scheduler is registered (built in or its module
/// loaded): a block device's scheduler list names it.
fn bfq_registered() -> bool {
    std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            std::fs::read_to_string(e.path().join("queue/scheduler")).is_ok_and(|t| {
                t.split_whitespace()
                    .any(|w| w.trim_matches(['[', ']']) == "bfq")
            })
        })
}

/// What `--check` says of a group's `io_weight`: which weight files it
/// gets, and each device of its I/O configuration whose scheduler ignores
/// them (iocost reads v2 `io.weight` where `io.cost.qos` enables it for
/// the device; BFQ reads `io.bfq.weight` on v2, `blkio.bfq.weight` on v1).
#[allow(clippy::too_many_arguments)]
fn weight_notes(
    b: &BatchSection,
    w: u32,
    h: &Hierarchy,
    path: &GroupPath,
    existing: bool,
    iso: &IsolationPlan,
    io_max: &[Knob],
    notes: &mut Vec<String>,
) {
    let v2 = h.is_v2(Controller::Io);
    let iocost_file = v2 && weight_offered(h, path, existing, KnobKind::IoWeight);
    let bfq_kind = if v2 {
        KnobKind::IoBfqWeight
    } else {
        KnobKind::IoWeight
    };
    let bfq_file = weight_offered(h, path, existing, bfq_kind);
    let bfq_name = bfq_kind.files(v2)[0];
    if !iocost_file && !bfq_file {
        notes.push(format!(
            "batch {}: io_weight {w} divides the [io] budget only: the group offers no kernel \
             I/O weight ({})",
            b.name,
            if v2 {
                "neither io.weight, the iocost controller's, nor io.bfq.weight: the BFQ \
                 scheduler is not loaded"
            } else {
                "no blkio.bfq.weight: BFQ is not built in or not loaded"
            }
        ));
        return;
    }
    if bfq_file && w > 1000 {
        notes.push(format!(
            "batch {}: io_weight {w} is above BFQ's range: {bfq_name} = {}",
            b.name,
            bfq_weight(w)
        ));
    }
    let mut devices: Vec<Device> = io_max
        .iter()
        .map(|k| match k.kind() {
            KnobKind::IoMax(d) => d,
            _ => unreachable!("io_max holds IoMax knobs"),
        })
        .collect();
    if let Some(bud) = &iso.io_budget {
        devices.push(bud.device.device);
    }
    devices.sort();
    devices.dedup();
    for d in devices {
        let Ok(dev) = describe_device(d) else {
            continue;
        };
        let honoured =
            (bfq_file && dev.scheduler == "bfq") || (iocost_file && iocost_enabled(h, d));
        if !honoured {
            notes.push(format!(
                "batch {}: its I/O weight {w} is set, but device {dev} uses the {} scheduler, \
                 which ignores it ({}); the weight still divides the [io] budget",
                b.name,
                dev.scheduler,
                if v2 {
                    "io.weight needs iocost enabled for the device in io.cost.qos, \
                     io.bfq.weight the bfq scheduler"
                } else {
                    "blkio.bfq.weight needs the bfq scheduler"
                }
            ));
        }
    }
}

/// v2: whether the root's `io.cost.qos` enables iocost for `d`.
fn iocost_enabled(h: &Hierarchy, d: Device) -> bool {
    let Ok(root) = h.controller_root(Controller::Io) else {
        return false;
    };
    std::fs::read_to_string(root.join("io.cost.qos"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with(&format!("{d} ")) && l.contains("enable=1"))
}

/// A memory limit below what an operator's group uses now is applied as
/// the kernel allows: said before anything is applied.
fn usage_notes(b: &BatchSection, h: &Hierarchy, path: &GroupPath, notes: &mut Vec<String>) {
    let Ok(dir) = h.group_dir(Controller::Memory, path) else {
        return;
    };
    let file = if h.is_v2(Controller::Memory) {
        "memory.current"
    } else {
        "memory.usage_in_bytes"
    };
    let Some(used) = std::fs::read_to_string(dir.join(file))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
    else {
        return;
    };
    for (k, v) in [("memory_high", b.memory_high), ("memory_max", b.memory_max)] {
        if let Some(v) = v.filter(|v| v.0 < used) {
            notes.push(format!(
                "batch {}: {k} {v} is below what the group uses now ({}): {}",
                b.name,
                human_bytes(used),
                if k == "memory_high" {
                    "the kernel reclaims it down to the soft limit as it can"
                } else {
                    "the hard limit is applied at the group's use (the kernel would reclaim or \
                     OOM-kill to get below it) and lowered towards memory_max at each rescan as \
                     the use falls; memory_high, if set, presses it down"
                }
            ));
        }
    }
}

/// `"/dev/vda"` or `"254:0"` → a whole block disk of this machine; a
/// device that does not exist, that is no block device or that is a
/// partition is refused, naming it (`field` names the key).
pub fn resolve_device(field: &str, s: &str) -> Result<BlockDevice, ConfigError> {
    let err = |r: String| ConfigError::new(field, r);
    let device = if s.starts_with('/') {
        use std::os::unix::fs::FileTypeExt;
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(s) {
            Ok(md) => {
                if !md.file_type().is_block_device() {
                    return Err(err(format!("{s} is not a block device")));
                }
                let rdev = md.rdev();
                Device {
                    major: libc::major(rdev),
                    minor: libc::minor(rdev),
                }
            }
            // a private /dev (a unit's PrivateDevices=yes, as the packaged
            // one has) holds no block device: a kernel name is looked up
            // in sysfs instead
            Err(e) => sysfs_device(s).ok_or_else(|| {
                err(format!(
                    "no device {s}: {e} (under a unit with PrivateDevices=yes, name a disk \
                     by its kernel name, /dev/NAME, or by number)"
                ))
            })?,
        }
    } else {
        s.parse::<Device>().map_err(|e| {
            err(format!(
                "{e}: name a block device by path (\"/dev/vda\") or number (\"254:0\")"
            ))
        })?
    };
    let dev = describe_device(device).map_err(err)?;
    let sys = PathBuf::from(format!("/sys/dev/block/{device}"));
    if sys.join("partition").exists() {
        let disk = std::fs::canonicalize(&sys)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .and_then(|p| std::fs::read_to_string(p.join("dev")).ok().map(|d| (p, d)));
        return Err(err(format!(
            "{s} is a partition ({}){}: I/O limits take whole disks",
            dev.name,
            disk.map_or(String::new(), |(p, d)| format!(
                " of {} ({})",
                p.file_name().unwrap_or_default().to_string_lossy(),
                d.trim()
            ))
        )));
    }
    Ok(dev)
}

/// The numbers of `/dev/NAME` from sysfs (`/sys/class/block/NAME/dev`),
/// whether or not this process's `/dev` shows the device.
fn sysfs_device(path: &str) -> Option<Device> {
    let name = path.strip_prefix("/dev/").filter(|n| !n.contains('/'))?;
    std::fs::read_to_string(format!("/sys/class/block/{name}/dev"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Name and scheduler of a block device; an error naming it when it does
/// not exist here.
pub fn describe_device(device: Device) -> Result<BlockDevice, String> {
    let sys = PathBuf::from(format!("/sys/dev/block/{device}"));
    if !sys.exists() {
        return Err(format!(
            "no block device {device} on this machine ({} does not exist)",
            sys.display()
        ));
    }
    let name = std::fs::canonicalize(&sys)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
        .unwrap_or_else(|| device.to_string());
    let scheduler = std::fs::read_to_string(sys.join("queue/scheduler"))
        .ok()
        .and_then(|t| {
            t.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(['[', ']']).to_string())
        })
        .unwrap_or_else(|| "none".into());
    Ok(BlockDevice {
        device,
        name,
        scheduler,
    })
}

/// What `--check` says of memory, I/O and egress (after the groups).
pub fn describe(iso: &IsolationPlan, groups: &[GroupPlan]) -> String {
    let mut s = format!("memory watermark: {}\n", iso.watch);
    if let Some(b) = &iso.io_budget {
        s += &format!(
            "I/O budget of {}: {} divided by io_weight every {} ms\n",
            b.device,
            super::budget_words(b.limits),
            b.period_ms
        );
    }
    for g in groups {
        let i = &g.iso;
        let mut parts = Vec::new();
        if let Some(h) = i.memory_high {
            parts.push(format!("memory soft limit {}", human_bytes(h)));
        }
        if let Some(m) = i.memory_max {
            parts.push(format!("memory hard limit {}", human_bytes(m)));
        }
        parts.extend(i.io_max.iter().map(|k| k.to_string()));
        if let Some(w) = i.io_weight {
            parts.push(format!("I/O weight {w}"));
        }
        if let Some(w) = i.io_bfq_weight {
            parts.push(format!("BFQ weight {w}"));
        }
        if i.egress {
            let (p, m) = iso.egress.unwrap_or((0, 0));
            parts.push(format!(
                "egress at priority {p}{}",
                if m != 0 {
                    format!(", mark {m}")
                } else {
                    String::new()
                }
            ));
        }
        s += &format!(
            "batch {}: kill priority {}{}{}\n",
            g.name,
            i.priority,
            if parts.is_empty() { "" } else { "; " },
            parts.join("; ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_parses() {
        let t = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   2000 kB\n";
        assert_eq!(
            parse_meminfo(t),
            (Some(24_000_000 * 1024), Some(2000 * 1024))
        );
        assert_eq!(parse_meminfo(""), (None, None));
    }

    #[test]
    fn devices_that_do_not_exist_are_named() {
        let e = resolve_device("io.device", "4095:4095").unwrap_err();
        assert_eq!(e.field, "io.device");
        assert!(e.reason.contains("no block device 4095:4095"), "{e}");
        let e = resolve_device("batch[0].io[0].device", "/dev/elfen-no-such-disk").unwrap_err();
        assert!(
            e.reason.contains("no device /dev/elfen-no-such-disk"),
            "{e}"
        );
        let e = resolve_device("io.device", "/dev/null").unwrap_err();
        assert!(e.reason.contains("not a block device"), "{e}");
        let e = resolve_device("io.device", "sda").unwrap_err();
        assert!(e.reason.contains("major:minor"), "{e}");
    }

    #[test]
    fn a_disk_is_found_by_its_kernel_name_without_its_dev_node() {
        assert_eq!(sysfs_device("/dev/elfen-no-such-disk"), None);
        assert_eq!(sysfs_device("/dev/mapper/x"), None);
        // every block device of this machine, as sysfs lists them
        let mut seen = 0;
        for e in std::fs::read_dir("/sys/class/block").unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let want: Device = std::fs::read_to_string(e.path().join("dev"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert_eq!(sysfs_device(&format!("/dev/{name}")), Some(want), "{name}");
            seen += 1;
        }
        assert!(seen > 0, "no block device in /sys/class/block");
    }
}
