//! # elfen-runtime — the LC API and the batch API over the signal page
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! An LC service and the batch threads that borrow its idle CPU talk through
//! the **signal page** (`elfen-shm`, `docs/protocol.md`): per **lane** (one
//! logical CPU) an LC line written by the LC thread, a batch line written by
//! the batch threads, a controller line written by the controller.
//!
//! | concept | where | what |
//! |---|---|---|
//! | LC API | [`lc`] ([`LcLane`]) | `request_begin` / `request_end` / `set_queue_len`: plain stores; a futex wake only when a batch thread sleeps in the OS |
//! | check | [`batch`] ([`BatchThread::check`]) | the batch fast path: one load, one compare, inlined |
//! | slow path | [`batch`] ([`BatchThread::slow_path`]) | kill switch, reconfiguration, the policy, naps |
//! | policy | `elfen-policy` | Figure 9's borrow idle, fixed / refresh / dynamic budget, pure |
//! | nap | [`nap`] ([`NapBackend`]) | spin, futex, hybrid, umwait, mwaitx (detected) |
//! | LC IPC | `ipc` | dynamic refresh's hardware counters, or the reported fallback |
//! | errors | [`error`] ([`RuntimeError`]) | everything is validated at attach; nothing after fails |
//!
//! ```no_run
//! use elfen_runtime::{BatchOptions, BatchThread, LcLane};
//! # fn serve(_: u64) {} fn work() {}
//! // the LC service, on its request lane (lane 0):
//! let mut lc = LcLane::open("/dev/shm/elfen", 0)?;
//! lc.request_begin(42);
//! serve(42);
//! lc.request_end();
//!
//! // a batch thread, on the partner batch lane (lane 1):
//! let mut b = BatchThread::open("/dev/shm/elfen", 1, BatchOptions::default())?;
//! println!("{}", b.describe());
//! loop {
//!     b.check(); // steps aside while the policy says so
//!     work();
//! }
//! # Ok::<(), elfen_runtime::RuntimeError>(())
//! ```
#![deny(missing_docs)]

pub mod batch;
pub mod error;
mod ipc;
pub mod lc;
pub mod nap;

pub use batch::{BatchOptions, BatchStats, BatchThread, DEFAULT_FUTEX_TIMEOUT};
pub use error::RuntimeError;
pub use ipc::SAMPLE_EVERY_NS as IPC_SAMPLE_EVERY_NS;
pub use lc::LcLane;
pub use nap::{NapBackend, NapChoice, machine_features};
