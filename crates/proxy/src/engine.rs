//! The **engine**: every request in flight, where it was sent, who answers
//! it first. It routes new requests to the active replica, re-sends
//! requests in flight to the other replica (a hedge: after a pause of the
//! active one, after a lost connection, or after a timeout), gives each
//! client the first answer to its request and drops the late duplicate
//! (counted as work done twice), swaps the roles, and replays a sample of
//! recent requests to warm a replica.
//!
//! Mechanism only: *when* to hedge, swap and warm is the monitor's
//! ([`crate::monitor`]) decision.

use crate::config::HedgeMode;
use crate::detect::{Demand, Recent, Signal};
use crate::link::{Link, Sink};
use crate::message::{Answer, Request, wire_response_for};
use elfen_shm::clock::monotonic_ns as mono_ns;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// A wire-protocol client connection (answers are written by whichever
/// thread gets them first).
#[derive(Debug)]
pub struct WireClient {
    stream: Mutex<TcpStream>,
    closed: AtomicBool,
}

impl WireClient {
    /// A client on `stream` (its writing half).
    pub fn new(stream: TcpStream) -> WireClient {
        WireClient {
            stream: Mutex::new(stream),
            closed: AtomicBool::new(false),
        }
    }

    /// Writes a response; a client that cannot take it is closed (it alone
    /// loses its answers).
    pub fn send(&self, bytes: &[u8]) {
        if self.closed.load(Relaxed) {
            return;
        }
        let mut s = self.stream.lock().expect("client stream");
        if s.write_all(bytes).is_err() {
            self.closed.store(true, Relaxed);
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.closed.store(true, Relaxed);
        let _ = self
            .stream
            .lock()
            .expect("client stream")
            .shutdown(Shutdown::Both);
    }
}

/// Where an answer goes.
#[derive(Debug)]
pub enum Deliver {
    /// To a wire-protocol client, under its own request id.
    Wire {
        /// The client.
        client: Arc<WireClient>,
        /// Its id for the request.
        id: u64,
    },
    /// To an HTTP client's waiting handler.
    Http(tokio::sync::oneshot::Sender<Answer>),
    /// Nowhere: a warm-up request.
    Warm,
}

impl Deliver {
    fn deliver(self, answer: Answer) {
        match self {
            Deliver::Wire { client, id } => {
                client.send(&wire_response_for(&answer, id).encode());
            }
            Deliver::Http(tx) => {
                let _ = tx.send(answer);
            }
            Deliver::Warm => {}
        }
    }
}

/// One try of a request at a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Try {
    sent_ns: u64,
    epoch: u64,
}

#[derive(Debug)]
struct Entry {
    deliver: Option<Deliver>,
    request: Arc<Request>,
    key: u64,
    idempotent: bool,
    warm: bool,
    first: usize,
    at: [Option<Try>; 2],
    answered: bool,
}

/// A replica's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not connected yet.
    Starting,
    /// Serving.
    Up,
    /// Taken as paused (by `signal`) at `since_ns`.
    Paused {
        /// When.
        since_ns: u64,
        /// Why.
        signal: Signal,
    },
    /// Its connection is lost or its process exited, since `since_ns`.
    Down {
        /// When.
        since_ns: u64,
    },
}

/// What happened at one replica, counted.
#[derive(Debug, Default)]
pub struct ReplicaCounters {
    /// Requests sent (first tries, hedges and warm-ups).
    pub sent: AtomicU64,
    /// Requests it answered first (delivered to the client).
    pub first_answers: AtomicU64,
    /// Answers that came after the other replica's (dropped): work done
    /// twice.
    pub late_answers: AtomicU64,
    /// Service time of those late answers, ns (where reported).
    pub late_service_ns: AtomicU64,
    /// Warm-up requests sent to it.
    pub warmups: AtomicU64,
    /// Answers with an error status of its own.
    pub error_answers: AtomicU64,
    /// Connections lost (closed, reset, failed writes).
    pub links_lost: AtomicU64,
    /// Connection attempts that failed.
    pub connect_failures: AtomicU64,
    /// Pauses detected, by [`Signal::index`].
    pub pauses: [AtomicU64; Signal::ALL.len()],
    /// Restarts of its process.
    pub restarts: AtomicU64,
    /// Restarts that failed.
    pub restart_failures: AtomicU64,
}

/// One replica as the engine sees it.
#[derive(Debug)]
pub struct Replica {
    /// Its name in output (`A`, `B`).
    pub name: &'static str,
    /// The connection to it.
    pub link: Link,
    health: Mutex<Health>,
    warm_left: AtomicU32,
    last_answer_ns: AtomicU64,
    lost_gen: AtomicU64,
    /// Its counters.
    pub counters: ReplicaCounters,
}

/// What happened in the proxy, counted.
#[derive(Debug, Default)]
pub struct Counters {
    /// Client requests (work; pings excluded).
    pub requests: AtomicU64,
    /// Client requests answered.
    pub answered: AtomicU64,
    /// Client requests answered with the proxy's failure (no replica).
    pub failed: AtomicU64,
    /// Requests re-sent to the other replica because of a pause or a lost
    /// connection, by [`Signal::index`].
    pub hedges_signal: [AtomicU64; Signal::ALL.len()],
    /// Requests re-sent after the percentile timeout.
    pub hedges_timeout: AtomicU64,
    /// Hedged requests whose first answer came from the replica they were
    /// re-sent to.
    pub hedge_wins: AtomicU64,
    /// Role swaps.
    pub swaps: AtomicU64,
    /// Answers for requests the proxy does not know.
    pub stray_answers: AtomicU64,
    /// Malformed client requests (answered with an error, that client only).
    pub malformed: AtomicU64,
    /// Client connections accepted.
    pub clients: AtomicU64,
}

impl Counters {
    /// All hedges.
    pub fn hedges(&self) -> u64 {
        self.hedges_signal
            .iter()
            .map(|c| c.load(Relaxed))
            .sum::<u64>()
            + self.hedges_timeout.load(Relaxed)
    }
}

/// Recent requests kept to warm a replica with.
const SAMPLE: usize = 256;

/// What the engine needs of the configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The hedge mode.
    pub mode: HedgeMode,
    /// Bounds from demand: factor, floor (ns), min samples.
    pub demand: (f64, u64, usize),
    /// Timeout hedge: quantile (0..1), window, initial timeout (ns).
    pub timeout: (f64, usize, u64),
}

/// The engine.
pub struct Engine {
    mode: HedgeMode,
    /// The two replicas.
    pub replicas: [Replica; 2],
    table: Mutex<HashMap<u64, Entry>>,
    active: AtomicUsize,
    next_id: AtomicU64,
    /// The proxy's counters.
    pub counters: Counters,
    demand: Mutex<Demand>,
    latency: Mutex<Recent>,
    timeout: (usize, u64),
    sample: Mutex<(VecDeque<Arc<Request>>, usize)>,
    /// Set once the proxy stops.
    pub stopping: AtomicBool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("mode", &self.mode)
            .field("active", &self.active)
            .finish()
    }
}

/// A snapshot of one replica's requests in flight.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outstanding {
    /// How many (warm-ups included).
    pub count: usize,
    /// Age of the oldest, ns.
    pub oldest_ns: Option<u64>,
    /// Warm-ups among them.
    pub warm: usize,
}

impl Engine {
    /// An engine over links to the two replicas.
    pub fn new(cfg: EngineConfig, links: [Link; 2]) -> Engine {
        let [a, b] = links;
        let replica = |name, link| Replica {
            name,
            link,
            health: Mutex::new(Health::Starting),
            warm_left: AtomicU32::new(0),
            last_answer_ns: AtomicU64::new(0),
            lost_gen: AtomicU64::new(0),
            counters: ReplicaCounters::default(),
        };
        let (factor, floor, min) = cfg.demand;
        let (q, window, initial) = cfg.timeout;
        Engine {
            mode: cfg.mode,
            replicas: [replica("A", a), replica("B", b)],
            table: Mutex::new(HashMap::new()),
            active: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            counters: Counters::default(),
            demand: Mutex::new(Demand::new(factor, floor, min)),
            latency: Mutex::new(Recent::new(window, q)),
            timeout: (window, initial),
            sample: Mutex::new((VecDeque::with_capacity(SAMPLE), 0)),
            stopping: AtomicBool::new(false),
        }
    }

    /// The hedge mode.
    pub fn mode(&self) -> HedgeMode {
        self.mode
    }

    /// The active replica.
    pub fn active(&self) -> usize {
        self.active.load(Relaxed)
    }

    /// A replica's health.
    pub fn health(&self, r: usize) -> Health {
        *self.replicas[r].health.lock().expect("health")
    }

    /// Sets a replica's health.
    pub fn set_health(&self, r: usize, h: Health) {
        *self.replicas[r].health.lock().expect("health") = h;
    }

    /// Warm-up requests still to send to replica `r`.
    pub fn warm_left(&self, r: usize) -> u32 {
        self.replicas[r].warm_left.load(Relaxed)
    }

    /// Sets the warm-up requests still to send to replica `r`.
    pub fn set_warm_left(&self, r: usize, n: u32) {
        self.replicas[r].warm_left.store(n, Relaxed);
    }

    /// When replica `r` last answered, ns (0: never).
    pub fn last_answer_ns(&self, r: usize) -> u64 {
        self.replicas[r].last_answer_ns.load(Relaxed)
    }

    /// Whether replica `r` can take requests: connected and neither down
    /// nor paused.
    pub fn usable(&self, r: usize) -> bool {
        self.replicas[r].link.is_up() && matches!(self.health(r), Health::Up)
    }

    /// The replica a new request goes to: the active one, unless it is
    /// down and the other is up.
    fn route(&self) -> usize {
        let a = self.active();
        let up = |r: usize| {
            self.replicas[r].link.is_up() && !matches!(self.health(r), Health::Down { .. })
        };
        if up(a) || !up(1 - a) { a } else { 1 - a }
    }

    /// The demand table (for the monitor's bounds).
    pub fn demand(&self) -> std::sync::MutexGuard<'_, Demand> {
        self.demand.lock().expect("demand")
    }

    /// The timeout of the timeout hedge now, ns: the configured percentile
    /// of recent latencies, or the initial timeout until a tenth of the
    /// window is known.
    pub fn hedge_timeout_ns(&self) -> u64 {
        let (window, initial) = self.timeout;
        self.latency
            .lock()
            .expect("latency")
            .quantile(window / 10)
            .unwrap_or(initial)
    }

    /// A client's request: routed to a replica and sent.
    pub fn submit(&self, req: Request, idempotent: bool, deliver: Deliver) {
        self.counters.requests.fetch_add(1, Relaxed);
        let req = Arc::new(req);
        if idempotent {
            let mut s = self.sample.lock().expect("sample");
            if s.0.len() == SAMPLE {
                s.0.pop_front();
            }
            s.0.push_back(req.clone());
        }
        let r = self.route();
        self.start(r, req, idempotent, deliver, false);
    }

    fn start(&self, r: usize, req: Arc<Request>, idempotent: bool, deliver: Deliver, warm: bool) {
        let id = self.next_id.fetch_add(1, Relaxed);
        let mut at = [None, None];
        at[r] = Some(Try {
            sent_ns: mono_ns(),
            epoch: self.replicas[r].link.epoch(),
        });
        let entry = Entry {
            deliver: Some(deliver),
            key: req.key(),
            request: req.clone(),
            idempotent,
            warm,
            first: r,
            at,
            answered: false,
        };
        self.table.lock().expect("table").insert(id, entry);
        self.dispatch(r, id, &req);
    }

    fn dispatch(&self, r: usize, id: u64, req: &Request) {
        let rep = &self.replicas[r];
        rep.counters.sent.fetch_add(1, Relaxed);
        match rep.link.send(id, req) {
            Ok(epoch) => {
                let mut t = self.table.lock().expect("table");
                if let Some(Some(tr)) = t.get_mut(&id).map(|e| e.at[r].as_mut()) {
                    tr.epoch = epoch;
                }
            }
            Err(epoch) => self.lost(r, epoch),
        }
    }

    /// Sends request `id` to replica `to` as well, unless it is answered,
    /// already there, or may not be sent twice. Returns whether it was.
    fn resend(&self, id: u64, to: usize) -> bool {
        let req = {
            let mut t = self.table.lock().expect("table");
            let Some(e) = t.get_mut(&id) else {
                return false;
            };
            if e.answered || e.at[to].is_some() || !e.idempotent {
                return false;
            }
            e.at[to] = Some(Try {
                sent_ns: mono_ns(),
                epoch: self.replicas[to].link.epoch(),
            });
            e.request.clone()
        };
        self.dispatch(to, id, &req);
        true
    }

    /// Requests in flight at `r` (unanswered), oldest first by first try.
    fn in_flight_at(&self, r: usize, older_than_ns: Option<u64>) -> Vec<u64> {
        let now = mono_ns();
        let t = self.table.lock().expect("table");
        let mut v: Vec<(u64, u64)> = t
            .iter()
            .filter(|(_, e)| !e.answered && !e.warm)
            .filter_map(|(&id, e)| e.at[r].map(|tr| (tr.sent_ns, id)))
            .filter(|&(sent, _)| older_than_ns.is_none_or(|age| now.saturating_sub(sent) >= age))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, id)| id).collect()
    }

    /// Re-sends every request in flight at `from` to the other replica,
    /// counting them as hedges for `signal`; returns how many went.
    pub fn hedge_all(&self, from: usize, signal: Signal) -> usize {
        let to = 1 - from;
        let mut n = 0;
        for id in self.in_flight_at(from, None) {
            if self.resend(id, to) {
                n += 1;
            }
        }
        self.counters.hedges_signal[signal.index()].fetch_add(n as u64, Relaxed);
        n
    }

    /// Timeout hedge: re-sends to the other replica every request waiting
    /// at the active one for `timeout_ns` or longer; returns how many went.
    pub fn hedge_late(&self, timeout_ns: u64) -> usize {
        let from = self.active();
        let to = 1 - from;
        if !self.replicas[to].link.is_up() {
            return 0;
        }
        let mut n = 0;
        for id in self.in_flight_at(from, Some(timeout_ns)) {
            if self.resend(id, to) {
                n += 1;
            }
        }
        self.counters.hedges_timeout.fetch_add(n as u64, Relaxed);
        n
    }

    /// Makes `r` the active replica (counted if it changes).
    pub fn swap_to(&self, r: usize) {
        if self.active.swap(r, Relaxed) != r {
            self.counters.swaps.fetch_add(1, Relaxed);
        }
    }

    /// Replica `r` is taken as paused by `signal`.
    pub fn pause(&self, r: usize, signal: Signal, now_ns: u64) {
        self.replicas[r].counters.pauses[signal.index()].fetch_add(1, Relaxed);
        self.set_health(
            r,
            Health::Paused {
                since_ns: now_ns,
                signal,
            },
        );
    }

    /// What is in flight at replica `r`.
    pub fn outstanding(&self, r: usize) -> Outstanding {
        let now = mono_ns();
        let t = self.table.lock().expect("table");
        let mut o = Outstanding::default();
        for e in t.values() {
            if let Some(tr) = e.at[r] {
                if e.answered && !e.warm {
                    continue; // a late duplicate to come: not waited for
                }
                o.count += 1;
                o.warm += usize::from(e.warm);
                let age = now.saturating_sub(tr.sent_ns);
                o.oldest_ns = Some(o.oldest_ns.map_or(age, |x: u64| x.max(age)));
            }
        }
        o
    }

    /// The content key of request `id`, if it is in flight.
    pub fn key_of(&self, id: u64) -> Option<u64> {
        self.table.lock().expect("table").get(&id).map(|e| e.key)
    }

    /// Requests in flight (answered ones awaiting a late duplicate
    /// excluded).
    pub fn in_flight(&self) -> usize {
        self.table
            .lock()
            .expect("table")
            .values()
            .filter(|e| !e.answered)
            .count()
    }

    /// Sends one recent request to `r` to warm it; false if none is known.
    pub fn warm_one(&self, r: usize) -> bool {
        let req = {
            let mut s = self.sample.lock().expect("sample");
            if s.0.is_empty() {
                return false;
            }
            let i = s.1 % s.0.len();
            s.1 = s.1.wrapping_add(1);
            s.0[i].clone()
        };
        self.replicas[r].counters.warmups.fetch_add(1, Relaxed);
        self.start(r, req, true, Deliver::Warm, true);
        true
    }

    /// Connection `epoch` of replica `r` is lost: the requests in flight
    /// there go to the other replica (or fail, if they may not be sent
    /// twice or the other is down too), and the active role moves away.
    fn lost(&self, r: usize, epoch: u64) {
        let rep = &self.replicas[r];
        rep.link.drop_connection(epoch);
        let first_report = rep.lost_gen.fetch_max(epoch, Relaxed) < epoch;
        if first_report && !self.stopping.load(Relaxed) {
            rep.counters.links_lost.fetch_add(1, Relaxed);
            self.set_health(
                r,
                Health::Down {
                    since_ns: mono_ns(),
                },
            );
        }
        if self.stopping.load(Relaxed) {
            return;
        }
        let other = 1 - r;
        if self.active() == r && self.replicas[other].link.is_up() {
            self.swap_to(other);
        }
        let (mut resend, mut fail) = (Vec::new(), Vec::new());
        {
            let mut t = self.table.lock().expect("table");
            let ids: Vec<u64> = t
                .iter()
                .filter(|(_, e)| e.at[r].is_some_and(|tr| tr.epoch <= epoch))
                .map(|(&id, _)| id)
                .collect();
            for id in ids {
                let e = t.get_mut(&id).expect("listed");
                e.at[r] = None;
                if e.answered || e.at[other].is_some() {
                    if e.at == [None, None] {
                        t.remove(&id);
                    }
                    continue;
                }
                if e.idempotent && self.replicas[other].link.is_up() && !e.warm {
                    resend.push(id);
                } else {
                    let e = t.remove(&id).expect("listed");
                    if !e.warm {
                        fail.push(e);
                    }
                }
            }
        }
        let mut n = 0;
        for id in resend {
            if self.resend(id, other) {
                n += 1;
            }
        }
        self.counters.hedges_signal[Signal::LinkLost.index()].fetch_add(n, Relaxed);
        for mut e in fail {
            self.counters.failed.fetch_add(1, Relaxed);
            self.counters.answered.fetch_add(1, Relaxed);
            if let Some(d) = e.deliver.take() {
                d.deliver(Answer::Failed);
            }
        }
    }

    /// Records a failed connection attempt to `r`.
    pub fn connect_failed(&self, r: usize) {
        self.replicas[r]
            .counters
            .connect_failures
            .fetch_add(1, Relaxed);
    }

    /// Answers every request still waiting with the proxy's failure (at
    /// shutdown).
    pub fn fail_all(&self) {
        let entries: Vec<Entry> = self
            .table
            .lock()
            .expect("table")
            .drain()
            .map(|(_, e)| e)
            .collect();
        for mut e in entries {
            if let Some(d) = e.deliver.take() {
                if !e.warm && !e.answered {
                    self.counters.failed.fetch_add(1, Relaxed);
                    self.counters.answered.fetch_add(1, Relaxed);
                    d.deliver(Answer::Failed);
                }
            }
        }
    }
}

impl Sink for Engine {
    fn on_answer(&self, r: usize, _gen: u64, id: u64, answer: Answer) {
        let now = mono_ns();
        let rep = &self.replicas[r];
        rep.last_answer_ns.store(now, Relaxed);
        if answer.is_error() {
            rep.counters.error_answers.fetch_add(1, Relaxed);
        }
        let (deliver, key, sent_ns, first, warm) = {
            let mut t = self.table.lock().expect("table");
            let Some(e) = t.get_mut(&id) else {
                self.counters.stray_answers.fetch_add(1, Relaxed);
                return;
            };
            let tr = e.at[r].take();
            if e.answered {
                // the other replica answered first: this work was done twice
                rep.counters.late_answers.fetch_add(1, Relaxed);
                rep.counters
                    .late_service_ns
                    .fetch_add(answer.service_ns().unwrap_or(0), Relaxed);
                if e.at == [None, None] {
                    t.remove(&id);
                }
                return;
            }
            e.answered = true;
            let first_sent =
                e.at.iter()
                    .flatten()
                    .map(|x| x.sent_ns)
                    .chain(tr.map(|x| x.sent_ns))
                    .min();
            let out = (e.deliver.take(), e.key, first_sent, e.first, e.warm);
            if e.at == [None, None] {
                t.remove(&id);
            }
            out
        };
        if warm {
            return;
        }
        rep.counters.first_answers.fetch_add(1, Relaxed);
        self.counters.answered.fetch_add(1, Relaxed);
        if first != r {
            self.counters.hedge_wins.fetch_add(1, Relaxed);
        }
        if let Some(ns) = answer.service_ns() {
            self.demand().record(key, ns);
        }
        if let Some(sent) = sent_ns {
            self.latency
                .lock()
                .expect("latency")
                .push(now.saturating_sub(sent));
        }
        if let Some(d) = deliver {
            d.deliver(answer);
        }
    }

    fn on_lost(&self, r: usize, epoch: u64) {
        self.lost(r, epoch);
    }
}
