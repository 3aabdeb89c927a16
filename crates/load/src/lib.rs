//! # elfen-load — the open-loop load
//!
//! A **product** crate: part of what an operator runs (`elfen trace`,
//! `elfen advise`; `docs/architecture.md`); it depends on no lab crate.
//!
//! The measurement kit's open-loop load, one for every command that drives
//! an LC service: the harness, the proxy's bench, `elfen trace` and
//! `elfen advise`'s latency probe.
//!
//! | what | where |
//! |---|---|
//! | time: a monotonic clock, a fake one for tests | [`clock`] |
//! | Poisson send times drawn ahead; the sender that keeps them | [`arrivals`] |
//! | latency from the intended send time (no coordinated omission), HdrHistogram percentiles | [`accounting`] |
//! | one open-loop connection: sender and receiver threads, wire / text / HTTP framing, a hook per request | [`conn`] |
//! | what the requests carry: request sets, demands, the tasks file | [`requests`], [`demand`], [`tasks`] |
//! | key-value services' text protocols (RESP, memcached lines) | [`kv`], [`text`] |
//! | the Lucene search service's settings | [`lucene`] |

pub mod accounting;
pub mod arrivals;
pub mod clock;
pub mod conn;
pub mod demand;
pub mod error;
pub mod kv;
pub mod lucene;
pub mod requests;
pub mod tasks;
pub mod text;

pub use accounting::{Accounting, Outcome, new_histogram, percentiles_us};
pub use arrivals::{poisson_arrivals, poisson_offsets, run_sender};
pub use clock::{Clock, FakeClock, MonoClock, mono_ns};
pub use error::LoadError;
