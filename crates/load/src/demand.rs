//! What an LC's requests carry ([`RequestsKind`]) and the work requests'
//! demand ([`DemandSpec`], the `[demand]` table of a bench spec): the
//! settings a request set is built from ([`crate::requests::build`]).

use crate::error::LoadError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What the requests carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestsKind {
    /// Work in ns (the wire `arg`), drawn from `[demand]`: for the built-in
    /// chase service, in process or as `elfen serve`.
    Demand,
    /// The tasks file's term queries as payload: for search services.
    TermQueries,
    /// A key drawn uniformly from `[lc.kv]`'s key space per request: for
    /// key-value services.
    Keys,
}

/// The work requests' demand (service time alone, the paper's Figure 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DemandSpec {
    /// The Elfen paper's request set: the 1,237 term queries (`HighTerm`,
    /// `MedTerm`, `LowTerm`) of luceneutil's `wikimedium.10M.nostopwords.tasks`
    /// (shipped in `data/luceneutil/`), each with demand proportional to its
    /// term's document frequency (a term query's cost is its posting list),
    /// scaled to `mean_us`. Most are short; the longest are 15× the mean
    /// and 120× the shortest.
    Lucene {
        /// Mean demand, µs.
        #[serde(default = "default_mean_us")]
        mean_us: f64,
        /// The tasks file; default: the shipped one (or `$ELFEN_DATA_DIR`).
        #[serde(default)]
        tasks_path: Option<PathBuf>,
    },
    /// Lognormal with the given mean; `sigma` is the standard deviation of
    /// the log (the Lucene set's is 1.18).
    Lognormal {
        /// Mean demand, µs.
        #[serde(default = "default_mean_us")]
        mean_us: f64,
        /// Standard deviation of `ln(demand)`.
        #[serde(default = "default_sigma")]
        sigma: f64,
        /// Requests in the request set.
        #[serde(default = "default_set_size")]
        set_size: usize,
    },
    /// Two classes: short requests and a fraction of long ones.
    Bimodal {
        /// Demand of a short request, µs.
        short_us: f64,
        /// Demand of a long request, µs.
        long_us: f64,
        /// Fraction of long requests, in (0, 1).
        long_fraction: f64,
        /// Requests in the request set.
        #[serde(default = "default_set_size")]
        set_size: usize,
    },
    /// Exponential with the given mean.
    Exponential {
        /// Mean demand, µs.
        mean_us: f64,
        /// Requests in the request set.
        #[serde(default = "default_set_size")]
        set_size: usize,
    },
    /// Every request the same.
    Constant {
        /// Demand, µs.
        us: f64,
    },
}

fn default_mean_us() -> f64 {
    300.0
}
fn default_sigma() -> f64 {
    LUCENE_LOG_SIGMA
}
fn default_set_size() -> usize {
    1000
}

/// Standard deviation of `ln(freq)` over the Lucene term set.
pub const LUCENE_LOG_SIGMA: f64 = 1.1787;

impl Default for DemandSpec {
    fn default() -> Self {
        DemandSpec::Lucene {
            mean_us: default_mean_us(),
            tasks_path: None,
        }
    }
}

impl DemandSpec {
    /// Checks the values (`demand.*` named in the message).
    pub fn validate(&self) -> Result<(), LoadError> {
        let pos = |what: &str, v: f64| positive(&format!("demand.{what}"), v);
        match self {
            DemandSpec::Lucene { mean_us, .. } => pos("mean_us", *mean_us),
            DemandSpec::Lognormal {
                mean_us,
                sigma,
                set_size,
            } => {
                pos("mean_us", *mean_us)?;
                pos("sigma", *sigma)?;
                nonzero("demand.set_size", *set_size)
            }
            DemandSpec::Bimodal {
                short_us,
                long_us,
                long_fraction,
                set_size,
            } => {
                pos("short_us", *short_us)?;
                pos("long_us", *long_us)?;
                if !(*long_fraction > 0.0 && *long_fraction < 1.0) {
                    return Err(LoadError::Config(format!(
                        "demand.long_fraction must be in (0, 1), got {long_fraction}"
                    )));
                }
                nonzero("demand.set_size", *set_size)
            }
            DemandSpec::Exponential { mean_us, set_size } => {
                pos("mean_us", *mean_us)?;
                nonzero("demand.set_size", *set_size)
            }
            DemandSpec::Constant { us } => pos("us", *us),
        }
    }
}

/// Ok if `v` is a finite number above 0; the error names `what`.
pub fn positive(what: &str, v: f64) -> Result<(), LoadError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(LoadError::Config(format!(
            "{what} must be a finite number > 0, got {v}"
        )))
    }
}

fn nonzero(what: &str, v: usize) -> Result<(), LoadError> {
    if v > 0 {
        Ok(())
    } else {
        Err(LoadError::Config(format!("{what} must be at least 1")))
    }
}
