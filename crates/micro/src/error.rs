//! Errors of the micro-benchmarks.

/// What can stop a micro-benchmark.
#[derive(Debug, thiserror::Error)]
pub enum MicroError {
    /// The signal page could not be created.
    #[error(transparent)]
    Shm(#[from] elfen_shm::ShmError),
    /// Attaching an LC lane or a batch thread failed.
    #[error(transparent)]
    Runtime(#[from] elfen_runtime::RuntimeError),
    /// Topology or pinning failed.
    #[error(transparent)]
    Topo(#[from] elfen_topo::TopoError),
    /// A kernel could not be built.
    #[error(transparent)]
    Kernel(#[from] elfen_kernels::KernelError),
    /// The C API refused something (its `elfen_last_error`).
    #[error("libelfen: {0}")]
    CApi(String),
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Something did not happen in time (a thread that never napped or
    /// never resumed: a bug, or a machine far too loaded to measure on).
    #[error("timed out after {ms} ms waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        ms: u64,
    },
    /// The machine cannot run this benchmark as asked.
    #[error("{0}")]
    Setup(String),
    /// Ctrl-C (SIGINT) or SIGTERM.
    #[error("interrupted")]
    Interrupted,
    /// A measuring thread panicked.
    #[error("a measuring thread panicked: {0}")]
    Panicked(String),
}

/// A panic payload as text.
pub(crate) fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic)".to_string()
    }
}
