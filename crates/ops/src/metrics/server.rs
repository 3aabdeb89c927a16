//! The HTTP endpoint that serves a [`Registry`] at `GET /metrics`.
//!
//! It runs inside a root daemon and any local user can connect to it, so no
//! client can hold it: every connection has its own thread, at most
//! [`MAX_CONNECTIONS`] at once; the request head (request line and headers,
//! parsed by `httparse`) must arrive whole within [`HEAD_DEADLINE`] of the
//! accept and fit in [`MAX_HEAD_BYTES`] (408 or 431 otherwise, then the
//! connection is closed); the response must be taken within
//! [`WRITE_DEADLINE`]. The deadlines are totals over all reads and writes of a
//! connection, so a client sending a byte at a time cannot stretch them.
//! When every slot is taken, a new connection evicts the oldest one still
//! sending its request (a stalled or slow client) rather than wait behind
//! it; only when every slot is answering does it get 503.

use prometheus_client::registry::Registry;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 8;
/// Largest request head (request line and headers), bytes.
pub const MAX_HEAD_BYTES: usize = 8192;
/// Most headers a request may have.
pub const MAX_HEADERS: usize = 32;
/// Time from the accept to the end of the request head, at most.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// Time to write a response, at most.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(2);

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The port is taken by another process.
    #[error(
        "metrics address {addr} is in use (another elfen or exporter listens there; choose another port)"
    )]
    InUse {
        /// The address.
        addr: SocketAddr,
    },
    /// Binding failed for another reason.
    #[error("cannot listen on metrics address {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What a complete request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics`.
    Scrape,
    /// Another method on `/metrics` (405).
    MethodNotAllowed,
    /// Another path (404).
    NotFound,
}

/// The bytes a client sent so far, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// Not a whole head yet: read on.
    Partial,
    /// A whole head.
    Complete(Request),
    /// Not HTTP (400).
    Bad,
    /// Longer than [`MAX_HEAD_BYTES`] or more than [`MAX_HEADERS`] headers (431).
    TooLarge,
}

/// Parses the start of a request (any bytes; never panics).
pub fn parse_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= MAX_HEAD_BYTES => {
            let path = req.path.unwrap_or("");
            let metrics = path == "/metrics" || path.starts_with("/metrics?");
            Head::Complete(match (metrics, req.method.unwrap_or("")) {
                (true, "GET") => Request::Scrape,
                (true, _) => Request::MethodNotAllowed,
                (false, _) => Request::NotFound,
            })
        }
        Ok(httparse::Status::Complete(_)) => Head::TooLarge,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => Head::TooLarge,
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(httparse::Error::TooManyHeaders) => Head::TooLarge,
        Err(_) => Head::Bad,
    }
}

/// A connection being served.
#[derive(Debug)]
struct Slot {
    id: u64,
    accepted: Instant,
    /// Still receiving its request head (may be evicted).
    reading: bool,
    /// Shut down to make room; its thread is on its way out.
    evicted: bool,
    stream: TcpStream,
    thread: Option<JoinHandle<()>>,
}

/// What the accept thread and the connection threads share.
#[derive(Debug)]
struct Shared {
    registry: Registry,
    slots: Mutex<Vec<Slot>>,
    scrapes: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running metrics endpoint; stops when dropped (open connections are
/// shut down and their threads joined).
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address it listens on (the port is resolved when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Scrapes answered so far.
    pub fn scrapes(&self) -> u64 {
        self.shared.scrapes.load(Relaxed)
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        // wake the blocking accept
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let slots = std::mem::take(&mut *self.shared.slots());
        for mut s in slots {
            let _ = s.stream.shutdown(Shutdown::Both);
            if let Some(t) = s.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// A bound, not yet serving, metrics address: bind first (a port in use is
/// an error before anything else is done), serve once the registry exists.
#[derive(Debug)]
pub struct MetricsListener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl MetricsListener {
    /// The address (the port is resolved when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Binds `addr` for [`serve_on`].
pub fn bind(addr: SocketAddr) -> Result<MetricsListener, MetricsError> {
    let listener = TcpListener::bind(addr).map_err(|source| {
        if source.kind() == ErrorKind::AddrInUse {
            MetricsError::InUse { addr }
        } else {
            MetricsError::Bind { addr, source }
        }
    })?;
    let addr = listener.local_addr().unwrap_or(addr);
    Ok(MetricsListener { listener, addr })
}

/// Serves `registry` at `http://<addr>/metrics`. Other paths get 404.
pub fn serve(addr: SocketAddr, registry: Registry) -> Result<MetricsServer, MetricsError> {
    serve_on(bind(addr)?, registry)
}

/// Serves `registry` on an address bound with [`bind`].
pub fn serve_on(bound: MetricsListener, registry: Registry) -> Result<MetricsServer, MetricsError> {
    let MetricsListener { listener, addr } = bound;
    let shared = Arc::new(Shared {
        registry,
        slots: Mutex::new(Vec::new()),
        scrapes: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let sh = shared.clone();
    let thread = std::thread::Builder::new()
        .name("elfen-metrics".into())
        .spawn(move || accept_loop(&listener, &sh))
        .map_err(|source| MetricsError::Bind { addr, source })?;
    Ok(MetricsServer {
        addr,
        shared,
        thread: Some(thread),
    })
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0u64;
    for conn in listener.incoming() {
        if shared.stop.load(Relaxed) {
            break;
        }
        match conn {
            Ok(c) => {
                next_id += 1;
                admit(shared, c, next_id);
            }
            // Out of descriptors or memory: give the connections time to end.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Gives `stream` a slot and a thread, making room if needed.
fn admit(shared: &Arc<Shared>, stream: TcpStream, id: u64) {
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut slots = shared.slots();
    if slots.iter().filter(|s| !s.evicted).count() >= MAX_CONNECTIONS {
        let oldest = slots
            .iter_mut()
            .filter(|s| s.reading && !s.evicted)
            .min_by_key(|s| s.accepted);
        match oldest {
            Some(s) => {
                s.evicted = true;
                let _ = s.stream.shutdown(Shutdown::Both);
            }
            None => {
                drop(slots);
                refuse(stream);
                return;
            }
        }
    }
    slots.push(Slot {
        id,
        accepted: Instant::now(),
        reading: true,
        evicted: false,
        stream: clone,
        thread: None,
    });
    drop(slots);
    let sh = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("elfen-metrics-c".into())
        .spawn(move || {
            serve_connection(&sh, stream, id);
            sh.slots().retain(|s| s.id != id);
        });
    let mut slots = shared.slots();
    match spawned {
        Ok(t) => {
            if let Some(s) = slots.iter_mut().find(|s| s.id == id) {
                s.thread = Some(t);
            }
        }
        Err(_) => slots.retain(|s| s.id != id),
    }
}

/// Answers 503 without waiting for anything (every slot is answering).
fn refuse(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&response(
        "503 Service Unavailable",
        "text/plain",
        b"busy: every connection slot is answering; try again\n",
    ));
    let _ = stream.shutdown(Shutdown::Both);
}

/// What a connection gets: status line, content type, body, whether it is
/// a scrape.
type Answer = (&'static str, &'static str, Vec<u8>, bool);

fn serve_connection(shared: &Shared, mut stream: TcpStream, id: u64) {
    let answer: Answer = match read_head(&mut stream) {
        None => return,
        Some(Head::Complete(Request::Scrape)) => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, &shared.registry) {
                Ok(()) => ("200 OK", CONTENT_TYPE, body.into_bytes(), true),
                Err(_) => (
                    "500 Internal Server Error",
                    "text/plain",
                    b"encoding failed\n".to_vec(),
                    false,
                ),
            }
        }
        Some(Head::Complete(Request::NotFound)) => (
            "404 Not Found",
            "text/plain",
            b"elfen serves /metrics only\n".to_vec(),
            false,
        ),
        Some(Head::Complete(Request::MethodNotAllowed)) => (
            "405 Method Not Allowed",
            "text/plain",
            b"GET /metrics\n".to_vec(),
            false,
        ),
        Some(Head::TooLarge) => (
            "431 Request Header Fields Too Large",
            "text/plain",
            format!("the request head exceeds {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} headers\n")
                .into_bytes(),
            false,
        ),
        Some(Head::Bad) => (
            "400 Bad Request",
            "text/plain",
            b"not an HTTP request\n".to_vec(),
            false,
        ),
        Some(Head::Partial) => (
            "408 Request Timeout",
            "text/plain",
            format!(
                "the request head did not arrive within {} s\n",
                HEAD_DEADLINE.as_secs()
            )
            .into_bytes(),
            false,
        ),
    };
    if let Some(s) = shared.slots().iter_mut().find(|s| s.id == id) {
        s.reading = false;
    }
    let (status, ctype, body, scrape) = answer;
    let bytes = response(status, ctype, &body);
    if write_by(&mut stream, &bytes, Instant::now() + WRITE_DEADLINE) && scrape {
        shared.scrapes.fetch_add(1, Relaxed);
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Reads until the head is complete, bad, too large, or [`HEAD_DEADLINE`]
/// passed (`Partial`); `None` when the client went away first.
fn read_head(stream: &mut TcpStream) -> Option<Head> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut buf = vec![0u8; MAX_HEAD_BYTES];
    let mut len = 0;
    loop {
        match parse_head(&buf[..len]) {
            Head::Partial => {}
            done => return Some(done),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Some(Head::Partial);
        }
        match stream.read(&mut buf[len..]) {
            Ok(0) => return None,
            Ok(n) => len += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Some(Head::Partial);
            }
            Err(_) => return None,
        }
    }
}

/// Writes all of `bytes` before `deadline`; whether it did.
fn write_by(stream: &mut TcpStream, bytes: &[u8], deadline: Instant) -> bool {
    let mut off = 0;
    while off < bytes.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_write_timeout(Some(left)).is_err() {
            return false;
        }
        match stream.write(&bytes[off..]) {
            Ok(0) => return false,
            Ok(n) => off += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// A whole response (`Connection: close`).
fn response(status: &str, ctype: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}
