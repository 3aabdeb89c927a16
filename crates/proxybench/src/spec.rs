//! What `elfen proxy bench` runs ([`BenchSpec`], TOML with defaults,
//! unknown keys refused) and the ways it drives the service ([`Way`]).

use crate::error::Result;
use elfen_bench::spec::{DemandSpec, RequestsKind};
use elfen_proxy::ProxyError;
use elfen_proxy::config::{HedgeMode, Protocol, ProxyConfig, Side};
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
    /// Command template of one replica (`{elfen}` is this executable,
    /// `{lucene}` the Lucene server's launcher and `{copies}` the copies of
    /// its index `elfen bench --lc lucene` serves; the proxy's placeholders
    /// otherwise), or `"lucene"` for the Lucene search server with
    /// `elfen bench --lc lucene`'s command.
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
    /// Where each replica's other threads run (`{side_cpus}`).
    pub side: Side,
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
            side: Side::Others,
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
    /// With `restart = "active"`: the load sent to replica B alone for
    /// this long when it starts, s (a backup that served before).
    pub backup_warm_s: f64,
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
            backup_warm_s: 5.0,
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
    /// loading and JIT in the measured window), both replicas.
    Invocation,
    /// Before every invocation replica A starts afresh (a JVM restart: its
    /// class loading, JIT, untouched heap in the measured window) while B
    /// keeps running, warmed once when it starts by `load.backup_warm_s` of
    /// the load sent to it alone: the thesis's restarted server beside a
    /// backup that served before.
    Active,
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
    /// The ways it runs (default: the file's `ways`; `alone` always runs).
    #[serde(default)]
    pub ways: Option<Vec<Way>>,
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
    /// The thesis's table as a ladder of variants the profiler orders (see
    /// [`LadderSpec`]); its steps run before `variants`.
    pub ladder: Option<LadderSpec>,
}

/// The thesis's table, ours: the service with hazards switched on
/// (`serve --hazards LIST`), then with each fixed in turn in the order the
/// profiler ranks them — `elfen trace` on the service with the hazards
/// still on, the removable hazard that is the top hazard of most slow
/// requests fixed next — until only the `keep` ones are left, which run
/// behind the proxy too (what redundancy hides).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LadderSpec {
    /// The hazards on at the first step (the server's names: `nagle`,
    /// `untouched-heap`, `cold-start`, `small-heap`).
    pub hazards: Vec<String>,
    /// Hazards not removed: left on at the last step, behind the proxy.
    pub keep: Vec<String>,
    /// The fixes in this order instead of the profiler's (no tracing;
    /// empty: the profiler decides).
    pub order: Vec<String>,
    /// The ways of each step but the last.
    pub ways: Vec<Way>,
    /// The ways of the last step (the kept hazards).
    pub last_ways: Vec<Way>,
    /// The trace of each step.
    pub trace: LadderTrace,
    /// `elfen trace`'s cost on the service (hazards off): untraced and
    /// traced invocations alternating; 0 repetitions: not measured.
    pub overhead: LadderOverhead,
}

impl Default for LadderSpec {
    fn default() -> Self {
        LadderSpec {
            hazards: HAZARDS.iter().map(|h| h.to_string()).collect(),
            keep: vec!["small-heap".into()],
            order: Vec::new(),
            ways: vec![Way::Alone],
            last_ways: vec![Way::Alone, Way::Proxy, Way::Hedge],
            trace: LadderTrace::default(),
            overhead: LadderOverhead::default(),
        }
    }
}

/// The hazards of the Lucene server (`serve --hazards`), in its order.
pub const HAZARDS: [&str; 4] = ["nagle", "untouched-heap", "cold-start", "small-heap"];

/// How each step of the ladder is traced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LadderTrace {
    /// The client idles this long after the server is ready (the deep idle
    /// before the requests an untouched heap needs), s.
    pub idle_s: f64,
    /// Length of the traced load, s.
    pub duration_s: f64,
    /// Its rate (0: the bench's `load.rps`).
    pub rps: f64,
    /// Requests above this percentile of latency are studied.
    pub above_pct: f64,
    /// Also write each step's Perfetto trace (large).
    pub perfetto: bool,
}

impl Default for LadderTrace {
    fn default() -> Self {
        LadderTrace {
            idle_s: 2.0,
            duration_s: 8.0,
            rps: 0.0,
            above_pct: 99.0,
            perfetto: false,
        }
    }
}

/// `elfen trace overhead` as part of the ladder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LadderOverhead {
    /// Repetitions (each an untraced and a traced invocation; 0: none).
    pub reps: usize,
    /// Each invocation's length, s.
    pub duration_s: f64,
    /// The rate (0: the bench's `load.rps`).
    pub rps: f64,
}

impl Default for LadderOverhead {
    fn default() -> Self {
        LadderOverhead {
            reps: 5,
            duration_s: 10.0,
            rps: 0.0,
        }
    }
}

impl LadderSpec {
    /// Checks the hazards named, naming a wrong one.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ProxyError::Config(m).into());
        for (key, list) in [
            ("hazards", &self.hazards),
            ("keep", &self.keep),
            ("order", &self.order),
        ] {
            for h in list {
                if !HAZARDS.contains(&h.as_str()) {
                    return bad(format!(
                        "ladder.{key}: {h:?} is not a hazard of the server ({})",
                        HAZARDS.join(", ")
                    ));
                }
            }
        }
        if self.hazards.is_empty() {
            return bad("ladder.hazards: at least one".into());
        }
        if !self.order.is_empty() {
            for h in &self.hazards {
                if !self.keep.contains(h) && !self.order.contains(h) {
                    return bad(format!(
                        "ladder.order: {h:?} is on and not kept, but not in the order"
                    ));
                }
            }
        }
        if self.ways.is_empty() || self.last_ways.is_empty() {
            return bad("ladder.ways, ladder.last_ways: at least one way each".into());
        }
        let t = &self.trace;
        if !(t.duration_s > 0.0 && t.duration_s.is_finite()) {
            return bad(format!(
                "ladder.trace.duration_s = {}: must be > 0",
                t.duration_s
            ));
        }
        if !(t.idle_s >= 0.0 && t.idle_s.is_finite()) {
            return bad(format!("ladder.trace.idle_s = {}: must be >= 0", t.idle_s));
        }
        if !(t.above_pct > 0.0 && t.above_pct < 100.0) {
            return bad(format!(
                "ladder.trace.above_pct = {}: must be in (0, 100)",
                t.above_pct
            ));
        }
        for (k, v) in [("trace.rps", t.rps), ("overhead.rps", self.overhead.rps)] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(format!("ladder.{k} = {v}: must be >= 0 (0: load.rps)"));
            }
        }
        if self.overhead.reps > 0
            && !(self.overhead.duration_s > 0.0 && self.overhead.duration_s.is_finite())
        {
            return bad(format!(
                "ladder.overhead.duration_s = {}: must be > 0",
                self.overhead.duration_s
            ));
        }
        Ok(())
    }
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
            ladder: None,
            variants: vec![Variant {
                name: "default".into(),
                args: String::new(),
                env: BTreeMap::new(),
                restart: Restart::Variant,
                ways: None,
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
        let bad = |m: String| Err(ProxyError::Config(m).into());
        let l = &self.load;
        if !(l.rps > 0.0 && l.rps.is_finite()) {
            return bad(format!("load.rps = {}: must be > 0", l.rps));
        }
        for (k, v) in [
            ("duration_s", l.duration_s),
            ("warmup_s", l.warmup_s),
            ("drain_s", l.drain_s),
            ("backup_warm_s", l.backup_warm_s),
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
        if self.variants.is_empty() && self.ladder.is_none() {
            return bad("variants: at least one (name = \"default\"), or a [ladder]".into());
        }
        if let Some(l) = &self.ladder {
            l.validate()?;
        }
        for v in &self.variants {
            if v.ways.as_ref().is_some_and(Vec::is_empty) {
                return bad(format!("variants {:?}: ways = []: at least one", v.name));
            }
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
        Ok(p.validate()?)
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
                    elfen_proxy::config::ProxyConfig::load(&p).unwrap();
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
        // a ladder: defaults fill it, a hazard the server lacks is named
        std::fs::write(&p, "[ladder]\n").unwrap();
        let l = BenchSpec::load(&p).unwrap().ladder.unwrap();
        assert_eq!(l.hazards, HAZARDS.map(String::from).to_vec());
        assert_eq!(l.keep, vec!["small-heap".to_string()]);
        std::fs::write(&p, "[ladder]\nhazards = [\"nagel\"]\n").unwrap();
        let e = BenchSpec::load(&p).unwrap_err().to_string();
        assert!(
            e.contains("\"nagel\"") && e.contains("ladder.hazards"),
            "{e}"
        );
        std::fs::write(&p, "[ladder]\norder = [\"nagle\"]\n").unwrap();
        let e = BenchSpec::load(&p).unwrap_err().to_string();
        assert!(e.contains("not in the order"), "{e}");
        // the shipped ladder and the hazard variants use the server's flags
        let t = BenchSpec::load(&Path::new(dir).join("bench-tailor.toml")).unwrap();
        assert!(t.ladder.is_some() && t.service.command.contains("{lucene} serve"));
        let lucene = BenchSpec::load(&Path::new(dir).join("bench-lucene.toml")).unwrap();
        for h in HAZARDS {
            assert!(
                lucene
                    .variants
                    .iter()
                    .any(|v| v.args == format!("--hazards {h}")),
                "bench-lucene.toml has a variant with --hazards {h}"
            );
        }
        assert!(lucene.variants.iter().any(|v| v.args == "--hazards all"));
    }
}
