//! What crosses the proxy, whatever the protocol: a client's [`Request`]
//! (kept so it can be re-sent) and a replica's [`Answer`]; how requests are
//! written to a replica and answers read back ([`write_request`],
//! [`read_answer`]).
//!
//! On the wire protocol the proxy sends each request to a replica under an
//! id of its own (unique in the proxy, the same on both replicas), which
//! the replica echoes and — through the LC API — publishes on its LC line
//! while the request runs; the client's id is put back in the answer. On
//! HTTP/1.1 requests are pipelined on one connection per replica and
//! answers come back in order.

use bytes::Bytes;
use elfen_wire::{self as wire, Kind, RequestHeader, Response, Status};
use std::hash::{Hash, Hasher};
use std::io::{self, BufRead, Read};

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A wire-protocol work request (`kind` 0).
    Wire {
        /// The service's work hint.
        arg: u64,
        /// The payload.
        payload: Bytes,
    },
    /// An HTTP/1.1 request.
    Http(HttpRequest),
}

/// An HTTP/1.1 request, hop-by-hop headers removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// The method (`GET`).
    pub method: String,
    /// The request target (`/search?q=x`).
    pub target: String,
    /// End-to-end headers.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Bytes,
}

/// An HTTP/1.1 response, hop-by-hop headers removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// End-to-end headers.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Bytes,
}

/// What a client gets back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A replica's wire-protocol response (its `id` is the proxy's).
    Wire(Response),
    /// A replica's HTTP response.
    Http(HttpResponse),
    /// No replica could answer (both down, or a request that may not be
    /// sent twice was lost with its replica): wire status 2, HTTP 502.
    Failed,
}

impl Answer {
    /// The service time the replica reported, ns (wire protocol only).
    pub fn service_ns(&self) -> Option<u64> {
        match self {
            Answer::Wire(r) if r.service_ns > 0 => Some(r.service_ns),
            _ => None,
        }
    }

    /// Whether the replica answered with an error of its own (wire status
    /// other than 0; HTTP 5xx).
    pub fn is_error(&self) -> bool {
        match self {
            Answer::Wire(r) => r.status != Status::Ok,
            Answer::Http(h) => h.status >= 500,
            Answer::Failed => true,
        }
    }
}

/// Headers that belong to one connection, never forwarded.
pub const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "expect",
];

/// Whether header `name` is hop-by-hop.
pub fn hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

impl Request {
    /// A key of the request's content: requests with the same key are the
    /// same work (their service times predict each other).
    pub fn key(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match self {
            Request::Wire { arg, payload } => {
                arg.hash(&mut h);
                payload.hash(&mut h);
            }
            Request::Http(r) => {
                r.method.hash(&mut h);
                r.target.hash(&mut h);
                r.body.hash(&mut h);
            }
        }
        h.finish()
    }

    /// Whether it is an HTTP HEAD request (its answer has no body).
    pub fn is_head(&self) -> bool {
        matches!(self, Request::Http(r) if r.method == "HEAD")
    }
}

/// Appends request `req` under proxy id `id` to `out`, as sent to a
/// replica at `host`.
pub fn write_request(req: &Request, id: u64, host: &str, out: &mut Vec<u8>) {
    match req {
        Request::Wire { arg, payload } => {
            let h = RequestHeader {
                id,
                arg: *arg,
                len: payload.len() as u32,
                kind: Kind::Work,
            };
            out.extend_from_slice(&h.encode());
            out.extend_from_slice(payload);
        }
        Request::Http(r) => {
            out.extend_from_slice(r.method.as_bytes());
            out.push(b' ');
            out.extend_from_slice(r.target.as_bytes());
            out.extend_from_slice(b" HTTP/1.1\r\n");
            let mut has_host = false;
            for (k, v) in &r.headers {
                has_host |= k.eq_ignore_ascii_case("host");
                out.extend_from_slice(k.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(v);
                out.extend_from_slice(b"\r\n");
            }
            if !has_host {
                out.extend_from_slice(b"Host: ");
                out.extend_from_slice(host.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            if !r.body.is_empty() || !matches!(r.method.as_str(), "GET" | "HEAD") {
                out.extend_from_slice(format!("Content-Length: {}\r\n", r.body.len()).as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&r.body);
        }
    }
}

/// A wire-protocol ping (the readiness check).
pub fn ping_bytes() -> Vec<u8> {
    wire::request_bytes(u64::MAX, 0, b"", Kind::Ping)
}

/// Largest HTTP response head read from a replica, bytes.
const MAX_HEAD: usize = 64 * 1024;
/// Largest HTTP response body read from a replica, bytes.
const MAX_BODY: usize = 64 * 1024 * 1024;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// One answer read from a replica.
#[derive(Debug)]
pub struct ReadAnswer {
    /// The proxy id (wire: from the response; HTTP: `None`, the next in
    /// send order).
    pub id: Option<u64>,
    /// The answer.
    pub answer: Answer,
    /// The replica ends the connection after it (HTTP `Connection: close`
    /// or a body delimited by the end of the connection).
    pub close: bool,
}

/// Reads the next answer from a replica connection. `head_only` says the
/// HTTP request it answers was a HEAD. `Ok(None)` at a clean end of the
/// connection.
pub fn read_answer(
    protocol: crate::config::Protocol,
    r: &mut impl BufRead,
    head_only: impl FnOnce() -> bool,
) -> io::Result<Option<ReadAnswer>> {
    match protocol {
        crate::config::Protocol::Wire => {
            let mut b = [0u8; wire::RESPONSE_BYTES];
            if !read_full_or_eof(r, &mut b)? {
                return Ok(None);
            }
            let resp = Response::decode(&b);
            Ok(Some(ReadAnswer {
                id: Some(resp.id),
                answer: Answer::Wire(resp),
                close: false,
            }))
        }
        crate::config::Protocol::Http => read_http_response(r, head_only),
    }
}

/// Fills `b` completely; `Ok(false)` if the connection ended before the
/// first byte.
fn read_full_or_eof(r: &mut impl Read, b: &mut [u8]) -> io::Result<bool> {
    let mut have = 0;
    while have < b.len() {
        match r.read(&mut b[have..]) {
            Ok(0) if have == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads a response head (up to the empty line); `Ok(None)` at a clean
/// end of the connection.
fn read_head(r: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = r.read_until(b'\n', &mut head)?;
        if n == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            if before == 0 {
                head.clear(); // stray empty line before a response
                continue;
            }
            return Ok(Some(head));
        }
        if head.len() > MAX_HEAD {
            return Err(bad("response head longer than 64 KiB"));
        }
    }
}

fn read_http_response(
    r: &mut impl BufRead,
    head_only: impl FnOnce() -> bool,
) -> io::Result<Option<ReadAnswer>> {
    // asked once the answer has begun: the request it answers was sent by then
    let mut head_only = Some(head_only);
    let mut is_head = false;
    loop {
        let Some(head) = read_head(r)? else {
            return Ok(None);
        };
        if let Some(f) = head_only.take() {
            is_head = f();
        }
        let mut hs = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut hs);
        match resp.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err(bad("incomplete response head")),
            Err(e) => return Err(bad(format!("bad response head: {e}"))),
        }
        let status = resp.code.unwrap_or(0);
        let http10 = resp.version == Some(0);
        let mut close = http10;
        let mut chunked = false;
        let mut length = None;
        let mut headers = Vec::new();
        for h in resp.headers.iter() {
            let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            if h.name.eq_ignore_ascii_case("connection") {
                close = v.contains("close") || (http10 && !v.contains("keep-alive"));
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.contains("chunked");
            } else if h.name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    v.trim()
                        .parse::<usize>()
                        .map_err(|_| bad(format!("bad Content-Length {v:?}")))?,
                );
            }
            if !hop_by_hop(h.name) {
                headers.push((h.name.to_string(), h.value.to_vec()));
            }
        }
        if (100..200).contains(&status) {
            continue; // an interim response: the real one follows
        }
        let body = if is_head || status == 204 || status == 304 {
            Vec::new()
        } else if chunked {
            read_chunked(r)?
        } else if let Some(n) = length {
            if n > MAX_BODY {
                return Err(bad(format!("response body of {n} bytes")));
            }
            let mut b = vec![0u8; n];
            r.read_exact(&mut b)?;
            b
        } else {
            // delimited by the end of the connection
            close = true;
            let mut b = Vec::new();
            r.take(MAX_BODY as u64).read_to_end(&mut b)?;
            b
        };
        return Ok(Some(ReadAnswer {
            id: None,
            answer: Answer::Http(HttpResponse {
                status,
                headers,
                body: Bytes::from(body),
            }),
            close,
        }));
    }
}

fn read_chunked(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let size_hex = line.trim().split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| bad(format!("bad chunk size {size_hex:?}")))?;
        if size == 0 {
            // trailers, up to the empty line
            loop {
                let mut t = String::new();
                if r.read_line(&mut t)? == 0 || t.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(bad("chunked body larger than 64 MiB"));
        }
        let at = body.len();
        body.resize(at + size, 0);
        r.read_exact(&mut body[at..])?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
    }
}

/// The wire response a client gets for `answer` to its request `client_id`.
pub fn wire_response_for(answer: &Answer, client_id: u64) -> Response {
    match answer {
        Answer::Wire(r) => Response {
            id: client_id,
            ..*r
        },
        _ => Response {
            id: client_id,
            service_ns: 0,
            queued_ns: 0,
            status: Status::ServiceError,
            result: 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Protocol;
    use std::io::BufReader;

    fn http(raw: &[u8], head: bool) -> io::Result<Option<ReadAnswer>> {
        read_answer(Protocol::Http, &mut BufReader::new(raw), || head)
    }

    #[test]
    fn http_answers_are_framed_by_length_chunks_or_close() {
        let a = http(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhelloHTTP/1.1 200",
            false,
        )
        .unwrap()
        .unwrap();
        match a.answer {
            Answer::Http(h) => {
                assert_eq!((h.status, &h.body[..]), (200, &b"hello"[..]));
                assert_eq!(h.headers, vec![("X-A".to_string(), b"1".to_vec())]);
            }
            other => panic!("{other:?}"),
        }
        assert!(!a.close);
        let a = http(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        match a.answer {
            Answer::Http(h) => assert_eq!((h.status, &h.body[..]), (404, &b"abcde"[..])),
            other => panic!("{other:?}"),
        }
        let a = http(b"HTTP/1.0 200 OK\r\n\r\nuntil the end", false)
            .unwrap()
            .unwrap();
        assert!(a.close);
        let a = http(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert!(
            matches!(a.answer, Answer::Http(ref h) if h.body.is_empty()),
            "HEAD"
        );
        assert!(http(b"", false).unwrap().is_none(), "clean end");
        assert!(http(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", false).is_err());
        assert!(http(b"garbage\r\n\r\n", false).is_err());
    }

    #[test]
    fn requests_are_written_with_the_proxy_id_and_framing() {
        let mut out = Vec::new();
        let w = Request::Wire {
            arg: 5,
            payload: Bytes::from_static(b"term"),
        };
        write_request(&w, 77, "h", &mut out);
        let h = RequestHeader::decode(out[..24].try_into().unwrap());
        assert_eq!((h.id, h.arg, h.len, h.kind), (77, 5, 4, Kind::Work));
        assert_eq!(&out[24..], b"term");
        let mut out = Vec::new();
        let r = Request::Http(HttpRequest {
            method: "POST".into(),
            target: "/x?y=1".into(),
            headers: vec![("Accept".into(), b"*/*".to_vec())],
            body: Bytes::from_static(b"abc"),
        });
        write_request(&r, 1, "127.0.0.1:9", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /x?y=1 HTTP/1.1\r\nAccept: */*\r\nHost: 127.0.0.1:9\r\nContent-Length: 3\r\n\r\nabc"
        );
        assert_ne!(r.key(), w.key());
        assert_eq!(w.key(), w.clone().key());
    }

    #[test]
    fn the_client_gets_its_own_id_back() {
        let r = Response {
            id: 900,
            service_ns: 3,
            queued_ns: 4,
            status: Status::Ok,
            result: 5,
        };
        let c = wire_response_for(&Answer::Wire(r), 12);
        assert_eq!((c.id, c.service_ns, c.result), (12, 3, 5));
        assert_eq!(
            wire_response_for(&Answer::Failed, 12).status,
            Status::ServiceError
        );
    }
}
