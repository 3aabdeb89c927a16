//! One **invocation** of the open-loop load generator against an LC
//! service, in its protocol ([`Protocol`]: the LC wire protocol, or a
//! service's own RESP or text lines), on the load kit's open-loop
//! connection (`elfen_load::conn`: a sender and a receiver thread on one
//! TCP connection, pinned to the generator's CPUs with a 1 ns timer slack
//! and, where permitted, real-time priority); the calling thread marks the
//! edges of the measured window. The wire protocol carries request ids;
//! the text protocols answer in order, so the k-th response answers
//! request k (the sender sends them in order).
//!
//! A service that closes the connection mid-run does not stop the sweep:
//! the requests it never answered count as errors (with the latency they
//! reached), and the invocation says the connection was closed.

use super::{Accounting, Clock, MonoClock, Outcome, mono_ns};
use crate::error::{BenchError, Result};
use crate::lc::Protocol;
use crate::lc::requests::RequestSet;
use elfen_load::conn::{Answer, AnswerReader, Connection, Drive, Receive};
use elfen_results::Distribution;
use elfen_wire::{Response, Status};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Buckets for demands, service times and latencies: 1 µs .. 10 s, 20 per
/// decade.
pub fn latency_buckets() -> Distribution {
    Distribution::log_buckets("us", 1.0, 1e7, 20)
}

/// What one invocation sends.
#[derive(Debug, Clone)]
pub struct InvocationPlan {
    /// Intended send offsets, ns from the start (warm-up included).
    pub offsets: Vec<u64>,
    /// Which request of the set each send is.
    pub picks: Vec<u32>,
    /// The request set.
    pub set: Arc<RequestSet>,
    /// Work scale of work requests (the demand calibration).
    pub work_scale: f64,
    /// Warm-up, ns.
    pub warmup_ns: u64,
    /// Measured window, ns.
    pub duration_ns: u64,
    /// Longest wait for outstanding responses, ns.
    pub drain_ns: u64,
}

/// Where the generator's threads run (CPUs, scheduling class).
pub type GeneratorPlace = elfen_load::conn::Place;

/// Window edges, reported to the caller's callback at (about) the instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// The measured window starts (end of warm-up).
    Start,
    /// The measured window ends.
    End,
}

/// What one invocation measured.
#[derive(Debug)]
pub struct InvocationResult {
    /// Latency accounting.
    pub outcome: Outcome,
    /// Requests actually sent inside the measured window, per second.
    pub rps_achieved: f64,
    /// Service times reported by the service for measured requests, µs
    /// (empty when the service reports none).
    pub service_us: Distribution,
    /// Time measured requests waited in the service's queue, µs.
    pub queued_us: Distribution,
    /// The rest of each measured request's latency (send lateness, network,
    /// dispatch, response delivery): latency − queued − service, µs.
    pub outside_us: Distribution,
    /// Sum of the service times of responses that arrived inside the
    /// window, ns (the LC's busy time when nobody publishes it).
    pub window_service_ns: u64,
    /// Requests sent in total.
    pub sent: usize,
    /// The service closed the connection before the end.
    pub connection_closed: bool,
    /// Thread ids of the sender and receiver.
    pub tids: Vec<u32>,
}

/// A client connection (TCP_NODELAY).
pub fn connect(addr: SocketAddr) -> Result<TcpStream> {
    elfen_load::conn::connect(addr).map_err(|e| BenchError::io(format!("connecting to {addr}"), e))
}

/// Appends request `i` (pick `k` of the set) in `protocol` to `out`.
fn encode(
    protocol: &Protocol,
    set: &RequestSet,
    i: u64,
    k: usize,
    work_scale: f64,
    out: &mut Vec<u8>,
) {
    protocol.encode(i, set.arg(k, work_scale), set.payload(k), k as u64, out);
}

/// What the responses of one invocation add up to: latency from intended
/// send times, the service's own service and queue times, and the service
/// time of the responses inside the measured window. Every field of a
/// response comes from the service, so any value is taken: an unknown or
/// repeated id is an error, sums saturate.
#[derive(Debug)]
pub struct Responses {
    acc: Accounting,
    service: Distribution,
    queued: Distribution,
    outside: Distribution,
    window_service_ns: u64,
    win: (u64, u64),
}

impl Responses {
    /// For requests intended at `t0 + offsets[i]`, measured from
    /// `t0 + warmup_ns`, with the measured window `win` (ns, monotonic).
    pub fn new(t0: u64, offsets: Vec<u64>, warmup_ns: u64, win: (u64, u64)) -> Responses {
        Responses {
            acc: Accounting::new(t0, offsets, warmup_ns),
            service: latency_buckets(),
            queued: latency_buckets(),
            outside: latency_buckets(),
            window_service_ns: 0,
            win,
        }
    }

    /// A response of elfen's wire protocol that arrived at `now` (ns, monotonic).
    pub fn on_response(&mut self, r: &Response, now: u64) {
        self.on_answer(
            &Answer {
                id: r.id,
                ok: r.status == Status::Ok,
                service_ns: r.service_ns,
                queued_ns: r.queued_ns,
            },
            now,
        );
    }

    /// A response of any protocol that arrived at `now` (ns, monotonic).
    pub fn on_answer(&mut self, r: &Answer, now: u64) {
        if !r.ok {
            self.acc.on_failure(r.id as usize, now);
            return;
        }
        if now >= self.win.0 && now < self.win.1 {
            self.window_service_ns = self.window_service_ns.saturating_add(r.service_ns);
        }
        if let Some(lat) = self.acc.on_response(r.id as usize, now) {
            if r.service_ns > 0 {
                self.service.record(r.service_ns as f64 / 1e3);
                self.queued.record(r.queued_ns as f64 / 1e3);
                let inside = r.service_ns.saturating_add(r.queued_ns);
                self.outside.record(lat.saturating_sub(inside) as f64 / 1e3);
            }
        }
    }

    /// Whether every request has been answered.
    pub fn all_answered(&self) -> bool {
        self.acc.all_answered()
    }

    /// The service time of the responses that arrived inside the window, ns.
    pub fn window_service_ns(&self) -> u64 {
        self.window_service_ns
    }

    /// Ends the accounting at `now` (unanswered requests are errors).
    pub fn finish(self, now: u64) -> (Outcome, [Distribution; 3], u64) {
        (
            self.acc.finish(now),
            [self.service, self.queued, self.outside],
            self.window_service_ns,
        )
    }
}

impl Receive for Responses {
    fn answered(&mut self, a: &Answer, now_ns: u64) {
        self.on_answer(a, now_ns);
    }
    fn done(&self) -> bool {
        self.all_answered()
    }
}

/// Runs one invocation in `protocol` (for text protocols the plan's picks
/// are keys); `on_edge` is called on the calling thread at the window's
/// start and end. `stop` (Ctrl-C) ends it early with
/// [`BenchError::Interrupted`].
pub fn run_invocation(
    addr: SocketAddr,
    protocol: &Protocol,
    plan: &InvocationPlan,
    place: &GeneratorPlace,
    stop: &AtomicBool,
    mut on_edge: impl FnMut(Edge),
) -> Result<InvocationResult> {
    assert_eq!(plan.offsets.len(), plan.picks.len());
    let conn =
        Connection::open(addr).map_err(|e| BenchError::io(format!("connecting to {addr}"), e))?;
    let clock = MonoClock;
    let t0 = clock.now_ns() + 5_000_000;
    let win = (t0 + plan.warmup_ns, t0 + plan.warmup_ns + plan.duration_ns);
    let in_window = AtomicU64::new(0);
    let mut responses = Responses::new(t0, plan.offsets.clone(), plan.warmup_ns, win);
    let mut interrupted = false;
    let drive = Drive {
        t0_ns: t0,
        offsets: plan.offsets.iter().copied(),
        last_due_ns: t0 + plan.offsets.last().copied().unwrap_or(0),
        drain_ns: plan.drain_ns,
        place,
        name: None,
    };
    let request = |seq: u64, _due: u64, now: u64, out: &mut Vec<u8>| {
        if now >= win.0 && now < win.1 {
            in_window.fetch_add(1, Ordering::Relaxed);
        }
        let k = plan.picks[seq as usize] as usize;
        encode(protocol, &plan.set, seq, k, plan.work_scale, out);
        true
    };
    let run = conn.drive(protocol, drive, request, &mut responses, stop, |quit| {
        // Window edges, in short sleeps so Ctrl-C is noticed.
        for (edge, at) in [(Edge::Start, win.0), (Edge::End, win.1)] {
            while clock.now_ns() < at {
                if stop.load(Ordering::Relaxed) {
                    interrupted = true;
                    quit.store(true, Ordering::Relaxed);
                    return;
                }
                clock.sleep_until_ns(at.min(clock.now_ns() + 50_000_000));
            }
            on_edge(edge);
        }
    });
    if interrupted || stop.load(Ordering::Relaxed) {
        return Err(BenchError::Interrupted);
    }
    if let Some(e) = &run.protocol_error {
        return Err(BenchError::Service(format!(
            "the LC service's response is not its protocol: {e}"
        )));
    }
    // A send failing because the service closed the connection is
    // counted (unanswered requests are errors); other failures are not
    // the service's doing.
    if let Some(e) = run.send_error.filter(|_| !run.closed) {
        return Err(BenchError::io("sending requests", e));
    }
    let (outcome, [service_us, queued_us, outside_us], window_service_ns) =
        responses.finish(mono_ns());
    let secs = plan.duration_ns as f64 / 1e9;
    Ok(InvocationResult {
        outcome,
        rps_achieved: in_window.load(Ordering::Relaxed) as f64 / secs,
        service_us,
        queued_us,
        outside_us,
        window_service_ns,
        sent: run.sent,
        connection_closed: run.closed,
        tids: run.tids,
    })
}

/// Sends every request of `set` once, one at a time, and waits for each
/// response: the service times with nothing else running (the paper's
/// Figure 1), µs — the service's own figure, or the round trip where it
/// reports none (text protocols). A connection the service closes is
/// opened again (once per request), so a service that drops connections
/// now and then can still be measured.
pub fn measure_demand(
    addr: SocketAddr,
    protocol: &Protocol,
    set: &RequestSet,
    work_scale: f64,
    stop: &AtomicBool,
) -> Result<Vec<f64>> {
    let mut conn = (connect(addr)?, AnswerReader::new(0));
    let mut out = Vec::with_capacity(set.requests.len());
    let mut frame = Vec::with_capacity(512);
    for (i, r) in set.requests.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        frame.clear();
        // a text protocol's request reads key `arg`
        let k = match protocol {
            Protocol::Text(_) => r.arg as usize,
            Protocol::Wire | Protocol::Http { .. } => i,
        };
        encode(protocol, set, i as u64, k, work_scale, &mut frame);
        let round_trip =
            |(s, rd): &mut (TcpStream, AnswerReader)| -> std::io::Result<(Answer, u64)> {
                let t = mono_ns();
                s.write_all(&frame)?;
                loop {
                    if let Some(a) = rd.pop(protocol).map_err(std::io::Error::other)? {
                        return Ok((a, mono_ns() - t));
                    }
                    if rd.fill(s)? == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                }
            };
        let (resp, rtt) = match round_trip(&mut conn) {
            Ok(x) => x,
            Err(_) => {
                conn = (connect(addr)?, AnswerReader::new(i as u64));
                round_trip(&mut conn).map_err(|e| {
                    BenchError::io(
                        format!("request {i} of the set, sent twice on fresh connections"),
                        e,
                    )
                })?
            }
        };
        if resp.id != i as u64 {
            return Err(BenchError::Service(format!(
                "response for request {}, expected {i}",
                resp.id
            )));
        }
        if !resp.ok {
            let what = match protocol {
                Protocol::Wire => String::from_utf8_lossy(&r.payload),
                Protocol::Text(_) | Protocol::Http { .. } => {
                    String::from_utf8_lossy(&frame[..frame.len().min(120)])
                }
            };
            return Err(BenchError::Service(format!(
                "request {i} of the set ({what:?}) was answered with an error"
            )));
        }
        out.push(
            if resp.service_ns > 0 {
                resp.service_ns
            } else {
                rtt
            } as f64
                / 1e3,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the wire fuzzing: a service answering with service and
    /// queue times near 2^64 overflowed the generator's sums (a panic in a
    /// debug build, a wrapped busy time in release). They saturate; unknown
    /// and repeated ids are errors.
    #[test]
    fn responses_with_extreme_fields_are_counted_not_panicked_on() {
        let t0 = 1_000_000;
        let mut r = Responses::new(t0, vec![0, 10, 20], 0, (t0, t0 + 1_000_000));
        let huge = |id| Response {
            id,
            service_ns: u64::MAX,
            queued_ns: u64::MAX,
            status: Status::Ok,
            result: 0,
        };
        r.on_response(&huge(0), t0 + 100);
        r.on_response(&huge(1), t0 + 200);
        r.on_response(&huge(1), t0 + 300); // repeated
        r.on_response(&huge(u64::MAX), t0 + 400); // unknown
        assert_eq!(r.window_service_ns(), u64::MAX);
        assert!(!r.all_answered());
        let (outcome, [service, _, outside], _) = r.finish(t0 + 2_000_000);
        assert_eq!(outcome.requests, 2);
        // request 2 unanswered, one repeat, one unknown id
        assert_eq!(outcome.errors, 3);
        assert_eq!((service.total(), outside.total()), (2, 2));
    }
}
