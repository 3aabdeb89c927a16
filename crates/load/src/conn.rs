//! **One open-loop connection**: a sender thread and a receiver thread on
//! one TCP connection (`TCP_NODELAY`), placed on the load's CPUs at its
//! scheduling class with a 1 ns timer slack ([`Place`]). The sender writes
//! each request at its intended time, or at once if it is late
//! ([`crate::arrivals::run_sender`]), never waiting for answers; the
//! receiver frames the answers in the connection's [`Protocol`] and hands
//! each to the caller's [`Receive`] with its arrival time. The caller's
//! request hook sees every request just before it is written (its
//! sequence number, intended and actual send time): that is where spans
//! are kept, and where a request may be held back.
//!
//! The wire protocol carries request ids; the in-order protocols (text,
//! HTTP) do not, so the k-th answer answers the k-th request sent.

use crate::arrivals::run_sender;
use crate::clock::{MonoClock, mono_ns};
use crate::text::TextProtocol;
use elfen_cmd::proc::SchedClass;
use elfen_wire::{self as wire, Kind, Response, Status};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The protocol spoken on a connection.
#[derive(Debug, Clone)]
pub enum Protocol {
    /// elfen's LC wire protocol (`docs/lc-protocol.md`): ids, service and
    /// queueing times.
    Wire,
    /// A service's own text protocol (RESP, lines): in order, no ids, no
    /// service times.
    Text(Arc<TextProtocol>),
    /// HTTP/1.1 on a keep-alive connection to `host`, pipelined and
    /// answered in order; a status of 400 or more is an error. Bodies are
    /// framed by `Content-Length` (none: empty).
    Http {
        /// The `Host` header's value.
        host: String,
    },
}

/// One answer, whatever the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The request answered: the wire protocol's id; in-order protocols,
    /// the reader's first id plus the answers read before this one.
    pub id: u64,
    /// Answered without an error.
    pub ok: bool,
    /// The service's own service time, ns (0: it reports none).
    pub service_ns: u64,
    /// Time the request waited in the service's queue, ns.
    pub queued_ns: u64,
}

/// One framed answer: its length in the buffer, and the answer without
/// an id where the protocol has none.
type Framed = (usize, Option<u64>, bool, u64, u64);

impl Protocol {
    /// Appends one request: the wire protocol's work request `id` of `arg`
    /// ns with `payload`; a text protocol's read of key `key`; HTTP's
    /// `GET /?us=<arg in µs>`.
    pub fn encode(&self, id: u64, arg: u64, payload: &[u8], key: u64, out: &mut Vec<u8>) {
        match self {
            Protocol::Wire => {
                out.extend_from_slice(&wire::request_bytes(id, arg, payload, Kind::Work))
            }
            Protocol::Text(t) => t.encode_request(key, out),
            Protocol::Http { host } => {
                use std::fmt::Write as _;
                let mut line = String::with_capacity(64);
                let _ = write!(
                    line,
                    "GET /?us={} HTTP/1.1\r\nHost: {host}\r\n\r\n",
                    arg / 1000
                );
                out.extend_from_slice(line.as_bytes());
            }
        }
    }

    /// The first whole answer at the start of `buf`, if there is one; what
    /// is wrong when `buf` does not start with one.
    fn frame(&self, buf: &[u8]) -> Result<Option<Framed>, String> {
        match self {
            Protocol::Wire => Ok(buf.first_chunk::<{ wire::RESPONSE_BYTES }>().map(|f| {
                let r = Response::decode(f);
                (
                    wire::RESPONSE_BYTES,
                    Some(r.id),
                    r.status == Status::Ok,
                    r.service_ns,
                    r.queued_ns,
                )
            })),
            Protocol::Text(t) => Ok(t.decode(buf)?.map(|(n, r)| (n, None, !r.error, 0, 0))),
            Protocol::Http { .. } => http_frame(buf),
        }
    }
}

/// Most headers an HTTP answer may have.
const HTTP_HEADERS: usize = 32;

/// The first whole HTTP/1.1 response at the start of `buf`.
fn http_frame(buf: &[u8]) -> Result<Option<Framed>, String> {
    let mut headers = [httparse::EMPTY_HEADER; HTTP_HEADERS];
    let mut r = httparse::Response::new(&mut headers);
    let head = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("an HTTP response head that does not parse: {e}")),
    };
    let status = r.code.unwrap_or(0);
    let mut body = 0usize;
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("Content-Length {:?}", String::from_utf8_lossy(h.value)))?;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err("a chunked HTTP body (the load reads Content-Length bodies)".into());
        }
    }
    let total = head + body;
    Ok((buf.len() >= total).then_some((total, None, status < 400, 0, 0)))
}

/// Answers read from a connection: bytes buffered until a whole answer is
/// there.
#[derive(Debug)]
pub struct AnswerReader {
    buf: Vec<u8>,
    have: usize,
    at: usize,
    next_id: u64,
}

impl AnswerReader {
    /// A reader whose in-order answers are numbered from `first_id`.
    pub fn new(first_id: u64) -> AnswerReader {
        AnswerReader {
            buf: vec![0; 64 << 10],
            have: 0,
            at: 0,
            next_id: first_id,
        }
    }

    /// Reads what the socket has (at least one byte, or the read's error,
    /// or `Ok(0)` at its end).
    pub fn fill(&mut self, s: &mut impl Read) -> std::io::Result<usize> {
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

    /// The next whole answer in the buffer, if any.
    pub fn pop(&mut self, protocol: &Protocol) -> Result<Option<Answer>, String> {
        let Some((n, id, ok, service_ns, queued_ns)) =
            protocol.frame(&self.buf[self.at..self.have])?
        else {
            return Ok(None);
        };
        self.at += n;
        let id = id.unwrap_or_else(|| {
            self.next_id += 1;
            self.next_id - 1
        });
        Ok(Some(Answer {
            id,
            ok,
            service_ns,
            queued_ns,
        }))
    }
}

/// Where a load's threads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// CPUs (empty: not pinned).
    pub cpus: Vec<u32>,
    /// Scheduling class (the harness runs its load `SCHED_FIFO` where
    /// permitted, so other work cannot make it late).
    pub sched: SchedClass,
}

impl Place {
    /// Places the calling thread: its CPUs (for as long as the guard
    /// lives), its class (refused without privileges: then it stays
    /// `SCHED_OTHER`), a 1 ns timer slack (the default 50 µs would make a
    /// timed send up to 50 µs late).
    pub fn enter(&self) -> Option<elfen_topo::PinGuard> {
        let pin = (!self.cpus.is_empty())
            .then(|| elfen_topo::PinGuard::with_cpus(&self.cpus).ok())
            .flatten();
        elfen_cmd::proc::set_timer_slack_ns(1);
        if self.sched != SchedClass::Other {
            let _ = elfen_cmd::proc::set_sched(0, self.sched);
        }
        pin
    }
}

/// Whether a read error only means "nothing yet" (read timeout or signal).
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// A client connection to `addr` (`TCP_NODELAY`).
pub fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// What the receiver does with the answers: the caller's accounting.
pub trait Receive: Send {
    /// An answer that arrived at `now_ns` (answers read together share
    /// their arrival time).
    fn answered(&mut self, answer: &Answer, now_ns: u64);
    /// Whether every request has been answered (the receiver then stops).
    fn done(&self) -> bool {
        false
    }
    /// The receiver stopped reading: the service closed the connection
    /// (`closed`), or an answer broke the protocol (what was wrong); called
    /// on the receiver's thread at once, before the load ends.
    fn ended(&mut self, closed: bool, protocol_error: Option<&str>) {
        let _ = (closed, protocol_error);
    }
}

/// How one load runs on a connection.
#[derive(Debug, Clone)]
pub struct Drive<'a, I> {
    /// The start, ns (monotonic): request `i` is due at `t0_ns + offsets[i]`.
    pub t0_ns: u64,
    /// Intended send offsets, ns from `t0_ns` (may be unbounded: the load
    /// then runs until stopped).
    pub offsets: I,
    /// The last intended send, ns (monotonic; 0: unbounded): the drain
    /// counts from it or from the sender's end, whichever is later.
    pub last_due_ns: u64,
    /// Longest wait for answers after the sender's end, ns.
    pub drain_ns: u64,
    /// Where the sender and receiver run.
    pub place: &'a Place,
    /// Their thread names are this with `-tx` and `-rx` (none: unnamed).
    pub name: Option<&'a str>,
}

/// How a load on a connection ended.
#[derive(Debug)]
pub struct Run {
    /// Requests sent.
    pub sent: usize,
    /// Why a send failed, if one did (the sender then stopped).
    pub send_error: Option<std::io::Error>,
    /// The service closed the connection before the end (a read's end or
    /// error, or a send refused with a broken pipe or a reset).
    pub closed: bool,
    /// An answer that is not the protocol (what was wrong).
    pub protocol_error: Option<String>,
    /// Thread ids of the sender and the receiver.
    pub tids: Vec<u32>,
}

/// A connection for one open-loop load: the sender's stream and the
/// receiver's clone of it (reads time out every 20 ms, so it sees the end).
#[derive(Debug)]
pub struct Connection {
    tx: TcpStream,
    rx: TcpStream,
}

impl Connection {
    /// Connects to `addr`.
    pub fn open(addr: SocketAddr) -> std::io::Result<Connection> {
        Connection::from_stream(connect(addr)?)
    }

    /// Connects to `addr`, giving up after `timeout`.
    pub fn open_within(addr: SocketAddr, timeout: Duration) -> std::io::Result<Connection> {
        let s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_nodelay(true)?;
        Connection::from_stream(s)
    }

    fn from_stream(tx: TcpStream) -> std::io::Result<Connection> {
        let rx = tx.try_clone()?;
        rx.set_read_timeout(Some(Duration::from_millis(20)))?;
        Ok(Connection { tx, rx })
    }

    /// Runs one load: the sender sends request `seq` (0, 1, …) at each
    /// intended time, writing what `request(seq, intended_ns, now_ns, out)`
    /// puts in `out` (it returns false to hold that request back: it is
    /// not sent and takes no number); the receiver hands each answer to
    /// `receive`. `during` runs on the calling thread meanwhile (it may
    /// set the flag it is given to end the load). The load ends when the
    /// sender has sent everything or `stop` is set, and the receiver has
    /// every answer, the drain is over, the connection closed, or `stop`
    /// is set with the sender done.
    pub fn drive<I, R>(
        self,
        protocol: &Protocol,
        plan: Drive<'_, I>,
        mut request: impl FnMut(u64, u64, u64, &mut Vec<u8>) -> bool + Send,
        receive: &mut R,
        stop: &AtomicBool,
        during: impl FnOnce(&AtomicBool),
    ) -> Run
    where
        I: IntoIterator<Item = u64> + Send,
        R: Receive,
    {
        let Connection { tx, mut rx } = self;
        let sender_done = AtomicU64::new(0);
        let quit = AtomicBool::new(false);
        let tids = Mutex::new(Vec::new());
        let t0 = plan.t0_ns;
        let thread = |end: &str| {
            let b = std::thread::Builder::new();
            match plan.name {
                Some(n) => b.name(format!("{n}-{end}")),
                None => b,
            }
        };
        let ((sent, send_error), (closed, protocol_error)) = std::thread::scope(|scope| {
            let sender = thread("tx").spawn_scoped(scope, || {
                let _pin = plan.place.enter();
                tids.lock().expect("tids").push(elfen_cmd::proc::gettid());
                let mut s = &tx;
                let halt = AtomicBool::new(false);
                let mut out = Vec::with_capacity(512);
                let mut seq = 0u64;
                let (_, err) = run_sender(&MonoClock, t0, plan.offsets, &halt, |_, due| {
                    if stop.load(Ordering::Relaxed) || quit.load(Ordering::Relaxed) {
                        halt.store(true, Ordering::Relaxed);
                        return Ok(());
                    }
                    out.clear();
                    if !request(seq, due, mono_ns(), &mut out) {
                        return Ok(());
                    }
                    seq += 1;
                    s.write_all(&out)
                });
                sender_done.store(mono_ns().max(1), Ordering::Release);
                (seq as usize, err)
            });
            let receiver = thread("rx").spawn_scoped(scope, || {
                let _pin = plan.place.enter();
                tids.lock().expect("tids").push(elfen_cmd::proc::gettid());
                let ends = Ends {
                    sender_done: &sender_done,
                    last_due_ns: plan.last_due_ns,
                    drain_ns: plan.drain_ns,
                    quit: &quit,
                    stop,
                };
                let (closed, protocol_error) = read_answers(&mut rx, protocol, receive, &ends);
                if closed || protocol_error.is_some() {
                    receive.ended(closed, protocol_error.as_deref());
                }
                (closed, protocol_error)
            });
            let (sender, receiver) = match (sender, receiver) {
                (Ok(s), Ok(r)) => (s, r),
                (s, r) => {
                    // a thread that did not start: end the other one
                    quit.store(true, Ordering::Relaxed);
                    let e = [s.err(), r.err()].into_iter().flatten().next();
                    return ((0, e), (false, None));
                }
            };
            during(&quit);
            let sent = sender.join().expect("the load's sender panicked");
            let received = receiver.join().expect("the load's receiver panicked");
            (sent, received)
        });
        // A send refused because the service closed the connection is the
        // service's doing, as a read's end is.
        let closed = closed
            || send_error.as_ref().is_some_and(|e| {
                matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                )
            });
        Run {
            sent,
            send_error,
            closed,
            protocol_error,
            tids: tids.into_inner().expect("tids"),
        }
    }
}

/// When the receiver stops reading.
struct Ends<'a> {
    sender_done: &'a AtomicU64,
    last_due_ns: u64,
    drain_ns: u64,
    quit: &'a AtomicBool,
    stop: &'a AtomicBool,
}

impl Ends<'_> {
    /// Whether the load is over for the receiver (apart from its answers
    /// and the connection).
    fn over(&self) -> bool {
        if self.quit.load(Ordering::Relaxed) {
            return true;
        }
        let done = self.sender_done.load(Ordering::Acquire);
        done != 0
            && (self.stop.load(Ordering::Relaxed)
                || mono_ns() > done.max(self.last_due_ns).saturating_add(self.drain_ns))
    }
}

/// The receiver: reads answers until `receive` has them all, the load is
/// over, or the connection closes or breaks the protocol. Returns whether
/// it closed and what broke the protocol.
fn read_answers<R: Receive>(
    rx: &mut TcpStream,
    protocol: &Protocol,
    receive: &mut R,
    ends: &Ends,
) -> (bool, Option<String>) {
    let mut reader = AnswerReader::new(0);
    loop {
        if receive.done() || ends.over() {
            return (false, None);
        }
        match reader.fill(rx) {
            Ok(0) => return (true, None),
            Ok(_) => {
                let now = mono_ns();
                loop {
                    match reader.pop(protocol) {
                        Ok(Some(a)) => receive.answered(&a, now),
                        Ok(None) => break,
                        Err(e) => return (false, Some(e)),
                    }
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => return (true, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_answers_are_framed_by_their_length_and_numbered_in_order() {
        let mut r = AnswerReader::new(7);
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 502 Bad Gateway\r\n\
                    content-length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab";
        r.fill(&mut &two[..]).unwrap();
        let http = Protocol::Http {
            host: "127.0.0.1:80".into(),
        };
        let a = r.pop(&http).unwrap().unwrap();
        assert_eq!((a.id, a.ok), (7, true));
        let b = r.pop(&http).unwrap().unwrap();
        assert_eq!((b.id, b.ok), (8, false));
        assert_eq!(r.pop(&http).unwrap(), None, "a body not all there");
        let mut req = Vec::new();
        http.encode(0, 250_000, &[], 0, &mut req);
        assert_eq!(req, b"GET /?us=250 HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(http_frame(chunked).unwrap_err().contains("chunked"));
    }

    #[test]
    fn wire_answers_carry_their_ids_and_times() {
        let resp = Response {
            id: 41,
            service_ns: 900,
            queued_ns: 100,
            status: Status::Ok,
            result: 0,
        };
        let bytes = resp.encode();
        let mut r = AnswerReader::new(0);
        r.fill(&mut &bytes[..4]).unwrap();
        assert_eq!(r.pop(&Protocol::Wire).unwrap(), None, "half a frame");
        r.fill(&mut &bytes[4..]).unwrap();
        let a = r.pop(&Protocol::Wire).unwrap().unwrap();
        assert_eq!(
            (a.id, a.ok, a.service_ns, a.queued_ns),
            (41, true, 900, 100)
        );
    }
}
