//! Time for the load kit: a monotonic clock in nanoseconds that sleeps
//! to absolute deadlines ([`MonoClock`], `CLOCK_MONOTONIC` — the signal
//! page's clock), and a clock the tests move by hand ([`FakeClock`]), both
//! behind [`Clock`] so the sender and the accounting run on either.

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonic clock in nanoseconds that can sleep until a deadline.
pub trait Clock: Send + Sync {
    /// Now, ns.
    fn now_ns(&self) -> u64;
    /// Sleeps until `deadline_ns` (returns at once if it has passed).
    fn sleep_until_ns(&self, deadline_ns: u64);
}

/// `CLOCK_MONOTONIC`, with absolute `clock_nanosleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonoClock;

/// `CLOCK_MONOTONIC` now, ns (the signal page's clock).
pub use elfen_shm::clock::monotonic_ns as mono_ns;

impl Clock for MonoClock {
    fn now_ns(&self) -> u64 {
        mono_ns()
    }
    fn sleep_until_ns(&self, deadline_ns: u64) {
        let ts = libc::timespec {
            tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
        };
        loop {
            // SAFETY: absolute sleep on CLOCK_MONOTONIC; `ts` outlives the call.
            let rc = unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
            if rc != libc::EINTR {
                return;
            }
        }
    }
}

/// A clock the tests move by hand: sleeping jumps to the deadline.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: AtomicU64,
}

impl FakeClock {
    /// A fake clock at `ns`.
    pub fn at(ns: u64) -> FakeClock {
        FakeClock {
            now: AtomicU64::new(ns),
        }
    }
    /// Moves the clock forward by `ns`.
    pub fn advance(&self, ns: u64) {
        self.now.fetch_add(ns, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
    fn sleep_until_ns(&self, deadline_ns: u64) {
        self.now.fetch_max(deadline_ns, Ordering::SeqCst);
    }
}
