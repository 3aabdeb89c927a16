//! What the commands read from `/proc` and ask of the scheduler: thread
//! ids, per-thread CPU time (`schedstat`), machine and process CPU ticks,
//! the load average, scheduling classes, and process liveness.

use std::io;

pub use elfen_shm::pid_alive;

/// The calling thread's id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// A scheduling class for a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedClass {
    /// `SCHED_OTHER` (CFS / EEVDF), nice 0: what programs get by default.
    Other,
    /// `SCHED_IDLE`: any normal thread that wakes on its CPU preempts it.
    Idle,
    /// `SCHED_FIFO` at this priority (1..=99): preempts every normal and
    /// idle thread; needs `CAP_SYS_NICE` (root) or an RLIMIT_RTPRIO.
    Fifo(u8),
}

impl SchedClass {
    /// `other`, `idle` or `fifo:<prio>`.
    pub fn name(self) -> String {
        match self {
            SchedClass::Other => "SCHED_OTHER".into(),
            SchedClass::Idle => "SCHED_IDLE".into(),
            SchedClass::Fifo(p) => format!("SCHED_FIFO {p}"),
        }
    }
}

/// Puts thread `tid` (0 = the calling thread) in `class`.
pub fn set_sched(tid: u32, class: SchedClass) -> io::Result<()> {
    let (policy, prio) = match class {
        SchedClass::Other => (libc::SCHED_OTHER, 0),
        SchedClass::Idle => (libc::SCHED_IDLE, 0),
        SchedClass::Fifo(p) => (libc::SCHED_FIFO, i32::from(p.clamp(1, 99))),
    };
    let p = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: a thread id (0 = caller) and a valid sched_param.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, policy, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's scheduling policy (`libc::SCHED_*`).
pub fn sched_policy() -> i32 {
    // SAFETY: pid 0 = the calling thread.
    unsafe { libc::sched_getscheduler(0) }
}

/// Sets the calling thread's timer slack (the default 50 µs would make a
/// timed send up to 50 µs late).
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long; no pointers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// A thread's `schedstat`: the kernel's account of its CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Schedstat {
    /// Time on a CPU, ns.
    pub on_cpu_ns: u64,
    /// Time runnable but waiting on a run queue, ns.
    pub wait_ns: u64,
    /// Times switched in (its wake-ups, for a thread that runs briefly and
    /// sleeps).
    pub runs: u64,
}

/// The `schedstat` of thread `tid` of process `pid`, from
/// `/proc/<pid>/task/<tid>/schedstat`.
pub fn thread_schedstat(pid: u32, tid: u32) -> Option<Schedstat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    parse_schedstat(&s)
}

/// Parses a `schedstat` line: `on_cpu_ns wait_ns timeslices`.
pub fn parse_schedstat(s: &str) -> Option<Schedstat> {
    let mut it = s.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some(Schedstat {
        on_cpu_ns: it.next()??,
        wait_ns: it.next()??,
        runs: it.next()??,
    })
}

/// The thread ids of process `pid` (empty if it is gone).
pub fn thread_ids(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// On-CPU time of every thread of process `pid` except `exclude`, ns.
pub fn process_cpu_ns_except(pid: u32, exclude: &[u32]) -> u64 {
    thread_ids(pid)
        .into_iter()
        .filter(|t| !exclude.contains(t))
        .filter_map(|t| thread_schedstat(pid, t))
        .map(|s| s.on_cpu_ns)
        .sum()
}

/// Clock ticks (`USER_HZ`) per second.
pub fn ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// The machine's CPU time so far, from the `cpu` line of `/proc/stat`, in
/// clock ticks summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineTicks {
    /// user + nice + system: time charged to processes (interrupt time is
    /// left out because it is not charged to any process either, so
    /// `process_busy − this process's ticks` is other processes' time).
    pub process_busy: u64,
    /// Time the host took from this VM (`steal`).
    pub steal: u64,
    /// Every field summed.
    pub total: u64,
}

impl MachineTicks {
    /// Reads `/proc/stat` now.
    pub fn now() -> MachineTicks {
        MachineTicks::parse(&std::fs::read_to_string("/proc/stat").unwrap_or_default())
    }

    /// Parses the `cpu` line of a `/proc/stat` text.
    pub fn parse(s: &str) -> MachineTicks {
        let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else {
            return MachineTicks::default();
        };
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap_or(0))
            .collect();
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        MachineTicks {
            process_busy: at(0) + at(1) + at(2),
            steal: at(7),
            total: v.iter().take(8).sum(),
        }
    }

    /// `self − earlier`, field by field.
    pub fn since(&self, earlier: &MachineTicks) -> MachineTicks {
        MachineTicks {
            process_busy: self.process_busy.saturating_sub(earlier.process_busy),
            steal: self.steal.saturating_sub(earlier.steal),
            total: self.total.saturating_sub(earlier.total),
        }
    }
}

/// `utime + stime` ticks of process `pid` (all its threads), from
/// `/proc/<pid>/stat`; 0 if it is gone.
pub fn process_ticks(pid: u32) -> u64 {
    parse_pid_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
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

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`; NaN if unreadable).
pub fn loadavg() -> [f64; 3] {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut v = s.split_whitespace().map(|x| x.parse().unwrap_or(f64::NAN));
    [
        v.next().unwrap_or(f64::NAN),
        v.next().unwrap_or(f64::NAN),
        v.next().unwrap_or(f64::NAN),
    ]
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

/// Sends `signal` to process `pid` (only pids this program started).
pub fn signal_pid(pid: u32, signal: libc::c_int) {
    if pid == 0 || pid > i32::MAX as u32 {
        return;
    }
    // SAFETY: plain kill(2).
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

/// Sends SIGKILL to `pid` (only pids this program started).
pub fn kill_pid(pid: u32) {
    signal_pid(pid, libc::SIGKILL);
}

/// Whether this process runs as root (effective uid 0): BPF, real-time
/// priorities and cgroup writes need it.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The process's effective capability mask (`CapEff` of
/// `/proc/self/status`; 0 when it cannot be read).
pub fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_parses_and_reads() {
        assert_eq!(
            parse_schedstat("12 34 5\n"),
            Some(Schedstat {
                on_cpu_ns: 12,
                wait_ns: 34,
                runs: 5
            })
        );
        assert_eq!(parse_schedstat("x"), None);
        let me = std::process::id();
        assert!(thread_schedstat(me, gettid()).is_some());
        assert!(thread_ids(me).contains(&gettid()));
        assert!(process_cpu_ns_except(me, &[]) > 0);
    }

    #[test]
    fn proc_stat_lines_parse() {
        let t = MachineTicks::parse("cpu  10 1 5 100 2 3 4 7 0 0\ncpu0 1 1 1 1");
        assert_eq!((t.process_busy, t.steal, t.total), (16, 7, 132));
        assert_eq!(MachineTicks::parse(""), MachineTicks::default());
        assert_eq!(t.since(&t), MachineTicks::default());
        assert_eq!(
            parse_pid_stat("42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 30 12 0 0"),
            42
        );
        assert!(MachineTicks::now().total > 0);
        assert!(ticks_per_s() > 0.0);
        assert!(loadavg()[0] >= 0.0);
    }

    #[test]
    fn liveness() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }
}
