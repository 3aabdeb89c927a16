//! The record: a result file's points and, per point, one [`Rep`] per
//! invocation, with the derived [`Summary`] (medians and spread) beside it.

use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::{Config, READS, ResultsError, Run, SCHEMA};

/// Where the figures of a file come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Measured on a real machine by the harness.
    Measured,
    /// Produced by the discrete-event simulator.
    Simulated,
}

impl Source {
    /// `measured` or `simulated`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Simulated => "simulated",
        }
    }
}

/// A whole result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultFile {
    /// [`SCHEMA`] (a file read with an older tag of [`READS`] keeps it).
    pub schema: String,
    /// Measured or simulated.
    pub source: Source,
    /// Seconds since the Unix epoch when the run started.
    pub created_unix_s: u64,
    /// The command line that produced the file.
    pub command: String,
    /// The experiment as run (the harness's or simulator's own spec, every
    /// default filled in) — provenance, to re-run it; studies read `run`.
    pub spec: serde_json::Value,
    /// The machine (`elfen_topo::SystemInfo`) or, for simulations, the model
    /// parameters.
    pub system: serde_json::Value,
    /// What a measured sweep resolved (`None` in simulated files).
    #[serde(default)]
    pub run: Option<Run>,
    /// The LC service's demand: service times of the request set run alone,
    /// back to back, µs (the paper's Figure 1).
    #[serde(default)]
    pub demand: Option<Distribution>,
    /// Every finished point, in the order run.
    pub points: Vec<Point>,
}

impl ResultFile {
    /// An empty result file for a run starting now.
    pub fn new(
        source: Source,
        command: String,
        spec: serde_json::Value,
        system: serde_json::Value,
    ) -> Self {
        ResultFile {
            schema: SCHEMA.to_string(),
            source,
            created_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            command,
            spec,
            system,
            run: None,
            demand: None,
            points: Vec::new(),
        }
    }

    /// Reads and checks a result file.
    pub fn load(path: &Path) -> Result<ResultFile, ResultsError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ResultsError::Io {
            path: p.clone(),
            source,
        })?;
        ResultFile::parse(&text, &p)
    }

    /// Checks and reads the text of a result file (`path` names it in
    /// errors).
    pub fn parse(text: &str, path: &str) -> Result<ResultFile, ResultsError> {
        let p = path.to_string();
        // Check the tag first so an old file gets a clear message rather
        // than a missing-field error.
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|source| ResultsError::Parse {
                path: p.clone(),
                source,
            })?;
        let found = v.get("schema").and_then(|s| s.as_str()).unwrap_or("");
        if found != SCHEMA && !READS.contains(&found) {
            return Err(ResultsError::Schema {
                path: p,
                found: found.to_string(),
            });
        }
        let f: ResultFile = serde_json::from_value(v).map_err(|source| ResultsError::Parse {
            path: p.clone(),
            source,
        })?;
        f.check()
            .map_err(|what| ResultsError::Invalid { path: p, what })?;
        Ok(f)
    }

    /// What JSON cannot say but the studies rely on: every distribution
    /// well formed ([`Distribution::check`]). The first problem, named.
    fn check(&self) -> Result<(), String> {
        if let Some(d) = &self.demand {
            d.check().map_err(|e| format!("demand: {e}"))?;
        }
        for (i, p) in self.points.iter().enumerate() {
            for (what, d) in [("idle_periods", &p.idle_periods), ("service", &p.service)] {
                if let Some(d) = d {
                    d.check().map_err(|e| format!("points[{i}].{what}: {e}"))?;
                }
            }
        }
        Ok(())
    }

    /// Writes the file atomically (temp file in the same directory, then
    /// rename), creating the directory if needed.
    pub fn save(&self, path: &Path) -> Result<(), ResultsError> {
        save_json(self, path).map_err(|source| ResultsError::Io {
            path: path.display().to_string(),
            source,
        })
    }
}

/// Writes `value` as pretty JSON atomically — a temp file in the same
/// directory, then a rename, so an interrupted write never leaves half a
/// file — creating the directory if needed. Every JSON file elfen writes
/// (result files, micro-benchmark and measurement reports) goes through it.
pub fn save_json<T: Serialize + ?Sized>(value: &T, path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// One (configuration, batch program, load) point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// The configuration.
    pub config: Config,
    /// A series name when one file holds several variants of a
    /// configuration (e.g. the simulator's blind isolation with B = 1 and
    /// B = 2); `None`: the configuration's name.
    #[serde(default)]
    pub label: Option<String>,
    /// The batch program co-running (`stream`, `matrix`, `xz`, …); `None`
    /// when no batch work runs.
    pub batch: Option<String>,
    /// The offered load, requests per second.
    pub rps_target: f64,
    /// Raw record: one entry per invocation.
    pub reps: Vec<Rep>,
    /// Derived: medians and spread over `reps`.
    pub summary: Summary,
    /// The request lane's idle periods, µs, with their summed lengths (the
    /// paper's Figure 5), where the service records them.
    #[serde(default)]
    pub idle_periods: Option<Distribution>,
    /// Service times of the measured requests, µs.
    #[serde(default)]
    pub service: Option<Distribution>,
}

impl Point {
    /// The series name: the label, or the configuration's name.
    pub fn series_name(&self) -> &str {
        self.label.as_deref().unwrap_or(self.config.name())
    }
}

/// What one invocation of a point measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rep {
    /// The round (1-based) this invocation belongs to: every configuration's
    /// invocation of a round sent the same requests at the same intended
    /// times (common random numbers), so same-round ratios pair up. `None`
    /// outside rounds.
    #[serde(default)]
    pub round: Option<u32>,
    /// Requests per second actually sent during the measured window.
    pub rps_achieved: f64,
    /// Requests completed in the measured window (warm-up excluded).
    pub requests: u64,
    /// Requests that failed (error status, connection closed) or never
    /// completed.
    pub errors: u64,
    /// Latency from each request's intended send time, microseconds.
    pub latency_us: Percentiles,
    /// Lane utilization (one fully busy lane = 1.0).
    pub utilization: Utilization,
    /// Batch work units per second (`None` without batch work).
    pub batch_units_per_s: Option<f64>,
    /// Batch progress relative to the same batch program running alone
    /// (1.0 = as fast as alone).
    pub batch_progress: Option<f64>,
    /// Batch naps per second (Elfen configurations).
    pub naps_per_s: Option<f64>,
    /// Batch wakes per second (Elfen configurations).
    pub wakes_per_s: Option<f64>,
    /// The co-running budget the budget policies had, µs.
    #[serde(default)]
    pub budget_us: Option<f64>,
    /// The latency histogram, HdrHistogram V2 + DEFLATE, base64, when kept.
    #[serde(default)]
    pub histogram: Option<String>,
    /// What only a measurement has (the harness).
    #[serde(default)]
    pub measured: Option<MeasuredRep>,
    /// What only a simulation has.
    #[serde(default)]
    pub simulated: Option<SimulatedRep>,
}

/// The harness's view of one invocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredRep {
    /// The measured window, s.
    pub window_s: f64,
    /// Requests sent in total (warm-up included).
    pub sent: u64,
    /// Lanes' worth of CPU the harness's own threads (generator,
    /// dispatcher) used.
    pub harness_util: f64,
    /// Lanes' worth of CPU other processes used during the window.
    pub foreign_util: f64,
    /// Lanes' worth of CPU the host stole during the window.
    pub steal_util: f64,
    /// How often this invocation was run again because it was disturbed.
    pub disturbed_retries: u32,
    /// Connections the service closed during the invocation.
    #[serde(default)]
    pub connections_closed: u32,
    /// Where measured requests' latency went, when the service reports its
    /// service and queueing times.
    #[serde(default)]
    pub breakdown: Option<LatencyBreakdown>,
    /// How batch execution time was bounded.
    #[serde(default)]
    pub batch: Option<BatchTimes>,
    /// The daemon's threads the harness runs in its process (the kernel
    /// signal's writer; the guards, freezer or blind isolation of the
    /// daemon's modes), when any ran.
    #[serde(default)]
    pub daemon: Option<DaemonTimes>,
}

/// The CPU the daemon's own threads took in a window, as lanes' worth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonTimes {
    /// Their on-CPU time (schedstat), all of it.
    pub on_cpu_util: f64,
    /// The wall time the guards (and the writer holding its lane) spent
    /// occupying their lanes while the LC was busy: the protection itself,
    /// not the daemon's work.
    pub occupied_util: f64,
    /// The wall time they held their lanes through the LC's idle gaps
    /// (lane time the batch did not get). The daemon's own work is
    /// `on_cpu_util` less `occupied_util` and this.
    #[serde(default)]
    pub held_util: f64,
}

impl DaemonTimes {
    /// The daemon's own work, lanes' worth: its CPU less the occupation
    /// and the hold.
    pub fn own_util(&self) -> f64 {
        (self.on_cpu_util - self.occupied_util - self.held_util).max(0.0)
    }
}

impl MeasuredRep {
    /// Lanes' worth of CPU others (processes and the host) took.
    pub fn disturbance(&self) -> f64 {
        self.foreign_util + self.steal_util
    }
}

/// A latency split into the service's own times and the rest, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyBreakdown {
    /// Service time (the worker's begin to end), median.
    pub service_p50_us: f64,
    /// Service time, p99.
    pub service_p99_us: f64,
    /// Time queued in the service before begin, p99.
    pub queued_p99_us: f64,
    /// The rest (send lateness, network, dispatch, response delivery), median.
    pub outside_p50_us: f64,
    /// The rest, p99.
    pub outside_p99_us: f64,
}

/// Batch execution time in a window, as lanes' worth, with the bounds of
/// its estimate (see the harness's utilization method).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchTimes {
    /// Lower bound of batch execution.
    pub util_low: f64,
    /// Upper bound.
    pub util_high: f64,
    /// Batch threads' on-CPU time (schedstat).
    pub on_cpu_util: f64,
    /// Batch threads' run-queue wait (schedstat).
    pub wait_util: f64,
    /// Of execution, time co-running with a request (Elfen budgets).
    pub corun_util: Option<f64>,
    /// Time napping (Elfen).
    pub nap_util: Option<f64>,
}

/// The simulator's view of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulatedRep {
    /// Events processed.
    pub events: u64,
    /// Worker cores utilization is counted over.
    pub worker_cores: u32,
    /// Batch threads.
    pub batch_threads: u32,
    /// Summed lane utilization (not divided by cores).
    pub utilization_lane_sum: f64,
    /// Largest co-running time one request saw, µs.
    pub corun_per_request_max_us: f64,
    /// Mean co-running time per request, µs.
    pub corun_per_request_mean_us: f64,
    /// The batch kind's slowdown of a co-running LC request.
    pub batch_lc_slowdown: Option<f64>,
    /// The batch kind's progress rate while co-running.
    pub batch_corun_rate: Option<f64>,
    /// Fan-out: leaves per request, and per-leaf latency.
    pub fanout: Option<FanoutRep>,
}

/// Per-leaf latency of a fan-out run, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FanoutRep {
    /// Leaves a request fans out to.
    pub leaves: u32,
    /// Mean over leaves of the leaf p50.
    pub leaf_p50_us_mean: f64,
    /// Mean over leaves of the leaf p99.
    pub leaf_p99_us_mean: f64,
    /// Largest leaf p99.
    pub leaf_p99_us_max: f64,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// Utilization as the Elfen paper defines it: the sum over lanes of the
/// fraction of time each is busy, so one fully busy lane is 1.0 (and a fully
/// busy 2-way SMT core is 2.0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Utilization {
    /// Busy time of LC requests.
    pub lc: f64,
    /// Busy time of batch work.
    pub batch: f64,
    /// `lc + batch`.
    pub total: f64,
}

/// A median with the spread (min and max) over repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stat {
    /// The median.
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Stat {
    /// No value.
    pub const NAN: Stat = Stat {
        median: f64::NAN,
        min: f64::NAN,
        max: f64::NAN,
    };

    /// Median, min and max of `xs` (NaNs ignored); `None` if nothing is left.
    pub fn of(xs: &[f64]) -> Option<Stat> {
        let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stat {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// Latency percentiles over reps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyStats {
    /// p50.
    pub p50: Stat,
    /// p95.
    pub p95: Stat,
    /// p99.
    pub p99: Stat,
    /// p99.9.
    pub p999: Stat,
    /// Maximum.
    pub max: Stat,
    /// Mean.
    pub mean: Stat,
}

/// Utilization over reps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationStats {
    /// LC.
    pub lc: Stat,
    /// Batch.
    pub batch: Stat,
    /// Total.
    pub total: Stat,
}

/// Derived figures of a point: each a [`Stat`] over its reps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Achieved load.
    pub rps_achieved: Stat,
    /// Latency percentiles, µs.
    pub latency_us: LatencyStats,
    /// Utilization.
    pub utilization: UtilizationStats,
    /// Batch progress relative to alone.
    pub batch_progress: Option<Stat>,
    /// Naps per second.
    pub naps_per_s: Option<Stat>,
    /// Wakes per second.
    pub wakes_per_s: Option<Stat>,
    /// The daemon's own CPU, lanes' worth ([`DaemonTimes::on_cpu_util`]),
    /// where its threads ran.
    #[serde(default)]
    pub daemon_util: Option<Stat>,
    /// Of it, the daemon's own work ([`DaemonTimes::own_util`]).
    #[serde(default)]
    pub daemon_own_util: Option<Stat>,
    /// The lane time its guards held through the LC's idle gaps
    /// ([`DaemonTimes::held_util`]).
    #[serde(default)]
    pub daemon_held_util: Option<Stat>,
    /// Errors summed over reps.
    #[serde(default)]
    pub errors: u64,
    /// The SLO applied (p99 latency bound, µs), if any.
    pub slo_p99_us: Option<f64>,
    /// Whether the median p99 meets the SLO.
    pub slo_met: Option<bool>,
}

impl Summary {
    /// Summarizes `reps` against an optional p99 SLO (µs).
    pub fn of(reps: &[Rep], slo_p99_us: Option<f64>) -> Summary {
        let stat = |f: &dyn Fn(&Rep) -> f64| {
            Stat::of(&reps.iter().map(f).collect::<Vec<_>>()).unwrap_or(Stat::NAN)
        };
        let opt = |f: &dyn Fn(&Rep) -> Option<f64>| {
            Stat::of(&reps.iter().filter_map(f).collect::<Vec<_>>())
        };
        let latency_us = LatencyStats {
            p50: stat(&|r| r.latency_us.p50),
            p95: stat(&|r| r.latency_us.p95),
            p99: stat(&|r| r.latency_us.p99),
            p999: stat(&|r| r.latency_us.p999),
            max: stat(&|r| r.latency_us.max),
            mean: stat(&|r| r.latency_us.mean),
        };
        let mut s = Summary {
            rps_achieved: stat(&|r| r.rps_achieved),
            latency_us,
            utilization: UtilizationStats {
                lc: stat(&|r| r.utilization.lc),
                batch: stat(&|r| r.utilization.batch),
                total: stat(&|r| r.utilization.total),
            },
            batch_progress: opt(&|r| r.batch_progress),
            naps_per_s: opt(&|r| r.naps_per_s),
            wakes_per_s: opt(&|r| r.wakes_per_s),
            daemon_util: opt(&|r| {
                r.measured
                    .as_ref()
                    .and_then(|m| m.daemon)
                    .map(|d| d.on_cpu_util)
            }),
            daemon_own_util: opt(&|r| {
                r.measured
                    .as_ref()
                    .and_then(|m| m.daemon)
                    .map(|d| d.own_util())
            }),
            daemon_held_util: opt(&|r| {
                r.measured
                    .as_ref()
                    .and_then(|m| m.daemon)
                    .map(|d| d.held_util)
            }),
            errors: reps.iter().map(|r| r.errors).sum(),
            slo_p99_us: None,
            slo_met: None,
        };
        s.judge(slo_p99_us);
        s
    }

    /// Judges the median p99 against `slo_p99_us` (µs), replacing any
    /// earlier verdict.
    pub fn judge(&mut self, slo_p99_us: Option<f64>) {
        let p99 = self.latency_us.p99.median;
        self.slo_p99_us = slo_p99_us;
        self.slo_met = slo_p99_us.filter(|_| !p99.is_nan()).map(|s| p99 <= s);
    }
}

/// A histogram over explicit bucket edges: `counts[i]` counts values in
/// `[edges[i], edges[i+1])`, so `edges.len() == counts.len() + 1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Distribution {
    /// Unit of the edges, e.g. `"us"`.
    pub unit: String,
    /// Bucket edges, increasing.
    pub edges: Vec<f64>,
    /// Count per bucket.
    pub counts: Vec<u64>,
    /// Sum of the values per bucket (so "fraction of total time" plots such
    /// as the paper's Figure 5 can be drawn); empty when not kept.
    #[serde(default)]
    pub sums: Vec<f64>,
}

impl Distribution {
    /// An empty distribution with `per_decade` log-spaced buckets from `lo`
    /// to `hi` (both > 0), plus the edge values themselves.
    pub fn log_buckets(unit: &str, lo: f64, hi: f64, per_decade: u32) -> Distribution {
        assert!(lo > 0.0 && hi > lo && per_decade > 0, "bad log buckets");
        let step = 10f64.powf(1.0 / f64::from(per_decade));
        let mut edges = vec![lo];
        while *edges.last().expect("non-empty") < hi {
            let next = edges.last().expect("non-empty") * step;
            edges.push(next);
        }
        let n = edges.len() - 1;
        Distribution {
            unit: unit.to_string(),
            edges,
            counts: vec![0; n],
            sums: vec![0.0; n],
        }
    }

    /// Whether the buckets are well formed: `counts.len() + 1` finite,
    /// ascending edges, `sums` empty or one per bucket, and a total that
    /// fits in a `u64`. The reason when not.
    pub fn check(&self) -> Result<(), String> {
        if self.edges.len() != self.counts.len() + 1 {
            return Err(format!(
                "{} edges for {} buckets (one more edge than buckets)",
                self.edges.len(),
                self.counts.len()
            ));
        }
        if self.edges.iter().any(|e| !e.is_finite()) || self.edges.windows(2).any(|w| w[0] >= w[1])
        {
            return Err("edges must be finite and ascending".into());
        }
        if !self.sums.is_empty() && self.sums.len() != self.counts.len() {
            return Err(format!(
                "{} sums for {} buckets",
                self.sums.len(),
                self.counts.len()
            ));
        }
        if self
            .counts
            .iter()
            .try_fold(0u64, |a, c| a.checked_add(*c))
            .is_none()
        {
            return Err("the counts add up to more than 2^64".into());
        }
        Ok(())
    }

    /// Adds one value; values outside the edges go to the first or last bucket.
    pub fn record(&mut self, x: f64) {
        let n = self.counts.len().min(self.edges.len().saturating_sub(1));
        if n == 0 {
            return;
        }
        let i = self.edges[..=n].partition_point(|e| *e <= x).clamp(1, n) - 1;
        self.counts[i] = self.counts[i].saturating_add(1);
        if self.sums.len() == n {
            self.sums[i] += x;
        }
    }

    /// Adds `other`'s counts and sums (same edges; otherwise nothing changes
    /// and `false` is returned).
    pub fn merge(&mut self, other: &Distribution) -> bool {
        if self.edges != other.edges {
            return false;
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
        if self.sums.len() == other.sums.len() {
            for (a, b) in self.sums.iter_mut().zip(&other.sums) {
                *a += b;
            }
        }
        true
    }

    /// Number of values recorded (saturating).
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, c| a.saturating_add(*c))
    }

    /// An approximate quantile `q` in `[0, 1]` (the upper edge of the bucket
    /// that reaches it); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let target = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(*c);
            if seen >= target {
                return self.edges.get(i + 1).or(self.edges.last()).copied();
            }
        }
        self.edges.last().copied()
    }
}
