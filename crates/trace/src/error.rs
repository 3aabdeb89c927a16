//! Errors of the profiler.

use std::path::PathBuf;

/// Why a trace could not be taken, read or studied.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// BPF cannot be used here (privileges, kernel BTF): elfen-bpf's reason.
    #[error("{0}")]
    Bpf(#[from] elfen_bpf::BpfError),
    /// libbpf failed to open, load (verifier) or attach a program.
    #[error("BPF {stage} of the profiler failed: {source}{}", log_suffix(.log_tail))]
    Load {
        /// `open`, `load` or `attach <program>`.
        stage: String,
        /// libbpf's error.
        source: libbpf_rs::Error,
        /// The last lines libbpf logged (the verifier's complaint on a load).
        log_tail: Vec<String>,
    },
    /// A map operation failed.
    #[error("BPF map {map}: {op} failed: {source}")]
    Map {
        /// The map.
        map: &'static str,
        /// What was done.
        op: String,
        /// libbpf's error.
        source: libbpf_rs::Error,
    },
    /// The target could not be found or named.
    #[error("target: {0}")]
    Target(String),
    /// No such process.
    #[error("no process {pid} (/proc/{pid} does not exist)")]
    NoSuchProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// The signal page or its lane could not be used for request spans.
    #[error("signal page {path}: {detail}")]
    Page {
        /// The page.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file did not parse.
    #[error("{path}: {detail}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What did not parse, where.
        detail: String,
    },
    /// A command-line value is out of range or inconsistent.
    #[error("{0}")]
    Usage(String),
    /// A worker thread of the recorder failed.
    #[error("the recorder's {0} thread failed")]
    Thread(&'static str),
}

impl TraceError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> TraceError {
        TraceError::Io {
            path: path.into(),
            source,
        }
    }
}

fn log_suffix(tail: &[String]) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(
            "\nlibbpf log (last {} lines):\n{}",
            tail.len(),
            tail.join("\n")
        )
    }
}
