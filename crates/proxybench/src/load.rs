//! One open-loop **invocation** against a replica or the proxy, built on
//! the harness's generator (`elfen_bench::load`: Poisson offsets computed
//! beforehand, each request sent at its intended time by `run_sender`,
//! latency from the intended time by `Accounting`, requests unanswered at
//! the end recorded with the latency they reached) on one connection:
//! wire-protocol requests matched to answers by id, or HTTP/1.1 `GET`s
//! pipelined on a keep-alive connection, answered in order. The sender and
//! receiver run on the generator's CPUs at its scheduling class, with a
//! 1 ns timer slack, as the harness's do.

use elfen_bench::load::{Accounting, MonoClock, Outcome, mono_ns, run_sender};
use elfen_cmd::proc::SchedClass;
use elfen_proxy::config::Protocol;
use elfen_proxy::message::{Answer, read_answer};
use elfen_wire::{self as wire, Kind, Status};
use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What one invocation sends: per request its intended offset (ns from the
/// start) and its `arg` and payload (HTTP: `GET /?us=<arg / 1000>`).
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// Intended send offsets, ns.
    pub offsets: &'a [u64],
    /// Per request: `arg` and payload.
    pub requests: Vec<(u64, &'a [u8])>,
    /// Warm-up (sent, not recorded), ns.
    pub warmup_ns: u64,
    /// Longest wait for answers after the last intended send, ns.
    pub drain_ns: u64,
}

/// Where the generator's threads run.
#[derive(Debug, Clone)]
pub struct Place {
    /// CPUs.
    pub cpus: Vec<u32>,
    /// Scheduling class.
    pub sched: SchedClass,
}

impl Place {
    fn enter(&self) -> Option<elfen_topo::PinGuard> {
        let pin = elfen_topo::PinGuard::with_cpus(&self.cpus).ok();
        elfen_cmd::proc::set_timer_slack_ns(1);
        if self.sched != SchedClass::Other {
            let _ = elfen_cmd::proc::set_sched(0, self.sched);
        }
        pin
    }
}

/// Runs `plan` against `addr`; returns the accounting and how many
/// requests were sent.
pub fn invocation(
    protocol: Protocol,
    addr: SocketAddr,
    plan: &Plan,
    place: &Place,
    stop: &AtomicBool,
) -> std::io::Result<(Outcome, usize)> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let rx = s.try_clone()?;
    let t0 = mono_ns() + 5_000_000;
    let offsets = plan.offsets;
    let span_end = t0 + offsets.last().copied().unwrap_or(0);
    std::thread::scope(|scope| {
        // blocking reads (a timeout could cut an answer in two); the
        // connection is shut down to end them after the drain
        let receiver = scope.spawn(|| {
            let _pin = place.enter();
            let mut acc = Accounting::new(t0, offsets.to_vec(), plan.warmup_ns);
            let mut r = BufReader::with_capacity(64 * 1024, rx);
            let mut next = 0usize;
            while !acc.all_answered() {
                let Ok(Some(a)) = read_answer(protocol, &mut r, || false) else {
                    break;
                };
                let now = mono_ns();
                let i = a.id.map_or(next, |id| id as usize);
                next += 1;
                match a.answer {
                    Answer::Wire(w) if w.status == Status::Ok => {
                        acc.on_response(i, now);
                    }
                    Answer::Http(h) if h.status < 400 => {
                        acc.on_response(i, now);
                    }
                    _ => acc.on_failure(i, now),
                }
            }
            acc.finish(mono_ns())
        });
        let (sent, err) = {
            let _pin = place.enter();
            let mut w = &s;
            let mut buf = Vec::with_capacity(256);
            run_sender(&MonoClock, t0, offsets, stop, |i| {
                let (arg, payload) = plan.requests[i];
                buf.clear();
                match protocol {
                    Protocol::Wire => buf.extend_from_slice(&wire::request_bytes(
                        i as u64,
                        arg,
                        payload,
                        Kind::Work,
                    )),
                    Protocol::Http => buf.extend_from_slice(
                        format!("GET /?us={} HTTP/1.1\r\nHost: {addr}\r\n\r\n", arg / 1000)
                            .as_bytes(),
                    ),
                }
                w.write_all(&buf)
            })
        };
        let done = mono_ns().max(span_end);
        while !receiver.is_finished()
            && mono_ns() < done + plan.drain_ns
            && !stop.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = s.shutdown(Shutdown::Both);
        let outcome = receiver.join().expect("receiver");
        match err {
            Some(e) if sent == 0 => Err(e),
            _ => Ok((outcome, sent)),
        }
    })
}
