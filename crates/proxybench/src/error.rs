//! The proxy bench's errors: the proxy's own (a replica, the page, a
//! setting) or the harness library's (the generator, request sets), each
//! with its message unchanged.

use elfen_bench::BenchError;
use elfen_proxy::ProxyError;

/// An error of `elfen proxy bench`.
#[derive(Debug, thiserror::Error)]
pub enum ProxyBenchError {
    /// The proxy, a replica, the signal page or a setting.
    #[error("{0}")]
    Proxy(#[from] ProxyError),
    /// The load generator or the harness library failed.
    #[error("{0}")]
    Bench(#[from] BenchError),
}

impl ProxyBenchError {
    /// Whether it is a Ctrl-C (or SIGTERM), whichever side saw it.
    pub fn is_interrupted(&self) -> bool {
        matches!(
            self,
            ProxyBenchError::Proxy(ProxyError::Interrupted)
                | ProxyBenchError::Bench(BenchError::Interrupted)
        )
    }
}

/// The proxy bench's result type.
pub type Result<T> = std::result::Result<T, ProxyBenchError>;
