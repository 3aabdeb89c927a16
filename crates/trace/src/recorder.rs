//! A trace in progress: the kernel thread ([`crate::kernel::run`]), the LC
//! line's poller thread, and what joins them into one [`TraceRecord`].

use crate::error::TraceError;
use crate::kernel::{self, EventSink, KernelConfig, KernelOut};
use crate::lcline::LcLineTap;
use crate::record::{
    EndReason, PollerStats, RECORD_SCHEMA, Signal, SignalStatus, Span, SpanSource, TargetInfo,
    ThreadInfo, TraceRecord,
};
use crate::target::{Target, cmdline_of};
use elfen_cmd::proc::SchedClass;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Kernel signals to record (default: all).
    pub signals: Vec<Signal>,
    /// CPUs on which every context switch is recorded (default: all online
    /// CPUs); elsewhere only the targets' own switches.
    pub lanes: Option<Vec<u32>>,
    /// Ring buffer, MiB (a power of two).
    pub ring_mib: u32,
    /// Faults shorter than this are counted, not recorded, ns.
    pub min_fault_ns: u64,
    /// How often the ring buffer is drained, ms.
    pub drain_ms: u64,
    /// The LC line poller: 0 spins, else µs between reads.
    pub poll_us: u64,
    /// The poller's CPU (default: a batch lane, else any CPU but the
    /// request lane's).
    pub poller_cpu: Option<u32>,
    /// The poller's scheduling class (default `SCHED_IDLE`: it takes only
    /// time nobody else wants).
    pub poller_sched: SchedClass,
    /// The request lane's CPU when the page does not say.
    pub request_cpu: Option<u32>,
    /// The batch lanes' CPUs when the page does not say.
    pub batch_cpus: Option<Vec<u32>>,
    /// The LC thread when the page does not name one.
    pub lc_tid: Option<u32>,
    /// Keep every event (false: only the sink sees them).
    pub keep_events: bool,
    /// Kernel hooks to treat as missing (exercises the skip path).
    pub pretend_missing: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            signals: Signal::ALL.to_vec(),
            lanes: None,
            ring_mib: 16,
            min_fault_ns: 0,
            drain_ms: 5,
            poll_us: 0,
            poller_cpu: None,
            poller_sched: SchedClass::Idle,
            request_cpu: None,
            batch_cpus: None,
            lc_tid: None,
            keep_events: true,
            pretend_missing: Vec::new(),
        }
    }
}

/// The machine's online CPUs.
pub fn online_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| elfen_topo::parse_cpu_list(s.trim()).ok())
        .unwrap_or_else(|| vec![0])
}

/// The CPUs thread `tid` of `pid` may run on (`Cpus_allowed_list`).
pub fn allowed_cpus(pid: u32, tid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|v| elfen_topo::parse_cpu_list(v.trim()).ok())
        })
        .unwrap_or_default()
}

/// The kernel release.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// A trace being recorded.
pub struct Recorder {
    stop: Arc<AtomicBool>,
    kernel: Option<JoinHandle<KernelOut>>,
    poller: Option<JoinHandle<(Vec<Span>, PollerStats)>>,
    add: mpsc::Sender<u32>,
    signals: Vec<SignalStatus>,
    target: Target,
    info: TargetInfo,
    span_source: SpanSource,
    lanes: Vec<u32>,
    cpus: u32,
    start_ns: u64,
    notes: Vec<String>,
    threads_at_start: BTreeMap<u32, ThreadInfo>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("target", &self.target)
            .field("signals", &self.signals)
            .finish()
    }
}

/// The names of every thread of `pids` now.
fn threads_now(pids: &[u32]) -> BTreeMap<u32, ThreadInfo> {
    let mut out = BTreeMap::new();
    for &p in pids {
        for tid in elfen_cmd::proc::thread_ids(p) {
            if let Ok(c) = std::fs::read_to_string(format!("/proc/{p}/task/{tid}/comm")) {
                out.insert(
                    tid,
                    ThreadInfo {
                        tgid: p,
                        comm: c.trim().to_string(),
                    },
                );
            }
        }
    }
    out
}

impl Recorder {
    /// Starts recording `target`, with request spans from `tap` when given.
    /// Returns once the programs are attached (their fate in
    /// [`Recorder::signals`]) or with the reason BPF cannot be used.
    pub fn start(
        target: Target,
        tap: Option<LcLineTap>,
        opts: &Options,
        sink: Option<EventSink>,
    ) -> Result<Recorder, TraceError> {
        if !opts.ring_mib.is_power_of_two() || opts.ring_mib == 0 || opts.ring_mib > 1024 {
            return Err(TraceError::Usage(format!(
                "--ring-mib must be a power of two from 1 to 1024, not {}",
                opts.ring_mib
            )));
        }
        let online = online_cpus();
        let cpus = elfen_bpf::proc::possible_cpus()?;
        let lanes = opts.lanes.clone().unwrap_or_else(|| online.clone());
        if let Some(&c) = lanes.iter().find(|&&c| c >= cpus) {
            return Err(TraceError::Usage(format!(
                "cpu {c} is out of range (this machine has {cpus} possible CPUs)"
            )));
        }
        let mut notes = Vec::new();
        // who is the LC thread, where does it run, what are its partners
        let (page_cpu, page_partners) = tap.as_ref().map(|t| t.cpus()).unwrap_or_default();
        let lc_tid = opts
            .lc_tid
            .or_else(|| tap.as_ref().map(|t| t.lc_tid()).filter(|&t| t != 0));
        let pinned = lc_tid.and_then(|t| {
            let allowed = allowed_cpus(target.tgids[0], t);
            (allowed.len() == 1).then(|| allowed[0])
        });
        let request_cpu = opts.request_cpu.or(page_cpu).or(pinned);
        let batch_cpus = opts.batch_cpus.clone().unwrap_or_else(|| {
            if !page_partners.is_empty() {
                page_partners.clone()
            } else {
                lanes
                    .iter()
                    .copied()
                    .filter(|&c| Some(c) != request_cpu)
                    .collect()
            }
        });
        if request_cpu.is_none() {
            notes.push(
                "the request lane's CPU is not known (no page controller line, LC thread not pinned): \
                 every lane's other work counts as a batch co-run"
                    .into(),
            );
        }
        let tgids = target.tgids.clone();
        let info = TargetInfo {
            spec: target.spec.to_string(),
            tgids: tgids.clone(),
            cmdlines: tgids.iter().map(|&p| cmdline_of(p)).collect(),
            lc_tid,
            request_cpu,
            batch_cpus: batch_cpus.clone(),
            tracer_pid: std::process::id(),
        };
        let threads_at_start = threads_now(&tgids);
        // before the programs attach: every event is after it
        let start_ns = elfen_shm::clock::monotonic_ns();
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let (add_tx, add_rx) = mpsc::channel();
        let cfg = KernelConfig {
            tgids,
            signals: opts.signals.clone(),
            lanes: lanes.clone(),
            ring_bytes: opts.ring_mib * 1024 * 1024,
            min_fault_ns: opts.min_fault_ns,
            drain_interval: Duration::from_millis(opts.drain_ms.max(1)),
            keep_events: opts.keep_events,
            pretend_missing: opts.pretend_missing.clone(),
        };
        let kstop = Arc::clone(&stop);
        let poller_cpu_for_kernel = opts.poller_cpu.or_else(|| batch_cpus.first().copied());
        let kernel = std::thread::Builder::new()
            .name("elfen-trace-bpf".into())
            .spawn(move || {
                // the drain thread keeps off the request lane too
                let _pin = poller_cpu_for_kernel.and_then(|c| elfen_topo::PinGuard::new(c).ok());
                kernel::run(cfg, ready_tx, add_rx, kstop, sink)
            })
            .map_err(|_| TraceError::Thread("kernel"))?;
        let signals = match ready_rx.recv() {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let _ = kernel.join();
                return Err(e);
            }
            Err(_) => {
                let _ = kernel.join();
                return Err(TraceError::Thread("kernel"));
            }
        };
        let (span_source, poller) = match tap {
            None => (SpanSource::None, None),
            Some(tap) => {
                let source = SpanSource::Page {
                    page: tap.page.path().display().to_string(),
                    lane: tap.lane,
                };
                let cpu = opts.poller_cpu.or_else(|| {
                    batch_cpus
                        .first()
                        .copied()
                        .or_else(|| online.iter().copied().find(|&c| Some(c) != request_cpu))
                });
                let pstop = Arc::clone(&stop);
                let (poll_us, sched) = (opts.poll_us, opts.poller_sched);
                let h = std::thread::Builder::new()
                    .name("elfen-trace-poll".into())
                    .spawn(move || {
                        let _pin = cpu.and_then(|c| elfen_topo::PinGuard::new(c).ok());
                        if sched != SchedClass::Other {
                            let _ = elfen_cmd::proc::set_sched(0, sched);
                        }
                        tap.poll(&pstop, poll_us, cpu)
                    })
                    .map_err(|_| TraceError::Thread("poller"))?;
                (source, Some(h))
            }
        };
        Ok(Recorder {
            stop,
            kernel: Some(kernel),
            poller,
            add: add_tx,
            signals,
            target,
            info,
            span_source,
            lanes,
            cpus,
            start_ns,
            notes,
            threads_at_start,
        })
    }

    /// Each signal: recorded, or skipped and why.
    pub fn signals(&self) -> &[SignalStatus] {
        &self.signals
    }

    /// What is traced.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Picks up processes that joined the target's cgroup; returns them.
    pub fn refresh(&mut self) -> Vec<u32> {
        let new = self.target.refresh();
        for &p in &new {
            let _ = self.add.send(p);
            self.info.tgids.push(p);
            self.info.cmdlines.push(cmdline_of(p));
        }
        new
    }

    /// Stops recording and returns the record.
    pub fn finish(mut self, end: EndReason, command: String) -> Result<TraceRecord, TraceError> {
        let end_ns = elfen_shm::clock::monotonic_ns();
        let mut threads = threads_now(&self.info.tgids);
        self.stop.store(true, Ordering::Relaxed);
        let (spans, poller) = match self.poller.take() {
            Some(h) => {
                let (s, p) = h.join().map_err(|_| TraceError::Thread("poller"))?;
                (s, Some(p))
            }
            None => (Vec::new(), None),
        };
        let k = self
            .kernel
            .take()
            .expect("joined once")
            .join()
            .map_err(|_| TraceError::Thread("kernel"))?;
        // names: /proc at the start, the events, /proc at the end (latest wins)
        let mut all = std::mem::take(&mut self.threads_at_start);
        all.extend(k.threads);
        all.append(&mut threads);
        if k.counts.lost > 0 {
            self.notes.push(format!(
                "{} kernel records were lost (the ring buffer was full): a larger --ring-mib or fewer --lanes",
                k.counts.lost
            ));
        }
        if let Some(p) = &poller {
            if p.missed > 0 {
                self.notes.push(format!(
                    "{} requests began and ended between two reads of the LC line (no span)",
                    p.missed
                ));
            }
        }
        for s in &self.signals {
            if let Some(why) = &s.skipped {
                if why != "not asked for" {
                    self.notes
                        .push(format!("signal {} not recorded: {why}", s.signal.name()));
                }
            }
        }
        if let EndReason::TargetExited { .. } = end {
            self.notes.push(
                "the target exited while traced: the trace ends there and was written".into(),
            );
        }
        Ok(TraceRecord {
            schema: RECORD_SCHEMA.into(),
            created_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            command,
            kernel: kernel_release(),
            target: self.info.clone(),
            cpus: self.cpus,
            lanes: self.lanes.clone(),
            start_ns: self.start_ns,
            end_ns,
            end,
            signals: self.signals.clone(),
            counts: k.counts,
            threads: all,
            events: k.events,
            span_source: self.span_source.clone(),
            spans,
            poller,
            notes: self.notes.clone(),
        })
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.poller.take() {
            let _ = h.join();
        }
        if let Some(h) = self.kernel.take() {
            let _ = h.join();
        }
    }
}

impl Recorder {
    /// Records until `duration` has passed since the start, `stop` is set,
    /// or every traced process has exited (checked every 20 ms; a cgroup's
    /// new members are picked up as they come), then finishes.
    pub fn run_until(
        mut self,
        duration: Duration,
        stop: &AtomicBool,
        command: String,
    ) -> Result<TraceRecord, TraceError> {
        let t0 = std::time::Instant::now();
        let end = loop {
            if stop.load(Ordering::Relaxed) {
                break EndReason::Interrupted;
            }
            if t0.elapsed() >= duration {
                break EndReason::Duration;
            }
            if !self.target().alive() {
                break EndReason::TargetExited {
                    at_ns: elfen_shm::clock::monotonic_ns(),
                };
            }
            self.refresh();
            std::thread::sleep(
                Duration::from_millis(20).min(duration.saturating_sub(t0.elapsed())),
            );
        };
        self.finish(end, command)
    }
}

/// Starts a [`Recorder`] and [`Recorder::run_until`] it.
pub fn record_for(
    target: Target,
    tap: Option<LcLineTap>,
    opts: &Options,
    duration: Duration,
    stop: &AtomicBool,
    command: String,
) -> Result<TraceRecord, TraceError> {
    Recorder::start(target, tap, opts, None)?.run_until(duration, stop, command)
}
