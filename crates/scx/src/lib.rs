//! # elfen-scx — Elfen's lanes in the kernel: a sched_ext scheduler
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! On a kernel with sched_ext (`CONFIG_SCHED_CLASS_EXT`, Linux 6.12+), a
//! BPF program can schedule a chosen set of tasks. This crate's scheduler,
//! `src/bpf/lanes.bpf.c` (a struct_ops program, loaded with libbpf-rs),
//! schedules only the batch — the processes [`load`] and
//! [`Scheduler::add_batch`] put in the ext class (`SCHED_EXT`), and their
//! children — with `SCX_OPS_SWITCH_PARTIAL`, and applies Elfen's lane rule
//! there:
//!
//! **a batch task runs on a CPU only when no LC task runs there or on its
//! SMT sibling.**
//!
//! On the CPU itself the kernel's class order (fair > ext > idle) keeps a
//! batch task from delaying a fair-class LC task; the scheduler adds the
//! sibling: a `tp_btf/sched_switch` program sees an LC task start on a CPU,
//! kicks batch off its sibling at once (`SCX_KICK_PREEMPT`), and the
//! sibling dispatches no batch until the LC leaves. LC tasks are the
//! processes or the cgroup v2 subtree of [`Lc`]. Nothing in user space runs
//! per LC busy edge.
//!
//! When the loading process dies, the kernel unloads the scheduler and the
//! batch tasks return to the fair class (keep their group idle —
//! `cpu.idle` — so that is no worse than plain SCHED_IDLE). The kernel's
//! watchdog or an error in the program unloads it too: [`Scheduler::check`]
//! and [`Scheduler::state`] say why ([`ExitInfo`]).
//!
//! ```no_run
//! # fn main() -> Result<(), elfen_scx::ScxError> {
//! use elfen_scx::{Lc, Options};
//! let lc = Lc::Cgroup("/sys/fs/cgroup/system.slice/redis.service".into());
//! let mut sched = elfen_scx::load(&Options::new(lc, vec![4242]))?;
//! sched.add_batch(4243)?;
//! println!("{:?}", sched.state()?);
//! let report = sched.unload();
//! println!("{} batch threads back to their policy", report.restored);
//! # Ok(()) }
//! ```
//!
//! The BPF object is built from the checked-in `src/bpf/vmlinux.h` (the
//! 7.3 kernel's types), so it builds on a machine whose own kernel has no
//! sched_ext; it loads on a 6.13+ kernel with sched_ext (the local-queue
//! hand-back needs 6.19+ and is left out before). The contract between the
//! BPF C and Rust is `src/bpf/lanes.h`, mirrored by [`contract`].
#![deny(missing_docs)]

pub mod contract;
mod error;
pub mod kernel;
mod scheduler;
#[doc(hidden)]
pub mod skel;
mod verify;

pub use contract::{ExitInfo, Stats};
pub use error::ScxError;
pub use kernel::{KernelState, SCHED_EXT};
pub use scheduler::{Lc, Options, Scheduler, Siblings, State, Unloaded, load, sibling_table};
pub use verify::{PROGRAMS, ProgramCheck, verify_programs};
