//! The **proxy** assembled: the replicas (started from the template, or
//! already running), the signal page they publish on, the engine and its
//! links, the monitor, the client front and the metrics endpoint —
//! started in that order, so a bad setting or a replica that cannot start
//! fails before any client is accepted, with nothing left running.

use crate::config::{HedgeMode, Protocol, ProxyConfig, Side};
use crate::engine::{Engine, EngineConfig, Health};
use crate::error::{ProxyError, Result};
use crate::jvm::JvmWatches;
use crate::launch::Spawned;
use crate::link::{Link, Sink};
use crate::monitor::{Monitor, ProcSlot, Procs};
use crate::status::{Placement, Summary};
use elfen_shm::{Access, Clock, LaneSpec, Page, PageSpec};
use elfen_wire::launch::Launch;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running proxy; stopped (and its started replicas with it) on drop.
pub struct Proxy {
    addr: SocketAddr,
    cfg: ProxyConfig,
    engine: Arc<Engine>,
    jvm: Arc<JvmWatches>,
    page: Option<Arc<Page>>,
    procs: Procs,
    places: [Placement; 2],
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    metrics: Option<elfen_ops::metrics::MetricsServer>,
    started: Instant,
    _cleanup: Option<elfen_cmd::interrupt::CleanupGuard>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").field("addr", &self.addr).finish()
    }
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> Result<u16> {
    let l =
        TcpListener::bind("127.0.0.1:0").map_err(|e| ProxyError::io("finding a free port", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| ProxyError::io("finding a free port", e))
}

/// The CPUs the two started replicas' request lanes use.
fn replica_cpus(cfg: &ProxyConfig) -> Result<[u32; 2]> {
    if cfg.replicas.cpus.len() == 2 {
        return Ok([cfg.replicas.cpus[0], cfg.replicas.cpus[1]]);
    }
    let all = elfen_topo::current_affinity()
        .map_err(|e| ProxyError::Config(format!("reading the CPU affinity: {e}")))?;
    match all.as_slice() {
        [a, b, ..] => Ok([*a, *b]),
        _ => Err(ProxyError::Config(format!(
            "two replicas need two CPUs, this process may use {} ({}); set replicas.cpus",
            all.len(),
            elfen_topo::format_cpu_list(&all)
        ))),
    }
}

/// A new page with one request lane per replica (monotonic clock, so Java
/// replicas can write it).
pub fn create_page(path: &std::path::Path, cpus: [u32; 2]) -> Result<Page> {
    let lane = |cpu| LaneSpec {
        cpu,
        role: elfen_shm::role::REQUEST,
        partners: Vec::new(),
        policy: elfen_shm::policy::UNMANAGED,
        budget_ns: 0,
        nap: elfen_shm::nap::AUTO,
        hybrid_spin_ns: elfen_shm::spec::DEFAULT_HYBRID_SPIN_NS,
        ref_ipc_milli: 0,
    };
    let mut spec = PageSpec::for_pairs(&[], elfen_shm::policy::UNMANAGED, 0);
    spec.lanes = vec![lane(cpus[0]), lane(cpus[1])];
    spec.clock = Some(Clock::MONOTONIC);
    Ok(Page::create(path, &spec)?)
}

impl Proxy {
    /// Starts the proxy `cfg` describes. `stop` (Ctrl-C) interrupts a slow
    /// replica start.
    pub fn start(cfg: ProxyConfig, stop: &AtomicBool) -> Result<Proxy> {
        cfg.validate()?;
        let listen: SocketAddr = cfg.listen.parse().expect("validated");
        let listener = TcpListener::bind(listen)
            .map_err(|e| ProxyError::io(format!("listening on {listen} (listen)"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ProxyError::io("the listening address", e))?;
        let metrics_addr: Option<SocketAddr> =
            cfg.metrics.as_ref().map(|m| m.parse().expect("validated"));
        let metrics_listener = match metrics_addr {
            Some(a) => Some(
                elfen_ops::metrics::bind(a)
                    .map_err(|e| ProxyError::Config(format!("metrics: {e}")))?,
            ),
            None => None,
        };

        let mut places: [Placement; 2] = Default::default();
        let procs: Procs = Arc::new([Mutex::new(None), Mutex::new(None)]);
        let (page, lanes, addrs, cleanup) = match &cfg.replicas.command {
            Some(template) => start_replicas(&cfg, template, stop, &mut places, &procs)?,
            None => attach_replicas(&cfg, &mut places)?,
        };

        let engine = connect_engine(&cfg, &addrs)?;

        // the BPF watch of each replica's JVM, on before the first request
        let jvm = watch_jvms(&cfg, &procs, page.as_ref(), lanes);

        let stop_flag = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let monitor = Monitor::new(
            engine.clone(),
            jvm.clone(),
            cfg.clone(),
            page.clone(),
            lanes,
            procs.clone(),
            stop_flag.clone(),
        );
        threads.push(
            std::thread::Builder::new()
                .name("elfen-proxy-monitor".into())
                .spawn(move || monitor.run())
                .map_err(|e| ProxyError::io("starting the monitor", e))?,
        );
        let front = start_front(&cfg, listener, engine.clone(), stop_flag.clone());
        threads.push(front.map_err(|e| ProxyError::io("starting the client front", e))?);
        let metrics = match metrics_listener {
            Some(l) => Some(
                elfen_ops::metrics::serve_on(
                    l,
                    crate::metrics::registry(engine.clone(), jvm.clone()),
                )
                .map_err(|e| ProxyError::Config(format!("metrics: {e}")))?,
            ),
            None => None,
        };
        Ok(Proxy {
            addr,
            cfg,
            engine,
            jvm,
            page,
            procs,
            places,
            stop: stop_flag,
            threads,
            metrics,
            started: Instant::now(),
            _cleanup: cleanup,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics endpoint, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr())
    }

    /// The engine (counters, roles).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The signal page the replicas publish on, if any.
    pub fn page(&self) -> Option<&Arc<Page>> {
        self.page.as_ref()
    }

    /// The BPF watches of the replicas' JVMs (the `jvm_pause` signal).
    pub fn jvm(&self) -> &Arc<JvmWatches> {
        &self.jvm
    }

    /// The hedge mode.
    pub fn mode(&self) -> HedgeMode {
        self.cfg.hedge
    }

    /// The process of started replica `r` now (it changes at a restart).
    pub fn replica_pid(&self, r: usize) -> Option<u32> {
        self.procs[r]
            .lock()
            .expect("procs")
            .as_ref()
            .and_then(|p| p.spawned.as_ref().map(Spawned::pid))
    }

    /// The record of what it did so far.
    pub fn summary(&self) -> Summary {
        let mut places = self.places.clone();
        for (r, p) in places.iter_mut().enumerate() {
            if let Some(pid) = self.replica_pid(r) {
                p.pid = Some(pid);
            }
        }
        for r in 0..2 {
            self.jvm.collect(r);
        }
        Summary::of(
            &self.engine,
            &self.jvm,
            &self.addr.to_string(),
            self.cfg.protocol.name(),
            self.started.elapsed().as_secs_f64(),
            &places,
        )
    }

    fn shutdown(&mut self) {
        if self.stop.swap(true, Ordering::Relaxed) {
            return;
        }
        self.engine.stopping.store(true, Ordering::Relaxed);
        // wake the blocking accept of the wire front
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for r in &self.engine.replicas {
            r.link.close();
        }
        self.engine.fail_all();
        self.metrics = None;
        self.jvm.close();
        for slot in self.procs.iter() {
            if let Some(p) = slot.lock().expect("procs").as_mut() {
                if let Some(mut s) = p.spawned.take() {
                    s.terminate();
                }
            }
        }
    }

    /// Stops it (and the replicas it started); returns the record.
    pub fn stop(mut self) -> Summary {
        self.shutdown();
        self.summary()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The page and the engine's lanes, the replicas' addresses and the page
/// file's cleanup on a second Ctrl-C.
type Replicas = (
    Option<Arc<Page>>,
    [u32; 2],
    Vec<SocketAddr>,
    Option<elfen_cmd::interrupt::CleanupGuard>,
);

/// Two replicas started from `template`, each on its own CPU and request
/// lane of a new page; each recorded in `places` and `procs` as it starts.
fn start_replicas(
    cfg: &ProxyConfig,
    template: &str,
    stop: &AtomicBool,
    places: &mut [Placement; 2],
    procs: &Procs,
) -> Result<Replicas> {
    let cpus = replica_cpus(cfg)?;
    let path =
        cfg.replicas.page.clone().unwrap_or_else(|| {
            PathBuf::from(format!("/dev/shm/elfen-proxy-{}", std::process::id()))
        });
    let page = Arc::new(create_page(&path, cpus)?);
    // a second Ctrl-C exits at once: the page file goes with it
    let cleanup = elfen_cmd::interrupt::register(&[page.path()], &[]);
    let all = elfen_topo::current_affinity().unwrap_or_default();
    let mut addrs = Vec::new();
    for r in 0..2 {
        let port = free_port()?;
        let a: SocketAddr = ([127, 0, 0, 1], port).into();
        let side: Vec<u32> = match cfg.replicas.side {
            Side::Others => all.iter().copied().filter(|&c| c != cpus[r]).collect(),
            Side::Own => Vec::new(),
        };
        let launch = Launch {
            command: template.to_owned(),
            vars: vec![
                ("port", port.to_string()),
                ("page", page.path().display().to_string()),
                ("lane", r.to_string()),
                ("cpu", cpus[r].to_string()),
                (
                    "side_cpus",
                    elfen_topo::format_cpu_list(if side.is_empty() { &cpus[r..=r] } else { &side }),
                ),
                ("lc_signal", "api".into()),
            ],
            startup_timeout: Duration::from_secs_f64(cfg.replicas.startup_timeout_s),
        };
        launch.argv().map_err(|e| {
            ProxyError::Config(e.to_string().replace("lc.command", "replicas.command"))
        })?;
        let s = Spawned::start(
            &launch,
            &cfg.replicas.env,
            cfg.protocol,
            a,
            launch.startup_timeout,
            stop,
        )?;
        places[r] = Placement {
            pid: Some(s.pid()),
            cpu: Some(cpus[r]),
            lane: Some(r as u32),
        };
        *procs[r].lock().expect("procs") = Some(ProcSlot {
            spawned: Some(s),
            launch,
            env: cfg.replicas.env.clone(),
            restarting: false,
        });
        addrs.push(a);
    }
    Ok((Some(page), [0, 1], addrs, Some(cleanup)))
}

/// Replicas already running at `replicas.addrs`: their lanes, and the page
/// they publish on when one is named (each replica's CPU read from it).
fn attach_replicas(cfg: &ProxyConfig, places: &mut [Placement; 2]) -> Result<Replicas> {
    let addrs: Vec<SocketAddr> = cfg
        .replicas
        .addrs
        .iter()
        .map(|a| a.parse().expect("validated"))
        .collect();
    let lanes = match cfg.replicas.lanes.as_slice() {
        [a, b] => [*a, *b],
        _ => [0, 1],
    };
    let page = match &cfg.replicas.page {
        Some(p) => {
            let page = Page::attach(p, Access::Observer)?;
            for l in lanes {
                page.lc(l)?;
            }
            for r in 0..2 {
                places[r].lane = Some(lanes[r]);
                places[r].cpu = page.read_controller(lanes[r]).ok().map(|c| c.cpu);
            }
            Some(Arc::new(page))
        }
        None => None,
    };
    Ok((page, lanes, addrs, None))
}

/// The engine and its links to both replicas, connected; an error when
/// neither accepts a connection. Replica 0 is primary unless it is down.
fn connect_engine(cfg: &ProxyConfig, addrs: &[SocketAddr]) -> Result<Arc<Engine>> {
    let c = cfg;
    let engine = Arc::new(Engine::new(
        EngineConfig {
            mode: c.hedge,
            demand: (
                c.pause.factor,
                (c.pause.floor_ms * 1e6) as u64,
                c.pause.min_samples,
            ),
            timeout: (
                c.timeout.pct / 100.0,
                c.timeout.window,
                (c.timeout.initial_ms * 1e6) as u64,
            ),
        },
        [
            Link::new(0, addrs[0], c.protocol, c.fifo_priority),
            Link::new(1, addrs[1], c.protocol, c.fifo_priority),
        ],
    ));
    let mut connected = 0;
    for r in 0..2 {
        let sink: Arc<dyn Sink> = engine.clone();
        match engine.replicas[r].link.connect(sink) {
            Ok(_) => {
                engine.set_health(r, Health::Up);
                connected += 1;
            }
            Err(_) => {
                engine.connect_failed(r);
                engine.set_health(
                    r,
                    Health::Down {
                        since_ns: elfen_shm::clock::monotonic_ns(),
                    },
                );
            }
        }
    }
    if connected == 0 {
        return Err(ProxyError::Replica(format!(
            "neither replica accepts connections ({} and {})",
            addrs[0], addrs[1]
        )));
    }
    if !engine.usable(0) {
        engine.swap_to(1);
        engine.counters.swaps.store(0, Ordering::Relaxed);
    }
    Ok(engine)
}

/// The BPF watch of each replica's JVM, on before the first request: the
/// pid of a started replica, else the process of the thread a replica
/// published on the page.
fn watch_jvms(
    cfg: &ProxyConfig,
    procs: &Procs,
    page: Option<&Arc<Page>>,
    lanes: [u32; 2],
) -> Arc<JvmWatches> {
    let jvm = JvmWatches::new(
        if cfg.hedge != HedgeMode::Signal {
            Some(format!("hedge {}: no pause detection", cfg.hedge.name()))
        } else if cfg.pause.jvm_pause_ms == 0.0 {
            Some("pause.jvm_pause_ms = 0".into())
        } else {
            None
        },
        cfg.fifo_priority,
    );
    for r in 0..2 {
        let started = procs[r]
            .lock()
            .expect("procs")
            .as_ref()
            .and_then(|p| p.spawned.as_ref().map(Spawned::pid));
        let published = || {
            let tid = page?.lc(lanes[r]).ok()?.lc_tid.load(Ordering::Acquire);
            crate::jvm::tgid_of(tid)
        };
        jvm.track(r, started.or_else(published).unwrap_or(0), true);
    }
    jvm
}

/// The client front's accept thread for `cfg.protocol`.
fn start_front(
    cfg: &ProxyConfig,
    listener: TcpListener,
    eng: Arc<Engine>,
    st: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    let prio = cfg.fifo_priority;
    match cfg.protocol {
        Protocol::Wire => {
            let idem = cfg.idempotent.wire;
            std::thread::Builder::new()
                .name("elfen-proxy-accept".into())
                .spawn(move || crate::front_wire::accept_loop(listener, eng, idem, prio, st))
        }
        Protocol::Http => {
            let front = crate::front_http::HttpFront {
                idempotent_methods: cfg.idempotent.http_methods.clone(),
                max_body_bytes: cfg.max_body_bytes,
            };
            std::thread::Builder::new()
                .name("elfen-proxy-http".into())
                .spawn(move || crate::front_http::accept_loop(listener, eng, front, prio, st))
        }
    }
}
