//! An open-loop load that keeps every request's span: the load kit's
//! open-loop connection (`elfen_load::conn`: Poisson arrivals computed up
//! front, each request sent at its intended time or at once if late,
//! latency from the intended time, HdrHistogram), its request hook
//! recording a [`ClientSpan`] per request — what the profiler needs to
//! name the requests a client saw slow. Request ids are `id_base + i`, so
//! several loads against one service have distinct ids.

use crate::error::TraceError;
use crate::spans::ClientSpan;
use elfen_load::conn::{Answer, Connection, Drive, Place, Protocol, Receive};
use elfen_load::requests::RequestSet;
use elfen_load::{mono_ns, new_histogram, poisson_offsets};
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::net::SocketAddr;
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
    let conn = Connection::open(addr)
        .map_err(|e| TraceError::Usage(format!("connecting to {addr}: {e}")))?;
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let offsets = poisson_offsets(plan.rps, plan.duration.as_nanos() as u64, &mut rng);
    let picks = plan.set.sequence(offsets.len(), &mut rng);
    let n = offsets.len();
    let t0 = mono_ns() + 2_000_000;
    let sent: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let place = Place {
        cpus: plan.cpus.clone(),
        sched: plan.sched,
    };
    let mut got = Received {
        at: vec![None; n],
        answered: 0,
        id_base: plan.id_base,
    };
    let request = |seq: u64, _due: u64, now: u64, out: &mut Vec<u8>| {
        let i = seq as usize;
        let k = picks[i] as usize;
        sent[i].store(now, Ordering::Relaxed);
        let id = plan.id_base + seq;
        Protocol::Wire.encode(id, plan.set.arg(k, 1.0), plan.set.payload(k), 0, out);
        true
    };
    let run = conn.drive(
        &Protocol::Wire,
        Drive {
            t0_ns: t0,
            offsets: offsets.iter().copied(),
            last_due_ns: t0 + offsets.last().copied().unwrap_or(0),
            drain_ns: plan.drain.as_nanos() as u64,
            place: &place,
            name: None,
        },
        request,
        &mut got,
        stop,
        |_| {},
    );
    let end = mono_ns();
    let (spans, hist, errors) = tally(plan, t0, &offsets, &sent, &got.at, end);
    Ok(LoadResult {
        spans,
        hist,
        errors,
        tids: run.tids,
        closed: run.closed,
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

/// Per request: when its first answer came and whether it was OK.
struct Received {
    at: Vec<Option<(u64, bool)>>,
    answered: usize,
    id_base: u64,
}

impl Receive for Received {
    fn answered(&mut self, a: &Answer, now_ns: u64) {
        let i = a.id.wrapping_sub(self.id_base) as usize;
        if let Some(slot) = self.at.get_mut(i) {
            if slot.is_none() {
                *slot = Some((now_ns, a.ok));
                self.answered += 1;
            }
        }
    }
    fn done(&self) -> bool {
        self.answered == self.at.len()
    }
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
