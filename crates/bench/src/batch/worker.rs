//! The batch **worker**: the child process behind the hidden `elfen
//! bench-batch-worker` subcommand. One thread per planned lane runs a
//! kernel at the planned scheduling class, pinned or attached to its lane
//! as an Elfen batch thread that checks at every work unit, and publishes
//! its counters in the region the harness shares with it.

use super::ThreadPlan;
use super::kernel::{MAGIC, MAX_THREADS, Slot, header, region_len, slot};
use super::region::Region;
use elfen_cmd::proc::SchedClass;
use elfen_kernels::{Check, Kernel, KernelConfig, KernelKind, NoCheck};
use elfen_runtime::{BatchOptions, BatchThread, NapChoice};
use elfen_shm::{Access, Clock, Page};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The hidden subcommand that runs a batch process.
pub const WORKER_SUBCOMMAND: &str = "bench-batch-worker";

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
    nap: NapChoice,
    sched: SchedClass,
    page: Option<PathBuf>,
    threads: Vec<ThreadPlan>,
}

fn parse_worker_args(args: &[String]) -> std::result::Result<WorkerArgs, String> {
    let mut w = WorkerArgs {
        stats: PathBuf::new(),
        parent: 0,
        kernel: KernelKind::Loop,
        stream_mib: 64,
        nap: NapChoice::Spin,
        sched: SchedClass::Other,
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
            "--sched" => {
                w.sched = match v()?.as_str() {
                    "idle" => SchedClass::Idle,
                    "other" => SchedClass::Other,
                    s => return Err(format!("bad --sched {s:?}: idle or other")),
                }
            }
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
    elfen_cmd::proc::kill_me_with_parent();
    let w = match parse_worker_args(args) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{WORKER_SUBCOMMAND}: {e}");
            return 2;
        }
    };
    if w.parent != 0 && elfen_cmd::proc::parent_pid() != w.parent {
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
        let (kind, nap, sched) = (w.kernel, w.nap, w.sched);
        let h = std::thread::Builder::new()
            .name(format!("elfen-batch-{i}"))
            .spawn(move || {
                if let Err(e) =
                    batch_thread(i, plan, kind, config, (nap, sched), page, &region, clock)
                {
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
    (nap, sched): (NapChoice, SchedClass),
    page: Option<Arc<Page>>,
    region: &Region,
    clock: Clock,
) -> std::result::Result<(), String> {
    let bt = match plan.lane {
        Some(lane) => {
            let page = page.ok_or("no page")?;
            Some(
                BatchThread::attach(page, lane, BatchOptions::default().pin(true).nap(nap))
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
    // the planned class from here on: set up (pinned, attached, buffers
    // filled) at the harness's own class, so a SCHED_IDLE batch on a lane
    // other work keeps busy still starts; it runs nothing before `go`
    elfen_cmd::proc::set_sched(0, sched).map_err(|e| format!("{}: {e}", sched.name()))?;
    let s = slot(region, i);
    s.tid.store(elfen_cmd::proc::gettid(), Ordering::Release);
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
    fn worker_arguments_are_checked() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e =
            parse_worker_args(&args(&["--kernel", "stream", "--thread", "lane=1"])).unwrap_err();
        assert!(e.contains("--page"), "{e}");
        let e = parse_worker_args(&args(&["--sched", "rt", "--thread", "cpu=0"])).unwrap_err();
        assert!(e.contains("rt"), "{e}");
        let w = parse_worker_args(&args(&[
            "--sched", "idle", "--nap", "futex", "--thread", "cpu=0",
        ]))
        .unwrap();
        assert_eq!((w.sched, w.nap), (SchedClass::Idle, NapChoice::Futex));
    }
}
