//! What the kernel says about sched_ext, and the scheduling policy of
//! threads: the sysfs state, the ext class (`SCHED_EXT`), `/proc/PID/sched`.

use crate::error::ScxError;
use std::path::{Path, PathBuf};

/// The scheduling policy that puts a task in the ext class (`SCHED_EXT`,
/// include/uapi/linux/sched.h). With `SCX_OPS_SWITCH_PARTIAL` only such
/// tasks are the BPF scheduler's; while none is loaded they run in the
/// fair class.
pub const SCHED_EXT: i32 = 7;

/// Where the kernel shows sched_ext.
pub const SYSFS_DIR: &str = "/sys/kernel/sched_ext";
/// sched_ext's state file: `enabled`, `disabled`, `enabling`, `disabling`.
pub const STATE_FILE: &str = "/sys/kernel/sched_ext/state";

/// sched_ext as the kernel shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelState {
    /// `state`.
    pub state: String,
    /// The loaded scheduler's name (`root/ops`), if one is loaded.
    pub ops: Option<String>,
}

impl KernelState {
    /// Whether no scheduler is loaded, being loaded or being unloaded.
    pub fn idle(&self) -> bool {
        self.state == "disabled" && self.ops.is_none()
    }
}

/// The kernel's release (`uname -r`), for messages.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "(unknown)".into())
}

/// Whether this kernel has sched_ext.
pub fn offered() -> bool {
    Path::new(STATE_FILE).exists()
}

/// sched_ext's state; [`ScxError::NoSchedExt`] on a kernel without it.
pub fn kernel_state() -> Result<KernelState, ScxError> {
    kernel_state_at(Path::new(SYSFS_DIR))
}

/// sched_ext's state from a directory laid out as [`SYSFS_DIR`] (`state`,
/// `root/ops` while a scheduler is loaded).
pub fn kernel_state_at(dir: &Path) -> Result<KernelState, ScxError> {
    let path = dir.join("state");
    let state = match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ScxError::NoSchedExt {
                kernel: kernel_release(),
                path,
            });
        }
        Err(source) => return Err(ScxError::Io { path, source }),
    };
    let ops = std::fs::read_to_string(dir.join("root/ops"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    Ok(KernelState { state, ops })
}

/// `Ok` when no scheduler is loaded; else [`ScxError::AlreadyLoaded`]
/// naming it.
pub fn check_idle(state: &KernelState) -> Result<(), ScxError> {
    if state.idle() {
        Ok(())
    } else {
        Err(ScxError::AlreadyLoaded {
            ops: state.ops.clone().unwrap_or_else(|| "unknown".into()),
            state: state.state.clone(),
        })
    }
}

/// A policy's name as `sched_setscheduler(2)` spells it.
pub fn policy_name(policy: i32) -> &'static str {
    match policy {
        libc::SCHED_OTHER => "SCHED_OTHER",
        libc::SCHED_FIFO => "SCHED_FIFO",
        libc::SCHED_RR => "SCHED_RR",
        libc::SCHED_BATCH => "SCHED_BATCH",
        libc::SCHED_IDLE => "SCHED_IDLE",
        6 => "SCHED_DEADLINE",
        SCHED_EXT => "SCHED_EXT",
        _ => "unknown",
    }
}

/// The policy of thread `tid` (its `sched_getscheduler`).
pub fn policy(tid: u32) -> std::io::Result<i32> {
    // SAFETY: sched_getscheduler reads a thread id and returns an int.
    let p = unsafe { libc::sched_getscheduler(tid as libc::pid_t) };
    if p < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        // SCHED_RESET_ON_FORK is a flag in the policy's high bit
        Ok(p & !libc::SCHED_RESET_ON_FORK)
    }
}

/// Sets thread `tid`'s policy (static priority 0: every policy but FIFO/RR).
pub fn set_policy(tid: u32, policy: i32) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: param is a valid sched_param for the call's duration.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, policy, &param) } < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The threads of process `pid` (`/proc/PID/task`).
pub fn threads(pid: u32) -> Result<Vec<u32>, ScxError> {
    if pid == 0 {
        return Err(ScxError::PidZero);
    }
    let dir = PathBuf::from(format!("/proc/{pid}/task"));
    let rd = std::fs::read_dir(&dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ScxError::NoSuchProcess { pid }
        } else {
            ScxError::Io {
                path: dir.clone(),
                source: e,
            }
        }
    })?;
    let mut tids: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// What `/proc/PID/sched` says of a task's scheduling: its `policy` and,
/// on a sched_ext kernel, `ext.enabled` (1 while the task is in the ext
/// class of a loaded scheduler). `None` for a line the kernel does not print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSched {
    /// `policy`.
    pub policy: Option<i32>,
    /// `ext.enabled`.
    pub ext_enabled: Option<bool>,
}

/// Reads `/proc/PID/sched` (a thread id works too).
pub fn task_sched(pid: u32) -> Result<TaskSched, ScxError> {
    let path = PathBuf::from(format!("/proc/{pid}/sched"));
    let text = std::fs::read_to_string(&path).map_err(|source| ScxError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(parse_task_sched(&text))
}

/// The fields of a `/proc/PID/sched` text (`name : value` lines).
pub fn parse_task_sched(text: &str) -> TaskSched {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    TaskSched {
        policy: field("policy").and_then(|v| v.parse().ok()),
        ext_enabled: field("ext.enabled").and_then(|v| match v.as_str() {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_sched_fields_are_read() {
        let text = "spin (1234, #threads: 1)\n\
            -------------------------------------------------------------------\n\
            se.exec_start                                :       1234.567\n\
            policy                                       :                    7\n\
            prio                                         :                  120\n\
            ext.enabled                                  :                    1\n";
        assert_eq!(
            parse_task_sched(text),
            TaskSched {
                policy: Some(7),
                ext_enabled: Some(true)
            }
        );
        assert_eq!(
            parse_task_sched("policy : 0\n"),
            TaskSched {
                policy: Some(0),
                ext_enabled: None
            }
        );
    }

    #[test]
    fn policies_are_named() {
        assert_eq!(policy_name(SCHED_EXT), "SCHED_EXT");
        assert_eq!(policy_name(libc::SCHED_IDLE), "SCHED_IDLE");
        assert_eq!(policy_name(42), "unknown");
    }

    #[test]
    fn own_threads_and_policy_are_read() {
        let me = std::process::id();
        let tids = threads(me).unwrap();
        assert!(tids.contains(&me), "{tids:?}");
        assert!(matches!(threads(0), Err(ScxError::PidZero)));
        // the test harness runs at the default policy unless started otherwise
        let p = policy(me).unwrap();
        assert!(policy_name(p) != "unknown", "{p}");
    }

    #[test]
    fn kernel_state_says_whether_sched_ext_exists() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("root")).unwrap();
        let e = kernel_state_at(&dir).unwrap_err();
        assert!(matches!(&e, ScxError::NoSchedExt { path, .. } if path == &dir.join("state")));
        assert!(e.to_string().contains("CONFIG_SCHED_CLASS_EXT"), "{e}");

        std::fs::write(dir.join("state"), "disabled\n").unwrap();
        let s = kernel_state_at(&dir).unwrap();
        assert!(s.idle() && check_idle(&s).is_ok(), "{s:?}");

        std::fs::write(dir.join("state"), "enabled\n").unwrap();
        std::fs::write(dir.join("root/ops"), "layered_1.0.14_g0123 x86_64\n").unwrap();
        let s = kernel_state_at(&dir).unwrap();
        let e = check_idle(&s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "another sched_ext scheduler is loaded: layered_1.0.14_g0123 x86_64 (sched_ext state enabled)"
        );
        // and this machine's answer is one of the two
        assert_eq!(kernel_state().is_ok(), offered());
    }
}
