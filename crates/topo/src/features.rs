//! What the machine offers elfen: SMT, a usable TSC, user-space wait instructions
//! (for the `umwait` / `mwaitx` nap backends), hardware performance counters.
//!
//! Detection never fails: anything that cannot be determined reports `false`.

use std::path::Path;

use crate::topology::{SYSFS_CPU_ROOT, Topology};

/// Hardware and OS features that change how elfen can run on this machine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Features {
    /// Some core has more than one online lane, so request and batch lanes can be SMT
    /// siblings (from sysfs topology).
    pub smt: bool,
    /// The TSC ticks at a constant rate in every P-/C-state, so `rdtsc` is a clock
    /// (CPUID 0x8000_0007 EDX bit 8, or `/proc/cpuinfo` flags `constant_tsc` and
    /// `nonstop_tsc`).
    pub invariant_tsc: bool,
    /// The CPU implements WAITPKG (`umonitor`/`umwait`/`tpause`; CPUID leaf 7
    /// sub-leaf 0 ECX bit 5).
    pub waitpkg: bool,
    /// `waitpkg` and the kernel lets user space use it
    /// (`/sys/devices/system/cpu/umwait_control/` exists): the `umwait` nap backend
    /// can keep a batch lane without handing it to the OS.
    pub umwait_allowed: bool,
    /// AMD `monitorx`/`mwaitx`, usable from user space (CPUID 0x8000_0001 ECX bit 29):
    /// the `mwaitx` nap backend.
    pub mwaitx: bool,
    /// `perf_event_open` of `PERF_COUNT_HW_INSTRUCTIONS` on this thread succeeded, so
    /// hardware counters (instructions, cycles) can be read.
    pub perf_hw_counters: bool,
    /// Why `perf_hw_counters` is false: the errno text from `perf_event_open`.
    pub perf_hw_counters_reason: Option<String>,
    /// Running under a hypervisor (CPUID 1 ECX bit 31): vCPUs may be descheduled by
    /// the host, which shows up as latency spikes no guest-side tuning removes.
    pub hypervisor: bool,
}

impl Features {
    /// Detects the features of the running machine.
    pub fn detect() -> Features {
        Features::detect_at(Path::new(SYSFS_CPU_ROOT))
    }

    /// Like [`Features::detect`], but reads topology and `umwait_control` under the
    /// given sysfs CPU root. CPUID and `perf_event_open` always describe the real CPU.
    pub fn detect_at(cpu_root: &Path) -> Features {
        let cpuid = Cpuid::read();
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let (perf_hw_counters, perf_hw_counters_reason) = match perf::probe_hw_instructions() {
            Ok(()) => (true, None),
            Err(reason) => (false, Some(reason)),
        };
        let waitpkg = cpuid.waitpkg();
        Features {
            smt: Topology::from_sysfs(cpu_root).is_ok_and(|t| t.has_smt()),
            invariant_tsc: cpuid.invariant_tsc() || cpuinfo_has_invariant_tsc(&cpuinfo),
            waitpkg,
            umwait_allowed: waitpkg && cpu_root.join("umwait_control").is_dir(),
            mwaitx: cpuid.mwaitx(),
            perf_hw_counters,
            perf_hw_counters_reason,
            hypervisor: cpuid.hypervisor(),
        }
    }

    /// One line per feature for humans: `name: yes|no — what it means for elfen`.
    pub fn describe(&self) -> Vec<String> {
        let yn = |b: bool| if b { "yes" } else { "no" };
        let mut perf = format!(
            "perf_hw_counters: {} — {}",
            yn(self.perf_hw_counters),
            if self.perf_hw_counters {
                "hardware counters readable; profiles can count instructions and cycles"
            } else {
                "no hardware counters; profile with time only"
            }
        );
        if let Some(reason) = &self.perf_hw_counters_reason {
            perf.push_str(&format!(" (perf_event_open: {reason})"));
        }
        vec![
            format!(
                "smt: {} — {}",
                yn(self.smt),
                if self.smt {
                    "batch lanes are SMT siblings of their request lane"
                } else {
                    "no SMT siblings; lanes are paired across cores and interfere via cache and memory"
                }
            ),
            format!(
                "invariant_tsc: {} — {}",
                yn(self.invariant_tsc),
                if self.invariant_tsc {
                    "rdtsc is a constant-rate clock for timestamps in the signal page"
                } else {
                    "TSC rate may vary; use clock_gettime for timestamps"
                }
            ),
            format!(
                "waitpkg: {} — CPU {} umwait/tpause",
                yn(self.waitpkg),
                if self.waitpkg { "has" } else { "lacks" }
            ),
            format!(
                "umwait_allowed: {} — {}",
                yn(self.umwait_allowed),
                if self.umwait_allowed {
                    "umwait nap backend available (keeps the lane at no cost)"
                } else {
                    "umwait nap backend unavailable"
                }
            ),
            format!(
                "mwaitx: {} — {}",
                yn(self.mwaitx),
                if self.mwaitx {
                    "AMD mwaitx nap backend available"
                } else {
                    "mwaitx nap backend unavailable"
                }
            ),
            perf,
            format!(
                "hypervisor: {} — {}",
                yn(self.hypervisor),
                if self.hypervisor {
                    "virtual machine; the host may pause vCPUs (expect tail-latency noise)"
                } else {
                    "bare metal"
                }
            ),
        ]
    }
}

/// Whether `/proc/cpuinfo` text lists both `constant_tsc` and `nonstop_tsc` (the
/// kernel's spelling of an invariant TSC) in its first `flags` line.
fn cpuinfo_has_invariant_tsc(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "flags").then_some(value)
        })
        .is_some_and(|flags| {
            let has = |f: &str| flags.split_whitespace().any(|x| x == f);
            has("constant_tsc") && has("nonstop_tsc")
        })
}

/// The CPUID registers elfen looks at; all zero where a leaf is unsupported or the
/// architecture has no CPUID.
#[derive(Debug, Default, Clone, Copy)]
struct Cpuid {
    /// Leaf 1 ECX.
    l1_ecx: u32,
    /// Leaf 7 sub-leaf 0 ECX.
    l7_ecx: u32,
    /// Leaf 0x8000_0001 ECX.
    ext1_ecx: u32,
    /// Leaf 0x8000_0007 EDX.
    ext7_edx: u32,
}

impl Cpuid {
    #[cfg(target_arch = "x86_64")]
    fn read() -> Cpuid {
        #[allow(unused_unsafe)] // `__cpuid_count` is only `unsafe` on older toolchains
        // SAFETY: CPUID exists on every x86_64 CPU; leaves are only queried when the
        // maximum-leaf queries say they exist.
        let q = |leaf: u32, sub: u32| unsafe { core::arch::x86_64::__cpuid_count(leaf, sub) };
        let max_basic = q(0, 0).eax;
        let max_ext = q(0x8000_0000, 0).eax;
        Cpuid {
            l1_ecx: if max_basic >= 1 { q(1, 0).ecx } else { 0 },
            l7_ecx: if max_basic >= 7 { q(7, 0).ecx } else { 0 },
            ext1_ecx: if max_ext >= 0x8000_0001 {
                q(0x8000_0001, 0).ecx
            } else {
                0
            },
            ext7_edx: if max_ext >= 0x8000_0007 {
                q(0x8000_0007, 0).edx
            } else {
                0
            },
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn read() -> Cpuid {
        Cpuid::default()
    }

    fn hypervisor(&self) -> bool {
        self.l1_ecx & (1 << 31) != 0
    }
    fn waitpkg(&self) -> bool {
        self.l7_ecx & (1 << 5) != 0
    }
    fn mwaitx(&self) -> bool {
        self.ext1_ecx & (1 << 29) != 0
    }
    fn invariant_tsc(&self) -> bool {
        self.ext7_edx & (1 << 8) != 0
    }
}

/// The `perf_event_open` probe behind [`Features::perf_hw_counters`].
mod perf {
    use crate::perf::{DISABLED, EXCLUDE_HV, EXCLUDE_KERNEL, HW_INSTRUCTIONS, open_hw};

    /// Opens (disabled, user-space only) and closes an instructions counter on the
    /// calling thread. `Err` carries the errno text.
    pub(super) fn probe_hw_instructions() -> Result<(), String> {
        match open_hw(
            HW_INSTRUCTIONS,
            0,
            -1,
            None,
            0,
            DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV,
        ) {
            Ok(_fd) => Ok(()), // closed on drop
            Err(e) => {
                let hint = match e.raw_os_error() {
                    Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV) => {
                        " (no hardware PMU exposed)"
                    }
                    Some(libc::EACCES | libc::EPERM) => {
                        " (see /proc/sys/kernel/perf_event_paranoid)"
                    }
                    _ => "",
                };
                Err(format!("{e}{hint}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_cpuid_bits() {
        let none = Cpuid::default();
        assert!(!none.hypervisor() && !none.waitpkg() && !none.mwaitx() && !none.invariant_tsc());
        let all = Cpuid {
            l1_ecx: 1 << 31,
            l7_ecx: 1 << 5,
            ext1_ecx: 1 << 29,
            ext7_edx: 1 << 8,
        };
        assert!(all.hypervisor() && all.waitpkg() && all.mwaitx() && all.invariant_tsc());
    }

    #[test]
    fn reads_invariant_tsc_from_cpuinfo_flags() {
        let both = "processor\t: 0\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n";
        assert!(cpuinfo_has_invariant_tsc(both));
        assert!(!cpuinfo_has_invariant_tsc("flags\t: constant_tsc\n"));
        assert!(!cpuinfo_has_invariant_tsc(
            "flags\t: nonstop_tsc_x constant_tsc\n"
        ));
        assert!(!cpuinfo_has_invariant_tsc(""));
    }

    #[test]
    fn detection_is_self_consistent() {
        let f = Features::detect();
        assert!(!f.umwait_allowed || f.waitpkg);
        assert_eq!(f.perf_hw_counters, f.perf_hw_counters_reason.is_none());
        assert_eq!(f.describe().len(), 7);
    }
}
