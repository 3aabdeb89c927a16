//! The LC service under study: found by pid, command name or cgroup —
//! the daemon's `[lc]` selectors and its discovery code
//! (`elfen_daemon::lc::Discovery`) — and read without being touched:
//!
//! - the **kernel signal** (`elfen_bpf::Source`, BPF on `sched_switch` or
//!   its /proc poll fallback, said so): per CPU, the LC's busy time and
//!   busy periods, kept by the kernel in the per-CPU slots (no transition
//!   events are asked for: nothing wakes per busy edge);
//! - its threads' `schedstat`: on-CPU time, run-queue wait, runs.
//!
//! [`Counters`] is one reading; two readings make a [`Window`].

use crate::record::Window;
use anyhow::{Context, bail};
use elfen_bpf::{Options, SlotReader, Source};
use elfen_cmd::proc::Schedstat;
use elfen_daemon::LcTarget;
use elfen_daemon::lc::{Discovery, DiscoveryOptions, LcOwner};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

/// The LC service, watched.
#[derive(Debug)]
pub struct Lc {
    target: LcTarget,
    src: Source,
    slots: SlotReader,
    disc: Discovery,
}

/// Checks that `target` names something running now: a live pid, an
/// existing cgroup directory with processes, a command name some process
/// goes by. The error says which and why; nothing is changed.
pub fn check_target(target: &LcTarget) -> anyhow::Result<()> {
    match target {
        LcTarget::Pid(p) => {
            if !Path::new(&format!("/proc/{p}")).exists() {
                bail!("the LC service is not running: no process {p} (/proc/{p} does not exist)");
            }
        }
        LcTarget::Groups(t) => {
            let d = target.dir().unwrap_or(Path::new(""));
            if !d.is_dir() {
                bail!(
                    "the LC service is not running: no cgroup {} (no such directory)",
                    d.display()
                );
            }
            if t.pids_now().is_empty() {
                bail!(
                    "the LC service is not running: cgroup {} and the groups below hold no process",
                    d.display()
                );
            }
        }
        LcTarget::Comm(c) => {
            if elfen_daemon::lc::find_by_name(c).is_empty() {
                bail!("the LC service is not running: no process goes by the name {c:?}");
            }
        }
    }
    Ok(())
}

impl Lc {
    /// Finds the LC and opens the kernel signal for it. Fails, naming why,
    /// when it is not running.
    pub fn open(target: LcTarget, owner: LcOwner) -> anyhow::Result<Lc> {
        check_target(&target)?;
        let opts = Options {
            // no transition events: the slots keep busy time and periods
            watched_cpus: Some(Vec::new()),
            announce_wakeups: false,
            ..Options::default()
        };
        let mut src = Source::open(&opts).context("opening the kernel signal")?;
        let dopts = DiscoveryOptions {
            owner,
            ..DiscoveryOptions::default()
        };
        let (disc, _notes) = Discovery::start(target.clone(), dopts, &mut src)
            .with_context(|| format!("watching the LC service ({target})"))?;
        if disc.is_lost() {
            bail!("the LC service ({target}) is not running");
        }
        let slots = src.slots().clone();
        Ok(Lc {
            target,
            src,
            slots,
            disc,
        })
    }

    /// The selector it was found by.
    pub fn target(&self) -> &LcTarget {
        &self.target
    }

    /// The kernel signal's source, in words.
    pub fn signal(&self) -> String {
        self.src.describe()
    }

    /// Whether the kernel signal is the BPF program.
    pub fn is_bpf(&self) -> bool {
        self.src.is_bpf()
    }

    /// Its processes now.
    pub fn pids(&self) -> Vec<u32> {
        self.disc.pids()
    }

    /// Looks for exits and new processes (what discovery has due).
    pub fn tick(&mut self) {
        let mut notes = Vec::new();
        self.disc.tick(&mut self.src, Instant::now(), &mut notes);
    }

    /// Whether no LC process runs any more.
    pub fn is_lost(&self) -> bool {
        self.disc.is_lost()
    }

    /// A reading of every counter, now.
    pub fn read(&self) -> Counters {
        let mut threads = HashMap::new();
        for pid in self.disc.pids() {
            for tid in elfen_cmd::proc::thread_ids(pid) {
                if let Some(s) = elfen_cmd::proc::thread_schedstat(pid, tid) {
                    threads.insert(tid, s);
                }
            }
        }
        let now = elfen_shm::clock::monotonic_ns();
        let n = self.slots.cpus();
        let (mut busy, mut periods) = (Vec::with_capacity(n as usize), Vec::new());
        for cpu in 0..n {
            // a torn read (the kernel wrote meanwhile) is tried again
            let s = (0..8).find_map(|_| self.slots.snapshot(cpu).ok());
            busy.push(s.map_or(0, |s| s.lc_busy_ns_at(now)));
            periods.push(s.map_or(0, |s| s.lc_periods));
        }
        Counters {
            at_ns: now,
            threads,
            busy_ns: busy,
            periods,
            machine: elfen_cmd::proc::MachineTicks::now(),
            advise_ticks: elfen_cmd::proc::process_ticks(std::process::id()),
        }
    }
}

/// One reading of the LC's counters.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// When (`CLOCK_MONOTONIC`), ns.
    pub at_ns: u64,
    /// `schedstat` per thread id.
    pub threads: HashMap<u32, Schedstat>,
    /// The kernel signal's busy time per CPU, ns.
    pub busy_ns: Vec<u64>,
    /// Busy periods begun per CPU.
    pub periods: Vec<u64>,
    /// The machine's CPU time (`/proc/stat`).
    pub machine: elfen_cmd::proc::MachineTicks,
    /// This process's CPU time, clock ticks.
    pub advise_ticks: u64,
}

impl Counters {
    /// The window from `earlier` to this reading (threads that started in
    /// between count from zero; threads that ended are lost to it).
    pub fn since(&self, earlier: &Counters) -> Window {
        let (mut cpu, mut wait, mut runs) = (0u64, 0u64, 0u64);
        for (tid, s) in &self.threads {
            let e = earlier.threads.get(tid).copied().unwrap_or_default();
            cpu += s.on_cpu_ns.saturating_sub(e.on_cpu_ns);
            wait += s.wait_ns.saturating_sub(e.wait_ns);
            runs += s.runs.saturating_sub(e.runs);
        }
        let diff = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .enumerate()
                .map(|(i, x)| x.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .collect()
        };
        let m = self.machine.since(&earlier.machine);
        let tick_ns = |t: u64| (t as f64 * 1e9 / elfen_cmd::proc::ticks_per_s()) as u64;
        Window {
            machine_busy_ns: tick_ns(m.process_busy),
            steal_ns: tick_ns(m.steal),
            advise_cpu_ns: tick_ns(self.advise_ticks.saturating_sub(earlier.advise_ticks)),
            wall_ns: self.at_ns.saturating_sub(earlier.at_ns),
            lc_cpu_ns: cpu,
            lc_wait_ns: wait,
            lc_runs: runs,
            signal_busy_ns: diff(&self.busy_ns, &earlier.busy_ns),
            signal_periods: diff(&self.periods, &earlier.periods),
            ..Window::default()
        }
    }
}

/// The CPU the LC ran on most in `w`: the kernel signal's busiest CPU, or
/// else where its busiest thread last ran (`/proc/<pid>/task/<tid>/stat`).
pub fn request_cpu(w: &Window, pids: &[u32], c: &Counters) -> Option<u32> {
    if let Some(cpu) = crate::study::busiest_cpu(w) {
        return Some(cpu);
    }
    let busiest = c.threads.iter().max_by_key(|(_, s)| s.on_cpu_ns)?.0;
    pids.iter()
        .find_map(|&p| elfen_bpf::proc::task_state(p, *busiest))
        .map(|(_, cpu)| cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_the_difference_of_two_readings() {
        let s = |on, wait, runs| Schedstat {
            on_cpu_ns: on,
            wait_ns: wait,
            runs,
        };
        let a = Counters {
            at_ns: 1_000,
            threads: HashMap::from([(7, s(100, 10, 5)), (8, s(50, 0, 1))]),
            busy_ns: vec![100, 0],
            periods: vec![5, 0],
            ..Counters::default()
        };
        let b = Counters {
            at_ns: 2_000,
            // 8 ended, 9 started
            threads: HashMap::from([(7, s(400, 30, 9)), (9, s(20, 2, 2))]),
            busy_ns: vec![350, 20],
            periods: vec![9, 1],
            ..Counters::default()
        };
        let w = b.since(&a);
        assert_eq!(w.wall_ns, 1_000);
        assert_eq!((w.lc_cpu_ns, w.lc_wait_ns, w.lc_runs), (320, 22, 6));
        assert_eq!(w.signal_busy_ns, vec![250, 20]);
        assert_eq!(w.signal_periods, vec![4, 1]);
    }

    #[test]
    fn targets_that_do_not_run_are_named() {
        let e = check_target(&LcTarget::Pid(u32::MAX - 1))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not running") && e.contains("does not exist"),
            "{e}"
        );
        let e = check_target(&LcTarget::Comm("no-such-service-x".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no-such-service-x"), "{e}");
        let e = check_target(&LcTarget::cgroup_dir("/nonexistent/cg".into()).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/cg"), "{e}");
        check_target(&LcTarget::Pid(std::process::id())).unwrap();
    }
}
