//! # elfen-trace — a request-level hazard profiler (Tailor)
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
