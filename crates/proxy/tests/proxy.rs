//! The proxy end to end: replicas of `elfen proxy demo-service` (this test
//! binary plays it when started with `demo-service …`), paused on purpose
//! (a stall inside a request, SIGSTOP, a replica that never answers or
//! closes its connections), clients on the wire protocol and HTTP/1.1.
//! Behaviour is asserted — every request answered exactly once, hedges,
//! swaps, work done twice counted, errors counted — with generous
//! deadlines: this runs on small, busy machines.

mod support;

use clap::Parser;
use elfen_bench::lc::wire::{self, Kind, Response, Status};
use elfen_proxy::Proxy;
use elfen_proxy::config::{HedgeMode, Protocol, ProxyConfig};
use elfen_proxy::detect::Signal;
use elfen_proxy::engine::Health;
use elfen_proxy::jvm::WatchState;
use elfen_proxy::launch::Spawned;
use elfen_proxy::message::{Answer, read_answer};
use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::{wait_for, wire_load};

#[derive(Parser)]
struct Demo {
    #[command(flatten)]
    a: elfen_proxy::demo::DemoArgs,
}

fn exe() -> String {
    std::env::current_exe().unwrap().display().to_string()
}

fn cpus() -> [u32; 2] {
    let all = elfen_topo::current_affinity().unwrap();
    assert!(all.len() >= 2, "these tests need two CPUs");
    [all[0], all[1]]
}

/// A demo replica started by the test (not by the proxy), on `lane` of
/// `page`, with extra arguments.
fn demo_replica(
    protocol: Protocol,
    page: &Path,
    lane: u32,
    cpu: u32,
    extra: &str,
) -> (Spawned, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let launch = elfen_bench::lc::external::Launch {
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
fn slack(cfg: &mut ProxyConfig) {
    cfg.pause.floor_ms = 25.0;
    cfg.pause.offcpu_ms = 10.0;
}

/// Two replicas already running (A with `extra_a`), a page they publish
/// on, and a proxy in front of them.
struct Fronted {
    proxy: Proxy,
    replicas: Vec<Spawned>,
    _page: elfen_shm::Page,
    _dir: tempfile::TempDir,
}

fn fronted(protocol: Protocol, hedge: HedgeMode, extra_a: &str, extra_b: &str) -> Fronted {
    fronted_with(protocol, hedge, extra_a, extra_b, |_| {})
}

/// [`fronted`], the proxy's settings adjusted by `adjust`.
fn fronted_with(
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

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of the metric line starting with `prefix`.
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {prefix} in:\n{text}"))
}

/// A stall inside a request of the active replica — off the CPU (as at a
/// safepoint) and on it (a request running long): the proxy sees it on the
/// replica's LC line, re-sends its requests in flight to the other, swaps,
/// and every client request is answered once, while the stalled replica is
/// still paused; its late answer is counted as work done twice once the
/// stall ends, and it is taken back and warmed.
fn a_paused_replica_hands_over_to_the_backup() {
    for (how, stall, signal) in [
        ("sleep", "", Signal::OffCpu),
        ("spin", "--stall-spin", Signal::BusyTooLong),
    ] {
        let args = format!("--stall-on-usr1 --stall-ms 3000 {stall}");
        let f = fronted(Protocol::Wire, HedgeMode::Signal, &args, &args);
        let e = f.proxy.engine().clone();
        // a busy machine may pause a replica on its own too: stall whichever
        // is active at request 40
        let pids = [f.replicas[0].pid(), f.replicas[1].pid()];
        let stalled = std::sync::atomic::AtomicUsize::new(usize::MAX);
        let got = wire_load(
            f.proxy.addr(),
            200,
            Duration::from_millis(1),
            |_| (50_000, Vec::new()),
            Duration::from_secs(20),
            |i| {
                if i == 40 {
                    let a = e.active();
                    stalled.store(a, Ordering::Relaxed);
                    elfen_cmd::proc::signal_pid(pids[a], libc::SIGUSR1);
                }
            },
        );
        let x = stalled.load(Ordering::Relaxed);
        let name = ["A", "B"][x];
        got.assert_each_answered_once_ok();
        let s = f.proxy.summary();
        assert!(
            matches!(e.health(x), Health::Paused { .. }),
            "{how}: every request was answered while {name} was still paused: {}",
            s.line()
        );
        assert!(s.swaps >= 1, "{how}: {}", s.line());
        assert_eq!(e.active(), 1 - x, "{how}: {}", s.line());
        assert!(
            s.hedges_total >= 1 && s.hedge_wins >= 1,
            "{how}: {}",
            s.line()
        );
        assert!(
            s.replicas[x].pauses.get(signal) >= 1,
            "{how}: {:?}",
            s.replicas[x].pauses
        );
        assert_eq!((s.failed, s.requests, s.answered), (0, 200, 200), "{how}");
        // the stall ends: the late answer is dropped and counted, the replica comes back
        wait_for("the late answer", Duration::from_secs(20), || {
            e.replicas[x].counters.late_answers.load(Ordering::Relaxed) >= 1
        });
        wait_for(
            "the stalled replica back and warmed",
            Duration::from_secs(20),
            || e.health(x) == Health::Up && e.warm_left(x) == 0,
        );
        let s = f.proxy.summary();
        assert!(
            s.duplicate_work >= 1 && s.duplicate_work_ms > 0.0,
            "{how}: {}",
            s.line()
        );
        assert!(s.replicas[x].warmups >= 1, "{how}: {}", s.line());
        let m = scrape(f.proxy.metrics_addr().unwrap());
        assert!(metric(&m, "elfen_proxy_swaps_total") >= 1.0);
        assert!(
            metric(
                &m,
                &format!(
                    "elfen_proxy_pauses_total{{replica=\"{name}\",signal=\"{}\"}}",
                    signal.name()
                )
            ) >= 1.0
        );
        assert!(
            metric(
                &m,
                &format!("elfen_proxy_duplicate_work_total{{replica=\"{name}\"}}")
            ) >= 1.0
        );
        let active = ["A", "B"][1 - x];
        assert_eq!(
            metric(
                &m,
                &format!(
                    "elfen_proxy_replica_state{{replica=\"{active}\",role=\"active\",state=\"up\"}}"
                )
            ),
            1.0
        );
        drop(f);
    }
}

/// Why BPF cannot be used here, if it cannot.
fn no_bpf() -> Option<String> {
    elfen_bpf::check_privileges()
        .and_then(|()| elfen_bpf::check_btf())
        .err()
        .map(|e| e.to_string())
}

/// A stop-the-world pause of the active replica — the demo's `VM Thread`
/// spinning on the worker's CPU while the worker waits, as a JVM's
/// collection looks to the scheduler — is seen by the proxy's BPF watch of
/// the JVM: with every other signal's bound far above the stall (off-CPU
/// off, demand bounds 10 s), the proxy hands over on `jvm_pause` alone;
/// every request is answered once while the stalled replica is still
/// paused, the watch counts the pause, the replica is taken back after it
/// without a warm-up (a collection leaves a JVM warm). With the signal off,
/// the same stall is waited out: nothing is re-sent.
fn a_jvm_pause_seen_by_bpf_hands_over() {
    if let Some(why) = no_bpf() {
        elfen_cmd::skip::skip_test(
            "a_jvm_pause_seen_by_bpf_hands_over",
            elfen_cmd::skip::Need::Bpf,
            why,
        );
        return;
    }
    let args = "--stall-on-usr1 --stall-ms 3000 --stall-stw";
    let only_jvm = |jvm_pause_ms: f64| {
        move |c: &mut ProxyConfig| {
            c.pause.offcpu_ms = 0.0;
            c.pause.floor_ms = 10_000.0;
            c.pause.jvm_pause_ms = jvm_pause_ms;
        }
    };
    // a busy machine may preempt the VM thread: 5 ms is still far below the stall
    let f = fronted_with(Protocol::Wire, HedgeMode::Signal, args, args, only_jvm(5.0));
    let e = f.proxy.engine().clone();
    for r in 0..2 {
        assert_eq!(
            f.proxy.jvm().state(r).0,
            WatchState::On,
            "replica {r}: {}",
            f.proxy.jvm().describe(r)
        );
    }
    let pids = [f.replicas[0].pid(), f.replicas[1].pid()];
    let stalled = std::sync::atomic::AtomicUsize::new(usize::MAX);
    // stall whichever replica is active at request 40
    let got = wire_load(
        f.proxy.addr(),
        200,
        Duration::from_millis(1),
        |_| (50_000, Vec::new()),
        Duration::from_secs(20),
        |i| {
            if i == 40 {
                let a = e.active();
                stalled.store(a, Ordering::Relaxed);
                elfen_cmd::proc::signal_pid(pids[a], libc::SIGUSR1);
            }
        },
    );
    let x = stalled.load(Ordering::Relaxed);
    let name = ["A", "B"][x];
    got.assert_each_answered_once_ok();
    let s = f.proxy.summary();
    assert!(
        matches!(
            e.health(x),
            Health::Paused {
                signal: Signal::JvmPause,
                ..
            }
        ),
        "every request was answered while {name}'s world was still stopped: {}",
        s.line()
    );
    assert!(s.swaps >= 1 && e.active() == 1 - x, "{}", s.line());
    assert!(
        s.hedges.signal.jvm_pause >= 1 && s.hedge_wins >= 1,
        "{:?}: {}",
        s.hedges,
        s.line()
    );
    assert_eq!(
        s.hedges_total, s.hedges.signal.jvm_pause,
        "no other signal fired: {:?}",
        s.hedges
    );
    assert!(
        s.replicas[x].pauses.jvm_pause >= 1,
        "{:?}",
        s.replicas[x].pauses
    );
    assert_eq!((s.failed, s.requests, s.answered), (0, 200, 200));
    // the stall ends: the pause is counted, the replica back, not warmed
    wait_for("the stalled replica back", Duration::from_secs(20), || {
        e.health(x) == Health::Up
            && e.replicas[x].counters.late_answers.load(Ordering::Relaxed) >= 1
    });
    let s = f.proxy.summary();
    let rx = &s.replicas[x];
    assert!(
        rx.jvm_pauses >= 1 && rx.jvm_pause_longest_ms >= 1000.0,
        "the watch saw the 3 s pause: {} pauses, longest {:.1} ms",
        rx.jvm_pauses,
        rx.jvm_pause_longest_ms
    );
    assert_eq!(rx.warmups, 0, "no warm-up after a JVM pause: {}", s.line());
    assert!(s.line().contains("JVM watch: A on"), "{}", s.line());
    let m = scrape(f.proxy.metrics_addr().unwrap());
    assert_eq!(
        metric(
            &m,
            &format!("elfen_proxy_jvm_watch{{replica=\"{name}\",state=\"on\"}}")
        ),
        1.0
    );
    assert!(metric(&m, "elfen_proxy_hedges_total{reason=\"jvm_pause\"}") >= 1.0);
    assert!(
        metric(
            &m,
            &format!("elfen_proxy_jvm_pauses_total{{replica=\"{name}\"}}")
        ) >= 1.0
    );
    drop(f);

    // the same stall with the signal off: waited out, nothing re-sent
    let f = fronted_with(Protocol::Wire, HedgeMode::Signal, args, args, only_jvm(0.0));
    let e = f.proxy.engine().clone();
    assert_eq!(f.proxy.jvm().state(0).0, WatchState::Disabled);
    let pids = [f.replicas[0].pid(), f.replicas[1].pid()];
    let got = wire_load(
        f.proxy.addr(),
        200,
        Duration::from_millis(1),
        |_| (50_000, Vec::new()),
        Duration::from_secs(20),
        |i| {
            if i == 40 {
                elfen_cmd::proc::signal_pid(pids[e.active()], libc::SIGUSR1);
            }
        },
    );
    got.assert_each_answered_once_ok();
    let s = f.proxy.summary();
    assert_eq!((s.hedges_total, s.swaps), (0, 0), "{}", s.line());
    assert!(!s.line().contains("JVM watch"), "{}", s.line());
}

/// The proxy starts both replicas from a template; the active one is
/// stopped with SIGSTOP under load: every request is answered once, it is
/// taken as paused, roles swap; after SIGCONT it is back and warmed; at the
/// end the replicas and the page are gone.
fn a_stopped_replica_hands_over_and_is_warmed() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page");
    let mut cfg = ProxyConfig::default();
    cfg.replicas.command = Some(format!(
        "{} demo-service --port {{port}} --cpu {{cpu}} --page {{page}} --lane {{lane}}",
        exe()
    ));
    cfg.replicas.page = Some(page.clone());
    cfg.warm.requests = 10;
    slack(&mut cfg);
    let proxy = Proxy::start(cfg, &AtomicBool::new(false)).unwrap();
    let e = proxy.engine().clone();
    let pids = [proxy.replica_pid(0).unwrap(), proxy.replica_pid(1).unwrap()];
    assert!(page.exists());
    // a busy machine may pause a replica on its own too: stop whichever is
    // active at request 100
    let stopped = std::sync::atomic::AtomicUsize::new(usize::MAX);
    let got = wire_load(
        proxy.addr(),
        300,
        Duration::from_millis(1),
        |_| (30_000, Vec::new()),
        Duration::from_secs(20),
        |i| {
            if i == 100 {
                let a = e.active();
                stopped.store(a, Ordering::Relaxed);
                elfen_cmd::proc::signal_pid(pids[a], libc::SIGSTOP);
            }
        },
    );
    let x = stopped.load(Ordering::Relaxed);
    got.assert_each_answered_once_ok();
    let s = proxy.summary();
    assert!(s.swaps >= 1, "{}", s.line());
    assert!(matches!(e.health(x), Health::Paused { .. }), "{}", s.line());
    assert_eq!(e.active(), 1 - x, "{}", s.line());
    let p = &s.replicas[x].pauses;
    assert!(p.stopped + p.off_cpu + p.no_progress >= 1, "{p:?}");
    elfen_cmd::proc::signal_pid(pids[x], libc::SIGCONT);
    // new work keeps flowing to the other, the stopped one is warmed with
    // recent requests (at least one round of warm-ups; another if, catching
    // up on its backlog after SIGCONT, it was taken as paused again)
    wait_for(
        "the stopped replica back and warmed",
        Duration::from_secs(20),
        || e.health(x) == Health::Up && e.warm_left(x) == 0,
    );
    let warmed = e.replicas[x].counters.warmups.load(Ordering::Relaxed);
    assert!(
        warmed >= 10,
        "{warmed} warm-ups: {}",
        proxy.summary().line()
    );
    let got = wire_load(
        proxy.addr(),
        50,
        Duration::from_millis(1),
        |_| (30_000, Vec::new()),
        Duration::from_secs(20),
        |_| {},
    );
    got.assert_each_answered_once_ok();
    let s = proxy.stop();
    assert_eq!(s.failed, 0, "{}", s.line());
    for pid in pids {
        assert!(!elfen_shm::pid_alive(pid), "replica {pid} left running");
    }
    assert!(!page.exists(), "the page the proxy created is removed");
}

/// Replica A closes every connection after 15 answers: the requests lost
/// with it are re-sent to B, every client request is answered once, A's
/// lost connections are counted (record, status line, metrics) and the
/// proxy reconnects to it.
fn a_replica_closing_connections_is_counted_and_served_around() {
    let f = fronted(Protocol::Wire, HedgeMode::Signal, "--close-after 15", "");
    let got = wire_load(
        f.proxy.addr(),
        200,
        Duration::from_millis(1),
        |_| (20_000, Vec::new()),
        Duration::from_secs(20),
        |_| {},
    );
    got.assert_each_answered_once_ok();
    let s = f.proxy.summary();
    assert!(s.replicas[0].links_lost >= 1, "{}", s.line());
    assert!(
        s.line()
            .contains(&format!("A {} lost", s.replicas[0].links_lost)),
        "{}",
        s.line()
    );
    assert_eq!((s.failed, s.answered), (0, 200), "{}", s.line());
    let m = scrape(f.proxy.metrics_addr().unwrap());
    assert!(
        metric(
            &m,
            "elfen_proxy_replica_errors_total{replica=\"A\",kind=\"link_lost\"}"
        ) >= 1.0
    );
    let e = f.proxy.engine().clone();
    wait_for("a new connection to A", Duration::from_secs(10), || {
        e.replicas[0].link.is_up()
    });
}

/// Replica A reads requests and never answers them: its LC line does not
/// move while requests wait, so it is taken as paused (no progress), its
/// requests go to B, and every client request is answered once.
fn a_replica_that_never_answers_is_paused_and_served_around() {
    let f = fronted(Protocol::Wire, HedgeMode::Signal, "--mute", "");
    let got = wire_load(
        f.proxy.addr(),
        100,
        Duration::from_millis(1),
        |_| (20_000, Vec::new()),
        Duration::from_secs(20),
        |_| {},
    );
    got.assert_each_answered_once_ok();
    let s = f.proxy.summary();
    assert_eq!(
        s.replicas[0].pauses.get(Signal::NoProgress),
        1,
        "{}",
        s.line()
    );
    assert_eq!(
        (s.swaps, s.replicas[1].role.as_str()),
        (1, "active"),
        "{}",
        s.line()
    );
    assert!(
        s.replicas[0].state.starts_with("paused (no_progress"),
        "{}",
        s.line()
    );
}

/// Malformed requests (an unknown kind; a payload over 64 KiB) are answered
/// with status 1 to that client alone; another client's requests, sent at
/// the same time, are all answered.
fn a_malformed_request_errs_for_that_client_only() {
    let f = fronted(Protocol::Wire, HedgeMode::Signal, "", "");
    let addr = f.proxy.addr();
    let good = std::thread::spawn(move || {
        wire_load(
            addr,
            200,
            Duration::from_millis(1),
            |_| (20_000, Vec::new()),
            Duration::from_secs(20),
            |_| {},
        )
    });
    let mut bad = TcpStream::connect(addr).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    bad.write_all(&wire::request_bytes(7, 0, b"", Kind::Unknown(9)))
        .unwrap();
    let mut b = [0u8; wire::RESPONSE_BYTES];
    bad.read_exact(&mut b).unwrap();
    assert_eq!(
        (Response::decode(&b).id, Response::decode(&b).status),
        (7, Status::BadRequest)
    );
    // a valid request on the same connection still works
    bad.write_all(&wire::request_bytes(8, 1000, b"", Kind::Work))
        .unwrap();
    bad.read_exact(&mut b).unwrap();
    assert_eq!(
        (Response::decode(&b).id, Response::decode(&b).status),
        (8, Status::Ok)
    );
    // a payload too large: status 1, then the connection is closed
    let mut h = wire::request_bytes(9, 0, b"", Kind::Work);
    h[16..20].copy_from_slice(&(wire::MAX_PAYLOAD + 1).to_le_bytes());
    bad.write_all(&h).unwrap();
    bad.read_exact(&mut b).unwrap();
    assert_eq!(
        (Response::decode(&b).id, Response::decode(&b).status),
        (9, Status::BadRequest)
    );
    assert_eq!(
        bad.read(&mut b).unwrap_or(0),
        0,
        "closed after the protocol error"
    );
    good.join().unwrap().assert_each_answered_once_ok();
    let s = f.proxy.summary();
    assert_eq!((s.malformed, s.failed), (2, 0), "{}", s.line());
}

/// One HTTP/1.1 request on `s`; the answer.
fn http_request(
    s: &mut BufReader<TcpStream>,
    method: &str,
    target: &str,
    body: &str,
) -> (u16, String, String) {
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.get_mut().write_all(req.as_bytes()).unwrap();
    let a = read_answer(Protocol::Http, s, || method == "HEAD")
        .unwrap()
        .unwrap();
    match a.answer {
        Answer::Http(h) => {
            let lane = h
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("x-lane"))
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            (
                h.status,
                String::from_utf8_lossy(&h.body).into_owned(),
                lane,
            )
        }
        other => panic!("{other:?}"),
    }
}

/// HTTP/1.1 through the proxy: answers relayed; replica A pauses inside a
/// POST (not idempotent: not re-sent, answered by A after its pause) while
/// GETs go on being answered by B after the swap; a malformed request gets
/// 400 on its own connection while another connection is served.
fn http_is_proxied_hedged_only_when_idempotent() {
    // request 1 of A is the readiness probe (GET /), request 2 the POST
    let f = fronted(
        Protocol::Http,
        HedgeMode::Signal,
        "--stall-at 2 --stall-ms 1500",
        "",
    );
    let addr = f.proxy.addr();
    let post = std::thread::spawn(move || {
        let mut s = BufReader::new(TcpStream::connect(addr).unwrap());
        let t0 = Instant::now();
        let r = http_request(&mut s, "POST", "/p?us=10", "abc");
        (r, t0.elapsed())
    });
    let e = f.proxy.engine().clone();
    wait_for("the swap away from A", Duration::from_secs(10), || {
        e.active() == 1
    });
    let mut c = BufReader::new(TcpStream::connect(addr).unwrap());
    for i in 0..50 {
        let (status, body, _) = http_request(&mut c, "GET", &format!("/g?us=20&i={i}"), "");
        assert_eq!((status, body.as_str()), (200, "ok\n"), "GET {i}");
    }
    assert_eq!(http_request(&mut c, "HEAD", "/h", "").0, 200);
    let mut bad = TcpStream::connect(addr).unwrap();
    bad.write_all(b"NOT HTTP AT ALL\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = bad.read_to_string(&mut text);
    assert!(text.starts_with("HTTP/1.1 400"), "{text:?}");
    assert_eq!(
        http_request(&mut c, "GET", "/after", "").0,
        200,
        "others unaffected"
    );
    let ((status, _, lane), took) = post.join().unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        lane, "0",
        "the POST was answered by A, where it was sent: not re-sent"
    );
    assert!(
        took >= Duration::from_millis(1400),
        "the POST waited for A's pause ({took:?})"
    );
    let s = f.proxy.summary();
    assert!(s.swaps >= 1 && s.failed == 0, "{}", s.line());
    assert!(s.malformed >= 1, "{}", s.line());
}

/// The timeout hedge: a request unanswered after the timeout goes to B as
/// well; the roles never swap.
fn the_timeout_hedge_sends_late_requests_to_the_backup() {
    let f = fronted(
        Protocol::Wire,
        HedgeMode::Timeout,
        "--stall-at 60 --stall-ms 1500",
        "",
    );
    let got = wire_load(
        f.proxy.addr(),
        200,
        Duration::from_millis(1),
        |_| (20_000, Vec::new()),
        Duration::from_secs(20),
        |_| {},
    );
    got.assert_each_answered_once_ok();
    let s = f.proxy.summary();
    assert!(s.hedges.timeout_pct >= 1, "{}", s.line());
    assert_eq!(s.swaps, 0, "{}", s.line());
    assert!(s.hedge_wins >= 1, "{}", s.line());
    assert!(
        s.replicas[0].pauses.total() == 0,
        "no pause detection in timeout mode"
    );
}

/// A replica command that cannot start: a clear error naming it, and
/// nothing left running (the replica that did start is stopped, the page
/// removed).
fn bad_replica_commands_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page");
    let mut cfg = ProxyConfig::default();
    cfg.replicas.page = Some(page.clone());
    cfg.replicas.startup_timeout_s = 20.0;
    cfg.replicas.command = Some("/nonexistent/replica --port {port}".into());
    let e = Proxy::start(cfg.clone(), &AtomicBool::new(false))
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/replica --port"), "{e}");
    assert!(!page.exists());
    cfg.replicas.command = Some("srv {prot}".into());
    let e = Proxy::start(cfg.clone(), &AtomicBool::new(false))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("replicas.command") && e.contains("{prot}"),
        "{e}"
    );
    // lane 0 starts, lane 1 fails: lane 0's replica must not survive
    let script = dir.path().join("half.sh");
    let pidfile = dir.path().join("pid0");
    std::fs::write(
        &script,
        format!(
            "if [ \"$1\" = 1 ]; then echo cannot open the index >&2; exit 3; fi\necho $$ > {}\nexec {} demo-service --port $2 --page $3 --lane 0\n",
            pidfile.display(),
            exe()
        ),
    )
    .unwrap();
    cfg.replicas.command = Some(format!(
        "sh {} {{lane}} {{port}} {{page}}",
        script.display()
    ));
    let e = Proxy::start(cfg, &AtomicBool::new(false))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("exited") && e.contains("cannot open the index"),
        "{e}"
    );
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !elfen_shm::pid_alive(pid),
        "the replica that started ({pid}) is left running"
    );
    assert!(!page.exists(), "the page is removed");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("demo-service") {
        let d = Demo::parse_from(args[1..].iter());
        std::process::exit(match elfen_proxy::demo::run(d.a) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("demo-service: {e:#}");
                1
            }
        });
    }
    // The replicas pin their workers to the lanes: one lane user at a time.
    let _lanes = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let tests: [(&str, fn()); 9] = [
        (
            "a_paused_replica_hands_over_to_the_backup",
            a_paused_replica_hands_over_to_the_backup,
        ),
        (
            "a_jvm_pause_seen_by_bpf_hands_over",
            a_jvm_pause_seen_by_bpf_hands_over,
        ),
        (
            "a_stopped_replica_hands_over_and_is_warmed",
            a_stopped_replica_hands_over_and_is_warmed,
        ),
        (
            "a_replica_closing_connections_is_counted_and_served_around",
            a_replica_closing_connections_is_counted_and_served_around,
        ),
        (
            "a_replica_that_never_answers_is_paused_and_served_around",
            a_replica_that_never_answers_is_paused_and_served_around,
        ),
        (
            "a_malformed_request_errs_for_that_client_only",
            a_malformed_request_errs_for_that_client_only,
        ),
        (
            "http_is_proxied_hedged_only_when_idempotent",
            http_is_proxied_hedged_only_when_idempotent,
        ),
        (
            "the_timeout_hedge_sends_late_requests_to_the_backup",
            the_timeout_hedge_sends_late_requests_to_the_backup,
        ),
        (
            "bad_replica_commands_fail_cleanly",
            bad_replica_commands_fail_cleanly,
        ),
    ];
    let only: Vec<String> = args[1..]
        .iter()
        .filter(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in tests {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let t0 = Instant::now();
        match std::panic::catch_unwind(f) {
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok ({:.1} s)", t0.elapsed().as_secs_f64());
            }
            Err(_) => {
                failed += 1;
                println!("test {name} ... FAILED");
            }
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
