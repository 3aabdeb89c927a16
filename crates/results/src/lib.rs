//! # elfen-results — the result file every experiment writes, and the
//! questions asked of it
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! One JSON file per run, in the spirit of resctl-bench: the **spec** that
//! was run, the **system** it ran on, what the run **resolved** ([`Run`]:
//! capacity, loads, SLO, budgets, lanes), the **raw record** (one [`Rep`]
//! per invocation of each point) and the **derived** summary (medians and
//! spread over those invocations). Measured (`elfen bench`) and simulated
//! (`elfen sim`) files share the format, so their curves can be plotted
//! together, and [`study`] answers the questions every reader asks (series,
//! ratios to LC alone, the knee, verdicts) once for all of them.
//!
//! | piece | module |
//! |---|---|
//! | the configurations' one vocabulary | [`config`] |
//! | the record: file, points, reps, summaries, distributions | [`record`] |
//! | a rep's latency histogram, encoded | [`histogram`] |
//! | what a measured sweep resolved | [`run`] |
//! | the questions asked of a file | [`study`] |
//!
//! A sweep writes its file after every finished round ([`ResultFile::save`]
//! is atomic: temp file + rename), so an interrupted run keeps every
//! invocation it finished.
#![deny(missing_docs)]

pub mod config;
pub mod histogram;
pub mod record;
pub mod run;
pub mod study;

pub use config::{Config, UnknownConfig};
pub use record::{
    BatchTimes, DaemonTimes, Distribution, FanoutRep, LatencyBreakdown, LatencyStats, MeasuredRep,
    Percentiles, Point, Rep, ResultFile, SimulatedRep, Source, Stat, Summary, Utilization,
    UtilizationStats, save_json,
};
pub use run::{
    AddedRound, BatchInfo, BudgetInfo, ChaseInfo, LanesInfo, LcInfo, LoadRounds, PreSweepPoint,
    Rounds, RoundsEnd, Run, Skipped, SloInfo, Wall,
};

/// The schema tag at the top of every result file this build writes; bump
/// when an older build could not read the file (a new field: older builds
/// refuse unknown fields).
pub const SCHEMA: &str = "elfen-result/3";

/// Older tags this build still reads: their files lack only records added
/// since, which read as absent (`elfen-result/2`: no added rounds, no
/// record of whether the batch lanes share the request lane's core).
pub const READS: [&str; 1] = ["elfen-result/2"];

/// Errors reading or writing result files.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// The file could not be read or written.
    #[error("cannot read or write {path}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a valid result file.
    #[error("{path}: not an elfen result file")]
    Parse {
        /// The file.
        path: String,
        /// The JSON error (names line and column).
        source: serde_json::Error,
    },
    /// The file parses but says something impossible.
    #[error("{path}: {what}")]
    Invalid {
        /// The file.
        path: String,
        /// What, and where in the file.
        what: String,
    },
    /// The file has another schema tag.
    #[error(
        "{path}: schema is {found:?}, this build reads {SCHEMA:?} and {READS:?} (re-run the command that made it)"
    )]
    Schema {
        /// The file.
        path: String,
        /// The tag found in the file.
        found: String,
    },
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
