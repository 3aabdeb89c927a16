//! An unmodified **key-value service** as the harness's LC ([`KvSpec`]):
//! a server started from an argv template, pinned to the request lane by
//! the harness, filled with a key space before the run, and sent requests
//! in its own protocol — RESP (Redis) or a text line protocol (memcached)
//! — by elfen's open-loop generator. Everything service-specific is data
//! here, so the next RESP or line-protocol service is a config, not code:
//! [`KvSpec::redis`] and [`KvSpec::memcached`] are two such configs
//! (`configs/bench/redis.toml`, `configs/bench/memcached.toml`).

use crate::error::LoadError;
use serde::{Deserialize, Serialize};

/// The protocol a service speaks; requests and responses are in order on
/// a connection (the k-th response answers the k-th request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextProtocolKind {
    /// RESP (the Redis serialization protocol): a request is an array of
    /// bulk strings (the template's words); a response is one RESP value,
    /// an error when it starts with `-`, a miss when it is nil.
    Resp,
    /// Text lines ending in `\r\n`: a request is the template as one line
    /// (it may hold `\r\n` itself, e.g. before a data block); a response
    /// is lines up to one whose first word is in `end_words` (or
    /// `error_words`: an error), a miss when that is its only line.
    Line,
}

/// An unmodified key-value service (`lc.service = "kv"`, `[lc.kv]`).
///
/// Templates take placeholders: in `command`, `{port}` and `{cpu}` (the
/// request lane's CPU); in requests, `{key}` (the key's number),
/// `{value}` (`value_bytes` bytes of `v`), `{value_bytes}` and `{keys}`.
/// Keys are whatever the templates make of `{key}` (`key:{key}`, the
/// names Redis's `DEBUG POPULATE` gives).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvSpec {
    /// Its name, for messages and the result file.
    pub name: String,
    /// The Debian package that provides `command[0]`, named when it is
    /// missing.
    pub package: String,
    /// The server's argv (one argument per element, so an argument may be
    /// empty); the harness pins the process to the request lane before
    /// `exec` and stops it with SIGTERM, then SIGKILL.
    pub command: Vec<String>,
    /// Its protocol.
    pub protocol: TextProtocolKind,
    /// The request every load request sends, for a key drawn uniformly
    /// from the key space.
    pub request: String,
    /// Sent until answered without an error: the service is ready.
    pub ping: String,
    /// Line protocol: first words of a line that ends a response.
    #[serde(default)]
    pub end_words: Vec<String>,
    /// Line protocol: first words of a line that ends a response with an
    /// error.
    #[serde(default)]
    pub error_words: Vec<String>,
    /// Keys in the key space (make it larger than the last-level cache:
    /// requests then miss it, as a large store's do).
    pub keys: u64,
    /// Bytes of each value.
    pub value_bytes: u64,
    /// One request that fills the key space inside the server (Redis:
    /// `DEBUG POPULATE {keys} key {value_bytes}`); exactly one of this and
    /// `populate_each`.
    #[serde(default)]
    pub populate: Option<String>,
    /// Or one request per key, pipelined (`SET key:{key} {value}`).
    #[serde(default)]
    pub populate_each: Option<String>,
    /// Requests run alone, one at a time, for the demand alone (keys
    /// drawn from the key space).
    pub demand_sample: usize,
}

/// The argv of Debian's `redis-server`, unmodified, with its own options:
/// no persistence, loopback only, `DEBUG` allowed from loopback (for
/// `DEBUG POPULATE`).
const REDIS_ARGV: [&str; 15] = [
    "redis-server",
    "--port",
    "{port}",
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no",
    "--protected-mode",
    "no",
    "--enable-debug-command",
    "local",
    "--daemonize",
    "no",
];

/// The argv of Debian's `memcached`: loopback, no UDP, one worker thread,
/// room for the key space (`-u root` only matters when run as root, which
/// memcached otherwise refuses).
const MEMCACHED_ARGV: [&str; 13] = [
    "memcached",
    "-p",
    "{port}",
    "-l",
    "127.0.0.1",
    "-U",
    "0",
    "-t",
    "1",
    "-m",
    "1024",
    "-u",
    "root",
];

impl KvSpec {
    /// Redis (Debian's `redis-server`): 1.26 M keys of 256 B (≈ 480 MB in
    /// the server, far beyond a last-level cache), filled by `DEBUG
    /// POPULATE`, sent `GET` of random keys.
    pub fn redis() -> KvSpec {
        KvSpec {
            name: "redis".into(),
            package: "redis-server".into(),
            command: REDIS_ARGV.iter().map(|s| s.to_string()).collect(),
            protocol: TextProtocolKind::Resp,
            request: "GET key:{key}".into(),
            ping: "PING".into(),
            end_words: Vec::new(),
            error_words: Vec::new(),
            keys: 1_260_000,
            value_bytes: 256,
            populate: Some("DEBUG POPULATE {keys} key {value_bytes}".into()),
            populate_each: None,
            demand_sample: 2000,
        }
    }

    /// memcached (Debian's `memcached`), text protocol: the same key
    /// space, filled by pipelined `set`s, sent `get` of random keys.
    pub fn memcached() -> KvSpec {
        KvSpec {
            name: "memcached".into(),
            package: "memcached".into(),
            command: MEMCACHED_ARGV.iter().map(|s| s.to_string()).collect(),
            protocol: TextProtocolKind::Line,
            request: "get key:{key}".into(),
            ping: "version".into(),
            end_words: [
                "END",
                "STORED",
                "NOT_STORED",
                "EXISTS",
                "NOT_FOUND",
                "VERSION",
            ]
            .map(String::from)
            .to_vec(),
            error_words: ["ERROR", "CLIENT_ERROR", "SERVER_ERROR"]
                .map(String::from)
                .to_vec(),
            keys: 1_260_000,
            value_bytes: 256,
            populate: None,
            populate_each: Some("set key:{key} 0 0 {value_bytes}\r\n{value}".into()),
            demand_sample: 2000,
        }
    }

    /// Checks the values (the file alone; the program is looked for in
    /// pre-flight).
    pub fn validate(&self) -> Result<(), LoadError> {
        let bad = |m: String| Err(LoadError::Config(format!("lc.kv: {m}")));
        if self.command.first().is_none_or(|c| c.trim().is_empty()) {
            return bad("command is empty".into());
        }
        if !self.command.iter().any(|a| a.contains("{port}")) {
            return bad(format!(
                "command {:?} has no {{port}}: the harness chooses the port",
                self.command
            ));
        }
        if !self.request.contains("{key}") {
            return bad(format!(
                "request {:?} has no {{key}}: every request reads a random key",
                self.request
            ));
        }
        if self.keys == 0 || self.keys > u64::from(u32::MAX) {
            return bad(format!(
                "keys must be in 1..={}, got {}",
                u32::MAX,
                self.keys
            ));
        }
        if self.value_bytes == 0 || self.value_bytes > 1 << 20 {
            return bad(format!(
                "value_bytes must be in 1..=1048576, got {}",
                self.value_bytes
            ));
        }
        if self.demand_sample == 0 {
            return bad("demand_sample must be at least 1".into());
        }
        match (&self.populate, &self.populate_each) {
            (Some(_), Some(_)) | (None, None) => {
                return bad(
                    "give exactly one of populate (one request) and populate_each \
                     (one request per key)"
                        .into(),
                );
            }
            (None, Some(t)) if !t.contains("{key}") => {
                return bad(format!("populate_each {t:?} has no {{key}}"));
            }
            _ => {}
        }
        if self.protocol == TextProtocolKind::Line && self.end_words.is_empty() {
            return bad(
                "a line protocol needs end_words (the first words of a line that ends a \
                 response, e.g. END)"
                    .into(),
            );
        }
        let words = [&self.request, &self.ping]
            .into_iter()
            .chain(&self.populate)
            .chain(&self.populate_each);
        for t in words {
            if let Err(e) = crate::text::Template::parse(t) {
                return bad(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_presets_validate_and_bad_values_are_named() {
        KvSpec::redis().validate().unwrap();
        KvSpec::memcached().validate().unwrap();
        let bad = |f: &dyn Fn(&mut KvSpec)| {
            let mut k = KvSpec::redis();
            f(&mut k);
            k.validate().unwrap_err().to_string()
        };
        assert!(bad(&|k| k.command.clear()).contains("command is empty"));
        assert!(bad(&|k| k.command = vec!["redis-server".into()]).contains("{port}"));
        assert!(bad(&|k| k.request = "GET k".into()).contains("{key}"));
        assert!(bad(&|k| k.keys = 0).contains("keys"));
        assert!(
            bad(&|k| k.populate_each = Some("SET key:{key} {value}".into()))
                .contains("exactly one")
        );
        assert!(bad(&|k| k.request = "GET key:{kye}".into()).contains("{kye}"));
        assert!(bad(&|k| k.protocol = TextProtocolKind::Line).contains("end_words"));
    }
}
