//! The built-in **LC service**: a TCP server on 127.0.0.1 speaking the LC
//! wire protocol ([`elfen_wire`]) with
//!
//! - an *acceptor* and one *dispatcher* thread per connection, on the side
//!   CPUs (real-time priority where permitted), that read requests and
//!   append them to a FIFO queue;
//! - one *worker* thread pinned to the request lane that takes requests in
//!   order, runs them (a pointer chase, [`Chase`]: a request's `arg` is its
//!   work in ns, converted to steps with the start-up calibration) and
//!   writes the response itself. With a signal page it publishes through
//!   the LC API: `request_begin` with the queue length left after taking
//!   the request, `request_end` with the queue length at that moment (the
//!   worker is the single writer of the LC line; the queue's length is
//!   what Figure 9's budget policies read when the lane goes idle).
//!
//! Both ends set `TCP_NODELAY`, so small responses never wait for the
//! client's delayed ACK (the thesis' chapter 4 hazard). The same service
//! runs in the harness's process (`lc.service = "builtin"`) or as its own
//! process (`elfen serve`, for `lc.service = "external"`).

use crate::error::{BenchError, Result};
use crate::lc::chase::Chase;
use elfen_cmd::proc::SchedClass;
use elfen_results::Distribution;
use elfen_runtime::LcLane;
use elfen_shm::Page;
use elfen_shm::clock::monotonic_ns as mono_ns;
use elfen_wire::{self as wire, Kind, RequestHeader, Response, Status};
use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

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

/// Where and how the service runs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The request lane's CPU (the worker is pinned there).
    pub request_cpu: u32,
    /// The CPUs of the acceptor and dispatchers.
    pub side_cpus: Vec<u32>,
    /// Scheduling class of the acceptor and dispatchers.
    pub side_sched: SchedClass,
    /// Pointer-chase working set, bytes.
    pub working_set_bytes: usize,
    /// Calibration time, ms.
    pub calibrate_ms: u64,
    /// The page and request lane to publish on (`None`: publish nothing).
    pub page: Option<(Arc<Page>, u32)>,
    /// Also record every begin and end with the queue length the LC lane
    /// published (with a page; for tests of what the worker publishes).
    pub trace: Option<Arc<Mutex<Vec<Published>>>>,
}

/// One publication of the worker: a begin or an end, with the queue length
/// it carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// `request_begin` with the requests still waiting.
    Begin(u32),
    /// `request_end` with the requests waiting then.
    End(u32),
}

struct Conn {
    stream: TcpStream,
    closed: AtomicBool,
}

struct Job {
    id: u64,
    work_ns: u64,
    arrived_ns: u64,
    conn: Arc<Conn>,
}

/// The idle periods the worker records while asked to (µs, with sums: the
/// paper's Figure 5).
#[derive(Debug, Default)]
pub struct IdleRecorder {
    recording: AtomicBool,
    idle_us: Mutex<Option<Distribution>>,
}

/// Buckets for idle periods: 1 µs .. 10 s, 10 per decade.
pub fn idle_buckets() -> Distribution {
    Distribution::log_buckets("us", 1.0, 1e7, 10)
}

impl IdleRecorder {
    /// Starts recording into a fresh distribution.
    pub fn start(&self) {
        *self.idle_us.lock().expect("idle lock") = Some(idle_buckets());
        self.recording.store(true, Ordering::Release);
    }

    /// Stops recording and returns the idle periods.
    pub fn stop(&self) -> Distribution {
        self.recording.store(false, Ordering::Release);
        self.idle_us
            .lock()
            .expect("idle lock")
            .take()
            .unwrap_or_else(idle_buckets)
    }

    fn record(&self, us: f64) {
        if self.recording.load(Ordering::Acquire) {
            if let Some(d) = self.idle_us.lock().expect("idle lock").as_mut() {
                d.record(us);
            }
        }
    }
}

struct Shared {
    queue: Mutex<VecDeque<Job>>,
    /// The queue's length, readable without the lock.
    queued: AtomicU32,
    cv: Condvar,
    stop: AtomicBool,
    idle: Arc<IdleRecorder>,
    side_cpus: Vec<u32>,
    side_sched: SchedClass,
}

/// A running service.
pub struct Service {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    steps_per_us: f64,
    worker_tid: u32,
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
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            queued: AtomicU32::new(0),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            idle: Arc::new(IdleRecorder::default()),
            side_cpus: cfg.side_cpus.clone(),
            side_sched: cfg.side_sched,
        });
        let (tx, rx) = std::sync::mpsc::channel::<Result<(f64, u32)>>();
        let w_shared = shared.clone();
        let worker = std::thread::Builder::new()
            .name("elfen-lc-worker".into())
            .spawn(move || worker_main(w_shared, cfg, tx))
            .map_err(|e| BenchError::io("spawning the LC worker", e))?;
        let (steps_per_us, worker_tid) = match rx.recv() {
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
            worker_tid,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Calibrated chase steps per µs (alone, cache-hot).
    pub fn steps_per_us(&self) -> f64 {
        self.steps_per_us
    }

    /// The worker thread's id.
    pub fn worker_tid(&self) -> u32 {
        self.worker_tid
    }

    /// The worker's idle-period recorder.
    pub fn idle(&self) -> &Arc<IdleRecorder> {
        &self.shared.idle
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

/// Pins the calling side thread and raises its class (best effort: the
/// harness says in the run record whether real-time priority was granted).
fn side_thread_setup(shared: &Shared) -> Option<elfen_topo::PinGuard> {
    let pin = elfen_topo::PinGuard::with_cpus(&shared.side_cpus).ok();
    if shared.side_sched != SchedClass::Other {
        let _ = elfen_cmd::proc::set_sched(0, shared.side_sched);
    }
    pin
}

fn acceptor_main(shared: Arc<Shared>, listener: TcpListener) {
    let _pin = side_thread_setup(&shared);
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

/// Reads exactly `buf.len()` bytes, retrying read timeouts until `stop`.
/// `Ok(false)` on a clean end of stream before the first byte.
fn read_full(r: &mut impl Read, buf: &mut [u8], stop: &AtomicBool) -> std::io::Result<bool> {
    let mut have = 0;
    while have < buf.len() {
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        match r.read(&mut buf[have..]) {
            Ok(0) if have == 0 => return Ok(false),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => have += n,
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn dispatcher_main(shared: Arc<Shared>, stream: TcpStream) {
    let _pin = side_thread_setup(&shared);
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
    let mut head = [0u8; wire::REQUEST_HEADER];
    let mut payload = Vec::new();
    while let Ok(true) = read_full(&mut r, &mut head, &shared.stop) {
        let h = RequestHeader::decode(&head);
        let answer = |status: Status| {
            let resp = Response {
                id: h.id,
                service_ns: 0,
                queued_ns: 0,
                status,
                result: 0,
            };
            (&conn.stream).write_all(&resp.encode()).is_ok()
        };
        if h.len > wire::MAX_PAYLOAD {
            answer(Status::BadRequest);
            break;
        }
        payload.resize(h.len as usize, 0);
        if !matches!(read_full(&mut r, &mut payload, &shared.stop), Ok(true)) && h.len > 0 {
            break;
        }
        match h.kind {
            Kind::Ping => {
                if !answer(Status::Ok) {
                    break;
                }
            }
            Kind::Unknown(_) => {
                if !answer(Status::BadRequest) {
                    break;
                }
            }
            Kind::Work => {
                let job = Job {
                    id: h.id,
                    work_ns: h.arg,
                    arrived_ns: mono_ns(),
                    conn: conn.clone(),
                };
                let mut q = shared.queue.lock().expect("queue lock");
                q.push_back(job);
                shared.queued.store(q.len() as u32, Ordering::Release);
                drop(q);
                shared.cv.notify_one();
            }
        }
    }
    // Requests of a closed connection still queued are dropped by the worker.
    conn.closed.store(true, Ordering::SeqCst);
}

fn worker_main(
    shared: Arc<Shared>,
    cfg: ServiceConfig,
    ready: std::sync::mpsc::Sender<Result<(f64, u32)>>,
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
    let steps_per_ns = steps_per_us / 1e3;
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
    if ready
        .send(Ok((steps_per_us, elfen_cmd::proc::gettid())))
        .is_err()
    {
        return;
    }
    let mut last_end = mono_ns();
    loop {
        let mut waited = false;
        let (job, left) = {
            let mut q = shared.queue.lock().expect("queue lock");
            loop {
                if shared.stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Some(j) = q.pop_front() {
                    shared.queued.store(q.len() as u32, Ordering::Release);
                    break (j, q.len() as u32);
                }
                waited = true;
                q = shared.cv.wait(q).expect("queue lock");
            }
        };
        if job.conn.closed.load(Ordering::Relaxed) {
            continue;
        }
        let begin = mono_ns();
        if waited {
            shared
                .idle
                .record(begin.saturating_sub(last_end) as f64 / 1e3);
        }
        if let Some(l) = lc.as_mut() {
            l.request_begin_with_queue(job.id, left);
            if let Some(t) = &cfg.trace {
                t.lock()
                    .expect("trace")
                    .push(Published::Begin(l.queue_len()));
            }
        }
        chase.run(((job.work_ns as f64 * steps_per_ns).round() as u64).max(1));
        let done = mono_ns();
        let resp = Response {
            id: job.id,
            service_ns: done - begin,
            queued_ns: begin.saturating_sub(job.arrived_ns),
            status: Status::Ok,
            result: 0,
        };
        if (&job.conn.stream).write_all(&resp.encode()).is_err() {
            job.conn.closed.store(true, Ordering::Relaxed);
        }
        let waiting = shared.queued.load(Ordering::Acquire);
        if let Some(l) = lc.as_mut() {
            l.request_end_with_queue(waiting);
            if let Some(t) = &cfg.trace {
                t.lock().expect("trace").push(Published::End(l.queue_len()));
            }
        }
        last_end = mono_ns();
    }
}

/// Whether a read error only means "nothing yet" (read timeout or signal).
pub use elfen_load::conn::is_timeout;

#[cfg(test)]
mod tests {
    use super::*;
    use elfen_wire::request_bytes;

    #[test]
    fn a_taken_port_is_a_clear_error() {
        let l = bind(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let e = bind(port).unwrap_err().to_string();
        assert!(e.contains(&port.to_string()) && e.contains("in use"), "{e}");
    }

    fn read_response(s: &mut TcpStream) -> Response {
        let mut b = [0u8; wire::RESPONSE_BYTES];
        s.read_exact(&mut b).unwrap();
        Response::decode(&b)
    }

    #[test]
    fn the_service_serves_pings_work_and_bad_requests() {
        let cpus = elfen_topo::current_affinity().unwrap();
        let svc = Service::start(
            bind(0).unwrap(),
            ServiceConfig {
                request_cpu: cpus[0],
                side_cpus: cpus.clone(),
                side_sched: SchedClass::Other,
                working_set_bytes: 256 * 1024,
                calibrate_ms: 10,
                page: None,
                trace: None,
            },
        )
        .unwrap();
        assert!(svc.steps_per_us() > 0.0);
        svc.idle().start();
        let mut s = TcpStream::connect(svc.addr()).unwrap();
        s.write_all(&request_bytes(9, 0, b"", Kind::Ping)).unwrap();
        let r = read_response(&mut s);
        assert_eq!((r.id, r.status, r.service_ns), (9, Status::Ok, 0));
        for (id, us) in [(1u64, 50u64), (2, 100), (3, 20)] {
            s.write_all(&request_bytes(id, us * 1000, b"", Kind::Work))
                .unwrap();
            let r = read_response(&mut s);
            assert_eq!((r.id, r.status), (id, Status::Ok));
            assert!(r.service_ns > 0);
        }
        s.write_all(&request_bytes(4, 0, b"", Kind::Unknown(7)))
            .unwrap();
        assert_eq!(read_response(&mut s).status, Status::BadRequest);
        // a payload larger than the protocol allows: status 1, then closed
        let mut big = request_bytes(5, 0, b"", Kind::Work);
        big[16..20].copy_from_slice(&(wire::MAX_PAYLOAD + 1).to_le_bytes());
        s.write_all(&big).unwrap();
        assert_eq!(read_response(&mut s).status, Status::BadRequest);
        let mut rest = Vec::new();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "connection closed");
        let idle = svc.idle().stop();
        assert!(idle.total() <= 3, "{idle:?}");
        svc.stop();
    }

    #[test]
    fn the_queue_length_is_published_at_begin_and_end() {
        // One request, then four more while it runs: the first begins on an
        // empty queue and ends with four waiting; the others count down.
        let cpus = elfen_topo::current_affinity().unwrap();
        let trace = Arc::new(Mutex::new(Vec::new()));
        let dir = tempfile::tempdir().unwrap();
        let page = Page::create(
            dir.path().join("page"),
            &elfen_shm::PageSpec::for_pairs(&[(cpus[0], vec![cpus[cpus.len() - 1]])], 1, 0),
        )
        .unwrap();
        let svc = Service::start(
            bind(0).unwrap(),
            ServiceConfig {
                request_cpu: cpus[0],
                side_cpus: cpus.clone(),
                side_sched: SchedClass::Other,
                working_set_bytes: 256 * 1024,
                calibrate_ms: 10,
                page: Some((Arc::new(page), 0)),
                trace: Some(trace.clone()),
            },
        )
        .unwrap();
        let mut s = TcpStream::connect(svc.addr()).unwrap();
        // long enough that the other four surely arrive while it runs
        s.write_all(&request_bytes(0, 200_000_000, b"", Kind::Work))
            .unwrap();
        // the others are sent once it has begun (not after a fixed wait: a
        // loaded machine may start it late)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !trace
            .lock()
            .unwrap()
            .iter()
            .any(|p| matches!(p, Published::Begin(_)))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the first request never began"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut rest = Vec::new();
        for id in 1..5 {
            rest.extend(request_bytes(id, 1_000_000, b"", Kind::Work));
        }
        s.write_all(&rest).unwrap();
        for _ in 0..5 {
            assert_eq!(read_response(&mut s).status, Status::Ok);
        }
        svc.stop();
        use Published::{Begin, End};
        assert_eq!(
            *trace.lock().unwrap(),
            vec![
                Begin(0),
                End(4),
                Begin(3),
                End(3),
                Begin(2),
                End(2),
                Begin(1),
                End(1),
                Begin(0),
                End(0)
            ]
        );
    }
}
