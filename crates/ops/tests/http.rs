//! The metrics endpoint under hostile clients: a slow sender, oversized
//! requests, a flood of idle connections, and random bytes (fuzzed, bounded
//! and seeded) do not stall a concurrent scrape, get a 4xx or a closed
//! connection, and panic nothing.

use elfen_ops::metrics::server::{
    HEAD_DEADLINE, Head, MAX_CONNECTIONS, MAX_HEAD_BYTES, Request, parse_head,
};
use elfen_ops::metrics::{MetricsServer, serve};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use proptest::prelude::*;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Panics on the server's threads (named `elfen-metrics…`), counted by a
/// hook installed once per test binary.
static SERVER_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_server_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("elfen-metrics"))
            {
                SERVER_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

fn server() -> MetricsServer {
    count_server_panics();
    let mut r = Registry::default();
    let c: Counter = Counter::default();
    c.inc();
    r.register("elfen_test_probe", "A counter the tests look for", c);
    serve("127.0.0.1:0".parse().unwrap(), r).unwrap()
}

/// A whole scrape: the response and how long it took.
fn scrape(addr: SocketAddr) -> (String, Duration) {
    let t0 = Instant::now();
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    (out, t0.elapsed())
}

/// Sends `bytes` (as far as the server takes them), ends the sending side,
/// and returns what came back (empty when the server closed or reset).
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = c.write_all(bytes);
    let _ = c.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A normal scrape answers, and well within the generous bound.
fn assert_scrape_answers(addr: SocketAddr, while_: &str) {
    let (out, took) = scrape(addr);
    assert!(
        out.starts_with("HTTP/1.1 200 OK") && out.contains("elfen_test_probe_total 1"),
        "{while_}: {out}"
    );
    assert!(
        took < Duration::from_secs(5),
        "{while_}: the scrape took {took:?}"
    );
}

#[test]
fn a_slow_and_an_oversized_client_do_not_stall_a_scrape() {
    let srv = server();
    let addr = srv.addr();
    // A byte a second, for up to 12 s: the old endpoint waited for it.
    let slow = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        let t0 = Instant::now();
        for b in b"GET /metrics".iter() {
            if c.write_all(&[*b]).is_err() {
                return t0.elapsed();
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        Duration::MAX
    });
    // 1 MB of request line, and 1 MB of one header.
    let big_line = std::thread::spawn(move || {
        let mut req = b"GET /".to_vec();
        req.extend(std::iter::repeat_n(b'a', 1 << 20));
        exchange(addr, &req)
    });
    let big_header = std::thread::spawn(move || {
        let mut req = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
        req.extend(std::iter::repeat_n(b'b', 1 << 20));
        req.extend(b"\r\n\r\n");
        exchange(addr, &req)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_scrape_answers(addr, "beside a slow and two oversized clients");
    for (what, h) in [("1 MB request line", big_line), ("1 MB header", big_header)] {
        let out = h.join().unwrap();
        assert!(
            out.is_empty() || out.starts_with("HTTP/1.1 431"),
            "{what}: {out}"
        );
    }
    // The slow client was cut off at the head deadline (its writes then
    // fail), not served for as long as it kept sending.
    let cut = slow.join().unwrap();
    assert!(
        cut < HEAD_DEADLINE + Duration::from_secs(6),
        "the slow client was not cut off (after {cut:?})"
    );
    assert_scrape_answers(addr, "after them");
    assert_eq!(srv.scrapes(), 2);
    assert_eq!(SERVER_PANICS.load(Ordering::SeqCst), 0);
}

#[test]
fn a_flood_of_idle_connections_does_not_stall_a_scrape() {
    let srv = server();
    let addr = srv.addr();
    let idle: Vec<TcpStream> = (0..3 * MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert_scrape_answers(addr, &format!("beside {} idle connections", idle.len()));
    drop(idle);
    assert_scrape_answers(addr, "after them");
    assert_eq!(SERVER_PANICS.load(Ordering::SeqCst), 0);
}

#[test]
fn bad_requests_get_their_4xx() {
    let srv = server();
    let addr = srv.addr();
    let many_headers: String = (0..100).map(|i| format!("X-{i}: v\r\n")).collect();
    for (req, status) in [
        ("GET /metrics HTTP/1.1\r\n\r\n".to_string(), "200"),
        ("GET /metrics?x=1 HTTP/1.0\r\n\r\n".to_string(), "200"),
        ("GET /other HTTP/1.1\r\n\r\n".to_string(), "404"),
        ("POST /metrics HTTP/1.1\r\n\r\n".to_string(), "405"),
        ("\x00\x01garbage\r\n\r\n".to_string(), "400"),
        (
            format!("GET /metrics HTTP/1.1\r\n{many_headers}\r\n"),
            "431",
        ),
    ] {
        let out = exchange(addr, req.as_bytes());
        assert!(
            out.starts_with(&format!("HTTP/1.1 {status} ")),
            "{req:?}: {out}"
        );
    }
    // a head that never ends: 408 at the deadline
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
    assert_eq!(SERVER_PANICS.load(Ordering::SeqCst), 0);
}

/// Valid requests, then mutated: bytes replaced, inserted, cut.
fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
    let valid = prop_oneof![
        Just(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        Just(b"GET /metrics?name[]=a HTTP/1.0\r\nAccept: */*\r\nUser-Agent: p\r\n\r\n".to_vec()),
        Just(b"HEAD / HTTP/1.1\r\n\r\n".to_vec()),
    ];
    let mutated = (
        valid,
        proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..8),
    )
        .prop_map(|(mut v, edits)| {
            for (at, b, op) in edits {
                let i = at % (v.len() + 1);
                match op {
                    0 if i < v.len() => v[i] = b,
                    1 => v.insert(i, b),
                    _ => v.truncate(i),
                }
            }
            v
        });
    prop_oneof![
        mutated,
        proptest::collection::vec(any::<u8>(), 0..2 * MAX_HEAD_BYTES),
    ]
}

#[test]
fn fuzz_the_request_parser() {
    elfen_cmd::fuzz::run("metrics request parser", 5000, request_bytes(), |bytes| {
        let head = parse_head(&bytes);
        if bytes.len() >= MAX_HEAD_BYTES {
            prop_assert_ne!(head, Head::Partial);
        }
        // a whole valid head stays whole whatever follows it
        let mut v = b"GET /metrics HTTP/1.1\r\n\r\n".to_vec();
        v.extend_from_slice(&bytes);
        prop_assert_eq!(parse_head(&v), Head::Complete(Request::Scrape));
        Ok(())
    });
}

#[test]
fn fuzz_the_endpoint_over_a_socket() {
    let srv = server();
    let addr = srv.addr();
    elfen_cmd::fuzz::run(
        "metrics endpoint over a socket",
        400,
        request_bytes(),
        |bytes| {
            let out = exchange(addr, &bytes);
            let status = out.get(9..12).unwrap_or("");
            prop_assert!(
                out.is_empty()
                    || (out.starts_with("HTTP/1.1 ")
                        && ["200", "400", "404", "405", "408", "431"].contains(&status)),
                "{}",
                out
            );
            Ok(())
        },
    );
    assert_scrape_answers(addr, "after the fuzzing");
    assert_eq!(SERVER_PANICS.load(Ordering::SeqCst), 0);
}
