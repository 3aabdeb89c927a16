//! The **raw record** of a trace: what the kernel and the signal page said,
//! typed, with nothing derived. `elfen trace` saves it (`record.json`) so a
//! trace can be studied again (`elfen trace report`) with other thresholds
//! or a client's spans, without re-running. All times are `CLOCK_MONOTONIC`
//! nanoseconds (BPF's `bpf_ktime_get_ns`, the page clock converted).

use crate::error::TraceError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Schema tag of [`TraceRecord`].
pub const RECORD_SCHEMA: &str = "elfen-trace-record/1";

/// One trace: who was traced, how, for how long, and every event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRecord {
    /// [`RECORD_SCHEMA`].
    pub schema: String,
    /// Seconds since the Unix epoch at the start.
    pub created_unix_s: u64,
    /// The command line.
    pub command: String,
    /// The kernel release.
    pub kernel: String,
    /// What was traced.
    pub target: TargetInfo,
    /// Possible CPUs of the machine.
    pub cpus: u32,
    /// CPUs on which every context switch was recorded (the lanes of
    /// interest); elsewhere only the switches a target took part in.
    pub lanes: Vec<u32>,
    /// Start and end of the recording.
    pub start_ns: u64,
    /// End of the recording.
    pub end_ns: u64,
    /// Why it ended.
    pub end: EndReason,
    /// Each kernel signal: recorded, or skipped and why.
    pub signals: Vec<SignalStatus>,
    /// Records the kernel sent and lost (its ring buffer full), per kind.
    pub counts: EventCounts,
    /// The threads seen: tid → process and name (the last name seen).
    pub threads: BTreeMap<u32, ThreadInfo>,
    /// Every kernel event, in time order.
    pub events: Vec<Event>,
    /// Where request spans came from.
    pub span_source: SpanSource,
    /// Requests seen on the signal page's LC line, in begin order.
    pub spans: Vec<Span>,
    /// The request poller's account (page spans only).
    pub poller: Option<PollerStats>,
    /// Notes for the reader (fallbacks taken, things not recorded).
    pub notes: Vec<String>,
}

impl TraceRecord {
    /// Writes the record as JSON.
    pub fn save(&self, path: &Path) -> Result<(), TraceError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| TraceError::io(dir, e))?;
        }
        let f = std::fs::File::create(path).map_err(|e| TraceError::io(path, e))?;
        let mut w = std::io::BufWriter::new(f);
        serde_json::to_writer(&mut w, self).map_err(|e| TraceError::Parse {
            path: path.into(),
            detail: e.to_string(),
        })?;
        std::io::Write::flush(&mut w).map_err(|e| TraceError::io(path, e))
    }

    /// Reads a record saved by [`TraceRecord::save`].
    pub fn load(path: &Path) -> Result<TraceRecord, TraceError> {
        let f = std::fs::File::open(path).map_err(|e| TraceError::io(path, e))?;
        let r: TraceRecord =
            serde_json::from_reader(std::io::BufReader::new(f)).map_err(|e| TraceError::Parse {
                path: path.into(),
                detail: format!("not an elfen trace record: {e}"),
            })?;
        if r.schema != RECORD_SCHEMA {
            return Err(TraceError::Parse {
                path: path.into(),
                detail: format!("schema {}, this build reads {RECORD_SCHEMA}", r.schema),
            });
        }
        Ok(r)
    }

    /// Length of the recording, ns.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The name of thread `tid` (`?` if never seen).
    pub fn comm(&self, tid: u32) -> &str {
        if tid == 0 {
            return "idle";
        }
        self.threads.get(&tid).map_or("?", |t| t.comm.as_str())
    }

    /// Whether thread `tid` belongs to a traced process.
    pub fn is_target(&self, tid: u32) -> bool {
        self.threads
            .get(&tid)
            .is_some_and(|t| self.target.tgids.contains(&t.tgid))
    }

    /// Whether a signal was recorded.
    pub fn recorded(&self, s: Signal) -> bool {
        self.signals
            .iter()
            .any(|x| x.signal == s && x.skipped.is_none())
    }
}

/// What was traced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetInfo {
    /// How the target was named (`pid 123`, `comm java`, `cgroup …`, `unit …`).
    pub spec: String,
    /// The processes traced (a cgroup's may grow during the trace).
    pub tgids: Vec<u32>,
    /// The processes' command lines, for the reader.
    pub cmdlines: Vec<String>,
    /// The LC thread, where known (the page's LC line names it).
    pub lc_tid: Option<u32>,
    /// The request lane's CPU, where known.
    pub request_cpu: Option<u32>,
    /// The CPUs whose co-runs count as batch co-runs: the request lane's
    /// partners (the page's controller line), else every lane but the
    /// request lane's.
    pub batch_cpus: Vec<u32>,
    /// The profiler's own process (its threads are not batch work).
    pub tracer_pid: u32,
}

/// Why the recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason", deny_unknown_fields)]
pub enum EndReason {
    /// The asked-for duration passed.
    Duration,
    /// Ctrl-C (or the caller) stopped it early.
    Interrupted,
    /// Every traced process exited.
    TargetExited {
        /// When the exit was noticed.
        at_ns: u64,
    },
}

/// The kernel signals the profiler records, each optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Context switches (`tp_btf/sched_switch`).
    Sched,
    /// Wake-ups with their chains (`tp_btf/sched_waking`).
    Wakeups,
    /// Page faults with their length (software perf events: the fault
    /// taken, the fault handled).
    Faults,
    /// Faults that allocated a transparent huge page (`tp_btf/mm_page_alloc`
    /// of order 9 inside a fault).
    HugeFaults,
    /// Data a send left unsent, and when it went out (`tp_btf/sys_enter`,
    /// `sys_exit` of the sends, `tp_btf/tcp_probe` for the ACK that lets it
    /// go; x86-64).
    TcpHeld,
    /// Delayed ACKs of a local peer (`tp_btf/timer_start` of
    /// `tcp_delack_timer`).
    DelayedAck,
    /// Thread exits of the target (`tp_btf/sched_process_exit`).
    Exit,
}

impl Signal {
    /// Every signal, in a fixed order.
    pub const ALL: [Signal; 7] = [
        Signal::Sched,
        Signal::Wakeups,
        Signal::Faults,
        Signal::HugeFaults,
        Signal::TcpHeld,
        Signal::DelayedAck,
        Signal::Exit,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Sched => "sched",
            Signal::Wakeups => "wakeups",
            Signal::Faults => "faults",
            Signal::HugeFaults => "huge_faults",
            Signal::TcpHeld => "tcp_held",
            Signal::DelayedAck => "delayed_ack",
            Signal::Exit => "exit",
        }
    }

    /// Parses [`Signal::name`].
    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|x| x.name() == s.trim())
    }

    /// The kernel hooks it needs (tracepoints and software perf events
    /// only: no kprobes or fentry, which a locked-down kernel refuses).
    pub fn hooks(self) -> &'static [Hook] {
        match self {
            Signal::Sched => &[Hook::Tracepoint("sched_switch")],
            Signal::Wakeups => &[Hook::Tracepoint("sched_waking")],
            Signal::Faults => &[
                Hook::Perf("page-faults"),
                Hook::Perf("minor-faults"),
                Hook::Perf("major-faults"),
            ],
            Signal::HugeFaults => &[Hook::Tracepoint("mm_page_alloc")],
            Signal::TcpHeld => &[
                Hook::Arch("x86_64"),
                Hook::Tracepoint("sys_enter"),
                Hook::Tracepoint("sys_exit"),
                Hook::Tracepoint("tcp_probe"),
            ],
            Signal::DelayedAck => &[
                Hook::Tracepoint("timer_start"),
                Hook::Symbol("tcp_delack_timer"),
            ],
            Signal::Exit => &[Hook::Tracepoint("sched_process_exit")],
        }
    }
}

/// What a signal needs of the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// A BTF tracepoint (`tp_btf/<name>`; BTF typedef `btf_trace_<name>`).
    Tracepoint(&'static str),
    /// A software perf event (checked when it is opened).
    Perf(&'static str),
    /// A kernel symbol in `/proc/kallsyms` (an address the program compares).
    Symbol(&'static str),
    /// This machine architecture (system call numbers).
    Arch(&'static str),
}

impl Hook {
    /// The name it is known by.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Tracepoint(n) | Hook::Perf(n) | Hook::Symbol(n) | Hook::Arch(n) => n,
        }
    }
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hook::Tracepoint(n) => write!(f, "tracepoint {n}"),
            Hook::Perf(n) => write!(f, "software perf event {n}"),
            Hook::Symbol(n) => write!(f, "kernel symbol {n}"),
            Hook::Arch(n) => write!(f, "{n} architecture"),
        }
    }
}

/// One signal's fate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalStatus {
    /// The signal.
    pub signal: Signal,
    /// `None` when recorded; else why not (a hook this kernel lacks, or
    /// not asked for).
    pub skipped: Option<String>,
}

/// Records per kind the kernel emitted and lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventCounts {
    /// Context switches recorded.
    pub switches: u64,
    /// Wake-ups recorded.
    pub wakeups: u64,
    /// Page faults recorded.
    pub faults: u64,
    /// TCP records.
    pub tcp: u64,
    /// Exits.
    pub exits: u64,
    /// Records lost because the ring buffer was full (all kinds).
    pub lost: u64,
    /// Records lost per kind: switches, wake-ups, faults, tcp, exits.
    pub lost_by_kind: [u64; 5],
    /// Faults of the targets, recorded or shorter than the threshold.
    pub faults_seen: u64,
    /// Records that did not parse (a contract mismatch; should be 0).
    pub malformed: u64,
}

/// A thread seen in the trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadInfo {
    /// Its process.
    pub tgid: u32,
    /// Its name (`comm`), the last one seen.
    pub comm: String,
}

/// One kernel event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "e", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// A context switch.
    Switch(Switch),
    /// A wake-up.
    Wakeup(Wakeup),
    /// A page fault.
    Fault(Fault),
    /// A TCP hold, release or delayed ACK.
    Tcp(Tcp),
    /// A target's thread exited.
    Exit(Exit),
}

impl Event {
    /// Its time, ns.
    pub fn time_ns(&self) -> u64 {
        match self {
            Event::Switch(e) => e.t,
            Event::Wakeup(e) => e.t,
            Event::Fault(e) => e.t,
            Event::Tcp(e) => e.t,
            Event::Exit(e) => e.t,
        }
    }
}

/// Thread state at a switch-out: runnable (preempted or yielded).
pub const RUNNABLE: u32 = 0;

/// CPU `cpu` switched from `prev` to `next` at `t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    /// Time, ns.
    pub t: u64,
    /// The CPU.
    pub cpu: u32,
    /// The thread switched out (0 = the idle task).
    pub prev: u32,
    /// Its state: [`RUNNABLE`] (preempted), else the kernel's sleep state
    /// bits (1 interruptible, 2 uninterruptible, …).
    pub prev_state: u32,
    /// The thread switched in (0 = the idle task).
    pub next: u32,
}

/// `waker` (running on `cpu`) woke `wakee` at `t`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wakeup {
    /// Time, ns.
    pub t: u64,
    /// The waker's CPU.
    pub cpu: u32,
    /// The thread woken.
    pub wakee: u32,
    /// The thread running when the wake-up was issued (0: an interrupt on
    /// an idle CPU).
    pub waker: u32,
    /// Who last woke the waker, who last woke that one, … (nearest first).
    pub chain: Vec<u32>,
}

/// A page fault of thread `tid`: `[t, t + dur_ns)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Entry into the fault handler, ns.
    pub t: u64,
    /// The CPU.
    pub cpu: u32,
    /// The faulting thread.
    pub tid: u32,
    /// Time in the handler, ns.
    pub dur_ns: u64,
    /// The faulting address.
    pub addr: u64,
    /// A major fault (the kernel waited for I/O).
    pub major: bool,
    /// A transparent huge page was allocated (and zeroed) in it.
    pub huge: bool,
}

/// What a TCP record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpKind {
    /// A target's send returned with data written but not sent.
    Held,
    /// The held data went out.
    Released,
    /// The peer of a target's socket (a local process) delayed its ACK.
    DelayedAck,
}

/// A TCP record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tcp {
    /// Time, ns.
    pub t: u64,
    /// The CPU.
    pub cpu: u32,
    /// What happened.
    pub kind: TcpKind,
    /// The target's socket (the kernel's address, an id).
    pub sock: u64,
    /// Released: when the hold began.
    pub since_ns: u64,
    /// The thread running (the sender; for a release, whoever processed
    /// the ACK; for a delayed ACK, the peer's).
    pub tid: u32,
    /// Bytes written, not sent (held and released records).
    pub unsent: u32,
    /// Bytes sent and not yet acknowledged.
    pub in_flight: u32,
    /// Nagle was on (no `TCP_NODELAY`, no cork).
    pub nagle: bool,
    /// `TCP_CORK` was set.
    pub cork: bool,
    /// Local and peer address of the socket the record is about
    /// (`a.b.c.d:port`; for a delayed ACK, the peer's own socket).
    pub local: String,
    /// The other end.
    pub remote: String,
}

/// A thread of a target exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exit {
    /// Time, ns.
    pub t: u64,
    /// The thread.
    pub tid: u32,
    /// It was the process's main thread.
    pub leader: bool,
}

/// Where request spans came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "from", deny_unknown_fields)]
pub enum SpanSource {
    /// The LC line of lane `lane` of the signal page at `page`, read by a
    /// user-space poller.
    Page {
        /// The page.
        page: String,
        /// The request lane.
        lane: u32,
    },
    /// No page: spans come from a client's spans file at study time.
    None,
}

/// One request as the LC line showed it: `[begin_ns, end_ns]` on the LC
/// thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Span {
    /// The id the service passed to `request_begin` (the wire id).
    pub id: u64,
    /// Begin, ns (the line's `busy_since`).
    pub begin_ns: u64,
    /// End, ns: exact from the line's busy time when the poller saw the
    /// request alone; else an upper bound.
    pub end_ns: u64,
    /// Whether `end_ns` is exact.
    pub exact_end: bool,
    /// Requests waiting behind it at its begin.
    pub queue_at_begin: u32,
}

/// How the poller of the LC line fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollerStats {
    /// Reads of the line's state word.
    pub polls: u64,
    /// Requests that began and ended between two reads (counted, no span).
    pub missed: u64,
    /// Spans whose end is a bound, not exact.
    pub inexact: u64,
    /// The CPU the poller ran on.
    pub cpu: Option<u32>,
}
