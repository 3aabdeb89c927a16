//! The **batch process**: a child process (the hidden `elfen
//! bench-batch-worker` subcommand) running one batch kernel in one thread
//! per planned lane, so cgroups and scheduling classes apply to it alone and
//! it can be killed by pid.
//!
//! Every batch thread, in every configuration, runs at `SCHED_IDLE`: the
//! LC worker and the harness's own threads (load generator, dispatcher)
//! always preempt it, so the harness's share of the batch lane is the same
//! in every configuration. In the Elfen configurations each thread attaches
//! to its batch lane as an `elfen_runtime::BatchThread` and checks at every
//! work unit.
//!
//! Parent and child share a small memfd region ([`crate::sys::Region`]):
//! the child publishes, per thread, its tid, units done and (Elfen) the
//! runtime's accounting; the parent reads it plus each thread's
//! `/proc/<pid>/task/<tid>/schedstat` at the edges of a measured window.
//! Nothing here needs the child to answer, so a throttled (CFS quota)
//! child is sampled as precisely as any other.

use crate::config::NapKind;
use crate::error::{BenchError, Result};
use crate::sys::{self, Region};
use elfen_kernels::{Check, Kernel, KernelConfig, KernelKind, NoCheck};
use elfen_runtime::{BatchOptions, BatchThread, NapChoice};
use elfen_shm::{Access, Clock, Page};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The hidden subcommand that runs a batch process.
pub const WORKER_SUBCOMMAND: &str = "bench-batch-worker";

const MAGIC: u64 = u64::from_le_bytes(*b"ELFBSTAT");
const HEADER: usize = 64;
const SLOT: usize = 128;
/// Most batch threads one process runs.
pub const MAX_THREADS: usize = 64;

#[repr(C, align(64))]
struct Header {
    magic: AtomicU64,
    threads: AtomicU32,
    go: AtomicU32,
    ready: AtomicU32,
    failed: AtomicU32,
}

/// One thread's published counters.
#[repr(C, align(64))]
struct Slot {
    tid: AtomicU32,
    _pad: AtomicU32,
    units: AtomicU64,
    run_ns: AtomicU64,
    nap_ns: AtomicU64,
    naps: AtomicU64,
    wakes: AtomicU64,
    corun_ns: AtomicU64,
    slow_checks: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() == HEADER);
const _: () = assert!(std::mem::size_of::<Slot>() <= SLOT);

fn region_len(threads: usize) -> usize {
    HEADER + threads * SLOT
}

fn header(r: &Region) -> &Header {
    // SAFETY: offset 0, atomics only, region at least HEADER bytes.
    unsafe { r.at(0) }
}

fn slot(r: &Region, i: usize) -> &Slot {
    // SAFETY: slots follow the header, 64-byte aligned, inside region_len.
    unsafe { r.at(HEADER + i * SLOT) }
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
    fn arg(&self) -> String {
        match (self.lane, self.cpu) {
            (Some(l), _) => format!("lane={l}"),
            (None, Some(c)) => format!("cpu={c}"),
            (None, None) => "cpu=any".into(),
        }
    }

    fn parse(s: &str) -> std::result::Result<ThreadPlan, String> {
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
    /// The kernel.
    pub kernel: KernelKind,
    /// Stream buffer, MiB.
    pub stream_mib: u64,
    /// One entry per thread.
    pub threads: Vec<ThreadPlan>,
    /// The signal page (Elfen threads).
    pub page: Option<PathBuf>,
    /// The nap backend (Elfen threads).
    pub nap: NapKind,
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
/// - unmanaged threads never nap: their on-CPU time (schedstat), which
///   excludes time preempted or throttled;
/// - Elfen threads napping in `futex` are off-CPU while napping: on-CPU time
///   again;
/// - Elfen threads napping by spinning are on-CPU while napping, so the
///   runtime's run time (wall time between wake and nap) is used, minus the
///   share of the thread's run-queue wait that falls in it (run-queue wait
///   spread over run and nap time in proportion), capped by on-CPU time.
///
/// Returns `(estimate, low, high)`; low and high bound the spin case (all
/// or none of the wait inside run time).
pub fn executed_ns(d: &ThreadSample, elfen: bool, nap: NapKind) -> (f64, f64, f64) {
    let on = d.on_cpu_ns as f64;
    if !elfen || nap == NapKind::Futex {
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

/// A running batch process. Killed (by pid) and reaped on drop.
#[derive(Debug)]
pub struct BatchProcess {
    child: Option<Child>,
    pid: u32,
    region: Region,
    threads: usize,
}

impl BatchProcess {
    /// Starts `exe WORKER_SUBCOMMAND …` for `plan` and waits until every
    /// thread has attached and allocated its kernel (they then wait for
    /// [`BatchProcess::go`]).
    pub fn spawn(exe: &Path, plan: &BatchPlan, timeout: Duration) -> Result<BatchProcess> {
        let n = plan.threads.len();
        if n == 0 || n > MAX_THREADS {
            return Err(BenchError::Batch(format!(
                "{n} threads planned (1..={MAX_THREADS})"
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
            .arg(plan.kernel.name())
            .arg("--stream-mib")
            .arg(plan.stream_mib.to_string())
            .arg("--nap")
            .arg(plan.nap.name());
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
        let mut me = BatchProcess {
            pid: child.id(),
            child: Some(child),
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
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let mut msg = String::new();
                if let Some(mut e) = self.child.as_mut().and_then(|c| c.stderr.take()) {
                    let _ = e.read_to_string(&mut msg);
                }
                self.child = None;
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

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the threads start working.
    pub fn go(&self) {
        header(&self.region).go.store(1, Ordering::Release);
    }

    /// Whether the child is still running.
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Every thread's counters now.
    pub fn sample(&self) -> BatchSample {
        let at_ns = crate::loadgen::mono_ns();
        let threads = (0..self.threads)
            .map(|i| {
                let s = slot(&self.region, i);
                let tid = s.tid.load(Ordering::Acquire);
                let (on_cpu_ns, wait_ns) = sys::thread_schedstat(self.pid, tid).unwrap_or((0, 0));
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

    /// Kills the child (SIGKILL, by pid) and reaps it. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            sys::kill_pid(self.pid);
            let _ = c.wait();
        }
    }
}

impl Drop for BatchProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------- the child

/// The check every unit of a batch thread makes: the Elfen check (if any)
/// plus publishing progress to the parent about every 10 µs (one `rdtsc`
/// per 256 units; no allocation, no syscall, no failure).
struct Meter<'a, C> {
    inner: C,
    slot: &'a Slot,
    clock: Clock,
    every_ticks: u64,
    next_ticks: u64,
    units: u64,
}

/// What the meter can ask of the inner check.
trait Inner: Check {
    fn publish(&self, _slot: &Slot) {}
}

impl Inner for NoCheck {}

struct Elfen(BatchThread);

impl Check for Elfen {
    #[inline(always)]
    fn check(&mut self) {
        self.0.check();
    }
}

impl Inner for Elfen {
    fn publish(&self, slot: &Slot) {
        let s = self.0.stats();
        slot.run_ns.store(s.run_ns, Ordering::Relaxed);
        slot.nap_ns.store(s.nap_ns, Ordering::Relaxed);
        slot.naps.store(s.naps, Ordering::Relaxed);
        slot.wakes.store(s.wakes, Ordering::Relaxed);
        slot.corun_ns.store(s.corun_ns, Ordering::Relaxed);
        slot.slow_checks.store(s.slow_checks, Ordering::Relaxed);
    }
}

impl<C: Inner> Check for Meter<'_, C> {
    #[inline(always)]
    fn check(&mut self) {
        self.inner.check();
        self.units += 1;
        if self.units & 255 == 0 {
            self.maybe_publish();
        }
    }
}

impl<C: Inner> Meter<'_, C> {
    #[inline(never)]
    fn maybe_publish(&mut self) {
        let now = self.clock.now();
        if now >= self.next_ticks {
            self.next_ticks = now + self.every_ticks;
            self.slot.units.store(self.units, Ordering::Relaxed);
            self.inner.publish(self.slot);
        }
    }
}

#[derive(Debug)]
struct WorkerArgs {
    stats: PathBuf,
    parent: u32,
    kernel: KernelKind,
    stream_mib: u64,
    nap: NapKind,
    page: Option<PathBuf>,
    threads: Vec<ThreadPlan>,
}

fn parse_worker_args(args: &[String]) -> std::result::Result<WorkerArgs, String> {
    let mut w = WorkerArgs {
        stats: PathBuf::new(),
        parent: 0,
        kernel: KernelKind::Loop,
        stream_mib: 64,
        nap: NapKind::Spin,
        page: None,
        threads: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let mut v = || it.next().cloned().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--stats" => w.stats = PathBuf::from(v()?),
            "--parent" => w.parent = v()?.parse().map_err(|_| "bad --parent")?,
            "--kernel" => w.kernel = v()?.parse().map_err(|e| format!("{e}"))?,
            "--stream-mib" => w.stream_mib = v()?.parse().map_err(|_| "bad --stream-mib")?,
            "--nap" => w.nap = v()?.parse().map_err(|e| format!("{e}"))?,
            "--page" => w.page = Some(PathBuf::from(v()?)),
            "--thread" => w.threads.push(ThreadPlan::parse(&v()?)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if w.threads.is_empty() || w.threads.len() > MAX_THREADS {
        return Err(format!("1..={MAX_THREADS} --thread needed"));
    }
    if w.threads.iter().any(|t| t.lane.is_some()) && w.page.is_none() {
        return Err("lane=N threads need --page".into());
    }
    Ok(w)
}

/// The batch process's `main`: runs until killed. Returns only on a setup
/// error (after printing it to stderr), with the exit code to use.
pub fn worker_main(args: &[String]) -> i32 {
    sys::kill_me_with_parent();
    let w = match parse_worker_args(args) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{WORKER_SUBCOMMAND}: {e}");
            return 2;
        }
    };
    if w.parent != 0 && sys::parent_pid() != w.parent {
        // the parent died before PDEATHSIG was armed
        return 3;
    }
    let region = match Region::open(&w.stats, region_len(w.threads.len())) {
        Ok(r) if header(&r).magic.load(Ordering::Acquire) == MAGIC => Arc::new(r),
        Ok(_) => {
            eprintln!(
                "{WORKER_SUBCOMMAND}: {} is not a stats region",
                w.stats.display()
            );
            return 2;
        }
        Err(e) => {
            eprintln!("{WORKER_SUBCOMMAND}: {}: {e}", w.stats.display());
            return 2;
        }
    };
    let page = match &w.page {
        Some(p) => match Page::attach(p, Access::Batch) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                eprintln!("{WORKER_SUBCOMMAND}: {e}");
                return 2;
            }
        },
        None => None,
    };
    let clock = Clock::detect();
    let config = KernelConfig {
        stream_bytes: (w.stream_mib as usize) << 20,
        ..KernelConfig::default()
    };
    let mut handles = Vec::new();
    for (i, plan) in w.threads.iter().copied().enumerate() {
        let region = region.clone();
        let page = page.clone();
        let (kind, nap) = (w.kernel, w.nap);
        let h = std::thread::Builder::new()
            .name(format!("elfen-batch-{i}"))
            .spawn(move || {
                if let Err(e) = batch_thread(i, plan, kind, config, nap, page, &region, clock) {
                    eprintln!("{WORKER_SUBCOMMAND}: thread {i}: {e}");
                    header(&region).failed.fetch_add(1, Ordering::AcqRel);
                    std::process::exit(2);
                }
            });
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                eprintln!("{WORKER_SUBCOMMAND}: spawning a thread: {e}");
                return 2;
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    0
}

#[allow(clippy::too_many_arguments)]
fn batch_thread(
    i: usize,
    plan: ThreadPlan,
    kind: KernelKind,
    config: KernelConfig,
    nap: NapKind,
    page: Option<Arc<Page>>,
    region: &Region,
    clock: Clock,
) -> std::result::Result<(), String> {
    sys::set_sched_idle().map_err(|e| format!("SCHED_IDLE: {e}"))?;
    let bt = match plan.lane {
        Some(lane) => {
            let page = page.ok_or("no page")?;
            let choice = match nap {
                NapKind::Spin => NapChoice::Spin,
                NapKind::Futex => NapChoice::Futex,
                NapKind::Hybrid => NapChoice::Hybrid,
            };
            Some(
                BatchThread::attach(page, lane, BatchOptions::default().pin(true).nap(choice))
                    .map_err(|e| e.to_string())?,
            )
        }
        None => {
            if let Some(cpu) = plan.cpu {
                elfen_topo::pin_current_thread(cpu).map_err(|e| e.to_string())?;
            }
            None
        }
    };
    let mut kernel = Kernel::with_config(kind, config).map_err(|e| e.to_string())?;
    let s = slot(region, i);
    s.tid.store(sys::gettid(), Ordering::Release);
    let h = header(region);
    h.ready.fetch_add(1, Ordering::AcqRel);
    while h.go.load(Ordering::Acquire) == 0 {
        std::thread::sleep(Duration::from_micros(500));
    }
    let every_ticks = clock.ns_to_ticks(10_000).max(1);
    match bt {
        Some(bt) => run_forever(
            &mut kernel,
            Meter {
                inner: Elfen(bt),
                slot: s,
                clock,
                every_ticks,
                next_ticks: 0,
                units: 0,
            },
        ),
        None => run_forever(
            &mut kernel,
            Meter {
                inner: NoCheck,
                slot: s,
                clock,
                every_ticks,
                next_ticks: 0,
                units: 0,
            },
        ),
    }
}

fn run_forever<C: Inner>(kernel: &mut Kernel, mut meter: Meter<'_, C>) -> ! {
    loop {
        kernel.run_units(4096, &mut meter);
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
        let args: Vec<String> = ["--kernel", "stream", "--thread", "lane=1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(parse_worker_args(&args).unwrap_err().contains("--page"));
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
        assert_eq!(executed_ns(&d, false, NapKind::Spin), (900.0, 900.0, 900.0));
        assert_eq!(executed_ns(&d, true, NapKind::Futex), (900.0, 900.0, 900.0));
        // spin: run 600 minus 60% of the 100 ns wait
        assert_eq!(executed_ns(&d, true, NapKind::Spin), (540.0, 500.0, 600.0));
        let on_capped = ThreadSample {
            on_cpu_ns: 300,
            ..d
        };
        assert_eq!(executed_ns(&on_capped, true, NapKind::Spin).0, 300.0);
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
