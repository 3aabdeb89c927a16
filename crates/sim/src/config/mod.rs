//! Experiment configs: TOML (`configs/sim/*.toml`), every table
//! `deny_unknown_fields` with documented defaults, resolved into an
//! [`Experiment`] whose every field has been checked.
//!
//! ```toml
//! name = "one 2-way SMT core, Lucene-like demand"
//! requests = 200000          # measured requests per repetition
//! reps = 3                   # independent seeds per point
//! slo_p99_us = 100000
//! [topology]
//! kind = "core"              # core | chip | cluster
//! smt_ways = 2
//! [demand]
//! kind = "lucene"
//! [batch]
//! kind = "loop"
//! [load]
//! rps = [20, 40, 60, 80, 100, 120]
//! [[configs]]
//! kind = "lc_alone"
//! [[configs]]
//! kind = "fixed_budget"
//! budget_from_slo = true     # budget = SLO - p99 of LC alone at the same load
//! ```

mod entry;

use crate::arrivals::{ArrivalSpec, Trace};
use crate::batch::{Interference, builtin, builtin_names};
use crate::demand::{Demand, DemandSpec};
use crate::engine::{ServerModel, Timing};
use crate::error::{SimError, at_least, invalid, positive};
use elfen_policy::blind::BlindIsolation;
use elfen_policy::{PolicyConfig, PolicyKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Upper bound on cores per server (a sanity limit, not a model limit).
pub const MAX_CORES: i64 = 4096;
/// Upper bound on SMT ways.
pub const MAX_SMT_WAYS: i64 = 64;
/// Upper bound on cluster leaves.
pub const MAX_LEAVES: i64 = 10_000;

fn d_seed() -> u64 {
    1
}
fn d_reps() -> i64 {
    3
}
fn d_requests() -> i64 {
    100_000
}
fn d_smt() -> i64 {
    2
}
fn d_batch_kind() -> String {
    "loop".into()
}

/// A whole experiment config, as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Free text describing the experiment.
    #[serde(default)]
    pub name: String,
    /// Base seed; repetition `r` uses streams derived from `(seed, r)`, the
    /// same for every configuration and load (common random numbers).
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// Repetitions (independent seeds) per point. Default 3.
    #[serde(default = "d_reps")]
    pub reps: i64,
    /// Measured requests per repetition. Default 100 000.
    #[serde(default = "d_requests")]
    pub requests: i64,
    /// Requests simulated before the measured ones. Default `requests / 10`.
    #[serde(default)]
    pub warmup_requests: Option<i64>,
    /// p99 latency SLO, µs (the paper: 100 ms). Needed by `budget_from_slo`.
    #[serde(default)]
    pub slo_p99_us: Option<f64>,
    /// Keep each point's distribution of request-lane idle periods
    /// (`Point.distributions["idle_periods"]`, the paper's Figure 5).
    #[serde(default)]
    pub record_idle_periods: bool,
    /// Hardware.
    #[serde(default)]
    pub topology: TopologySpec,
    /// Arrival process. Default Poisson.
    #[serde(default)]
    pub arrivals: ArrivalSpec,
    /// Request demand. Default `lucene`.
    #[serde(default)]
    pub demand: DemandSpec,
    /// Batch work.
    #[serde(default)]
    pub batch: BatchSpec,
    /// Mechanism latencies.
    #[serde(default)]
    pub timing: TimingSpec,
    /// Offered loads.
    pub load: LoadSpec,
    /// The configurations compared (one series each).
    pub configs: Vec<ConfigSpec>,
}

/// `[topology]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// `core` (one core, paper Fig. 10a/11), `chip` (dispatcher + worker
    /// cores sharing one request queue, Fig. 10b/c) or `cluster` (fan-out to
    /// `leaves` servers, PerfIso's IndexServe).
    #[serde(default)]
    pub kind: TopologyKind,
    /// Lanes per core; 1 = SMT off. Default 2.
    #[serde(default = "d_smt")]
    pub smt_ways: i64,
    /// Cores per server, dispatcher included (chip default 8; core: 1).
    #[serde(default)]
    pub cores: Option<i64>,
    /// Cores that only dispatch requests (chip default 1; core: 0).
    #[serde(default)]
    pub dispatcher_cores: Option<i64>,
    /// Cluster: leaf servers every request fans out to (K).
    #[serde(default)]
    pub leaves: Option<i64>,
    /// Cluster: what each leaf is (`core` or `chip`, default `core`).
    #[serde(default)]
    pub leaf: Option<LeafKind>,
}

impl Default for TopologySpec {
    fn default() -> Self {
        TopologySpec {
            kind: TopologyKind::Core,
            smt_ways: d_smt(),
            cores: None,
            dispatcher_cores: None,
            leaves: None,
            leaf: None,
        }
    }
}

/// The topology kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TopologyKind {
    /// One core.
    #[default]
    Core,
    /// A chip: dispatcher core(s) + worker cores, one shared request queue.
    Chip,
    /// Fan-out to `leaves` servers; a request completes with its slowest leaf.
    Cluster,
}

/// What a cluster leaf is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeafKind {
    /// One core.
    Core,
    /// A chip.
    Chip,
}

/// `[batch]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSpec {
    /// Batch kind of every configuration that does not name its own
    /// (built-in: pause, loop, matrix, flush, dacapo, stream). Default `loop`.
    #[serde(default = "d_batch_kind")]
    pub kind: String,
    /// Kinds defined or overridden here: `[batch.kinds.mine]
    /// lc_slowdown = 1.3, corun_rate = 0.7`.
    #[serde(default)]
    pub kinds: BTreeMap<String, Interference>,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            kind: d_batch_kind(),
            kinds: BTreeMap::new(),
        }
    }
}

/// `[timing]`: mechanism latencies in nanoseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingSpec {
    /// Step-aside latency (batch keeps co-running meanwhile). Default 1640:
    /// nanonap's 3 285 cycles at 2 GHz (Elfen §3.2).
    #[serde(default = "TimingSpec::d_nap")]
    pub nap_ns: i64,
    /// Wake latency of a napping batch lane. Default 720: nanonap's 1 438
    /// cycles at 2 GHz.
    #[serde(default = "TimingSpec::d_wake")]
    pub wake_ns: i64,
    /// `sched_idle`: time for a woken LC thread to preempt a SCHED_IDLE
    /// batch thread. Default 6000 (a p50 measured on a KVM guest).
    #[serde(default = "TimingSpec::d_os")]
    pub os_preempt_ns: i64,
    /// Blind isolation: poll + cpuset update. Default 25000 (a cpuset shrink
    /// measured at 24 µs on a KVM guest).
    #[serde(default = "TimingSpec::d_blind")]
    pub blind_react_ns: i64,
}

impl TimingSpec {
    fn d_nap() -> i64 {
        1640
    }
    fn d_wake() -> i64 {
        720
    }
    fn d_os() -> i64 {
        6000
    }
    fn d_blind() -> i64 {
        25_000
    }

    /// Checks and converts.
    pub fn resolve(&self) -> Result<Timing, SimError> {
        Ok(Timing {
            nap_ns: at_least("timing.nap_ns", self.nap_ns, 0)?,
            wake_ns: at_least("timing.wake_ns", self.wake_ns, 0)?,
            os_preempt_ns: at_least("timing.os_preempt_ns", self.os_preempt_ns, 0)?,
            blind_react_ns: at_least("timing.blind_react_ns", self.blind_react_ns, 0)?,
        })
    }
}

impl Default for TimingSpec {
    fn default() -> Self {
        TimingSpec {
            nap_ns: Self::d_nap(),
            wake_ns: Self::d_wake(),
            os_preempt_ns: Self::d_os(),
            blind_react_ns: Self::d_blind(),
        }
    }
}

/// `[load]`: either `rps = [...]` or `rps_from`, `rps_to`, `steps` (evenly spaced).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// Explicit loads, requests per second.
    #[serde(default)]
    pub rps: Vec<f64>,
    /// First load of an evenly spaced sweep.
    #[serde(default)]
    pub rps_from: Option<f64>,
    /// Last load of an evenly spaced sweep.
    #[serde(default)]
    pub rps_to: Option<f64>,
    /// Number of loads of an evenly spaced sweep.
    #[serde(default)]
    pub steps: Option<i64>,
}

impl LoadSpec {
    /// The loads, checked.
    pub fn resolve(&self) -> Result<Vec<f64>, SimError> {
        let sweep = (self.rps_from, self.rps_to, self.steps);
        let loads = match (self.rps.is_empty(), sweep) {
            (false, (None, None, None)) => self.rps.clone(),
            (true, (Some(from), Some(to), Some(steps))) => {
                let from = positive("load.rps_from", from)?;
                let to = positive("load.rps_to", to)?;
                if to < from {
                    return Err(invalid(
                        "load.rps_to",
                        format!("must be >= load.rps_from ({from}), got {to}"),
                    ));
                }
                let steps = at_least("load.steps", steps, 1)?;
                if steps > 10_000 {
                    return Err(invalid(
                        "load.steps",
                        format!("must be <= 10000, got {steps}"),
                    ));
                }
                if steps == 1 {
                    vec![from]
                } else {
                    (0..steps)
                        .map(|i| from + (to - from) * i as f64 / (steps - 1) as f64)
                        .collect()
                }
            }
            (true, (None, None, None)) => {
                return Err(invalid(
                    "load",
                    "needs rps = [...] or rps_from, rps_to and steps",
                ));
            }
            _ => {
                return Err(invalid(
                    "load",
                    "give either rps = [...] or all of rps_from, rps_to, steps, not a mix",
                ));
            }
        };
        for (i, &r) in loads.iter().enumerate() {
            positive(&format!("load.rps[{i}]"), r)?;
        }
        Ok(loads)
    }
}

/// The configurations, in the workspace's one vocabulary
/// ([`elfen_results::Config`]); the simulator models those with
/// [`elfen_results::Config::in_simulator`].
pub use elfen_results::Config as ConfigKind;

/// The Elfen policy configuration `kind` runs on its batch lanes in the
/// simulator: the four policies, and `unmanaged` for `cpuset` (batch always
/// runs on the batch lanes — the paper's naive co-location on the SMT
/// sibling).
pub fn sim_policy(kind: ConfigKind) -> Option<PolicyKind> {
    match kind {
        ConfigKind::Cpuset => Some(PolicyKind::Unmanaged),
        k => k.policy(),
    }
}

/// One `[[configs]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    /// Which configuration.
    pub kind: ConfigKind,
    /// Series name in the result file (default: the configuration's name).
    #[serde(default)]
    pub name: Option<String>,
    /// Batch kind for this configuration (default `[batch].kind`).
    #[serde(default)]
    pub batch: Option<String>,
    /// Budget policies: co-running budget, µs.
    #[serde(default)]
    pub budget_us: Option<f64>,
    /// Budget policies: budget = `slo_p99_us` − p99 of LC alone at the same
    /// load (the paper's "headroom", §3.4), floored at 0.
    #[serde(default)]
    pub budget_from_slo: bool,
    /// Dynamic refresh: the LC's IPC alone (default 1.0). While co-running it
    /// observes `ref_ipc / slowdown`, so its budget scales by `s / (s - 1)`.
    #[serde(default)]
    pub ref_ipc: Option<f64>,
    /// Dynamic refresh: cap on the budget scale (default 4).
    #[serde(default)]
    pub max_budget_ratio: Option<f64>,
    /// Blind isolation: PerfIso's B, in whole worker cores (>= 1).
    #[serde(default)]
    pub buffer_cores: Option<i64>,
    /// Static partition: worker cores given to the batch.
    #[serde(default)]
    pub batch_cores: Option<i64>,
}

/// The resolved topology.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Topology {
    /// What was asked for.
    pub kind: TopologyKind,
    /// One server (a leaf, for a cluster).
    pub server: ServerModel,
    /// Cores per server including dispatchers.
    pub cores: u32,
    /// Dispatcher cores per server.
    pub dispatcher_cores: u32,
    /// Servers a request fans out to (1 unless a cluster).
    pub leaves: u32,
}

impl TopologySpec {
    /// Checks the topology.
    pub fn resolve(&self) -> Result<Topology, SimError> {
        let smt = at_least("topology.smt_ways", self.smt_ways, 1)?;
        if self.smt_ways > MAX_SMT_WAYS {
            return Err(invalid(
                "topology.smt_ways",
                format!("must be <= {MAX_SMT_WAYS}, got {smt}"),
            ));
        }
        let (server_kind, leaves) = match self.kind {
            TopologyKind::Core | TopologyKind::Chip => {
                if self.leaves.is_some() || self.leaf.is_some() {
                    return Err(invalid(
                        "topology.leaves",
                        "only applies to kind = \"cluster\"",
                    ));
                }
                let k = if self.kind == TopologyKind::Core {
                    LeafKind::Core
                } else {
                    LeafKind::Chip
                };
                (k, 1)
            }
            TopologyKind::Cluster => {
                let Some(l) = self.leaves else {
                    return Err(invalid(
                        "topology.leaves",
                        "is required for kind = \"cluster\"",
                    ));
                };
                let l = at_least("topology.leaves", l, 1)?;
                if l > MAX_LEAVES as u64 {
                    return Err(invalid(
                        "topology.leaves",
                        format!("must be <= {MAX_LEAVES}, got {l}"),
                    ));
                }
                (self.leaf.unwrap_or(LeafKind::Core), l as u32)
            }
        };
        let (cores, dispatch) = match server_kind {
            LeafKind::Core => {
                if let Some(c) = self.cores.filter(|c| *c != 1) {
                    return Err(invalid(
                        "topology.cores",
                        format!("must be 1 for a single core, got {c}"),
                    ));
                }
                if let Some(d) = self.dispatcher_cores.filter(|d| *d != 0) {
                    return Err(invalid(
                        "topology.dispatcher_cores",
                        format!("must be 0 for a single core, got {d}"),
                    ));
                }
                (1, 0)
            }
            LeafKind::Chip => {
                let c = at_least("topology.cores", self.cores.unwrap_or(8), 1)?;
                if c > MAX_CORES as u64 {
                    return Err(invalid(
                        "topology.cores",
                        format!("must be <= {MAX_CORES}, got {c}"),
                    ));
                }
                let d = at_least(
                    "topology.dispatcher_cores",
                    self.dispatcher_cores.unwrap_or(1),
                    0,
                )?;
                if d >= c {
                    return Err(invalid(
                        "topology.dispatcher_cores",
                        format!("must be < topology.cores ({c}) so a worker core remains, got {d}"),
                    ));
                }
                (c as u32, d as u32)
            }
        };
        Ok(Topology {
            kind: self.kind,
            server: ServerModel {
                worker_cores: cores - dispatch,
                smt_ways: smt as u32,
            },
            cores,
            dispatcher_cores: dispatch,
            leaves,
        })
    }
}

/// A budget that is either given or derived per load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// Not a budget policy.
    None,
    /// This many ns.
    Fixed(u64),
    /// SLO − p99 of LC alone at the point's load.
    FromSlo,
}

/// A checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Series name.
    pub name: String,
    /// Kind.
    pub kind: ConfigKind,
    /// Batch kind name and its interference (`None` for `alone`).
    pub batch: Option<(String, Interference)>,
    /// The policy (budget filled in per load when `budget` is `FromSlo`).
    pub policy: Option<PolicyConfig>,
    /// Budget source.
    pub budget: Budget,
    /// Blind isolation law.
    pub blind: Option<BlindIsolation>,
    /// Static partition's batch cores.
    pub batch_cores: u32,
}

/// A checked experiment, ready to run.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// The config as written, defaults filled in (stored as the result's `spec`).
    pub spec: SimConfig,
    /// Seed.
    pub seed: u64,
    /// Repetitions per point.
    pub reps: u32,
    /// Measured requests per repetition.
    pub requests: u64,
    /// Warm-up requests per repetition.
    pub warmup_requests: u64,
    /// SLO, µs.
    pub slo_p99_us: Option<f64>,
    /// Record idle periods.
    pub record_idle: bool,
    /// Hardware.
    pub topology: Topology,
    /// Trace, when arrivals come from one.
    pub trace: Option<Trace>,
    /// Demand.
    pub demand: Demand,
    /// Latencies.
    pub timing: Timing,
    /// Loads.
    pub loads: Vec<f64>,
    /// Configurations.
    pub configs: Vec<Config>,
}

impl SimConfig {
    /// Parses TOML text; `what` names the source in errors.
    pub fn from_toml(text: &str, what: &str) -> Result<SimConfig, SimError> {
        toml::from_str(text).map_err(|e| SimError::File {
            path: what.to_string(),
            problem: e.to_string().trim_end().to_string(),
        })
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<SimConfig, SimError> {
        let (what, text) = crate::error::read_text(path)?;
        SimConfig::from_toml(&text, &what)
    }

    /// Checks everything and loads referenced files (relative to `base`).
    pub fn resolve(&self, base: &Path) -> Result<Experiment, SimError> {
        let reps = at_least("reps", self.reps, 1)?;
        let requests = at_least("requests", self.requests, 2)?;
        let warmup = match self.warmup_requests {
            Some(w) => at_least("warmup_requests", w, 0)?,
            None => requests / 10,
        };
        let slo = match self.slo_p99_us {
            Some(s) => Some(positive("slo_p99_us", s)?),
            None => None,
        };
        let topology = self.topology.resolve()?;
        let trace = match &self.arrivals {
            ArrivalSpec::Poisson => None,
            ArrivalSpec::Trace { path } => {
                if path.trim().is_empty() {
                    return Err(invalid("arrivals.path", "must name a file, got \"\""));
                }
                Some(Trace::load(&base.join(path))?)
            }
        };
        let demand = self.demand.resolve(base)?;
        let timing = self.timing.resolve()?;
        let loads = self.load.resolve()?;
        for (name, k) in &self.batch.kinds {
            k.validate(&format!("batch.kinds.{name}"))?;
        }
        if self.configs.is_empty() {
            return Err(invalid("configs", "needs at least one [[configs]] entry"));
        }
        let mut configs: Vec<Config> = Vec::new();
        for (i, c) in self.configs.iter().enumerate() {
            let cfg = self.resolve_config(i, c, &topology, slo)?;
            if configs.iter().any(|o| o.name == cfg.name) {
                return Err(invalid(
                    format!("configs[{i}].name"),
                    format!(
                        "{:?} is used twice; give each configuration its own name",
                        cfg.name
                    ),
                ));
            }
            configs.push(cfg);
        }
        Ok(Experiment {
            spec: self.clone(),
            seed: self.seed,
            reps: reps as u32,
            requests,
            warmup_requests: warmup,
            slo_p99_us: slo,
            record_idle: self.record_idle_periods,
            topology,
            trace,
            demand,
            timing,
            loads,
            configs,
        })
    }

    fn interference(&self, field: &str, name: &str) -> Result<Interference, SimError> {
        if let Some(k) = self.batch.kinds.get(name) {
            return Ok(*k);
        }
        builtin(name).ok_or_else(|| {
            invalid(
                field,
                format!(
                    "{name:?} is neither a built-in batch kind ({}) nor defined in [batch.kinds]",
                    builtin_names()
                ),
            )
        })
    }
}

impl Experiment {
    /// Reads, parses and checks a config file (relative paths inside are
    /// resolved against its directory).
    pub fn load(path: &Path) -> Result<Experiment, SimError> {
        let cfg = SimConfig::load(path)?;
        cfg.resolve(&base_dir(path))
    }
}

/// The directory relative paths in the config at `path` are resolved against.
pub fn base_dir(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}
