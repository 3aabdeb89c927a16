//! # elfen-bench — the experiment harness
//!
//! A **lab** crate: harness, measurement or workload
//! (`docs/architecture.md`); no product crate depends on it but
//! `elfen-trace` and `elfen-advise`, edges still to remove.
//!
//! Answers "how much utilization does elfen recover, and what does it cost
//! my p99?" with one command (`elfen bench`), on the machine at hand,
//! against honest baselines, for any LC service that speaks the LC wire
//! protocol, and prints side-by-side tables, verdicts and a report.
//! Record, study and format are apart: the sweep records result files,
//! `elfen_results::study` answers questions of them, [`report`] formats.
//!
//! | piece | module |
//! |---|---|
//! | what runs: the spec (TOML, defaults, unknown keys refused) | [`spec`] |
//! | LC services behind one trait: built-in chase, external command, `elfen serve`; the wire protocol; request sets | [`lc`] |
//! | open-loop Poisson load from intended send times, HdrHistogram; one invocation over the wire | [`load`] |
//! | batch work behind one trait: kernel child processes and their worker | [`batch`] |
//! //! | the sweep: pre-flight, calibration, SLO, interleaved rounds, records | [`sweep`] |
//! | tables, verdicts, targets, `report.md` and PNG plots from result files alone | [`report`] |
//! | the `elfen bench` / `elfen report` / `elfen serve` subcommands | [`cli`] |
//!
//! `crates/bench/README.md` maps every file; `docs/harness.md` defines
//! every configuration and metric.
#![deny(missing_docs)]

pub mod batch;
pub mod cli;
pub mod error;
pub mod lc;
pub mod load;
pub mod report;
pub mod spec;
pub mod sweep;

pub use error::BenchError;
pub use spec::{BenchSpec, Config, KernelKind};
