//! # elfen-cmd — what every long-running elfen command shares
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! One behaviour for each thing `elfen bench`, `elfen micro`, `elfen sim`
//! and `elfen daemon` all need, so they act alike:
//!
//! | piece | module |
//! |---|---|
//! | Ctrl-C / SIGTERM: a flag the loops poll; a second signal removes registered files and exits 130 | [`interrupt`] |
//! | progress lines on stderr (a live line with ETA on a terminal, plain lines otherwise) | [`progress`] |
//! | UTC timestamps for result directories | [`time`] |
//! | one user of the lanes at a time, machine-wide (tests, benchmarks) | [`lanelock`] |
//! | `/proc` readings (per-thread CPU time, machine ticks, load), scheduling classes, who a pid is | [`proc`] |
//! | a child process stopped and reaped on drop (SIGTERM, grace, SIGKILL, reap) | [`child`] |
//! | files a root process trusts: atomic replacement, private directories, owners | [`files`] |
//! | tests that cannot run here: what they need, whether this machine offers it, the test log | [`skip`] |
//! | a test that may run twice because of the machine's noise: counted in the test log, a second failure fails | [`rerun`] |
//! | bounded, seeded fuzzing in the tests (feature `fuzz`) | `fuzz` |
#![deny(missing_docs)]

pub mod child;
pub mod files;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod interrupt;
pub mod lanelock;
pub mod proc;
pub mod progress;
pub mod rerun;
pub mod skip;
pub mod time;

pub use lanelock::LaneLock;
pub use progress::Progress;
