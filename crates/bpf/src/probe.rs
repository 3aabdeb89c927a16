//! Can BPF load here, and if not, why: privileges, kernel BTF, and an
//! actual open/load/attach of the program (whose verifier log is kept).

use crate::error::BpfError;
use std::path::Path;
use std::sync::Mutex;

/// Where the kernel exposes its own BTF (needed by CO-RE and `tp_btf`).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The process's effective user id and capability mask (`/proc/self/status`).
fn creds() -> (u32, u64) {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    (euid, elfen_cmd::proc::effective_capabilities())
}

/// Fails unless the process holds CAP_SYS_ADMIN or CAP_BPF + CAP_PERFMON
/// (what loading a tracing program and creating its maps needs).
pub fn check_privileges() -> Result<(), BpfError> {
    let (euid, cap) = creds();
    let has = |c: u32| cap & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let mut missing = Vec::new();
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    Err(BpfError::NotPrivileged {
        detail: format!(
            "euid {euid}, effective capabilities {cap:#x} lack CAP_SYS_ADMIN and {}",
            missing.join(" + ")
        ),
    })
}

/// Fails unless the kernel's BTF exists at [`VMLINUX_BTF`].
pub fn check_btf() -> Result<(), BpfError> {
    if Path::new(VMLINUX_BTF).exists() {
        Ok(())
    } else {
        Err(BpfError::NoBtf {
            path: VMLINUX_BTF.into(),
        })
    }
}

/// Lines libbpf printed while a capture was active (the last [`LOG_KEEP`]).
static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Most log lines kept (the tail of a verifier log is what names the problem).
pub const LOG_KEEP: usize = 40;

fn capture(_level: libbpf_rs::PrintLevel, msg: String) {
    let mut log = LOG.lock().unwrap_or_else(|p| p.into_inner());
    for line in msg.lines() {
        log.push(line.to_string());
    }
    let n = log.len();
    if n > 4 * LOG_KEEP {
        log.drain(..n - LOG_KEEP);
    }
}

/// While alive, libbpf's messages (warnings and the verifier log) go to a
/// buffer instead of stderr; the previous print callback is restored on drop.
/// libbpf's print callback is process-wide.
pub struct LogCapture {
    previous: Option<(libbpf_rs::PrintLevel, libbpf_rs::PrintCallback)>,
}

impl LogCapture {
    /// Starts capturing (until the guard is dropped).
    pub fn start() -> LogCapture {
        LOG.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let previous = libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Warn, capture)));
        LogCapture { previous }
    }

    /// The last [`LOG_KEEP`] lines captured so far.
    pub fn tail(&self) -> Vec<String> {
        let log = LOG.lock().unwrap_or_else(|p| p.into_inner());
        log[log.len().saturating_sub(LOG_KEEP)..].to_vec()
    }
}

impl Drop for LogCapture {
    fn drop(&mut self) {
        libbpf_rs::set_print(self.previous.take());
    }
}

/// What [`probe`] found.
#[derive(Debug)]
pub struct Probe {
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// Privilege check: `Ok` or the reason.
    pub privileges: Result<(), BpfError>,
    /// Kernel BTF check: `Ok` or the reason.
    pub btf: Result<(), BpfError>,
    /// The program opened, loaded (verifier), attached and its slots mapped;
    /// or the first failure. Not tried when a check above failed.
    pub load: Option<Result<String, BpfError>>,
}

impl Probe {
    /// Whether the BPF source works here.
    pub fn loadable(&self) -> bool {
        matches!(self.load, Some(Ok(_)))
    }

    /// The first reason BPF cannot be used, if any.
    pub fn reason(&self) -> Option<&BpfError> {
        if let Err(e) = &self.privileges {
            return Some(e);
        }
        if let Err(e) = &self.btf {
            return Some(e);
        }
        match &self.load {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }

    /// A multi-line human-readable report.
    pub fn render(&self) -> String {
        let line = |name: &str, r: &Result<(), BpfError>| match r {
            Ok(()) => format!("  {name:<11} ok\n"),
            Err(e) => format!("  {name:<11} NO: {e}\n"),
        };
        let mut s = format!("kernel {}\n", self.kernel);
        s += &line("privileges", &self.privileges);
        s += &line("kernel BTF", &self.btf);
        s += &match &self.load {
            None => "  load        not tried\n".to_string(),
            Some(Ok(d)) => format!("  load        ok: {d}\n"),
            Some(Err(e)) => format!("  load        NO: {e}\n"),
        };
        s += if self.loadable() {
            "BPF signal source: available\n"
        } else {
            "BPF signal source: UNAVAILABLE (the poll fallback is used)\n"
        };
        s
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Checks whether the BPF signal source can be used here and names why
/// not: missing privileges, missing kernel BTF, or a failure to open, load
/// (with the tail of the verifier log) or attach. When the checks pass it
/// really loads and attaches the program, then detaches it again.
pub fn probe() -> Probe {
    let privileges = check_privileges();
    let btf = check_btf();
    let load = if privileges.is_ok() && btf.is_ok() {
        Some(crate::sched::SchedSource::open(&crate::Options::default()).map(|s| s.describe()))
    } else {
        None
    };
    Probe {
        kernel: kernel_release(),
        privileges,
        btf,
        load,
    }
}
