//! Errors of creating and attaching signal pages. Each names the file and
//! what did not match.

use std::path::PathBuf;

/// Why a page could not be created or attached.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// No file at the path.
    #[error(
        "signal page {path} does not exist (is the LC service or elfen controller that creates it running?)"
    )]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The OS refused to open the file with the access this role needs.
    #[error(
        "signal page {path}: permission denied opening it {mode} ({role} access; see the permission model in docs/protocol.md)"
    )]
    PermissionDenied {
        /// The file.
        path: PathBuf,
        /// "read-only" or "read-write".
        mode: &'static str,
        /// The role attaching.
        role: &'static str,
    },
    /// Any other OS error.
    #[error("signal page {path}: {op}: {source}")]
    Os {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is smaller than its header.
    #[error(
        "signal page {path} is {size} bytes, shorter than its {need}-byte header: not a signal page (or truncated)"
    )]
    Short {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The header size.
        need: usize,
    },
    /// Wrong magic number.
    #[error("signal page {path}: magic is {found:?}, expected {expected:?}: not an elfen {what}")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first 8 bytes, printable.
        found: String,
        /// The expected magic.
        expected: &'static str,
        /// "signal page" or "batch file".
        what: &'static str,
    },
    /// Another ABI version.
    #[error(
        "signal page {path}: ABI version {found}, this build speaks version {expected}; rebuild or restart the side that created it"
    )]
    BadVersion {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version of this build.
        expected: u32,
    },
    /// A header field is inconsistent with the file or the layout.
    #[error("signal page {path}: {field} is {found}, expected {expected}")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// What the file says.
        found: u64,
        /// What it should be.
        expected: u64,
    },
    /// A lane index beyond the page.
    #[error("lane {lane} is out of range: the signal page {path} has {lanes} lanes (0..{lanes})")]
    LaneOutOfRange {
        /// The file.
        path: PathBuf,
        /// The index asked for.
        lane: u32,
        /// Lanes in the page.
        lanes: u32,
    },
    /// A page spec that cannot be laid out.
    #[error("invalid signal page spec: {0}")]
    BadSpec(String),
    /// A controller line stayed mid-rewrite for [`crate::page::STUCK_SEQLOCK_NS`].
    #[error(
        "signal page {path}: lane {lane}'s controller line has been mid-rewrite for 100 ms (did the controller die while writing it?)"
    )]
    StuckController {
        /// The file.
        path: PathBuf,
        /// The lane.
        lane: u32,
    },
    /// A write through a handle attached read-only.
    #[error("cannot {what}: signal page {path} is attached read-only by this process")]
    ReadOnly {
        /// The file.
        path: PathBuf,
        /// What was attempted.
        what: &'static str,
    },
    /// Creating over an existing page without `replace`.
    #[error(
        "signal page {path} already exists (created by pid {pid}, {alive}); remove it or create with replace"
    )]
    Exists {
        /// The file.
        path: PathBuf,
        /// Its creator.
        pid: u32,
        /// Whether that process still runs.
        alive: &'static str,
    },
}
