//! Errors of the signal sources.

use std::path::PathBuf;

/// Why a signal source could not be opened or a call failed.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The process may not load BPF programs.
    #[error(
        "not privileged to load BPF: {detail} (run as root, or grant CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN)"
    )]
    NotPrivileged {
        /// What the process has (euid and effective capabilities).
        detail: String,
    },
    /// The kernel exposes no BTF, which CO-RE and `tp_btf` programs need.
    #[error(
        "{path} is missing: the kernel was built without BTF (CONFIG_DEBUG_INFO_BTF), which the CO-RE tp_btf program needs"
    )]
    NoBtf {
        /// The BTF file looked for.
        path: PathBuf,
    },
    /// libbpf failed to open, load (verifier) or attach the program.
    #[error("BPF {stage} failed: {source}{}", log_suffix(.log_tail))]
    Load {
        /// `open`, `load` or `attach`.
        stage: &'static str,
        /// libbpf's error.
        source: libbpf_rs::Error,
        /// The last lines libbpf logged (the verifier log on a load failure).
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
    /// Mapping the per-CPU slots into memory failed.
    #[error("mmap of the cpu_slots map failed: {0}")]
    Mmap(#[source] std::io::Error),
    /// 0 is no process id.
    #[error("pid 0 cannot be watched (it is the idle task, not a process)")]
    PidZero,
    /// No such process.
    #[error("no process {pid} (/proc/{pid} does not exist)")]
    NoSuchProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// The id names a thread, not a process: watch its tgid instead.
    #[error("{pid} is a thread of process {tgid}, not a process: watch {tgid}")]
    NotAProcess {
        /// The id asked for.
        pid: u32,
        /// The process it belongs to.
        tgid: u32,
    },
    /// A CPU outside the machine's possible CPUs.
    #[error("cpu {cpu} is out of range (this machine has {count} possible CPUs)")]
    CpuOutOfRange {
        /// The CPU asked for.
        cpu: u32,
        /// Possible CPUs.
        count: u32,
    },
    /// 0 is no cgroup id.
    #[error("cgroup id 0 cannot be watched")]
    CgroupZero,
    /// A cgroup directory could not be read.
    #[error("{path}: not a readable cgroup v2 directory: {source}")]
    Cgroup {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A watch map (or the quiet-thread map) is full.
    #[error("already watching {limit} {what}, the most this build allows")]
    TooMany {
        /// `processes`, `cgroups` or `quiet threads`.
        what: &'static str,
        /// The limit.
        limit: u32,
    },
    /// The poll fallback cannot do this.
    #[error("the poll fallback cannot {0}")]
    Unsupported(&'static str),
    /// Reading /proc or sysfs failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A slot kept changing while being read.
    #[error("cpu {cpu}: the slot kept changing while being read")]
    Torn {
        /// The CPU.
        cpu: u32,
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
