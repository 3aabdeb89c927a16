//! One guard for a child process this program started: [`ChildGuard`]
//! stops it when asked or when dropped — SIGTERM (and SIGCONT, for one
//! that is stopped), a grace period to exit, SIGKILL, reap — so nothing is
//! left running or unreaped on an error or a panic. With no grace period
//! (the default) it is killed at once.

use crate::proc::{kill_pid, process_tree, signal_pid};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How often a stopping child is looked at during its grace period.
const POLL: Duration = Duration::from_millis(10);

/// A child process, stopped and reaped on drop.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    /// Seen to exit (by a wait) or stopped: its pid is never signalled again.
    reaped: bool,
    pid: u32,
    grace: Duration,
    tree: bool,
}

impl ChildGuard {
    /// Guards `child`: killed at once (SIGKILL) and reaped on drop.
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard {
            pid: child.id(),
            child,
            reaped: false,
            grace: Duration::ZERO,
            tree: false,
        }
    }

    /// Stops it with SIGTERM first, giving it `grace` to exit before the
    /// SIGKILL.
    pub fn with_grace(mut self, grace: Duration) -> ChildGuard {
        self.grace = grace;
        self
    }

    /// The SIGKILL goes to its descendants too, deepest first (a shell or
    /// a launcher whose children would outlive it).
    pub fn with_tree(mut self) -> ChildGuard {
        self.tree = true;
        self
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child (its pipes; waiting on it directly is left to the guard).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Whether it still runs (false once it has exited or been stopped).
    pub fn running(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }

    /// Whether it has been reaped: seen to exit, or stopped.
    pub fn is_reaped(&self) -> bool {
        self.reaped
    }

    /// Its exit status the first time it is seen to have exited (it is
    /// then reaped, and its pid is never signalled again); `Ok(None)` while
    /// it runs; an error once it has been reaped.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.reaped {
            return Err(std::io::Error::other("the child was reaped"));
        }
        let s = self.child.try_wait()?;
        self.reaped = s.is_some();
        Ok(s)
    }

    /// Stops it: SIGTERM and SIGCONT, up to the grace period for it to
    /// exit, then SIGKILL (to its tree, with [`ChildGuard::with_tree`]);
    /// reaps it. Returns how it ended, if it could be waited for.
    /// Idempotent: `None` once stopped.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if std::mem::replace(&mut self.reaped, true) {
            return None;
        }
        let c = &mut self.child;
        if !self.grace.is_zero() {
            signal_pid(self.pid, libc::SIGTERM);
            signal_pid(self.pid, libc::SIGCONT);
            let t0 = Instant::now();
            while t0.elapsed() < self.grace {
                if let Ok(Some(s)) = c.try_wait() {
                    return Some(s);
                }
                std::thread::sleep(POLL);
            }
        }
        if self.tree {
            for p in process_tree(self.pid).into_iter().rev() {
                kill_pid(p);
            }
        }
        kill_pid(self.pid);
        c.wait().ok()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_dropped_guard_kills_and_reaps() {
        let c = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = c.id();
        drop(ChildGuard::new(c));
        // reaped: no zombie is left under that pid
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn an_exit_is_seen_once_and_its_pid_is_not_signalled_after() {
        let c = Command::new("true").spawn().unwrap();
        let mut g = ChildGuard::new(c).with_grace(Duration::from_secs(5));
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = g.try_wait().unwrap() {
                break s;
            }
            assert!(t0.elapsed() < Duration::from_secs(10));
            std::thread::sleep(POLL);
        };
        assert!(status.success());
        assert!(g.is_reaped() && g.try_wait().is_err());
        assert!(g.stop().is_none(), "nothing left to stop");
    }

    #[test]
    fn a_child_that_honours_sigterm_exits_within_its_grace() {
        let c = Command::new("sleep").arg("60").spawn().unwrap();
        let mut g = ChildGuard::new(c).with_grace(Duration::from_secs(5));
        assert!(g.running());
        let t0 = Instant::now();
        let s = g.stop().expect("reaped");
        assert!(t0.elapsed() < Duration::from_secs(4), "killed by SIGTERM");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(s.signal(), Some(libc::SIGTERM));
        assert!(g.stop().is_none(), "idempotent");
        assert!(!g.running() && g.try_wait().is_err() && g.is_reaped());
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed_after_its_grace() {
        let c = Command::new("sh")
            .args(["-c", "trap '' TERM; while :; do sleep 1; done"])
            .spawn()
            .unwrap();
        // let the shell set its trap
        std::thread::sleep(Duration::from_millis(200));
        let mut g = ChildGuard::new(c)
            .with_grace(Duration::from_millis(300))
            .with_tree();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(g.stop().and_then(|s| s.signal()), Some(libc::SIGKILL));
    }
}
