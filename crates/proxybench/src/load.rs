//! One open-loop **invocation** against a replica or the proxy, on the
//! load kit's open-loop connection (`elfen_load::conn`: Poisson offsets
//! computed beforehand, each request sent at its intended time, latency
//! from the intended time by `Accounting`, requests unanswered at the end
//! recorded with the latency they reached): wire-protocol requests matched
//! to answers by id, or HTTP/1.1 `GET`s pipelined on a keep-alive
//! connection, answered in order. The sender and receiver run on the
//! generator's CPUs at its scheduling class, with a 1 ns timer slack, as
//! the harness's do.

use elfen_load::conn::{Connection, Drive, Protocol as LoadProtocol};
use elfen_load::{Accounting, Outcome, mono_ns};
use elfen_proxy::config::Protocol;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

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

/// Where the generator's threads run (CPUs, scheduling class).
pub type Place = elfen_load::conn::Place;

/// Runs `plan` against `addr`; returns the accounting and how many
/// requests were sent.
pub fn invocation(
    protocol: Protocol,
    addr: SocketAddr,
    plan: &Plan,
    place: &Place,
    stop: &AtomicBool,
) -> std::io::Result<(Outcome, usize)> {
    let conn = Connection::open(addr)?;
    let t0 = mono_ns() + 5_000_000;
    let offsets = plan.offsets;
    let protocol = match protocol {
        Protocol::Wire => LoadProtocol::Wire,
        Protocol::Http => LoadProtocol::Http {
            host: addr.to_string(),
        },
    };
    let mut acc = Accounting::new(t0, offsets.to_vec(), plan.warmup_ns);
    let request = |seq: u64, _due: u64, _now: u64, out: &mut Vec<u8>| {
        let (arg, payload) = plan.requests[seq as usize];
        protocol.encode(seq, arg, payload, 0, out);
        true
    };
    let drive = Drive {
        t0_ns: t0,
        offsets: offsets.iter().copied(),
        last_due_ns: t0 + offsets.last().copied().unwrap_or(0),
        drain_ns: plan.drain_ns,
        place,
        name: None,
    };
    let run = conn.drive(&protocol, drive, request, &mut acc, stop, |_| {});
    let outcome = acc.finish(mono_ns());
    match run.send_error {
        Some(e) if run.sent == 0 => Err(e),
        _ => Ok((outcome, run.sent)),
    }
}
