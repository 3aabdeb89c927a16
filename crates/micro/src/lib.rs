//! `elfen-micro`: elfen's micro-benchmarks (`elfen micro`), the Elfen
//! paper's Figure 8 done our way.
//!
//! A **lab** crate: harness, measurement or workload
//! (`docs/architecture.md`); no product crate depends on it.
//!
//! | module | figure |
//! |---|---|
//! | [`toggle`] | step-aside and wake latency per nap backend |
//! | [`fastpath`] | fast-path cost per check (Rust and C) |
//! | [`overhead`] | instrumentation overhead of each batch kernel |
//! | [`interference`] | plain vs non-temporal Stream against a pointer chase |
//! | [`pauses`] | how often each measured vCPU is paused (the latency tails' background) |
//! | [`report`] | the JSON result file and the printed table |
//! | [`ckernel`] | the batch kernels in C, built with and without `-finstrument-functions` |
//!
//! [`suite::run_once`] runs them all over a [`setup::BenchPage`];
//! [`cli`] is the subcommand. See `docs/micro.md`.
#![deny(missing_docs)]

pub mod ckernel;
pub mod cli;
mod cside;
pub mod error;
pub mod fastpath;
pub mod interference;
pub mod overhead;
pub mod pauses;
mod render;
pub mod report;
pub mod setup;
pub mod stats;
pub mod suite;
pub mod toggle;

pub use error::MicroError;
