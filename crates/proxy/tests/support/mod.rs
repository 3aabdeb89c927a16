//! What the proxy's end-to-end tests share: a wire-protocol client that
//! counts the answers to each request, and waiting for a condition.

use elfen_wire::{self as wire, Kind, Response, Status};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Waits until `f` holds (polling), or fails naming `what`.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a wire client got: per request id, the statuses of its answers.
pub struct Got {
    /// Per request id, the statuses of its answers.
    pub answers: Vec<Vec<Status>>,
}

impl Got {
    /// Every request answered exactly once, with status 0.
    pub fn assert_each_answered_once_ok(&self) {
        for (i, a) in self.answers.iter().enumerate() {
            assert_eq!(a.len(), 1, "request {i} answered {} times", a.len());
            assert_eq!(a[0], Status::Ok, "request {i}");
        }
    }
}

/// Sends `n` work requests (`request(i)`: arg and payload) `gap` apart on one connection,
/// calling `on_sent(i)` after each, and collects the answers (waiting up to
/// `wait` after the last send).
pub fn wire_load(
    addr: SocketAddr,
    n: usize,
    gap: Duration,
    request: impl Fn(usize) -> (u64, Vec<u8>),
    wait: Duration,
    mut on_sent: impl FnMut(usize),
) -> Got {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let mut rx = s.try_clone().unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let done_sending = std::sync::Arc::new(AtomicBool::new(false));
    let ds = done_sending.clone();
    let receiver = std::thread::spawn(move || {
        let mut answers = vec![Vec::new(); n];
        let mut got = 0;
        let mut buf = [0u8; wire::RESPONSE_BYTES];
        let mut have = 0;
        let mut last_send: Option<Instant> = None;
        loop {
            if ds.load(Ordering::Relaxed) && last_send.is_none() {
                last_send = Some(Instant::now());
            }
            if last_send.is_some_and(|t| t.elapsed() > wait) {
                break;
            }
            match rx.read(&mut buf[have..]) {
                Ok(0) => break,
                Ok(k) => {
                    have += k;
                    if have == buf.len() {
                        have = 0;
                        let r = Response::decode(&buf);
                        answers[r.id as usize].push(r.status);
                        got += 1;
                        // keep listening a little after the last answer, for duplicates
                        if got >= n && last_send.is_some() {
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
                Err(_) => {
                    if got >= n
                        && last_send.is_some_and(|t| t.elapsed() > Duration::from_millis(300))
                    {
                        break;
                    }
                }
            }
        }
        answers
    });
    for i in 0..n {
        let (arg, payload) = request(i);
        s.write_all(&wire::request_bytes(i as u64, arg, &payload, Kind::Work))
            .unwrap();
        on_sent(i);
        std::thread::sleep(gap);
    }
    done_sending.store(true, Ordering::Relaxed);
    Got {
        answers: receiver.join().unwrap(),
    }
}
