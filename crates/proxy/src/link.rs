//! A **link**: the proxy's connection to one replica. Requests are written
//! under a lock by whichever thread sends them (a client's reader, the
//! monitor re-sending or warming); one reader thread per connection reads
//! the answers and hands them to the [`Sink`] (the engine). A connection
//! that fails or closes is reported once, with its epoch, so events of
//! an old connection are told from those of its successor.

use crate::config::Protocol;
use crate::message::{Answer, Request, read_answer, write_request};
use std::collections::VecDeque;
use std::io::{self, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Who is told what a link reads.
pub trait Sink: Send + Sync {
    /// Replica `replica` answered request `id` on connection `epoch`.
    fn on_answer(&self, replica: usize, epoch: u64, id: u64, answer: Answer);
    /// Connection `epoch` to replica `replica` failed or closed.
    fn on_lost(&self, replica: usize, epoch: u64);
}

/// How long a write to a replica may block before the connection is taken
/// as lost (a replica that stops reading fills its socket buffer).
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// HTTP: proxy ids in send order, each with "was a HEAD".
type Fifo = Arc<Mutex<VecDeque<(u64, bool)>>>;

struct Writer {
    stream: Option<TcpStream>,
    fifo: Fifo,
    buf: Vec<u8>,
}

/// The connection to one replica.
pub struct Link {
    replica: usize,
    addr: SocketAddr,
    host: String,
    protocol: Protocol,
    fifo_priority: u8,
    w: Mutex<Writer>,
    epoch: AtomicU64,
    up: AtomicBool,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("replica", &self.replica)
            .field("addr", &self.addr)
            .field("epoch", &self.epoch)
            .field("up", &self.up)
            .finish()
    }
}

/// Puts the calling thread at SCHED_FIFO `priority` (0: leaves it alone);
/// a refusal (not root) leaves it at its class.
pub fn enter_priority(priority: u8) {
    if priority > 0 {
        let _ = elfen_cmd::proc::set_sched(0, elfen_cmd::proc::SchedClass::Fifo(priority));
    }
}

impl Link {
    /// A link to replica number `replica` at `addr`, not connected yet.
    pub fn new(replica: usize, addr: SocketAddr, protocol: Protocol, fifo_priority: u8) -> Link {
        Link {
            replica,
            addr,
            host: addr.to_string(),
            protocol,
            fifo_priority,
            w: Mutex::new(Writer {
                stream: None,
                fifo: Fifo::default(),
                buf: Vec::with_capacity(4096),
            }),
            epoch: AtomicU64::new(0),
            up: AtomicBool::new(false),
        }
    }

    /// The replica's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The current connection's epoch (0: never connected).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether a connection is open.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Opens a new connection (closing the old one) and starts its reader;
    /// returns its epoch.
    pub fn connect(&self, sink: Arc<dyn Sink>) -> io::Result<u64> {
        let s = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT)?;
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let rx = s.try_clone()?;
        let fifo = Fifo::default();
        let epoch = {
            let mut w = self.w.lock().expect("link writer");
            if let Some(old) = w.stream.take() {
                let _ = old.shutdown(Shutdown::Both);
            }
            w.stream = Some(s);
            w.fifo = fifo.clone();
            let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
            self.up.store(true, Ordering::Release);
            epoch
        };
        let (replica, protocol, prio) = (self.replica, self.protocol, self.fifo_priority);
        let spawned = std::thread::Builder::new()
            .name(format!("elfen-proxy-rx{replica}"))
            .spawn(move || {
                enter_priority(prio);
                read_loop(replica, epoch, protocol, rx, fifo, sink.as_ref());
            });
        if let Err(e) = spawned {
            self.drop_connection(epoch);
            return Err(e);
        }
        Ok(epoch)
    }

    /// Sends request `req` under proxy id `id`; returns the epoch of
    /// the connection it went out on, or `Err(epoch)` if there is no
    /// connection or the write failed (the connection is then closed, and
    /// its reader reports it lost).
    pub fn send(&self, id: u64, req: &Request) -> Result<u64, u64> {
        let mut w = self.w.lock().expect("link writer");
        let epoch = self.epoch.load(Ordering::Acquire);
        let Writer { stream, fifo, buf } = &mut *w;
        let Some(s) = stream.as_mut() else {
            return Err(epoch);
        };
        buf.clear();
        write_request(req, id, &self.host, buf);
        if self.protocol == Protocol::Http {
            fifo.lock().expect("fifo").push_back((id, req.is_head()));
        }
        match s.write_all(buf) {
            Ok(()) => Ok(epoch),
            Err(_) => {
                let _ = s.shutdown(Shutdown::Both);
                *stream = None;
                self.up.store(false, Ordering::Release);
                Err(epoch)
            }
        }
    }

    /// Closes connection `epoch` if it is the current one (its reader then
    /// reports it lost).
    pub fn drop_connection(&self, epoch: u64) {
        let mut w = self.w.lock().expect("link writer");
        if self.epoch.load(Ordering::Acquire) == epoch {
            if let Some(s) = w.stream.take() {
                let _ = s.shutdown(Shutdown::Both);
            }
            self.up.store(false, Ordering::Release);
        }
    }

    /// Closes the current connection.
    pub fn close(&self) {
        self.drop_connection(self.epoch());
    }
}

fn read_loop(
    replica: usize,
    epoch: u64,
    protocol: Protocol,
    rx: TcpStream,
    fifo: Fifo,
    sink: &dyn Sink,
) {
    let mut r = BufReader::with_capacity(64 * 1024, rx);
    loop {
        let head = || {
            fifo.lock()
                .expect("fifo")
                .front()
                .is_some_and(|&(_, head)| head)
        };
        match read_answer(protocol, &mut r, head) {
            Ok(Some(a)) => {
                let id = match a.id {
                    Some(id) => Some(id),
                    None => fifo.lock().expect("fifo").pop_front().map(|(id, _)| id),
                };
                let Some(id) = id else {
                    break; // an answer to no request: the connection is out of step
                };
                sink.on_answer(replica, epoch, id, a.answer);
                if a.close {
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    let _ = r.get_ref().shutdown(Shutdown::Both);
    sink.on_lost(replica, epoch);
}
