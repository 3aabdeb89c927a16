//! An open-loop invocation over HTTP/1.1 — the harness's generator
//! (`elfen_bench::load`: Poisson offsets, sends at their intended times,
//! latency from the intended time, unanswered requests recorded with the
//! latency they reached) with requests pipelined on one keep-alive
//! connection, so answers come back in send order.

use crate::config::Protocol;
use crate::message::{Answer, read_answer};
use elfen_bench::load::{Accounting, MonoClock, Outcome, mono_ns, run_sender};
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Sends `GET targets[i]` at `t0 + offsets[i]` and accounts the answers
/// (warm-up: the first `warmup_ns`; answers awaited `drain_ns` after the
/// last send).
pub fn invocation(
    addr: SocketAddr,
    offsets: &[u64],
    targets: &[String],
    warmup_ns: u64,
    drain_ns: u64,
    stop: &AtomicBool,
) -> std::io::Result<(Outcome, usize)> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let rx = s.try_clone()?;
    let t0 = mono_ns() + 5_000_000;
    let span_end = t0 + offsets.last().copied().unwrap_or(0);
    std::thread::scope(|scope| {
        // blocking reads (a timeout could cut an answer in two); the
        // connection is shut down to end them after the drain
        let receiver = scope.spawn(|| {
            let mut acc = Accounting::new(t0, offsets.to_vec(), warmup_ns);
            let mut r = BufReader::with_capacity(64 * 1024, rx);
            let mut next = 0usize;
            loop {
                if acc.all_answered() {
                    break;
                }
                match read_answer(Protocol::Http, &mut r, || false) {
                    Ok(Some(a)) => {
                        let now = mono_ns();
                        match a.answer {
                            Answer::Http(h) if h.status < 400 => {
                                acc.on_response(next, now);
                            }
                            _ => acc.on_failure(next, now),
                        }
                        next += 1;
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            acc.finish(mono_ns())
        });
        let mut w = &s;
        let (sent, err) = run_sender(&MonoClock, t0, offsets, stop, |i| {
            w.write_all(format!("GET {} HTTP/1.1\r\nHost: {addr}\r\n\r\n", targets[i]).as_bytes())
        });
        let done = mono_ns().max(span_end);
        while !receiver.is_finished()
            && mono_ns() < done + drain_ns
            && !stop.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = s.shutdown(std::net::Shutdown::Both);
        let outcome = receiver.join().expect("receiver");
        match err {
            Some(e) if sent == 0 => Err(e),
            _ => Ok((outcome, sent)),
        }
    })
}
