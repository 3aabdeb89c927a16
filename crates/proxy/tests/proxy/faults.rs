//! Faults served around or refused cleanly: a replica closing its
//! connections or never answering, malformed requests, replica commands
//! that cannot start.

use crate::common::*;
use crate::support::{wait_for, wire_load};
use elfen_proxy::Proxy;
use elfen_proxy::config::{HedgeMode, Protocol, ProxyConfig};
use elfen_proxy::detect::Signal;
use elfen_wire::{self as wire, Kind, Response, Status};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Replica A closes every connection after 15 answers: the requests lost
/// with it are re-sent to B, every client request is answered once, A's
/// lost connections are counted (record, status line, metrics) and the
/// proxy reconnects to it.
pub fn a_replica_closing_connections_is_counted_and_served_around() {
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
pub fn a_replica_that_never_answers_is_paused_and_served_around() {
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
pub fn a_malformed_request_errs_for_that_client_only() {
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

/// A replica command that cannot start: a clear error naming it, and
/// nothing left running (the replica that did start is stopped, the page
/// removed).
pub fn bad_replica_commands_fail_cleanly() {
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
