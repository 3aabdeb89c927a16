//! **Nap**: how a batch thread steps aside until its request lane changes.
//!
//! Elfen's `nanonap` puts a lane to sleep without giving it to the OS. In
//! user space the choices are (one function each, below):
//!
//! | backend | keeps the lane | wakes on | cost while napping |
//! |---|---|---|---|
//! | [`NapBackend::Spin`] | yes | `state` changes (polled with `pause`) | a lane burning `pause`, no shared writes |
//! | [`NapBackend::Futex`] | no (blocks in the OS) | the LC's `FUTEX_WAKE` at request end | nothing; wake costs a syscall on the LC side |
//! | [`NapBackend::Hybrid`] | yes, then no | spin up to `hybrid_spin_ns`, then futex | short naps stay cheap to wake |
//! | [`NapBackend::Umwait`] | yes | a write to the `state` line (`umonitor`/`umwait`) | none (hardware wait) |
//! | [`NapBackend::Mwaitx`] | yes | a write to the `state` line (`monitorx`/`mwaitx`) | none (hardware wait) |
//!
//! Every nap returns when the watched `state` word differs from the value
//! napped on, or when the page's control word (kill switch) differs from
//! the value seen when the nap began; a nap taken because the heartbeat is
//! stale also returns when `heartbeat` or `heartbeat_stale_ns` changes. The
//! futex backend re-reads header line 1 at least every `futex_timeout`
//! (10 ms by default), spin every few thousand `pause`s, umwait/mwaitx at
//! least every ~100 µs.
//!
//! `umwait`/`mwaitx` exist only where [`Features`] detects them (CPUID plus,
//! for `umwait`, the OS's `umwait_control`); [`NapChoice::resolve`] is the
//! only way to obtain a backend for a thread, so their instructions are
//! never executed where absent (many virtual machines hide them).

use elfen_shm::Clock;
use elfen_topo::Features;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64, fence};
use std::time::Duration;

use crate::error::RuntimeError;

/// The features of this machine, detected once per process (CPUID, sysfs,
/// a `perf_event_open` probe).
pub fn machine_features() -> &'static Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    FEATURES.get_or_init(Features::detect)
}

/// What a batch thread asks for (the controller line's `nap` field, or
/// [`BatchOptions::nap`](crate::BatchOptions::nap)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NapChoice {
    /// The best available: umwait or mwaitx where allowed, else hybrid.
    Auto,
    /// [`NapBackend::Spin`].
    Spin,
    /// [`NapBackend::Futex`].
    Futex,
    /// [`NapBackend::Hybrid`].
    Hybrid,
    /// [`NapBackend::Umwait`]: fails at attach where absent.
    Umwait,
    /// [`NapBackend::Mwaitx`]: fails at attach where absent.
    Mwaitx,
}

/// The backend a batch thread actually naps with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NapBackend {
    /// `pause` loop reading only `state` (and the control word every few
    /// thousand iterations); keeps the lane, writes no shared data.
    Spin,
    /// Registers in `sleepers` and blocks in `FUTEX_WAIT` (shared) on the
    /// low half of `state`; gives the lane to the OS.
    Futex,
    /// Spin up to the controller line's `hybrid_spin_ns`, then futex.
    Hybrid,
    /// Intel WAITPKG `umonitor`/`umwait` on the `state` line.
    Umwait,
    /// AMD `monitorx`/`mwaitx` on the `state` line.
    Mwaitx,
}

impl NapChoice {
    /// Every choice, in signal-page id order.
    pub const ALL: [NapChoice; 6] = [
        NapChoice::Auto,
        NapChoice::Spin,
        NapChoice::Futex,
        NapChoice::Hybrid,
        NapChoice::Umwait,
        NapChoice::Mwaitx,
    ];

    /// The id stored in the controller line (`elfen_shm::nap`).
    pub fn id(self) -> u32 {
        use elfen_shm::nap;
        match self {
            NapChoice::Auto => nap::AUTO,
            NapChoice::Spin => nap::SPIN,
            NapChoice::Futex => nap::FUTEX,
            NapChoice::Hybrid => nap::HYBRID,
            NapChoice::Umwait => nap::UMWAIT,
            NapChoice::Mwaitx => nap::MWAITX,
        }
    }

    /// The choice with controller-line id `id`.
    pub fn from_id(id: u32) -> Option<NapChoice> {
        NapChoice::ALL.into_iter().find(|c| c.id() == id)
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            NapChoice::Auto => "auto",
            NapChoice::Spin => "spin",
            NapChoice::Futex => "futex",
            NapChoice::Hybrid => "hybrid",
            NapChoice::Umwait => "umwait",
            NapChoice::Mwaitx => "mwaitx",
        }
    }

    /// The backend this choice means on a machine with `features`, and why
    /// (a fixed sentence, so no allocation: the slow path re-resolves when
    /// the controller changes the choice). Fails for umwait/mwaitx where the
    /// CPU or OS lacks them.
    pub fn resolve(self, features: &Features) -> Result<(NapBackend, &'static str), RuntimeError> {
        self.resolve_static(features)
            .map_err(|(backend, why)| RuntimeError::NapUnavailable {
                backend: backend.name(),
                reason: why.to_string(),
            })
    }

    /// [`NapChoice::resolve`] without allocating: `Err((backend, why))` where
    /// the backend is unavailable (the slow path's reconfiguration uses it).
    pub(crate) fn resolve_static(
        self,
        features: &Features,
    ) -> Result<(NapBackend, &'static str), (NapBackend, &'static str)> {
        const EXPLICIT: &str = "asked for explicitly";
        Ok(match self {
            NapChoice::Spin => (NapBackend::Spin, EXPLICIT),
            NapChoice::Futex => (NapBackend::Futex, EXPLICIT),
            NapChoice::Hybrid => (NapBackend::Hybrid, EXPLICIT),
            NapChoice::Umwait => match umwait_missing(features) {
                None => (NapBackend::Umwait, EXPLICIT),
                Some(why) => return Err((NapBackend::Umwait, why)),
            },
            NapChoice::Mwaitx => match mwaitx_missing(features) {
                None => (NapBackend::Mwaitx, EXPLICIT),
                Some(why) => return Err((NapBackend::Mwaitx, why)),
            },
            NapChoice::Auto => {
                if umwait_missing(features).is_none() {
                    (
                        NapBackend::Umwait,
                        "auto: umwait (WAITPKG, allowed in user mode) keeps the lane at no cost",
                    )
                } else if mwaitx_missing(features).is_none() {
                    (
                        NapBackend::Mwaitx,
                        "auto: mwaitx (AMD MONITORX/MWAITX) keeps the lane at no cost",
                    )
                } else if features.waitpkg {
                    (
                        NapBackend::Hybrid,
                        "auto: hybrid, because the OS does not allow umwait in user mode and the CPU lacks mwaitx",
                    )
                } else {
                    (
                        NapBackend::Hybrid,
                        "auto: hybrid, because this CPU offers neither umwait (WAITPKG) nor mwaitx (MONITORX)",
                    )
                }
            }
        })
    }
}

/// Why umwait cannot run here (`None`: it can).
fn umwait_missing(f: &Features) -> Option<&'static str> {
    if !cfg!(target_arch = "x86_64") {
        Some("umwait is an x86-64 instruction and this is not an x86-64 CPU")
    } else if !f.waitpkg {
        Some(
            "this CPU lacks WAITPKG (umonitor/umwait, CPUID.7.0:ECX[5]); use auto, hybrid, spin or futex",
        )
    } else if !f.umwait_allowed {
        Some(
            "the CPU has WAITPKG but the OS does not allow umwait in user mode \
             (no /sys/devices/system/cpu/umwait_control); use auto, hybrid, spin or futex",
        )
    } else {
        None
    }
}

/// Why mwaitx cannot run here (`None`: it can).
fn mwaitx_missing(f: &Features) -> Option<&'static str> {
    if !cfg!(target_arch = "x86_64") {
        Some("mwaitx is an x86-64 instruction and this is not an x86-64 CPU")
    } else if !f.mwaitx {
        Some(
            "this CPU lacks MONITORX/MWAITX (AMD, CPUID.8000_0001:ECX[29]); use auto, hybrid, spin or futex",
        )
    } else {
        None
    }
}

impl NapBackend {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            NapBackend::Spin => "spin",
            NapBackend::Futex => "futex",
            NapBackend::Hybrid => "hybrid",
            NapBackend::Umwait => "umwait",
            NapBackend::Mwaitx => "mwaitx",
        }
    }

    /// Whether napping keeps the lane (the OS cannot run another thread there).
    pub fn keeps_lane(self) -> bool {
        !matches!(self, NapBackend::Futex)
    }
}

impl fmt::Display for NapChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for NapBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A nap backend name that is not one of [`NapChoice::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown nap backend {0:?}: expected one of auto, spin, futex, hybrid, umwait, mwaitx")]
pub struct UnknownNapName(pub String);

impl FromStr for NapChoice {
    type Err = UnknownNapName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase();
        NapChoice::ALL
            .into_iter()
            .find(|c| c.name() == norm)
            .ok_or_else(|| UnknownNapName(s.to_string()))
    }
}

/// How often a spinning nap re-reads header line 1 (in `pause`s).
const CONTROL_EVERY: u32 = 4096;
/// How often a hybrid nap's spin phase reads the clock (in `pause`s).
const CLOCK_EVERY: u32 = 64;
/// The longest futex timeout [`Napper::new`] accepts.
pub const MAX_FUTEX_TIMEOUT: Duration = Duration::from_secs(1);
/// umwait/mwaitx wait at most this many TSC ticks before re-reading the
/// control word (~100 µs at 2 GHz).
#[cfg(target_arch = "x86_64")]
const HW_WAIT_TICKS: u64 = 200_000;

/// What a nap watches: the partner request lane's `state`, the value napped
/// on, and the page's header line 1.
pub(crate) struct Watch<'a> {
    /// The request lane's `state`.
    pub state: &'a AtomicU64,
    /// Its low half (the futex word).
    pub futex: &'a AtomicU32,
    /// The value napped on.
    pub napped: u64,
    /// The header's control word.
    pub control: &'a AtomicU64,
    /// Its value when the nap began.
    pub control0: u64,
    /// The header's `heartbeat`.
    pub heartbeat: &'a AtomicU64,
    /// The header's `heartbeat_stale_ns`.
    pub stale_ns: &'a AtomicU64,
    /// For a nap taken because the heartbeat was stale: `(heartbeat,
    /// heartbeat_stale_ns)` when it began (a change ends the nap). `None`:
    /// the heartbeat does not end this nap.
    pub beat0: Option<(u64, u64)>,
    /// This batch lane's `sleepers`.
    pub sleepers: &'a AtomicU32,
}

impl Watch<'_> {
    /// Whether the nap is over: `state` or header line 1 changed.
    #[inline(always)]
    fn over(&self) -> bool {
        self.state.load(Relaxed) != self.napped || self.header_changed()
    }

    /// Whether the control word changed or, for a stale-heartbeat nap, the
    /// controller beat (or changed the bound) since the nap began.
    #[inline(always)]
    fn header_changed(&self) -> bool {
        self.control.load(Relaxed) != self.control0
            || self.beat0.is_some_and(|(beat, stale)| {
                self.heartbeat.load(Relaxed) != beat || self.stale_ns.load(Relaxed) != stale
            })
    }
}

/// A resolved nap backend with its parameters; built only at attach (or on
/// a controller reconfiguration) through [`NapChoice::resolve`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Napper {
    backend: NapBackend,
    hybrid_spin_ticks: u64,
    futex_timeout: libc::timespec,
    clock: Clock,
}

impl Napper {
    /// A napper for `backend` (already resolved against this machine).
    pub(crate) fn new(
        backend: NapBackend,
        hybrid_spin_ns: u32,
        futex_timeout: Duration,
        clock: Clock,
    ) -> Napper {
        let t = futex_timeout.clamp(Duration::from_micros(100), MAX_FUTEX_TIMEOUT);
        Napper {
            backend,
            hybrid_spin_ticks: clock.ns_to_ticks(u64::from(hybrid_spin_ns)),
            futex_timeout: libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            },
            clock,
        }
    }

    /// The same napper with another backend or hybrid bound (a controller
    /// reconfiguration; `backend` already resolved).
    pub(crate) fn with(&self, backend: NapBackend, hybrid_spin_ns: u32) -> Napper {
        Napper {
            backend,
            hybrid_spin_ticks: self.clock.ns_to_ticks(u64::from(hybrid_spin_ns)),
            ..*self
        }
    }

    /// The backend.
    pub(crate) fn backend(&self) -> NapBackend {
        self.backend
    }

    /// The hybrid spin bound, ns.
    pub(crate) fn hybrid_spin_ns(&self) -> u64 {
        self.clock.ticks_to_ns(self.hybrid_spin_ticks)
    }

    /// Naps until `w` is over, or — where it spins — until `spin_deadline`
    /// (page clock; `None`: no bound) passes: then returns `false`. Never
    /// allocates, never fails; leaves `sleepers` as it found it.
    pub(crate) fn nap(&self, w: &Watch<'_>, spin_deadline: Option<u64>) -> bool {
        match self.backend {
            NapBackend::Spin => return spin(w, spin_deadline, self.clock),
            NapBackend::Futex => futex(w, &self.futex_timeout),
            NapBackend::Hybrid => {
                let own = self.clock.now().saturating_add(self.hybrid_spin_ticks);
                let deadline = spin_deadline.map_or(own, |d| d.min(own));
                if !spin(w, Some(deadline), self.clock) {
                    if spin_deadline.is_some_and(|d| d <= own) {
                        return false;
                    }
                    futex(w, &self.futex_timeout);
                }
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a Napper with this backend exists only if
            // NapChoice::resolve found WAITPKG allowed in user mode.
            NapBackend::Umwait => unsafe { hw::umwait(w) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, for MONITORX/MWAITX.
            NapBackend::Mwaitx => unsafe { hw::mwaitx(w) },
            #[cfg(not(target_arch = "x86_64"))]
            NapBackend::Umwait | NapBackend::Mwaitx => return spin(w, spin_deadline, self.clock),
        }
        true
    }
}

/// The spin nap: a `pause` loop that reads `state` every iteration and
/// header line 1 every [`CONTROL_EVERY`] iterations, nothing else. Returns
/// `true` when the nap is over, `false` when `deadline` (page clock) passed.
fn spin(w: &Watch<'_>, deadline: Option<u64>, clock: Clock) -> bool {
    let mut i: u32 = 0;
    loop {
        if w.state.load(Relaxed) != w.napped {
            return true;
        }
        i = i.wrapping_add(1);
        if i % CONTROL_EVERY == 0 && w.header_changed() {
            return true;
        }
        if let Some(d) = deadline {
            if i % CLOCK_EVERY == 0 && clock.now() >= d {
                return false;
            }
        }
        core::hint::spin_loop();
    }
}

/// The futex nap (protocol.md, "futex"): register in `sleepers`, full
/// fence, re-read `state`; block only if it still holds the napped value.
/// The LC stores `state`, fences, then reads `sleepers`: either it sees us
/// and wakes us, or we see its store and do not block. The timeout bounds
/// how late a change of header line 1 is noticed.
fn futex(w: &Watch<'_>, timeout: &libc::timespec) {
    loop {
        w.sleepers.fetch_add(1, SeqCst);
        fence(SeqCst);
        let over = w.over();
        if !over {
            futex_wait(w.futex, w.napped as u32, timeout);
        }
        w.sleepers.fetch_sub(1, SeqCst);
        if over || w.over() {
            return;
        }
        // Timeout, spurious wake, or a queue-length-only change woke nobody:
        // register again.
    }
}

/// `FUTEX_WAIT` (shared: the word is in a file mapping other processes
/// share) while `*word == val`, for at most `timeout`.
fn futex_wait(word: &AtomicU32, val: u32, timeout: &libc::timespec) {
    // SAFETY: `word` is a live, 4-byte-aligned u32 in a shared mapping; the
    // kernel only reads it and the timespec. EAGAIN/EINTR/ETIMEDOUT are all
    // fine: the caller re-checks.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            val,
            timeout as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// `FUTEX_WAKE` (shared) of every waiter on `word`.
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: as above; FUTEX_WAKE does not dereference the timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// The hardware waits. Only reachable through a [`Napper`] whose backend
/// [`NapChoice::resolve`] allowed on this machine.
#[cfg(target_arch = "x86_64")]
mod hw {
    use super::{HW_WAIT_TICKS, Watch};
    use core::arch::asm;
    use core::arch::x86_64::_rdtsc;

    /// Arms the monitor on the `state` line, re-checks, then `umwait`s in
    /// C0.1 (the faster-waking state) until a write to the line, a deadline
    /// ~[`HW_WAIT_TICKS`] away, or the OS's limit.
    ///
    /// SAFETY: the CPU must implement WAITPKG and the OS allow it in user mode.
    pub(super) unsafe fn umwait(w: &Watch<'_>) {
        loop {
            // SAFETY: per the function contract; umonitor only reads the address.
            unsafe {
                asm!("umonitor {0}", in(reg) w.state.as_ptr(), options(nostack, preserves_flags));
            }
            if w.over() {
                return;
            }
            // SAFETY: rdtsc has no preconditions.
            let deadline = unsafe { _rdtsc() }.wrapping_add(HW_WAIT_TICKS);
            // SAFETY: per the function contract; umwait writes only CF.
            unsafe {
                asm!(
                    "umwait {ctl:e}",
                    ctl = in(reg) 1u32,
                    in("eax") deadline as u32,
                    in("edx") (deadline >> 32) as u32,
                    options(nostack),
                );
            }
            if w.over() {
                return;
            }
        }
    }

    /// As [`umwait`] with AMD's `monitorx`/`mwaitx` (timer enabled, C-states
    /// disabled so the wake is fast).
    ///
    /// SAFETY: the CPU must implement MONITORX/MWAITX.
    pub(super) unsafe fn mwaitx(w: &Watch<'_>) {
        loop {
            // SAFETY: per the function contract; monitorx only reads the address.
            unsafe {
                asm!(
                    "monitorx",
                    in("rax") w.state.as_ptr(),
                    in("ecx") 0u32,
                    in("edx") 0u32,
                    options(nostack, preserves_flags),
                );
            }
            if w.over() {
                return;
            }
            // SAFETY: per the function contract. mwaitx takes the timeout in
            // ebx, which Rust reserves, so it is swapped in and out.
            unsafe {
                asm!(
                    "xchg {t}, rbx",
                    "mwaitx",
                    "xchg {t}, rbx",
                    t = inout(reg) HW_WAIT_TICKS => _,
                    in("eax") 0xF0u32,
                    in("ecx") 2u32,
                    options(nostack, preserves_flags),
                );
            }
            if w.over() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(waitpkg: bool, allowed: bool, mwaitx: bool) -> Features {
        Features {
            smt: false,
            invariant_tsc: true,
            waitpkg,
            umwait_allowed: allowed,
            mwaitx,
            perf_hw_counters: false,
            perf_hw_counters_reason: Some("test".into()),
            hypervisor: true,
        }
    }

    #[test]
    fn ids_and_names_round_trip() {
        for c in NapChoice::ALL {
            assert_eq!(NapChoice::from_id(c.id()), Some(c));
            assert_eq!(c.name().parse::<NapChoice>().unwrap(), c);
        }
        assert_eq!(NapChoice::from_id(6), None);
        assert!(
            "nanonap"
                .parse::<NapChoice>()
                .unwrap_err()
                .to_string()
                .contains("nanonap")
        );
    }

    #[test]
    fn auto_prefers_hardware_waits_where_allowed() {
        let (b, why) = NapChoice::Auto
            .resolve(&features(true, true, false))
            .unwrap();
        assert_eq!(b, NapBackend::Umwait, "{why}");
        let (b, _) = NapChoice::Auto
            .resolve(&features(false, false, true))
            .unwrap();
        assert_eq!(b, NapBackend::Mwaitx);
        let (b, why) = NapChoice::Auto
            .resolve(&features(true, false, false))
            .unwrap();
        assert_eq!(b, NapBackend::Hybrid);
        assert!(why.contains("does not allow umwait"), "{why}");
        let (b, why) = NapChoice::Auto
            .resolve(&features(false, false, false))
            .unwrap();
        assert_eq!(b, NapBackend::Hybrid);
        assert!(why.contains("neither umwait"), "{why}");
    }

    #[test]
    fn explicit_hardware_waits_fail_where_absent() {
        let none = features(false, false, false);
        let e = NapChoice::Umwait.resolve(&none).unwrap_err().to_string();
        assert!(
            e.contains("umwait is unavailable") && e.contains("lacks WAITPKG"),
            "{e}"
        );
        let e = NapChoice::Umwait
            .resolve(&features(true, false, false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not allow umwait"), "{e}");
        let e = NapChoice::Mwaitx.resolve(&none).unwrap_err().to_string();
        assert!(
            e.contains("mwaitx is unavailable") && e.contains("lacks MONITORX"),
            "{e}"
        );
        for c in [NapChoice::Spin, NapChoice::Futex, NapChoice::Hybrid] {
            assert_eq!(c.resolve(&none).unwrap().0.name(), c.name());
        }
    }
}
