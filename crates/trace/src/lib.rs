//! elfen-trace (in progress)
#![deny(missing_docs)]
pub mod contract;
pub mod error;
pub mod kernel;
pub mod lcline;
pub mod record;
pub mod recorder;
#[doc(hidden)]
pub mod skel;
pub mod target;

pub use error::TraceError;
