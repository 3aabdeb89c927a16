//! # elfen-daemon — protection for an LC service nobody can change
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! `elfen daemon --config FILE` lets batch work borrow the lanes an
//! unmodified latency-critical (LC) service leaves idle:
//!
//! - it creates and owns a **signal page** (`elfen-shm`) for the lane
//!   pairs of the machine;
//! - an [`LcWriter`] thread learns from the kernel (`elfen-bpf`: BPF on
//!   `sched_switch`, or the coarse /proc poll fallback, said so) when the
//!   LC service — found by pid, cgroup or command name ([`LcTarget`]), and
//!   found again when it restarts — runs on each request lane, and writes
//!   that lane's LC line (`elfen_runtime::LcLane`);
//! - each batch group gives the lanes back in its **mode** ([`Mode`]):
//!   `cooperative` (instrumented programs on the page nap themselves),
//!   `guard` (a SCHED_FIFO [`guard`] thread per batch lane occupies it
//!   while the policy says nap — it *is* a `BatchThread` whose nap is a
//!   spin, so the policies are the runtime's, unchanged), `freeze` (the
//!   group's freezer), `idle` (cpu.idle / SCHED_IDLE only), `blind`
//!   (PerfIso's blind isolation: the group's cpuset follows the CPUs the LC
//!   leaves idle);
//! - every cgroup change goes through `elfen-cgroup`'s executor and its
//!   state file, so a SIGTERM restores everything and the next start after
//!   a SIGKILL repairs what was left.
//!
//! - PerfIso's other resources ([`isolation`]): memory limits and a
//!   watermark below which the lowest-priority batch group is killed, disk
//!   I/O limits and a shared budget divided by deficit-weighted round
//!   robin, and batch traffic at low priority (a cgroup-skb BPF program).
//!
//! Modules: [`config`] (the file; [`units`] its sizes), [`plan`] (every
//! check before anything is applied), [`lc`] (discovery), [`subtree`] (an LC
//! named by the host's names), [`writer`], [`bell`], [`guard`],
//! [`freeze`], [`blind`], [`worker`] (how each of those threads starts and
//! stops), [`rt`] (the bound on their real-time spinning, and the kernel's
//! real-time throttling), [`batch`] (groups, commands, SCHED_IDLE), [`health`] (failed
//! knob writes counted, groups degraded or lost), [`isolation`] (memory,
//! disk I/O and egress of batch groups), [`metrics`], [`daemon`] (the run),
//! [`logging`] (one event per line, with levels), [`measure`] (`elfen daemon measure`), [`helpers`] (the test LC service and
//! spinner), [`balloon`] (a batch program that grows), [`cli`].
#![deny(missing_docs)]

pub mod balloon;
pub mod batch;
pub mod bell;
pub mod blind;
pub mod cli;
pub mod config;
pub mod daemon;
mod error;
pub mod freeze;
pub mod guard;
pub mod health;
pub mod helpers;
pub mod isolation;
pub mod lc;
pub mod logging;
pub mod measure;
pub mod metrics;
pub mod placement;
pub mod plan;
pub mod protection;
pub mod rt;
pub mod subtree;
pub mod units;
pub mod worker;
pub mod writer;

pub use bell::Bell;
pub use config::{Config, Mode};
pub use daemon::{Daemon, ShutdownReport};
pub use error::{ConfigError, DaemonError};
pub use freeze::{FreezeReport, Freezer, FreezerHandle};
pub use guard::{Guard, GuardHandle, GuardOptions, GuardReport};
pub use lc::{LcTarget, Notice};
pub use plan::Plan;
pub use writer::{LcWriter, LcWriterHandle, WriterOptions, WriterReport};
