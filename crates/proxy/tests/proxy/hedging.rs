//! Hedging: HTTP/1.1 re-sent only when idempotent, and the timeout hedge.

use crate::common::*;
use crate::support::{wait_for, wire_load};
use elfen_proxy::config::{HedgeMode, Protocol};
use elfen_proxy::message::{Answer, read_answer};
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

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
pub fn http_is_proxied_hedged_only_when_idempotent() {
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
pub fn the_timeout_hedge_sends_late_requests_to_the_backup() {
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
