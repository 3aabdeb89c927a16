//! **Text protocols** of unmodified services, as a [`KvSpec`] describes
//! them: RESP (Redis) and text lines (memcached). Requests are rendered
//! from templates ([`Template`]); responses are framed ([`TextProtocol::
//! decode`]) in order — these protocols carry no request ids, so the k-th
//! response on a connection answers its k-th request — and classified as
//! an error, a miss (nil / no value) or a hit. [`Conn`] is a blocking
//! client for the steps around the load: readiness, filling the key space,
//! checking it.
//!
//! Encoding and decoding allocate nothing once their buffers have grown:
//! the load generator runs them per request.

use crate::error::{LoadError, Result};
use crate::kv::{KvSpec, TextProtocolKind};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(Vec<u8>),
    Key,
    Value,
    ValueBytes,
    Keys,
}

/// A request template: literal text and the placeholders `{key}`,
/// `{value}`, `{value_bytes}`, `{keys}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// What the placeholders stand for.
#[derive(Debug, Clone, Copy)]
struct Vars<'a> {
    key: u64,
    value: &'a [u8],
    keys: u64,
}

/// Decimal digits of `n`.
fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// Appends `n` in decimal, without allocating.
fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut b = [0u8; 20];
    let mut i = b.len();
    let mut x = n;
    loop {
        i -= 1;
        b[i] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            break;
        }
    }
    out.extend_from_slice(&b[i..]);
}

impl Template {
    /// Parses `t`; an unknown `{name}` is an error naming it.
    pub fn parse(t: &str) -> std::result::Result<Template, String> {
        let mut parts = Vec::new();
        let mut lit = Vec::new();
        let mut rest = t;
        while let Some(i) = rest.find('{') {
            lit.extend_from_slice(&rest.as_bytes()[..i]);
            let after = &rest[i..];
            let Some(j) = after.find('}') else {
                return Err(format!("{t:?}: an unclosed {{"));
            };
            let part = match &after[1..j] {
                "key" => Part::Key,
                "value" => Part::Value,
                "value_bytes" => Part::ValueBytes,
                "keys" => Part::Keys,
                other => {
                    return Err(format!(
                        "{t:?}: unknown placeholder {{{other}}} (known: {{key}} {{value}} \
                         {{value_bytes}} {{keys}})"
                    ));
                }
            };
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(part);
            rest = &after[j + 1..];
        }
        lit.extend_from_slice(rest.as_bytes());
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts })
    }

    fn len(&self, v: Vars) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Lit(l) => l.len(),
                Part::Key => digits(v.key),
                Part::Value => v.value.len(),
                Part::ValueBytes => digits(v.value.len() as u64),
                Part::Keys => digits(v.keys),
            })
            .sum()
    }

    fn render(&self, v: Vars, out: &mut Vec<u8>) {
        for p in &self.parts {
            match p {
                Part::Lit(l) => out.extend_from_slice(l),
                Part::Key => push_u64(out, v.key),
                Part::Value => out.extend_from_slice(v.value),
                Part::ValueBytes => push_u64(out, v.value.len() as u64),
                Part::Keys => push_u64(out, v.keys),
            }
        }
    }
}

/// A request in the service's protocol.
#[derive(Debug, Clone)]
enum Encoder {
    /// RESP: an array of bulk strings, one per word.
    Resp(Vec<Template>),
    /// One line (`\r\n` appended).
    Line(Template),
}

impl Encoder {
    fn new(kind: TextProtocolKind, t: &str) -> std::result::Result<Encoder, String> {
        Ok(match kind {
            TextProtocolKind::Resp => Encoder::Resp(
                t.split_whitespace()
                    .map(Template::parse)
                    .collect::<std::result::Result<_, _>>()?,
            ),
            TextProtocolKind::Line => Encoder::Line(Template::parse(t)?),
        })
    }

    /// The request as text, for messages (RESP's words with spaces).
    fn text(&self, v: Vars) -> String {
        let mut out = Vec::new();
        match self {
            Encoder::Resp(words) => {
                for (i, w) in words.iter().enumerate() {
                    if i > 0 {
                        out.push(b' ');
                    }
                    w.render(v, &mut out);
                }
            }
            Encoder::Line(t) => t.render(v, &mut out),
        }
        let s = String::from_utf8_lossy(&out);
        s.chars().take(120).collect()
    }

    fn encode(&self, v: Vars, out: &mut Vec<u8>) {
        match self {
            Encoder::Resp(words) => {
                out.push(b'*');
                push_u64(out, words.len() as u64);
                out.extend_from_slice(b"\r\n");
                for w in words {
                    out.push(b'$');
                    push_u64(out, w.len(v) as u64);
                    out.extend_from_slice(b"\r\n");
                    w.render(v, out);
                    out.extend_from_slice(b"\r\n");
                }
            }
            Encoder::Line(t) => {
                t.render(v, out);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// A framed response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The service answered with an error.
    pub error: bool,
    /// No value (RESP nil; a line response with nothing before its end).
    pub miss: bool,
    /// Bytes of the response's first line (without `\r\n`), from the
    /// start of the buffer it was decoded from: for messages.
    pub first_line: (usize, usize),
}

/// A service's protocol, resolved from its [`KvSpec`].
#[derive(Debug, Clone)]
pub struct TextProtocol {
    /// The service's name.
    pub name: String,
    kind: TextProtocolKind,
    request: Encoder,
    ping: Encoder,
    populate: Option<Encoder>,
    populate_each: Option<Encoder>,
    end_words: Vec<Vec<u8>>,
    error_words: Vec<Vec<u8>>,
    value: Vec<u8>,
    /// Keys in the key space.
    pub keys: u64,
}

/// The first `\r\n` at or after `from`.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn parse_i64(b: &[u8]) -> std::result::Result<i64, String> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not a RESP length: {:?}", String::from_utf8_lossy(b)))
}

/// One RESP value at `pos`: its end, whether it is an error, whether nil;
/// `None` while incomplete.
fn resp_value(buf: &[u8], pos: usize) -> std::result::Result<Option<(usize, bool, bool)>, String> {
    let Some(le) = line_end(buf, pos) else {
        return Ok(None);
    };
    let next = le + 2;
    match buf[pos] {
        b'+' | b':' => Ok(Some((next, false, false))),
        b'-' => Ok(Some((next, true, false))),
        b'$' => {
            let n = parse_i64(&buf[pos + 1..le])?;
            if n < 0 {
                return Ok(Some((next, false, true)));
            }
            let end = next + n as usize + 2;
            if buf.len() < end {
                return Ok(None);
            }
            if &buf[end - 2..end] != b"\r\n" {
                return Err("a RESP bulk string does not end in \\r\\n".into());
            }
            Ok(Some((end, false, false)))
        }
        b'*' => {
            let n = parse_i64(&buf[pos + 1..le])?;
            if n < 0 {
                return Ok(Some((next, false, true)));
            }
            let mut at = next;
            for _ in 0..n {
                match resp_value(buf, at)? {
                    Some((e, _, _)) => at = e,
                    None => return Ok(None),
                }
            }
            Ok(Some((at, false, false)))
        }
        other => Err(format!(
            "not a RESP2 reply (type byte {:?}): {:?}",
            other as char,
            String::from_utf8_lossy(&buf[pos..le.min(pos + 80)])
        )),
    }
}

impl TextProtocol {
    /// The protocol of `kv` (validated: its templates parse).
    pub fn new(kv: &KvSpec) -> std::result::Result<TextProtocol, String> {
        let enc = |t: &str| Encoder::new(kv.protocol, t);
        let words = |w: &[String]| w.iter().map(|s| s.as_bytes().to_vec()).collect();
        Ok(TextProtocol {
            name: kv.name.clone(),
            kind: kv.protocol,
            request: enc(&kv.request)?,
            ping: enc(&kv.ping)?,
            populate: kv.populate.as_deref().map(enc).transpose()?,
            populate_each: kv.populate_each.as_deref().map(enc).transpose()?,
            end_words: words(&kv.end_words),
            error_words: words(&kv.error_words),
            value: vec![b'v'; kv.value_bytes as usize],
            keys: kv.keys,
        })
    }

    fn vars(&self, key: u64) -> Vars<'_> {
        Vars {
            key,
            value: &self.value,
            keys: self.keys,
        }
    }

    /// Appends the load's request for `key` to `out`.
    pub fn encode_request(&self, key: u64, out: &mut Vec<u8>) {
        self.request.encode(self.vars(key), out);
    }

    /// Appends the readiness request.
    pub fn encode_ping(&self, out: &mut Vec<u8>) {
        self.ping.encode(self.vars(0), out);
    }

    /// The first complete response at the start of `buf`: its length and
    /// what it says; `Ok(None)` while incomplete; an error when `buf` is
    /// not this protocol.
    pub fn decode(&self, buf: &[u8]) -> std::result::Result<Option<(usize, Reply)>, String> {
        if buf.is_empty() {
            return Ok(None);
        }
        let first = line_end(buf, 0).map(|e| (0, e));
        match self.kind {
            TextProtocolKind::Resp => Ok(resp_value(buf, 0)?.map(|(end, error, miss)| {
                (
                    end,
                    Reply {
                        error,
                        miss,
                        first_line: first.unwrap_or((0, 0)),
                    },
                )
            })),
            TextProtocolKind::Line => {
                let mut at = 0;
                let mut lines = 0;
                while let Some(le) = line_end(buf, at) {
                    let line = &buf[at..le];
                    let word = line.split(|&b| b == b' ').next().unwrap_or(line);
                    let error = self.error_words.iter().any(|w| w == word);
                    if error || self.end_words.iter().any(|w| w == word) {
                        return Ok(Some((
                            le + 2,
                            Reply {
                                error,
                                miss: lines == 0,
                                first_line: first.unwrap_or((0, 0)),
                            },
                        )));
                    }
                    lines += 1;
                    at = le + 2;
                }
                Ok(None)
            }
        }
    }
}

/// A blocking connection for the steps around the load.
pub struct Conn<'a> {
    s: TcpStream,
    proto: &'a TextProtocol,
    buf: Vec<u8>,
    have: usize,
}

impl<'a> Conn<'a> {
    /// Connects to `addr` (TCP_NODELAY), reads time out after `timeout`.
    pub fn connect(
        addr: SocketAddr,
        proto: &'a TextProtocol,
        timeout: Duration,
    ) -> std::io::Result<Conn<'a>> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        Ok(Conn {
            s,
            proto,
            buf: vec![0; 64 << 10],
            have: 0,
        })
    }

    /// Reads one response; an error reply's first line in the error.
    pub fn reply(&mut self) -> std::io::Result<Reply> {
        loop {
            match self
                .proto
                .decode(&self.buf[..self.have])
                .map_err(std::io::Error::other)?
            {
                Some((n, r)) => {
                    let text = String::from_utf8_lossy(&self.buf[r.first_line.0..r.first_line.1])
                        .to_string();
                    self.buf.copy_within(n..self.have, 0);
                    self.have -= n;
                    if r.error {
                        return Err(std::io::Error::other(format!("the service says {text:?}")));
                    }
                    return Ok(r);
                }
                None => {
                    if self.have == self.buf.len() {
                        let n = self.buf.len();
                        self.buf.resize(n * 2, 0);
                    }
                    let n = self.s.read(&mut self.buf[self.have..])?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    self.have += n;
                }
            }
        }
    }

    /// Sends `req` and reads its response.
    pub fn call(&mut self, req: &[u8]) -> std::io::Result<Reply> {
        self.s.write_all(req)?;
        self.reply()
    }
}

/// Whether the service at `addr` answers its readiness request.
pub fn ping(addr: SocketAddr, proto: &TextProtocol) -> std::io::Result<()> {
    let mut c = Conn::connect(addr, proto, Duration::from_secs(2))?;
    let mut req = Vec::new();
    proto.encode_ping(&mut req);
    c.call(&req).map(|_| ())
}

/// Requests of `populate_each` written before their responses are read.
const PIPELINE: u64 = 512;

/// Fills the service's key space (`populate` or `populate_each`) and
/// checks that its first and last keys are there. Returns how, in words,
/// and how long it took.
pub fn populate(addr: SocketAddr, proto: &TextProtocol) -> Result<(String, Duration)> {
    let fail = |what: String| LoadError::Service(format!("{}: {what}", proto.name));
    let mut c = Conn::connect(addr, proto, Duration::from_secs(600))
        .map_err(|e| fail(format!("connecting to fill the key space: {e}")))?;
    let t0 = Instant::now();
    let mut req = Vec::new();
    let how = if let Some(p) = &proto.populate {
        p.encode(proto.vars(0), &mut req);
        let text = p.text(proto.vars(0));
        c.call(&req)
            .map_err(|e| fail(format!("filling the key space with {text:?}: {e}")))?;
        format!("one request ({text})")
    } else {
        let each = proto
            .populate_each
            .as_ref()
            .expect("validated: one of them");
        let mut key = 0;
        while key < proto.keys {
            let n = PIPELINE.min(proto.keys - key);
            req.clear();
            for k in key..key + n {
                each.encode(proto.vars(k), &mut req);
            }
            c.s.write_all(&req)
                .map_err(|e| fail(format!("writing key {key}: {e}")))?;
            for k in key..key + n {
                c.reply()
                    .map_err(|e| fail(format!("writing key {k}: {e}")))?;
            }
            key += n;
        }
        format!(
            "{} pipelined requests ({}, …)",
            proto.keys,
            each.text(proto.vars(0))
        )
    };
    let took = t0.elapsed();
    for key in [0, proto.keys - 1] {
        req.clear();
        proto.encode_request(key, &mut req);
        let r = c
            .call(&req)
            .map_err(|e| fail(format!("reading key {key} back: {e}")))?;
        if r.miss {
            return Err(fail(format!(
                "key {key} is missing after filling the key space ({:?} answered with no value)",
                proto.request.text(proto.vars(key))
            )));
        }
    }
    Ok((how, took))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_requests_are_arrays_of_bulk_strings() {
        let p = TextProtocol::new(&KvSpec::redis()).unwrap();
        let mut out = Vec::new();
        p.encode_request(1234, &mut out);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$8\r\nkey:1234\r\n");
        out.clear();
        p.populate.as_ref().unwrap().encode(p.vars(0), &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "*5\r\n$5\r\nDEBUG\r\n$8\r\nPOPULATE\r\n$7\r\n1260000\r\n$3\r\nkey\r\n$3\r\n256\r\n"
        );
    }

    #[test]
    fn resp_responses_are_framed_and_classified() {
        let p = TextProtocol::new(&KvSpec::redis()).unwrap();
        let d = |b: &[u8]| p.decode(b).unwrap();
        assert_eq!(d(b"$5\r\nhel"), None, "incomplete");
        let (n, r) = d(b"$5\r\nhello\r\n+OK\r\n").unwrap();
        assert_eq!((n, r.error, r.miss), (11, false, false));
        let (n, r) = d(b"$-1\r\n").unwrap();
        assert_eq!((n, r.miss), (5, true));
        let (_, r) = d(b"-ERR unknown command\r\n").unwrap();
        assert!(r.error);
        let (n, r) = d(b"*2\r\n$1\r\na\r\n:7\r\n").unwrap();
        assert_eq!((n, r.error), (15, false));
        assert_eq!(d(b"*2\r\n$1\r\na\r\n"), None);
        assert!(p.decode(b"HTTP/1.1 400\r\n").is_err());
    }

    #[test]
    fn line_protocols_render_data_blocks_and_end_at_their_words() {
        let mut kv = KvSpec::memcached();
        kv.value_bytes = 4;
        let p = TextProtocol::new(&kv).unwrap();
        let mut out = Vec::new();
        p.populate_each
            .as_ref()
            .unwrap()
            .encode(p.vars(7), &mut out);
        assert_eq!(out, b"set key:7 0 0 4\r\nvvvv\r\n");
        out.clear();
        p.encode_request(7, &mut out);
        assert_eq!(out, b"get key:7\r\n");
        let d = |b: &[u8]| p.decode(b).unwrap();
        let hit = b"VALUE key:7 0 4\r\nvvvv\r\nEND\r\n";
        let (n, r) = d(hit).unwrap();
        assert_eq!((n, r.miss, r.error), (hit.len(), false, false));
        assert_eq!(d(&hit[..20]), None);
        let (n, r) = d(b"END\r\nEND\r\n").unwrap();
        assert_eq!((n, r.miss), (5, true));
        let (_, r) = d(b"STORED\r\n").unwrap();
        assert!(r.miss && !r.error);
        let (_, r) = d(b"CLIENT_ERROR bad data chunk\r\n").unwrap();
        assert!(r.error);
    }

    #[test]
    fn templates_refuse_unknown_placeholders() {
        let e = Template::parse("GET {kye}").unwrap_err();
        assert!(e.contains("{kye}") && e.contains("{key}"), "{e}");
        assert!(Template::parse("GET {key").is_err());
        let t = Template::parse("a{keys}b").unwrap();
        let mut out = Vec::new();
        t.render(
            Vars {
                key: 0,
                value: b"",
                keys: 42,
            },
            &mut out,
        );
        assert_eq!(out, b"a42b");
    }
}
