//! The harness's **open-loop load generator**: the load kit's
//! (`elfen-load`: Poisson arrivals computed before the invocation starts,
//! each request sent at its intended time or at once if late, latency
//! from the intended send time, so a stall — of the server, the network or
//! the sender itself — shows up as latency for every request due during it)
//! re-exported where the harness has always found it; a rep's histogram is
//! encoded for its result file by `elfen_results::histogram`.
//! [`client`] runs one invocation against an LC service; [`drive`] is
//! `elfen load`, the generator on its own.

pub mod client;
pub mod drive;

pub use elfen_load::accounting::{Accounting, Outcome, new_histogram, percentiles_us};
pub use elfen_load::arrivals::{poisson_offsets, run_sender};
pub use elfen_load::clock::{Clock, FakeClock, MonoClock, mono_ns};
