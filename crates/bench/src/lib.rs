//! # elfen-bench — the experiment harness
//!
//! Answers "how much utilization does elfen recover, and what does it cost
//! my p99?" with one command (`elfen bench`), on the machine at hand,
//! against honest baselines, and prints a side-by-side table and a report.
//!
//! | piece | module |
//! |---|---|
//! | what runs: spec, configurations, kernels (TOML, defaults, unknown keys refused) | [`config`] |
//! | the request set (Lucene term frequencies or parametric demand) | [`demand`] |
//! | the LC work: an LLC-resident pointer chase, calibrated | [`chase`] |
//! | the LC service: TCP, dispatcher, FIFO queue, pinned worker publishing through `LcLane` | [`service`] |
//! | open-loop Poisson load, latency from intended send times, HdrHistogram | [`loadgen`], [`client`] |
//! | batch work in a child process (SCHED_IDLE, pinned / cgroup / Elfen checks) | [`batch`] |
//! | cgroup executor (`elfen-*` cgroups, v1 or v2, root configurable) | [`cgroup`] |
//! | the sweep: every configuration at every load, saved after every point | [`sweep`] |
//! | tables, the figures, `report.md` and PNG plots from JSON alone | [`report`], [`plot`] |
//! | Ctrl-C | [`interrupt`] |
//! | the `elfen bench` / `elfen report` subcommands | [`cli`] |
//!
//! See `docs/harness.md` for the definitions of every configuration and
//! metric.
#![deny(missing_docs)]

pub mod batch;
pub mod cgroup;
pub mod chase;
pub mod cli;
pub mod client;
pub mod config;
pub mod demand;
pub mod error;
pub mod interrupt;
pub mod loadgen;
pub mod plot;
pub mod report;
pub mod service;
pub mod sweep;
pub mod sys;

pub use config::{BenchSpec, ConfigKind, KernelKind};
pub use error::BenchError;
