//! The Rust view of `src/bpf/elfen_bpf.h`, the contract between the BPF
//! program and user space: the per-CPU slot, the transition event and the
//! constants. Every size and offset is asserted at compile time here and
//! checked against the skeleton's BTF-generated types in the tests, so the
//! C header and this file cannot drift apart silently.

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, fence};

/// `ELFEN_BPF_ABI`: the contract version BPF stores in every slot.
pub const ABI: u16 = 2;
/// `ELFEN_SLOT_SIZE`: one slot per CPU, one cache line.
pub const SLOT_SIZE: usize = 64;
/// `ELFEN_MAX_TGIDS`: most processes watched at once.
pub const MAX_TGIDS: u32 = 4096;
/// `ELFEN_MAX_CGROUPS`: most cgroups (subtree roots) watched at once.
pub const MAX_CGROUPS: u32 = 1024;
/// `ELFEN_MAX_QUIET_TIDS`: most threads whose switches are no transitions.
pub const MAX_QUIET_TIDS: u32 = 256;
/// `ELFEN_MAX_CGROUP_DEPTH`: levels of a task's cgroup and its ancestors
/// checked against the watched subtree roots.
pub const MAX_CGROUP_DEPTH: u32 = 16;
/// `ELFEN_CGROUP_VERDICTS`: entries of the BPF program's per-cgroup cache
/// of "in a watched subtree".
pub const CGROUP_VERDICTS: u32 = 4096;
/// `ELFEN_RING_BYTES`: size of the transition-event ring buffer.
pub const RING_BYTES: u32 = 256 * 1024;
/// `ELFEN_ANNOUNCE_NS`: how long a WAKE event stands for the switch-in it
/// announces (a reader keeps the lane busy that long waiting for it).
pub const ANNOUNCE_NS: u64 = 1_000_000;
/// `ELFEN_WATCH_ON`: the value stored in the watch maps.
pub const WATCH_ON: u32 = 1;

/// `elfen_cpu_slot.flags` bits.
pub mod flags {
    /// `ELFEN_SLOT_LC`: the task running on the CPU is an LC task.
    pub const LC: u32 = 1 << 0;
    /// `ELFEN_SLOT_WATCHED`: the CPU emits transition events.
    pub const WATCHED: u32 = 1 << 1;
    /// `ELFEN_SLOT_VALID`: at least one switch was recorded.
    pub const VALID: u32 = 1 << 2;
}

/// `elfen_lc_event.kind`.
pub mod kind {
    /// `ELFEN_EVENT_IDLE`: the CPU stopped running an LC task.
    pub const IDLE: u32 = 0;
    /// `ELFEN_EVENT_BUSY`: the CPU started running an LC task.
    pub const BUSY: u32 = 1;
    /// `ELFEN_EVENT_WAKE`: an LC task was woken onto the CPU, which runs no
    /// LC task (its switch-in, a BUSY, follows).
    pub const WAKE: u32 = 2;
}

/// `struct elfen_cpu_slot`: one CPU's record of who runs there, in shared
/// memory. Written only by its single writer (the BPF program on that CPU,
/// or the poll fallback's scanner thread) under the seqlock `seq`; readers
/// use [`CpuSlot::read`] for a consistent copy or [`CpuSlot::lc`] for the
/// one-load LC check.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct CpuSlot {
    /// Seqlock: odd while the writer changes the slot; `seq / 2` switches recorded.
    pub seq: AtomicU32,
    /// [`flags`] bits.
    pub flags: AtomicU32,
    /// `CLOCK_MONOTONIC` ns of the last switch (BPF: `bpf_ktime_get_ns`).
    pub switch_ns: AtomicU64,
    /// Thread id switched in (0 = the idle task).
    pub tid: AtomicU32,
    /// Its process id.
    pub tgid: AtomicU32,
    /// Its cgroup v2 id (0 if unknown).
    pub cgroup_id: AtomicU64,
    /// Start of the current LC busy period (valid while [`flags::LC`]).
    pub lc_since_ns: AtomicU64,
    /// LC busy periods begun on this CPU.
    pub lc_periods: AtomicU64,
    /// ns spent in completed LC busy periods.
    pub lc_busy_ns: AtomicU64,
    /// Transition events lost because the ring buffer was full (wrapping).
    pub dropped: AtomicU32,
    /// [`ABI`] once written.
    pub abi: AtomicU16,
    /// Zero.
    pub reserved: AtomicU16,
}

/// Most seqlock retries [`CpuSlot::read`] makes before it gives up (a
/// writer holds the slot odd for well under a microsecond, unless its CPU
/// is paused by a hypervisor).
pub const MAX_READ_RETRIES: u32 = 1 << 24;

impl CpuSlot {
    /// Whether an LC task runs on this CPU: one load, no seqlock.
    #[inline]
    pub fn lc(&self) -> bool {
        self.flags.load(Relaxed) & flags::LC != 0
    }

    /// The seqlock word (changes by 2 per recorded switch).
    #[inline]
    pub fn seq(&self) -> u32 {
        self.seq.load(Acquire)
    }

    /// A consistent copy of the slot (seqlock read side), or `None` if the
    /// writer kept it odd or changing for [`MAX_READ_RETRIES`] tries.
    pub fn read(&self, cpu: u32) -> Option<SlotSnapshot> {
        for _ in 0..MAX_READ_RETRIES {
            let s1 = self.seq.load(Acquire);
            if s1 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let snap = SlotSnapshot {
                cpu,
                seq: s1,
                flags: self.flags.load(Relaxed),
                switch_ns: self.switch_ns.load(Relaxed),
                tid: self.tid.load(Relaxed),
                tgid: self.tgid.load(Relaxed),
                cgroup_id: self.cgroup_id.load(Relaxed),
                lc_since_ns: self.lc_since_ns.load(Relaxed),
                lc_periods: self.lc_periods.load(Relaxed),
                lc_busy_ns: self.lc_busy_ns.load(Relaxed),
                dropped: self.dropped.load(Relaxed),
            };
            // Orders the field loads before the re-read of seq.
            fence(Acquire);
            if self.seq.load(Relaxed) == s1 {
                return Some(snap);
            }
        }
        None
    }
}

/// A consistent copy of one CPU's [`CpuSlot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct SlotSnapshot {
    /// The CPU.
    pub cpu: u32,
    /// The seqlock value the copy was taken at (even).
    pub seq: u32,
    /// [`flags`] bits.
    pub flags: u32,
    /// `CLOCK_MONOTONIC` ns of the last switch.
    pub switch_ns: u64,
    /// Thread id switched in (0 = the idle task, or none seen by the poll fallback).
    pub tid: u32,
    /// Its process id.
    pub tgid: u32,
    /// Its cgroup v2 id (0 if unknown).
    pub cgroup_id: u64,
    /// Start of the current LC busy period (valid while [`SlotSnapshot::lc`]).
    pub lc_since_ns: u64,
    /// LC busy periods begun.
    pub lc_periods: u64,
    /// ns in completed LC busy periods.
    pub lc_busy_ns: u64,
    /// Transition events lost (ring buffer full).
    pub dropped: u32,
}

impl SlotSnapshot {
    /// Whether an LC task was running.
    pub fn lc(&self) -> bool {
        self.flags & flags::LC != 0
    }
    /// Whether the CPU emits transition events.
    pub fn watched(&self) -> bool {
        self.flags & flags::WATCHED != 0
    }
    /// Whether any switch was recorded yet.
    pub fn valid(&self) -> bool {
        self.flags & flags::VALID != 0
    }
    /// Switches recorded on this CPU (`seq / 2`, wrapping at 2^31).
    pub fn switches(&self) -> u32 {
        self.seq / 2
    }
    /// LC busy time up to `now_ns` (`CLOCK_MONOTONIC`), the running period included.
    pub fn lc_busy_ns_at(&self, now_ns: u64) -> u64 {
        if self.lc() {
            self.lc_busy_ns + now_ns.saturating_sub(self.lc_since_ns)
        } else {
            self.lc_busy_ns
        }
    }
}

/// `struct elfen_lc_event` as the BPF program writes it (48 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RawEvent {
    /// `CLOCK_MONOTONIC` ns of the switch.
    pub time_ns: u64,
    /// CPU that switched.
    pub cpu: u32,
    /// [`kind`].
    pub kind: u32,
    /// Task switched in.
    pub tid: u32,
    /// Its process id.
    pub tgid: u32,
    /// Its cgroup v2 id.
    pub cgroup_id: u64,
    /// IDLE: length of the LC busy period that ended.
    pub busy_ns: u64,
    /// The slot's seq after the switch.
    pub seq: u32,
    /// Zero.
    pub reserved: u32,
}

impl RawEvent {
    /// Decodes one ring-buffer record; `None` if it is too short.
    pub fn from_bytes(b: &[u8]) -> Option<RawEvent> {
        if b.len() < std::mem::size_of::<RawEvent>() {
            return None;
        }
        // SAFETY: RawEvent is plain old data of this size; the read is unaligned-safe.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<RawEvent>()) })
    }
}

/// An LC busy/idle transition on a watched CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LcEvent {
    /// CPU that switched.
    pub cpu: u32,
    /// `true`: an LC task started running, or was woken onto the CPU
    /// (busy); `false`: it stopped (idle).
    pub busy: bool,
    /// The busy edge announced at the LC task's wake-up (kind WAKE; `busy`
    /// is true): its switch-in follows as a busy event of its own.
    pub woken: bool,
    /// `CLOCK_MONOTONIC` ns of the transition (BPF: the switch; poll
    /// fallback: the scan that saw it).
    pub time_ns: u64,
    /// Task switched in (busy: the LC thread; idle: whoever runs now, 0 = idle task or unknown).
    pub tid: u32,
    /// Its process id.
    pub tgid: u32,
    /// Its cgroup v2 id (0 if unknown).
    pub cgroup_id: u64,
    /// Idle events: length of the LC busy period that ended (ns); busy events: 0.
    pub busy_ns: u64,
}

impl From<RawEvent> for LcEvent {
    fn from(r: RawEvent) -> LcEvent {
        LcEvent {
            cpu: r.cpu,
            busy: r.kind == kind::BUSY || r.kind == kind::WAKE,
            woken: r.kind == kind::WAKE,
            time_ns: r.time_ns,
            tid: r.tid,
            tgid: r.tgid,
            cgroup_id: r.cgroup_id,
            busy_ns: r.busy_ns,
        }
    }
}

// ---- the header's layout, checked at compile time (elfen_bpf.h has the same
// numbers in _Static_asserts; the tests compare both with the skeleton).
macro_rules! assert_layout {
    ($t:ty, $size:expr, $($field:ident @ $off:expr),* $(,)?) => {
        const _: () = assert!(std::mem::size_of::<$t>() == $size);
        $(const _: () = assert!(std::mem::offset_of!($t, $field) == $off);)*
    };
}
assert_layout!(CpuSlot, SLOT_SIZE,
    seq @ 0, flags @ 4, switch_ns @ 8, tid @ 16, tgid @ 20, cgroup_id @ 24,
    lc_since_ns @ 32, lc_periods @ 40, lc_busy_ns @ 48, dropped @ 56, abi @ 60, reserved @ 62);
assert_layout!(RawEvent, 48,
    time_ns @ 0, cpu @ 8, kind @ 12, tid @ 16, tgid @ 20, cgroup_id @ 24, busy_ns @ 32,
    seq @ 40, reserved @ 44);
const _: () = assert!(std::mem::align_of::<CpuSlot>() == SLOT_SIZE);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skel::types;
    use std::mem::{offset_of, size_of};

    /// The skeleton's types are generated from the BPF object's BTF, i.e.
    /// from the C header as clang compiled it.
    #[test]
    fn header_and_rust_agree() {
        type S = types::elfen_cpu_slot;
        assert_eq!(size_of::<S>(), size_of::<CpuSlot>());
        assert_eq!(offset_of!(S, seq), offset_of!(CpuSlot, seq));
        assert_eq!(offset_of!(S, flags), offset_of!(CpuSlot, flags));
        assert_eq!(offset_of!(S, switch_ns), offset_of!(CpuSlot, switch_ns));
        assert_eq!(offset_of!(S, tid), offset_of!(CpuSlot, tid));
        assert_eq!(offset_of!(S, tgid), offset_of!(CpuSlot, tgid));
        assert_eq!(offset_of!(S, cgroup_id), offset_of!(CpuSlot, cgroup_id));
        assert_eq!(offset_of!(S, lc_since_ns), offset_of!(CpuSlot, lc_since_ns));
        assert_eq!(offset_of!(S, lc_periods), offset_of!(CpuSlot, lc_periods));
        assert_eq!(offset_of!(S, lc_busy_ns), offset_of!(CpuSlot, lc_busy_ns));
        assert_eq!(offset_of!(S, dropped), offset_of!(CpuSlot, dropped));
        assert_eq!(offset_of!(S, abi), offset_of!(CpuSlot, abi));
        assert_eq!(offset_of!(S, reserved), offset_of!(CpuSlot, reserved));

        type E = types::elfen_lc_event;
        assert_eq!(size_of::<E>(), size_of::<RawEvent>());
        assert_eq!(offset_of!(E, time_ns), offset_of!(RawEvent, time_ns));
        assert_eq!(offset_of!(E, cpu), offset_of!(RawEvent, cpu));
        assert_eq!(offset_of!(E, kind), offset_of!(RawEvent, kind));
        assert_eq!(offset_of!(E, tid), offset_of!(RawEvent, tid));
        assert_eq!(offset_of!(E, tgid), offset_of!(RawEvent, tgid));
        assert_eq!(offset_of!(E, cgroup_id), offset_of!(RawEvent, cgroup_id));
        assert_eq!(offset_of!(E, busy_ns), offset_of!(RawEvent, busy_ns));
        assert_eq!(offset_of!(E, seq), offset_of!(RawEvent, seq));
        assert_eq!(offset_of!(E, reserved), offset_of!(RawEvent, reserved));
    }

    /// The constants in the header text equal the Rust ones.
    #[test]
    fn header_constants_agree() {
        let h = include_str!("bpf/elfen_bpf.h");
        let define = |name: &str| -> String {
            let line = h
                .lines()
                .find(|l| l.split_whitespace().take(2).eq(["#define", name]))
                .unwrap_or_else(|| panic!("elfen_bpf.h defines {name}"));
            let v = line
                .split_whitespace()
                .skip(2)
                .collect::<Vec<_>>()
                .join(" ");
            v.split("/*").next().unwrap().trim().to_string()
        };
        assert_eq!(define("ELFEN_BPF_ABI"), ABI.to_string());
        assert_eq!(define("ELFEN_SLOT_SIZE"), SLOT_SIZE.to_string());
        assert_eq!(define("ELFEN_MAX_TGIDS"), MAX_TGIDS.to_string());
        assert_eq!(define("ELFEN_MAX_CGROUPS"), MAX_CGROUPS.to_string());
        assert_eq!(define("ELFEN_MAX_QUIET_TIDS"), MAX_QUIET_TIDS.to_string());
        assert_eq!(
            define("ELFEN_MAX_CGROUP_DEPTH"),
            MAX_CGROUP_DEPTH.to_string()
        );
        assert_eq!(define("ELFEN_CGROUP_VERDICTS"), CGROUP_VERDICTS.to_string());
        assert_eq!(define("ELFEN_RING_BYTES"), "(256 * 1024)");
        assert_eq!(RING_BYTES, 256 * 1024);
        assert_eq!(define("ELFEN_WATCH_ON"), WATCH_ON.to_string());
        assert_eq!(define("ELFEN_SLOT_LC"), "(1u << 0)");
        assert_eq!(flags::LC, 1);
        assert_eq!(define("ELFEN_SLOT_WATCHED"), "(1u << 1)");
        assert_eq!(flags::WATCHED, 2);
        assert_eq!(define("ELFEN_SLOT_VALID"), "(1u << 2)");
        assert_eq!(flags::VALID, 4);
        assert_eq!(define("ELFEN_EVENT_IDLE"), kind::IDLE.to_string());
        assert_eq!(define("ELFEN_EVENT_BUSY"), kind::BUSY.to_string());
        assert_eq!(define("ELFEN_EVENT_WAKE"), kind::WAKE.to_string());
        assert_eq!(define("ELFEN_ANNOUNCE_NS"), format!("{ANNOUNCE_NS}ULL"));
    }

    #[test]
    fn seqlock_read_and_event_decode() {
        let s = CpuSlot::default();
        s.seq.store(4, Relaxed);
        s.flags.store(flags::LC | flags::VALID, Relaxed);
        s.lc_since_ns.store(100, Relaxed);
        s.lc_busy_ns.store(50, Relaxed);
        let snap = s.read(3).unwrap();
        assert_eq!((snap.cpu, snap.switches()), (3, 2));
        assert!(snap.lc() && snap.valid() && !snap.watched());
        assert_eq!(snap.lc_busy_ns_at(130), 80);
        s.seq.store(5, Relaxed); // a writer that never finishes
        // (MAX_READ_RETRIES spins; fast enough for a unit test)
        assert!(s.read(3).is_none());

        let raw = RawEvent {
            time_ns: 7,
            cpu: 1,
            kind: kind::BUSY,
            tid: 10,
            tgid: 9,
            cgroup_id: 3,
            busy_ns: 0,
            seq: 2,
            reserved: 0,
        };
        // SAFETY: RawEvent is plain old data.
        let bytes: [u8; 48] = unsafe { std::mem::transmute(raw) };
        let e = LcEvent::from(RawEvent::from_bytes(&bytes).unwrap());
        assert_eq!(
            (e.cpu, e.busy, e.time_ns, e.tid, e.tgid),
            (1, true, 7, 10, 9)
        );
        assert!(!e.woken);
        let mut w = RawEvent::from_bytes(&bytes).unwrap();
        w.kind = kind::WAKE;
        let e = LcEvent::from(w);
        assert!(e.busy && e.woken);
        assert!(RawEvent::from_bytes(&bytes[..40]).is_none());
    }
}
