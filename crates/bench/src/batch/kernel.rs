//! A batch **kernel process**: a child process (the hidden `elfen
//! bench-batch-worker` subcommand, [`super::worker`]) running one of
//! elfen's kernels in one thread per planned lane, so cgroups and
//! scheduling classes apply to it alone and it can be killed by pid.
//!
//! Parent and child share a small memfd region ([`Region`]): the child
//! publishes, per thread, its tid, units done and (Elfen) the runtime's
//! accounting; the parent reads it plus each thread's
//! `/proc/<pid>/task/<tid>/schedstat` at the edges of a measured window.
//! Nothing here needs the child to answer, so a throttled (CFS quota) or
//! frozen child is sampled as precisely as any other.

use super::region::Region;
use super::worker::WORKER_SUBCOMMAND;
use super::{BatchPlan, BatchProgram, BatchRun, BatchSample, ThreadSample};
use crate::error::{BenchError, Result};
use elfen_cmd::child::ChildGuard;
use elfen_cmd::proc::SchedClass;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"ELFBSTAT");
const HEADER: usize = 64;
const SLOT: usize = 128;
/// Most batch threads one process runs.
pub const MAX_THREADS: usize = 64;

/// The region's header.
#[repr(C, align(64))]
pub(super) struct Header {
    pub(super) magic: AtomicU64,
    pub(super) threads: AtomicU32,
    pub(super) go: AtomicU32,
    pub(super) ready: AtomicU32,
    pub(super) failed: AtomicU32,
}

/// One thread's published counters.
#[repr(C, align(64))]
pub(super) struct Slot {
    pub(super) tid: AtomicU32,
    _pad: AtomicU32,
    pub(super) units: AtomicU64,
    pub(super) run_ns: AtomicU64,
    pub(super) nap_ns: AtomicU64,
    pub(super) naps: AtomicU64,
    pub(super) wakes: AtomicU64,
    pub(super) corun_ns: AtomicU64,
    pub(super) slow_checks: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() == HEADER);
const _: () = assert!(std::mem::size_of::<Slot>() <= SLOT);

/// Bytes of the region for `threads` threads.
pub(super) fn region_len(threads: usize) -> usize {
    HEADER + threads * SLOT
}

/// The region's header.
pub(super) fn header(r: &Region) -> &Header {
    // SAFETY: offset 0, atomics only, region at least HEADER bytes.
    unsafe { r.at(0) }
}

/// Thread `i`'s slot.
pub(super) fn slot(r: &Region, i: usize) -> &Slot {
    // SAFETY: slots follow the header, 64-byte aligned, inside region_len.
    unsafe { r.at(HEADER + i * SLOT) }
}

/// The scheduling class as the worker's `--sched` argument.
pub(super) fn sched_arg(s: SchedClass) -> &'static str {
    match s {
        SchedClass::Idle => "idle",
        _ => "other",
    }
}

/// A running kernel process. Killed (by pid) and reaped on drop.
#[derive(Debug)]
pub struct KernelProcess {
    child: ChildGuard,
    pid: u32,
    region: Region,
    threads: usize,
}

impl KernelProcess {
    /// Starts `exe bench-batch-worker …` for `plan` and waits until every
    /// thread has attached and allocated its kernel (they then wait for
    /// [`BatchRun::go`]).
    pub fn spawn(exe: &Path, plan: &BatchPlan, timeout: Duration) -> Result<KernelProcess> {
        let BatchProgram::Kernel(kernel) = plan.program else {
            return Err(BenchError::Batch(format!(
                "{} is not a kernel",
                plan.program
            )));
        };
        let n = plan.threads.len();
        if n == 0 || n > MAX_THREADS {
            return Err(BenchError::Batch(format!(
                "{n} threads planned (1..={MAX_THREADS})"
            )));
        }
        if !exe.is_file() {
            return Err(BenchError::Batch(format!(
                "worker executable {} not found",
                exe.display()
            )));
        }
        let region = Region::create(region_len(n))
            .map_err(|e| BenchError::io("creating the batch stats region", e))?;
        header(&region).threads.store(n as u32, Ordering::Relaxed);
        header(&region).magic.store(MAGIC, Ordering::Release);
        let mut cmd = Command::new(exe);
        cmd.arg(WORKER_SUBCOMMAND)
            .arg("--stats")
            .arg(region.proc_path())
            .arg("--parent")
            .arg(std::process::id().to_string())
            .arg("--kernel")
            .arg(kernel.name())
            .arg("--stream-mib")
            .arg(plan.stream_mib.to_string())
            .arg("--nap")
            .arg(plan.nap.name())
            .arg("--sched")
            .arg(sched_arg(plan.sched));
        if let Some(p) = &plan.page {
            cmd.arg("--page").arg(p);
        }
        for t in &plan.threads {
            cmd.arg("--thread").arg(t.arg());
        }
        // Its own process group: a Ctrl-C at the terminal reaches the
        // harness only, which then kills the child by pid.
        use std::os::unix::process::CommandExt;
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::io(format!("starting {}", exe.display()), e))?;
        let mut me = KernelProcess {
            pid: child.id(),
            child: ChildGuard::new(child),
            region,
            threads: n,
        };
        me.wait_ready(timeout)?;
        Ok(me)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            let h = header(&self.region);
            if h.ready.load(Ordering::Acquire) as usize == self.threads {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait().ok().flatten() {
                let mut msg = String::new();
                if let Some(mut e) = self.child.child_mut().stderr.take() {
                    let _ = e.read_to_string(&mut msg);
                }
                return Err(BenchError::Batch(format!(
                    "exited ({status}) before it was ready: {}",
                    msg.trim()
                )));
            }
            if t0.elapsed() > timeout {
                self.kill();
                return Err(BenchError::Batch(format!(
                    "not ready after {:.1} s",
                    timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kills the child (SIGKILL, by pid) and reaps it. Idempotent.
    pub fn kill(&mut self) {
        self.child.stop();
    }
}

impl BatchRun for KernelProcess {
    fn pids(&self) -> Vec<u32> {
        vec![self.pid]
    }

    fn go(&self) {
        header(&self.region).go.store(1, Ordering::Release);
    }

    fn alive(&mut self) -> bool {
        self.child.running()
    }

    fn sample(&self) -> BatchSample {
        let at_ns = elfen_shm::clock::monotonic_ns();
        let threads = (0..self.threads)
            .map(|i| {
                let s = slot(&self.region, i);
                let tid = s.tid.load(Ordering::Acquire);
                let elfen_cmd::proc::Schedstat {
                    on_cpu_ns, wait_ns, ..
                } = elfen_cmd::proc::thread_schedstat(self.pid, tid).unwrap_or_default();
                ThreadSample {
                    units: s.units.load(Ordering::Relaxed),
                    run_ns: s.run_ns.load(Ordering::Relaxed),
                    nap_ns: s.nap_ns.load(Ordering::Relaxed),
                    naps: s.naps.load(Ordering::Relaxed),
                    wakes: s.wakes.load(Ordering::Relaxed),
                    corun_ns: s.corun_ns.load(Ordering::Relaxed),
                    on_cpu_ns,
                    wait_ns,
                }
            })
            .collect();
        BatchSample { at_ns, threads }
    }
}
