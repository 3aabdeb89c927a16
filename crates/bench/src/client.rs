//! One **invocation** of the open-loop load generator against the LC
//! service: a sender thread and a receiver thread on one TCP connection
//! (`TCP_NODELAY`), both pinned to the batch lanes with a 1 ns timer slack;
//! the calling thread marks the edges of the measured window.

use crate::error::{BenchError, Result};
use crate::loadgen::{Accounting, Clock, MonoClock, Outcome, mono_ns, run_sender};
use crate::service::{RESPONSE_BYTES, connect, decode_response, encode_request, latency_buckets};
use elfen_results::Distribution;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one invocation sends.
#[derive(Debug, Clone)]
pub struct InvocationPlan {
    /// Intended send offsets, ns from the start (warm-up included).
    pub offsets: Vec<u64>,
    /// Work of each request, chase steps.
    pub steps: Vec<u64>,
    /// Warm-up, ns.
    pub warmup_ns: u64,
    /// Measured window, ns.
    pub duration_ns: u64,
    /// Longest wait for outstanding responses, ns.
    pub drain_ns: u64,
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
    /// Server-side service times of measured requests, µs.
    pub service_us: Distribution,
    /// Time measured requests waited in the server's queue (dispatch to
    /// begin), µs.
    pub queued_us: Distribution,
    /// The rest of each measured request's latency (send lateness, network,
    /// dispatch, response delivery): latency − queued − service, µs.
    pub outside_us: Distribution,
    /// Requests sent in total.
    pub sent: usize,
    /// Thread ids of the sender and receiver.
    pub tids: Vec<u32>,
}

/// Runs one invocation; `on_edge` is called on the calling thread at the
/// window's start and end. `stop` (Ctrl-C) ends it early with
/// [`BenchError::Interrupted`].
pub fn run_invocation(
    addr: SocketAddr,
    plan: &InvocationPlan,
    cpus: &[u32],
    stop: &AtomicBool,
    mut on_edge: impl FnMut(Edge),
) -> Result<InvocationResult> {
    assert_eq!(plan.offsets.len(), plan.steps.len());
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
    let sender_done = Arc::new(AtomicU64::new(0));
    let in_window = Arc::new(AtomicU64::new(0));
    let tids = Arc::new(Mutex::new(Vec::new()));
    let send_err = Arc::new(Mutex::new(None::<std::io::Error>));
    let receiver_quit = Arc::new(AtomicBool::new(false));
    let (offsets, steps) = (Arc::new(plan.offsets.clone()), Arc::new(plan.steps.clone()));
    let stop_flag = Arc::new(AtomicU32::new(0));

    std::thread::scope(|scope| -> Result<InvocationResult> {
        let sender = {
            let (offsets, steps, sender_done, in_window, tids, send_err, stop_flag) = (
                offsets.clone(),
                steps.clone(),
                sender_done.clone(),
                in_window.clone(),
                tids.clone(),
                send_err.clone(),
                stop_flag.clone(),
            );
            let mut s = stream;
            let cpus = cpus.to_vec();
            scope.spawn(move || {
                let _pin = elfen_topo::PinGuard::with_cpus(&cpus).ok();
                crate::sys::set_timer_slack_ns(1);
                tids.lock().expect("tids").push(crate::sys::gettid());
                let local_stop = AtomicBool::new(false);
                let (n, e) = run_sender(&MonoClock, t0, &offsets, &local_stop, |i| {
                    if stop.load(Ordering::Relaxed) || stop_flag.load(Ordering::Relaxed) != 0 {
                        local_stop.store(true, Ordering::Relaxed);
                        return Ok(());
                    }
                    let now = mono_ns();
                    if now >= win.0 && now < win.1 {
                        in_window.fetch_add(1, Ordering::Relaxed);
                    }
                    s.write_all(&encode_request(i as u64, steps[i]))
                });
                *send_err.lock().expect("send_err") = e;
                sender_done.store(mono_ns().max(1), Ordering::Release);
                n
            })
        };
        let receiver = {
            let (offsets, sender_done, tids, receiver_quit) = (
                offsets.clone(),
                sender_done.clone(),
                tids.clone(),
                receiver_quit.clone(),
            );
            let cpus = cpus.to_vec();
            let (warmup, drain) = (plan.warmup_ns, plan.drain_ns);
            let span_end = t0 + offsets.last().copied().unwrap_or(0);
            scope.spawn(move || {
                let _pin = elfen_topo::PinGuard::with_cpus(&cpus).ok();
                crate::sys::set_timer_slack_ns(1);
                tids.lock().expect("tids").push(crate::sys::gettid());
                let mut acc = Accounting::new(t0, offsets.to_vec(), warmup);
                let mut service = latency_buckets();
                let mut buf = [0u8; RESPONSE_BYTES];
                let mut have = 0usize;
                let mut queued = latency_buckets();
                let mut outside = latency_buckets();
                loop {
                    if acc.all_answered() || receiver_quit.load(Ordering::Relaxed) {
                        break;
                    }
                    let done = sender_done.load(Ordering::Acquire);
                    if done != 0 && mono_ns() > done.max(span_end) + drain {
                        break;
                    }
                    match rx_stream.read(&mut buf[have..]) {
                        Ok(0) => break,
                        Ok(n) => {
                            have += n;
                            if have == RESPONSE_BYTES {
                                have = 0;
                                let now = mono_ns();
                                let (id, service_ns, queued_ns) = decode_response(&buf);
                                if let Some(lat) = acc.on_response(id as usize, now) {
                                    service.record(service_ns as f64 / 1e3);
                                    queued.record(queued_ns as f64 / 1e3);
                                    outside.record(
                                        lat.saturating_sub(service_ns + queued_ns) as f64 / 1e3,
                                    );
                                }
                            }
                        }
                        Err(e) if crate::service::is_timeout(&e) => {}
                        Err(_) => break,
                    }
                }
                (acc.finish(mono_ns()), service, queued, outside)
            })
        };
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
            stop_flag.store(1, Ordering::Relaxed);
            receiver_quit.store(true, Ordering::Relaxed);
        }
        let sent = sender
            .join()
            .map_err(|_| BenchError::Service("sender panicked".into()))?;
        if stop.load(Ordering::Relaxed) {
            receiver_quit.store(true, Ordering::Relaxed);
        }
        let (outcome, service_us, queued_us, outside_us) = receiver
            .join()
            .map_err(|_| BenchError::Service("receiver panicked".into()))?;
        if interrupted || stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        if let Some(e) = send_err.lock().expect("send_err").take() {
            return Err(BenchError::io("sending requests", e));
        }
        let secs = plan.duration_ns as f64 / 1e9;
        Ok(InvocationResult {
            outcome,
            rps_achieved: in_window.load(Ordering::Relaxed) as f64 / secs,
            service_us,
            queued_us,
            outside_us,
            sent,
            tids: tids.lock().expect("tids").clone(),
        })
    })
}
