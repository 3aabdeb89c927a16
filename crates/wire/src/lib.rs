//! # elfen-wire — the LC wire protocol and the launch contract
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! One job: how an LC service and whatever drives it (the harness's load
//! generator, the proxy, the profiler) talk, and how an external LC service
//! is started and found ready.
//!
//! | piece | module |
//! |---|---|
//! | the wire protocol, version 1 (`docs/lc-protocol.md`): request and response frames | [`protocol`] (re-exported at the root) |
//! | an external LC service: its command template, `ELFEN_*` variables, start, readiness by a ping, stop and reap | [`launch`] |
//! | what can go wrong starting one | [`error`] |
#![deny(missing_docs)]

pub mod error;
pub mod launch;
pub mod protocol;

pub use error::{LaunchError, Result};
pub use protocol::*;
