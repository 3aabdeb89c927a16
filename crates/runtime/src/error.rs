//! **Errors** of attaching an LC lane or a batch thread.
//!
//! Everything that can go wrong is found at attach time (the page, the lane,
//! its role, the policy id, the nap backend, pinning), so the batch slow
//! path and the LC calls never fail. Every message names the page file and
//! the lanes involved, so it alone is enough to fix the problem.

use elfen_shm::{ControllerConfig, Page, role};
use std::path::PathBuf;

/// Why an [`LcLane`](crate::LcLane) or [`BatchThread`](crate::BatchThread)
/// could not attach.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The page itself: missing, short, wrong magic, wrong version, lane out
    /// of range, permission denied (from `elfen-shm`, with the file name).
    #[error(transparent)]
    Shm(#[from] elfen_shm::ShmError),

    /// A batch thread asked for a request lane.
    #[error(
        "lane {lane} of signal page {path} is a request lane (LC requests run there); \
         a batch thread attaches to a batch lane: {batch_lanes}"
    )]
    BatchOnRequestLane {
        /// The page file.
        path: PathBuf,
        /// The lane asked for.
        lane: u32,
        /// Its batch lanes, in words ("its batch lane is 1", …).
        batch_lanes: String,
    },

    /// An LC thread asked for a batch lane.
    #[error(
        "lane {lane} of signal page {path} is a batch lane (partner of request lane {request_lane}); \
         an LC thread attaches to a request lane (here lane {request_lane})"
    )]
    LcOnBatchLane {
        /// The page file.
        path: PathBuf,
        /// The lane asked for.
        lane: u32,
        /// The request lane it partners.
        request_lane: u32,
    },

    /// The lane takes no part (role 0), or its controller line is inconsistent.
    #[error("lane {lane} of signal page {path}: {what}")]
    BadLane {
        /// The page file.
        path: PathBuf,
        /// The lane asked for.
        lane: u32,
        /// What is wrong with it.
        what: String,
    },

    /// The page was attached without write access to the file this role writes.
    #[error(
        "signal page {path} is attached read-only for the {file} this {role} writes; \
         attach it with {need} access (see the permission model in docs/protocol.md)"
    )]
    ReadOnly {
        /// The file that must be writable.
        path: PathBuf,
        /// "page file" or "batch segment".
        file: &'static str,
        /// "LC lane" or "batch thread".
        role: &'static str,
        /// The accesses that would do.
        need: &'static str,
    },

    /// Another live thread already serves this request lane.
    #[error(
        "lane {lane} of signal page {path} already has an LC thread (tid {tid}, still running); \
         one LC thread per request lane"
    )]
    LaneTaken {
        /// The page file.
        path: PathBuf,
        /// The lane asked for.
        lane: u32,
        /// The thread recorded in `lc_tid`.
        tid: u32,
    },

    /// The controller line names a policy this build does not know.
    #[error(
        "lane {lane} of signal page {path}: unknown policy id {id} in the controller line \
         (this build knows 0 unmanaged, 1 borrow_idle, 2 fixed_budget, 3 refresh_budget, 4 dynamic_refresh)"
    )]
    UnknownPolicy {
        /// The page file.
        path: PathBuf,
        /// The lane.
        lane: u32,
        /// The id found.
        id: u32,
    },

    /// The controller line's policy parameters are invalid.
    #[error("lane {lane} of signal page {path}: {source}")]
    BadPolicy {
        /// The page file.
        path: PathBuf,
        /// The lane.
        lane: u32,
        /// What `elfen-policy` refused.
        source: elfen_policy::PolicyError,
    },

    /// The controller line names a nap backend this build does not know.
    #[error(
        "lane {lane} of signal page {path}: unknown nap backend id {id} in the controller line \
         (0 auto, 1 spin, 2 futex, 3 hybrid, 4 umwait, 5 mwaitx)"
    )]
    UnknownNap {
        /// The page file.
        path: PathBuf,
        /// The lane.
        lane: u32,
        /// The id found.
        id: u32,
    },

    /// The nap backend asked for cannot run on this CPU/OS.
    #[error("nap backend {backend} is unavailable: {reason}")]
    NapUnavailable {
        /// The backend asked for.
        backend: &'static str,
        /// Why (what the CPU or OS lacks).
        reason: String,
    },

    /// Pinning the batch thread to its lane's CPU failed.
    #[error(
        "cannot pin the batch thread to lane {lane} (cpu {cpu}) of signal page {path}: {source}"
    )]
    Pin {
        /// The page file.
        path: PathBuf,
        /// The lane.
        lane: u32,
        /// The lane's CPU.
        cpu: u32,
        /// What the OS said.
        source: elfen_topo::TopoError,
    },
}

/// Which side attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// An LC thread (writes the page file, attaches to a request lane).
    Lc,
    /// A batch thread (writes the batch segment, attaches to a batch lane).
    Batch,
}

/// The checks both sides make first: the file this side writes is writable,
/// the lane exists, and it has this side's role. Returns its controller line.
pub(crate) fn attach_check(
    page: &Page,
    lane: u32,
    side: Side,
) -> Result<ControllerConfig, RuntimeError> {
    let path = || page.path().to_path_buf();
    let (writable, want) = match side {
        Side::Lc => (page.page_writable(), role::REQUEST),
        Side::Batch => (page.batch_writable(), role::BATCH),
    };
    if !writable {
        return Err(match side {
            Side::Lc => RuntimeError::ReadOnly {
                path: path(),
                file: "page file",
                role: "LC lane",
                need: "LC or controller",
            },
            Side::Batch => RuntimeError::ReadOnly {
                path: path(),
                file: "batch segment",
                role: "batch thread",
                need: "batch or controller",
            },
        });
    }
    let cfg = read_config(page, lane)?;
    if cfg.role == want {
        return Ok(cfg);
    }
    Err(match (side, cfg.role) {
        (Side::Lc, role::BATCH) => RuntimeError::LcOnBatchLane {
            path: path(),
            lane,
            request_lane: cfg.partners().first().copied().unwrap_or(u32::MAX),
        },
        (Side::Batch, role::REQUEST) => RuntimeError::BatchOnRequestLane {
            path: path(),
            lane,
            batch_lanes: lanes_in_words(cfg.partners()),
        },
        (_, r) => RuntimeError::BadLane {
            path: path(),
            lane,
            what: format!(
                "role {r} (unused): the lane takes no part; {} attaches to a {} lane",
                if side == Side::Lc {
                    "an LC thread"
                } else {
                    "a batch thread"
                },
                if side == Side::Lc { "request" } else { "batch" },
            ),
        },
    })
}

/// "its batch lane is 1", "its batch lanes are 1, 3", "it has none".
fn lanes_in_words(lanes: &[u32]) -> String {
    let list = lanes
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    match lanes.len() {
        0 => "it has none".to_string(),
        1 => format!("its batch lane is {list}"),
        _ => format!("its batch lanes are {list}"),
    }
}

/// How long attach waits for a controller line being rewritten (odd
/// `config_seq`) before calling it abandoned.
const REWRITE_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Reads lane `lane`'s controller line, but refuses (instead of spinning
/// forever in `Page::read_controller`) a line whose seqlock stays odd: a
/// controller that died in the middle of a rewrite.
pub(crate) fn read_config(page: &Page, lane: u32) -> Result<ControllerConfig, RuntimeError> {
    let seq = &page.controller(lane)?.config_seq;
    let t = std::time::Instant::now();
    while seq.load(std::sync::atomic::Ordering::Acquire) % 2 == 1 {
        if t.elapsed() > REWRITE_WAIT {
            return Err(RuntimeError::BadLane {
                path: page.path().to_path_buf(),
                lane,
                what: format!(
                    "its controller line has been mid-rewrite (odd config_seq) for over {REWRITE_WAIT:?}: \
                     did the controller die while writing it?"
                ),
            });
        }
        std::thread::yield_now();
    }
    Ok(page.read_controller(lane)?)
}
