//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in `elfen-topo`.
///
/// Every variant names what it was looking at (a file, a spec, a CPU) and what was
/// wrong with it, so the message alone is enough to fix the problem.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// A file could not be read (missing, permission denied, ...).
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },

    /// A file was read but its content is not what sysfs would write.
    #[error("{}: {what}", path.display())]
    Parse {
        /// The file with the bad content.
        path: PathBuf,
        /// What was expected and what was found.
        what: String,
    },

    /// A CPU list string (`0-3,8,10-11`) is malformed.
    #[error("cpu list {input:?}: {reason}")]
    CpuList {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The sysfs tree is well-formed but describes a topology elfen cannot use
    /// (no online CPUs, sibling lists that disagree, ...).
    #[error("{}: {what}", path.display())]
    Topology {
        /// The sysfs root (or file) the problem was found under.
        path: PathBuf,
        /// What is inconsistent.
        what: String,
    },

    /// A pairing spec (`0:1,2:3+4`) is malformed or does not fit the machine.
    #[error("pairing spec {spec:?}: {reason}")]
    PairSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A CPU id is too large for an affinity mask this crate will build.
    #[error("cpu {cpu} is out of range: affinity masks here cover cpus 0..{limit}")]
    CpuOutOfRange {
        /// The CPU id asked for.
        cpu: u32,
        /// One past the largest CPU id accepted.
        limit: u32,
    },

    /// An affinity system call failed.
    #[error("{call}({cpus}): {source}")]
    Affinity {
        /// The system call (`sched_setaffinity` / `sched_getaffinity`).
        call: &'static str,
        /// The CPUs asked for, in cpu-list syntax (empty for a query).
        cpus: String,
        /// The errno the kernel returned.
        source: std::io::Error,
    },
}

/// Shorthand used throughout the crate.
pub type Result<T, E = TopoError> = std::result::Result<T, E>;
