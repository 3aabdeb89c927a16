//! # elfen-shm — the signal page
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! The shared-memory contract between an LC service, the batch threads that
//! borrow its idle lanes, and the controller: a versioned fixed layout
//! ([`layout`]) in a page file under `/dev/shm` and a System V
//! shared-memory segment for the batch lines ([`page`], [`segment`]), with
//! one writer per 64-byte line. This crate only lays the page out, creates it, attaches to
//! it and validates it; the LC and batch APIs that read and write it live in
//! `elfen-runtime`. `docs/protocol.md` documents it byte by byte, and the
//! golden vectors in `testdata/signal/` pin it for every language. Beside
//! the page, a memfd [`region`] a process shares with a child it starts
//! (a batch child's counters).
#![deny(missing_docs)]

#[cfg(not(target_endian = "little"))]
compile_error!("the signal page is little-endian and elfen-shm maps it in place");

pub mod clock;
pub mod error;
pub mod failsafe;
mod files;
pub mod layout;
pub mod page;
pub mod region;
pub mod segment;
pub mod spec;
pub mod users;

pub use clock::Clock;
pub use error::ShmError;
pub use failsafe::{BatchMode, KillMode, UnknownKillMode, batch_mode, heartbeat_stale};
pub use layout::{
    ABI_VERSION, BatchHeader, BatchLine, ControllerLine, Header, LcLine, MAX_LANES, MAX_PARTNERS,
    clock as clock_kind, control, nap, policy, role, state,
};
pub use page::{
    Access, ControllerConfig, DEFAULT_NAME, Identity, LaneSpec, Page, PageHolder, PageSpec,
    futex_word, page_path, pid_alive,
};
pub use segment::{Segment, SegmentStat};
pub use spec::{DEFAULT_BATCH_MODE, DEFAULT_GROUP_BATCH_MODE};
