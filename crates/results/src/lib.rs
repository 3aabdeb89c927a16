//! # elfen-results — the result file every experiment writes
//!
//! One JSON file per run, in the spirit of resctl-bench: the **spec** that
//! was run, the **system** it ran on, the **raw record** (one [`Rep`] per
//! invocation of each point) and the **derived** summary (medians and spread
//! over those invocations). `elfen report` regenerates tables and plots from
//! these files alone, so a result can be re-studied without re-running, and
//! measured (`elfen bench`) and simulated (`elfen sim`) curves share one
//! format and can be plotted together.
//!
//! A sweep writes its file after every finished point ([`ResultFile::save`]
//! is atomic: temp file + rename), so an interrupted run keeps every point
//! it finished.
#![deny(missing_docs)]

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The schema tag at the top of every result file; bump on incompatible change.
pub const SCHEMA: &str = "elfen-result/1";

/// Errors reading or writing result files.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// The file could not be read or written.
    #[error("cannot read or write {path}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a valid result file.
    #[error("{path}: not an elfen result file")]
    Parse {
        /// The file.
        path: String,
        /// The JSON error (names line and column).
        source: serde_json::Error,
    },
    /// The file has another schema tag.
    #[error("{path}: schema is {found:?}, this build reads {SCHEMA:?}")]
    Schema {
        /// The file.
        path: String,
        /// The tag found in the file.
        found: String,
    },
}

/// Where the figures of a file come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Measured on a real machine by the harness.
    Measured,
    /// Produced by the discrete-event simulator.
    Simulated,
}

/// A whole result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultFile {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Measured or simulated.
    pub source: Source,
    /// Seconds since the Unix epoch when the run started.
    pub created_unix_s: u64,
    /// The command line that produced the file.
    pub command: String,
    /// The experiment as run (the harness's or simulator's own spec type,
    /// with every default filled in).
    pub spec: serde_json::Value,
    /// The machine (`elfen_topo::SystemInfo`) or, for simulations, the model
    /// parameters.
    pub system: serde_json::Value,
    /// Distributions that describe the whole run (e.g. `"demand"`, the LC
    /// service's request demand measured alone, the paper's Figure 1).
    #[serde(default)]
    pub distributions: BTreeMap<String, Distribution>,
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
            distributions: BTreeMap::new(),
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
        // Check the tag first so an old file gets a clear message rather
        // than a missing-field error.
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| ResultsError::Parse {
                path: p.clone(),
                source,
            })?;
        let found = v.get("schema").and_then(|s| s.as_str()).unwrap_or("");
        if found != SCHEMA {
            return Err(ResultsError::Schema {
                path: p,
                found: found.to_string(),
            });
        }
        serde_json::from_value(v).map_err(|source| ResultsError::Parse { path: p, source })
    }

    /// Writes the file atomically (temp file in the same directory, then
    /// rename), creating the directory if needed.
    pub fn save(&self, path: &Path) -> Result<(), ResultsError> {
        let io = |source| ResultsError::Io {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
        let text = serde_json::to_string_pretty(self).expect("result files serialize");
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// The points of one configuration and batch kind, in RPS order.
    pub fn series(&self, config: &str, batch: Option<&str>) -> Vec<&Point> {
        let mut v: Vec<&Point> = self
            .points
            .iter()
            .filter(|p| p.config == config && p.batch.as_deref() == batch)
            .collect();
        v.sort_by(|a, b| a.rps_target.total_cmp(&b.rps_target));
        v
    }
}

/// One (configuration, batch kind, load) point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// The configuration, e.g. `lc_alone`, `naive`, `sched_idle`, `cpuset`,
    /// `cfs_quota`, `borrow_idle`, `fixed_budget`, `refresh_budget`,
    /// `dynamic_refresh` (the simulator adds its own baselines).
    pub config: String,
    /// The batch kernel co-running (`stream`, `matrix`, …); `None` when no
    /// batch work runs.
    pub batch: Option<String>,
    /// The offered load, requests per second.
    pub rps_target: f64,
    /// Raw record: one entry per invocation.
    pub reps: Vec<Rep>,
    /// Derived: medians and spread over `reps`.
    pub summary: Summary,
    /// Per-point distributions (e.g. `"idle_periods"`, the request lane's
    /// idle-period lengths, the paper's Figure 5).
    #[serde(default)]
    pub distributions: BTreeMap<String, Distribution>,
}

/// What one invocation of a point measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rep {
    /// Requests per second actually sent during the measured window.
    pub rps_achieved: f64,
    /// Requests completed in the measured window (warm-up excluded).
    pub requests: u64,
    /// Requests that failed or never completed.
    pub errors: u64,
    /// Latency from each request's intended send time, microseconds.
    pub latency_us: Percentiles,
    /// Lane utilization (one fully busy lane = 1.0).
    pub utilization: Utilization,
    /// Batch work units per second (`None` without batch work).
    pub batch_units_per_s: Option<f64>,
    /// Batch progress relative to the same batch kind running alone (1.0 =
    /// as fast as alone).
    pub batch_progress: Option<f64>,
    /// Batch naps per second.
    pub naps_per_s: Option<f64>,
    /// Batch wakes per second.
    pub wakes_per_s: Option<f64>,
    /// The latency histogram, HdrHistogram V2 + DEFLATE, base64, when kept.
    #[serde(default)]
    pub histogram: Option<String>,
    /// Anything else worth keeping, by name (units in the name).
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
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

/// A named numeric field of `T`.
type Field<T> = (&'static str, fn(&T) -> f64);

/// Derived figures of a point: each a [`Stat`] over its reps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Achieved load.
    pub rps_achieved: Stat,
    /// Latency percentiles (µs), by name: `p50`, `p95`, `p99`, `p999`, `max`, `mean`.
    pub latency_us: BTreeMap<String, Stat>,
    /// Utilization, by name: `lc`, `batch`, `total`.
    pub utilization: BTreeMap<String, Stat>,
    /// Batch progress relative to alone.
    pub batch_progress: Option<Stat>,
    /// Naps per second.
    pub naps_per_s: Option<Stat>,
    /// Wakes per second.
    pub wakes_per_s: Option<Stat>,
    /// The SLO applied (p99 latency bound, µs), if any.
    pub slo_p99_us: Option<f64>,
    /// Whether the median p99 meets the SLO.
    pub slo_met: Option<bool>,
}

impl Summary {
    /// Summarizes `reps` against an optional p99 SLO (µs).
    pub fn of(reps: &[Rep], slo_p99_us: Option<f64>) -> Summary {
        let stat = |f: &dyn Fn(&Rep) -> f64| {
            Stat::of(&reps.iter().map(f).collect::<Vec<_>>()).unwrap_or(Stat {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            })
        };
        let opt = |f: &dyn Fn(&Rep) -> Option<f64>| {
            Stat::of(&reps.iter().filter_map(f).collect::<Vec<_>>())
        };
        let mut latency_us = BTreeMap::new();
        let lat: [Field<Percentiles>; 6] = [
            ("p50", |p| p.p50),
            ("p95", |p| p.p95),
            ("p99", |p| p.p99),
            ("p999", |p| p.p999),
            ("max", |p| p.max),
            ("mean", |p| p.mean),
        ];
        for (name, get) in lat {
            latency_us.insert(name.to_string(), stat(&|r| get(&r.latency_us)));
        }
        let mut utilization = BTreeMap::new();
        let util: [Field<Utilization>; 3] = [
            ("lc", |u| u.lc),
            ("batch", |u| u.batch),
            ("total", |u| u.total),
        ];
        for (name, get) in util {
            utilization.insert(name.to_string(), stat(&|r| get(&r.utilization)));
        }
        let p99 = latency_us["p99"].median;
        Summary {
            rps_achieved: stat(&|r| r.rps_achieved),
            latency_us,
            utilization,
            batch_progress: opt(&|r| r.batch_progress),
            naps_per_s: opt(&|r| r.naps_per_s),
            wakes_per_s: opt(&|r| r.wakes_per_s),
            slo_p99_us,
            slo_met: slo_p99_us.filter(|_| !p99.is_nan()).map(|s| p99 <= s),
        }
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

    /// Adds one value; values outside the edges go to the first or last bucket.
    pub fn record(&mut self, x: f64) {
        let n = self.counts.len();
        if n == 0 {
            return;
        }
        let i = self.edges.partition_point(|e| *e <= x).clamp(1, n) - 1;
        self.counts[i] += 1;
        if self.sums.len() == n {
            self.sums[i] += x;
        }
    }

    /// Number of values recorded.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// An approximate quantile `q` in `[0, 1]` (the upper edge of the bucket
    /// that reaches it); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let target = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                return Some(self.edges[i + 1]);
            }
        }
        self.edges.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(p99: f64, total: f64) -> Rep {
        Rep {
            rps_achieved: 100.0,
            requests: 1000,
            errors: 0,
            latency_us: Percentiles {
                p50: 1.0,
                p95: 2.0,
                p99,
                p999: 4.0,
                max: 5.0,
                mean: 1.5,
            },
            utilization: Utilization {
                lc: 0.5,
                batch: total - 0.5,
                total,
            },
            batch_units_per_s: None,
            batch_progress: None,
            naps_per_s: None,
            wakes_per_s: None,
            histogram: None,
            extra: BTreeMap::new(),
        }
    }

    #[test]
    fn stat_is_median_and_spread() {
        assert_eq!(
            Stat::of(&[3.0, 1.0, 2.0]),
            Some(Stat {
                median: 2.0,
                min: 1.0,
                max: 3.0
            })
        );
        assert_eq!(Stat::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Stat::of(&[f64::NAN]), None);
        assert_eq!(Stat::of(&[]), None);
    }

    #[test]
    fn summary_takes_medians_and_judges_the_slo() {
        let reps = vec![rep(10.0, 0.9), rep(30.0, 1.0), rep(20.0, 0.8)];
        let s = Summary::of(&reps, Some(25.0));
        assert_eq!(s.latency_us["p99"].median, 20.0);
        assert_eq!(s.latency_us["p99"].max, 30.0);
        assert_eq!(s.utilization["total"].median, 0.9);
        assert_eq!(s.slo_met, Some(true));
        assert_eq!(Summary::of(&reps, Some(15.0)).slo_met, Some(false));
        assert_eq!(Summary::of(&reps, None).slo_met, None);
        assert_eq!(s.batch_progress, None);
    }

    #[test]
    fn save_load_round_trip_and_schema_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/run.json");
        let mut f = ResultFile::new(
            Source::Measured,
            "elfen bench".into(),
            serde_json::json!({"rps": [100]}),
            serde_json::json!({}),
        );
        let mut reps = vec![rep(10.0, 1.0)];
        reps[0].rps_achieved = 0.1 + 0.2; // not exactly representable in short decimal form
        reps[0].extra.insert("x_us".into(), 1.0 / 3.0);
        f.points.push(Point {
            config: "borrow_idle".into(),
            batch: Some("stream".into()),
            rps_target: 100.0,
            summary: Summary::of(&reps, None),
            reps,
            distributions: BTreeMap::new(),
        });
        f.save(&path).unwrap();
        let g = ResultFile::load(&path).unwrap();
        assert_eq!(
            f, g,
            "floats round-trip exactly (serde_json float_roundtrip)"
        );
        assert_eq!(g.series("borrow_idle", Some("stream")).len(), 1);
        assert!(g.series("borrow_idle", None).is_empty());

        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(SCHEMA, "elfen-result/0");
        std::fs::write(&path, text).unwrap();
        let e = ResultFile::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("elfen-result/0") && e.contains("run.json"),
            "{e}"
        );
        std::fs::write(&path, "{").unwrap();
        assert!(
            ResultFile::load(&path)
                .unwrap_err()
                .to_string()
                .contains("not an elfen result")
        );
        let missing = dir.path().join("nope.json");
        assert!(
            ResultFile::load(&missing)
                .unwrap_err()
                .to_string()
                .contains("nope.json")
        );
    }

    #[test]
    fn distribution_buckets_and_quantiles() {
        let mut d = Distribution::log_buckets("us", 1.0, 1000.0, 10);
        assert_eq!(d.edges.len(), d.counts.len() + 1);
        for x in [0.5, 1.0, 5.0, 50.0, 2e6] {
            d.record(x);
        }
        assert_eq!(d.total(), 5);
        assert_eq!(d.counts[0], 2, "below the range lands in the first bucket");
        assert_eq!(*d.counts.last().unwrap(), 1, "above lands in the last");
        assert!(d.quantile(0.5).unwrap() > 5.0 && d.quantile(0.5).unwrap() < 7.0);
        assert_eq!(
            Distribution::log_buckets("us", 1.0, 10.0, 1).quantile(0.5),
            None
        );
    }
}
