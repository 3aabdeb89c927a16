//! What this machine offers the profiler and the knobs: root, SMT,
//! hardware counters (elfen-topo's detection), and resctrl — cache
//! allocation (CAT), memory bandwidth allocation (MBA) and monitoring
//! (MBM) — from the CPU's flags and the resctrl file system. Detection
//! never fails: what cannot be found is "not offered", with what was
//! looked at.

use crate::record::{Availability, Offered};
use std::path::Path;

/// Where the resctrl file system is mounted by convention.
pub const RESCTRL_ROOT: &str = "/sys/fs/resctrl";

/// The `flags` of the first CPU in `/proc/cpuinfo` text.
fn cpu_flags(cpuinfo: &str) -> Vec<&str> {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "flags").then_some(v)
        })
        .map(|v| v.split_whitespace().collect())
        .unwrap_or_default()
}

/// Whether a `resctrl` file system is mounted (`/proc/mounts` text).
fn resctrl_mounted(mounts: &str) -> Option<&str> {
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"resctrl")).then(|| f[1])
    })
}

/// resctrl's offers from the CPU flags and the mounts (pure, for tests):
/// (CAT, MBA, MBM).
pub fn resctrl_from(
    cpuinfo: &str,
    mounts: &str,
    info_dir: impl Fn(&str) -> bool,
) -> (Availability, Availability, Availability) {
    let flags = cpu_flags(cpuinfo);
    let has = |f: &str| flags.contains(&f);
    let mount = resctrl_mounted(mounts);
    let one = |what: &str, flag: &str, info: &str| {
        if !has(flag) {
            return Availability {
                offered: false,
                detail: format!(
                    "not offered here: the CPU does not report {what} (no `{flag}` flag)"
                ),
            };
        }
        match mount {
            None => Availability {
                offered: false,
                detail: format!(
                    "the CPU reports {what} (`{flag}`), but no resctrl file system is mounted \
                     (mount -t resctrl resctrl {RESCTRL_ROOT})"
                ),
            },
            Some(m) if info_dir(info) => Availability {
                offered: true,
                detail: format!("{what}: resctrl at {m}, info/{info}"),
            },
            Some(m) => Availability {
                offered: false,
                detail: format!("resctrl is mounted at {m} but offers no info/{info}"),
            },
        }
    };
    (
        one("cache allocation (CAT)", "cat_l3", "L3"),
        one("memory bandwidth allocation (MBA)", "mba", "MB"),
        one(
            "memory bandwidth monitoring (MBM)",
            "cqm_mbm_total",
            "L3_MON",
        ),
    )
}

/// Detects what the running machine offers.
pub fn detect(system: &elfen_topo::SystemInfo) -> Offered {
    let f = &system.features;
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let (cat, mba, mbm) = resctrl_from(&cpuinfo, &mounts, |d| {
        Path::new(RESCTRL_ROOT).join("info").join(d).is_dir()
    });
    Offered {
        root: elfen_cmd::proc::is_root(),
        smt: Availability {
            offered: f.smt,
            detail: if f.smt {
                "SMT: batch lanes are siblings of their request lane".into()
            } else {
                "no SMT: lanes are paired across cores; they share the cache and memory only".into()
            },
        },
        counters: Availability {
            offered: f.perf_hw_counters,
            detail: match (&f.perf_hw_counters, &f.perf_hw_counters_reason) {
                (true, _) => "hardware counters readable (perf_event_open)".into(),
                (false, Some(r)) => format!("not offered here: perf_event_open: {r}"),
                (false, None) => "not offered here: no hardware counters".into(),
            },
        },
        cat,
        mba,
        mbm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resctrl_needs_the_cpu_flag_and_the_file_system() {
        let none = "processor\t: 0\nflags\t\t: fpu sse2 avx2\n";
        let (cat, mba, mbm) = resctrl_from(none, "", |_| true);
        assert!(!cat.offered && cat.detail.contains("not offered here"));
        assert!(!mba.offered && !mbm.offered);
        let rdt = "flags\t\t: fpu rdt_a cat_l3 mba cqm_mbm_total\n";
        let (cat, _, _) = resctrl_from(rdt, "proc /proc proc rw 0 0\n", |_| true);
        assert!(
            !cat.offered && cat.detail.contains("mount -t resctrl"),
            "{}",
            cat.detail
        );
        let mounts = "resctrl /sys/fs/resctrl resctrl rw 0 0\n";
        let (cat, mba, mbm) = resctrl_from(rdt, mounts, |d| d != "MB");
        assert!(cat.offered && mbm.offered, "{cat:?} {mbm:?}");
        assert!(!mba.offered && mba.detail.contains("info/MB"), "{mba:?}");
    }
}
