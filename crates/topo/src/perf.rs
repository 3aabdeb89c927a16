//! `perf_event_open` for hardware counters and software events: the one
//! place elfen builds a `perf_event_attr` (libc has no binding for the
//! attribute struct). Used by the feature probe ([`crate::Features`]), by
//! the runtime's IPC sampler (dynamic refresh), and by the profiler's page
//! fault signal (software events sampled by a BPF program).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `PERF_COUNT_HW_CPU_CYCLES`.
pub const HW_CPU_CYCLES: u64 = 0;
/// `PERF_COUNT_HW_INSTRUCTIONS`.
pub const HW_INSTRUCTIONS: u64 = 1;
/// `read_format` bit `PERF_FORMAT_GROUP`: one read returns the whole group.
pub const FORMAT_GROUP: u64 = 1 << 3;
/// Attribute flag bit `disabled`.
pub const DISABLED: u64 = 1 << 0;
/// Attribute flag bit `exclude_kernel`.
pub const EXCLUDE_KERNEL: u64 = 1 << 5;
/// Attribute flag bit `exclude_hv`.
pub const EXCLUDE_HV: u64 = 1 << 6;

const PERF_TYPE_HARDWARE: u32 = 0;
/// `PERF_TYPE_SOFTWARE`: the kernel's software events (page faults,
/// context switches), present where hardware counters are not.
pub const TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_PAGE_FAULTS`: counted where a fault is taken, before it
/// is handled.
pub const SW_PAGE_FAULTS: u64 = 2;
/// `PERF_COUNT_SW_PAGE_FAULTS_MIN`: counted once a minor fault is handled.
pub const SW_PAGE_FAULTS_MIN: u64 = 5;
/// `PERF_COUNT_SW_PAGE_FAULTS_MAJ`: counted once a major fault is handled.
pub const SW_PAGE_FAULTS_MAJ: u64 = 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// `struct perf_event_attr` up to `config1` (`PERF_ATTR_SIZE_VER0`, 64
/// bytes), which every kernel with perf accepts.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// Bitfield: bit 0 `disabled`, bit 5 `exclude_kernel`, bit 6 `exclude_hv`.
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 64);

/// Opens hardware counter `config` (`HW_*`) with `perf_event_open`'s
/// `pid`/`cpu` meaning (pid 0, cpu -1: the calling thread on any CPU;
/// pid -1, cpu N: every task on CPU N), in `group`'s group if given, with
/// `read_format` and the attribute `flags` bits.
pub fn open_hw(
    config: u64,
    pid: libc::pid_t,
    cpu: libc::c_int,
    group: Option<BorrowedFd<'_>>,
    read_format: u64,
    flags: u64,
) -> std::io::Result<OwnedFd> {
    open(
        PerfEventAttr {
            type_: PERF_TYPE_HARDWARE,
            config,
            read_format,
            flags,
            ..Default::default()
        },
        pid,
        cpu,
        group,
    )
}

/// Opens software event `config` (`SW_*`) sampling every `sample_period`
/// events, with `perf_event_open`'s `pid`/`cpu` meaning, disabled (a BPF
/// program attached to it enables it): a BPF `perf_event` program then
/// runs at each sample.
pub fn open_sw_sampling(
    config: u64,
    pid: libc::pid_t,
    cpu: libc::c_int,
    sample_period: u64,
) -> std::io::Result<OwnedFd> {
    open(
        PerfEventAttr {
            type_: TYPE_SOFTWARE,
            config,
            sample_period,
            flags: DISABLED,
            ..Default::default()
        },
        pid,
        cpu,
        None,
    )
}

fn open(
    mut attr: PerfEventAttr,
    pid: libc::pid_t,
    cpu: libc::c_int,
    group: Option<BorrowedFd<'_>>,
) -> std::io::Result<OwnedFd> {
    attr.size = std::mem::size_of::<PerfEventAttr>() as u32;
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr of the
    // size it declares; the group fd, if any, is a live descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            pid,
            cpu,
            group.map_or(-1, |g| g.as_raw_fd()) as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}
