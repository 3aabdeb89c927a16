//! The **analysis** of a trace, typed: every request above the percentile
//! with the causes of its latency, and the counts over them. `elfen trace
//! --json` saves it; the renderers ([`crate::render`]) format it.

use crate::record::{SignalStatus, SpanSource};
use serde::{Deserialize, Serialize};

/// Schema tag of [`TraceReport`].
pub const REPORT_SCHEMA: &str = "elfen-trace-report/1";

/// What delayed a request: the kinds of cause, in the report's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseKind {
    /// The response was held back in the kernel: Nagle with
    /// unacknowledged data in flight (and, where seen, the peer's delayed
    /// ACK). A hazard.
    TcpHeld,
    /// The request's thread stalled in page faults (huge pages zeroed on a
    /// first touch). A hazard.
    PageFaults,
    /// A stop-the-world pause of the JVM (a collection, a safepoint). A
    /// hazard.
    JvmPause,
    /// A cold JVM: the request ran code still being loaded and compiled —
    /// its thread exchanged wake-ups with the JIT's compiler threads (or
    /// waited for them), or they ran beside it most of the time; its own
    /// work and those waits count. A hazard.
    JvmWarmup,
    /// Waited in the service's queue behind other requests.
    Queueing,
    /// The request's thread was runnable while another thread ran on its CPU.
    Preemption,
    /// The request's thread slept until another woke it (a wake-up chain).
    WakeupWait,
    /// Work of other processes on the batch lanes while the request was in
    /// flight (from its send to its arrival).
    BatchCorun,
    /// Between the client's intended send and the request's begin with no
    /// request ahead of it: the client's own lateness, the network, the
    /// dispatcher, the LC thread's wake-up.
    Dispatch,
    /// The request's own time on a CPU (its work; page faults excluded).
    Service,
    /// From the response leaving the service to its arrival at the client.
    Delivery,
}

impl CauseKind {
    /// Every kind, in order.
    pub const ALL: [CauseKind; 11] = [
        CauseKind::TcpHeld,
        CauseKind::PageFaults,
        CauseKind::JvmPause,
        CauseKind::JvmWarmup,
        CauseKind::Queueing,
        CauseKind::Preemption,
        CauseKind::WakeupWait,
        CauseKind::BatchCorun,
        CauseKind::Dispatch,
        CauseKind::Service,
        CauseKind::Delivery,
    ];

    /// One of the four hazards of the thesis (Nagle + delayed ACK, page
    /// faults, JVM pauses, a cold JVM).
    pub fn is_hazard(self) -> bool {
        matches!(
            self,
            CauseKind::TcpHeld | CauseKind::PageFaults | CauseKind::JvmPause | CauseKind::JvmWarmup
        )
    }

    /// Whether the time overlaps the request's other causes rather than
    /// adding to them (work running beside it on other CPUs).
    pub fn is_parallel(self) -> bool {
        matches!(self, CauseKind::BatchCorun)
    }

    /// A short name for tables.
    pub fn label(self) -> &'static str {
        match self {
            CauseKind::TcpHeld => "TCP held (Nagle)",
            CauseKind::PageFaults => "page faults",
            CauseKind::JvmPause => "JVM pause",
            CauseKind::JvmWarmup => "cold JVM (JIT)",
            CauseKind::Queueing => "queueing",
            CauseKind::Preemption => "preemption",
            CauseKind::WakeupWait => "wake-up wait",
            CauseKind::BatchCorun => "batch co-run",
            CauseKind::Dispatch => "dispatch",
            CauseKind::Service => "own work",
            CauseKind::Delivery => "delivery",
        }
    }
}

/// A thread named in a cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadRef {
    /// Thread id (0: an interrupt on an idle CPU).
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// Its name.
    pub comm: String,
}

impl std::fmt::Display for ThreadRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.tid == 0 {
            write!(f, "an interrupt")
        } else {
            write!(f, "{} ({}/{})", self.comm, self.pid, self.tid)
        }
    }
}

/// One cause of one request's latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cause {
    /// What.
    pub kind: CauseKind,
    /// How much of the latency, ns (parallel kinds: time beside it).
    pub ns: u64,
    /// Its share of the request's latency, %.
    pub share_pct: f64,
    /// Whether it is attributed (large enough to name; see
    /// [`StudyParams`]).
    pub attributed: bool,
    /// Who: the threads that preempted or woke the request's thread (the
    /// wake-up chain, nearest first), ran beside it, or paused it.
    pub who: Vec<ThreadRef>,
    /// Requests it queued behind (largest overlap first).
    pub behind: Vec<u64>,
    /// Counts where they mean something: faults (and how many major,
    /// huge), pauses, holds.
    pub count: u64,
    /// Major faults; huge-page faults.
    pub major: u64,
    /// Faults that allocated a huge page.
    pub huge: u64,
    /// TCP: the peer delayed its ACK while the data was held.
    pub delayed_ack: bool,
    /// A sentence saying what happened.
    pub text: String,
}

/// One slow request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestReport {
    /// The wire id.
    pub id: u64,
    /// Its latency, ns (client-observed where known; else begin → its
    /// response leaving the service).
    pub latency_ns: u64,
    /// Where it sits in the run: its begin (or intended send) relative to
    /// the trace's start, ns.
    pub at_ns: u64,
    /// Begin and end on the LC thread, relative to the trace's start.
    pub span: Option<(u64, u64)>,
    /// The causes, largest first.
    pub causes: Vec<Cause>,
    /// The largest named cause (None: no cause is large enough to name).
    pub top: Option<CauseKind>,
    /// The largest attributed hazard, if any.
    pub top_hazard: Option<CauseKind>,
    /// When it queued behind a request, that request's top hazard, or when
    /// that one queued too, its root's (the root of its delay).
    pub root_hazard: Option<CauseKind>,
}

/// Counts of one cause over the slow requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CauseCount {
    /// The cause.
    pub kind: CauseKind,
    /// Slow requests it is attributed to.
    pub attributed: u64,
    /// Slow requests whose top cause it is.
    pub top: u64,
    /// Slow requests whose top hazard (own or, when queued, the root's) it
    /// is.
    pub hazard_top: u64,
    /// Its total over the slow requests, ns.
    pub total_ns: u64,
}

/// What the run showed beside the slow requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFacts {
    /// JVM pauses (stop-the-world threads running), and their total, ns.
    pub jvm_pauses: u64,
    /// Their total length, ns.
    pub jvm_pause_ns: u64,
    /// The longest, ns.
    pub jvm_pause_max_ns: u64,
    /// Page faults of the LC thread, of the target; their total, ns.
    pub faults: u64,
    /// Their total length, ns.
    pub fault_ns: u64,
    /// Faults that allocated a huge page.
    pub huge_faults: u64,
    /// The longest, ns.
    pub fault_max_ns: u64,
    /// Sends that left data held back; their total hold, ns.
    pub tcp_holds: u64,
    /// Their total, ns.
    pub tcp_hold_ns: u64,
    /// Delayed ACKs of local peers.
    pub delayed_acks: u64,
    /// JIT compiler threads' CPU time, ns.
    pub jit_ns: u64,
}

/// Percentiles of the request latencies, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySummary {
    /// Requests.
    pub count: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

/// How the study decided.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyParams {
    /// Requests above this percentile of latency are studied.
    pub above_pct: f64,
    /// A cause is attributed when it is at least this share of the
    /// latency, %…
    pub min_share_pct: f64,
    /// … and at least this long, ns.
    pub min_cause_ns: u64,
}

impl Default for StudyParams {
    fn default() -> Self {
        StudyParams {
            above_pct: 99.0,
            min_share_pct: 10.0,
            min_cause_ns: 50_000,
        }
    }
}

/// The analysis of one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceReport {
    /// [`REPORT_SCHEMA`].
    pub schema: String,
    /// The target, as the record names it.
    pub target: String,
    /// The traced processes.
    pub tgids: Vec<u32>,
    /// The LC thread.
    pub lc_thread: Option<ThreadRef>,
    /// Length of the trace, ns.
    pub duration_ns: u64,
    /// Where the spans came from.
    pub span_source: SpanSource,
    /// Whether a client's spans were joined (latency is then the client's).
    pub client_spans: bool,
    /// Requests seen.
    pub requests: u64,
    /// Their latency.
    pub latency: LatencySummary,
    /// How the study decided.
    pub params: StudyParams,
    /// The latency at the percentile (nearest rank): requests above it are
    /// studied (the slowest, when none is), ns.
    pub threshold_ns: u64,
    /// Each studied request, slowest first.
    pub slow: Vec<RequestReport>,
    /// Each cause over the studied requests.
    pub counts: Vec<CauseCount>,
    /// Facts of the whole run.
    pub facts: RunFacts,
    /// The signals recorded and skipped.
    pub signals: Vec<SignalStatus>,
    /// Kernel records lost.
    pub lost: u64,
    /// Notes (from the record and the study).
    pub notes: Vec<String>,
}

impl TraceReport {
    /// The count of cause `k`.
    pub fn count(&self, k: CauseKind) -> &CauseCount {
        self.counts
            .iter()
            .find(|c| c.kind == k)
            .expect("every kind is counted")
    }

    /// Writes the report as JSON.
    pub fn save(&self, path: &std::path::Path) -> Result<(), crate::TraceError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| crate::TraceError::io(dir, e))?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| crate::TraceError::Parse {
            path: path.into(),
            detail: e.to_string(),
        })?;
        std::fs::write(path, text).map_err(|e| crate::TraceError::io(path, e))
    }
}
