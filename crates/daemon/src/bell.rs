//! [`Bell`]: how the LC signal writer wakes the threads that act on a
//! request lane's state (guards, freezers) — an eventfd they sleep on, and
//! the time of the last LC busy edge so they can tell how late they woke.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::Duration;

/// An eventfd rung by the writer after each write of a request lane's LC
/// line. A ring is never lost: it stays pending until the next wait.
#[derive(Debug)]
pub struct Bell {
    fd: libc::c_int,
    /// Rung only when the lane goes busy (a guard: the idle edge ends its
    /// spin through the LC line itself).
    busy_only: bool,
    /// `CLOCK_MONOTONIC` ns of the switch that made the lane busy last
    /// (the signal source's time of the event).
    busy_event_ns: AtomicU64,
}

impl Bell {
    /// A new bell.
    pub fn new() -> std::io::Result<Bell> {
        // SAFETY: plain syscall; the fd is owned by the Bell.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Bell {
            fd,
            busy_only: false,
            busy_event_ns: AtomicU64::new(0),
        })
    }

    /// A new bell the writer rings only when the lane goes busy.
    pub fn busy_edges_only() -> std::io::Result<Bell> {
        let mut b = Bell::new()?;
        b.busy_only = true;
        Ok(b)
    }

    /// Whether the writer rings it only when the lane goes busy.
    pub fn busy_only(&self) -> bool {
        self.busy_only
    }

    /// Wakes the sleeper (one `write`).
    pub fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd. A full
        // counter (EAGAIN) means a ring is pending anyway.
        unsafe { libc::write(self.fd, (&raw const one).cast(), 8) };
    }

    /// Records the time of a busy edge, then rings.
    pub fn ring_busy(&self, event_ns: u64) {
        self.busy_event_ns.store(event_ns, Release);
        self.ring();
    }

    /// The time of the last busy edge (0 = none yet).
    pub fn busy_event_ns(&self) -> u64 {
        self.busy_event_ns.load(Acquire)
    }

    /// Sleeps until rung or `timeout`; clears pending rings. Returns
    /// whether it was rung.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        n > 0 && self.clear()
    }

    /// Clears pending rings; returns whether there were any.
    pub fn clear(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our nonblocking eventfd.
        let r = unsafe { libc::read(self.fd, (&raw mut v).cast(), 8) };
        r == 8 && v > 0
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        // SAFETY: our fd, closed once.
        unsafe { libc::close(self.fd) };
    }
}

impl std::os::fd::AsRawFd for Bell {
    /// The eventfd, for a thread that polls it beside other fds.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_kept_until_waited_for() {
        let b = Bell::new().unwrap();
        assert!(!b.wait(Duration::from_millis(1)));
        b.ring();
        b.ring_busy(42);
        assert_eq!(b.busy_event_ns(), 42);
        assert!(b.wait(Duration::from_millis(1)));
        assert!(!b.clear());
    }
}
