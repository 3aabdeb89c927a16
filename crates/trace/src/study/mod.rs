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
//!   wakers) unless a JVM pause covers it or a stop-the-world thread woke
//!   it from a safepoint ([`CauseKind::JvmPause`]), or a compiler thread
//!   woke it ([`CauseKind::JvmWarmup`]);
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

mod causes;
use causes::Raw;
pub mod timeline;

use crate::pause::{JvmRole, Pause, jvm_role, pauses_of};
use crate::record::{Event, SpanSource, TcpKind, TraceRecord};
use crate::report::{
    Cause, CauseCount, CauseKind, LatencySummary, REPORT_SCHEMA, RequestReport, RunFacts,
    StudyParams, ThreadRef, TraceReport,
};
use crate::spans::ClientSpan;
use std::collections::HashMap;
use timeline::merge;
pub use timeline::{Iv, Timeline};

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
    /// The target's stop-the-world threads (`VM Thread`, `GC Thread#N`).
    stw: Vec<u32>,
    lc_socks: Vec<u64>,
    holds: Vec<Hold>,
    params: StudyParams,
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

    /// The report of request `i`: its causes shared and sorted.
    fn report(&self, i: usize) -> RequestReport {
        let (lat, raw) = self.causes(i);
        let raw = merge_kinds(raw);
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

/// One cause per kind: parts of the same kind (a pause before the begin
/// and one during it, the dispatcher's faults and the LC thread's) summed.
fn merge_kinds(raw: Vec<Raw>) -> Vec<Raw> {
    let mut out: Vec<Raw> = Vec::new();
    for x in raw {
        match out.iter_mut().find(|o| o.kind == x.kind) {
            Some(o) => {
                o.ns += x.ns;
                o.count += x.count;
                o.major += x.major;
                o.huge += x.huge;
                o.delayed_ack |= x.delayed_ack;
                for w in x.who {
                    if !o.who.contains(&w) {
                        o.who.push(w);
                    }
                }
                o.behind.extend(x.behind);
                o.text = format!("{}; {}", o.text, x.text);
            }
            None => out.push(x),
        }
    }
    out
}

/// How many requests back a queue's root is looked for.
const ROOT_HOPS: usize = 16;

/// The request `r` queued behind the longest, when its queueing is named.
fn behind_of(r: &RequestReport) -> Option<u64> {
    r.causes
        .iter()
        .find(|c| c.kind == CauseKind::Queueing && c.attributed)
        .and_then(|q| q.behind.first().copied())
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
    let ctx = context(rec, client, params);
    let lat: Vec<u64> = (0..ctx.reqs.len())
        .map(|i| ctx.latency(&ctx.reqs[i]).0)
        .collect();
    let mut sorted = lat.clone();
    sorted.sort_unstable();
    let threshold = percentile(&sorted, params.above_pct);
    let slow_idx = slow_indices(&lat, threshold);
    let index: HashMap<u64, usize> = ctx
        .reqs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id, i))
        .collect();
    let mut slow: Vec<RequestReport> = slow_idx.iter().map(|&i| ctx.report(i)).collect();
    inherit_root_hazards(&ctx, &index, &mut slow);
    let counts = cause_counts(&slow);
    let facts = facts(&ctx);
    let lc_thread = rec.target.lc_tid.map(|t| ctx.thread(t));
    let notes = study_notes(rec, client);
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

/// What every request is studied against: the timeline, the requests, the
/// LC line's spans, the JVM's pauses and threads, the LC's sockets.
fn context<'a>(rec: &'a TraceRecord, client: &[ClientSpan], params: StudyParams) -> Ctx<'a> {
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
    let role_of = |role: JvmRole| -> Vec<u32> {
        rec.threads
            .iter()
            .filter(|(_, t)| rec.target.tgids.contains(&t.tgid) && jvm_role(&t.comm) == Some(role))
            .map(|(&tid, _)| tid)
            .collect()
    };
    let stw = role_of(JvmRole::StopTheWorld);
    let compilers = role_of(JvmRole::Compiler);
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
    Ctx {
        rec,
        tl,
        reqs,
        lc_spans,
        pauses,
        pause_ivs,
        compilers,
        stw,
        lc_socks,
        holds: hs,
        params,
    }
}

/// The requests above the `threshold` latency, slowest first.
fn slow_indices(lat: &[u64], threshold: u64) -> Vec<usize> {
    // above the percentile (strictly: ties at it are the bulk); when nothing
    // is, the slowest
    let mut slow_idx: Vec<usize> = (0..lat.len()).filter(|&i| lat[i] > threshold).collect();
    if slow_idx.is_empty() {
        slow_idx = (0..lat.len())
            .filter(|&i| lat[i] >= threshold && threshold > 0)
            .collect();
    }
    slow_idx.sort_by(|&a, &b| lat[b].cmp(&lat[a]));
    slow_idx
}

/// Each slow request's root hazard, inherited from the requests it queued
/// behind.
fn inherit_root_hazards(ctx: &Ctx<'_>, index: &HashMap<u64, usize>, slow: &mut [RequestReport]) {
    // a request that queued behind another inherits that one's hazard — its
    // own top hazard, or, when it queued too, its root's (followed up to
    // ROOT_HOPS requests back)
    let mut memo: HashMap<usize, Option<CauseKind>> = HashMap::new();
    for s in slow {
        let mut next = behind_of(s).and_then(|id| index.get(&id).copied());
        for _ in 0..ROOT_HOPS {
            let Some(k) = next else { break };
            if let Some(&h) = memo.get(&k) {
                s.root_hazard = h;
                break;
            }
            let rk = ctx.report(k);
            if rk.top_hazard.is_some() {
                memo.insert(k, rk.top_hazard);
                s.root_hazard = rk.top_hazard;
                break;
            }
            next = behind_of(&rk).and_then(|id| index.get(&id).copied());
        }
    }
}

/// How often each cause was named, top, or top hazard among the slow
/// requests, and its total time.
fn cause_counts(slow: &[RequestReport]) -> Vec<CauseCount> {
    CauseKind::ALL
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
        .collect()
}

/// What the report cannot see with this record: no client spans, no LC
/// line, no known LC thread.
fn study_notes(rec: &TraceRecord, client: &[ClientSpan]) -> Vec<String> {
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
    notes
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
