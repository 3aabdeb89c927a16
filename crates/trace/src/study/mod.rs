//! The **study** of a trace: each request's latency taken apart.
//!
//! A request's latency is the client's (intended send → response) when a
//! client's spans are joined, else its begin on the LC line → its response
//! leaving the service. It is split along time:
//!
//! - **before its begin** (client spans only): behind other requests on the
//!   LC thread ([`CauseKind::Queueing`], the requests named), in a JVM pause
//!   with no request running ([`CauseKind::JvmPause`]), the rest
//!   [`CauseKind::Dispatch`];
//! - **from begin to end**, the LC thread's periods: on a CPU
//!   ([`CauseKind::Service`], less its [`CauseKind::PageFaults`]; in a cold
//!   JVM — the thread exchanged wake-ups with the JIT's compiler threads, or
//!   they ran beside it most of the time — [`CauseKind::JvmWarmup`]),
//!   runnable while another ran on its CPU ([`CauseKind::Preemption`], who
//!   ran), asleep until woken ([`CauseKind::WakeupWait`], the waker and its
//!   wakers) unless a JVM pause covers it ([`CauseKind::JvmPause`]) or a
//!   compiler thread woke it ([`CauseKind::JvmWarmup`]);
//! - **after its end**: its response held back by TCP
//!   ([`CauseKind::TcpHeld`]: a hold on the LC thread's socket still going
//!   at the end, with the peer's delayed ACK where seen), then
//!   [`CauseKind::Delivery`];
//! - **beside it**, from its send to its arrival (overlapping the above,
//!   not added): other processes on the batch lanes
//!   ([`CauseKind::BatchCorun`]).
//!
//! A cause is *attributed* when it is at least [`StudyParams`]'s share of
//! the latency and at least its minimum length.

pub mod timeline;

use crate::pause::{JvmRole, Pause, jvm_role, pauses_of};
use crate::record::{Event, SpanSource, TcpKind, TraceRecord};
use crate::report::{
    Cause, CauseCount, CauseKind, LatencySummary, REPORT_SCHEMA, RequestReport, RunFacts,
    StudyParams, ThreadRef, TraceReport,
};
use crate::spans::ClientSpan;
use std::collections::HashMap;
pub use timeline::{Iv, Timeline};
use timeline::{State, merge, overlap_sum};

/// One request, as the study sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The wire id.
    pub id: u64,
    /// Begin on the LC thread (or the client's send), ns.
    pub begin_ns: u64,
    /// End on the LC thread (or the client's receipt), ns.
    pub end_ns: u64,
    /// Whether begin/end are the LC line's (false: the client's).
    pub on_lc_line: bool,
    /// The client's view, when joined.
    pub client: Option<ClientSpan>,
}

/// A TCP hold: `[start, end)` on socket `sock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// The target's socket.
    pub sock: u64,
    /// The thread whose send left data unsent.
    pub tid: u32,
    /// When.
    pub iv: Iv,
    /// Whether it was released before the trace ended.
    pub released: bool,
    /// Nagle was on and data was in flight (the hazard's signature).
    pub nagle: bool,
    /// Bytes in flight at the hold.
    pub in_flight: u32,
    /// The peer delayed its ACK meanwhile.
    pub delayed_ack: bool,
}

/// The TCP holds of a record, each matched to its release and to delayed
/// ACKs of the peer (from 2 ms before the hold: the peer's delayed-ACK
/// timer starts when the data before the held part arrives).
pub fn holds(rec: &TraceRecord) -> Vec<Hold> {
    let mut released: HashMap<(u64, u64), u64> = HashMap::new();
    let mut delacks: HashMap<u64, Vec<u64>> = HashMap::new();
    for e in &rec.events {
        if let Event::Tcp(t) = e {
            match t.kind {
                TcpKind::Released => {
                    released.insert((t.sock, t.since_ns), t.t);
                }
                TcpKind::DelayedAck => delacks.entry(t.sock).or_default().push(t.t),
                TcpKind::Held => {}
            }
        }
    }
    let mut out = Vec::new();
    for e in &rec.events {
        if let Event::Tcp(t) = e {
            if t.kind != TcpKind::Held {
                continue;
            }
            let end = released.get(&(t.sock, t.since_ns)).copied();
            let iv = Iv {
                start: t.since_ns,
                end: end.unwrap_or(rec.end_ns).max(t.since_ns),
            };
            let delayed_ack = delacks
                .get(&t.sock)
                .is_some_and(|v| v.iter().any(|&d| d + 2_000_000 >= iv.start && d <= iv.end));
            out.push(Hold {
                sock: t.sock,
                tid: t.tid,
                iv,
                released: end.is_some(),
                nagle: t.nagle && t.in_flight > 0,
                in_flight: t.in_flight,
                delayed_ack,
            });
        }
    }
    out
}

/// The requests of a record: its LC-line spans, joined by id to `client`
/// spans, and the client's spans the LC line did not show, alone.
pub fn requests(rec: &TraceRecord, client: &[ClientSpan]) -> Vec<Request> {
    let by_id: HashMap<u64, &ClientSpan> = client.iter().map(|c| (c.id, c)).collect();
    let mut joined: std::collections::HashSet<u64> = std::collections::HashSet::new();
    let mut v: Vec<Request> = rec
        .spans
        .iter()
        .map(|s| {
            let c = by_id
                .get(&s.id)
                .copied()
                .copied()
                // the same id again much later is another request
                .filter(|c| c.sent_ns <= s.begin_ns + 1_000_000_000);
            if let Some(c) = c {
                joined.insert(c.id);
            }
            Request {
                id: s.id,
                begin_ns: s.begin_ns,
                end_ns: s.end_ns,
                on_lc_line: true,
                client: c,
            }
        })
        .collect();
    // the client's requests the LC line did not show (no page, or the
    // poller missed them): the client's view alone
    v.extend(
        client
            .iter()
            .filter(|c| !joined.contains(&c.id))
            .filter(|c| c.sent_ns >= rec.start_ns && c.sent_ns < rec.end_ns)
            .map(|c| Request {
                id: c.id,
                begin_ns: c.sent_ns,
                end_ns: c.received_ns.unwrap_or(rec.end_ns),
                on_lc_line: false,
                client: Some(*c),
            }),
    );
    v.sort_by_key(|r| r.begin_ns);
    v
}

/// Everything the per-request study needs, built once.
struct Ctx<'a> {
    rec: &'a TraceRecord,
    tl: Timeline,
    reqs: Vec<Request>,
    /// The LC line's spans, in begin order, with their ids.
    lc_spans: Vec<(Iv, u64)>,
    pauses: Vec<Pause>,
    pause_ivs: Vec<Iv>,
    compilers: Vec<u32>,
    lc_socks: Vec<u64>,
    holds: Vec<Hold>,
    params: StudyParams,
}

/// A cause before shares are known.
struct Raw {
    kind: CauseKind,
    ns: u64,
    who: Vec<ThreadRef>,
    behind: Vec<u64>,
    count: u64,
    major: u64,
    huge: u64,
    delayed_ack: bool,
    text: String,
}

impl Raw {
    fn new(kind: CauseKind, ns: u64, text: String) -> Raw {
        Raw {
            kind,
            ns,
            who: Vec::new(),
            behind: Vec::new(),
            count: 0,
            major: 0,
            huge: 0,
            delayed_ack: false,
            text,
        }
    }
}

fn ms(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// The gaps of `[a, b)` not covered by sorted, disjoint `covered`.
fn gaps(a: u64, b: u64, covered: &[Iv]) -> Vec<Iv> {
    let mut out = Vec::new();
    let mut t = a;
    let i = covered.partition_point(|x| x.end <= a);
    for c in covered[i..].iter().take_while(|c| c.start < b) {
        if c.start > t {
            out.push(Iv {
                start: t,
                end: c.start,
            });
        }
        t = t.max(c.end);
    }
    if t < b {
        out.push(Iv { start: t, end: b });
    }
    out
}

impl Ctx<'_> {
    fn thread(&self, tid: u32) -> ThreadRef {
        ThreadRef {
            tid,
            pid: self.rec.threads.get(&tid).map_or(0, |t| t.tgid),
            comm: self.rec.comm(tid).to_string(),
        }
    }

    /// Whether `tid` is batch work: not idle, not the target, not the tracer.
    fn foreign(&self, tid: u32) -> bool {
        tid != 0
            && !self.rec.is_target(tid)
            && self
                .rec
                .threads
                .get(&tid)
                .is_none_or(|t| t.tgid != self.rec.target.tracer_pid)
    }

    /// The end of the hold on an LC socket still going at `t`, if any.
    fn hold_at(&self, t: u64) -> Option<&Hold> {
        self.holds
            .iter()
            .filter(|h| {
                (self.lc_socks.is_empty() || self.lc_socks.contains(&h.sock))
                    && h.iv.start <= t + 50_000
                    && h.iv.end > t
            })
            .max_by_key(|h| h.iv.end)
    }

    /// The request's latency and the instant its response left.
    fn latency(&self, r: &Request) -> (u64, u64) {
        let out = self
            .hold_at(r.end_ns)
            .map_or(r.end_ns, |h| h.iv.end.max(r.end_ns));
        match r.client {
            Some(c) => {
                let recv = c.received_ns.unwrap_or(self.rec.end_ns);
                (recv.saturating_sub(c.intended_ns), out.min(recv))
            }
            None => (out.saturating_sub(r.begin_ns), out),
        }
    }

    /// The window of a request's latency: from its intended send (or its
    /// begin) to its response's arrival (or departure).
    fn window(&self, r: &Request) -> (u64, u64) {
        let (_, out) = self.latency(r);
        match r.client {
            Some(c) => (
                c.intended_ns.min(r.begin_ns),
                c.received_ns.unwrap_or(self.rec.end_ns),
            ),
            None => (r.begin_ns, out),
        }
    }

    /// The causes of request `i`'s latency (unsorted, not yet shared).
    fn causes(&self, i: usize) -> (u64, Vec<Raw>) {
        let r = &self.reqs[i];
        let (lat, out) = self.latency(r);
        let mut v: Vec<Raw> = Vec::new();
        if r.on_lc_line {
            if let Some(c) = r.client {
                self.before_begin(r, c, &mut v);
            }
            if let Some(lc) = self.rec.target.lc_tid {
                self.on_lc_thread(r, lc, &mut v);
            }
            self.after_end(r, out, &mut v);
        } else {
            self.client_only(r, &mut v);
        }
        self.beside(r, &mut v);
        (lat, v)
    }

    /// From the intended send to the begin: behind other requests, in a
    /// JVM pause, or on the way (the dispatcher's own waits named).
    /// Time other requests ran on the LC thread inside `[a, z)` (the
    /// queue `r` waited in), as a cause; that time.
    fn queueing(&self, r: &Request, a: u64, z: u64, v: &mut Vec<Raw>) -> u64 {
        let mut behind: Vec<(u64, u64)> = Vec::new();
        let lo = self.lc_spans.partition_point(|s| s.0.end <= a);
        for (iv, id) in &self.lc_spans[lo..] {
            if iv.start >= z {
                break;
            }
            if *id != r.id {
                let ov = iv.overlap(a, z);
                if ov > 0 {
                    behind.push((*id, ov));
                }
            }
        }
        let q: u64 = behind.iter().map(|x| x.1).sum();
        behind.sort_by_key(|x| std::cmp::Reverse(x.1));
        if q > 0 {
            let mut x = Raw::new(
                CauseKind::Queueing,
                q,
                format!(
                    "queued {} behind {} request(s), longest behind #{}",
                    ms(q),
                    behind.len(),
                    behind[0].0
                ),
            );
            x.behind = behind.iter().take(5).map(|x| x.0).collect();
            x.count = behind.len() as u64;
            v.push(x);
        }
        q
    }

    fn before_begin(&self, r: &Request, c: ClientSpan, v: &mut Vec<Raw>) {
        let b = r.begin_ns;
        let (a, z) = (c.intended_ns, b.max(c.intended_ns));
        let q = self.queueing(r, a, z, v);
        let covered: Vec<Iv> = self.lc_spans.iter().map(|s| s.0).collect();
        let free = gaps(a, z, &covered);
        let paused: u64 = free
            .iter()
            .map(|g| overlap_sum(&self.pause_ivs, g.start, g.end))
            .sum();
        if paused > 0 {
            v.push(Raw::new(
                CauseKind::JvmPause,
                paused,
                format!("waited {} for a JVM pause before it began", ms(paused)),
            ));
        }
        let dispatch = (z - a).saturating_sub(q + paused);
        if dispatch == 0 {
            return;
        }
        let late = c.sent_ns.saturating_sub(c.intended_ns);
        let mut x = Raw::new(
            CauseKind::Dispatch,
            dispatch,
            format!(
                "{} from its intended send to its begin with no request ahead{}",
                ms(dispatch),
                if late >= 10_000 {
                    format!(" (the client itself sent it {} late)", ms(late))
                } else {
                    String::new()
                }
            ),
        );
        // who woke the LC thread for it, and what held that waker back
        if let Some(lc) = self.rec.target.lc_tid {
            if let Some(w) = self.tl.wakeup_before(lc, b).filter(|w| w.t >= a) {
                let mut runnable = 0u64;
                let mut by: HashMap<u32, u64> = HashMap::new();
                for p in self.tl.periods(w.waker, a, w.t) {
                    if let State::Runnable(cpu) = p.state {
                        let (pa, pb) = (p.iv.start.max(a), p.iv.end.min(w.t));
                        runnable += pb.saturating_sub(pa);
                        if let Some(cr) = self.tl.cpus.get(cpu as usize) {
                            for (t, ns) in cr.who_ran(pa, pb) {
                                *by.entry(t).or_default() += ns;
                            }
                        }
                    }
                }
                let mut by: Vec<(u32, u64)> = by.into_iter().filter(|x| x.0 != 0).collect();
                by.sort_by_key(|x| std::cmp::Reverse(x.1));
                if runnable > 0 && !by.is_empty() {
                    x.text.push_str(&format!(
                        "; {} (which woke the LC thread) waited {} for a CPU while {} ran",
                        self.thread(w.waker),
                        ms(runnable),
                        self.thread(by[0].0)
                    ));
                    x.who = by.iter().take(5).map(|(t, _)| self.thread(*t)).collect();
                } else {
                    x.who = std::iter::once(w.waker)
                        .chain(w.chain.iter().copied())
                        .map(|t| self.thread(t))
                        .collect();
                }
            }
        }
        v.push(x);
    }

    /// Begin to end: the LC thread's periods.
    fn on_lc_thread(&self, r: &Request, lc: u32, v: &mut Vec<Raw>) {
        let (b, e) = (r.begin_ns, r.end_ns);
        let mut on = 0u64;
        let mut pre: HashMap<u32, u64> = HashMap::new();
        let mut pre_total = 0u64;
        let mut wait_total = 0u64;
        let mut wait_who: Vec<(u64, Vec<u32>)> = Vec::new();
        let mut pause_in = 0u64;
        let mut jit_wait = 0u64;
        for p in self.tl.periods(lc, b, e) {
            let ov = p.iv.overlap(b, e);
            if ov == 0 {
                continue;
            }
            let (pa, pb) = (p.iv.start.max(b), p.iv.end.min(e));
            match p.state {
                State::OnCpu(_) => on += ov,
                State::Runnable(cpu) => {
                    pre_total += ov;
                    let ran = self
                        .tl
                        .cpus
                        .get(cpu as usize)
                        .map(|c| c.who_ran(pa, pb))
                        .filter(|w| !w.is_empty())
                        .unwrap_or_else(|| vec![(p.successor, ov)]);
                    for (t, ns) in ran {
                        *pre.entry(t).or_default() += ns;
                    }
                }
                State::Blocked(_) => {
                    let paused = overlap_sum(&self.pause_ivs, pa, pb);
                    pause_in += paused;
                    let rest = ov.saturating_sub(paused);
                    let waker = self
                        .tl
                        .wakeup_before(lc, p.iv.end)
                        .filter(|w| w.t >= p.iv.start);
                    match waker {
                        // it waited for the JIT: a cold JVM
                        Some(w) if self.compilers.contains(&w.waker) => jit_wait += rest,
                        Some(w) => {
                            wait_total += rest;
                            let chain = std::iter::once(w.waker)
                                .chain(w.chain.iter().copied())
                                .collect();
                            wait_who.push((rest, chain));
                        }
                        None => wait_total += rest,
                    }
                }
            }
        }
        let fault_ns = self.faults(lc, b, e, v);
        let service = on.saturating_sub(fault_ns);
        // a cold JVM: the request's thread dealt with the JIT compiler (woke
        // it with compilation requests, or was woken by it), or the compiler
        // ran beside it for at least half of it; its own work is then code
        // still being compiled
        let exchanges = self.jit_exchanges(lc, b, e);
        let jit_beside: u64 = self
            .compilers
            .iter()
            .map(|&t| self.tl.on_cpu(t, b, e))
            .sum();
        let cold = exchanges > 0 || jit_wait > 0 || (e > b && jit_beside * 2 >= e - b);
        if cold && service + jit_wait > 0 {
            let mut x = Raw::new(
                CauseKind::JvmWarmup,
                service + jit_wait,
                format!(
                    "ran code the JVM was still loading and compiling: {} of its own work, {} waiting for the JIT \
                     ({exchanges} wake-ups between it and the compiler threads, which ran {} beside it)",
                    ms(service),
                    ms(jit_wait),
                    ms(jit_beside)
                ),
            );
            x.count = exchanges;
            x.who = self
                .compilers
                .iter()
                .filter(|&&t| self.tl.on_cpu(t, b, e) > 0)
                .map(|&t| self.thread(t))
                .collect();
            v.push(x);
        } else if service > 0 {
            v.push(Raw::new(
                CauseKind::Service,
                service,
                format!("{} of its own work on the CPU", ms(service)),
            ));
        }
        if pre_total > 0 {
            let mut by: Vec<(u32, u64)> = pre.into_iter().collect();
            by.sort_by_key(|x| std::cmp::Reverse(x.1));
            let mut x = Raw::new(
                CauseKind::Preemption,
                pre_total,
                format!(
                    "runnable for {} while {} ran on its CPU",
                    ms(pre_total),
                    by.first()
                        .map(|(t, _)| self.thread(*t).to_string())
                        .unwrap_or_default()
                ),
            );
            x.who = by.iter().take(5).map(|(t, _)| self.thread(*t)).collect();
            v.push(x);
        }
        if pause_in > 0 {
            v.push(Raw::new(
                CauseKind::JvmPause,
                pause_in,
                format!("stopped {} by a JVM pause while it ran", ms(pause_in)),
            ));
        }
        if wait_total > 0 {
            wait_who.sort_by_key(|x| std::cmp::Reverse(x.0));
            let chain: Vec<ThreadRef> = wait_who
                .first()
                .map(|(_, c)| c.iter().map(|&t| self.thread(t)).collect())
                .unwrap_or_default();
            let by = if chain.is_empty() {
                String::new()
            } else {
                format!(
                    " by {}",
                    chain
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(" ← woken by ")
                )
            };
            let mut x = Raw::new(
                CauseKind::WakeupWait,
                wait_total,
                format!("asleep {} until woken{by}", ms(wait_total)),
            );
            x.who = chain;
            v.push(x);
        }
    }

    /// The LC thread's page faults inside `[a, b)`, as a cause; their time.
    fn faults(&self, lc: u32, a: u64, b: u64, v: &mut Vec<Raw>) -> u64 {
        let mut fault_ns = 0u64;
        let (mut nf, mut major, mut huge) = (0u64, 0u64, 0u64);
        for f in self.tl.faults_in(lc, a, b) {
            fault_ns += Iv {
                start: f.t,
                end: f.t + f.dur_ns,
            }
            .overlap(a, b);
            nf += 1;
            major += u64::from(f.major);
            huge += u64::from(f.huge);
        }
        if fault_ns > 0 {
            let mut x = Raw::new(
                CauseKind::PageFaults,
                fault_ns,
                format!(
                    "{} in {nf} page fault(s){}{}",
                    ms(fault_ns),
                    if huge > 0 {
                        format!(", {huge} of them a huge page zeroed")
                    } else {
                        String::new()
                    },
                    if major > 0 {
                        format!(", {major} major")
                    } else {
                        String::new()
                    }
                ),
            );
            x.count = nf;
            x.major = major;
            x.huge = huge;
            v.push(x);
        }
        fault_ns
    }

    /// After the end: the response held by TCP, then its delivery.
    fn after_end(&self, r: &Request, out: u64, v: &mut Vec<Raw>) {
        let e = r.end_ns;
        if let Some(h) = self.hold_at(e) {
            let held = out.saturating_sub(e);
            if held > 0 {
                v.push(self.held(h, held, "its response"));
            }
        }
        if let Some(c) = r.client {
            let recv = c.received_ns.unwrap_or(self.rec.end_ns);
            let d = recv.saturating_sub(out.max(e));
            if d > 0 {
                v.push(Raw::new(
                    CauseKind::Delivery,
                    d,
                    format!("{} from the response leaving to its arrival", ms(d)),
                ));
            }
        }
    }

    fn held(&self, h: &Hold, ns: u64, what: &str) -> Raw {
        let mut x = Raw::new(
            CauseKind::TcpHeld,
            ns,
            format!(
                "{what} waited {} in the kernel{}{}",
                ms(ns),
                if h.nagle {
                    format!(" (Nagle: {} B unacknowledged in flight)", h.in_flight)
                } else {
                    " (not by Nagle: window, cork or queue)".to_string()
                },
                if h.delayed_ack {
                    "; the client delayed its ACK"
                } else {
                    ""
                }
            ),
        );
        x.delayed_ack = h.delayed_ack;
        x.count = 1;
        x
    }

    /// A request the LC line did not show: what covered its window — the
    /// requests the LC thread ran meanwhile (it waited behind them; its own
    /// short run is among the gaps), JVM pauses, TCP holds, faults.
    fn client_only(&self, r: &Request, v: &mut Vec<Raw>) {
        let (a, z) = self.window(r);
        self.queueing(r, a, z, v);
        // pauses while no request ran (those inside one are its own)
        let covered: Vec<Iv> = self.lc_spans.iter().map(|s| s.0).collect();
        let paused: u64 = gaps(a, z, &covered)
            .iter()
            .map(|g| overlap_sum(&self.pause_ivs, g.start, g.end))
            .sum();
        if paused > 0 {
            v.push(Raw::new(
                CauseKind::JvmPause,
                paused,
                format!("a JVM pause covered {} of it", ms(paused)),
            ));
        }
        // holds on the LC thread's sockets it waited behind (its response
        // arrived after they ended)
        let mut held = 0u64;
        let mut worst: Option<&Hold> = None;
        for h in &self.holds {
            if (self.lc_socks.is_empty() || self.lc_socks.contains(&h.sock)) && h.iv.end <= z {
                let ov = h.iv.overlap(a, z);
                if ov > 0 {
                    held += ov;
                    if worst.is_none_or(|w| w.iv.end - w.iv.start < h.iv.end - h.iv.start) {
                        worst = Some(h);
                    }
                }
            }
        }
        if let Some(h) = worst {
            v.push(self.held(h, held, "a response ahead of it or its own"));
        }
        if let Some(lc) = self.rec.target.lc_tid {
            self.faults(lc, a, z, v);
        }
    }

    /// Wake-ups between the LC thread and the JIT's compiler threads, either
    /// way, inside `[a, b)`.
    fn jit_exchanges(&self, lc: u32, a: u64, b: u64) -> u64 {
        let count = |wakee: u32, from: &dyn Fn(u32) -> bool| -> u64 {
            self.tl.wakeups.get(&wakee).map_or(0, |v| {
                let i = v.partition_point(|w| w.t < a);
                v[i..]
                    .iter()
                    .take_while(|w| w.t < b)
                    .filter(|w| from(w.waker))
                    .count() as u64
            })
        };
        let by_jit = count(lc, &|w| self.compilers.contains(&w));
        let to_jit: u64 = self.compilers.iter().map(|&c| count(c, &|w| w == lc)).sum();
        by_jit + to_jit
    }

    /// Beside it, over its whole window: batch work on the batch lanes.
    fn beside(&self, r: &Request, v: &mut Vec<Raw>) {
        let (a, z) = self.window(r);
        let mut co: HashMap<u32, u64> = HashMap::new();
        for &cpu in &self.rec.target.batch_cpus {
            if let Some(c) = self.tl.cpus.get(cpu as usize) {
                for (t, ns) in c.who_ran(a, z) {
                    if self.foreign(t) {
                        *co.entry(t).or_default() += ns;
                    }
                }
            }
        }
        let corun: u64 = co.values().sum();
        if corun > 0 {
            let mut by: Vec<(u32, u64)> = co.into_iter().collect();
            by.sort_by_key(|x| std::cmp::Reverse(x.1));
            let mut x = Raw::new(
                CauseKind::BatchCorun,
                corun,
                format!(
                    "{} of other work on the batch lanes beside it, most by {}",
                    ms(corun),
                    self.thread(by[0].0)
                ),
            );
            x.who = by.iter().take(5).map(|(t, _)| self.thread(*t)).collect();
            v.push(x);
        }
    }

    /// The report of request `i`: its causes shared and sorted.
    fn report(&self, i: usize) -> RequestReport {
        let (lat, raw) = self.causes(i);
        let r = &self.reqs[i];
        let p = &self.params;
        let mut causes: Vec<Cause> = raw
            .into_iter()
            .map(|x| {
                let share = if lat > 0 {
                    x.ns as f64 * 100.0 / lat as f64
                } else {
                    0.0
                };
                Cause {
                    kind: x.kind,
                    ns: x.ns,
                    share_pct: share,
                    attributed: x.ns >= p.min_cause_ns && share >= p.min_share_pct,
                    who: x.who,
                    behind: x.behind,
                    count: x.count,
                    major: x.major,
                    huge: x.huge,
                    delayed_ack: x.delayed_ack,
                    text: x.text,
                }
            })
            .collect();
        causes.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.kind.cmp(&b.kind)));
        let top = causes.iter().find(|c| c.attributed).map(|c| c.kind);
        let top_hazard = causes
            .iter()
            .find(|c| c.attributed && c.kind.is_hazard())
            .map(|c| c.kind);
        let at = r
            .client
            .map_or(r.begin_ns, |c| c.intended_ns.min(r.begin_ns))
            .saturating_sub(self.rec.start_ns);
        RequestReport {
            id: r.id,
            latency_ns: lat,
            at_ns: at,
            span: r.on_lc_line.then(|| {
                (
                    r.begin_ns.saturating_sub(self.rec.start_ns),
                    r.end_ns.saturating_sub(self.rec.start_ns),
                )
            }),
            causes,
            top,
            top_hazard,
            root_hazard: None,
        }
    }
}

fn percentile(sorted: &[u64], pct: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Studies `rec` with the client's spans `client` (may be empty).
pub fn study(rec: &TraceRecord, client: &[ClientSpan], params: StudyParams) -> TraceReport {
    let tl = Timeline::build(rec);
    let reqs = requests(rec, client);
    let lc_spans: Vec<(Iv, u64)> = reqs
        .iter()
        .filter(|r| r.on_lc_line)
        .map(|r| {
            (
                Iv {
                    start: r.begin_ns,
                    end: r.end_ns,
                },
                r.id,
            )
        })
        .collect();
    let pauses = pauses_of(rec);
    let pause_ivs = merge(
        pauses
            .iter()
            .map(|p| Iv {
                start: p.start_ns,
                end: p.end_ns,
            })
            .collect(),
        0,
    );
    let compilers: Vec<u32> = rec
        .threads
        .iter()
        .filter(|(_, t)| {
            rec.target.tgids.contains(&t.tgid) && jvm_role(&t.comm) == Some(JvmRole::Compiler)
        })
        .map(|(&tid, _)| tid)
        .collect();
    let hs = holds(rec);
    let lc_socks: Vec<u64> = match rec.target.lc_tid {
        Some(lc) => {
            let mut v: Vec<u64> = hs.iter().filter(|h| h.tid == lc).map(|h| h.sock).collect();
            v.sort_unstable();
            v.dedup();
            v
        }
        None => Vec::new(),
    };
    let ctx = Ctx {
        rec,
        tl,
        reqs,
        lc_spans,
        pauses,
        pause_ivs,
        compilers,
        lc_socks,
        holds: hs,
        params,
    };
    let lat: Vec<u64> = (0..ctx.reqs.len())
        .map(|i| ctx.latency(&ctx.reqs[i]).0)
        .collect();
    let mut sorted = lat.clone();
    sorted.sort_unstable();
    let threshold = percentile(&sorted, params.above_pct);
    // above the percentile (strictly: ties at it are the bulk); when nothing
    // is, the slowest
    let mut slow_idx: Vec<usize> = (0..ctx.reqs.len())
        .filter(|&i| lat[i] > threshold)
        .collect();
    if slow_idx.is_empty() {
        slow_idx = (0..ctx.reqs.len())
            .filter(|&i| lat[i] >= threshold && threshold > 0)
            .collect();
    }
    slow_idx.sort_by(|&a, &b| lat[b].cmp(&lat[a]));
    let index: HashMap<u64, usize> = ctx
        .reqs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id, i))
        .collect();
    let mut slow: Vec<RequestReport> = slow_idx.iter().map(|&i| ctx.report(i)).collect();
    for s in &mut slow {
        if let Some(q) = s
            .causes
            .iter()
            .find(|c| c.kind == CauseKind::Queueing && c.attributed)
        {
            if let Some(&k) = q.behind.first().and_then(|id| index.get(id)) {
                s.root_hazard = ctx.report(k).top_hazard;
            }
        }
    }
    let counts = CauseKind::ALL
        .into_iter()
        .map(|k| CauseCount {
            kind: k,
            attributed: slow
                .iter()
                .filter(|s| s.causes.iter().any(|c| c.kind == k && c.attributed))
                .count() as u64,
            top: slow.iter().filter(|s| s.top == Some(k)).count() as u64,
            hazard_top: slow
                .iter()
                .filter(|s| s.top_hazard.or(s.root_hazard) == Some(k))
                .count() as u64,
            total_ns: slow
                .iter()
                .flat_map(|s| s.causes.iter())
                .filter(|c| c.kind == k)
                .map(|c| c.ns)
                .sum(),
        })
        .collect();
    let facts = facts(&ctx);
    let lc_thread = rec.target.lc_tid.map(|t| ctx.thread(t));
    let mut notes = rec.notes.clone();
    if client.is_empty() {
        notes.push(
            "no client spans: latency is begin → response leaving the service; time queued before the begin is not seen"
                .into(),
        );
    } else if rec.spans.is_empty() && matches!(rec.span_source, SpanSource::None) {
        notes.push(
            "no LC line: requests are the client's spans alone; what the service did inside them is not split"
                .into(),
        );
    }
    if rec.target.lc_tid.is_none() {
        notes.push(
            "the LC thread is not known: its periods (preemption, waits, faults) are not split"
                .into(),
        );
    }
    TraceReport {
        schema: REPORT_SCHEMA.into(),
        target: rec.target.spec.clone(),
        tgids: rec.target.tgids.clone(),
        lc_thread,
        duration_ns: rec.duration_ns(),
        span_source: rec.span_source.clone(),
        client_spans: !client.is_empty(),
        requests: ctx.reqs.len() as u64,
        latency: LatencySummary {
            count: sorted.len() as u64,
            p50_ns: percentile(&sorted, 50.0),
            p99_ns: percentile(&sorted, 99.0),
            max_ns: sorted.last().copied().unwrap_or(0),
        },
        params,
        threshold_ns: threshold,
        slow,
        counts,
        facts,
        signals: rec.signals.clone(),
        lost: rec.counts.lost,
        notes,
    }
}

fn facts(ctx: &Ctx<'_>) -> RunFacts {
    let rec = ctx.rec;
    let mut f = RunFacts {
        jvm_pauses: ctx.pauses.len() as u64,
        jvm_pause_ns: ctx.pauses.iter().map(Pause::len_ns).sum(),
        jvm_pause_max_ns: ctx.pauses.iter().map(Pause::len_ns).max().unwrap_or(0),
        ..RunFacts::default()
    };
    for (tid, v) in &ctx.tl.faults {
        if rec.target.lc_tid.is_some_and(|lc| lc != *tid) {
            continue;
        }
        for x in v {
            f.faults += 1;
            f.fault_ns += x.dur_ns;
            f.huge_faults += u64::from(x.huge);
            f.fault_max_ns = f.fault_max_ns.max(x.dur_ns);
        }
    }
    for h in &ctx.holds {
        if ctx.lc_socks.is_empty() || ctx.lc_socks.contains(&h.sock) {
            f.tcp_holds += 1;
            f.tcp_hold_ns += h.iv.end - h.iv.start;
            f.delayed_acks += u64::from(h.delayed_ack);
        }
    }
    f.jit_ns = ctx
        .compilers
        .iter()
        .map(|&t| ctx.tl.on_cpu(t, rec.start_ns, rec.end_ns))
        .sum();
    f
}

#[cfg(test)]
mod tests;
