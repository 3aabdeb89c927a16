//! # elfen-trace — a request-level hazard profiler (Tailor)
//!
//! A **product** crate: part of what an operator runs
//! (`docs/architecture.md`); it depends on no lab crate (its load is the
//! measurement kit's, `elfen-load`).
//!
//! What delayed an LC service's slow requests, request by request (the
//! thesis's chapter 4): BPF records, around one service's tasks and the
//! lanes of interest, its context switches, wake-up chains, page faults,
//! TCP data held back and its peer's delayed ACKs, and its threads' exits;
//! request spans come from the signal page's LC line and/or a client's
//! spans file; the study takes each request's latency apart into causes —
//! queueing, dispatch, own work, page faults, preemption, wake-up waits,
//! JVM pauses, a cold JVM, TCP holds, delivery, batch co-runs — and the
//! renderers write a text report and a Perfetto trace.
//!
//! | stage | modules |
//! |---|---|
//! | record | [`kernel`] (the BPF object), [`recorder`], [`lcline`], [`target`]; the typed [`record`] |
//! | study | [`study`], [`pause`]; the typed [`report`] |
//! | format | [`render`] |
//! | around it | [`spans`] (a client's view), [`load`] (an open-loop load keeping spans), [`overhead`] (the cost), [`cli`] (`elfen trace`) |
//!
//! The BPF↔Rust contract is `src/bpf/elfen_trace.h`, checked by
//! [`contract`]. `docs/trace.md` says what each signal means and needs.
#![deny(missing_docs)]

pub mod cli;
pub mod contract;
pub mod error;
pub mod kernel;
pub mod lcline;
pub mod load;
pub mod overhead;
pub mod pause;
pub mod record;
pub mod recorder;
pub mod render;
pub mod report;
#[doc(hidden)]
pub mod skel;
pub mod spans;
pub mod study;
pub mod target;

pub use error::TraceError;
