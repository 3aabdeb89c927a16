//! What an experiment runs: [`BenchSpec`] (TOML with defaults, unknown keys
//! refused), its parts ([`lc`]: the LC service and its requests, [`batch`]:
//! the batch side and cgroups), and the parsers the command line shares
//! with the config file. Every bad value fails in [`BenchSpec::validate`],
//! before any load is sent.

pub mod batch;
pub mod lc;

pub use crate::batch::{BatchProgram, ProgramKind};
pub use batch::{BatchSpec, CgroupSpec, CgroupVersion};
pub use elfen_kernels::{KERNEL_NAMES, KernelKind};
pub use elfen_load::demand::{DemandSpec, LUCENE_LOG_SIGMA, RequestsKind};
pub use elfen_load::kv::{KvSpec, TextProtocolKind};
pub use elfen_results::Config;
pub use lc::{ChaseSpec, LcSignal, LcSpec, ServiceKind};

use crate::error::BenchError;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::{Path, PathBuf};

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

/// The clock of a page the harness creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PageClock {
    /// TSC where this machine has an invariant one, else `CLOCK_MONOTONIC`.
    Auto,
    /// `CLOCK_MONOTONIC` nanoseconds.
    Monotonic,
}

/// A whole experiment. Every field has a default, so an empty file (or no
/// file) is the default sweep; unknown keys are errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchSpec {
    /// Configurations to run (`lc_alone` is always run: it is the baseline).
    pub configs: Vec<Config>,
    /// Batch kernels; every batch configuration runs once per kernel.
    pub kernels: Vec<KernelKind>,
    /// Batch programs (`xz`, `stress-ng`, `7zz`: unmodified, they run every
    /// configuration that needs no checks; `lucene-index`, the Java batch
    /// job, checks and runs them all), once per configuration.
    pub programs: Vec<ProgramKind>,
    /// Offered loads, requests per second; empty = derived from
    /// `rps_fractions` of the LC service's capacity measured alone.
    pub rps: Vec<f64>,
    /// With `rps` empty: loads as fractions of the LC service's capacity
    /// alone under open-loop load (1 / its mean service time measured by a
    /// probe invocation at 30% of the back-to-back capacity).
    pub rps_fractions: Vec<f64>,
    /// Measured time per invocation, s (warm-up excluded), at the least:
    /// see `min_requests`.
    pub duration_s: f64,
    /// Requests every invocation's measured window holds at the least: at a
    /// load where `duration_s` would hold fewer, the window is lengthened to
    /// `min_requests / rps` ([`BenchSpec::window_s`]). A round's p99 is its
    /// requests' 99th percentile: of 400 requests, the 4th slowest, which
    /// two rounds of one configuration rarely agree on; of 1000, the 10th.
    /// 0: every window is `duration_s`.
    pub min_requests: u32,
    /// Warm-up per invocation, s (requests sent, not recorded).
    pub warmup_s: f64,
    /// Longest wait for outstanding responses after an invocation, s;
    /// requests still missing count as errors, with latency up to the end.
    pub drain_s: f64,
    /// Invocations per point (rounds; the summary takes medians over them).
    pub reps: u32,
    /// The cap on rounds per point. After `reps` rounds at every load, a
    /// judged point whose verdict is open (the interval of its paired ratio
    /// straddles the limit) gets more rounds — LC alone and the open points
    /// of that load, interleaved — until its verdict concludes, it has
    /// `max_reps` rounds, or the added rounds have taken
    /// `added_reps_budget_s`. `max_reps = reps` adds none.
    pub max_reps: u32,
    /// Wall time all added rounds together may take, s (the other cap).
    pub added_reps_budget_s: f64,
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
    /// p99 latency SLO, ms; `auto` = the highest LC-alone p99 at loads up to
    /// the knee of its p99-vs-load curve, in this run (see `docs/harness.md`).
    pub slo_p99_ms: Auto,
    /// Co-running budget of the budget policies, µs; `auto` = SLO headroom
    /// at each load (pre-sweep SLO − LC-alone p99 there, at least 0), as the
    /// paper.
    pub budget_us: Auto,
    /// A configuration keeps LC alone's p99 at a load if its paired p99
    /// ratio to LC alone (median over rounds) is at most `1 + this / 100`.
    pub verdict_tolerance_pct: f64,
    /// Real-time (`SCHED_FIFO`) priority of the load generator and the
    /// built-in service's dispatcher threads, so batch work at the LC's
    /// priority on their CPU cannot delay sends and dispatch; 0 = normal
    /// priority. Needs root (or an RLIMIT_RTPRIO); without it the run says so.
    pub generator_fifo_priority: u8,
    /// TCP port of the LC service on 127.0.0.1; 0 = any free port.
    pub port: u16,
    /// Lane pairing (`request:batch`, e.g. `0:1`); default: SMT siblings or
    /// consecutive CPUs.
    pub pairs: Option<String>,
    /// Attach to this existing signal page (name in /dev/shm or a path)
    /// instead of creating a private one.
    pub page: Option<String>,
    /// The clock of the page the harness creates: `auto` (TSC where
    /// invariant) or `monotonic` (needed when a writer cannot read the TSC:
    /// the Java binding).
    pub page_clock: PageClock,
    /// Seed of the request set, its shuffles and the arrival times.
    pub seed: u64,
    /// Directory for `<timestamp>/` result directories.
    pub out_dir: PathBuf,
    /// Keep each invocation's latency histogram (HdrHistogram V2, base64)
    /// in the result file.
    pub keep_histograms: bool,
    /// The LC service.
    pub lc: LcSpec,
    /// The work requests' demand.
    pub demand: DemandSpec,
    /// The built-in chase service.
    pub chase: ChaseSpec,
    /// The batch side.
    pub batch: BatchSpec,
    /// cgroups.
    pub cgroup: CgroupSpec,
}

impl Default for BenchSpec {
    fn default() -> Self {
        BenchSpec {
            configs: Config::ALL
                .into_iter()
                .filter(|c| c.in_default_sweep())
                .collect(),
            kernels: vec![KernelKind::Stream, KernelKind::Matrix],
            programs: Vec::new(),
            rps: Vec::new(),
            rps_fractions: vec![0.25, 0.5, 0.75],
            duration_s: 1.0,
            min_requests: 1000,
            warmup_s: 0.1,
            drain_s: 1.0,
            reps: 3,
            max_reps: 20,
            added_reps_budget_s: 180.0,
            disturbed_lanes: 0.05,
            disturbed_retries: 2,
            rerun_budget_s: 60.0,
            slo_p99_ms: Auto::Auto,
            budget_us: Auto::Auto,
            verdict_tolerance_pct: 10.0,
            generator_fifo_priority: 10,
            port: 0,
            pairs: None,
            page: None,
            page_clock: PageClock::Auto,
            seed: 1,
            out_dir: PathBuf::from("results"),
            keep_histograms: true,
            lc: LcSpec::default(),
            demand: DemandSpec::default(),
            chase: ChaseSpec::default(),
            batch: BatchSpec::default(),
            cgroup: CgroupSpec::default(),
        }
    }
}

fn positive(what: &str, v: f64) -> Result<(), BenchError> {
    Ok(elfen_load::demand::positive(what, v)?)
}

impl BenchSpec {
    /// Reads a TOML spec; missing keys take their defaults.
    pub fn from_toml(text: &str) -> Result<BenchSpec, BenchError> {
        toml::from_str(text).map_err(|e| BenchError::Config(e.to_string()))
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

    /// The measured window of an invocation at `rps`, s: `duration_s`, or
    /// longer where that would hold fewer than `min_requests` requests.
    pub fn window_s(&self, rps: f64) -> f64 {
        if rps > 0.0 && self.min_requests > 0 {
            self.duration_s.max(f64::from(self.min_requests) / rps)
        } else {
            self.duration_s
        }
    }

    /// Puts `lc_alone` first (it is always run) and drops duplicates,
    /// keeping the order given.
    pub fn normalize(&mut self) {
        let mut seen = vec![Config::LcAlone];
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
        let mut ps: Vec<ProgramKind> = Vec::new();
        for p in &self.programs {
            if !ps.contains(p) {
                ps.push(*p);
            }
        }
        self.programs = ps;
    }

    /// Checks that every batch program is installed (at run time, before
    /// any load; [`BenchSpec::validate`] checks the file alone).
    pub fn check_programs(&self) -> Result<(), BenchError> {
        for p in &self.programs {
            p.check()?;
        }
        Ok(())
    }

    /// Whether a Java program writes the page (the Lucene service or the
    /// Java batch job): Java cannot read the TSC, so the page counts
    /// `CLOCK_MONOTONIC` ns whatever `page_clock` says.
    pub fn has_java_writer(&self) -> bool {
        self.lc.is_java() || self.programs.contains(&ProgramKind::LuceneIndex)
    }

    /// Every batch program: the kernels, then the unmodified programs.
    pub fn batches(&self) -> Vec<BatchProgram> {
        self.kernels
            .iter()
            .map(|&k| BatchProgram::Kernel(k))
            .chain(self.programs.iter().map(|&p| BatchProgram::Program(p)))
            .collect()
    }

    /// The configurations that run batch work.
    pub fn batch_configs(&self) -> Vec<Config> {
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
                "configs is empty; choose from {}",
                harness_config_names()
            )));
        }
        if let Some(c) = self.configs.iter().find(|c| !c.in_harness()) {
            return Err(BenchError::Config(format!(
                "configuration {c} is not run by the harness (the simulator models it: elfen sim); \
                 choose from {}",
                harness_config_names()
            )));
        }
        if self.configs.iter().any(|c| c.has_batch()) && self.batches().is_empty() {
            return Err(BenchError::Config(format!(
                "kernels and programs are empty but batch configurations are selected; choose \
                 kernels from {KERNEL_NAMES} or programs from xz, stress-ng, 7zz, lucene-index"
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
        if self.max_reps < self.reps {
            return Err(BenchError::Config(format!(
                "max_reps ({}) must be at least reps ({}): it caps the rounds added to open \
                 verdicts (equal: none added)",
                self.max_reps, self.reps
            )));
        }
        if !(self.added_reps_budget_s.is_finite() && self.added_reps_budget_s >= 0.0) {
            return Err(BenchError::Config(format!(
                "added_reps_budget_s must be >= 0, got {}",
                self.added_reps_budget_s
            )));
        }
        positive("disturbed_lanes", self.disturbed_lanes)?;
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
        if !(self.verdict_tolerance_pct.is_finite() && self.verdict_tolerance_pct >= 0.0) {
            return Err(BenchError::Config(format!(
                "verdict_tolerance_pct must be >= 0, got {}",
                self.verdict_tolerance_pct
            )));
        }
        if self.generator_fifo_priority > 99 {
            return Err(BenchError::Config(format!(
                "generator_fifo_priority must be 0 (normal) or 1..=99, got {}",
                self.generator_fifo_priority
            )));
        }
        self.lc.validate()?;
        self.demand.validate()?;
        self.chase.validate()?;
        self.batch.validate()
    }
}

/// The configurations the harness runs, comma-separated.
pub fn harness_config_names() -> String {
    Config::ALL
        .into_iter()
        .filter(|c| c.in_harness())
        .map(Config::name)
        .collect::<Vec<_>>()
        .join(", ")
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
mod tests;
