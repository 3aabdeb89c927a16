//! An open-loop load that keeps every request's span: the harness's
//! generator (`elfen_bench::load`: Poisson arrivals computed up front,
//! each request sent at its intended time or at once if late, latency from
//! the intended time, HdrHistogram) on one connection, with a sender and a
//! receiver thread, recording a [`ClientSpan`] per request — what the
//! profiler needs to name the requests a client saw slow. Request ids are
//! `id_base + i`, so several loads against one service have distinct ids.

use crate::error::TraceError;
use crate::spans::ClientSpan;
use elfen_bench::lc::builtin::is_timeout;
use elfen_bench::lc::requests::RequestSet;
use elfen_bench::load::{Clock, MonoClock, mono_ns, new_histogram, poisson_offsets, run_sender};
use elfen_wire::{self as wire, Kind, Response, Status};
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One load.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Requests per second (Poisson).
    pub rps: f64,
    /// How long requests are sent.
    pub duration: Duration,
    /// Longest wait for the last responses after the last send.
    pub drain: Duration,
    /// The requests, sent shuffled pass after pass.
    pub set: std::sync::Arc<RequestSet>,
    /// Seed of the arrivals and the shuffle.
    pub seed: u64,
    /// The first request id.
    pub id_base: u64,
    /// CPUs of the sender and receiver threads (empty: unpinned).
    pub cpus: Vec<u32>,
    /// Their scheduling class (the harness's generator runs `SCHED_FIFO`
    /// where permitted, so other work cannot make it late).
    pub sched: elfen_cmd::proc::SchedClass,
}

/// What a load measured.
#[derive(Debug)]
pub struct LoadResult {
    /// Every request sent, in send order.
    pub spans: Vec<ClientSpan>,
    /// Latency from the intended send time of every request, ns (an
    /// unanswered one with the latency it had reached at the end).
    pub hist: Histogram<u64>,
    /// Requests unanswered or answered with an error.
    pub errors: u64,
    /// Thread ids of the sender and the receiver.
    pub tids: Vec<u32>,
    /// The service closed the connection before every response came.
    pub closed: bool,
}

/// Sends `plan` to `addr` (one `TCP_NODELAY` connection), until done or
/// `stop`.
pub fn drive(
    addr: SocketAddr,
    plan: &LoadPlan,
    stop: &AtomicBool,
) -> Result<LoadResult, TraceError> {
    check(plan)?;
    let (stream, mut rx) = connect(addr)?;
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let offsets = poisson_offsets(plan.rps, plan.duration.as_nanos() as u64, &mut rng);
    let picks = plan.set.sequence(offsets.len(), &mut rng);
    let n = offsets.len();
    let t0 = MonoClock.now_ns() + 2_000_000;
    let sent: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let sender_done = AtomicU64::new(0);
    let tids = std::sync::Mutex::new(Vec::new());
    let (received, closed) = std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            let _pin = place(plan, &tids);
            let mut s = &stream;
            let local = AtomicBool::new(false);
            run_sender(&MonoClock, t0, &offsets, &local, |i| {
                if stop.load(Ordering::Relaxed) {
                    local.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                let k = picks[i] as usize;
                let r = &plan.set.requests[k];
                let frame = wire::request_bytes(
                    plan.id_base + i as u64,
                    plan.set.arg(k, 1.0),
                    &r.payload,
                    Kind::Work,
                );
                sent[i].store(mono_ns(), Ordering::Relaxed);
                s.write_all(&frame)
            });
            sender_done.store(mono_ns().max(1), Ordering::Release);
        });
        let receiver = scope.spawn(|| {
            let _pin = place(plan, &tids);
            let span_end = t0 + offsets.last().copied().unwrap_or(0);
            receive(&mut rx, plan, n, span_end, &sender_done, stop)
        });
        let _ = sender.join();
        receiver.join().unwrap_or_default()
    });
    let end = mono_ns();
    let (spans, hist, errors) = tally(plan, t0, &offsets, &sent, &received, end);
    Ok(LoadResult {
        spans,
        hist,
        errors,
        tids: tids.into_inner().expect("tids"),
        closed,
    })
}

/// A usage error unless `plan` has a positive rate and requests.
fn check(plan: &LoadPlan) -> Result<(), TraceError> {
    if !(plan.rps > 0.0 && plan.rps.is_finite()) {
        return Err(TraceError::Usage(format!(
            "--rps must be > 0, not {}",
            plan.rps
        )));
    }
    if plan.set.requests.is_empty() {
        return Err(TraceError::Usage("the request set is empty".into()));
    }
    Ok(())
}

/// One `TCP_NODELAY` connection to `addr`: the sender's stream and the
/// receiver's clone of it (reads time out every 20 ms, so it sees the end).
fn connect(addr: SocketAddr) -> Result<(TcpStream, TcpStream), TraceError> {
    let io = |what: &str, e: std::io::Error| TraceError::Usage(format!("{what} {addr}: {e}"));
    let stream = TcpStream::connect(addr).map_err(|e| io("connecting to", e))?;
    stream
        .set_nodelay(true)
        .map_err(|e| io("TCP_NODELAY on", e))?;
    let rx = stream
        .try_clone()
        .map_err(|e| io("cloning the socket of", e))?;
    rx.set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| io("a read timeout on", e))?;
    Ok((stream, rx))
}

/// Places the calling load thread as `plan` asks (its CPUs, its
/// scheduling class, 1 ns timer slack) and records its tid; the pin lasts
/// as long as the returned guard.
fn place(plan: &LoadPlan, tids: &std::sync::Mutex<Vec<u32>>) -> Option<elfen_topo::PinGuard> {
    let pin = (!plan.cpus.is_empty())
        .then(|| elfen_topo::PinGuard::with_cpus(&plan.cpus).ok())
        .flatten();
    elfen_cmd::proc::set_timer_slack_ns(1);
    if plan.sched != elfen_cmd::proc::SchedClass::Other {
        // refused without privileges: the load then runs SCHED_OTHER
        let _ = elfen_cmd::proc::set_sched(0, plan.sched);
    }
    tids.lock().expect("tids").push(elfen_cmd::proc::gettid());
    pin
}

/// The receiver: reads responses until all `n` are in, the drain after the
/// sender's end (or the last intended send, `span_end`) is over, `stop`
/// once the sender is done, or the connection closes. Per request: when
/// its response came and whether it was OK; and whether the connection
/// closed.
fn receive(
    rx: &mut TcpStream,
    plan: &LoadPlan,
    n: usize,
    span_end: u64,
    sender_done: &AtomicU64,
    stop: &AtomicBool,
) -> (Vec<Option<(u64, bool)>>, bool) {
    let mut got: Vec<Option<(u64, bool)>> = vec![None; n];
    let mut buf = [0u8; wire::RESPONSE_BYTES];
    let mut have = 0;
    let mut answered = 0;
    let mut closed = false;
    while answered < n {
        let done = sender_done.load(Ordering::Acquire);
        if done != 0 && mono_ns() > done.max(span_end) + plan.drain.as_nanos() as u64 {
            break;
        }
        if stop.load(Ordering::Relaxed) && done != 0 {
            break;
        }
        match rx.read(&mut buf[have..]) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(k) => {
                have += k;
                if have < wire::RESPONSE_BYTES {
                    continue;
                }
                have = 0;
                let now = mono_ns();
                let r = Response::decode(&buf);
                let i = r.id.wrapping_sub(plan.id_base) as usize;
                if let Some(slot) = got.get_mut(i) {
                    if slot.is_none() {
                        *slot = Some((now, r.status == Status::Ok));
                        answered += 1;
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
    (got, closed)
}

/// Every request sent, its span and its latency from the intended send
/// time (an unanswered one: up to `end`), and the count of requests
/// unanswered or answered with an error.
fn tally(
    plan: &LoadPlan,
    t0: u64,
    offsets: &[u64],
    sent: &[AtomicU64],
    received: &[Option<(u64, bool)>],
    end: u64,
) -> (Vec<ClientSpan>, Histogram<u64>, u64) {
    let mut hist = new_histogram();
    let mut spans = Vec::with_capacity(offsets.len());
    let mut errors = 0;
    for (i, &off) in offsets.iter().enumerate() {
        let s = sent[i].load(Ordering::Relaxed);
        if s == 0 {
            continue; // never sent (stopped early)
        }
        let intended = t0 + off;
        let r = received.get(i).copied().flatten();
        match r {
            Some((at, ok)) => {
                hist.saturating_record(at.saturating_sub(intended).max(1));
                if !ok {
                    errors += 1;
                }
            }
            None => {
                errors += 1;
                hist.saturating_record(end.saturating_sub(intended).max(1));
            }
        }
        spans.push(ClientSpan {
            id: plan.id_base + i as u64,
            intended_ns: intended,
            sent_ns: s,
            received_ns: r.map(|x| x.0),
        });
    }
    (spans, hist, errors)
}
