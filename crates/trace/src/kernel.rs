//! The kernel side of a trace: which signals this kernel offers (the BTF
//! of each tracepoint, the symbols and architecture they need), loading the
//! BPF object with the others switched off, attaching program by program
//! (a failure skips that signal and names it, the rest record), and
//! draining the ring buffer on a timer.
//!
//! Everything BPF lives on one thread ([`run`]): the skeleton, its links
//! and the ring buffer are created, used and dropped there, so nothing
//! outlives the trace and nothing is pinned.

use crate::contract::{self, KINDS, ON};
use crate::error::TraceError;
use crate::record::{Event, EventCounts, Hook, Signal, SignalStatus, ThreadInfo};
use crate::skel::{TraceSkel, TraceSkelBuilder};
use elfen_bpf::LogCapture;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, RingBufferBuilder};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Duration;

/// A callback that sees every event as it is drained (live consumers such
/// as [`crate::pause::PauseWatch`]).
pub type EventSink = Box<dyn FnMut(&Event) + Send>;

/// How the kernel side records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelConfig {
    /// The processes traced.
    pub tgids: Vec<u32>,
    /// The signals asked for.
    pub signals: Vec<Signal>,
    /// CPUs on which every switch is recorded.
    pub lanes: Vec<u32>,
    /// Ring buffer size, bytes (a power of two ≥ a page).
    pub ring_bytes: u32,
    /// Faults shorter than this are counted, not recorded.
    pub min_fault_ns: u64,
    /// How often the ring buffer is drained.
    pub drain_interval: Duration,
    /// Keep the events (false: only the sink sees them).
    pub keep_events: bool,
    /// Hooks to treat as missing from this kernel (to exercise the skip
    /// path; empty in normal use).
    pub pretend_missing: Vec<String>,
}

/// What the kernel side recorded.
#[derive(Debug, Default)]
pub struct KernelOut {
    /// Events, in time order.
    pub events: Vec<Event>,
    /// Threads named by the events.
    pub threads: BTreeMap<u32, ThreadInfo>,
    /// Records emitted and lost.
    pub counts: EventCounts,
}

/// The running kernel's BTF, asked whether a tracepoint exists.
pub struct KernelBtf {
    ptr: *mut libbpf_rs::libbpf_sys::btf,
}

impl KernelBtf {
    /// Loads the running kernel's BTF.
    pub fn load() -> Result<KernelBtf, TraceError> {
        elfen_bpf::check_btf()?;
        // SAFETY: plain libbpf call; a null or error pointer is checked.
        let ptr = unsafe { libbpf_rs::libbpf_sys::btf__load_vmlinux_btf() };
        if ptr.is_null() || (ptr as isize) < 0 && (ptr as isize) > -4096 {
            return Err(TraceError::Bpf(elfen_bpf::BpfError::NoBtf {
                path: elfen_bpf::VMLINUX_BTF.into(),
            }));
        }
        Ok(KernelBtf { ptr })
    }

    /// Whether the kernel has the hook: a tracepoint's `btf_trace_*`
    /// typedef in its BTF, a symbol in `/proc/kallsyms`, the architecture.
    /// Software perf events are checked when opened.
    pub fn has(&self, hook: Hook) -> bool {
        match hook {
            Hook::Tracepoint(n) => {
                let Ok(c) = CString::new(format!("btf_trace_{n}")) else {
                    return false;
                };
                // SAFETY: a valid BTF object and a NUL-terminated name.
                unsafe {
                    libbpf_rs::libbpf_sys::btf__find_by_name_kind(
                        self.ptr,
                        c.as_ptr(),
                        libbpf_rs::libbpf_sys::BTF_KIND_TYPEDEF,
                    ) >= 0
                }
            }
            Hook::Symbol(n) => kallsyms_address(n).is_some(),
            Hook::Arch(a) => std::env::consts::ARCH == a,
            Hook::Perf(_) => true,
        }
    }
}

impl Drop for KernelBtf {
    fn drop(&mut self) {
        // SAFETY: loaded by btf__load_vmlinux_btf, freed once.
        unsafe { libbpf_rs::libbpf_sys::btf__free(self.ptr) };
    }
}

/// The address of kernel symbol `name` in `/proc/kallsyms` (None when
/// absent or hidden: zeros for an unprivileged reader).
pub fn kallsyms_address(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let addr = f.next()?;
        let _kind = f.next()?;
        (f.next()? == name)
            .then(|| u64::from_str_radix(addr, 16).ok())
            .flatten()
            .filter(|&a| a != 0)
    })
}

/// Each asked-for signal's fate before loading: skipped where a hook is
/// missing (from `btf`, or named in `pretend_missing`) or a signal it
/// needs is skipped.
pub fn plan_signals(
    asked: &[Signal],
    has: impl Fn(Hook) -> bool,
    pretend_missing: &[String],
) -> Vec<SignalStatus> {
    let mut out: Vec<SignalStatus> = Vec::new();
    for s in Signal::ALL {
        let needs = match s {
            Signal::HugeFaults => Some(Signal::Faults),
            Signal::DelayedAck => Some(Signal::TcpHeld),
            _ => None,
        }
        .filter(|n| out.iter().any(|x| x.signal == *n && x.skipped.is_some()));
        let skipped = if !asked.contains(&s) {
            Some("not asked for".to_string())
        } else if let Some(h) = s
            .hooks()
            .iter()
            .find(|h| !has(**h) || pretend_missing.iter().any(|m| m == h.name()))
        {
            Some(match h {
                Hook::Arch(a) => format!("needs the {a} architecture (system call numbers)"),
                _ => format!("this kernel has no {h}"),
            })
        } else {
            needs.map(|n| format!("needs the {} signal", n.name()))
        };
        out.push(SignalStatus { signal: s, skipped });
    }
    out
}

fn on(statuses: &[SignalStatus], s: Signal) -> bool {
    statuses
        .iter()
        .any(|x| x.signal == s && x.skipped.is_none())
}

fn load_err(
    stage: impl Into<String>,
    log: &LogCapture,
) -> impl FnOnce(libbpf_rs::Error) -> TraceError {
    let log_tail = log.tail();
    let stage = stage.into();
    move |source| TraceError::Load {
        stage,
        source,
        log_tail,
    }
}

fn map_err(map: &'static str, op: String) -> impl FnOnce(libbpf_rs::Error) -> TraceError {
    move |source| TraceError::Map { map, op, source }
}

/// Opens the object, switches off the programs of skipped signals, sizes
/// the maps and loads it (the verifier runs here).
fn open_and_load<'o>(
    storage: &'o mut MaybeUninit<OpenObject>,
    statuses: &[SignalStatus],
    cpus: u32,
    ring_bytes: u32,
) -> Result<TraceSkel<'o>, TraceError> {
    let log = LogCapture::start();
    let mut open = TraceSkelBuilder::default()
        .open(storage)
        .map_err(|e| load_err("open", &log)(e))?;
    let p = &mut open.progs;
    p.et_sched_switch.set_autoload(on(statuses, Signal::Sched));
    p.et_sched_waking
        .set_autoload(on(statuses, Signal::Wakeups));
    let faults = on(statuses, Signal::Faults);
    p.et_fault_begin.set_autoload(faults);
    p.et_fault_end_min.set_autoload(faults);
    p.et_fault_end_maj.set_autoload(faults);
    p.et_page_alloc
        .set_autoload(on(statuses, Signal::HugeFaults));
    let tcp = on(statuses, Signal::TcpHeld);
    p.et_sys_enter.set_autoload(tcp);
    p.et_sys_exit.set_autoload(tcp);
    p.et_tcp_probe.set_autoload(tcp);
    p.et_timer_start
        .set_autoload(on(statuses, Signal::DelayedAck));
    p.et_exit.set_autoload(on(statuses, Signal::Exit));
    open.maps
        .lanes
        .set_max_entries(cpus)
        .map_err(|e| load_err("open", &log)(e))?;
    open.maps
        .events
        .set_max_entries(ring_bytes)
        .map_err(|e| load_err("open", &log)(e))?;
    open.load().map_err(|e| load_err("load", &log)(e))
}

/// A program and what it attaches to.
enum Attach<'a> {
    /// Its own section (a tracepoint).
    Auto(&'a str, &'a libbpf_rs::ProgramMut<'a>),
    /// A software perf event on every CPU.
    Perf(&'a str, u64, &'a libbpf_rs::ProgramMut<'a>),
}

/// Attaches `prog` to software event `config` on each of `cpus`.
fn attach_perf(
    prog: &libbpf_rs::ProgramMut<'_>,
    config: u64,
    cpus: &[u32],
) -> Result<Vec<Link>, String> {
    use std::os::fd::IntoRawFd;
    let mut links = Vec::new();
    for &cpu in cpus {
        let fd = elfen_topo::perf::open_sw_sampling(config, -1, cpu as i32, 1)
            .map_err(|e| format!("perf_event_open on cpu {cpu}: {e}"))?
            .into_raw_fd();
        match prog.attach_perf_event(fd) {
            // the link owns the perf event's descriptor now
            Ok(l) => links.push(l),
            Err(e) => {
                // SAFETY: our descriptor; libbpf did not take it.
                unsafe { libc::close(fd) };
                return Err(format!("attaching to the perf event on cpu {cpu}: {e}"));
            }
        }
    }
    Ok(links)
}

/// Attaches every loaded program, signal by signal; a signal whose
/// program fails to attach is skipped (named), the others record. Only a
/// failure of `sched` is an error.
fn attach_all(
    skel: &TraceSkel<'_>,
    statuses: &mut [SignalStatus],
    cpus: &[u32],
) -> Result<Vec<Link>, TraceError> {
    use elfen_topo::perf::{SW_PAGE_FAULTS, SW_PAGE_FAULTS_MAJ, SW_PAGE_FAULTS_MIN};
    let log = LogCapture::start();
    let mut links = Vec::new();
    let p = &skel.progs;
    let groups: Vec<(Signal, Vec<Attach<'_>>)> = vec![
        (
            Signal::Sched,
            vec![Attach::Auto("sched_switch", &p.et_sched_switch)],
        ),
        (
            Signal::Wakeups,
            vec![Attach::Auto("sched_waking", &p.et_sched_waking)],
        ),
        (
            Signal::Faults,
            vec![
                Attach::Perf("page-faults", SW_PAGE_FAULTS, &p.et_fault_begin),
                Attach::Perf("minor-faults", SW_PAGE_FAULTS_MIN, &p.et_fault_end_min),
                Attach::Perf("major-faults", SW_PAGE_FAULTS_MAJ, &p.et_fault_end_maj),
            ],
        ),
        (
            Signal::HugeFaults,
            vec![Attach::Auto("mm_page_alloc", &p.et_page_alloc)],
        ),
        (
            Signal::TcpHeld,
            vec![
                Attach::Auto("sys_enter", &p.et_sys_enter),
                Attach::Auto("sys_exit", &p.et_sys_exit),
                Attach::Auto("tcp_probe", &p.et_tcp_probe),
            ],
        ),
        (
            Signal::DelayedAck,
            vec![Attach::Auto("timer_start", &p.et_timer_start)],
        ),
        (
            Signal::Exit,
            vec![Attach::Auto("sched_process_exit", &p.et_exit)],
        ),
    ];
    for (sig, progs) in groups {
        if !on(statuses, sig) {
            continue;
        }
        let mut mine = Vec::new();
        let mut failed = None;
        for a in progs {
            let r = match a {
                Attach::Auto(name, prog) => prog
                    .attach()
                    .map(|l| vec![l])
                    .map_err(|e| format!("attaching to {name} failed: {e}")),
                Attach::Perf(name, config, prog) => {
                    attach_perf(prog, config, cpus).map_err(|e| format!("{name}: {e}"))
                }
            };
            match r {
                Ok(l) => mine.extend(l),
                Err(why) => {
                    failed = Some(why);
                    break;
                }
            }
        }
        match failed {
            None => links.extend(mine),
            Some(why) => {
                if sig == Signal::Sched {
                    return Err(TraceError::Load {
                        stage: "attach sched_switch".into(),
                        source: libbpf_rs::Error::from(std::io::Error::other(why)),
                        log_tail: log.tail(),
                    });
                }
                if let Some(s) = statuses.iter_mut().find(|x| x.signal == sig) {
                    s.skipped = Some(why);
                }
            }
        }
    }
    Ok(links)
}

/// Gathers decoded records on the kernel thread.
#[derive(Default)]
struct Collector {
    out: KernelOut,
    keep: bool,
}

impl Collector {
    fn take(&mut self, data: &[u8], sink: &mut Option<EventSink>) {
        let Some(d) = contract::decode(data) else {
            self.out.counts.malformed += 1;
            return;
        };
        for (tid, tgid, comm) in d.tasks {
            if tid != 0 && !comm.is_empty() {
                match self.out.threads.get_mut(&tid) {
                    Some(t) if t.comm == comm && t.tgid == tgid => {}
                    _ => {
                        self.out.threads.insert(tid, ThreadInfo { tgid, comm });
                    }
                }
            }
        }
        if let Some(s) = sink.as_mut() {
            s(&d.event);
        }
        if self.keep {
            self.out.events.push(d.event);
        }
    }
}

/// Sums the per-CPU counters.
fn read_stats(skel: &TraceSkel<'_>) -> Result<EventCounts, TraceError> {
    let zero = 0u32.to_ne_bytes();
    let per_cpu = skel
        .maps
        .stats
        .lookup_percpu(&zero, MapFlags::ANY)
        .map_err(map_err("stats", "read".into()))?
        .unwrap_or_default();
    let mut emitted = [0u64; KINDS];
    let mut lost = [0u64; KINDS];
    let mut faults = 0u64;
    for v in per_cpu {
        if v.len() < std::mem::size_of::<crate::skel::types::et_stats>() {
            continue;
        }
        // SAFETY: a per-CPU value of the stats map is one et_stats.
        let s: crate::skel::types::et_stats =
            unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) };
        for k in 0..KINDS {
            emitted[k] += s.emitted[k];
            lost[k] += s.lost[k];
        }
        faults += s.faults;
    }
    use contract::kind as k;
    let tcp = |a: &[u64; KINDS]| {
        a[k::TCP_HELD as usize] + a[k::TCP_RELEASED as usize] + a[k::TCP_DELACK as usize]
    };
    Ok(EventCounts {
        switches: emitted[k::SWITCH as usize],
        wakeups: emitted[k::WAKING as usize],
        faults: emitted[k::FAULT as usize],
        tcp: tcp(&emitted),
        exits: emitted[k::EXIT as usize],
        lost: lost.iter().sum(),
        lost_by_kind: [
            lost[k::SWITCH as usize],
            lost[k::WAKING as usize],
            lost[k::FAULT as usize],
            tcp(&lost),
            lost[k::EXIT as usize],
        ],
        faults_seen: faults,
        malformed: 0,
    })
}

fn set_target(skel: &TraceSkel<'_>, tgid: u32) -> Result<(), TraceError> {
    skel.maps
        .targets
        .update(&tgid.to_ne_bytes(), &ON.to_ne_bytes(), MapFlags::ANY)
        .map_err(map_err("targets", format!("insert {tgid}")))
}

/// The heap storages of the attempts to load (see [`load_dropping`]).
type Storages = Vec<*mut MaybeUninit<OpenObject>>;

/// Loads the program; if the verifier refuses, drops optional signals one
/// at a time (the last first) and says which in `statuses`. Each attempt
/// gets its own storage, pushed on `storages`: the caller frees them once
/// the skeleton that borrowed one is gone.
fn load_dropping<'o>(
    statuses: &mut [SignalStatus],
    cpus: u32,
    ring_bytes: u32,
    storages: &mut Storages,
) -> Result<TraceSkel<'o>, TraceError> {
    let mut order: Vec<Signal> = Signal::ALL
        .into_iter()
        .rev()
        .filter(|&s| s != Signal::Sched && on(statuses, s))
        .collect();
    loop {
        let raw = Box::into_raw(Box::new(MaybeUninit::<OpenObject>::uninit()));
        storages.push(raw);
        // SAFETY: a fresh heap allocation only this attempt's skeleton
        // refers to; it is freed after that skeleton is dropped.
        match open_and_load(unsafe { &mut *raw }, statuses, cpus, ring_bytes) {
            Ok(s) => return Ok(s),
            Err(e) => {
                if std::env::var_os("ELFEN_TRACE_DEBUG").is_some() {
                    eprintln!("{e}");
                }
                let Some(s) = order.first().copied() else {
                    return Err(e);
                };
                order.remove(0);
                let why = match &e {
                    TraceError::Load { log_tail, .. } => format!(
                        "the kernel refused its program: {}",
                        log_tail.last().cloned().unwrap_or_else(|| e.to_string())
                    ),
                    _ => e.to_string(),
                };
                if let Some(x) = statuses.iter_mut().find(|x| x.signal == s) {
                    x.skipped = Some(why);
                }
            }
        }
    }
}

/// The program's settings in its .bss: the shortest fault recorded and
/// the address of the delayed-ACK timer (0 without that signal).
fn write_bss(skel: &mut TraceSkel<'_>, cfg: &KernelConfig, statuses: &[SignalStatus]) {
    let delack_fn = if on(statuses, Signal::DelayedAck) {
        kallsyms_address("tcp_delack_timer").unwrap_or(0)
    } else {
        0
    };
    if let Some(bss) = skel.maps.bss_data.as_deref_mut() {
        // SAFETY: valid, aligned fields of the mmapped .bss map; the BPF
        // program only reads them.
        unsafe {
            std::ptr::write_volatile(&mut bss.min_fault_ns, cfg.min_fault_ns);
            std::ptr::write_volatile(&mut bss.delack_fn, delack_fn);
        }
    }
}

/// The lanes and the target processes into the program's maps.
fn set_up_maps(skel: &TraceSkel<'_>, cfg: &KernelConfig, cpus: u32) -> Result<(), TraceError> {
    for &c in &cfg.lanes {
        if c < cpus {
            skel.maps
                .lanes
                .update(&c.to_ne_bytes(), &ON.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("lanes", format!("set cpu {c}")))?;
        }
    }
    for &t in &cfg.tgids {
        set_target(skel, t)?;
    }
    Ok(())
}

/// Loads, attaches, and drains until `stop`; the signals' fate goes to
/// `ready` once attached (or the error that prevented it). Processes sent
/// on `add` are traced from then on.
pub fn run(
    cfg: KernelConfig,
    ready: SyncSender<Result<Vec<SignalStatus>, TraceError>>,
    add: Receiver<u32>,
    stop: Arc<AtomicBool>,
    mut sink: Option<EventSink>,
) -> KernelOut {
    let fail = |e: TraceError| {
        let _ = ready.send(Err(e));
        KernelOut::default()
    };
    if let Err(e) = elfen_bpf::check_privileges() {
        return fail(e.into());
    }
    let btf = match KernelBtf::load() {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let mut statuses = plan_signals(&cfg.signals, |h| btf.has(h), &cfg.pretend_missing);
    drop(btf);
    if !on(&statuses, Signal::Sched) {
        return fail(TraceError::Usage(format!(
            "the sched signal cannot be recorded ({}): nothing to trace without it",
            statuses[0].skipped.clone().unwrap_or_default()
        )));
    }
    let cpus = match elfen_bpf::proc::possible_cpus() {
        Ok(c) => c,
        Err(e) => return fail(e.into()),
    };
    // Each attempt to load gets its own storage, freed once the skeleton
    // that borrowed it is gone.
    let mut storages: Storages = Vec::new();
    let free = |storages: Storages| {
        for s in storages {
            // SAFETY: from Box::into_raw in load_dropping; no skeleton refers to it any more.
            drop(unsafe { Box::from_raw(s) });
        }
    };
    let mut skel = match load_dropping(&mut statuses, cpus, cfg.ring_bytes, &mut storages) {
        Ok(s) => s,
        Err(e) => {
            free(storages);
            return fail(e);
        }
    };
    write_bss(&mut skel, &cfg, &statuses);
    let setup = set_up_maps(&skel, &cfg, cpus);
    if let Err(e) = setup {
        drop(skel);
        free(storages);
        return fail(e);
    }
    let collector = Rc::new(RefCell::new(Collector {
        keep: cfg.keep_events,
        ..Collector::default()
    }));
    let pending: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let ring = {
        let p = Rc::clone(&pending);
        let mut b = RingBufferBuilder::new();
        let built = match b.add(&skel.maps.events, move |data: &[u8]| {
            p.borrow_mut().push(data.to_vec());
            0
        }) {
            Ok(_) => b.build(),
            Err(e) => Err(e),
        };
        match built {
            Ok(r) => r,
            Err(e) => {
                drop(skel);
                free(storages);
                return fail(map_err("events", "ring buffer setup".into())(e));
            }
        }
    };
    let online = crate::recorder::online_cpus();
    let links = match attach_all(&skel, &mut statuses, &online) {
        Ok(l) => l,
        Err(e) => {
            drop(ring);
            drop(skel);
            free(storages);
            return fail(e);
        }
    };
    let _ = ready.send(Ok(statuses));
    let mut drain = |ring: &libbpf_rs::RingBuffer<'_>| {
        let _ = ring.consume();
        let batch: Vec<Vec<u8>> = std::mem::take(&mut *pending.borrow_mut());
        let mut c = collector.borrow_mut();
        for d in &batch {
            c.take(d, &mut sink);
        }
    };
    loop {
        while let Ok(t) = add.try_recv() {
            let _ = set_target(&skel, t);
        }
        std::thread::sleep(cfg.drain_interval);
        drain(&ring);
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    drop(links);
    drain(&ring);
    let counts = read_stats(&skel).unwrap_or_default();
    drop(ring);
    drop(skel);
    free(storages);
    let mut out = std::mem::take(&mut collector.borrow_mut().out);
    out.counts = EventCounts {
        malformed: out.counts.malformed,
        ..counts
    };
    out.events.sort_by_key(Event::time_ns);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_hooks_skip_their_signal_and_name_the_hook() {
        let st = plan_signals(&Signal::ALL, |h| h != Hook::Tracepoint("tcp_probe"), &[]);
        let tcp = st.iter().find(|s| s.signal == Signal::TcpHeld).unwrap();
        assert_eq!(
            tcp.skipped.as_deref(),
            Some("this kernel has no tracepoint tcp_probe")
        );
        // the delayed ACKs need the held sends' sockets
        let d = st.iter().find(|s| s.signal == Signal::DelayedAck).unwrap();
        assert_eq!(d.skipped.as_deref(), Some("needs the tcp_held signal"));
        assert!(
            st.iter()
                .filter(|s| !matches!(s.signal, Signal::TcpHeld | Signal::DelayedAck))
                .all(|s| s.skipped.is_none()),
            "{st:?}"
        );
        // pretending: faults off takes the huge-page mark with it
        let st = plan_signals(&Signal::ALL, |_| true, &["minor-faults".into()]);
        let f = st.iter().find(|x| x.signal == Signal::Faults).unwrap();
        assert_eq!(
            f.skipped.as_deref(),
            Some("this kernel has no software perf event minor-faults")
        );
        let h = st.iter().find(|x| x.signal == Signal::HugeFaults).unwrap();
        assert_eq!(h.skipped.as_deref(), Some("needs the faults signal"));
        // not asked for
        let st = plan_signals(&[Signal::Sched], |_| true, &[]);
        assert_eq!(st.iter().filter(|s| s.skipped.is_none()).count(), 1);
    }

    #[test]
    fn this_kernel_offers_the_hooks_or_says_so() {
        let Ok(btf) = KernelBtf::load() else {
            let need = elfen_cmd::skip::Need::Bpf;
            elfen_cmd::skip::skip(need, "reads the kernel's BTF");
            return;
        };
        assert!(btf.has(Hook::Tracepoint("sched_switch")));
        assert!(!btf.has(Hook::Symbol("elfen_no_such_function")));
        assert!(!btf.has(Hook::Tracepoint("elfen_no_such_tracepoint")));
        assert!(!btf.has(Hook::Arch("vax")));
        for s in Signal::ALL {
            for h in s.hooks() {
                println!("{h}: {}", if btf.has(*h) { "present" } else { "MISSING" });
            }
        }
    }
}
