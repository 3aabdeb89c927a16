//! Errors of starting an external LC service: each names the command or
//! the setting, and the tail of the service's stderr where it wrote one.

/// An error of the launch contract.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The command template is invalid (names the setting and the
    /// placeholder).
    #[error("{0}")]
    Config(String),
    /// The service could not start, exited, or never answered.
    #[error("LC service: {0}")]
    Service(String),
    /// An OS operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Stopped by Ctrl-C (or SIGTERM) while waiting for the service.
    #[error("interrupted")]
    Interrupted,
}

/// Shorthand.
pub type Result<T, E = LaunchError> = std::result::Result<T, E>;

impl LaunchError {
    /// A [`LaunchError::Io`] with context.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> LaunchError {
        LaunchError::Io {
            what: what.into(),
            source,
        }
    }
}
