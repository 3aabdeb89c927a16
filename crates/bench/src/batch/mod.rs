//! **Batch work** next to the LC service, behind one interface
//! ([`BatchRun`]): a child process the harness starts for one invocation,
//! holds to a plan ([`BatchPlan`]: which threads, where, at which
//! scheduling class, checking the signal page or not), samples at the
//! edges of a measured window ([`BatchSample`]) and kills by pid.
//!
//! Programs: elfen's batch kernels ([`kernel`]: Loop, Matrix, Flush,
//! Stream, run by the hidden `bench-batch-worker` subcommand, [`worker`]),
//! which publish their work units and can check the signal page; and
//! unmodified programs from Debian packages ([`program`]: xz, stress-ng,
//! 7zz), whose progress is measured from outside (input bytes read, or CPU
//! time from `schedstat`).

pub mod java;
pub mod kernel;
pub mod program;
/// The memfd region a batch child counts into (in `elfen-shm`, shared with
/// `elfen advise`).
pub use elfen_shm::region;
pub mod worker;

pub use kernel::KernelProcess;
pub use program::{ProgramKind, ProgramProcess};
pub use worker::{WORKER_SUBCOMMAND, worker_main};

use crate::error::Result;
use elfen_cmd::proc::SchedClass;
use elfen_kernels::KernelKind;
use elfen_runtime::NapChoice;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A batch program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchProgram {
    /// One of elfen's kernels (can check the signal page).
    Kernel(KernelKind),
    /// An unmodified program (cannot).
    Program(ProgramKind),
}

impl BatchProgram {
    /// Its name in results (`stream`, `matrix`, `xz`, …).
    pub fn name(&self) -> String {
        match self {
            BatchProgram::Kernel(k) => k.name().to_string(),
            BatchProgram::Program(p) => p.name().to_string(),
        }
    }

    /// Whether it checks the signal page (the Elfen configurations need it).
    pub fn checks(&self) -> bool {
        match self {
            BatchProgram::Kernel(_) => true,
            BatchProgram::Program(p) => p.checks(),
        }
    }
}

impl std::fmt::Display for BatchProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Where one batch thread runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadPlan {
    /// Pin to this CPU (`None`: not pinned; Elfen threads pin to their lane).
    pub cpu: Option<u32>,
    /// Attach as an Elfen batch thread to this lane of the page.
    pub lane: Option<u32>,
}

impl ThreadPlan {
    /// As the worker's `--thread` argument.
    pub fn arg(&self) -> String {
        match (self.lane, self.cpu) {
            (Some(l), _) => format!("lane={l}"),
            (None, Some(c)) => format!("cpu={c}"),
            (None, None) => "cpu=any".into(),
        }
    }

    /// Parses a `--thread` argument.
    pub fn parse(s: &str) -> std::result::Result<ThreadPlan, String> {
        match s.split_once('=') {
            Some(("lane", l)) => Ok(ThreadPlan {
                cpu: None,
                lane: Some(l.parse().map_err(|_| format!("bad lane {l:?}"))?),
            }),
            Some(("cpu", "any")) => Ok(ThreadPlan {
                cpu: None,
                lane: None,
            }),
            Some(("cpu", c)) => Ok(ThreadPlan {
                cpu: Some(c.parse().map_err(|_| format!("bad cpu {c:?}"))?),
                lane: None,
            }),
            _ => Err(format!("bad --thread {s:?}: lane=N, cpu=N or cpu=any")),
        }
    }
}

/// What a batch process runs.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchPlan {
    /// The program.
    pub program: BatchProgram,
    /// Stream buffer, MiB.
    pub stream_mib: u64,
    /// One entry per thread.
    pub threads: Vec<ThreadPlan>,
    /// The signal page (Elfen threads).
    pub page: Option<PathBuf>,
    /// The nap backend (Elfen threads).
    pub nap: NapChoice,
    /// The threads' scheduling class.
    pub sched: SchedClass,
}

/// One thread's counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadSample {
    /// Work units done.
    pub units: u64,
    /// Runtime: time in batch code between naps (wall), ns.
    pub run_ns: u64,
    /// Runtime: time napping (wall), ns.
    pub nap_ns: u64,
    /// Runtime: naps.
    pub naps: u64,
    /// Runtime: wakes.
    pub wakes: u64,
    /// Runtime: time co-running with a request (wall), ns.
    pub corun_ns: u64,
    /// schedstat: time on a CPU, ns.
    pub on_cpu_ns: u64,
    /// schedstat: time runnable but waiting for a CPU, ns.
    pub wait_ns: u64,
}

/// All threads at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchSample {
    /// When (monotonic ns).
    pub at_ns: u64,
    /// Per thread.
    pub threads: Vec<ThreadSample>,
}

impl BatchSample {
    /// `self − earlier`, per thread.
    pub fn since(&self, earlier: &BatchSample) -> BatchSample {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        BatchSample {
            at_ns: d(self.at_ns, earlier.at_ns),
            threads: self
                .threads
                .iter()
                .zip(&earlier.threads)
                .map(|(a, b)| ThreadSample {
                    units: d(a.units, b.units),
                    run_ns: d(a.run_ns, b.run_ns),
                    nap_ns: d(a.nap_ns, b.nap_ns),
                    naps: d(a.naps, b.naps),
                    wakes: d(a.wakes, b.wakes),
                    corun_ns: d(a.corun_ns, b.corun_ns),
                    on_cpu_ns: d(a.on_cpu_ns, b.on_cpu_ns),
                    wait_ns: d(a.wait_ns, b.wait_ns),
                })
                .collect(),
        }
    }

    /// Sum over threads.
    pub fn total(&self) -> ThreadSample {
        let mut t = ThreadSample::default();
        for s in &self.threads {
            t.units += s.units;
            t.run_ns += s.run_ns;
            t.nap_ns += s.nap_ns;
            t.naps += s.naps;
            t.wakes += s.wakes;
            t.corun_ns += s.corun_ns;
            t.on_cpu_ns += s.on_cpu_ns;
            t.wait_ns += s.wait_ns;
        }
        t
    }
}

/// Time batch code actually executed in a window, ns, per thread summed:
///
/// - threads that never nap (the baselines): their on-CPU time
///   (schedstat), which excludes time preempted or throttled;
/// - Elfen threads napping off-CPU (`futex`): on-CPU time again;
/// - Elfen threads napping on-CPU (spinning, or hybrid's spin phase): the
///   runtime's run time (wall time between wake and nap), minus the share
///   of the thread's run-queue wait that falls in it (run-queue wait
///   spread over run and nap time in proportion), capped by on-CPU time.
///
/// Returns `(estimate, low, high)`; low and high bound the on-CPU nap case
/// (all or none of the wait inside run time).
pub fn executed_ns(d: &ThreadSample, elfen: bool, nap: NapChoice) -> (f64, f64, f64) {
    let on = d.on_cpu_ns as f64;
    if !elfen || nap == NapChoice::Futex {
        return (on, on, on);
    }
    let run = d.run_ns as f64;
    let wall = (d.run_ns + d.nap_ns) as f64;
    let wait = d.wait_ns as f64;
    let share = if wall > 0.0 { run / wall } else { 0.0 };
    let est = (run - wait * share).clamp(0.0, on);
    let lo = (run - wait).clamp(0.0, on);
    let hi = run.min(on);
    (est, lo, hi)
}

/// A running batch process: started for one invocation, sampled at the
/// window's edges, killed (by pid) and reaped on drop.
pub trait BatchRun {
    /// The processes (all of them, children included).
    fn pids(&self) -> Vec<u32>;
    /// Lets the threads start working.
    fn go(&self);
    /// Whether the process still runs.
    fn alive(&mut self) -> bool;
    /// Every thread's counters now.
    fn sample(&self) -> BatchSample;
    /// Time the daemon's guards around it have occupied their lanes so
    /// far, ns (0 without guards).
    fn guard_occupied_ns(&self) -> u64 {
        0
    }
    /// Time they have held their lanes through the LC's idle gaps so
    /// far, ns (0 without guards).
    fn guard_held_ns(&self) -> u64 {
        0
    }
}

/// Where a batch process starts.
#[derive(Debug, Clone, Copy)]
pub struct Start<'a> {
    /// The executable holding the batch worker (kernels).
    pub worker_exe: &'a Path,
    /// The input file of programs that read one.
    pub input: &'a Path,
    /// The `cgroup.procs` file to start it in, if any.
    pub cgroup_procs: Option<&'a Path>,
}

/// Starts `plan` and waits until every thread is ready: kernels through
/// the worker (moved into the cgroup before they start working), programs
/// directly (in the cgroup from `exec` on).
pub fn spawn(at: Start, plan: &BatchPlan, timeout: Duration) -> Result<Box<dyn BatchRun>> {
    match plan.program {
        BatchProgram::Kernel(_) => {
            let k = KernelProcess::spawn(at.worker_exe, plan, timeout)?;
            if let Some(p) = at.cgroup_procs {
                std::fs::write(p, k.pids()[0].to_string()).map_err(|e| {
                    crate::error::BenchError::io(
                        format!("moving the batch process into {}", p.display()),
                        e,
                    )
                })?;
            }
            Ok(Box::new(k))
        }
        BatchProgram::Program(kind) => Ok(Box::new(ProgramProcess::spawn(
            kind,
            plan,
            at.input,
            at.cgroup_procs,
        )?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_plans_round_trip() {
        for t in [
            ThreadPlan {
                cpu: Some(3),
                lane: None,
            },
            ThreadPlan {
                cpu: None,
                lane: Some(1),
            },
            ThreadPlan {
                cpu: None,
                lane: None,
            },
        ] {
            assert_eq!(ThreadPlan::parse(&t.arg()).unwrap(), t);
        }
        assert!(ThreadPlan::parse("core=1").is_err());
    }

    #[test]
    fn executed_time_by_method() {
        let d = ThreadSample {
            run_ns: 600,
            nap_ns: 400,
            on_cpu_ns: 900,
            wait_ns: 100,
            ..ThreadSample::default()
        };
        assert_eq!(
            executed_ns(&d, false, NapChoice::Spin),
            (900.0, 900.0, 900.0)
        );
        assert_eq!(
            executed_ns(&d, true, NapChoice::Futex),
            (900.0, 900.0, 900.0)
        );
        // spin: run 600 minus 60% of the 100 ns wait
        assert_eq!(
            executed_ns(&d, true, NapChoice::Spin),
            (540.0, 500.0, 600.0)
        );
        let on_capped = ThreadSample {
            on_cpu_ns: 300,
            ..d
        };
        assert_eq!(executed_ns(&on_capped, true, NapChoice::Spin).0, 300.0);
    }

    #[test]
    fn samples_subtract_and_sum() {
        let a = BatchSample {
            at_ns: 10,
            threads: vec![
                ThreadSample {
                    units: 5,
                    on_cpu_ns: 7,
                    ..Default::default()
                };
                2
            ],
        };
        let b = BatchSample {
            at_ns: 30,
            threads: vec![
                ThreadSample {
                    units: 15,
                    on_cpu_ns: 10,
                    ..Default::default()
                };
                2
            ],
        };
        let d = b.since(&a);
        assert_eq!(d.at_ns, 20);
        assert_eq!(d.total().units, 20);
        assert_eq!(d.total().on_cpu_ns, 6);
    }
}
