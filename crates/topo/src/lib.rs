//! `elfen-topo`: **lanes** for the elfen co-location runtime.
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! Vocabulary (shared by every elfen crate):
//!
//! - **lane**: one logical CPU (hardware thread), identified by its CPU id.
//! - **request lane**: a lane where latency-critical (LC) requests run.
//! - **batch lane**: a partner of a request lane, where batch threads run and from which
//!   they step aside (nap) whenever the request lane is busy.
//! - **pairing**: which batch lanes belong to which request lane. On SMT hardware the
//!   partners are siblings of one core; without SMT the pairing is configured.
//!
//! What is here:
//!
//! - [`Topology`] / [`LaneInfo`]: online lanes read from sysfs (root configurable, so
//!   tests use fake trees), with [`parse_cpu_list`] / [`format_cpu_list`] for the
//!   kernel's `0-3,8` syntax.
//! - [`plan_pairs`] → [`PairPlan`]: request/batch [`Pair`]s from SMT siblings, an
//!   explicit spec (`"0:1,2:3+4"`), or consecutive CPUs by default.
//! - [`pin_current_thread`], [`current_affinity`], [`PinGuard`]: thread pinning.
//! - [`Features`]: SMT, invariant TSC, `umwait`/`mwaitx`, perf counters, hypervisor.
//! - [`SystemInfo`]: the machine description stored with result files.
//!
//! ```no_run
//! # fn main() -> Result<(), elfen_topo::TopoError> {
//! let topo = elfen_topo::Topology::detect()?;
//! let plan = elfen_topo::plan_pairs(&topo, None)?;
//! println!("{}", plan.describe());
//! for pair in plan.iter() {
//!     let _pin = elfen_topo::PinGuard::new(pair.request)?;
//!     // ... serve requests on the request lane ...
//! }
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod cpulist;
mod error;
mod features;
mod pairing;
pub mod perf;
mod pin;
mod sysinfo;
mod topology;

pub use cpulist::{MAX_CPU_ID, format_cpu_list, parse_cpu_list};
pub use error::{Result, TopoError};
pub use features::Features;
pub use pairing::{Pair, PairPlan, PairingSource, format_pair_spec, parse_pair_spec, plan_pairs};
pub use pin::{PinGuard, current_affinity, pin_current_thread, set_current_affinity};
pub use sysinfo::{CgroupMode, SysPaths, SystemInfo};
pub use topology::{LaneInfo, SYSFS_CPU_ROOT, Topology};
