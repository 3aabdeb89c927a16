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
        /// "signal page" or "batch segment".
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
    /// Creating over an existing page without `replace` (or over another
    /// user's file).
    #[error(
        "signal page {path} already exists (owned by {owner}, created by pid {pid}, {alive}); {advice}"
    )]
    Exists {
        /// The file.
        path: PathBuf,
        /// Its owner, "user NAME (uid N)".
        owner: String,
        /// The creator its header names (0: none readable).
        pid: u32,
        /// Whether that process still runs.
        alive: &'static str,
        /// What to do.
        advice: String,
    },
    /// A page file this process cannot trust: others can write it (and so
    /// truncate it under the LC's mapping, or steer batch threads).
    #[error(
        "signal page {path} (owned by {owner}, mode {mode:o}) is refused: {why}. Whoever can \
         write a page file can crash or steer every process that maps it; remove it (as its \
         owner or root) and let the page's creator make it again"
    )]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Its owner, "user NAME (uid N)".
        owner: String,
        /// Its permission bits.
        mode: u32,
        /// Which rule it breaks.
        why: String,
    },
    /// The batch segment the page names does not exist (in this IPC namespace).
    #[error(
        "signal page {path}: its batch segment (System V shm id {shmid}, created by pid {pid}) is gone: {hint}"
    )]
    BatchGone {
        /// The page file.
        path: PathBuf,
        /// The id the page names.
        shmid: u32,
        /// The page's creator.
        pid: u32,
        /// Why, most likely, and what to do.
        hint: &'static str,
    },
    /// The OS refused to attach the batch segment with the access this role needs.
    #[error(
        "signal page {path}: permission denied attaching its batch segment (System V shm id \
         {shmid}, {holder}) {mode} ({role} access). Batch processes need write access: the \
         page's creator names a batch group they belong to (the daemon's [page] batch_group); \
         see the permission model in docs/protocol.md"
    )]
    BatchDenied {
        /// The page file.
        path: PathBuf,
        /// The segment id.
        shmid: u32,
        /// "read-only" or "read-write".
        mode: &'static str,
        /// The role attaching.
        role: &'static str,
        /// The segment's owner, group and mode.
        holder: String,
    },
    /// The segment id the page names belongs to a segment another user made.
    #[error(
        "signal page {path}: System V shm id {shmid} was created by {creator}, not by the page's \
         owner ({owner}): the page's own segment is gone and its id was reused; re-create the page"
    )]
    BatchForeign {
        /// The page file.
        path: PathBuf,
        /// The segment id.
        shmid: u32,
        /// Who created the segment.
        creator: String,
        /// Who owns the page file.
        owner: String,
    },
}
