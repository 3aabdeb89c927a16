//! What discovery reads of a process in `/proc`: its names (`comm`, the
//! base name of `argv[0]`), its parent and its start, its children; and
//! whether it descends from a set of processes.

use std::collections::BTreeSet;

/// How many parents [`ancestor_in`] climbs at most (a bound, not a limit
/// met in practice: process trees are shallow).
pub const MAX_ANCESTRY: usize = 64;

/// `/proc/<pid>/comm`, trimmed.
pub fn comm_of(pid: u32) -> Option<String> {
    elfen_cmd::proc::comm(pid)
}

/// The base name of `argv[0]` of `pid` (empty for kernel threads).
fn argv0_of(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let first = raw.split(|&b| b == 0).next()?;
    let s = String::from_utf8_lossy(first);
    let base = s.rsplit('/').next()?.to_string();
    (!base.is_empty()).then_some(base)
}

/// Whether process `pid` goes by `name` (`comm`, which the kernel cuts at
/// 15 bytes, or the base name of `argv[0]`).
pub fn matches_name(pid: u32, name: &str) -> bool {
    comm_of(pid).is_some_and(|comm| comm_matches(pid, &comm, name))
}

/// [`matches_name`] with its `comm` read already.
pub fn comm_matches(pid: u32, comm: &str, name: &str) -> bool {
    let short: String = name.chars().take(15).collect();
    if comm == name || (name.len() > 15 && comm == short) {
        return name.len() <= 15 || argv0_of(pid).is_some_and(|a| a == name);
    }
    argv0_of(pid).is_some_and(|a| a == name)
}

/// Process ids in `/proc`, sorted.
pub fn proc_pids() -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Every process (other than this one) going by `name`.
pub fn find_by_name(name: &str) -> Vec<u32> {
    let me = std::process::id();
    proc_pids()
        .into_iter()
        .filter(|&p| p != me && matches_name(p, name))
        .collect()
}

/// What one read of `/proc/<pid>/stat` tells discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// The command name (`comm`).
    pub comm: String,
    /// The parent's pid (0 for none).
    pub ppid: u32,
    /// The start, clock ticks since boot.
    pub start_ticks: u64,
    /// CPU time so far, all its threads (`utime + stime`), clock ticks.
    pub cpu_ticks: u64,
}

/// Parses a `/proc/<pid>/stat` line (the name may hold spaces and
/// parentheses: it ends at the last `)`).
pub fn parse_stat(s: &str) -> Option<Stat> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    // after the name: field 3 (state) is index 0, ppid (4) index 1, utime
    // and stime (14, 15) 11 and 12, start (22) index 19
    let f: Vec<&str> = s.get(close + 1..)?.split_whitespace().collect();
    let n = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(Stat {
        comm,
        ppid: f.get(1)?.parse().ok()?,
        start_ticks: n(19)?,
        cpu_ticks: n(11)? + n(12)?,
    })
}

/// `/proc/<pid>/stat`, parsed (`None` when the process is gone).
pub fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The processes `pid`'s main thread started that run now
/// (`/proc/<pid>/task/<pid>/children`; a process forked by another of its
/// threads is found by a full look).
pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The nearest ancestor of `pid` for which `is_member` holds, climbing
/// through `parent_of` (at most [`MAX_ANCESTRY`] parents); `None` when the
/// climb reaches a process `parent_of` does not know, or pid 1 and 0.
pub fn ancestor_in(
    pid: u32,
    is_member: impl Fn(u32) -> bool,
    mut parent_of: impl FnMut(u32) -> Option<u32>,
) -> Option<u32> {
    let mut p = pid;
    for _ in 0..MAX_ANCESTRY {
        let q = parent_of(p)?;
        if q <= 1 {
            return None;
        }
        if is_member(q) {
            return Some(q);
        }
        p = q;
    }
    None
}

/// The nearest ancestor of `pid` in `set`, read from `/proc` (for checks
/// before the start, not for every look).
pub fn ancestor_of(pid: u32, set: &BTreeSet<u32>) -> Option<u32> {
    ancestor_in(pid, |q| set.contains(&q), |p| read_stat(p).map(|s| s.ppid))
}

/// Clock ticks since boot now (`CLOCK_BOOTTIME`, the clock of a
/// process's start).
pub fn boot_ticks_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let s = ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9;
    (s * elfen_cmd::proc::ticks_per_s()) as u64
}

/// Milliseconds since a process that started at `start_ticks` (clock ticks
/// since boot) started, against `CLOCK_BOOTTIME`.
pub fn age_ms_of(start_ticks: u64) -> f64 {
    let start_ms = start_ticks as f64 * 1000.0 / elfen_cmd::proc::ticks_per_s();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let now_ms = ts.tv_sec as f64 * 1000.0 + ts.tv_nsec as f64 / 1e6;
    (now_ms - start_ms).max(0.0)
}

/// Milliseconds since process `pid` started (`/proc/<pid>/stat` field 22).
pub fn age_ms(pid: u32) -> Option<f64> {
    Some(age_ms_of(elfen_cmd::proc::start_ticks(pid)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn names_match_comm_or_argv0() {
        let me = std::process::id();
        let comm = comm_of(me).unwrap();
        assert!(matches_name(me, &comm));
        assert!(!matches_name(me, "no-such-name-here"));
        assert!(
            !find_by_name(&comm).contains(&me),
            "the daemon never finds itself"
        );
    }

    #[test]
    fn stat_lines_are_parsed_whatever_the_name() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 1 0 \
                    98765 1000 10 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                comm: "a (b) c".into(),
                ppid: 17,
                start_ticks: 98765,
                cpu_ticks: 7,
            })
        );
        assert_eq!(parse_stat("4242 (x) S"), None, "cut short");
        assert_eq!(parse_stat("garbage"), None);
        // this process, read
        let me = std::process::id();
        let s = read_stat(me).unwrap();
        assert_eq!(s.ppid, elfen_cmd::proc::parent_pid());
        assert_eq!(Some(s.comm), comm_of(me));
        assert!(age_ms(me).unwrap() >= 0.0);
    }

    #[test]
    fn ancestors_are_climbed_to_a_member_or_the_top() {
        // 10 <- 20 <- 30 <- 40, 50 <- 60 (parent of 50 unknown)
        let parents: BTreeMap<u32, u32> = [(20, 10), (30, 20), (40, 30), (10, 1), (60, 50)].into();
        let of = |p: u32| parents.get(&p).copied();
        let member = |set: &'static [u32]| move |q: u32| set.contains(&q);
        assert_eq!(ancestor_in(40, member(&[10]), of), Some(10));
        assert_eq!(ancestor_in(40, member(&[20, 10]), of), Some(20), "nearest");
        assert_eq!(ancestor_in(40, member(&[40]), of), None, "not itself");
        assert_eq!(
            ancestor_in(60, member(&[10]), of),
            None,
            "an unknown parent"
        );
        assert_eq!(ancestor_in(10, member(&[1]), of), None, "init is nobody's");
        // a loop (a reused pid read at the wrong moment) ends at the bound
        let looped = |p: u32| Some(if p == 7 { 8 } else { 7 });
        assert_eq!(ancestor_in(7, member(&[99]), looped), None);
        // this process descends from its parent
        let me = std::process::id();
        let parent = elfen_cmd::proc::parent_pid();
        assert_eq!(ancestor_of(me, &[parent].into()), Some(parent));
        // a shell's child, listed by the shell's main thread
        let mut sh = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let shell = sh.id();
        let mut kids = Vec::new();
        for _ in 0..500 {
            kids = children_of(shell);
            if !kids.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let climbed = kids.first().and_then(|&k| ancestor_of(k, &[shell].into()));
        let _ = sh.kill();
        for &k in &kids {
            elfen_cmd::proc::kill_pid(k);
        }
        let _ = sh.wait();
        assert_eq!(kids.len(), 1, "the shell's one child: {kids:?}");
        assert_eq!(climbed, Some(shell));
    }
}
