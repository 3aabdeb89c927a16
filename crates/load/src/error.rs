//! The load kit's errors. Each names what was wrong; the harness's
//! `BenchError` takes them variant for variant, so a message reads the
//! same whichever crate raised it.

/// Errors of the load kit.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A setting is invalid.
    #[error("{0}")]
    Config(String),
    /// A value that does not parse.
    #[error("{what}: cannot parse {given:?}: expected {expected}")]
    Parse {
        /// The setting.
        what: String,
        /// What was given.
        given: String,
        /// What is accepted.
        expected: String,
    },
    /// A file, socket or OS operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The LC service failed, or answered outside its protocol.
    #[error("LC service: {0}")]
    Service(String),
    /// The demand distribution or the request set could not be built.
    #[error("demand: {0}")]
    Demand(String),
    /// Stopped by Ctrl-C (or SIGTERM).
    #[error("interrupted")]
    Interrupted,
}

impl LoadError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> LoadError {
        LoadError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Shorthand.
pub type Result<T, E = LoadError> = std::result::Result<T, E>;
