//! What the proxy tests share: demo replicas on the two lanes, a proxy in
//! front of them, and its metrics.

use elfen_proxy::Proxy;
use elfen_proxy::config::{HedgeMode, Protocol, ProxyConfig};
use elfen_proxy::launch::Spawned;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub fn exe() -> String {
    std::env::current_exe().unwrap().display().to_string()
}

pub fn cpus() -> [u32; 2] {
    let all = elfen_topo::current_affinity().unwrap();
    assert!(all.len() >= 2, "these tests need two CPUs");
    [all[0], all[1]]
}

/// A demo replica started by the test (not by the proxy), on `lane` of
/// `page`, with extra arguments.
pub fn demo_replica(
    protocol: Protocol,
    page: &Path,
    lane: u32,
    cpu: u32,
    extra: &str,
) -> (Spawned, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let launch = elfen_wire::launch::Launch {
        command: format!(
            "{} demo-service --port {} --cpu {cpu} --page {} --lane {lane} --protocol {} {extra}",
            exe(),
            addr.port(),
            page.display(),
            protocol.name()
        ),
        vars: vec![],
        startup_timeout: Duration::from_secs(30),
    };
    let s = Spawned::start(
        &launch,
        &BTreeMap::new(),
        protocol,
        addr,
        Duration::from_secs(30),
        &AtomicBool::new(false),
    )
    .unwrap();
    (s, addr)
}

/// Bounds well above what a busy machine's preemptions cause (a few ms),
/// far below the pauses the tests inject (seconds): no false pause.
pub fn slack(cfg: &mut ProxyConfig) {
    cfg.pause.floor_ms = 25.0;
    cfg.pause.offcpu_ms = 10.0;
}

/// Two replicas already running (A with `extra_a`), a page they publish
/// on, and a proxy in front of them.
pub struct Fronted {
    pub proxy: Proxy,
    pub replicas: Vec<Spawned>,
    _page: elfen_shm::Page,
    _dir: tempfile::TempDir,
}

pub fn fronted(protocol: Protocol, hedge: HedgeMode, extra_a: &str, extra_b: &str) -> Fronted {
    fronted_with(protocol, hedge, extra_a, extra_b, |_| {})
}

/// [`fronted`], the proxy's settings adjusted by `adjust`.
pub fn fronted_with(
    protocol: Protocol,
    hedge: HedgeMode,
    extra_a: &str,
    extra_b: &str,
    adjust: impl FnOnce(&mut ProxyConfig),
) -> Fronted {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("page");
    let c = cpus();
    let page = elfen_proxy::proxy::create_page(&path, c).unwrap();
    let (a, aa) = demo_replica(protocol, &path, 0, c[0], extra_a);
    let (b, ba) = demo_replica(protocol, &path, 1, c[1], extra_b);
    let mut cfg = ProxyConfig {
        protocol,
        hedge,
        metrics: Some("127.0.0.1:0".into()),
        ..ProxyConfig::default()
    };
    cfg.replicas.addrs = vec![aa.to_string(), ba.to_string()];
    cfg.replicas.page = Some(path);
    cfg.warm.requests = 5;
    slack(&mut cfg);
    adjust(&mut cfg);
    let proxy = Proxy::start(cfg, &AtomicBool::new(false)).unwrap();
    Fronted {
        proxy,
        replicas: vec![a, b],
        _page: page,
        _dir: dir,
    }
}

pub fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of the metric line starting with `prefix`.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {prefix} in:\n{text}"))
}
