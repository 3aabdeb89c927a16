//! # elfen-ops — the operator's commands over a signal page
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! What someone running elfen on a server uses to see and stop it, reading
//! and writing the signal page directly — so they work whoever created the
//! page (the daemon, a harness run, a service using the LC API) and also
//! after that process died:
//!
//! | piece | module |
//! |---|---|
//! | a typed snapshot of a page: header, controller liveness, per-lane LC, controller and batch lines | [`status`] |
//! | rates between two snapshots (LC busy and batch run fractions, requests/s, naps/s) | [`status::Rates`] |
//! | the daemon's health beside its page (batch groups ok / degraded / lost, failed knob writes) | [`health`] |
//! | the text view of `elfen status` | [`render`] |
//! | the kill switch: `elfen ctl off` / `on` | [`ctl`] |
//! | batch groups killed under memory shortage, as the daemon records them | [`kills`] |
//! | Prometheus metrics of a page over HTTP (`elfen metrics`; the daemon serves the same registry with its own metrics added) | [`metrics`] |
//! | the service manager's notifications (`READY=1`, `WATCHDOG=1`, `STATUS=`) for `Type=notify` units | [`notify`] |
//! | the clap commands the `elfen` binary flattens | [`cli`] |
#![deny(missing_docs)]

pub mod cli;
pub mod ctl;
pub mod health;
pub mod kills;
pub mod metrics;
pub mod notify;
pub mod render;
pub mod status;

pub use status::{Controller, LaneStatus, PageStatus, Rates};
