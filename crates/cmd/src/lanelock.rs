//! One user of the lanes at a time, machine-wide.
//!
//! Tests and benchmarks that pin threads to the lanes, run SCHED_FIFO
//! threads or time what happens there disturb each other when two run at
//! once — two test binaries, two checkouts, a benchmark beside a test. They
//! take [`LaneLock`] first: an exclusive `flock` on one file
//! ([`LANE_LOCK_PATH`]), released when the guard drops or the process dies.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;

/// The lock file every lane user locks.
pub const LANE_LOCK_PATH: &str = "/tmp/elfen-lanes.lock";

/// Holds the machine-wide lane lock until dropped.
#[derive(Debug)]
pub struct LaneLock {
    _file: File,
}

impl LaneLock {
    /// Waits until no other process holds the lock, then holds it.
    pub fn acquire() -> io::Result<LaneLock> {
        // flock needs no write access: open read-only, so any user can lock
        // a file another user created; whoever creates it makes it 0666
        // whatever the umask.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(LANE_LOCK_PATH)
            .and_then(|f| {
                use std::os::unix::fs::PermissionsExt;
                // SAFETY: geteuid has no preconditions.
                let owner = f.metadata()?.uid() == unsafe { libc::geteuid() };
                if owner {
                    f.set_permissions(std::fs::Permissions::from_mode(0o666))?;
                }
                Ok(f)
            })
            .or_else(|_| {
                OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(LANE_LOCK_PATH)
            })?;
        loop {
            // SAFETY: flock on a file descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(LaneLock { _file: file });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_for_the_first() {
        let first = LaneLock::acquire().unwrap();
        let f = File::open(LANE_LOCK_PATH).unwrap();
        // SAFETY: flock on a file descriptor we own.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(r, -1, "the lock was free while held");
        drop(first);
        // SAFETY: as above.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(r, 0, "the lock stayed held after the guard dropped");
    }
}
