//! Thread affinities kept across turning the cpuset controller on (v2).
//!
//! On cgroup v2, writing `+cpuset` to a group's `cgroup.subtree_control`
//! moves every task of its descendants into a new cpuset, and kernels
//! before 6.2 then reset each task's affinity to that cpuset's CPUs: a
//! service its operator pinned with `taskset` (the LC on its request lane,
//! say) would run anywhere once elfen starts. [`Kept::take`] records the
//! affinity of every thread below a group that is narrower than all CPUs;
//! [`Kept::put_back`] sets it again after the write (a kernel that kept it
//! is left unchanged: the same mask is written).
use std::path::Path;

/// Affinities read before the controller was turned on.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    threads: Vec<(libc::pid_t, libc::cpu_set_t)>,
}

impl Kept {
    /// Every thread in the groups below `dir` (not `dir`'s own: its tasks
    /// stay where they are) whose affinity is narrower than all CPUs.
    pub(crate) fn take(dir: &Path) -> Kept {
        let mut k = Kept::default();
        let all = all_cpus();
        let mut stack = children(dir);
        while let Some(d) = stack.pop() {
            stack.extend(children(&d));
            let Ok(text) = std::fs::read_to_string(d.join("cgroup.threads")) else {
                continue;
            };
            for tid in text
                .lines()
                .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
            {
                if let Some(set) = affinity(tid) {
                    if count(&set) < all {
                        k.threads.push((tid, set));
                    }
                }
            }
        }
        k
    }

    /// Sets each recorded affinity again; returns how many threads got
    /// theirs back (a thread that has exited is skipped).
    pub(crate) fn put_back(&self) -> usize {
        self.threads
            .iter()
            .filter(|(tid, set)| {
                // SAFETY: `set` is a valid cpu_set_t of the size passed.
                unsafe { libc::sched_setaffinity(*tid, std::mem::size_of_val(set), set) == 0 }
            })
            .count()
    }

    /// How many threads were recorded.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.threads.len()
    }
}

fn children(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn affinity(tid: libc::pid_t) -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is writable and of the size passed.
    let rc = unsafe { libc::sched_getaffinity(tid, std::mem::size_of_val(&set), &mut set) };
    (rc == 0).then_some(set)
}

fn count(set: &libc::cpu_set_t) -> usize {
    // SAFETY: CPU_COUNT reads the set only.
    unsafe { libc::CPU_COUNT(set) as usize }
}

/// The CPUs online now.
fn all_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tid: libc::pid_t, cpus: &[usize]) {
        // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET adds to it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        // SAFETY: `set` is valid and of the size passed.
        assert_eq!(
            unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) },
            0
        );
    }

    #[test]
    fn a_pinned_thread_below_the_group_is_kept_and_put_back() {
        // a fake tree: one child group holding this thread
        let dir = tempfile::tempdir().unwrap();
        let child = dir.path().join("svc");
        std::fs::create_dir(&child).unwrap();
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        std::fs::write(child.join("cgroup.threads"), format!("{me}\n")).unwrap();
        let original = affinity(me).unwrap();
        let every: Vec<usize> = (0..all_cpus()).collect();
        set(me, &every);
        assert_eq!(
            Kept::take(dir.path()).len(),
            0,
            "not pinned: nothing to keep"
        );
        if all_cpus() >= 2 {
            set(me, &[0]);
            let k = Kept::take(dir.path());
            assert_eq!(k.len(), 1);
            set(me, &every); // what the kernel does
            assert_eq!(k.put_back(), 1);
            let now = affinity(me).unwrap();
            assert_eq!(count(&now), 1);
            assert!(unsafe { libc::CPU_ISSET(0, &now) });
        }
        // the group's own threads are not taken
        set(me, &[0]);
        std::fs::write(dir.path().join("cgroup.threads"), format!("{me}\n")).unwrap();
        std::fs::remove_file(child.join("cgroup.threads")).unwrap();
        assert_eq!(Kept::take(dir.path()).len(), 0);
        // SAFETY: `original` is a valid set read above.
        unsafe { libc::sched_setaffinity(me, std::mem::size_of_val(&original), &original) };
    }
}
