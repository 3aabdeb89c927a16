//! The page clock: what timestamps in the signal page count.
//!
//! On x86-64 with an invariant TSC (CPUID 0x8000_0007 EDX bit 8) timestamps
//! are raw `rdtsc` ticks — one instruction, ~10 ns even in a VM — and the
//! rate is calibrated once per process against `CLOCK_MONOTONIC`. Elsewhere
//! they are `CLOCK_MONOTONIC` nanoseconds. The page header records which,
//! so every process attached to a page reads the same clock.

use crate::layout::clock;
use std::sync::OnceLock;

/// A page clock: kind and rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// [`clock::TSC`] or [`clock::MONOTONIC_NS`].
    pub kind: u32,
    /// Ticks per second.
    pub ticks_per_sec: u64,
}

/// `CLOCK_MONOTONIC` in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_MONOTONIC
    // always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The time-stamp counter (x86-64 only).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Whether this CPU has an invariant TSC usable as the page clock.
pub fn invariant_tsc() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let max_ext = core::arch::x86_64::__cpuid(0x8000_0000).eax;
        max_ext >= 0x8000_0007 && (core::arch::x86_64::__cpuid(0x8000_0007).edx >> 8) & 1 == 1
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Clock {
    /// The monotonic nanosecond clock.
    pub const MONOTONIC: Clock = Clock {
        kind: clock::MONOTONIC_NS,
        ticks_per_sec: 1_000_000_000,
    };

    /// The best clock of this machine (calibrated once per process).
    pub fn detect() -> Clock {
        static DETECTED: OnceLock<Clock> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if invariant_tsc() {
                return Clock {
                    kind: clock::TSC,
                    ticks_per_sec: calibrate_tsc(),
                };
            }
            Clock::MONOTONIC
        })
    }

    /// Now, in this clock's ticks.
    #[inline]
    pub fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.kind == clock::TSC {
            return rdtsc();
        }
        monotonic_ns()
    }

    /// Converts ticks to nanoseconds.
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        if self.ticks_per_sec == 1_000_000_000 {
            return ticks;
        }
        (ticks as u128 * 1_000_000_000 / self.ticks_per_sec.max(1) as u128) as u64
    }

    /// Converts nanoseconds to ticks.
    #[inline]
    pub fn ns_to_ticks(&self, ns: u64) -> u64 {
        if self.ticks_per_sec == 1_000_000_000 {
            return ns;
        }
        (ns as u128 * self.ticks_per_sec as u128 / 1_000_000_000) as u64
    }
}

/// Measures the TSC rate against CLOCK_MONOTONIC over ~20 ms (median of 3
/// windows, so one preempted window does not skew it).
#[cfg(target_arch = "x86_64")]
fn calibrate_tsc() -> u64 {
    let mut rates = [0u64; 3];
    for r in &mut rates {
        let (t0, c0) = (monotonic_ns(), rdtsc());
        std::thread::sleep(std::time::Duration::from_millis(7));
        let (t1, c1) = (monotonic_ns(), rdtsc());
        *r = ((c1 - c0) as u128 * 1_000_000_000 / (t1 - t0).max(1) as u128) as u64;
    }
    rates.sort_unstable();
    // Round to 100 kHz: the calibration is not more precise than that.
    (rates[1] + 50_000) / 100_000 * 100_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_and_converts() {
        let c = Clock::detect();
        assert!(c.ticks_per_sec >= 1_000_000, "{c:?}");
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert_eq!(Clock::MONOTONIC.ticks_to_ns(123), 123);
        let tsc = Clock {
            kind: clock::TSC,
            ticks_per_sec: 2_000_000_000,
        };
        assert_eq!(tsc.ticks_to_ns(2_000), 1_000);
        assert_eq!(tsc.ns_to_ticks(1_000), 2_000);
    }

    #[test]
    fn ten_ms_of_sleep_reads_as_roughly_ten_ms() {
        // A sanity check of the calibration, not a speed assertion: a 10 ms
        // sleep must read as at least 10 ms (sleep never returns early) and
        // less than 10 s (a broken rate would be off by orders of magnitude).
        let c = Clock::detect();
        let a = c.now();
        std::thread::sleep(std::time::Duration::from_millis(10));
        let ns = c.ticks_to_ns(c.now() - a);
        assert!((9_500_000..10_000_000_000).contains(&ns), "{ns} ns");
    }
}
