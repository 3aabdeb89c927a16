//! What the proxy does: [`ProxyConfig`], with defaults for every field;
//! read from TOML (`elfen proxy run --config FILE`, unknown keys refused)
//! and overridden by the command line.

use crate::error::{ProxyError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The protocol clients and replicas speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// elfen's LC wire protocol (`docs/lc-protocol.md`).
    #[default]
    Wire,
    /// HTTP/1.1.
    Http,
}

impl Protocol {
    /// Its name on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Wire => "wire",
            Protocol::Http => "http",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<Protocol> {
        match s {
            "wire" => Ok(Protocol::Wire),
            "http" => Ok(Protocol::Http),
            _ => Err(ProxyError::Config(format!(
                "protocol {s:?}: expected wire or http"
            ))),
        }
    }
}

/// Where a replica's threads other than its LC thread run (its JVM's
/// dispatchers, collector and compiler threads; `{side_cpus}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Every CPU but its request lane's — the harness's convention; with
    /// two CPUs, on the other replica's request lane.
    #[default]
    Others,
    /// Its request lane's CPU only: each replica confined to its own CPU,
    /// as the thesis bound the active and the backup server to different
    /// sets of SMT threads, so one replica's collections and compilations
    /// never run on the other's lane.
    Own,
}

/// When a request is sent to the other replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HedgeMode {
    /// Tailor's local-node redundancy: when the active replica's signal
    /// line (or its thread's state, or the BPF watch of its JVM) says it
    /// is paused, every request in
    /// flight there is re-sent to the backup and the roles swap.
    #[default]
    Signal,
    /// A timeout hedge at a percentile (Envoy-style, Dean & Barroso's hedged
    /// requests): a request not answered after the `hedge_pct` percentile
    /// of recent latencies is also sent to the backup; no role swap.
    Timeout,
    /// Forward only: every request to the active replica, nothing re-sent
    /// (the proxy's own cost, or a replica that must not see duplicates).
    None,
}

impl HedgeMode {
    /// Its name on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            HedgeMode::Signal => "signal",
            HedgeMode::Timeout => "timeout",
            HedgeMode::None => "none",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<HedgeMode> {
        match s {
            "signal" => Ok(HedgeMode::Signal),
            "timeout" => Ok(HedgeMode::Timeout),
            "none" => Ok(HedgeMode::None),
            _ => Err(ProxyError::Config(format!(
                "hedge {s:?}: expected signal, timeout or none"
            ))),
        }
    }
}

/// How a pause of a replica is recognised (signal mode). The control law
/// is in `crate::detect`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PauseConfig {
    /// A request running longer than `factor` × its demand (the service
    /// time this request had before; else the p99 of recent service times)
    /// is paused.
    pub factor: f64,
    /// ... but never before this many ms: the smallest bound.
    pub floor_ms: f64,
    /// A replica that is a JVM whose world has been stopped this many ms —
    /// its `VM Thread` or GC threads on a CPU (a collection, a safepoint),
    /// seen by the profiler's BPF watch on `sched_switch` — is paused,
    /// busy or idle; 0 turns this signal off. Needs root (or CAP_BPF +
    /// CAP_PERFMON) and kernel BTF: where BPF cannot be used the signal is
    /// off for that replica and the proxy says why.
    pub jvm_pause_ms: f64,
    /// A running request whose LC thread has not been on a CPU for this
    /// many ms is paused (its thread stopped, waiting at a safepoint,
    /// preempted); 0 turns this signal off.
    pub offcpu_ms: f64,
    /// How often the monitor reads the signal page, µs.
    pub poll_us: u64,
    /// Service times needed before their p99 sets the bound (the floor
    /// alone until then).
    pub min_samples: usize,
}

impl Default for PauseConfig {
    fn default() -> Self {
        PauseConfig {
            factor: 4.0,
            floor_ms: 5.0,
            jvm_pause_ms: 1.0,
            offcpu_ms: 1.0,
            poll_us: 200,
            min_samples: 50,
        }
    }
}

/// The timeout hedge (`hedge = "timeout"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutConfig {
    /// The percentile of recent latencies after which a request is hedged.
    pub pct: f64,
    /// How many recent latencies the percentile is taken over.
    pub window: usize,
    /// The timeout before `window / 10` latencies are known, ms.
    pub initial_ms: f64,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        TimeoutConfig {
            pct: 95.0,
            window: 1000,
            initial_ms: 10.0,
        }
    }
}

/// How a replica that was paused or restarted is warmed while it is the
/// backup: a sample of recent requests replayed to it at a low rate, one
/// at a time, while the active replica is idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WarmConfig {
    /// Requests replayed after each pause or restart (0: no warming).
    pub requests: u32,
    /// Their rate, requests per second.
    pub rps: f64,
    /// Send one only while the active replica's LC line is idle (where a
    /// page shows it), so warming never queues behind or beside a request.
    pub when_active_idle: bool,
}

impl Default for WarmConfig {
    fn default() -> Self {
        WarmConfig {
            requests: 200,
            rps: 200.0,
            when_active_idle: true,
        }
    }
}

/// Which requests may be sent twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdempotentConfig {
    /// HTTP methods that may be re-sent to the other replica.
    pub http_methods: Vec<String>,
    /// Wire-protocol work requests may be re-sent (they are for the
    /// services elfen drives: searches, the pointer chase).
    pub wire: bool,
}

impl Default for IdempotentConfig {
    fn default() -> Self {
        IdempotentConfig {
            http_methods: vec!["GET".into(), "HEAD".into()],
            wire: true,
        }
    }
}

/// The two replicas: started from a command template, or already running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplicasConfig {
    /// Command template that starts one replica; `{port}`, `{cpu}`,
    /// `{side_cpus}`, `{page}`, `{lane}` and `{lc_signal}` are substituted
    /// (and passed as `ELFEN_PORT`, … in the environment), as the harness
    /// does for an external LC service.
    pub command: Option<String>,
    /// Extra environment of started replicas.
    pub env: BTreeMap<String, String>,
    /// The request-lane CPU of each started replica (default: the first
    /// two CPUs this process may use).
    pub cpus: Vec<u32>,
    /// Where each started replica's other threads run (`{side_cpus}`).
    pub side: Side,
    /// Addresses of two replicas already running (instead of `command`).
    pub addrs: Vec<String>,
    /// The signal page the replicas publish on: where to create it for
    /// started replicas (default: a new page under /dev/shm, removed at
    /// exit), or the page running replicas publish on (none: no page; a
    /// pause is then known from a timeout alone).
    pub page: Option<PathBuf>,
    /// The lanes of running replicas in `page` (default 0 and 1).
    pub lanes: Vec<u32>,
    /// Restart a started replica that exits.
    pub restart: bool,
    /// How long a started replica may take to answer its first request, s.
    pub startup_timeout_s: f64,
}

impl Default for ReplicasConfig {
    fn default() -> Self {
        ReplicasConfig {
            command: None,
            env: BTreeMap::new(),
            cpus: Vec::new(),
            side: Side::Others,
            addrs: Vec::new(),
            page: None,
            lanes: Vec::new(),
            restart: true,
            startup_timeout_s: 60.0,
        }
    }
}

/// The proxy's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// Where clients connect (`127.0.0.1:0`: a free port, printed).
    pub listen: String,
    /// The protocol of clients and replicas.
    pub protocol: Protocol,
    /// When requests are sent to the other replica.
    pub hedge: HedgeMode,
    /// Pause recognition (signal mode).
    pub pause: PauseConfig,
    /// The timeout hedge.
    pub timeout: TimeoutConfig,
    /// Warming the backup.
    pub warm: WarmConfig,
    /// Which requests may be sent twice.
    pub idempotent: IdempotentConfig,
    /// Largest HTTP request body accepted, bytes.
    pub max_body_bytes: usize,
    /// SCHED_FIFO priority of the proxy's threads (0: normal), like the
    /// dispatchers of the LC services it fronts.
    pub fifo_priority: u8,
    /// Prometheus metrics endpoint (`host:port`; none: no endpoint).
    pub metrics: Option<String>,
    /// The replicas.
    pub replicas: ReplicasConfig,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: "127.0.0.1:0".into(),
            protocol: Protocol::Wire,
            hedge: HedgeMode::Signal,
            pause: PauseConfig::default(),
            timeout: TimeoutConfig::default(),
            warm: WarmConfig::default(),
            idempotent: IdempotentConfig::default(),
            max_body_bytes: 1 << 20,
            fifo_priority: 0,
            metrics: None,
            replicas: ReplicasConfig::default(),
        }
    }
}

impl ProxyConfig {
    /// Reads a TOML file (unknown keys are errors naming the key).
    pub fn load(path: &Path) -> Result<ProxyConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| ProxyError::ConfigFile {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        let c: ProxyConfig = toml::from_str(&text).map_err(|e| ProxyError::ConfigFile {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Checks every field, naming the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ProxyError::Config(m));
        let p = &self.pause;
        if !(p.factor >= 1.0 && p.factor.is_finite()) {
            return bad(format!("pause.factor = {}: must be >= 1", p.factor));
        }
        if !(p.floor_ms > 0.0 && p.floor_ms.is_finite()) {
            return bad(format!("pause.floor_ms = {}: must be > 0", p.floor_ms));
        }
        if !(p.jvm_pause_ms >= 0.0 && p.jvm_pause_ms.is_finite()) {
            return bad(format!(
                "pause.jvm_pause_ms = {}: must be >= 0",
                p.jvm_pause_ms
            ));
        }
        if !(p.offcpu_ms >= 0.0 && p.offcpu_ms.is_finite()) {
            return bad(format!("pause.offcpu_ms = {}: must be >= 0", p.offcpu_ms));
        }
        if p.poll_us < 10 || p.poll_us > 1_000_000 {
            return bad(format!(
                "pause.poll_us = {}: must be 10..=1000000",
                p.poll_us
            ));
        }
        let t = &self.timeout;
        if !(t.pct > 0.0 && t.pct < 100.0) {
            return bad(format!("timeout.pct = {}: must be in (0, 100)", t.pct));
        }
        if t.window < 10 {
            return bad(format!("timeout.window = {}: must be >= 10", t.window));
        }
        if !(t.initial_ms > 0.0 && t.initial_ms.is_finite()) {
            return bad(format!(
                "timeout.initial_ms = {}: must be > 0",
                t.initial_ms
            ));
        }
        if !(self.warm.rps > 0.0 && self.warm.rps.is_finite()) {
            return bad(format!("warm.rps = {}: must be > 0", self.warm.rps));
        }
        for m in &self.idempotent.http_methods {
            if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
                return bad(format!(
                    "idempotent.http_methods: {m:?} is not an HTTP method (upper case, e.g. GET)"
                ));
            }
        }
        let r = &self.replicas;
        match (&r.command, r.addrs.len()) {
            (Some(_), 0) => {
                if !r.cpus.is_empty() && r.cpus.len() != 2 {
                    return bad(format!(
                        "replicas.cpus = {:?}: one CPU per replica, two replicas",
                        r.cpus
                    ));
                }
                if r.cpus.len() == 2 && r.cpus[0] == r.cpus[1] {
                    return bad(format!(
                        "replicas.cpus = {:?}: the replicas need a CPU each",
                        r.cpus
                    ));
                }
            }
            (None, 2) => {
                for a in &r.addrs {
                    if a.parse::<std::net::SocketAddr>().is_err() {
                        return bad(format!("replicas.addrs: {a:?} is not host:port"));
                    }
                }
                if !r.lanes.is_empty() && r.lanes.len() != 2 {
                    return bad(format!(
                        "replicas.lanes = {:?}: one lane per replica",
                        r.lanes
                    ));
                }
            }
            (Some(_), _) => {
                return bad(
                    "replicas: give either command (replicas started by the proxy) or addrs \
                     (replicas already running), not both"
                        .into(),
                );
            }
            (None, n) => {
                return bad(format!(
                    "replicas: a command template, or the addresses of two running replicas \
                     (got {n} address{})",
                    if n == 1 { "" } else { "es" }
                ));
            }
        }
        if r.startup_timeout_s.is_nan() || r.startup_timeout_s <= 0.0 {
            return bad(format!(
                "replicas.startup_timeout_s = {}: must be > 0",
                r.startup_timeout_s
            ));
        }
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return bad(format!("listen = {:?}: expected host:port", self.listen));
        }
        if let Some(m) = &self.metrics {
            if m.parse::<std::net::SocketAddr>().is_err() {
                return bad(format!("metrics = {m:?}: expected host:port"));
            }
        }
        Ok(())
    }

    /// Whether an HTTP method may be sent twice.
    pub fn http_idempotent(&self, method: &str) -> bool {
        self.idempotent.http_methods.iter().any(|m| m == method)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_command() -> ProxyConfig {
        let mut c = ProxyConfig::default();
        c.replicas.command = Some("srv --port {port}".into());
        c
    }

    #[test]
    fn defaults_are_valid_and_bad_fields_are_named() {
        with_command().validate().unwrap();
        let mut c = with_command();
        c.pause.factor = 0.5;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("pause.factor")
        );
        let mut c = with_command();
        c.timeout.pct = 100.0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("timeout.pct")
        );
        let mut c = with_command();
        c.replicas.cpus = vec![1, 1];
        assert!(c.validate().unwrap_err().to_string().contains("a CPU each"));
        let mut c = with_command();
        c.replicas.addrs = vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()];
        assert!(c.validate().unwrap_err().to_string().contains("not both"));
        let mut c = ProxyConfig::default();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("got 0 addresses")
        );
        c.replicas.addrs = vec!["127.0.0.1:1".into(), "nowhere".into()];
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("\"nowhere\"")
        );
        let mut c = with_command();
        c.idempotent.http_methods = vec!["get".into()];
        assert!(c.validate().unwrap_err().to_string().contains("\"get\""));
    }

    #[test]
    fn unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, "hedge = \"timeout\"\n[pause]\nfactr = 3\n").unwrap();
        let e = ProxyConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("factr") && e.contains("p.toml"), "{e}");
        std::fs::write(
            &p,
            "hedge = \"timeout\"\n[timeout]\npct = 99\n[replicas]\ncommand = \"x {port}\"\n",
        )
        .unwrap();
        let c = ProxyConfig::load(&p).unwrap();
        assert_eq!((c.hedge, c.timeout.pct), (HedgeMode::Timeout, 99.0));
        assert!(c.replicas.restart, "defaults fill what the file leaves out");
    }
}
