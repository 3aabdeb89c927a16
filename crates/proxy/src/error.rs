//! The proxy's errors: what went wrong, naming the replica, file or field.

use std::path::PathBuf;

/// An error of the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A setting is invalid (names the field and the value).
    #[error("{0}")]
    Config(String),
    /// A configuration file cannot be read or parsed.
    #[error("{path}: {msg}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A replica cannot be started or never became ready (names the
    /// command and the tail of its stderr).
    #[error("{0}")]
    Replica(String),
    /// The signal page cannot be created or attached.
    #[error("signal page: {0}")]
    Page(#[from] elfen_shm::ShmError),
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A replica's command template is invalid, or a service started
    /// from one failed (names the command and the tail of its stderr).
    #[error("{0}")]
    Launch(#[from] elfen_wire::LaunchError),
    /// Ctrl-C or SIGTERM.
    #[error("interrupted")]
    Interrupted,
}

impl ProxyError {
    /// An OS error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> ProxyError {
        ProxyError::Io {
            what: what.into(),
            source,
        }
    }
}

/// The proxy's result type.
pub type Result<T> = std::result::Result<T, ProxyError>;
