//! # elfen-advise — HIS's profiler for an LC service, and the knob that fits it
//!
//! A **product** crate: part of what an operator runs
//! (`docs/architecture.md`); it depends on no lab crate (its probe's load
//! is `elfen-load`'s, its batch work `elfen-kernels`').
//!
//! `elfen advise --comm redis-server --latency-probe redis@127.0.0.1:6390`
//! measures an LC service under its real load — alone, then next to short
//! probes of each resource (a compute hog at the LC's priority and at
//! SCHED_IDLE on the partner lane and on its own lane; a memory streamer on
//! the partner lane) — as HIS's `res_cont = co-run / solo − 1` on its
//! service time, its response time and, where known, its latency; then
//! runs every isolation knob of `elfen daemon` briefly against a real batch
//! load (the real daemon, a generated configuration per knob) and
//! recommends the cheapest knob that keeps the LC within a threshold.
//!
//! Record, study and format are apart:
//!
//! | piece | module |
//! |---|---|
//! | the typed record (`--json`) | [`record`] |
//! | res_cont, the reference, the stop rule, sensitivity, the recommendation (pure) | [`study`] |
//! | the tables | [`format`] |
//! | the LC: found by the daemon's selectors, read from the kernel signal and schedstat | [`lc`] |
//! | the latency probe (open loop, from intended send times) | [`latency`] |
//! | the batch kernel process (probes' co-runner, knobs' batch command) | [`batch`] |
//! | the knobs: configurations, the daemon as a child, its CPU | [`knob`] |
//! | what the machine offers (counters, resctrl, SMT) | [`offered`] |
//! | the run: windows, the watch, the phases | [`run`] |
//! | `elfen advise` | [`cli`] |
//!
//! `docs/advise.md` says what is measured and how.
#![deny(missing_docs)]

pub mod batch;
pub mod cli;
pub mod format;
pub mod knob;
pub mod latency;
pub mod lc;
pub mod offered;
pub mod record;
pub mod run;
pub mod study;

pub use record::{AdviseResult, Knob, Probe};
