//! What `elfen proxy bench` runs ([`BenchSpec`], TOML with defaults,
//! unknown keys refused) and the ways it drives the service ([`Way`]).

use crate::config::{HedgeMode, Protocol, ProxyConfig};
use crate::error::{ProxyError, Result};
use elfen_bench::spec::{DemandSpec, RequestsKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How the generator reaches the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Way {
    /// Straight to replica A (the backup runs, idle).
    Alone,
    /// Through the proxy in signal mode (local-node redundancy).
    Proxy,
    /// Through the proxy in timeout mode (hedge at a percentile).
    Hedge,
    /// Through the proxy forwarding only (its bare cost).
    Forward,
}

impl Way {
    /// Its name in output.
    pub fn name(self) -> &'static str {
        match self {
            Way::Alone => "alone",
            Way::Proxy => "proxy",
            Way::Hedge => "hedge",
            Way::Forward => "forward",
        }
    }

    /// The proxy's mode for it (`None`: no proxy).
    pub fn mode(self) -> Option<HedgeMode> {
        match self {
            Way::Alone => None,
            Way::Proxy => Some(HedgeMode::Signal),
            Way::Hedge => Some(HedgeMode::Timeout),
            Way::Forward => Some(HedgeMode::None),
        }
    }
}

/// The LC service both replicas run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceSpec {
    /// Command template of one replica (`{elfen}` is this executable; the
    /// proxy's placeholders otherwise), or `"lucene"` for the Lucene search
    /// server (`elfen bench --lc lucene`'s command).
    pub command: String,
    /// The protocol it speaks (HTTP: the demand's µs go in `?us=N`).
    pub protocol: Protocol,
    /// What the requests carry: `demand` (work in ns) or `term_queries`.
    pub requests: RequestsKind,
    /// The demand of work requests.
    pub demand: DemandSpec,
    /// Term queries: the tasks file (default: the shipped one).
    pub tasks_path: Option<PathBuf>,
    /// How long a replica may take to answer its first request, s.
    pub startup_timeout_s: f64,
    /// The request-lane CPUs of replica A and B (default: the first two).
    pub cpus: Vec<u32>,
}

impl Default for ServiceSpec {
    fn default() -> Self {
        ServiceSpec {
            command:
                "{elfen} serve --port {port} --cpu {cpu} --side-cpus {side_cpus} --page {page} \
                      --lane {lane} --signal {lc_signal} --working-set-kib 256 --calibrate-ms 100 \
                      --side-fifo-priority 10"
                    .into(),
            protocol: Protocol::Wire,
            requests: RequestsKind::Demand,
            demand: DemandSpec::Constant { us: 20.0 },
            tasks_path: None,
            startup_timeout_s: 60.0,
            cpus: Vec::new(),
        }
    }
}

/// The open-loop load of one invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoadSpec {
    /// Requests per second (Poisson arrivals).
    pub rps: f64,
    /// Measured window, s.
    pub duration_s: f64,
    /// Warm-up before it (sent, not recorded), s.
    pub warmup_s: f64,
    /// Longest wait for answers after the last send, s.
    pub drain_s: f64,
    /// Invocations of each way (interleaved; medians and spread over them).
    pub invocations: usize,
    /// Seed of the arrivals and the request order.
    pub seed: u64,
}

impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec {
            rps: 1000.0,
            duration_s: 3.0,
            warmup_s: 0.5,
            drain_s: 2.0,
            invocations: 5,
            seed: 1,
        }
    }
}

/// When replicas are started afresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Restart {
    /// Once per variant: warm replicas throughout.
    #[default]
    Variant,
    /// Before every invocation: each one starts cold (a JVM's class
    /// loading and JIT in the measured window).
    Invocation,
}

/// One setting of the service (e.g. a hazard switched on), run every way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Its name in output.
    pub name: String,
    /// Words appended to the command.
    #[serde(default)]
    pub args: String,
    /// Environment of the replicas.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// When its replicas start afresh.
    #[serde(default)]
    pub restart: Restart,
}

/// What `elfen proxy bench` runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BenchSpec {
    /// The service.
    pub service: ServiceSpec,
    /// The load.
    pub load: LoadSpec,
    /// The ways compared (every one against `alone`, which always runs).
    pub ways: Vec<Way>,
    /// The proxy's settings (`hedge`, `protocol`, `listen` and `replicas`
    /// are the bench's).
    pub proxy: ProxyConfig,
    /// Settings of the service, each run every way.
    pub variants: Vec<Variant>,
}

impl Default for BenchSpec {
    fn default() -> Self {
        BenchSpec {
            service: ServiceSpec::default(),
            load: LoadSpec::default(),
            ways: vec![Way::Alone, Way::Forward, Way::Proxy],
            proxy: ProxyConfig {
                fifo_priority: 10,
                ..ProxyConfig::default()
            },
            variants: vec![Variant {
                name: "default".into(),
                args: String::new(),
                env: BTreeMap::new(),
                restart: Restart::Variant,
            }],
        }
    }
}

impl BenchSpec {
    /// Reads a TOML file (unknown keys are errors naming the key).
    pub fn load(path: &Path) -> Result<BenchSpec> {
        let text = std::fs::read_to_string(path).map_err(|e| ProxyError::ConfigFile {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        let s: BenchSpec = toml::from_str(&text).map_err(|e| ProxyError::ConfigFile {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        s.validate().map_err(|e| ProxyError::ConfigFile {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        Ok(s)
    }

    /// Checks every field, naming the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ProxyError::Config(m));
        let l = &self.load;
        if !(l.rps > 0.0 && l.rps.is_finite()) {
            return bad(format!("load.rps = {}: must be > 0", l.rps));
        }
        for (k, v) in [
            ("duration_s", l.duration_s),
            ("warmup_s", l.warmup_s),
            ("drain_s", l.drain_s),
        ] {
            if !(v >= 0.0 && v.is_finite()) || (k == "duration_s" && v == 0.0) {
                return bad(format!(
                    "load.{k} = {v}: must be {}",
                    if k == "duration_s" { "> 0" } else { ">= 0" }
                ));
            }
        }
        if l.invocations == 0 {
            return bad("load.invocations = 0: at least one".into());
        }
        if self.ways.is_empty() {
            return bad("ways: name at least one of alone, proxy, hedge, forward".into());
        }
        if self.variants.is_empty() {
            return bad("variants: at least one (name = \"default\")".into());
        }
        if self.service.command.trim().is_empty() {
            return bad("service.command is empty".into());
        }
        if !self.service.cpus.is_empty() && self.service.cpus.len() != 2 {
            return bad(format!(
                "service.cpus = {:?}: one per replica",
                self.service.cpus
            ));
        }
        if self.service.protocol == Protocol::Http && self.service.requests != RequestsKind::Demand
        {
            return bad(
                "service.requests: HTTP replicas are sent work requests (demand) only".into(),
            );
        }
        if !self.proxy.replicas.addrs.is_empty() || self.proxy.replicas.command.is_some() {
            return bad("proxy.replicas: the bench starts the replicas (service.command)".into());
        }
        let mut p = self.proxy.clone();
        p.replicas.command = Some("x".into());
        p.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_configs_parse_and_bad_keys_are_named() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/proxy");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                if p.file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with("bench-"))
                {
                    BenchSpec::load(&p).unwrap();
                } else {
                    crate::config::ProxyConfig::load(&p).unwrap();
                }
                n += 1;
            }
        }
        assert!(n >= 3, "configs/proxy holds the examples");
        BenchSpec::default().validate().unwrap();
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("b.toml");
        std::fs::write(&p, "[load]\nrsp = 3\n").unwrap();
        let e = BenchSpec::load(&p).unwrap_err().to_string();
        assert!(e.contains("rsp") && e.contains("b.toml"), "{e}");
        std::fs::write(&p, "ways = []\n").unwrap();
        assert!(
            BenchSpec::load(&p)
                .unwrap_err()
                .to_string()
                .contains("ways")
        );
        std::fs::write(
            &p,
            "[proxy]\nhedge = \"timeout\"\n[proxy.pause]\nfactor = 0.1\n",
        )
        .unwrap();
        assert!(
            BenchSpec::load(&p)
                .unwrap_err()
                .to_string()
                .contains("pause.factor")
        );
    }
}
