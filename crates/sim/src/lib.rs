//! # elfen-sim — the discrete-event simulator
//!
//! A **lab** crate: harness, measurement or workload
//! (`docs/architecture.md`); no product crate depends on it.
//!
//! Carries elfen's claims from the machine at hand to 2-way SMT
//! servers with dozens of cores and to fleets of them, and reproduces the
//! Elfen paper's figures (`docs/reproduction.md`).
//!
//! Where to find each concept:
//!
//! | concept | where |
//! |---|---|
//! | **lane**, **request lane**, **batch lane**, core, server | [`engine`] (module docs) |
//! | **policy** (Elfen's state machines, called as they are) | [`engine::Mode::Elfen`] → [`elfen_policy::Policy::step`] |
//! | **nap** / step aside / wake | [`engine::Timing`], `Engine::start_nap` / `wake` |
//! | baselines (alone, naive, static partition, OS priority, blind isolation) | [`engine::Mode`], [`config::ConfigKind`] |
//! | interference of a batch kind | [`batch`] |
//! | request demand (Figure 1), arrivals | [`demand`], [`arrivals`] |
//! | chip (dispatcher + shared queue) and cluster fan-out | [`config::Topology`], [`fanout`] |
//! | result files (`Point`, `Rep`, `Summary::of`) | [`stats`], [`sweep`] |
//! | validation against measured results | [`validate`] |
//! | reproduction table, performance figures | [`repro`], [`perf`] |
//!
//! The `elfen sim …` subcommands live in [`cli`]; `docs/simulator.md`
//! describes the model and its assumptions.
#![deny(missing_docs)]

pub mod arrivals;
pub mod batch;
pub mod cli;
pub mod config;
pub mod demand;
pub mod engine;
pub mod error;
pub mod fanout;
pub mod perf;
pub mod repro;
pub mod stats;
pub mod sweep;
pub mod validate;

pub use config::{Experiment, SimConfig};
pub use error::SimError;
pub use sweep::{PointSpec, RunOptions};
