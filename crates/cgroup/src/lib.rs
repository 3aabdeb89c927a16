//! `elfen-cgroup`: the **cgroup executor** — the one piece of elfen that
//! writes cgroup files.
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! Strategies (the harness's configurations, a daemon's blind-isolation
//! loop) compute values; the [`Executor`] writes them (koordinator's
//! split). It
//!
//! - drives the **v1**, **v2** and **hybrid** (v1 controllers + a v2 tree at
//!   `<root>/unified`) layouts under a root passed in ([`Hierarchy`]; tests
//!   use a temp dir, [`default_root`] names `/sys/fs/cgroup`);
//! - creates groups ([`Executor::create_group`]) or opens an operator's
//!   ([`Executor::open_group`]), moves processes in, lists them, removes the
//!   groups it created (tasks back to the parent first, children first) —
//!   or, for a group made for its owner's commands
//!   ([`Executor::create_owned_group`]), kills every process left in it
//!   ([`Executor::kill_tasks`]: `cgroup.kill`, or freeze + SIGKILL + thaw);
//! - sets typed [`Knob`]s — cpuset, CFS bandwidth, `cpu.idle`, weight,
//!   freezer, memory limits (hard and soft), I/O limits (bandwidth, IOPS)
//!   and weight — skipping values already in
//!   place, ordering hierarchical cpuset writes, refusing bad input before
//!   the first write;
//! - resolves the **names the host uses** — systemd units and slices,
//!   containers, Kubernetes pods and QoS classes — to groups
//!   ([`HostNames`], [`select`]), and says who owns a group and whether
//!   this process's own group is delegated to it ([`host`]);
//! - records in a **state file** (atomically, before each change) the
//!   groups it created and the original value of every knob it changes on
//!   groups it did not, so [`Executor::restore_all`] (clean shutdown) and
//!   [`Executor::recover`] (next start after a kill -9) put everything back;
//! - reads what a group uses: memory ([`Executor::memory_current`]) and
//!   I/O per device ([`Executor::io_stat`]).
//!
//! For tests without root, feature `fake` exports fake v1, v2 and hybrid
//! roots (`elfen_cgroup::fake`: temp dirs with the kernel's files and a
//! hook that fills new groups as the kernel does).
//!
//! ```no_run
//! use elfen_cgroup::{Controller, Executor, Hierarchy, Knob};
//! use std::time::Duration;
//! # fn main() -> Result<(), elfen_cgroup::CgroupError> {
//! let hier = Hierarchy::detect(elfen_cgroup::default_root())?;
//! // Recovers what a crashed predecessor left, then records into the file.
//! let (mut ex, report) = Executor::with_state_file(hier, "/run/elfen/cgroup.json")?;
//! print!("{report}");
//! let batch = ex.create_group("elfen/batch", &[Controller::Cpuset, Controller::Freezer])?;
//! ex.set(&batch, Knob::CpusetCpus(vec![1]))?;
//! ex.add_process(&batch, 4242)?;
//! let outcome = ex.freeze(&batch, Duration::from_millis(50))?;
//! println!("frozen: {} after {:?}", outcome.is_frozen(), outcome.waited());
//! ex.thaw(&batch)?;
//! print!("{}", ex.restore_all()); // on SIGTERM
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

// `elfen_cgroup::…` paths resolve inside the crate too: [`fake`] is also
// compiled into this crate's integration tests.
extern crate self as elfen_cgroup;

mod affinity;
mod apply;
mod cpuset;
mod error;
mod executor;
#[cfg(feature = "fake")]
pub mod fake;
mod freezer;
mod fsio;
mod group;
pub mod host;
mod kill;
mod knob;
mod layout;
pub mod measure;
mod restore;
pub mod select;
mod state;
mod usage;

pub use apply::{ApplyReport, FileWrite};
pub use error::{CgroupError, Result};
pub use executor::Executor;
pub use freezer::{FreezeOutcome, FreezerState};
pub use group::{Group, GroupPath};
pub use host::{Delegation, HostSituation, Owner};
pub use kill::{KILL_TIMEOUT, KillReport, KillTarget, Survivor};
pub use knob::{Device, Knob, KnobKind, shares_to_weight, weight_to_shares};
pub use layout::{
    Controller, CreateHook, DEFAULT_ROOT, FreezerBackend, Hierarchy, Layout, default_root,
    detect_layout,
};
pub use restore::{RestoreAction, RestoreReport};
pub use select::{HostFiles, HostNames, QosClass, Resolved, SelectError, Selector};
pub use state::{CreatedEntry, EnabledEntry, OriginalEntry, STATE_VERSION, StateRecord};
pub use usage::IoStat;
