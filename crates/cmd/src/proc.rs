//! What the commands read from `/proc` and ask of the scheduler: thread
//! ids, per-thread CPU time (`schedstat`), machine and process CPU ticks,
//! a process's resident memory, major faults and bytes read, the OOM
//! killer's count, the load average, scheduling classes, and process
//! liveness and identity (start time, command, user: [`ProcessInfo`], and whether a pid
//! a file recorded still belongs to the process that wrote it: [`holder`]).

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

/// `pid` and every process below it (children read from
/// `/proc/<pid>/task/<tid>/children`), parents first.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        for tid in thread_ids(p) {
            if let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/task/{tid}/children")) {
                out.extend(s.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
        i += 1;
    }
    out
}

/// The `schedstat` of every thread of the processes `pids`, summed (the
/// CPU time of a process tree, as the harness measures unmodified
/// programs).
pub fn processes_schedstat(pids: &[u32]) -> Schedstat {
    let mut sum = Schedstat::default();
    for &p in pids {
        for t in thread_ids(p) {
            let s = thread_schedstat(p, t).unwrap_or_default();
            sum.on_cpu_ns += s.on_cpu_ns;
            sum.wait_ns += s.wait_ns;
            sum.runs += s.runs;
        }
    }
    sum
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

/// Major page faults of process `pid` so far (`/proc/<pid>/stat` field
/// 12); 0 if it is gone.
pub fn major_faults(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    s.rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().nth(9))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resident memory of process `pid`, bytes (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Bytes process `pid` has read (`rchar` of `/proc/<pid>/io`: every read
/// call, cached or not); 0 if unreadable.
pub fn read_chars(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("rchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The kernel OOM killer's kills since boot (`oom_kill` of `/proc/vmstat`).
pub fn oom_kills() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
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

/// `/proc/<pid>/stat` field 22: when process `pid` started, in clock
/// ticks since boot (`None` when it is gone). With the pid it names one
/// process for good: a pid reused by another program has a later start.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // field 3 (state) is the first after the name: field 22 is index 19
    s.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// When the machine booted, Unix seconds (`btime` of `/proc/stat`).
pub fn boot_time_unix_s() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// `/proc/<pid>/comm`, without its newline.
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

/// The real and effective uid of process `pid` (`/proc/<pid>/status`).
pub fn uids(pid: u32) -> Option<(u32, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut it = s
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .map(|w| w.parse::<u32>().ok());
    Some((it.next()??, it.next()??))
}

/// User names and ids: one implementation, `elfen_shm::users`.
pub use elfen_shm::users::{describe_user, user_id, user_name};

/// A process as messages name it: pid, command, owner, start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Its pid.
    pub pid: u32,
    /// Its start, clock ticks since boot ([`start_ticks`]).
    pub start_ticks: u64,
    /// Its command name.
    pub comm: String,
    /// Its real uid.
    pub uid: u32,
}

impl ProcessInfo {
    /// Reads process `pid` (`None` when it is gone or a zombie).
    pub fn read(pid: u32) -> Option<ProcessInfo> {
        if !pid_alive(pid) {
            return None;
        }
        Some(ProcessInfo {
            pid,
            start_ticks: start_ticks(pid)?,
            comm: comm(pid).unwrap_or_default(),
            uid: uids(pid)?.0,
        })
    }

    /// When it started, Unix seconds (clock-tick resolution).
    pub fn started_unix_s(&self) -> Option<f64> {
        Some(boot_time_unix_s()? as f64 + self.start_ticks as f64 / ticks_per_s())
    }
}

impl std::fmt::Display for ProcessInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} ({}, {})",
            self.pid,
            self.comm,
            describe_user(self.uid)
        )
    }
}

/// What a pid recorded in a file (a state file, a page header) says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// No such process: what it held is left over.
    Gone,
    /// The pid runs, but another program has it now (it started after the
    /// record was written, or at another time than the one recorded): the
    /// recorder is gone.
    Reused(ProcessInfo),
    /// The recorder runs.
    Running(ProcessInfo),
}

/// Whether process `pid`, recorded as the holder of something, still
/// holds it: `recorded_start` is its [`start_ticks`] when the record has
/// it; otherwise `written_unix_s`, when the record was written, rules out
/// a process that started after it (one second of slack for the clocks'
/// resolution). With neither, a live pid counts as the holder.
pub fn holder(pid: u32, recorded_start: Option<u64>, written_unix_s: Option<u64>) -> Holder {
    let Some(p) = ProcessInfo::read(pid) else {
        return Holder::Gone;
    };
    let reused = match (recorded_start, written_unix_s) {
        (Some(s), _) => s != p.start_ticks,
        (None, Some(w)) => p.started_unix_s().is_some_and(|s| s > w as f64 + 1.0),
        (None, None) => false,
    };
    if reused {
        Holder::Reused(p)
    } else {
        Holder::Running(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_tree_holds_the_children_and_sums_their_time() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let tree = process_tree(me);
        assert_eq!(tree[0], me);
        assert!(tree.contains(&child.id()), "{tree:?}");
        let all = processes_schedstat(&tree);
        assert!(all.on_cpu_ns >= processes_schedstat(&[me]).on_cpu_ns / 2);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            process_tree(u32::MAX - 1),
            vec![u32::MAX - 1],
            "a gone pid: itself only"
        );
    }

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

    #[test]
    fn identity_and_holders() {
        let me = std::process::id();
        let p = ProcessInfo::read(me).expect("this process");
        assert_eq!(Some(p.start_ticks), start_ticks(me));
        assert_eq!(Some(p.comm.clone()), comm(me));
        // SAFETY: getuid has no preconditions.
        assert_eq!(p.uid, unsafe { libc::getuid() });
        assert!(p.to_string().starts_with(&format!("pid {me} (")), "{p}");
        let started = p.started_unix_s().unwrap();
        let now = crate::time::now_unix_s() as f64;
        assert!(started <= now + 1.0 && started > now - 86_400.0 * 365.0);
        // recorded with its start: the holder; with another start: reused
        assert!(matches!(
            holder(me, Some(p.start_ticks), None),
            Holder::Running(_)
        ));
        assert!(matches!(
            holder(me, Some(p.start_ticks + 1), None),
            Holder::Reused(_)
        ));
        // recorded before it started (a record older than this process): reused
        let before = started as u64 - 10;
        assert!(matches!(holder(me, None, Some(before)), Holder::Reused(_)));
        assert!(matches!(
            holder(me, None, Some(now as u64)),
            Holder::Running(_)
        ));
        assert_eq!(holder(0, None, None), Holder::Gone);
        // users
        assert_eq!(user_id("root"), Some(0));
        assert_eq!(user_id("4242"), Some(4242));
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(user_id("no-such-user-here-xyz"), None);
        assert_eq!(describe_user(0), "user root (uid 0)");
    }
}
