//! The harness's errors. Every one names what was wrong and, where there is
//! a choice, the valid values.

/// Errors of the harness library.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A configuration value is invalid.
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
    /// The LC service's port is taken.
    #[error(
        "port {port} on 127.0.0.1 is in use ({source}); choose another with --port, or --port 0 for any free port"
    )]
    PortInUse {
        /// The port.
        port: u16,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file or OS operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A cgroup could not be created, written or removed.
    #[error("cgroup {0}")]
    Cgroup(#[from] elfen_cgroup::CgroupError),
    /// The signal page could not be created or attached.
    #[error("signal page: {0}")]
    Page(#[from] elfen_shm::ShmError),
    /// Lanes: topology, pairing or pinning.
    #[error("lanes: {0}")]
    Topo(#[from] elfen_topo::TopoError),
    /// The batch process failed.
    #[error("batch process: {0}")]
    Batch(String),
    /// The LC service or the load generator failed.
    #[error("LC service: {0}")]
    Service(String),
    /// The demand distribution could not be built.
    #[error("demand: {0}")]
    Demand(String),
    /// A result file could not be read or written.
    #[error(transparent)]
    Results(#[from] elfen_results::ResultsError),
    /// Stopped by Ctrl-C (or SIGTERM).
    #[error("interrupted")]
    Interrupted,
}

/// Shorthand.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// The load kit's error as the harness's own: the same message, and a
/// Ctrl-C stays [`BenchError::Interrupted`].
impl From<elfen_load::LoadError> for BenchError {
    fn from(e: elfen_load::LoadError) -> BenchError {
        use elfen_load::LoadError as L;
        match e {
            L::Config(m) => BenchError::Config(m),
            L::Parse {
                what,
                given,
                expected,
            } => BenchError::Parse {
                what,
                given,
                expected,
            },
            L::Io { what, source } => BenchError::Io { what, source },
            L::Service(m) => BenchError::Service(m),
            L::Demand(m) => BenchError::Demand(m),
            L::Interrupted => BenchError::Interrupted,
        }
    }
}

/// An external service's start-up error as the harness's own: the same
/// message, and a Ctrl-C stays [`BenchError::Interrupted`].
impl From<elfen_wire::LaunchError> for BenchError {
    fn from(e: elfen_wire::LaunchError) -> BenchError {
        use elfen_wire::LaunchError as L;
        match e {
            L::Config(m) => BenchError::Config(m),
            L::Service(m) => BenchError::Service(m),
            L::Io { what, source } => BenchError::Io { what, source },
            L::Interrupted => BenchError::Interrupted,
        }
    }
}

impl BenchError {
    /// An [`BenchError::Io`] with context.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io {
            what: what.into(),
            source,
        }
    }
}
