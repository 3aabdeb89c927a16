//! What an experiment runs: [`BenchSpec`] (TOML with defaults, unknown keys
//! refused), the configurations ([`ConfigKind`]) and batch kernels
//! ([`KernelKind`]) it compares, and the parsers the command line shares
//! with the config file.

use crate::error::BenchError;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// One way of running (or not running) batch work next to the LC service.
///
/// The precise definitions — which lanes, which scheduling class, which
/// cgroup, whether batch threads check the signal page — are in
/// `docs/harness.md` and in [`ConfigKind::definition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigKind {
    /// The LC service alone: no batch process at all (the baseline).
    LcAlone,
    /// Batch pinned to the batch lanes, no checks, no cgroup.
    Naive,
    /// Batch threads on every lane (request lanes too), no checks: only
    /// `SCHED_IDLE` keeps them out of the LC worker's way.
    SchedIdle,
    /// Batch confined to the batch lanes by a cpuset cgroup, no checks.
    Cpuset,
    /// Batch on the batch lanes, no checks, capped by a CFS bandwidth quota.
    CfsQuota,
    /// Elfen borrow idle (Figure 9a): checks, runs only while the request
    /// lane is idle.
    BorrowIdle,
    /// Elfen fixed budget (Figure 9b).
    FixedBudget,
    /// Elfen refresh budget (Figure 9c).
    RefreshBudget,
    /// Elfen dynamic refresh (Figure 9d); without hardware counters it runs
    /// as refresh budget (declared in the output).
    DynamicRefresh,
}

/// The valid configuration names, for messages.
pub const CONFIG_NAMES: &str = "lc_alone, naive, sched_idle, cpuset, cfs_quota, borrow_idle, \
                                fixed_budget, refresh_budget, dynamic_refresh";

impl ConfigKind {
    /// Every configuration, in the order a sweep runs them.
    pub const ALL: [ConfigKind; 9] = [
        ConfigKind::LcAlone,
        ConfigKind::Naive,
        ConfigKind::SchedIdle,
        ConfigKind::Cpuset,
        ConfigKind::CfsQuota,
        ConfigKind::BorrowIdle,
        ConfigKind::FixedBudget,
        ConfigKind::RefreshBudget,
        ConfigKind::DynamicRefresh,
    ];

    /// The snake_case name used on the command line, in configs and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ConfigKind::LcAlone => "lc_alone",
            ConfigKind::Naive => "naive",
            ConfigKind::SchedIdle => "sched_idle",
            ConfigKind::Cpuset => "cpuset",
            ConfigKind::CfsQuota => "cfs_quota",
            ConfigKind::BorrowIdle => "borrow_idle",
            ConfigKind::FixedBudget => "fixed_budget",
            ConfigKind::RefreshBudget => "refresh_budget",
            ConfigKind::DynamicRefresh => "dynamic_refresh",
        }
    }

    /// Whether a batch process runs in this configuration.
    pub fn has_batch(self) -> bool {
        self != ConfigKind::LcAlone
    }

    /// The Elfen policy the batch threads run, for the Elfen configurations.
    pub fn policy(self) -> Option<elfen_policy::PolicyKind> {
        use elfen_policy::PolicyKind as P;
        match self {
            ConfigKind::BorrowIdle => Some(P::BorrowIdle),
            ConfigKind::FixedBudget => Some(P::FixedBudget),
            ConfigKind::RefreshBudget => Some(P::RefreshBudget),
            ConfigKind::DynamicRefresh => Some(P::DynamicRefresh),
            _ => None,
        }
    }

    /// Whether the policy spends a co-running budget.
    pub fn uses_budget(self) -> bool {
        self.policy().is_some_and(|p| p.uses_budget())
    }

    /// The cgroup this configuration puts the batch process in, if any.
    pub fn cgroup(self) -> Option<CgroupUse> {
        match self {
            ConfigKind::Cpuset => Some(CgroupUse::Cpuset),
            ConfigKind::CfsQuota => Some(CgroupUse::CpuQuota),
            _ => None,
        }
    }

    /// Where batch threads may run.
    pub fn placement(self) -> Placement {
        match self {
            ConfigKind::LcAlone => Placement::None,
            ConfigKind::SchedIdle => Placement::EveryLane,
            ConfigKind::Cpuset => Placement::CgroupBatchLanes,
            _ => Placement::BatchLanes,
        }
    }

    /// One line saying exactly what runs (for `--help`, the report and docs).
    pub fn definition(self) -> &'static str {
        match self {
            ConfigKind::LcAlone => "LC service alone: no batch process",
            ConfigKind::Naive => {
                "one batch thread per batch lane, pinned there by sched_setaffinity; no checks, no cgroup"
            }
            ConfigKind::SchedIdle => {
                "one batch thread per lane, request lanes included; no checks: only SCHED_IDLE \
                 makes the LC worker preempt it"
            }
            ConfigKind::Cpuset => {
                "one batch thread per batch lane, unpinned but confined to the batch lanes by a \
                 cpuset cgroup (elfen-*); no checks"
            }
            ConfigKind::CfsQuota => {
                "as naive, and the batch process is capped by a CFS bandwidth quota \
                 (cpu cgroup elfen-*, quota = batch.cfs_quota_lanes x period)"
            }
            ConfigKind::BorrowIdle => {
                "as naive, plus a check at every work unit: run only while the request lane is \
                 idle (Figure 9a)"
            }
            ConfigKind::FixedBudget => {
                "borrow idle, and co-run with the first request after an idle period for at most \
                 the budget (Figure 9b)"
            }
            ConfigKind::RefreshBudget => {
                "fixed budget, with the budget restarted when a new request starts on an empty \
                 queue (Figure 9c)"
            }
            ConfigKind::DynamicRefresh => {
                "refresh budget scaled by the LC lane's IPC (Figure 9d); without hardware \
                 counters it runs as refresh budget"
            }
        }
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ConfigKind {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        ConfigKind::ALL
            .into_iter()
            .find(|c| c.name() == norm)
            .ok_or_else(|| BenchError::UnknownConfig {
                given: s.to_string(),
                valid: CONFIG_NAMES,
            })
    }
}

/// Where the batch threads of a configuration run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// No batch threads.
    None,
    /// One thread per batch lane, pinned to it.
    BatchLanes,
    /// One thread per lane (request and batch), each pinned to its lane.
    EveryLane,
    /// One thread per batch lane, not pinned; a cpuset cgroup holds the
    /// process on the batch lanes.
    CgroupBatchLanes,
}

/// Which cgroup controller a configuration uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupUse {
    /// `cpuset`: the batch lanes only.
    Cpuset,
    /// `cpu`: a CFS bandwidth quota.
    CpuQuota,
}

pub use elfen_kernels::{KERNEL_NAMES, KernelKind};

/// A value that is either derived by the harness (`"auto"`) or given.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Auto {
    /// Derived by the harness.
    #[default]
    Auto,
    /// Given explicitly.
    Value(f64),
}

impl Auto {
    /// The given value, if any.
    pub fn value(self) -> Option<f64> {
        match self {
            Auto::Auto => None,
            Auto::Value(v) => Some(v),
        }
    }

    /// Parses `auto` or a number; `what` names the setting in the error.
    pub fn parse(s: &str, what: &str, unit: &str) -> Result<Auto, BenchError> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(Auto::Auto);
        }
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Auto::Value(v)),
            _ => Err(BenchError::Parse {
                what: what.to_string(),
                given: s.to_string(),
                expected: format!("a number of {unit} (e.g. 2.5) or \"auto\""),
            }),
        }
    }
}

impl Serialize for Auto {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Auto::Auto => s.serialize_str("auto"),
            Auto::Value(v) => s.serialize_f64(*v),
        }
    }
}

impl<'de> Deserialize<'de> for Auto {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Auto, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Auto;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or \"auto\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Auto, E> {
                Ok(Auto::Value(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Auto, E> {
                Ok(Auto::Value(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Auto, E> {
                Ok(Auto::Value(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Auto, E> {
                Auto::parse(v, "value", "units").map_err(|e| E::custom(e.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The LC service's request demand (service time alone, the paper's Figure 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DemandSpec {
    /// The Elfen paper's request set: the 1,237 term queries (`HighTerm`,
    /// `MedTerm`, `LowTerm`) of luceneutil's `wikimedium.10M.nostopwords.tasks`,
    /// each with demand proportional to its term's document frequency
    /// (a term query's cost is its posting list), scaled to `mean_us`.
    /// Most are short; the longest are 15× the mean and 120× the shortest.
    /// If the tasks file is not found, the `lognormal` fit of the same set
    /// is used instead (said on stderr and recorded in the result file).
    Lucene {
        /// Mean demand, µs.
        #[serde(default = "default_mean_us")]
        mean_us: f64,
        /// The tasks file; default: `../shared/data/wikimedium.10M.nostopwords.tasks`
        /// next to the repository (searched from the working directory and the
        /// binary's location) or `$ELFEN_DATA_DIR`.
        #[serde(default)]
        tasks_path: Option<PathBuf>,
    },
    /// Lognormal with the given mean; `sigma` is the standard deviation of
    /// the log (the Lucene set's is 1.18).
    Lognormal {
        /// Mean demand, µs.
        #[serde(default = "default_mean_us")]
        mean_us: f64,
        /// Standard deviation of `ln(demand)`.
        #[serde(default = "default_sigma")]
        sigma: f64,
        /// Requests in the request set.
        #[serde(default = "default_set_size")]
        set_size: usize,
    },
    /// Two classes: short requests and a fraction of long ones.
    Bimodal {
        /// Demand of a short request, µs.
        short_us: f64,
        /// Demand of a long request, µs.
        long_us: f64,
        /// Fraction of long requests, in (0, 1).
        long_fraction: f64,
        /// Requests in the request set.
        #[serde(default = "default_set_size")]
        set_size: usize,
    },
    /// Exponential with the given mean.
    Exponential {
        /// Mean demand, µs.
        mean_us: f64,
        /// Requests in the request set.
        #[serde(default = "default_set_size")]
        set_size: usize,
    },
    /// Every request the same.
    Constant {
        /// Demand, µs.
        us: f64,
    },
}

fn default_mean_us() -> f64 {
    300.0
}
fn default_sigma() -> f64 {
    LUCENE_LOG_SIGMA
}
fn default_set_size() -> usize {
    1000
}

/// Standard deviation of `ln(freq)` over the Lucene term set.
pub const LUCENE_LOG_SIGMA: f64 = 1.1787;

impl Default for DemandSpec {
    fn default() -> Self {
        DemandSpec::Lucene {
            mean_us: default_mean_us(),
            tasks_path: None,
        }
    }
}

impl DemandSpec {
    /// The nominal mean demand, µs.
    pub fn mean_us(&self) -> f64 {
        match self {
            DemandSpec::Lucene { mean_us, .. }
            | DemandSpec::Lognormal { mean_us, .. }
            | DemandSpec::Exponential { mean_us, .. } => *mean_us,
            DemandSpec::Bimodal {
                short_us,
                long_us,
                long_fraction,
                ..
            } => short_us * (1.0 - long_fraction) + long_us * long_fraction,
            DemandSpec::Constant { us } => *us,
        }
    }

    fn validate(&self) -> Result<(), BenchError> {
        let pos = |what: &str, v: f64| positive(&format!("demand.{what}"), v);
        match self {
            DemandSpec::Lucene { mean_us, .. } => pos("mean_us", *mean_us),
            DemandSpec::Lognormal {
                mean_us,
                sigma,
                set_size,
            } => {
                pos("mean_us", *mean_us)?;
                pos("sigma", *sigma)?;
                nonzero("demand.set_size", *set_size)
            }
            DemandSpec::Bimodal {
                short_us,
                long_us,
                long_fraction,
                set_size,
            } => {
                pos("short_us", *short_us)?;
                pos("long_us", *long_us)?;
                if !(*long_fraction > 0.0 && *long_fraction < 1.0) {
                    return Err(BenchError::Config(format!(
                        "demand.long_fraction must be in (0, 1), got {long_fraction}"
                    )));
                }
                nonzero("demand.set_size", *set_size)
            }
            DemandSpec::Exponential { mean_us, set_size } => {
                pos("mean_us", *mean_us)?;
                nonzero("demand.set_size", *set_size)
            }
            DemandSpec::Constant { us } => pos("us", *us),
        }
    }
}

/// The built-in LC service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServiceSpec {
    /// Size of the pointer-chase working set each request walks, KiB. The
    /// default (4 MiB) is 2× a vCPU's L2 on the development machines and
    /// inside the share of the host's L3 a chase finds there (≈ 40 ns per
    /// hop up to 4 MiB, DRAM latency from 16 MiB), so requests live in the
    /// LLC, where a memory-streaming co-runner on the other vCPU slows them.
    pub working_set_kib: u64,
    /// How long the start-up calibration of the chase rate runs, ms.
    pub calibrate_ms: u64,
}

impl Default for ServiceSpec {
    fn default() -> Self {
        ServiceSpec {
            working_set_kib: 4 * 1024,
            calibrate_ms: 300,
        }
    }
}

/// How batch threads nap in the Elfen configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NapKind {
    /// `pause` loop on the batch lane (keeps the lane; on a machine without
    /// SMT it costs the request lane nothing).
    Spin,
    /// Block in `futex` (gives the lane to the OS).
    Futex,
    /// Spin, then futex.
    Hybrid,
}

impl NapKind {
    /// The name.
    pub fn name(self) -> &'static str {
        match self {
            NapKind::Spin => "spin",
            NapKind::Futex => "futex",
            NapKind::Hybrid => "hybrid",
        }
    }
}

impl FromStr for NapKind {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "spin" => Ok(NapKind::Spin),
            "futex" => Ok(NapKind::Futex),
            "hybrid" => Ok(NapKind::Hybrid),
            _ => Err(BenchError::Parse {
                what: "nap".into(),
                given: s.into(),
                expected: "spin, futex or hybrid".into(),
            }),
        }
    }
}

/// The batch side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchSpec {
    /// Nap backend of the Elfen configurations.
    pub nap: NapKind,
    /// `cfs_quota`: the quota in lanes (0.5 = half of one lane per period).
    pub cfs_quota_lanes: f64,
    /// `cfs_quota`: the CFS period, µs.
    pub cfs_period_us: u64,
    /// How long each kernel runs alone (progress baseline), s.
    pub alone_s: f64,
    /// How long a freshly started batch process runs before the first
    /// invocation of a point (it also allocates and touches its buffers), ms.
    pub settle_ms: u64,
    /// Stream kernel buffer, MiB (`elfen-kernels`' default is 64).
    pub stream_mib: u64,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            nap: NapKind::Spin,
            cfs_quota_lanes: 0.5,
            cfs_period_us: 100_000,
            alone_s: 1.0,
            settle_ms: 50,
            stream_mib: 64,
        }
    }
}

/// cgroup version to drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupVersion {
    /// v2 if `<root>/cgroup.controllers` lists `cpu` and `cpuset`, else v1.
    Auto,
    /// Controller hierarchies `<root>/cpu`, `<root>/cpuset`.
    V1,
    /// The unified hierarchy at `<root>`.
    V2,
}

/// Where and how cgroups are written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CgroupSpec {
    /// The cgroup mount root.
    pub root: PathBuf,
    /// Which version to drive.
    pub version: CgroupVersion,
}

impl Default for CgroupSpec {
    fn default() -> Self {
        CgroupSpec {
            root: PathBuf::from("/sys/fs/cgroup"),
            version: CgroupVersion::Auto,
        }
    }
}

/// A whole experiment. Every field has a default, so an empty file (or no
/// file) is the default sweep; unknown keys are errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchSpec {
    /// Configurations to run (`lc_alone` is always run: it is the baseline).
    pub configs: Vec<ConfigKind>,
    /// Batch kernels; every batch configuration runs once per kernel.
    pub kernels: Vec<KernelKind>,
    /// Offered loads, requests per second; empty = derived from
    /// `rps_fractions` of the LC service's capacity measured alone.
    pub rps: Vec<f64>,
    /// With `rps` empty: loads as fractions of the LC service's capacity
    /// alone under open-loop load (1 / its mean service time measured by a
    /// probe invocation at 30% of the back-to-back capacity).
    pub rps_fractions: Vec<f64>,
    /// Measured time per invocation, s (warm-up excluded).
    pub duration_s: f64,
    /// Warm-up per invocation, s (requests sent, not recorded).
    pub warmup_s: f64,
    /// Longest wait for outstanding responses after an invocation, s;
    /// requests still missing count as errors, with latency up to the end.
    pub drain_s: f64,
    /// Invocations per point (the summary takes medians over them).
    pub reps: u32,
    /// An invocation during which other processes plus the host's steal
    /// took more than this many lanes (from `/proc/stat`) is disturbed and
    /// run again (`disturbed_retries` times at most; the least disturbed
    /// run is kept). The criterion never looks at latency. 0.05 lanes is
    /// 50 ms of a 1 s window: one stall of that length queues requests
    /// for 50 ms, which alone sets the window's p99.
    pub disturbed_lanes: f64,
    /// How often a disturbed invocation is run again (0 = never).
    pub disturbed_retries: u32,
    /// Wall time the whole sweep may spend on such re-runs, s. Once spent,
    /// disturbed invocations are kept as they are (the noise line counts
    /// them), so a noisy host cannot stretch the sweep without bound.
    pub rerun_budget_s: f64,
    /// p99 latency SLO, ms; `auto` = the LC-alone p99 at the knee of its
    /// p99-vs-RPS curve.
    pub slo_p99_ms: Auto,
    /// Co-running budget of the budget policies, µs; `auto` = SLO headroom
    /// at each load (SLO − LC-alone p99 there, at least 0), as the paper.
    pub budget_us: Auto,
    /// TCP port of the LC service on 127.0.0.1; 0 = any free port.
    pub port: u16,
    /// Lane pairing (`request:batch`, e.g. `0:1`); default: SMT siblings or
    /// consecutive CPUs.
    pub pairs: Option<String>,
    /// Attach to this existing signal page (name in /dev/shm or a path)
    /// instead of creating a private one.
    pub page: Option<String>,
    /// Seed of the request set, its shuffles and the arrival times.
    pub seed: u64,
    /// Directory for `<timestamp>/` result directories.
    pub out_dir: PathBuf,
    /// Keep each invocation's latency histogram (HdrHistogram V2, base64)
    /// in the result file.
    pub keep_histograms: bool,
    /// The LC request demand.
    pub demand: DemandSpec,
    /// The LC service.
    pub service: ServiceSpec,
    /// The batch side.
    pub batch: BatchSpec,
    /// cgroups.
    pub cgroup: CgroupSpec,
}

impl Default for BenchSpec {
    fn default() -> Self {
        BenchSpec {
            configs: ConfigKind::ALL.to_vec(),
            kernels: vec![KernelKind::Stream, KernelKind::Matrix],
            rps: Vec::new(),
            rps_fractions: vec![0.25, 0.5, 0.75],
            duration_s: 1.0,
            warmup_s: 0.1,
            drain_s: 1.0,
            reps: 3,
            disturbed_lanes: 0.05,
            disturbed_retries: 2,
            rerun_budget_s: 60.0,
            slo_p99_ms: Auto::Auto,
            budget_us: Auto::Auto,
            port: 0,
            pairs: None,
            page: None,
            seed: 1,
            out_dir: PathBuf::from("results"),
            keep_histograms: true,
            demand: DemandSpec::default(),
            service: ServiceSpec::default(),
            batch: BatchSpec::default(),
            cgroup: CgroupSpec::default(),
        }
    }
}

fn positive(what: &str, v: f64) -> Result<(), BenchError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(BenchError::Config(format!(
            "{what} must be a finite number > 0, got {v}"
        )))
    }
}

fn nonzero(what: &str, v: usize) -> Result<(), BenchError> {
    if v > 0 {
        Ok(())
    } else {
        Err(BenchError::Config(format!("{what} must be at least 1")))
    }
}

impl BenchSpec {
    /// Reads a TOML spec; missing keys take their defaults.
    pub fn from_toml(text: &str) -> Result<BenchSpec, BenchError> {
        let spec: BenchSpec =
            toml::from_str(text).map_err(|e| BenchError::Config(e.to_string()))?;
        Ok(spec)
    }

    /// Reads a TOML spec file.
    pub fn load(path: &Path) -> Result<BenchSpec, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
            what: format!("reading {}", path.display()),
            source,
        })?;
        BenchSpec::from_toml(&text).map_err(|e| match e {
            BenchError::Config(m) => BenchError::Config(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// Puts `lc_alone` first (it is always run) and drops duplicates,
    /// keeping the order given.
    pub fn normalize(&mut self) {
        let mut seen = Vec::new();
        seen.push(ConfigKind::LcAlone);
        for c in &self.configs {
            if !seen.contains(c) {
                seen.push(*c);
            }
        }
        self.configs = seen;
        let mut ks: Vec<KernelKind> = Vec::new();
        for k in &self.kernels {
            if !ks.contains(k) {
                ks.push(*k);
            }
        }
        self.kernels = ks;
    }

    /// The configurations that run batch work.
    pub fn batch_configs(&self) -> Vec<ConfigKind> {
        self.configs
            .iter()
            .copied()
            .filter(|c| c.has_batch())
            .collect()
    }

    /// Checks every value, so bad input fails before any load is sent.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.configs.is_empty() {
            return Err(BenchError::Config(format!(
                "configs is empty; choose from {CONFIG_NAMES}"
            )));
        }
        if self.configs.iter().any(|c| c.has_batch()) && self.kernels.is_empty() {
            return Err(BenchError::Config(format!(
                "kernels is empty but batch configurations are selected; choose from {KERNEL_NAMES}"
            )));
        }
        for &r in &self.rps {
            check_rps(r)?;
        }
        if self.rps.is_empty() {
            if self.rps_fractions.is_empty() {
                return Err(BenchError::Config(
                    "rps and rps_fractions are both empty: give loads (--rps 500,1000) or fractions"
                        .into(),
                ));
            }
            for &f in &self.rps_fractions {
                if !(f.is_finite() && f > 0.0 && f <= 2.0) {
                    return Err(BenchError::Config(format!(
                        "rps_fractions must be in (0, 2], got {f}"
                    )));
                }
            }
        }
        positive("duration_s", self.duration_s)?;
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0) {
            return Err(BenchError::Config(format!(
                "warmup_s must be >= 0, got {}",
                self.warmup_s
            )));
        }
        positive("drain_s", self.drain_s)?;
        if self.reps == 0 {
            return Err(BenchError::Config("reps must be at least 1".into()));
        }
        if !(self.disturbed_lanes.is_finite() && self.disturbed_lanes > 0.0) {
            return Err(BenchError::Config(format!(
                "disturbed_lanes must be > 0, got {}",
                self.disturbed_lanes
            )));
        }
        if !(self.rerun_budget_s.is_finite() && self.rerun_budget_s >= 0.0) {
            return Err(BenchError::Config(format!(
                "rerun_budget_s must be >= 0, got {}",
                self.rerun_budget_s
            )));
        }
        if let Auto::Value(v) = self.slo_p99_ms {
            positive("slo_p99_ms", v)?;
        }
        if let Auto::Value(v) = self.budget_us {
            if !(v.is_finite() && v >= 0.0) {
                return Err(BenchError::Config(format!(
                    "budget_us must be >= 0 or \"auto\", got {v}"
                )));
            }
        }
        self.demand.validate()?;
        if self.service.working_set_kib < 64 {
            return Err(BenchError::Config(format!(
                "service.working_set_kib must be at least 64, got {}",
                self.service.working_set_kib
            )));
        }
        if self.service.calibrate_ms == 0 {
            return Err(BenchError::Config(
                "service.calibrate_ms must be at least 1".into(),
            ));
        }
        positive("batch.cfs_quota_lanes", self.batch.cfs_quota_lanes)?;
        if !(1_000..=1_000_000).contains(&self.batch.cfs_period_us) {
            return Err(BenchError::Config(format!(
                "batch.cfs_period_us must be in 1000..=1000000 (the kernel's limits), got {}",
                self.batch.cfs_period_us
            )));
        }
        positive("batch.alone_s", self.batch.alone_s)?;
        if self.batch.stream_mib == 0 {
            return Err(BenchError::Config(
                "batch.stream_mib must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Checks one offered load.
pub fn check_rps(r: f64) -> Result<(), BenchError> {
    if r.is_finite() && r > 0.0 {
        Ok(())
    } else {
        Err(BenchError::Config(format!(
            "RPS must be a finite number > 0, got {r}"
        )))
    }
}

/// Parses a comma-separated list with `parse`; `all` expands to `all`.
pub fn parse_list<T: Clone, E>(
    s: &str,
    all: &[T],
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<Vec<T>, E> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    s.split(',')
        .filter(|t| !t.trim().is_empty())
        .map(parse)
        .collect()
}

/// Parses `--rps`: `auto` (empty list) or comma-separated loads > 0.
pub fn parse_rps(s: &str) -> Result<Vec<f64>, BenchError> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(Vec::new());
    }
    let mut v = Vec::new();
    for t in s.split(',').filter(|t| !t.trim().is_empty()) {
        let r: f64 = t.trim().parse().map_err(|_| BenchError::Parse {
            what: "--rps".into(),
            given: t.trim().into(),
            expected: "requests per second > 0, comma-separated (e.g. 500,1000)".into(),
        })?;
        check_rps(r)?;
        v.push(r);
    }
    if v.is_empty() {
        return Err(BenchError::Parse {
            what: "--rps".into(),
            given: s.into(),
            expected: "requests per second > 0, comma-separated (e.g. 500,1000), or auto".into(),
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_empty_file_agree() {
        let d = BenchSpec::default();
        assert_eq!(BenchSpec::from_toml("").unwrap(), d);
        d.validate().unwrap();
        // Round trip through TOML keeps everything.
        let text = toml::to_string(&d).unwrap();
        assert_eq!(BenchSpec::from_toml(&text).unwrap(), d);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = BenchSpec::from_toml("durations = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("durations"), "{e}");
        let e = BenchSpec::from_toml("[batch]\nnapp = 'spin'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("napp"), "{e}");
        let e = BenchSpec::from_toml("[demand]\nkind = 'lucene'\nmean = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mean"), "{e}");
    }

    #[test]
    fn names_parse_and_errors_list_the_valid_ones() {
        for c in ConfigKind::ALL {
            assert_eq!(c.name().parse::<ConfigKind>().unwrap(), c);
        }
        assert_eq!(
            "Borrow-Idle".parse::<ConfigKind>().unwrap(),
            ConfigKind::BorrowIdle
        );
        let e = "borrow".parse::<ConfigKind>().unwrap_err().to_string();
        assert!(e.contains("borrow") && e.contains("refresh_budget"), "{e}");
        let e = "streem".parse::<KernelKind>().unwrap_err().to_string();
        assert!(e.contains("streem") && e.contains("matrix"), "{e}");
        let e = BenchSpec::from_toml("configs = ['nope']")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
        assert_eq!(
            parse_list("all", &KernelKind::ALL, str::parse).unwrap(),
            KernelKind::ALL.to_vec()
        );
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(parse_rps("0").unwrap_err().to_string().contains("> 0"));
        assert!(parse_rps("-5").is_err());
        assert!(
            parse_rps("100,abc")
                .unwrap_err()
                .to_string()
                .contains("abc")
        );
        assert_eq!(parse_rps("100, 200").unwrap(), vec![100.0, 200.0]);
        assert!(parse_rps("auto").unwrap().is_empty());
        let e = Auto::parse("fast", "--slo-p99-ms", "ms").unwrap_err();
        assert!(e.to_string().contains("fast") && e.to_string().contains("auto"));
        assert_eq!(Auto::parse("2.5", "x", "ms").unwrap(), Auto::Value(2.5));
        let mut s = BenchSpec {
            rps: vec![0.0],
            ..BenchSpec::default()
        };
        assert!(s.validate().is_err());
        s.rps = vec![100.0];
        s.slo_p99_ms = Auto::Value(-1.0);
        assert!(s.validate().unwrap_err().to_string().contains("slo_p99_ms"));
        let e = BenchSpec::from_toml("slo_p99_ms = 'soon'").unwrap_err();
        assert!(e.to_string().contains("soon"), "{e}");
        assert_eq!(
            BenchSpec::from_toml("slo_p99_ms = 3").unwrap().slo_p99_ms,
            Auto::Value(3.0)
        );
        let s = BenchSpec {
            reps: 0,
            ..BenchSpec::default()
        };
        assert!(s.validate().is_err());
        let s = BenchSpec {
            rerun_budget_s: -1.0,
            ..BenchSpec::default()
        };
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("rerun_budget_s") && e.contains("-1"), "{e}");
        let s = BenchSpec {
            rerun_budget_s: 0.0,
            ..BenchSpec::default()
        };
        s.validate().unwrap();
    }

    #[test]
    fn normalize_puts_the_baseline_first() {
        let mut s = BenchSpec {
            configs: vec![ConfigKind::Naive, ConfigKind::BorrowIdle, ConfigKind::Naive],
            kernels: vec![KernelKind::Stream, KernelKind::Stream],
            ..BenchSpec::default()
        };
        s.normalize();
        assert_eq!(
            s.configs,
            vec![
                ConfigKind::LcAlone,
                ConfigKind::Naive,
                ConfigKind::BorrowIdle
            ]
        );
        assert_eq!(s.kernels, vec![KernelKind::Stream]);
        assert_eq!(
            s.batch_configs(),
            vec![ConfigKind::Naive, ConfigKind::BorrowIdle]
        );
    }

    #[test]
    fn every_example_config_parses_and_validates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/bench");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let mut s = BenchSpec::load(&path).unwrap_or_else(|e| panic!("{e}"));
                s.normalize();
                s.validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 2, "expected example configs in {}", dir.display());
    }

    #[test]
    fn default_toml_spells_out_the_built_in_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/bench/default.toml");
        let file = BenchSpec::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            serde_json::to_value(&file).unwrap(),
            serde_json::to_value(BenchSpec::default()).unwrap(),
            "configs/bench/default.toml differs from BenchSpec::default()"
        );
    }
}
