//! `elfen proxy demo-service`: a small LC service for the proxy's tests
//! and demonstrations, in the shape of the services elfen drives — one
//! worker pinned to the request lane takes requests in order from a queue
//! fed by one reader thread per connection, publishes each request's begin
//! and end on the signal page through the LC API (the request id it
//! publishes is the one on the wire), and spins for the request's work.
//! It speaks the LC wire protocol (work = `arg` ns) or HTTP/1.1 (work =
//! `?us=N` in the target; every request is answered `200 ok`, with its
//! lane in `X-Lane`, so a test can tell which replica answered).
//!
//! Misbehaviour on request, so the proxy can be tested deterministically:
//! `--stall-at N --stall-ms M` pauses the Nth work request (with
//! `--stall-on-usr1`, the next one after each SIGUSR1) for M ms after its
//! begin (off the CPU, like a thread held at a safepoint; with
//! `--stall-spin`, on it, like a request running long; with `--stall-stw`,
//! as a JVM's stop-the-world pause looks to the scheduler: a thread named
//! `VM Thread` — HotSpot's name for the thread that runs collections and
//! safepoints — spins on the worker's CPU for the stall while the worker
//! waits for it off the CPU, which the proxy's BPF JVM watch sees as a
//! pause), `--mute` reads
//! requests and never answers them (pings excepted), `--close-after N`
//! closes each connection after answering N work requests.

use anyhow::Context;
use clap::Args;
use elfen_runtime::LcLane;
use elfen_shm::clock::monotonic_ns as mono_ns;
use elfen_shm::{Access, Page};
use elfen_wire::{self as wire, Kind, RequestHeader, Response, Status};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Arguments of `elfen proxy demo-service`; every placement option also
/// comes from the `ELFEN_*` variable the proxy and the harness set.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// TCP port on 127.0.0.1.
    #[arg(long, env = "ELFEN_PORT")]
    pub port: u16,
    /// The request lane's CPU (the worker is pinned there).
    #[arg(long, env = "ELFEN_CPU")]
    pub cpu: Option<u32>,
    /// The signal page to publish on (none: publish nothing).
    #[arg(long, env = "ELFEN_PAGE")]
    pub page: Option<PathBuf>,
    /// The request lane's index in the page.
    #[arg(long, env = "ELFEN_LANE", default_value_t = 0)]
    pub lane: u32,
    /// `wire` or `http`.
    #[arg(long, default_value = "wire")]
    pub protocol: String,
    /// Pause the Nth work request (counting from 1) after its begin.
    #[arg(long)]
    pub stall_at: Option<u64>,
    /// Pause the next work request after each SIGUSR1 (so a test can pause
    /// whichever replica is active at a moment of its choosing).
    #[arg(long)]
    pub stall_on_usr1: bool,
    /// How long that pause lasts, ms.
    #[arg(long, default_value_t = 0)]
    pub stall_ms: u64,
    /// Spin through the pause (on the CPU) instead of sleeping.
    #[arg(long)]
    pub stall_spin: bool,
    /// Make the pause a stop-the-world pause as a JVM's looks to the
    /// scheduler: a thread named `VM Thread` spins for it on the worker's
    /// CPU while the worker waits.
    #[arg(long, conflicts_with = "stall_spin")]
    pub stall_stw: bool,
    /// Never answer work requests (pings are answered).
    #[arg(long)]
    pub mute: bool,
    /// Close each connection after answering this many work requests.
    #[arg(long)]
    pub close_after: Option<u64>,
}

type Conn = Arc<Mutex<TcpStream>>;

/// A request waiting for the worker.
struct Job {
    conn: Conn,
    /// The id published on the LC line (the wire id; a counter for HTTP).
    id: u64,
    work_ns: u64,
    reply: Reply,
}

enum Reply {
    Wire,
    Http { head: bool },
}

struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

/// Set by SIGUSR1 (with `--stall-on-usr1`): the next request stalls.
static STALL_NEXT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_usr1(_: libc::c_int) {
    STALL_NEXT.store(true, Ordering::SeqCst);
}

/// Spins for `ns` on the CPU.
fn spin(ns: u64) {
    let end = mono_ns() + ns;
    while mono_ns() < end {
        std::hint::spin_loop();
    }
}

/// Runs the service until SIGINT or SIGTERM.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let http = match a.protocol.as_str() {
        "wire" => false,
        "http" => true,
        p => anyhow::bail!("--protocol {p:?}: expected wire or http"),
    };
    let page = match &a.page {
        Some(p) => Some(Arc::new(Page::attach(p, Access::Lc).with_context(
            || format!("attaching the signal page {} as the LC", p.display()),
        )?)),
        None => None,
    };
    let listener = TcpListener::bind(("127.0.0.1", a.port))
        .with_context(|| format!("listening on 127.0.0.1:{}", a.port))?;
    let stop = elfen_cmd::interrupt::install();
    if a.stall_on_usr1 {
        // SAFETY: a handler that only stores to an atomic; empty mask.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_usr1 as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
        }
    }
    let q = Arc::new(Queue {
        jobs: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
    });
    let next_http_id = Arc::new(AtomicU64::new(1));
    let (qa, args) = (q.clone(), a.clone());
    std::thread::Builder::new()
        .name("demo-accept".into())
        .spawn(move || {
            for s in listener.incoming().flatten() {
                let _ = s.set_nodelay(true);
                let (q, args, ids) = (qa.clone(), args.clone(), next_http_id.clone());
                let _ = std::thread::Builder::new()
                    .name("demo-conn".into())
                    .spawn(move || {
                        if http {
                            read_http(s, &q, &args, &ids)
                        } else {
                            read_wire(s, &q, &args)
                        }
                    });
            }
        })?;
    let stw = if a.stall_stw {
        Some(start_stw_thread(a.cpu)?)
    } else {
        None
    };
    // The worker attaches the lane: the LC thread is the one that publishes.
    let qw = q.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::Builder::new()
        .name("demo-worker".into())
        .spawn(move || {
            if let Some(cpu) = a.cpu {
                let _ = elfen_topo::pin_current_thread(cpu);
            }
            let lane = page.map(|p| LcLane::attach(p, a.lane)).transpose();
            let mut lane = match lane {
                Ok(l) => {
                    let _ = tx.send(Ok(()));
                    l
                }
                Err(e) => {
                    let _ = tx.send(Err(format!(
                        "attaching lane {} as its LC thread: {e}",
                        a.lane
                    )));
                    return;
                }
            };
            work_loop(&qw, &a, lane.as_mut(), stw.as_ref());
        })?;
    rx.recv()
        .unwrap_or_else(|_| Err("the worker died while starting".into()))
        .map_err(anyhow::Error::msg)?;
    eprintln!(
        "elfen proxy demo-service: listening on 127.0.0.1 ({})",
        if http { "http" } else { "wire" }
    );
    while !stop.load(Ordering::Relaxed) && !worker.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A request to the `VM Thread`: spin this long, then answer.
type StwJob = (u64, std::sync::mpsc::Sender<()>);

/// Starts the thread that plays a JVM's `VM Thread` (named so; pinned to
/// the worker's CPU): it spins for each stall it is sent.
fn start_stw_thread(cpu: Option<u32>) -> anyhow::Result<std::sync::mpsc::Sender<StwJob>> {
    let (tx, rx) = std::sync::mpsc::channel::<StwJob>();
    std::thread::Builder::new()
        .name("VM Thread".into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                let _ = elfen_topo::pin_current_thread(cpu);
            }
            for (ns, done) in rx {
                spin(ns);
                let _ = done.send(());
            }
        })
        .context("starting the VM Thread")?;
    Ok(tx)
}

fn work_loop(
    q: &Queue,
    a: &DemoArgs,
    mut lane: Option<&mut LcLane>,
    stw: Option<&std::sync::mpsc::Sender<StwJob>>,
) {
    let mut n = 0u64;
    let mut answered: std::collections::HashMap<usize, u64> = std::collections::HashMap::new();
    loop {
        let (job, left) = {
            let mut jobs = q.jobs.lock().expect("queue");
            while jobs.is_empty() {
                jobs = q.ready.wait(jobs).expect("queue");
            }
            let j = jobs.pop_front().expect("non-empty");
            (j, jobs.len() as u32)
        };
        n += 1;
        let begin = mono_ns();
        if let Some(l) = lane.as_deref_mut() {
            l.request_begin_with_queue(job.id, left);
        }
        let stall = a.stall_at == Some(n) || STALL_NEXT.swap(false, Ordering::SeqCst);
        if stall && a.stall_ms > 0 {
            if let Some(stw) = stw {
                // held like a Java thread at a safepoint until the VM
                // thread is done
                let (done_tx, done_rx) = std::sync::mpsc::channel();
                if stw.send((a.stall_ms * 1_000_000, done_tx)).is_ok() {
                    let _ = done_rx.recv();
                }
            } else if a.stall_spin {
                spin(a.stall_ms * 1_000_000);
            } else {
                std::thread::sleep(Duration::from_millis(a.stall_ms));
            }
        }
        spin(job.work_ns);
        let service = mono_ns() - begin;
        let bytes = match job.reply {
            Reply::Wire => Response {
                id: job.id,
                service_ns: service,
                queued_ns: 0,
                status: Status::Ok,
                result: 0,
            }
            .encode()
            .to_vec(),
            Reply::Http { head } => {
                let body = "ok\n";
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Service-Ns: {service}\r\nX-Lane: {}\r\n\r\n{}",
                    body.len(),
                    a.lane,
                    if head { "" } else { body }
                )
                .into_bytes()
            }
        };
        let key = Arc::as_ptr(&job.conn) as usize;
        {
            let mut s = job.conn.lock().expect("conn");
            let _ = s.write_all(&bytes);
            let count = answered.entry(key).or_insert(0);
            *count += 1;
            if a.close_after.is_some_and(|c| *count >= c) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        if let Some(l) = lane.as_deref_mut() {
            let left = q.jobs.lock().expect("queue").len() as u32;
            l.request_end_with_queue(left);
        }
    }
}

fn push(q: &Queue, job: Job) {
    q.jobs.lock().expect("queue").push_back(job);
    q.ready.notify_one();
}

fn read_wire(s: TcpStream, q: &Queue, a: &DemoArgs) {
    let Ok(w) = s.try_clone() else { return };
    let conn: Conn = Arc::new(Mutex::new(w));
    let mut r = BufReader::new(s);
    let mut head = [0u8; wire::REQUEST_HEADER];
    while r.read_exact(&mut head).is_ok() {
        let h = RequestHeader::decode(&head);
        let answer = |status| {
            let b = Response {
                id: h.id,
                service_ns: 0,
                queued_ns: 0,
                status,
                result: 0,
            }
            .encode();
            let _ = conn.lock().expect("conn").write_all(&b);
        };
        if h.len > wire::MAX_PAYLOAD {
            answer(Status::BadRequest);
            break;
        }
        let mut payload = vec![0u8; h.len as usize];
        if r.read_exact(&mut payload).is_err() {
            break;
        }
        match h.kind {
            Kind::Ping => answer(Status::Ok),
            Kind::Work if a.mute => {}
            Kind::Work => push(
                q,
                Job {
                    conn: conn.clone(),
                    id: h.id,
                    work_ns: h.arg,
                    reply: Reply::Wire,
                },
            ),
            Kind::Unknown(_) => answer(Status::BadRequest),
        }
    }
}

/// The work of an HTTP target: `us=N` in its query, µs.
fn http_work_ns(target: &str) -> u64 {
    target
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("us="))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |us| us * 1000)
}

fn read_http(s: TcpStream, q: &Queue, a: &DemoArgs, ids: &AtomicU64) {
    let Ok(w) = s.try_clone() else { return };
    let conn: Conn = Arc::new(Mutex::new(w));
    let mut r = BufReader::new(s);
    loop {
        let mut head = Vec::new();
        loop {
            let before = head.len();
            match r.read_until(b'\n', &mut head) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if &head[before..] == b"\r\n" {
                if before == 0 {
                    head.clear();
                    continue;
                }
                break;
            }
        }
        let mut hs = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut hs);
        if !matches!(req.parse(&head), Ok(httparse::Status::Complete(_))) {
            let _ = conn.lock().expect("conn").write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        }
        let len = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| {
                std::str::from_utf8(h.value)
                    .ok()?
                    .trim()
                    .parse::<usize>()
                    .ok()
            })
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        if a.mute {
            continue;
        }
        push(
            q,
            Job {
                conn: conn.clone(),
                id: ids.fetch_add(1, Ordering::Relaxed),
                work_ns: http_work_ns(req.path.unwrap_or("/")),
                reply: Reply::Http {
                    head: req.method == Some("HEAD"),
                },
            },
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn http_work_comes_from_the_query() {
        assert_eq!(super::http_work_ns("/x?a=1&us=25"), 25_000);
        assert_eq!(super::http_work_ns("/x"), 0);
        assert_eq!(super::http_work_ns("/x?us=abc"), 0);
    }
}
