//! Small Linux helpers: scheduling class, timer slack, per-thread CPU time
//! (`schedstat`), a shared-memory region passed to a child process, signals.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// The calling thread's id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Puts the calling thread in `SCHED_IDLE`: any normal thread that wakes on
/// its CPU preempts it.
pub fn set_sched_idle() -> io::Result<()> {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 = the calling thread; `p` is valid for the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's scheduling policy (`libc::SCHED_*`).
pub fn sched_policy() -> i32 {
    // SAFETY: pid 0 = the calling thread.
    unsafe { libc::sched_getscheduler(0) }
}

/// Sets the calling thread's timer slack (the default 50 µs would make every
/// timed send up to 50 µs late).
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long; no pointers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// `(on-CPU ns, run-queue wait ns)` of thread `tid` of process `pid`, from
/// `/proc/<pid>/task/<tid>/schedstat`.
pub fn thread_schedstat(pid: u32, tid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    parse_schedstat(&s)
}

/// Parses a `schedstat` line: `on_cpu_ns wait_ns timeslices`.
pub fn parse_schedstat(s: &str) -> Option<(u64, u64)> {
    let mut it = s.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

/// The thread ids of process `pid`.
pub fn thread_ids(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// On-CPU time of every thread of this process except `exclude`, ns.
pub fn process_cpu_ns_except(exclude: &[u32]) -> u64 {
    let pid = std::process::id();
    thread_ids(pid)
        .into_iter()
        .filter(|t| !exclude.contains(t))
        .filter_map(|t| thread_schedstat(pid, t))
        .map(|(c, _)| c)
        .sum()
}

/// Clock ticks (`USER_HZ`) per second.
pub fn ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// `(busy, steal)` ticks of the whole machine from `/proc/stat`: busy =
/// user + nice + system (interrupt time excluded, as it is not charged to
/// processes either).
pub fn machine_ticks() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_proc_stat(&s)
}

/// Parses the `cpu` line of `/proc/stat`.
pub fn parse_proc_stat(s: &str) -> (u64, u64) {
    let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    (at(0) + at(1) + at(2), at(7))
}

/// `utime + stime` ticks of process `pid` (all its threads), from
/// `/proc/<pid>/stat`; 0 if it is gone.
pub fn process_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    parse_pid_stat(&s)
}

/// Parses fields 14 and 15 (utime, stime) of a `/proc/<pid>/stat` line.
pub fn parse_pid_stat(s: &str) -> u64 {
    // the command name may contain spaces and parentheses: fields start
    // after the last ')'
    let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state): utime is field 14 -> index 11
    let get = |i: usize| f.get(i).and_then(|w| w.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// Asks the kernel to SIGKILL the calling process when its parent dies.
pub fn kill_me_with_parent() {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; no pointers.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
}

/// The parent process id.
pub fn parent_pid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::getppid() as u32 }
}

/// Sends SIGKILL to `pid`.
pub fn kill_pid(pid: u32) {
    // SAFETY: plain kill(2) on a pid we spawned.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

/// A shared read-write memory region: created by the parent as a `memfd`
/// and opened by the child through `/proc/<parent>/fd/<fd>`, so nothing is
/// left in `/dev/shm` whatever happens to either process.
pub struct Region {
    ptr: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the region is shared memory accessed only through atomics.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("len", &self.len).finish()
    }
}

impl Region {
    /// A zeroed region of `len` bytes backed by a new memfd.
    pub fn create(len: usize) -> io::Result<Region> {
        let name = c"elfen-bench-stats";
        // SAFETY: the name is NUL-terminated; flags are valid.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Region::map(fd, len)
    }

    /// Opens a region by path (e.g. `/proc/<pid>/fd/<n>`), `len` bytes.
    pub fn open(path: &Path, len: usize) -> io::Result<Region> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        if (f.metadata()?.len() as usize) < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is shorter than {len} bytes", path.display()),
            ));
        }
        Region::map(OwnedFd::from(f), len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Region> {
        // SAFETY: mapping `len` bytes of a file at least that long, shared.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            ptr: ptr.cast(),
            len,
            fd,
        })
    }

    /// The path another process of this user opens it by.
    pub fn proc_path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd())
    }

    /// A reference to a `T` at byte `offset`.
    ///
    /// # Safety
    /// `T` must be made of atomics (any bit pattern valid), `offset` aligned
    /// for `T`, and `offset + size_of::<T>() <= len`.
    pub unsafe fn at<T>(&self, offset: usize) -> &T {
        debug_assert!(offset + std::mem::size_of::<T>() <= self.len);
        // SAFETY: by the caller's contract.
        unsafe { &*(self.ptr.add(offset) as *const T) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping what `map` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn schedstat_parses_and_reads() {
        assert_eq!(parse_schedstat("12 34 5\n"), Some((12, 34)));
        assert_eq!(parse_schedstat("x"), None);
        let me = std::process::id();
        assert!(thread_schedstat(me, gettid()).is_some());
        assert!(thread_ids(me).contains(&gettid()));
    }

    #[test]
    fn proc_stat_lines_parse() {
        assert_eq!(
            parse_proc_stat("cpu  10 1 5 100 2 3 4 7 0 0\ncpu0 1 1 1 1"),
            (16, 7)
        );
        assert_eq!(parse_proc_stat(""), (0, 0));
        assert_eq!(
            parse_pid_stat("42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 30 12 0 0"),
            42
        );
        assert!(machine_ticks().0 > 0);
        let _ = process_ticks(std::process::id());
        assert!(ticks_per_s() > 0.0);
    }

    #[test]
    fn regions_are_shared_through_proc() {
        let a = Region::create(4096).unwrap();
        let b = Region::open(Path::new(&a.proc_path()), 4096).unwrap();
        // SAFETY: offset 64 is aligned and inside both.
        let (x, y): (&AtomicU64, &AtomicU64) = unsafe { (a.at(64), b.at(64)) };
        x.store(77, Ordering::SeqCst);
        assert_eq!(y.load(Ordering::SeqCst), 77);
        assert!(Region::open(Path::new(&a.proc_path()), 8192).is_err());
    }
}
