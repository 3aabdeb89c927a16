//! The byte layout of the signal page, version [`ABI_VERSION`].
//!
//! A page is a file and a System V shared-memory segment (see
//! `docs/protocol.md` for the byte-by-byte table and the permission model):
//!
//! ```text
//! <path>        (the page file, mode 0644: LC and controller write, everyone reads)
//!   0    Header            line 0: identity, written once by the creator
//!   64                     line 1: heartbeat, control word, heartbeat_stale_ns (controller)
//!   128  lane 0: LcLine        written by the LC thread of lane 0
//!   192  lane 0: ControllerLine written by the controller
//!   256  lane 1: LcLine …
//!   size = 128 + lane_count * 128
//!
//! batch segment (System V shm id in the header's batch_shmid; mode 0644, or
//!                0664 with a batch group: batch threads write; fixed size)
//!   0    BatchHeader
//!   64   lane 0: BatchLine     written by the batch threads running on lane 0
//!   128  lane 1: BatchLine …
//!   size = 64 + lane_count * 64
//! ```
//!
//! Every line is 64 bytes and has one writer (single-writer cache lines, as
//! in caladan's iokernel contract), so a reader's poll never fights a
//! writer on another line. All fields are little-endian integers; offsets,
//! never pointers. Changing any offset or meaning requires bumping
//! [`ABI_VERSION`]; the `const` assertions at the bottom of this file and in
//! `elfen.h` fail the build if the layout drifts.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// `b"ELFENSIG"` as a little-endian u64: the first 8 bytes of a signal page.
pub const MAGIC: u64 = u64::from_le_bytes(*b"ELFENSIG");
/// `b"ELFENBAT"` as a little-endian u64: the first 8 bytes of a batch segment.
pub const BATCH_MAGIC: u64 = u64::from_le_bytes(*b"ELFENBAT");
/// The layout version this build reads and writes.
pub const ABI_VERSION: u32 = 2;
/// Size of one line (a cache line on every machine elfen targets).
pub const LINE_SIZE: usize = 64;
/// Size of the page header (two lines).
pub const HEADER_SIZE: usize = 128;
/// Bytes per lane in the page file (LC line + controller line).
pub const LANE_STRIDE: usize = 128;
/// Size of the batch segment's header.
pub const BATCH_HEADER_SIZE: usize = 64;
/// Bytes per lane in the batch segment (one batch line).
pub const BATCH_STRIDE: usize = 64;
/// Most lanes one page may describe.
pub const MAX_LANES: u32 = 4096;
/// Most batch partners one request lane may list in its controller line.
pub const MAX_PARTNERS: usize = 6;

/// Size of the page file for `lanes` lanes.
pub const fn page_size(lanes: u32) -> usize {
    HEADER_SIZE + lanes as usize * LANE_STRIDE
}

/// Size of the batch segment for `lanes` lanes.
pub const fn batch_size(lanes: u32) -> usize {
    BATCH_HEADER_SIZE + lanes as usize * BATCH_STRIDE
}

/// `Header.clock`: what the page's timestamps count.
pub mod clock {
    /// Timestamps are TSC ticks (`rdtsc`); `ticks_per_sec` is the calibrated rate.
    pub const TSC: u32 = 1;
    /// Timestamps are `CLOCK_MONOTONIC` nanoseconds; `ticks_per_sec` = 1e9.
    pub const MONOTONIC_NS: u32 = 2;
}

/// `Header.control` bits, written by the controller (and the operator's
/// kill switch). [`KILL`](control::KILL) wins when both are set; see
/// `crate::failsafe` for what batch threads make of them.
pub mod control {
    /// Kill switch, mode "batch paused": batch threads must not run batch
    /// code. A batch thread obeys at its next slow path and naps until the
    /// bit clears.
    pub const KILL: u64 = 1;
    /// Kill switch, mode "batch runs unmanaged" (borrowing off): without
    /// [`KILL`], a batch thread's slow path behaves as policy `UNMANAGED` —
    /// it never naps, whatever its lane's policy. (Added to ABI 1 as a
    /// compatible extension: zero behaves as before.)
    pub const UNMANAGED: u64 = 2;
    /// Every bit this version defines; others must be zero.
    pub const KNOWN: u64 = KILL | UNMANAGED;
}

/// `ControllerLine.role`.
pub mod role {
    /// The lane takes no part.
    pub const UNUSED: u32 = 0;
    /// LC requests run here; its LC line is live.
    pub const REQUEST: u32 = 1;
    /// Batch threads run here and watch their partner request lane.
    pub const BATCH: u32 = 2;
}

/// `ControllerLine.policy`: what batch threads run at a check
/// (`elfen_policy::PolicyKind` maps onto these; never renumber them).
pub mod policy {
    /// Always run (batch threads ignore the request lane).
    pub const UNMANAGED: u32 = 0;
    /// Figure 9a: run only while the request lane is idle.
    pub const BORROW_IDLE: u32 = 1;
    /// Figure 9b: co-run with the first request after an idle period for at
    /// most the budget.
    pub const FIXED_BUDGET: u32 = 2;
    /// Figure 9c: fixed budget, restarted when a new request starts on an
    /// empty queue.
    pub const REFRESH_BUDGET: u32 = 3;
    /// Figure 9d: refresh budget scaled by the LC lane's IPC.
    pub const DYNAMIC_REFRESH: u32 = 4;
}

/// `ControllerLine.nap`: the nap backend the controller asks for.
pub mod nap {
    /// Let each batch thread choose (the runtime's automatic choice).
    pub const AUTO: u32 = 0;
    /// Spin with `pause`, keeping the lane.
    pub const SPIN: u32 = 1;
    /// Block in `futex`, giving the lane to the OS.
    pub const FUTEX: u32 = 2;
    /// Spin up to `hybrid_spin_ns`, then futex.
    pub const HYBRID: u32 = 3;
    /// `umwait` (Intel WAITPKG), where the CPU and OS allow it.
    pub const UMWAIT: u32 = 4;
    /// `monitorx`/`mwaitx` (AMD), where the CPU allows it.
    pub const MWAITX: u32 = 5;
}

/// Packing of [`LcLine::state`], the word every batch check loads.
///
/// ```text
/// bit  0      busy: a request is running on the request lane
/// bits 1..31  begin sequence: +1 at every request_begin (wraps at 2^31)
/// bits 32..63 queue length: requests waiting (saturates at u32::MAX - 1)
/// ```
///
/// [`state::NEVER`] (all ones, queue length u32::MAX) is never stored, so a
/// batch thread that must run its slow path at every check (while
/// co-running on a budget) compares against it.
///
/// The low 32 bits change at every request begin *and* end, so they are the
/// futex word batch threads sleep on; queue-length changes alone do not wake
/// sleepers.
pub mod state {
    /// The busy bit.
    pub const BUSY: u64 = 1;
    const SEQ_MASK: u64 = 0x7FFF_FFFF;
    /// The largest queue length a state word holds.
    pub const MAX_QUEUE_LEN: u32 = u32::MAX - 1;
    /// A value `state` never takes.
    pub const NEVER: u64 = u64::MAX;

    /// Builds a state word (the queue length saturates at [`MAX_QUEUE_LEN`]).
    #[inline]
    pub const fn pack(busy: bool, seq: u32, queue_len: u32) -> u64 {
        let q = if queue_len > MAX_QUEUE_LEN {
            MAX_QUEUE_LEN
        } else {
            queue_len
        };
        (busy as u64) | (((seq as u64) & SEQ_MASK) << 1) | ((q as u64) << 32)
    }
    /// Whether a request is running.
    #[inline]
    pub const fn busy(s: u64) -> bool {
        s & BUSY != 0
    }
    /// The begin sequence (31 bits).
    #[inline]
    pub const fn seq(s: u64) -> u32 {
        ((s >> 1) & SEQ_MASK) as u32
    }
    /// The queue length.
    #[inline]
    pub const fn queue_len(s: u64) -> u32 {
        (s >> 32) as u32
    }
    /// The low half: the futex word.
    #[inline]
    pub const fn futex_word(s: u64) -> u32 {
        s as u32
    }
}

/// The page header: two lines.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Header {
    // ---- line 0: identity, written once by the creator before the page is published
    /// [`MAGIC`].
    pub magic: AtomicU64,
    /// [`ABI_VERSION`].
    pub abi_version: AtomicU32,
    /// [`LINE_SIZE`] (64).
    pub line_size: AtomicU32,
    /// Size of this file in bytes: `128 + lane_count * 128`.
    pub total_size: AtomicU64,
    /// Number of lanes described.
    pub lane_count: AtomicU32,
    /// What timestamps count: [`clock::TSC`] or [`clock::MONOTONIC_NS`].
    pub clock: AtomicU32,
    /// Timestamp ticks per second.
    pub ticks_per_sec: AtomicU64,
    /// Random id of this page instance, repeated in the batch segment.
    pub instance: AtomicU64,
    /// Process that created the page.
    pub creator_pid: AtomicU32,
    /// System V shared-memory id of the batch segment (`shmat` it).
    pub batch_shmid: AtomicU32,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: AtomicU64,
    // ---- line 1: written by the controller
    /// Page clock ticks at the controller's last sign of life (0 = never).
    pub heartbeat: AtomicU64,
    /// [`control`] bits (kill switch and its mode).
    pub control: AtomicU64,
    /// Heartbeat fail-safe: a `heartbeat` older than this many nanoseconds
    /// is stale and batch threads pause as under [`control::KILL`]; 0 (every
    /// page whose controller does not beat) = no staleness check. Set by a
    /// controller that beats, e.g. to 10 × its beat interval.
    pub heartbeat_stale_ns: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 5],
}

/// One lane's LC line; written only by the LC thread serving that lane.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct LcLine {
    /// [`state`]-packed busy bit, begin sequence and queue length. Stored last
    /// (release) so a reader that sees a new state sees the fields below.
    pub state: AtomicU64,
    /// The id passed to `request_begin` (valid while busy).
    pub request_id: AtomicU64,
    /// Page clock at the current request's begin (valid while busy).
    pub busy_since: AtomicU64,
    /// Page clock ticks spent in completed requests.
    pub busy_ticks: AtomicU64,
    /// Completed requests.
    pub requests: AtomicU64,
    /// Thread id of the attached LC thread (0 = none).
    pub lc_tid: AtomicU32,
    /// Reserved, zero.
    pub reserved0: AtomicU32,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 2],
}

/// One lane's controller line; written only by the controller (or creator).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ControllerLine {
    /// [`role`] of the lane.
    pub role: AtomicU32,
    /// Logical CPU id of the lane.
    pub cpu: AtomicU32,
    /// [`policy`] id for batch threads on or
    /// partnered with this lane.
    pub policy: AtomicU32,
    /// [`nap`] backend requested.
    pub nap: AtomicU32,
    /// Co-running budget per period, nanoseconds.
    pub budget_ns: AtomicU64,
    /// Dynamic refresh's reference IPC × 1000 (0 = none).
    pub ref_ipc_milli: AtomicU32,
    /// Number of valid entries in `partners`.
    pub partner_count: AtomicU32,
    /// Partner lane indices: for a request lane its batch lanes, for a batch
    /// lane the request lane it watches (one entry).
    pub partners: [AtomicU32; MAX_PARTNERS],
    /// Hybrid nap: how long to spin before blocking, nanoseconds.
    pub hybrid_spin_ns: AtomicU32,
    /// Seqlock over this line: odd while the controller rewrites it; batch
    /// threads re-read their configuration when it changes.
    pub config_seq: AtomicU32,
}

/// The batch segment's header.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct BatchHeader {
    /// [`BATCH_MAGIC`].
    pub magic: AtomicU64,
    /// [`ABI_VERSION`].
    pub abi_version: AtomicU32,
    /// [`LINE_SIZE`].
    pub line_size: AtomicU32,
    /// Size of the batch segment: `64 + lane_count * 64`.
    pub total_size: AtomicU64,
    /// Number of lanes (equal to the page's).
    pub lane_count: AtomicU32,
    /// Reserved, zero.
    pub reserved0: AtomicU32,
    /// The page's `instance`: proves the segment belongs to the page.
    pub instance: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 3],
}

/// One lane's batch line; written by the batch threads running on that lane
/// (atomic read-modify-writes, since several batch threads may share a lane).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct BatchLine {
    /// Batch threads attached to the lane.
    pub attached: AtomicU32,
    /// Batch threads blocked in the OS (futex) waiting for the partner
    /// request lane; the LC wakes them only when this is non-zero.
    pub sleepers: AtomicU32,
    /// Batch threads napping (any backend).
    pub napping: AtomicU32,
    /// Reserved, zero.
    pub reserved0: AtomicU32,
    /// Naps taken.
    pub naps: AtomicU64,
    /// Wakes (naps ended).
    pub wakes: AtomicU64,
    /// Page clock ticks batch threads spent running batch code (summed over
    /// threads, updated at each nap).
    pub run_ticks: AtomicU64,
    /// Of `run_ticks`, ticks run while the partner request lane was busy
    /// (budget co-running).
    pub corun_ticks: AtomicU64,
    /// Page clock at the last nap or wake.
    pub last_change: AtomicU64,
    /// Slow-path entries (checks that ran the policy).
    pub slow_checks: AtomicU64,
}

// ---- the layout is the contract: fail the build if it drifts.
macro_rules! assert_layout {
    ($t:ty, $size:expr, $($field:ident @ $off:expr),* $(,)?) => {
        const _: () = assert!(std::mem::size_of::<$t>() == $size);
        const _: () = assert!(std::mem::align_of::<$t>() == 64);
        $(const _: () = assert!(std::mem::offset_of!($t, $field) == $off);)*
    };
}
assert_layout!(Header, 128,
    magic @ 0, abi_version @ 8, line_size @ 12, total_size @ 16, lane_count @ 24,
    clock @ 28, ticks_per_sec @ 32, instance @ 40, creator_pid @ 48, batch_shmid @ 52,
    created_unix_s @ 56, heartbeat @ 64, control @ 72, heartbeat_stale_ns @ 80, reserved @ 88);
assert_layout!(LcLine, 64,
    state @ 0, request_id @ 8, busy_since @ 16, busy_ticks @ 24, requests @ 32,
    lc_tid @ 40, reserved0 @ 44, reserved @ 48);
assert_layout!(ControllerLine, 64,
    role @ 0, cpu @ 4, policy @ 8, nap @ 12, budget_ns @ 16, ref_ipc_milli @ 24,
    partner_count @ 28, partners @ 32, hybrid_spin_ns @ 56, config_seq @ 60);
assert_layout!(BatchHeader, 64,
    magic @ 0, abi_version @ 8, line_size @ 12, total_size @ 16, lane_count @ 24,
    reserved0 @ 28, instance @ 32, reserved @ 40);
assert_layout!(BatchLine, 64,
    attached @ 0, sleepers @ 4, napping @ 8, reserved0 @ 12, naps @ 16, wakes @ 24,
    run_ticks @ 32, corun_ticks @ 40, last_change @ 48, slow_checks @ 56);
const _: () = assert!(HEADER_SIZE == std::mem::size_of::<Header>());
const _: () = assert!(LANE_STRIDE == 2 * LINE_SIZE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_word_round_trips() {
        for (busy, seq, q) in [
            (false, 0, 0),
            (true, 1, 0),
            (true, 0x7FFF_FFFF, u32::MAX - 1),
            (false, 12345, 7),
        ] {
            let s = state::pack(busy, seq, q);
            assert_eq!(
                (state::busy(s), state::seq(s), state::queue_len(s)),
                (busy, seq, q)
            );
        }
        // the queue length saturates below NEVER's
        assert_eq!(
            state::queue_len(state::pack(true, 0x7FFF_FFFF, u32::MAX)),
            u32::MAX - 1
        );
        assert_ne!(state::pack(true, 0x7FFF_FFFF, u32::MAX), state::NEVER);
        // the sequence wraps within its 31 bits and never touches the busy bit
        let s = state::pack(false, 0x8000_0001, 0);
        assert_eq!(state::seq(s), 1);
        assert!(!state::busy(s));
        // begin and end both change the futex word
        let idle = state::pack(false, 4, 9);
        let busy = state::pack(true, 5, 9);
        assert_ne!(state::futex_word(idle), state::futex_word(busy));
        assert_eq!(
            state::futex_word(busy),
            state::futex_word(state::pack(true, 5, 1))
        );
    }

    #[test]
    fn magic_reads_as_ascii() {
        assert_eq!(&MAGIC.to_le_bytes(), b"ELFENSIG");
        assert_eq!(&BATCH_MAGIC.to_le_bytes(), b"ELFENBAT");
        assert_eq!(page_size(2), 384);
        assert_eq!(batch_size(2), 192);
    }
}
