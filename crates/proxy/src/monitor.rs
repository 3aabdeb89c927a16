//! The **monitor**: one thread that polls the replicas' LC lines on the
//! signal page (every `pause.poll_us`), decides from them whether the
//! active replica is paused ([`crate::detect`]), and acts through the
//! engine:
//!
//! - **signal** mode: a paused active replica hands over — every request
//!   in flight there is re-sent to the backup and the roles swap; the
//!   paused replica is taken back once its line moves again, then warmed
//!   while it is the backup (a sample of recent requests replayed one at a
//!   time, at `warm.rps`, while the active replica's line is idle); until
//!   its warm-up is done it takes over only from a replica that is down;
//! - **timeout** mode: a request unanswered after the percentile timeout
//!   is also sent to the backup; nothing else;
//! - every mode: lost connections are re-opened (backing off to 1 s), and
//!   started replicas that exit are restarted, then warmed.
//!
//! It reads each LC line with plain loads (no syscall) and the LC thread's
//! scheduler state (`/proc/<tid>/stat`) only while a request runs or
//! requests wait; a replica that is a JVM is also watched by BPF
//! ([`crate::jvm`]): a stop-the-world pause as long as `pause.jvm_pause_ms`
//! hands over at once, idle or busy, and the replica is taken back (not
//! warmed: a collection leaves the JVM warm) once its world runs again.

use crate::config::{HedgeMode, ProxyConfig};
use crate::detect::{self, Bounds, LineView, Signal, View};
use crate::engine::{Engine, Health};
use crate::jvm::JvmWatches;
use crate::launch::Spawned;
use elfen_shm::Page;
use elfen_shm::clock::monotonic_ns as mono_ns;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The scheduler state letter of thread `tid` (`R`, `S`, `D`, `T`, …), from
/// `/proc/<tid>/stat`.
pub fn thread_state(tid: u32) -> Option<char> {
    if tid == 0 {
        return None;
    }
    let s = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// A replica process the proxy started, and how to start it again.
#[derive(Debug)]
pub struct ProcSlot {
    /// The running process (none while restarting).
    pub spawned: Option<Spawned>,
    /// How it was started.
    pub launch: elfen_wire::launch::Launch,
    /// Its extra environment.
    pub env: BTreeMap<String, String>,
    /// A restart is under way.
    pub restarting: bool,
}

/// The started replicas' processes (none for replicas already running).
pub type Procs = Arc<[Mutex<Option<ProcSlot>>; 2]>;

/// What the monitor tracks of one LC line between polls.
#[derive(Debug, Default, Clone, Copy)]
struct LineTrack {
    seen: bool,
    state: u64,
    requests: u64,
    changed_ns: u64,
    busy: bool,
    busy_for_ns: u64,
    request_id: u64,
    tid: u32,
    offcpu_since_ns: Option<u64>,
    stopped: bool,
}

/// The monitor's state.
pub struct Monitor {
    engine: Arc<Engine>,
    jvm: Arc<JvmWatches>,
    cfg: ProxyConfig,
    page: Option<Arc<Page>>,
    lanes: [u32; 2],
    procs: Procs,
    tracks: [LineTrack; 2],
    next_warm_ns: [u64; 2],
    next_connect_ns: [u64; 2],
    backoff_ns: [u64; 2],
    next_proc_check_ns: u64,
    stop: Arc<AtomicBool>,
    startup_timeout: Duration,
}

impl Monitor {
    /// A monitor over `engine`'s replicas, publishing on `page` at `lanes`.
    pub fn new(
        engine: Arc<Engine>,
        jvm: Arc<JvmWatches>,
        cfg: ProxyConfig,
        page: Option<Arc<Page>>,
        lanes: [u32; 2],
        procs: Procs,
        stop: Arc<AtomicBool>,
    ) -> Monitor {
        let startup_timeout = Duration::from_secs_f64(cfg.replicas.startup_timeout_s);
        Monitor {
            engine,
            jvm,
            cfg,
            page,
            lanes,
            procs,
            tracks: [LineTrack::default(); 2],
            next_warm_ns: [0; 2],
            next_connect_ns: [0; 2],
            backoff_ns: [0; 2],
            next_proc_check_ns: 0,
            stop,
            startup_timeout,
        }
    }

    /// Runs until the stop flag is set.
    pub fn run(mut self) {
        crate::link::enter_priority(self.cfg.fifo_priority);
        elfen_cmd::proc::set_timer_slack_ns(1_000);
        let poll = Duration::from_micros(self.cfg.pause.poll_us);
        while !self.stop.load(Ordering::Relaxed) {
            self.step(mono_ns());
            std::thread::sleep(poll);
        }
    }

    fn offcpu_ns(&self) -> u64 {
        (self.cfg.pause.offcpu_ms * 1e6) as u64
    }

    /// One poll.
    pub fn step(&mut self, now: u64) {
        for r in 0..2 {
            self.observe(r, now);
        }
        match self.engine.mode() {
            HedgeMode::Signal => self.signal_step(now),
            HedgeMode::Timeout => {
                let t = self.engine.hedge_timeout_ns();
                self.engine.hedge_late(t);
            }
            HedgeMode::None => {}
        }
        self.recover(now);
        self.warm(now);
        self.reconnect(now);
        if now >= self.next_proc_check_ns {
            self.next_proc_check_ns = now + 20_000_000;
            self.check_processes();
            for r in 0..2 {
                self.jvm.track(r, self.process_of(r), false);
                self.jvm.collect(r);
            }
        }
    }

    /// The process of replica `r`: the one the proxy started, else the one
    /// whose thread publishes its LC line (0: not known).
    pub fn process_of(&self, r: usize) -> u32 {
        let pid = self.pid_of(r);
        if pid != 0 {
            return pid;
        }
        let tid = self.tracks[r].tid;
        crate::jvm::tgid_of(tid).unwrap_or(0)
    }

    fn pid_of(&self, r: usize) -> u32 {
        self.procs[r]
            .lock()
            .expect("procs")
            .as_ref()
            .and_then(|p| p.spawned.as_ref().map(Spawned::pid))
            .unwrap_or(0)
    }

    /// Reads replica `r`'s LC line (and, where it matters, its thread's
    /// state).
    fn observe(&mut self, r: usize, now: u64) {
        let offcpu = self.offcpu_ns();
        let Some(page) = &self.page else {
            // no page: only whether its process is stopped, while requests wait
            let waiting = self.engine.outstanding(r).count > 0;
            let pid = if waiting { self.pid_of(r) } else { 0 };
            self.tracks[r].stopped = waiting && matches!(thread_state(pid), Some('T' | 't'));
            return;
        };
        let Ok(line) = page.lc(self.lanes[r]) else {
            return;
        };
        let clock = page.clock();
        let state = line.state.load(Ordering::Acquire);
        let requests = line.requests.load(Ordering::Acquire);
        let request_id = line.request_id.load(Ordering::Acquire);
        let busy_since = line.busy_since.load(Ordering::Acquire);
        let tid = line.lc_tid.load(Ordering::Acquire);
        let t = &mut self.tracks[r];
        if !t.seen || t.state != state || t.requests != requests {
            t.changed_ns = now;
            t.offcpu_since_ns = None;
        }
        t.seen = true;
        t.state = state;
        t.requests = requests;
        t.tid = tid;
        t.busy = elfen_shm::state::busy(state);
        t.request_id = request_id;
        t.busy_for_ns = if t.busy {
            clock.ticks_to_ns(clock.now().saturating_sub(busy_since))
        } else {
            0
        };
        let unchanged = now.saturating_sub(t.changed_ns);
        let look = if t.busy {
            offcpu > 0 && t.busy_for_ns >= offcpu / 4
        } else {
            unchanged >= offcpu.max(1_000_000) / 4 && self.engine.outstanding(r).count > 0
        };
        if look {
            let st = thread_state(tid);
            t.stopped = matches!(st, Some('T' | 't'));
            if t.busy && st.is_some_and(|c| c != 'R') {
                t.offcpu_since_ns.get_or_insert(now);
            } else {
                t.offcpu_since_ns = None;
            }
        } else {
            t.stopped = false;
            t.offcpu_since_ns = None;
        }
    }

    /// The view [`detect::assess`] judges replica `r` by.
    fn view(&self, r: usize, now: u64) -> (View, Bounds) {
        let out = self.engine.outstanding(r);
        let t = &self.tracks[r];
        let demand = self.engine.demand();
        let line = self.page.as_ref().map(|_| LineView {
            busy: t.busy,
            busy_for_ns: t.busy_for_ns,
            unchanged_for_ns: now.saturating_sub(t.changed_ns),
            offcpu_for_ns: t.offcpu_since_ns.map(|s| now.saturating_sub(s)),
            running_bound_ns: demand
                .running_bound_ns(t.busy.then(|| self.engine.key_of(t.request_id)).flatten()),
        });
        let bounds = Bounds {
            offcpu_ns: self.offcpu_ns(),
            jvm_pause_ns: (self.cfg.pause.jvm_pause_ms * 1e6) as u64,
            stall_ns: demand.stall_bound_ns(),
        };
        (
            View {
                line,
                stopped: t.stopped,
                jvm_paused_for_ns: self.jvm.stopped_for_ns(r),
                oldest_ns: out.oldest_ns,
            },
            bounds,
        )
    }

    fn assess(&self, r: usize, now: u64) -> Option<Signal> {
        let (v, b) = self.view(r, now);
        detect::assess(&v, &b)
    }

    fn signal_step(&mut self, now: u64) {
        let e = &self.engine;
        let a = e.active();
        let b = 1 - a;
        if e.health(a) == Health::Up {
            if let Some(sig) = self.assess(a, now) {
                e.pause(a, sig, now);
            }
        }
        // A replica still being warmed takes over only from one that is
        // down: swapping back to a replica just taken back would make every
        // short pause of a loaded pair a swap in each direction.
        let a_down = matches!(e.health(a), Health::Down { .. });
        if !e.usable(a) && e.usable(b) && (a_down || e.warm_left(b) == 0) {
            let sig = match e.health(a) {
                Health::Paused { signal, .. } => signal,
                _ => Signal::LinkLost,
            };
            e.swap_to(b);
            e.hedge_all(a, sig);
        }
        // the backup: while it has work, or its JVM is stopped (it must not
        // take over in the middle of a collection)
        if e.health(b) == Health::Up
            && (e.outstanding(b).count > 0 || self.jvm.stopped_for_ns(b).is_some())
        {
            if let Some(sig) = self.assess(b, now) {
                e.pause(b, sig, now);
            }
        }
    }

    /// A paused replica whose line moved again (or, with no page, that
    /// answered again) is back; as the backup it is warmed. After a JVM
    /// pause it is back once its world runs again, and not warmed.
    fn recover(&mut self, now: u64) {
        for r in 0..2 {
            let Health::Paused { since_ns, signal } = self.engine.health(r) else {
                continue;
            };
            let t = &self.tracks[r];
            if signal == Signal::JvmPause {
                if self.jvm.stopped_for_ns(r).is_none() && !t.stopped {
                    self.engine.set_health(r, Health::Up);
                }
                continue;
            }
            let back = if self.page.is_some() {
                t.changed_ns > since_ns && !t.stopped && t.offcpu_since_ns.is_none()
            } else {
                self.engine.last_answer_ns(r) > since_ns && !t.stopped
            };
            if back {
                self.engine.set_health(r, Health::Up);
                self.start_warming(r, now);
            }
        }
    }

    fn start_warming(&mut self, r: usize, now: u64) {
        if r != self.engine.active() && self.cfg.warm.requests > 0 {
            self.engine.set_warm_left(r, self.cfg.warm.requests);
            self.next_warm_ns[r] = now;
        }
    }

    /// Sends the backup its next warm-up request, when due.
    fn warm(&mut self, now: u64) {
        let e = &self.engine;
        let b = 1 - e.active();
        if e.warm_left(b) == 0 || !e.usable(b) || now < self.next_warm_ns[b] {
            return;
        }
        // (a paused active replica does not hold the warming back: the
        // backup must be warm to take over)
        if self.cfg.warm.when_active_idle && self.page.is_some() && e.usable(1 - b) {
            let a = &self.tracks[1 - b];
            if a.busy || elfen_shm::state::queue_len(a.state) > 0 {
                return;
            }
        }
        if e.outstanding(b).warm > 0 {
            return;
        }
        if e.warm_one(b) {
            e.set_warm_left(b, e.warm_left(b) - 1);
        } else {
            e.set_warm_left(b, 0); // nothing to replay yet
        }
        self.next_warm_ns[b] = now + (1e9 / self.cfg.warm.rps) as u64;
    }

    /// Re-opens lost connections (not while the replica restarts).
    fn reconnect(&mut self, now: u64) {
        for r in 0..2 {
            let e = &self.engine;
            if e.replicas[r].link.is_up() || now < self.next_connect_ns[r] {
                continue;
            }
            let restarting = self.procs[r]
                .lock()
                .expect("procs")
                .as_ref()
                .is_some_and(|p| p.restarting || p.spawned.is_none());
            if restarting {
                continue;
            }
            let sink: Arc<dyn crate::link::Sink> = self.engine.clone();
            match e.replicas[r].link.connect(sink) {
                Ok(_) => {
                    self.backoff_ns[r] = 0;
                    let was = e.health(r);
                    e.set_health(r, Health::Up);
                    if matches!(was, Health::Down { .. }) {
                        self.start_warming(r, now);
                    }
                }
                Err(_) => {
                    e.connect_failed(r);
                    self.backoff_ns[r] = (self.backoff_ns[r] * 2).clamp(10_000_000, 1_000_000_000);
                    self.next_connect_ns[r] = now + self.backoff_ns[r];
                }
            }
        }
    }

    /// Notices started replicas that exited and restarts them.
    fn check_processes(&mut self) {
        for r in 0..2 {
            let mut slot = self.procs[r].lock().expect("procs");
            let Some(p) = slot.as_mut() else {
                continue;
            };
            let exited = p.spawned.as_mut().and_then(|s| s.exited());
            if exited.is_none() {
                continue;
            }
            p.spawned = None;
            drop(slot);
            self.engine.replicas[r].link.close();
            self.engine.set_health(
                r,
                Health::Down {
                    since_ns: mono_ns(),
                },
            );
            if self.cfg.replicas.restart {
                self.restart(r);
            }
        }
    }

    fn restart(&self, r: usize) {
        let (launch, env) = {
            let mut slot = self.procs[r].lock().expect("procs");
            let Some(p) = slot.as_mut() else { return };
            if p.restarting {
                return;
            }
            p.restarting = true;
            (p.launch.clone(), p.env.clone())
        };
        let (procs, engine, stop) = (self.procs.clone(), self.engine.clone(), self.stop.clone());
        let (protocol, timeout) = (self.cfg.protocol, self.startup_timeout);
        let addr = engine.replicas[r].link.addr();
        let spawned = std::thread::Builder::new()
            .name(format!("elfen-proxy-restart{r}"))
            .spawn(move || {
                let mut backoff = Duration::from_millis(500);
                while !stop.load(Ordering::Relaxed) {
                    match Spawned::start(&launch, &env, protocol, addr, timeout, &stop) {
                        Ok(s) => {
                            engine.replicas[r]
                                .counters
                                .restarts
                                .fetch_add(1, Ordering::Relaxed);
                            if let Some(p) = procs[r].lock().expect("procs").as_mut() {
                                p.spawned = Some(s);
                                p.restarting = false;
                            }
                            return;
                        }
                        Err(e) => {
                            engine.replicas[r]
                                .counters
                                .restart_failures
                                .fetch_add(1, Ordering::Relaxed);
                            eprintln!(
                                "elfen proxy: replica {}: restart failed: {e}",
                                engine.replicas[r].name
                            );
                            std::thread::sleep(backoff);
                            backoff = (backoff * 2).min(Duration::from_secs(30));
                        }
                    }
                }
                if let Some(p) = procs[r].lock().expect("procs").as_mut() {
                    p.restarting = false;
                }
            });
        if spawned.is_err() {
            if let Some(p) = self.procs[r].lock().expect("procs").as_mut() {
                p.restarting = false;
            }
        }
    }
}
