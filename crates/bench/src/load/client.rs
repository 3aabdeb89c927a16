//! One **invocation** of the open-loop load generator against an LC
//! service, in its protocol ([`Protocol`]: the LC wire protocol, or a
//! service's own RESP or text lines): a sender thread and a receiver
//! thread on one TCP connection (`TCP_NODELAY`), pinned to the generator's
//! CPUs with a 1 ns timer slack and, where permitted, real-time priority;
//! the calling thread marks the edges of the measured window. The wire
//! protocol carries request ids; the text protocols answer in order, so
//! the k-th response answers request k (the sender sends them in order).
//!
//! A service that closes the connection mid-run does not stop the sweep:
//! the requests it never answered count as errors (with the latency they
//! reached), and the invocation says the connection was closed.

use super::{Accounting, Clock, MonoClock, Outcome, mono_ns, run_sender};
use crate::error::{BenchError, Result};
use crate::lc::Protocol;
use crate::lc::builtin::is_timeout;
use crate::lc::requests::RequestSet;
use elfen_cmd::proc::SchedClass;
use elfen_results::Distribution;
use elfen_wire::{self as wire, Kind, Response, Status};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Where the generator's threads run.
#[derive(Debug, Clone)]
pub struct GeneratorPlace {
    /// CPUs.
    pub cpus: Vec<u32>,
    /// Scheduling class.
    pub sched: SchedClass,
}

impl GeneratorPlace {
    fn enter(&self) -> Option<elfen_topo::PinGuard> {
        let pin = elfen_topo::PinGuard::with_cpus(&self.cpus).ok();
        elfen_cmd::proc::set_timer_slack_ns(1);
        if self.sched != SchedClass::Other {
            let _ = elfen_cmd::proc::set_sched(0, self.sched);
        }
        pin
    }
}

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
    let s =
        TcpStream::connect(addr).map_err(|e| BenchError::io(format!("connecting to {addr}"), e))?;
    s.set_nodelay(true)
        .map_err(|e| BenchError::io("setting TCP_NODELAY", e))?;
    Ok(s)
}

/// What the receiver thread returns.
struct Received {
    outcome: Outcome,
    service: Distribution,
    queued: Distribution,
    outside: Distribution,
    window_service_ns: u64,
    closed: bool,
    /// A response that is not the protocol (what was wrong).
    protocol_error: Option<String>,
}

/// One response, whatever the protocol.
#[derive(Debug, Clone, Copy)]
struct Answer {
    id: u64,
    ok: bool,
    service_ns: u64,
    queued_ns: u64,
}

/// Responses read from a connection: bytes buffered until a whole
/// response is there. Text protocols number their responses in order.
struct Reader {
    buf: Vec<u8>,
    have: usize,
    at: usize,
    next_id: u64,
}

impl Reader {
    fn new(first_id: u64) -> Reader {
        Reader {
            buf: vec![0; 64 << 10],
            have: 0,
            at: 0,
            next_id: first_id,
        }
    }

    /// Reads what the socket has (at least one byte, or the read's error
    /// or `Ok(0)` at its end).
    fn fill(&mut self, s: &mut TcpStream) -> std::io::Result<usize> {
        if self.at > 0 {
            self.buf.copy_within(self.at..self.have, 0);
            self.have -= self.at;
            self.at = 0;
        }
        if self.have == self.buf.len() {
            let n = self.buf.len();
            self.buf.resize(n * 2, 0);
        }
        let n = s.read(&mut self.buf[self.have..])?;
        self.have += n;
        Ok(n)
    }

    /// The next whole response in the buffer, if any.
    fn pop(&mut self, protocol: &Protocol) -> std::result::Result<Option<Answer>, String> {
        let rest = &self.buf[self.at..self.have];
        match protocol {
            Protocol::Elfen => {
                let Some(frame) = rest.first_chunk::<{ wire::RESPONSE_BYTES }>() else {
                    return Ok(None);
                };
                let r = Response::decode(frame);
                self.at += wire::RESPONSE_BYTES;
                Ok(Some(Answer {
                    id: r.id,
                    ok: r.status == Status::Ok,
                    service_ns: r.service_ns,
                    queued_ns: r.queued_ns,
                }))
            }
            Protocol::Text(p) => Ok(p.decode(rest)?.map(|(n, reply)| {
                self.at += n;
                self.next_id += 1;
                Answer {
                    id: self.next_id - 1,
                    ok: !reply.error,
                    service_ns: 0,
                    queued_ns: 0,
                }
            })),
        }
    }
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
    match protocol {
        Protocol::Elfen => out.extend_from_slice(&wire::request_bytes(
            i,
            set.arg(k, work_scale),
            &set.requests[k].payload,
            Kind::Work,
        )),
        Protocol::Text(p) => p.encode_request(k as u64, out),
    }
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
    fn on_answer(&mut self, r: &Answer, now: u64) {
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
    let stream = connect(addr)?;
    let mut rx_stream = stream
        .try_clone()
        .map_err(|e| BenchError::io("cloning the client socket", e))?;
    rx_stream
        .set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| BenchError::io("socket timeout", e))?;
    let clock = MonoClock;
    let t0 = clock.now_ns() + 5_000_000;
    let win = (t0 + plan.warmup_ns, t0 + plan.warmup_ns + plan.duration_ns);
    let sender_done = AtomicU64::new(0);
    let in_window = AtomicU64::new(0);
    let tids = Mutex::new(Vec::new());
    let quit = AtomicBool::new(false);

    std::thread::scope(|scope| -> Result<InvocationResult> {
        let sender = scope.spawn(|| {
            let _pin = place.enter();
            tids.lock().expect("tids").push(elfen_cmd::proc::gettid());
            let mut s = &stream;
            let local_stop = AtomicBool::new(false);
            let mut out = Vec::with_capacity(512);
            let (n, e) = run_sender(&MonoClock, t0, &plan.offsets, &local_stop, |i| {
                if stop.load(Ordering::Relaxed) || quit.load(Ordering::Relaxed) {
                    local_stop.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                let now = mono_ns();
                if now >= win.0 && now < win.1 {
                    in_window.fetch_add(1, Ordering::Relaxed);
                }
                out.clear();
                let k = plan.picks[i] as usize;
                encode(protocol, &plan.set, i as u64, k, plan.work_scale, &mut out);
                s.write_all(&out)
            });
            sender_done.store(mono_ns().max(1), Ordering::Release);
            (n, e)
        });
        let receiver = scope.spawn(|| {
            let _pin = place.enter();
            tids.lock().expect("tids").push(elfen_cmd::proc::gettid());
            receive(&mut rx_stream, protocol, plan, t0, win, &sender_done, &quit)
        });
        // Window edges, in short sleeps so Ctrl-C is noticed.
        let mut interrupted = false;
        for (edge, at) in [(Edge::Start, win.0), (Edge::End, win.1)] {
            while clock.now_ns() < at {
                if stop.load(Ordering::Relaxed) {
                    interrupted = true;
                    break;
                }
                clock.sleep_until_ns(at.min(clock.now_ns() + 50_000_000));
            }
            if interrupted {
                break;
            }
            on_edge(edge);
        }
        if interrupted {
            quit.store(true, Ordering::Relaxed);
        }
        let (sent, send_err) = sender
            .join()
            .map_err(|_| BenchError::Service("sender panicked".into()))?;
        if stop.load(Ordering::Relaxed) {
            quit.store(true, Ordering::Relaxed);
        }
        let rx = receiver
            .join()
            .map_err(|_| BenchError::Service("receiver panicked".into()))?;
        if interrupted || stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        if let Some(e) = &rx.protocol_error {
            return Err(BenchError::Service(format!(
                "the LC service's response is not its protocol: {e}"
            )));
        }
        // A send failing because the service closed the connection is
        // counted (unanswered requests are errors); other failures are not
        // the service's doing.
        let closed = rx.closed
            || send_err.as_ref().is_some_and(|e| {
                matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                )
            });
        if let Some(e) = send_err.filter(|_| !closed) {
            return Err(BenchError::io("sending requests", e));
        }
        let secs = plan.duration_ns as f64 / 1e9;
        Ok(InvocationResult {
            outcome: rx.outcome,
            rps_achieved: in_window.load(Ordering::Relaxed) as f64 / secs,
            service_us: rx.service,
            queued_us: rx.queued,
            outside_us: rx.outside,
            window_service_ns: rx.window_service_ns,
            sent,
            connection_closed: closed,
            tids: tids.lock().expect("tids").clone(),
        })
    })
}

/// The receiver: reads responses until every request is answered, the
/// drain time after the last send has passed, the connection closes, or
/// `quit`. Responses that arrive in one read share its arrival time.
fn receive(
    rx: &mut TcpStream,
    protocol: &Protocol,
    plan: &InvocationPlan,
    t0: u64,
    win: (u64, u64),
    sender_done: &AtomicU64,
    quit: &AtomicBool,
) -> Received {
    let mut resp = Responses::new(t0, plan.offsets.clone(), plan.warmup_ns, win);
    let mut reader = Reader::new(0);
    let span_end = t0 + plan.offsets.last().copied().unwrap_or(0);
    let mut closed = false;
    let mut protocol_error = None;
    'read: loop {
        if resp.all_answered() || quit.load(Ordering::Relaxed) {
            break;
        }
        let done = sender_done.load(Ordering::Acquire);
        if done != 0 && mono_ns() > done.max(span_end) + plan.drain_ns {
            break;
        }
        match reader.fill(rx) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {
                let now = mono_ns();
                loop {
                    match reader.pop(protocol) {
                        Ok(Some(r)) => resp.on_answer(&r, now),
                        Ok(None) => break,
                        Err(e) => {
                            protocol_error = Some(e);
                            break 'read;
                        }
                    }
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    let (outcome, [service, queued, outside], window_service_ns) = resp.finish(mono_ns());
    Received {
        outcome,
        service,
        queued,
        outside,
        window_service_ns,
        closed,
        protocol_error,
    }
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
    let mut conn = (connect(addr)?, Reader::new(0));
    let mut out = Vec::with_capacity(set.requests.len());
    let mut frame = Vec::with_capacity(512);
    for (i, r) in set.requests.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        frame.clear();
        // a text protocol's request reads key `arg`
        let k = match protocol {
            Protocol::Elfen => i,
            Protocol::Text(_) => r.arg as usize,
        };
        encode(protocol, set, i as u64, k, work_scale, &mut frame);
        let round_trip = |(s, rd): &mut (TcpStream, Reader)| -> std::io::Result<(Answer, u64)> {
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
                conn = (connect(addr)?, Reader::new(i as u64));
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
                Protocol::Elfen => String::from_utf8_lossy(&r.payload),
                Protocol::Text(_) => String::from_utf8_lossy(&frame[..frame.len().min(120)]),
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
