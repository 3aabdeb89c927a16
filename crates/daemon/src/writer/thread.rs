//! The writer's thread: its set-up (source, lanes, discovery, class and
//! CPUs) and its loop (wait, publish, reconcile, hold).

use super::lane::{Lane, Record, on_event, reconciled, set_busy, slot_is_stale};
use super::spin::{Spin, may_spin};
use super::{Hold, WriterOptions, WriterReport};
use crate::blind::OwnThreads;
use crate::error::DaemonError;
use crate::guard::{LatencySummary, latency_histogram};
use crate::lc::{Discovery, LcTarget, Notice};
use elfen_bpf::{LcEvent, Source};
use elfen_cmd::proc::{SchedClass, set_sched};
use elfen_runtime::LcLane;
use elfen_shm::Page;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Opens the source, attaches the lanes, starts discovery; then sets the
/// thread's class and CPUs (after the source, so a poll fallback's
/// scanner thread does not inherit them).
pub(super) fn setup(
    page: &Arc<Page>,
    lanes: &[(u32, u32)],
    target: LcTarget,
    opts: &WriterOptions,
    notes: &mut Vec<Notice>,
) -> Result<(Source, Vec<Lane>, Discovery), DaemonError> {
    let mut sopts = opts.source.clone();
    let mut watched: Vec<u32> = lanes.iter().map(|&(cpu, _)| cpu).collect();
    watched.extend(&opts.extra_cpus);
    watched.sort_unstable();
    watched.dedup();
    sopts.watched_cpus = Some(watched);
    let mut src = Source::open(&sopts)?;
    // this thread reads the events: its own switches are no transitions
    // (woken on a watched CPU where an LC task runs, it would otherwise
    // turn that task's preemption and return into edges that wake it again);
    // the threads it wakes join it once they are known (`quiet`)
    src.set_quiet_tids(&[elfen_cmd::proc::gettid()])?;
    let mut out = Vec::new();
    for &(cpu, lane) in lanes {
        let lc = LcLane::attach(Arc::clone(page), lane)?;
        let bells = opts
            .bells
            .iter()
            .filter(|(l, _)| *l == lane)
            .map(|(_, b)| Arc::clone(b))
            .collect();
        out.push(Lane {
            cpu,
            lc,
            bells,
            next_id: 1,
            announced: None,
            busy_start_ns: 0,
            idle_since_ns: 0,
        });
    }
    let (disc, n) = Discovery::start(target, opts.discovery, &mut src)?;
    notes.extend(n);
    if let Some(cpus) = &opts.cpus {
        elfen_topo::set_current_affinity(cpus)
            .map_err(|e| DaemonError::thread("lc writer", format!("pinning: {e}")))?;
    }
    if opts.priority > 0 {
        set_sched(0, SchedClass::Fifo(opts.priority)).map_err(|e| {
            DaemonError::os(
                format!("setting the writer thread to SCHED_FIFO {}", opts.priority),
                e,
            )
        })?;
    }
    Ok((src, out, disc))
}

/// The writer's state once its source is open and its lanes attached.
pub(super) struct Running {
    pub(super) src: Source,
    pub(super) lanes: Vec<Lane>,
    pub(super) disc: Discovery,
    pub(super) notes: Vec<Notice>,
    pub(super) opts: WriterOptions,
}

pub(super) fn run(
    r: Running,
    stop: &AtomicBool,
    mut rec: Record<'_>,
    lc_pids: &Mutex<Vec<u32>>,
    quiet: &OnceLock<OwnThreads>,
) -> Result<WriterReport, DaemonError> {
    let Running {
        mut src,
        mut lanes,
        mut disc,
        mut notes,
        opts,
    } = r;
    let slots = src.slots().clone();
    let notify = |n: Notice| match &opts.notices {
        Some(tx) => {
            let _ = tx.send(n);
        }
        None if matches!(n, Notice::Warning(_)) => crate::logging::warn(n),
        None => crate::logging::info(n),
    };
    notes.drain(..).for_each(notify);
    *lc_pids.lock().unwrap_or_else(|p| p.into_inner()) = disc.pids();
    let mut events: Vec<LcEvent> = Vec::with_capacity(64);
    let mut wake = latency_histogram();
    let mut own = crate::rt::DutyBound::new(opts.priority, &opts.bound);
    let mut demoted = false;
    let me = elfen_cmd::proc::gettid();
    let mut quiet_gen = None;
    let result = loop {
        if stop.load(Relaxed) {
            break Ok(());
        }
        if let Some(q) = quiet.get().filter(|q| quiet_gen != Some(q.generation())) {
            quiet_gen = Some(q.generation());
            let mut tids = q.tids();
            tids.push(me);
            if let Err(e) = src.set_quiet_tids(&tids) {
                notify(Notice::Warning(format!(
                    "the daemon's own threads could not all be kept out of the signal: {e}"
                )));
            }
        }
        let now = Instant::now();
        // Whole milliseconds, rounded up: the ring buffer's poll takes
        // milliseconds, and would turn a shorter wait into a busy loop.
        let ms = disc
            .until_next(now)
            .min(opts.max_wait)
            .as_micros()
            .div_ceil(1000);
        let timeout = Duration::from_millis(ms.max(1) as u64);
        if let Err(e) = src.wait_events(timeout, |e| events.push(e)) {
            break Err(DaemonError::from(e));
        }
        let timed_out = events.is_empty();
        let woke_ns = elfen_shm::clock::monotonic_ns();
        rec.holding_cpu = opts
            .hold
            .as_deref()
            .filter(|h| !demoted && may_spin(h, woke_ns))
            .map(|h| h.cpu);
        handle(&mut lanes, &mut events, woke_ns, &mut wake, &rec, &opts);
        let now_ns = elfen_shm::clock::monotonic_ns();
        for l in lanes.iter_mut() {
            let runs_lc = slots.lc_busy(l.cpu)
                || match slots.snapshot(l.cpu) {
                    Ok(s) if disc.runs_lc(&s) => true,
                    // only at a wake-up without events: the /proc reads
                    // stay off the path of every transition
                    Ok(s)
                        if timed_out
                            && slot_is_stale(&s, l.cpu, now_ns)
                            && disc.runnable_on(l.cpu) =>
                    {
                        rec.stats.stale.fetch_add(1, Relaxed);
                        true
                    }
                    _ => false,
                };
            let busy = reconciled(l, runs_lc, now_ns);
            if busy != l.lc.is_busy() {
                rec.stats.reconciled.fetch_add(1, Relaxed);
                set_busy(l, busy, elfen_shm::clock::monotonic_ns(), None, &rec);
            }
        }
        let now = Instant::now();
        if disc.until_next(now).is_zero() {
            disc.tick(&mut src, now, &mut notes);
            if !notes.is_empty() {
                *lc_pids.lock().unwrap_or_else(|p| p.into_inner()) = disc.pids();
                notes.drain(..).for_each(notify);
            }
        }
        demoted = own.step(elfen_shm::clock::monotonic_ns());
        if let Some(h) = opts.hold.as_deref() {
            let now_ns = elfen_shm::clock::monotonic_ns();
            if !demoted && holds(h, &lanes, now_ns) && may_spin(h, now_ns) {
                let hold = Spin {
                    hold: h,
                    stop,
                    disc: &disc,
                };
                if let Err(e) = hold.run(
                    &mut src,
                    &mut lanes,
                    &mut events,
                    &mut wake,
                    &mut rec,
                    &opts,
                ) {
                    break Err(e);
                }
            }
        }
    };
    let dropped = lanes
        .iter()
        .filter_map(|l| slots.snapshot(l.cpu).ok())
        .map(|s| u64::from(s.dropped))
        .sum();
    // Dropping the lanes ends open requests (and wakes futex sleepers).
    for l in lanes.drain(..) {
        let bells = l.bells.clone();
        drop(l);
        bells.iter().for_each(|b| b.ring());
    }
    let stats = rec.stats;
    result.map(|()| WriterReport {
        events: stats.events.load(Relaxed),
        begins: stats.begins.load(Relaxed),
        ends: stats.ends.load(Relaxed),
        reconciled: stats.reconciled.load(Relaxed),
        stale: stats.stale.load(Relaxed),
        dropped,
        rt_demotions: own.demotions,
        wake: LatencySummary::of(&wake),
    })
}

/// Handles the events taken, at `woke_ns`: each request lane's transitions
/// to its LC line; busy edges of any CPU to the per-CPU bells.
pub(super) fn handle(
    lanes: &mut [Lane],
    events: &mut Vec<LcEvent>,
    woke_ns: u64,
    wake: &mut hdrhistogram::Histogram<u64>,
    rec: &Record<'_>,
    opts: &WriterOptions,
) {
    rec.stats.events.fetch_add(events.len() as u64, Relaxed);
    for e in events.drain(..) {
        if e.busy {
            opts.cpu_bells
                .iter()
                .for_each(|b| b.ring_busy_on(e.cpu, e.time_ns));
        }
        if let Some(l) = lanes.iter_mut().find(|l| l.cpu == e.cpu) {
            on_event(l, &e, woke_ns, wake, rec);
        }
    }
}

/// Whether the writer holds its lane now: a hold is set and its request
/// lane is busy, or went idle less than the hold ago.
pub(super) fn holds(h: &Hold, lanes: &[Lane], now_ns: u64) -> bool {
    let hold = h.ns();
    if hold == 0 {
        return false;
    }
    let Some(l) = lanes.iter().find(|l| l.lc.lane() == h.request_lane) else {
        return false;
    };
    l.lc.is_busy() || now_ns.saturating_sub(l.idle_since_ns) < hold
}
