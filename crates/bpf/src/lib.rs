//! # elfen-bpf — the kernel signal source for unmodified LC services
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! An LC service that uses the LC API publishes its own busy state on the
//! signal page (`elfen_runtime::LcLane`). For one nobody can change, a
//! daemon learns from the kernel which CPU runs an LC thread and writes
//! that busy state into the request lane's LC line. This crate is that
//! kernel source:
//!
//! - [`SchedSource`]: a BPF program on `tp_btf/sched_switch` (CO-RE,
//!   `src/bpf/sched.bpf.c`) records per CPU who runs (tid, tgid, cgroup v2
//!   id, switch time, a seqlock) into a memory-mapped array — one 64-byte
//!   slot per CPU that a poller reads with plain loads — decides "an LC
//!   thread runs here" from maps of watched processes and cgroups, keeps
//!   per-CPU LC busy periods and time — and histograms of the busy
//!   periods, the gaps between them and the LC's wake-to-run delay
//!   ([`StatsReader`], mmapped too) — and sends each LC busy/idle
//!   transition of a watched CPU through a ring buffer with a forced
//!   wakeup, so a reader can sleep instead of spin; a reader that wants
//!   no wake-up per edge turns the events off
//!   ([`SchedSource::set_edge_events`]) and reads the counters on its tick.
//! - [`PollSource`]: the **coarse** fallback where BPF cannot load —
//!   `/proc/<tgid>/task/*/stat` scanned at an interval.
//! - [`Source`]: either of them behind one set of methods, with
//!   [`Source::describe`] for run-time reports.
//! - [`probe()`]: whether BPF loads here and, if not, why.
//! - [`egress`]: a second, unrelated program — a cgroup-skb egress hook
//!   that sends a batch group's packets at low priority
//!   (`src/bpf/egress.bpf.c`), for the daemon's egress isolation.
//! - [`cli`]: `elfen bpf probe` and `elfen bpf visibility` (figures).
//!
//! The contract between the BPF C and Rust is one header,
//! `src/bpf/elfen_bpf.h`, mirrored by [`contract`].
#![deny(missing_docs)]

pub mod cli;
pub mod contract;
pub mod egress;
mod error;
mod poll;
mod probe;
pub mod proc;
mod sched;
#[doc(hidden)]
pub mod skel;
mod slots;
mod source;
mod stats;
pub mod visibility;

pub use contract::{CpuSlot, LcEvent, SlotSnapshot};
pub use error::BpfError;
pub use poll::PollSource;
pub use probe::{LogCapture, Probe, VMLINUX_BTF, check_btf, check_privileges, probe};
pub use sched::{SchedSource, program_exists};
pub use slots::SlotReader;
pub use source::{Options, Source};
pub use stats::{HistCounts, LcCounts, StatsReader};
