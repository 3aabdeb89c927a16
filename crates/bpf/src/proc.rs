//! The little /proc and sysfs reading both sources need: checking a
//! process id, a cgroup's id, the CPU count, and (for the poll fallback)
//! which threads of a process are running on which CPU. The clock is
//! elfen-shm's `monotonic_ns` and thread ids elfen-cmd's `gettid`.

use crate::error::BpfError;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Number of possible CPUs (highest id in `/sys/devices/system/cpu/possible` + 1),
/// the number of slots either source keeps.
pub fn possible_cpus() -> Result<u32, BpfError> {
    let path = Path::new("/sys/devices/system/cpu/possible");
    let text = std::fs::read_to_string(path).map_err(|source| BpfError::Io {
        path: path.into(),
        source,
    })?;
    let cpus = elfen_topo::parse_cpu_list(text.trim()).map_err(|e| BpfError::Io {
        path: path.into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
    })?;
    Ok(cpus.iter().max().map_or(1, |m| m + 1))
}

/// Checks that `pid` names a live process (a thread group leader).
pub fn check_process(pid: u32) -> Result<(), BpfError> {
    if pid == 0 {
        return Err(BpfError::PidZero);
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| BpfError::NoSuchProcess { pid })?;
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(pid);
    if tgid != pid {
        return Err(BpfError::NotAProcess { pid, tgid });
    }
    Ok(())
}

/// The cgroup v2 id of a cgroup directory: its inode number in cgroup2fs
/// (the kernfs node id the BPF program reads from `task->cgroups->dfl_cgrp`).
pub fn cgroup_id(dir: &Path) -> Result<u64, BpfError> {
    let err = |source| BpfError::Cgroup {
        path: dir.to_path_buf(),
        source,
    };
    let md = std::fs::metadata(dir).map_err(err)?;
    if !md.is_dir() || !dir.join("cgroup.procs").exists() {
        return Err(err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no cgroup.procs in it",
        )));
    }
    Ok(md.ino())
}

/// The processes in a cgroup directory (`cgroup.procs`).
pub fn cgroup_procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The processes in a cgroup directory and in every group below it (at
/// most [`crate::contract::MAX_CGROUP_DEPTH`] levels down, as the BPF
/// program looks up), sorted.
pub fn cgroup_subtree_procs(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0u32)];
    while let Some((d, depth)) = stack.pop() {
        out.extend(cgroup_procs(&d));
        if depth + 1 >= crate::contract::MAX_CGROUP_DEPTH {
            continue;
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// State (`R`, `S`, …) and last CPU of thread `tid` of process `tgid`;
/// `None` if it is gone.
pub fn task_state(tgid: u32, tid: u32) -> Option<(char, u32)> {
    thread_state(Path::new(&format!("/proc/{tgid}/task/{tid}/stat")))
}

/// State and last CPU of one thread, from `/proc/<tgid>/task/<tid>/stat`.
fn thread_state(path: &Path) -> Option<(char, u32)> {
    let s = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesized name: state is field 3 of the line,
    // processor field 39 (index 36 after the name).
    let rest = s.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let cpu = f.nth(35)?.parse().ok()?;
    Some((state, cpu))
}

/// The threads of process `tgid` in state R (running or runnable) with the
/// CPU each last ran on: `(tid, cpu)`. Empty if the process is gone.
pub fn running_threads(tgid: u32, out: &mut Vec<(u32, u32)>) {
    let dir = PathBuf::from(format!("/proc/{tgid}/task"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(('R', cpu)) = thread_state(&e.path().join("stat")) {
            out.push((tid, cpu));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_checks() {
        let me = std::process::id();
        check_process(me).unwrap();
        assert!(matches!(check_process(0), Err(BpfError::PidZero)));
        // a thread that is not the leader names its process
        let tid = std::thread::spawn(elfen_cmd::proc::gettid).join().unwrap();
        // (the thread has exited; its id may be gone or reused: only check when it is ours)
        if let Err(BpfError::NotAProcess { pid, tgid }) = check_process(tid) {
            assert_eq!((pid, tgid), (tid, me));
        }
        assert!(possible_cpus().unwrap() >= 1);
        let mut v = Vec::new();
        running_threads(me, &mut v);
        // this thread is running while it reads its own stat
        assert!(
            v.iter().any(|&(t, _)| t == elfen_cmd::proc::gettid()),
            "{v:?}"
        );
        let (state, _) = task_state(me, elfen_cmd::proc::gettid()).unwrap();
        assert_eq!(state, 'R', "this thread runs while it reads its state");
        assert!(task_state(me, u32::MAX).is_none());
    }
}
