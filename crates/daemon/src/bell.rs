//! [`Bell`]: how the LC signal writer wakes the threads that act on a
//! request lane's state (guards, freezers, blind isolation) — an eventfd
//! they sleep on, and the time of the last LC busy edge so they can tell
//! how late they woke.
//!
//! A bell is **armed** while a protection that sleeps on it is applied; the
//! writer skips a disarmed bell (no system call), so the bells of every
//! mode a group may switch to can be wired into the writer at start. A
//! bell made [`Bell::per_cpu`] also keeps the time of the last busy edge of
//! each CPU (blind isolation acts on any CPU the LC runs on).

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
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
    /// Whether the writer rings it.
    armed: AtomicBool,
    /// Per CPU: the time of its last busy edge (empty unless per-CPU).
    cpu_edges: Box<[AtomicU64]>,
    /// The CPU its sleeper runs on, when pinned (a guard's batch lane).
    sleeper_cpu: Option<u32>,
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
            armed: AtomicBool::new(true),
            cpu_edges: Box::new([]),
            sleeper_cpu: None,
        })
    }

    /// The same bell, its sleeper pinned to `cpu`.
    pub fn for_cpu(mut self, cpu: u32) -> Bell {
        self.sleeper_cpu = Some(cpu);
        self
    }

    /// The CPU its sleeper runs on, when pinned.
    pub fn sleeper_cpu(&self) -> Option<u32> {
        self.sleeper_cpu
    }

    /// A new bell that also keeps the last busy edge of each of `cpus`
    /// CPUs (0..cpus), rung for busy edges of any CPU the writer watches.
    pub fn per_cpu(cpus: u32) -> std::io::Result<Bell> {
        let mut b = Bell::new()?;
        b.busy_only = true;
        b.cpu_edges = (0..cpus).map(|_| AtomicU64::new(0)).collect();
        Ok(b)
    }

    /// Whether it keeps per-CPU busy edges.
    pub fn is_per_cpu(&self) -> bool {
        !self.cpu_edges.is_empty()
    }

    /// Arms (the writer rings it) or disarms it (the writer skips it).
    pub fn arm(&self, on: bool) {
        self.armed.store(on, Release);
    }

    /// Whether the writer rings it.
    pub fn is_armed(&self) -> bool {
        self.armed.load(Acquire)
    }

    /// Records a busy edge of `cpu` at `event_ns`, then rings (when armed).
    pub fn ring_busy_on(&self, cpu: u32, event_ns: u64) {
        if let Some(e) = self.cpu_edges.get(cpu as usize) {
            e.store(event_ns, Release);
        }
        self.busy_event_ns.store(event_ns, Release);
        if self.is_armed() {
            self.ring();
        }
    }

    /// The time of `cpu`'s last busy edge (0 = none, or not per-CPU).
    pub fn busy_edge_on(&self, cpu: u32) -> u64 {
        self.cpu_edges
            .get(cpu as usize)
            .map_or(0, |e| e.load(Relaxed))
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

    /// Records the time of a busy edge, then rings (when armed).
    pub fn ring_busy(&self, event_ns: u64) {
        self.busy_event_ns.store(event_ns, Release);
        if self.is_armed() {
            self.ring();
        }
    }

    /// Rings when armed (the writer's idle edges).
    pub fn ring_if_armed(&self) {
        if self.is_armed() {
            self.ring();
        }
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

    #[test]
    fn a_disarmed_bell_keeps_the_edge_but_is_not_rung() {
        let b = Bell::per_cpu(4).unwrap();
        assert!(b.is_per_cpu() && b.busy_only());
        b.arm(false);
        b.ring_busy_on(2, 99);
        assert_eq!(b.busy_edge_on(2), 99);
        assert_eq!(b.busy_edge_on(7), 0, "out of range");
        assert!(!b.wait(Duration::from_millis(1)), "not rung while disarmed");
        b.arm(true);
        b.ring_busy_on(1, 100);
        assert!(b.wait(Duration::from_millis(1)));
        assert_eq!((b.busy_edge_on(1), b.busy_event_ns()), (100, 100));
    }
}
