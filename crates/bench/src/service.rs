//! The built-in **LC service**: a TCP server on 127.0.0.1 with
//!
//! - an *acceptor* and one *dispatcher* thread per connection, pinned to the
//!   batch lanes, that read requests and append them to a FIFO queue;
//! - one *worker* thread pinned to the request lane that takes requests in
//!   order, runs them (a pointer chase, [`crate::chase`]) and writes the
//!   response itself, publishing `request_begin` / `request_end` and the
//!   queue length (at each dequeue; the worker is the single writer of the
//!   LC line) through the signal page ([`elfen_runtime::LcLane`]).
//!
//! Both ends set `TCP_NODELAY`, so small responses never wait for the
//! client's delayed ACK (the thesis' chapter 4 hazard).
//!
//! Wire format (little-endian): request = `id: u64, steps: u64` (16 bytes),
//! response = `id: u64, service_ns: u64, queued_ns: u64` (24 bytes), where
//! `service_ns` is the worker's begin-to-end time and `queued_ns` the time
//! from dispatch to begin.

use crate::chase::Chase;
use crate::error::{BenchError, Result};
use crate::loadgen::mono_ns;
use elfen_results::Distribution;
use elfen_runtime::LcLane;
use elfen_shm::Page;
use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Bytes of a request on the wire.
pub const REQUEST_BYTES: usize = 16;
/// Bytes of a response on the wire.
pub const RESPONSE_BYTES: usize = 24;

/// Encodes a request.
pub fn encode_request(id: u64, steps: u64) -> [u8; REQUEST_BYTES] {
    let mut b = [0u8; REQUEST_BYTES];
    b[..8].copy_from_slice(&id.to_le_bytes());
    b[8..].copy_from_slice(&steps.to_le_bytes());
    b
}

/// Decodes a response: `(id, service_ns, queued_ns)`.
pub fn decode_response(b: &[u8; RESPONSE_BYTES]) -> (u64, u64, u64) {
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (w(0), w(1), w(2))
}

/// Binds the service's listening socket (so a taken port fails before
/// anything else starts).
pub fn bind(port: u16) -> Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", port)).map_err(|source| {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            BenchError::PortInUse { port, source }
        } else {
            BenchError::io(format!("binding 127.0.0.1:{port}"), source)
        }
    })
}

/// Where the service runs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The request lane's CPU (the worker is pinned there).
    pub request_cpu: u32,
    /// The CPUs of the acceptor and dispatchers (the batch lanes).
    pub side_cpus: Vec<u32>,
    /// Pointer-chase working set, bytes.
    pub working_set_bytes: usize,
    /// Calibration time, ms.
    pub calibrate_ms: u64,
    /// The page and request lane to publish on (`None`: publish nothing).
    pub page: Option<(Arc<Page>, u32)>,
}

struct Conn {
    stream: TcpStream,
    closed: AtomicBool,
}

struct Job {
    id: u64,
    steps: u64,
    arrived_ns: u64,
    conn: Arc<Conn>,
}

/// Counters the worker keeps and the sweep samples.
#[derive(Debug, Default)]
pub struct Stats {
    /// Time spent in completed requests, ns.
    pub busy_ns: AtomicU64,
    /// Begin time of the running request (0 = idle), ns.
    pub busy_since_ns: AtomicU64,
    /// Requests served (counted when the response is ready to write).
    pub requests: AtomicU64,
    /// Whether idle periods and service times are being recorded.
    pub recording: AtomicBool,
    /// Idle periods of the request lane (µs, with sums).
    pub idle_us: Mutex<Option<Distribution>>,
    /// Service times (µs).
    pub service_us: Mutex<Option<Distribution>>,
}

impl Stats {
    /// Busy time so far, including the running request, ns.
    pub fn busy_now_ns(&self) -> u64 {
        let since = self.busy_since_ns.load(Ordering::Acquire);
        let done = self.busy_ns.load(Ordering::Acquire);
        if since == 0 {
            done
        } else {
            done + mono_ns().saturating_sub(since)
        }
    }

    /// Starts recording into fresh distributions.
    pub fn start_recording(&self) {
        *self.idle_us.lock().expect("stats lock") = Some(idle_buckets());
        *self.service_us.lock().expect("stats lock") = Some(latency_buckets());
        self.recording.store(true, Ordering::Release);
    }

    /// Stops recording and returns `(idle periods, service times)`.
    pub fn stop_recording(&self) -> (Distribution, Distribution) {
        self.recording.store(false, Ordering::Release);
        let i = self.idle_us.lock().expect("stats lock").take();
        let s = self.service_us.lock().expect("stats lock").take();
        (
            i.unwrap_or_else(idle_buckets),
            s.unwrap_or_else(latency_buckets),
        )
    }
}

/// Buckets for idle periods: 1 µs .. 10 s, 10 per decade.
pub fn idle_buckets() -> Distribution {
    Distribution::log_buckets("us", 1.0, 1e7, 10)
}

/// Buckets for demands, service times and latencies: 1 µs .. 10 s, 20 per
/// decade.
pub fn latency_buckets() -> Distribution {
    Distribution::log_buckets("us", 1.0, 1e7, 20)
}

struct Shared {
    queue: Mutex<VecDeque<Job>>,
    cv: Condvar,
    stop: AtomicBool,
    stats: Arc<Stats>,
    side_cpus: Vec<u32>,
}

/// A running service.
pub struct Service {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    steps_per_us: f64,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("addr", &self.addr)
            .field("steps_per_us", &self.steps_per_us)
            .finish()
    }
}

impl Service {
    /// Starts the service on `listener`: the worker pins itself, builds and
    /// calibrates its working set (with nothing else running), attaches the
    /// LC lane, then the acceptor starts.
    pub fn start(listener: TcpListener, cfg: ServiceConfig) -> Result<Service> {
        let addr = listener
            .local_addr()
            .map_err(|e| BenchError::io("local address", e))?;
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            stats: stats.clone(),
            side_cpus: cfg.side_cpus.clone(),
        });
        let (tx, rx) = std::sync::mpsc::channel::<Result<f64>>();
        let w_shared = shared.clone();
        let worker = std::thread::Builder::new()
            .name("elfen-lc-worker".into())
            .spawn(move || worker_main(w_shared, cfg, tx))
            .map_err(|e| BenchError::io("spawning the LC worker", e))?;
        let steps_per_us = match rx.recv() {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let _ = worker.join();
                return Err(e);
            }
            Err(_) => {
                let _ = worker.join();
                return Err(BenchError::Service("the LC worker died at start-up".into()));
            }
        };
        let a_shared = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("elfen-lc-accept".into())
            .spawn(move || acceptor_main(a_shared, listener))
            .map_err(|e| BenchError::io("spawning the LC acceptor", e))?;
        Ok(Service {
            addr,
            shared,
            threads: vec![worker, acceptor],
            steps_per_us,
            stats,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Calibrated chase steps per µs (alone).
    pub fn steps_per_us(&self) -> f64 {
        self.steps_per_us
    }

    /// The worker's counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Stops every thread (closing connections) and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cv.notify_all();
        // unblock accept()
        let _ = TcpStream::connect(self.addr);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn acceptor_main(shared: Arc<Shared>, listener: TcpListener) {
    let _pin = elfen_topo::PinGuard::with_cpus(&shared.side_cpus).ok();
    let mut dispatchers = Vec::new();
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        let s = shared.clone();
        if let Ok(h) = std::thread::Builder::new()
            .name("elfen-lc-dispatch".into())
            .spawn(move || dispatcher_main(s, stream))
        {
            dispatchers.push(h);
        }
        dispatchers.retain(|h| !h.is_finished());
    }
    for h in dispatchers {
        let _ = h.join();
    }
}

fn dispatcher_main(shared: Arc<Shared>, stream: TcpStream) {
    let _pin = elfen_topo::PinGuard::with_cpus(&shared.side_cpus).ok();
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    // Wake up now and then to notice a shutdown.
    let _ = read_half.set_read_timeout(Some(std::time::Duration::from_millis(100)));
    let conn = Arc::new(Conn {
        stream,
        closed: AtomicBool::new(false),
    });
    let mut r = BufReader::with_capacity(4096, read_half);
    let mut buf = [0u8; REQUEST_BYTES];
    let mut have = 0usize;
    while !shared.stop.load(Ordering::Relaxed) {
        match r.read(&mut buf[have..]) {
            Ok(0) => break,
            Ok(n) => {
                have += n;
                if have < REQUEST_BYTES {
                    continue;
                }
                have = 0;
                let id = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                let steps = u64::from_le_bytes(buf[8..].try_into().expect("8 bytes"));
                let job = Job {
                    id,
                    steps,
                    arrived_ns: mono_ns(),
                    conn: conn.clone(),
                };
                shared.queue.lock().expect("queue lock").push_back(job);
                shared.cv.notify_one();
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
    }
    // Requests of a closed connection still queued are dropped by the worker.
    conn.closed.store(true, Ordering::SeqCst);
}

fn worker_main(
    shared: Arc<Shared>,
    cfg: ServiceConfig,
    ready: std::sync::mpsc::Sender<Result<f64>>,
) {
    let _pin = match elfen_topo::PinGuard::new(cfg.request_cpu) {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let mut chase = Chase::new(cfg.working_set_bytes, 0x5EED);
    let steps_per_us = chase.calibrate(cfg.calibrate_ms);
    let mut lc = match &cfg.page {
        Some((page, lane)) => match LcLane::attach(page.clone(), *lane) {
            Ok(l) => Some(l),
            Err(e) => {
                let _ = ready.send(Err(BenchError::Service(format!(
                    "attaching the LC lane: {e}"
                ))));
                return;
            }
        },
        None => None,
    };
    if ready.send(Ok(steps_per_us)).is_err() {
        return;
    }
    let stats = &shared.stats;
    let mut last_end = mono_ns();
    loop {
        let mut waited = false;
        let (job, queued) = {
            let mut q = shared.queue.lock().expect("queue lock");
            loop {
                if shared.stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Some(j) = q.pop_front() {
                    break (j, q.len());
                }
                waited = true;
                q = shared.cv.wait(q).expect("queue lock");
            }
        };
        if job.conn.closed.load(Ordering::Relaxed) {
            continue;
        }
        let begin = mono_ns();
        let recording = stats.recording.load(Ordering::Acquire);
        if waited && recording {
            if let Some(d) = stats.idle_us.lock().expect("stats lock").as_mut() {
                d.record(begin.saturating_sub(last_end) as f64 / 1e3);
            }
        }
        if let Some(l) = lc.as_mut() {
            l.set_queue_len(queued as u32);
            l.request_begin(job.id);
        }
        stats.busy_since_ns.store(begin, Ordering::Release);
        chase.run(job.steps);
        let done = mono_ns();
        let service = done - begin;
        stats.requests.fetch_add(1, Ordering::Relaxed);
        if recording {
            if let Some(d) = stats.service_us.lock().expect("stats lock").as_mut() {
                d.record(service as f64 / 1e3);
            }
        }
        let mut resp = [0u8; RESPONSE_BYTES];
        resp[..8].copy_from_slice(&job.id.to_le_bytes());
        resp[8..16].copy_from_slice(&service.to_le_bytes());
        resp[16..].copy_from_slice(&begin.saturating_sub(job.arrived_ns).to_le_bytes());
        if (&job.conn.stream).write_all(&resp).is_err() {
            job.conn.closed.store(true, Ordering::Relaxed);
        }
        let end = mono_ns();
        if let Some(l) = lc.as_mut() {
            l.request_end();
        }
        stats.busy_ns.fetch_add(end - begin, Ordering::AcqRel);
        stats.busy_since_ns.store(0, Ordering::Release);
        last_end = end;
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

/// A client connection (TCP_NODELAY).
pub fn connect(addr: SocketAddr) -> Result<TcpStream> {
    let s =
        TcpStream::connect(addr).map_err(|e| BenchError::io(format!("connecting to {addr}"), e))?;
    s.set_nodelay(true)
        .map_err(|e| BenchError::io("setting TCP_NODELAY", e))?;
    Ok(s)
}

/// Sends each demand (µs, converted with `steps_per_us`) one at a time and
/// waits for its response: the service times measured by the worker with
/// nothing else running (the paper's Figure 1). Returns them in µs.
pub fn measure_demand(
    addr: SocketAddr,
    demands_us: &[f64],
    steps_per_us: f64,
    stop: &AtomicBool,
) -> Result<Vec<f64>> {
    let mut s = connect(addr)?;
    let mut out = Vec::with_capacity(demands_us.len());
    let mut resp = [0u8; RESPONSE_BYTES];
    for (i, d) in demands_us.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        let steps = (d * steps_per_us).round().max(1.0) as u64;
        s.write_all(&encode_request(i as u64, steps))
            .map_err(|e| BenchError::io("sending a request", e))?;
        s.read_exact(&mut resp)
            .map_err(|e| BenchError::io("reading a response", e))?;
        let (id, service_ns, _) = decode_response(&resp);
        if id != i as u64 {
            return Err(BenchError::Service(format!(
                "response for request {id}, expected {i}"
            )));
        }
        out.push(service_ns as f64 / 1e3);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_round_trips() {
        let r = encode_request(7, 99);
        assert_eq!(u64::from_le_bytes(r[..8].try_into().unwrap()), 7);
        let mut resp = [0u8; RESPONSE_BYTES];
        resp[..8].copy_from_slice(&3u64.to_le_bytes());
        resp[8..16].copy_from_slice(&4u64.to_le_bytes());
        resp[16..].copy_from_slice(&5u64.to_le_bytes());
        assert_eq!(decode_response(&resp), (3, 4, 5));
    }

    #[test]
    fn a_taken_port_is_a_clear_error() {
        let l = bind(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let e = bind(port).unwrap_err().to_string();
        assert!(e.contains(&port.to_string()) && e.contains("in use"), "{e}");
    }

    #[test]
    fn the_service_serves_and_counts() {
        let cpus = elfen_topo::current_affinity().unwrap();
        let svc = Service::start(
            bind(0).unwrap(),
            ServiceConfig {
                request_cpu: cpus[0],
                side_cpus: cpus.clone(),
                working_set_bytes: 256 * 1024,
                calibrate_ms: 10,
                page: None,
            },
        )
        .unwrap();
        assert!(svc.steps_per_us() > 0.0);
        svc.stats().start_recording();
        let d = measure_demand(
            svc.addr(),
            &[50.0, 100.0, 20.0],
            svc.steps_per_us(),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(d.len(), 3);
        let (idle, service) = svc.stats().stop_recording();
        assert_eq!(service.total(), 3);
        // one idle period before each request at most (fewer when the next
        // request was queued before the worker looked: timing, not asserted)
        assert!(idle.total() <= 3, "{idle:?}");
        assert_eq!(idle.sums.len(), idle.counts.len(), "idle time is kept");
        assert_eq!(svc.stats().requests.load(Ordering::Relaxed), 3);
        assert!(svc.stats().busy_now_ns() > 0);
        svc.stop();
    }
}
