//! Errors of the daemon library.

use std::path::PathBuf;

/// A configuration the daemon refuses, naming the field and the reason.
/// Raised before anything is applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    /// The field, as written in the TOML file (`lc.pid`, `batch[1].cgroup`,
    /// `pairs`), or the file for a syntax error.
    pub field: String,
    /// Why it is refused.
    pub reason: String,
}

impl ConfigError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// What can fail once the configuration is accepted.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The signal source (BPF, or the poll fallback) failed.
    #[error("signal source: {0}")]
    Source(#[from] elfen_bpf::BpfError),
    /// The signal page could not be created or used.
    #[error("signal page: {0}")]
    Page(#[from] elfen_shm::ShmError),
    /// Attaching to a lane of the page failed.
    #[error("lane: {0}")]
    Runtime(#[from] elfen_runtime::RuntimeError),
    /// A cgroup operation failed.
    #[error("cgroup: {0}")]
    Cgroup(#[from] elfen_cgroup::CgroupError),
    /// A system call or file operation failed.
    #[error("{what}: {source}")]
    Os {
        /// What was attempted.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A thread of the daemon could not start or stopped with an error.
    #[error("{thread} thread: {reason}")]
    Thread {
        /// Which thread (`lc writer`, `guard lane 1`, …).
        thread: String,
        /// What went wrong.
        reason: String,
    },
    /// A batch group's cgroup was removed under the daemon
    /// (`on_group_lost = "stop"`).
    #[error(
        "batch {name}: its cgroup {path} was removed while the daemon ran: its processes are no \
         longer contained; everything else was restored (with on_group_lost = \"continue\" \
         the daemon carries on instead)"
    )]
    GroupLost {
        /// The batch group's name.
        name: String,
        /// The group's path.
        path: String,
    },
    /// A mode cannot follow the LC service and the configuration says to
    /// refuse it (`[freeze] unfit = "refuse"`).
    #[error(
        "batch {name}: {mode} refused: it {reason}; everything was restored (set [freeze] \
         unfit = \"fallback\" to run {fallback} instead, or \"warn\" to run it anyway)"
    )]
    Refused {
        /// The batch group's name.
        name: String,
        /// The mode refused.
        mode: String,
        /// Why, with the figures.
        reason: String,
        /// The fallback the configuration names.
        fallback: String,
    },
    /// Launching a batch command failed.
    #[error("batch {name}: cannot start {program}: {source}")]
    Launch {
        /// The batch group's name.
        name: String,
        /// The program.
        program: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl DaemonError {
    /// An [`DaemonError::Os`] error.
    pub fn os(what: impl Into<String>, source: std::io::Error) -> DaemonError {
        DaemonError::Os {
            what: what.into(),
            source,
        }
    }

    /// A [`DaemonError::Thread`] error.
    pub fn thread(thread: impl Into<String>, reason: impl Into<String>) -> DaemonError {
        DaemonError::Thread {
            thread: thread.into(),
            reason: reason.into(),
        }
    }
}
