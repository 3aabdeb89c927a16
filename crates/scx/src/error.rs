//! Why the scheduler could not be loaded or a call failed.

use std::path::PathBuf;

/// An error of [`crate::load`] and of [`crate::Scheduler`]'s calls.
#[derive(Debug, thiserror::Error)]
pub enum ScxError {
    /// The running kernel has no sched_ext.
    #[error(
        "kernel {kernel} has no sched_ext ({path} is missing: built without CONFIG_SCHED_CLASS_EXT)"
    )]
    NoSchedExt {
        /// `uname -r`.
        kernel: String,
        /// The file looked for.
        path: PathBuf,
    },
    /// Another sched_ext scheduler is loaded (or one is being loaded or
    /// unloaded): never two schedulers fighting.
    #[error("another sched_ext scheduler is loaded: {ops} (sched_ext state {state})")]
    AlreadyLoaded {
        /// Its name (`/sys/kernel/sched_ext/root/ops`), or "unknown".
        ops: String,
        /// `/sys/kernel/sched_ext/state`.
        state: String,
    },
    /// The process may not load BPF programs.
    #[error(transparent)]
    Bpf(#[from] elfen_bpf::BpfError),
    /// The machine has more possible CPUs than the scheduler covers.
    #[error("this machine has {count} possible CPUs; the scheduler covers at most {max}")]
    TooManyCpus {
        /// Possible CPU ids.
        count: u32,
        /// [`crate::contract::MAX_CPUS`].
        max: u32,
    },
    /// A sibling pairing names a CPU twice or one out of range.
    #[error("bad sibling pairing: {0}")]
    Pairing(String),
    /// The topology could not be read.
    #[error("reading the CPU topology: {0}")]
    Topology(#[from] elfen_topo::TopoError),
    /// libbpf failed to open, load (verifier) or attach the scheduler.
    #[error("sched_ext scheduler: BPF {stage} failed: {source}{}", log_suffix(.log_tail))]
    Load {
        /// `open`, `load`, `attach struct_ops` or `attach sched_switch`.
        stage: &'static str,
        /// libbpf's error.
        source: libbpf_rs::Error,
        /// The last lines libbpf logged (the verifier log on a load failure).
        log_tail: Vec<String>,
    },
    /// A map update failed.
    #[error("BPF map {map}: {op} failed: {source}")]
    Map {
        /// The map.
        map: &'static str,
        /// What was done.
        op: String,
        /// libbpf's error.
        source: libbpf_rs::Error,
    },
    /// An LC or batch map is full.
    #[error("already {limit} {what}, the most the scheduler holds")]
    TooMany {
        /// `LC processes` or `LC cgroups`.
        what: &'static str,
        /// The limit.
        limit: u32,
    },
    /// 0 is no process.
    #[error("pid 0 is not a process")]
    PidZero,
    /// No such process.
    #[error("no process {pid} (/proc/{pid} does not exist)")]
    NoSuchProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// Moving a thread into or out of the ext class failed.
    #[error("sched_setscheduler({tid}, {policy}) of process {pid}: {source}")]
    SetPolicy {
        /// The process.
        pid: u32,
        /// Its thread.
        tid: u32,
        /// The policy asked for.
        policy: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The kernel unloaded the scheduler (an error in it, its watchdog, a
    /// SysRq): what it said.
    #[error("the kernel unloaded the sched_ext scheduler: {0}")]
    Unloaded(crate::contract::ExitInfo),
    /// Reading /proc, sysfs or a cgroup failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
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
