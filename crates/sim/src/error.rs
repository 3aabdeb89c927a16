//! The simulator's error type: every bad input names the field or file it
//! came from (`topology.smt_ways must be >= 1, got 0`).

use elfen_policy::PolicyError;
use elfen_results::ResultsError;

/// Errors building or running a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A configuration value is out of range or inconsistent.
    #[error("{field} {problem}")]
    Invalid {
        /// The field, as written in a config (`topology.smt_ways`).
        field: String,
        /// What is wrong with it (`must be >= 1, got 0`).
        problem: String,
    },
    /// A file could not be read.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// The OS error (shown in the message, so not also a `source`).
        error: std::io::Error,
    },
    /// A file was read but its content is unusable (malformed demand file,
    /// bad trace line, TOML syntax error, …).
    #[error("{path}: {problem}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A result file could not be read or written.
    #[error(transparent)]
    Results(#[from] ResultsError),
    /// The policy crate rejected a policy configuration.
    #[error("policy: {0}")]
    Policy(#[from] PolicyError),
}

/// Shorthand for an [`SimError::Invalid`].
pub(crate) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> SimError {
    SimError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// `Err` unless `x` is a finite number `> 0`.
pub(crate) fn positive(field: &str, x: f64) -> Result<f64, SimError> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(invalid(
            field,
            format!("must be a finite number > 0, got {x}"),
        ))
    }
}

/// `Err` unless `x` is a finite number `>= 0`.
pub(crate) fn non_negative(field: &str, x: f64) -> Result<f64, SimError> {
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(invalid(
            field,
            format!("must be a finite number >= 0, got {x}"),
        ))
    }
}

/// `Err` unless the integer `x >= min`; returns it as `u64`.
pub(crate) fn at_least(field: &str, x: i64, min: i64) -> Result<u64, SimError> {
    if x >= min {
        Ok(x as u64)
    } else {
        Err(invalid(field, format!("must be >= {min}, got {x}")))
    }
}

/// Reads a text file; returns its display name (for later errors) and text.
pub(crate) fn read_text(path: &std::path::Path) -> Result<(String, String), SimError> {
    let what = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((what, text)),
        Err(error) => Err(SimError::Io { path: what, error }),
    }
}
