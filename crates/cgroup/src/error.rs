//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in `elfen-cgroup`.
///
/// Every variant names the file (or directory) it was about and why, so the
/// message alone says what to fix. Errors found while *planning* a change
/// (bad input, a knob the layout lacks, a missing group) are returned before
/// anything is written.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A file or directory operation failed (read, write, mkdir, rmdir).
    #[error("{}: {op}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done (`reading`, `writing "0-1"`, `creating`, ...).
        op: String,
        /// The underlying error (the kernel's errno for cgroup files).
        source: std::io::Error,
    },

    /// The layout, the kernel or this group has no such knob or controller.
    #[error("{}: unsupported: {reason}", path.display())]
    Unsupported {
        /// The file or directory that would be needed.
        path: PathBuf,
        /// Why it is not there (which layout, which controller, which kernel).
        reason: String,
    },

    /// The value asked for is not valid here (unknown CPU, empty cpuset with
    /// tasks, quota below the kernel's minimum, ...). Nothing was written.
    #[error("{}: invalid value {value:?}: {reason}", path.display())]
    Invalid {
        /// The file the value was meant for.
        path: PathBuf,
        /// The value as it would have been written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A group path is malformed, or the group does not exist.
    #[error("{}: {reason}", path.display())]
    Group {
        /// The group directory (or the path as given).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// A cgroup file holds something this crate does not understand.
    #[error("{}: cannot parse {content:?}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Its content.
        content: String,
        /// What was expected.
        reason: String,
    },

    /// The state file is unreadable, malformed, or belongs to another
    /// hierarchy.
    #[error("state file {}: {reason}", path.display())]
    State {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl CgroupError {
    /// An [`CgroupError::Io`] for `path`.
    pub(crate) fn io(
        path: impl Into<PathBuf>,
        op: impl Into<String>,
        source: std::io::Error,
    ) -> Self {
        CgroupError::Io {
            path: path.into(),
            op: op.into(),
            source,
        }
    }

    /// An [`CgroupError::Unsupported`] for `path`.
    pub(crate) fn unsupported(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        CgroupError::Unsupported {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// An [`CgroupError::Invalid`] for `path`.
    pub(crate) fn invalid(
        path: impl Into<PathBuf>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        CgroupError::Invalid {
            path: path.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// An [`CgroupError::Group`] for `path`.
    pub(crate) fn group(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        CgroupError::Group {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// An [`CgroupError::Parse`] for `path`.
    pub(crate) fn parse(
        path: impl Into<PathBuf>,
        content: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        CgroupError::Parse {
            path: path.into(),
            content: content.into(),
            reason: reason.into(),
        }
    }

    /// Whether this is an I/O error that may pass if the write is tried
    /// again (`EBUSY`, `EAGAIN`, `EINTR`).
    pub fn is_transient(&self) -> bool {
        matches!(self, CgroupError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)))
    }

    /// Whether this is an I/O error of kind `NotFound` (a group that
    /// vanished).
    pub fn is_not_found(&self) -> bool {
        matches!(self, CgroupError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = CgroupError> = std::result::Result<T, E>;
