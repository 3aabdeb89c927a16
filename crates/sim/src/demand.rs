//! Request **demand**: how long a request runs on a request lane when nothing
//! co-runs on its core (the paper's Figure 1 is Lucene's demand).
//!
//! A [`DemandSpec`] is what a config says; [`Demand`] is the resolved
//! sampler the engine draws from (an enum, not a trait object, so the hot
//! loop has no dynamic dispatch).

use crate::error::{SimError, invalid, positive};
use elfen_results::{Distribution, ResultFile};
use rand::Rng;
use rand_distr::{Distribution as _, Exp1, LogNormal};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `lucene` preset: a lognormal demand fitted to the paper's one-core
/// Lucene figures. Mean `median * exp(sigma^2 / 2)` = 5.83 ms, so that
/// 120 RPS loads one lane to 70% (Section 2: "request lane utilization is
/// only 70% at 120 RPS"); sigma chosen so that p99 latency of LC alone at
/// 120 RPS is ~100 ms (the SLO wall) — `elfen sim repro` prints both checks
/// and the p99 at 100 RPS (paper: 76 ms).
pub const LUCENE_MEDIAN_US: f64 = 4_062.0;
/// Shape of the `lucene` preset (see [`LUCENE_MEDIAN_US`]).
pub const LUCENE_SIGMA: f64 = 0.85;

/// Demand as written in a config (`[demand]` table, `kind = …`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DemandSpec {
    /// Every request needs exactly `us` microseconds.
    Constant {
        /// Demand, µs.
        us: f64,
    },
    /// Exponential with mean `mean_us` (M/M/1 when arrivals are Poisson).
    Exponential {
        /// Mean demand, µs.
        mean_us: f64,
    },
    /// Lognormal: `median_us * exp(sigma * N(0,1))`.
    Lognormal {
        /// Median demand, µs.
        median_us: f64,
        /// Shape (standard deviation of the log), > 0.
        sigma: f64,
    },
    /// A mixture of two exponentials: with probability `long_fraction` a
    /// request is long (mean `long_mean_us`), otherwise short.
    Bimodal {
        /// Mean of the short mode, µs.
        short_mean_us: f64,
        /// Mean of the long mode, µs.
        long_mean_us: f64,
        /// Probability of the long mode, in [0, 1].
        long_fraction: f64,
    },
    /// The Lucene-like heavy tail of the paper's Figure 1 (a lognormal,
    /// see [`LUCENE_MEDIAN_US`]).
    #[default]
    Lucene,
    /// An empirical demand: a result file whose `distributions["demand"]`
    /// the harness recorded, or a plain JSON `Distribution` (unit `us`,
    /// `ms`, `ns` or `s`). Relative paths are relative to the config file.
    File {
        /// The file.
        path: String,
    },
}

/// A resolved demand sampler (values in nanoseconds).
#[derive(Debug, Clone)]
pub enum Demand {
    /// Constant.
    Constant(u64),
    /// Exponential with this mean, ns.
    Exponential(f64),
    /// Lognormal.
    Lognormal(LogNormal<f64>),
    /// Mixture of two exponentials.
    Bimodal {
        /// Short mean, ns.
        short_ns: f64,
        /// Long mean, ns.
        long_ns: f64,
        /// Probability of long.
        p_long: f64,
    },
    /// Empirical histogram.
    Empirical(Empirical),
}

/// Nanoseconds per unit of a [`Distribution`]'s `unit` (`ns`, `us`/`µs`,
/// `ms`, `s`); `None` for anything else.
pub fn unit_ns(unit: &str) -> Option<f64> {
    match unit {
        "ns" => Some(1.0),
        "us" | "µs" => Some(1e3),
        "ms" => Some(1e6),
        "s" => Some(1e9),
        _ => None,
    }
}

/// An empirical distribution ready for sampling: pick a bucket by its count,
/// then a value uniformly inside it.
#[derive(Debug, Clone)]
pub struct Empirical {
    /// Cumulative counts of the non-empty buckets.
    cum: Vec<u64>,
    /// Lower edge of each non-empty bucket, ns.
    lo_ns: Vec<f64>,
    /// Width of each non-empty bucket, ns.
    width_ns: Vec<f64>,
    /// Mean, ns (bucket sums when recorded, else bucket midpoints).
    mean_ns: f64,
}

impl Empirical {
    /// Builds a sampler from a histogram, checking it; `what` names the source.
    pub fn from_distribution(d: &Distribution, what: &str) -> Result<Empirical, SimError> {
        let bad = |p: String| SimError::File {
            path: what.to_string(),
            problem: p,
        };
        let Some(to_ns) = unit_ns(&d.unit) else {
            return Err(bad(format!(
                "demand unit {:?} is not one of ns, us, ms, s",
                d.unit
            )));
        };
        if d.counts.is_empty() {
            return Err(bad("demand distribution is empty (no buckets)".into()));
        }
        if d.edges.len() != d.counts.len() + 1 {
            return Err(bad(format!(
                "demand distribution has {} edges for {} buckets (need buckets + 1)",
                d.edges.len(),
                d.counts.len()
            )));
        }
        if d.edges.iter().any(|e| !e.is_finite() || *e < 0.0) {
            return Err(bad("demand edges must be finite and >= 0".into()));
        }
        if d.edges.windows(2).any(|w| w[1] <= w[0]) {
            return Err(bad("demand edges must be strictly increasing".into()));
        }
        let total: u64 = d.counts.iter().sum();
        if total == 0 {
            return Err(bad("demand distribution is empty (all counts are 0)".into()));
        }
        let use_sums = d.sums.len() == d.counts.len();
        let (mut cum, mut lo_ns, mut width_ns) = (Vec::new(), Vec::new(), Vec::new());
        let (mut acc, mut sum_ns) = (0u64, 0.0f64);
        for (i, &c) in d.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let (lo, hi) = (d.edges[i] * to_ns, d.edges[i + 1] * to_ns);
            acc += c;
            cum.push(acc);
            lo_ns.push(lo);
            width_ns.push(hi - lo);
            sum_ns += if use_sums {
                d.sums[i] * to_ns
            } else {
                c as f64 * (lo + hi) / 2.0
            };
        }
        Ok(Empirical {
            cum,
            lo_ns,
            width_ns,
            mean_ns: sum_ns / total as f64,
        })
    }

    /// The recorded mean, ns (bucket sums when recorded, else bucket
    /// midpoints).
    pub fn mean_ns(&self) -> f64 {
        self.mean_ns
    }

    /// The same distribution with `add_ns` added to every value.
    pub fn shifted(&self, add_ns: f64) -> Empirical {
        Empirical {
            cum: self.cum.clone(),
            lo_ns: self.lo_ns.iter().map(|lo| lo + add_ns).collect(),
            width_ns: self.width_ns.clone(),
            mean_ns: self.mean_ns + add_ns,
        }
    }

    /// The mean of what the sampler draws (bucket midpoints weighted by
    /// count), ns: differs from the recorded mean (bucket sums) only by
    /// where values sit inside their buckets.
    pub fn sampled_mean_ns(&self) -> f64 {
        let mut prev = 0u64;
        let mut sum = 0.0;
        for ((c, lo), w) in self.cum.iter().zip(&self.lo_ns).zip(&self.width_ns) {
            sum += (c - prev) as f64 * (lo + w / 2.0);
            prev = *c;
        }
        sum / prev.max(1) as f64
    }

    #[inline]
    fn sample<R: Rng>(&self, rng: &mut R) -> f64 {
        let total = *self.cum.last().expect("checked non-empty");
        let u = rng.random_range(0..total);
        let i = self.cum.partition_point(|c| *c <= u);
        self.lo_ns[i] + self.width_ns[i] * rng.random::<f64>()
    }
}

impl DemandSpec {
    /// Checks the parameters and builds the sampler. `base` is the directory
    /// relative `path`s are resolved against.
    pub fn resolve(&self, base: &Path) -> Result<Demand, SimError> {
        Ok(match self {
            DemandSpec::Constant { us } => {
                Demand::Constant((positive("demand.us", *us)? * 1e3).round().max(1.0) as u64)
            }
            DemandSpec::Exponential { mean_us } => {
                Demand::Exponential(positive("demand.mean_us", *mean_us)? * 1e3)
            }
            DemandSpec::Lognormal { median_us, sigma } => lognormal(
                positive("demand.median_us", *median_us)?,
                positive("demand.sigma", *sigma)?,
            ),
            DemandSpec::Bimodal {
                short_mean_us,
                long_mean_us,
                long_fraction,
            } => {
                let p = *long_fraction;
                if !(0.0..=1.0).contains(&p) {
                    return Err(invalid(
                        "demand.long_fraction",
                        format!("must be in [0, 1], got {p}"),
                    ));
                }
                Demand::Bimodal {
                    short_ns: positive("demand.short_mean_us", *short_mean_us)? * 1e3,
                    long_ns: positive("demand.long_mean_us", *long_mean_us)? * 1e3,
                    p_long: p,
                }
            }
            DemandSpec::Lucene => lognormal(LUCENE_MEDIAN_US, LUCENE_SIGMA),
            DemandSpec::File { path } => {
                if path.trim().is_empty() {
                    return Err(invalid("demand.path", "must name a file, got \"\""));
                }
                let p = base.join(path);
                Demand::Empirical(load_empirical(&p)?)
            }
        })
    }
}

fn lognormal(median_us: f64, sigma: f64) -> Demand {
    Demand::Lognormal(LogNormal::new((median_us * 1e3).ln(), sigma).expect("checked parameters"))
}

/// Reads an empirical demand from a result file (`distributions["demand"]`)
/// or a plain JSON `Distribution`.
pub fn load_empirical(path: &Path) -> Result<Empirical, SimError> {
    let (what, text) = crate::error::read_text(path)?;
    if text.trim().is_empty() {
        return Err(SimError::File {
            path: what,
            problem: "demand file is empty".into(),
        });
    }
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| SimError::File {
        path: what.clone(),
        problem: format!("not JSON: {e}"),
    })?;
    if v.get("schema").is_some() {
        let f = ResultFile::load(path)?;
        let d = f.demand.as_ref().ok_or_else(|| SimError::File {
            path: what.clone(),
            problem: "result file has no demand (the LC service's demand measured alone)".into(),
        })?;
        return Empirical::from_distribution(d, &what);
    }
    let d: Distribution = serde_json::from_value(v).map_err(|e| SimError::File {
        path: what.clone(),
        problem: format!("neither a result file nor a Distribution {{unit, edges, counts}}: {e}"),
    })?;
    Empirical::from_distribution(&d, &what)
}

impl Demand {
    /// One demand in nanoseconds (at least 1).
    #[inline]
    pub fn sample_ns<R: Rng>(&self, rng: &mut R) -> u64 {
        let x = match self {
            Demand::Constant(ns) => return *ns,
            Demand::Exponential(mean) => {
                let e: f64 = Exp1.sample(rng);
                e * mean
            }
            Demand::Lognormal(d) => d.sample(rng),
            Demand::Bimodal {
                short_ns,
                long_ns,
                p_long,
            } => {
                let e: f64 = Exp1.sample(rng);
                if rng.random::<f64>() < *p_long {
                    e * long_ns
                } else {
                    e * short_ns
                }
            }
            Demand::Empirical(emp) => emp.sample(rng),
        };
        (x.round() as u64).max(1)
    }

    /// The mean demand in nanoseconds.
    pub fn mean_ns(&self) -> f64 {
        match self {
            Demand::Constant(ns) => *ns as f64,
            Demand::Exponential(m) => *m,
            Demand::Lognormal(d) => {
                // LogNormal does not expose its parameters; estimate once
                // with a fixed-seed sample (used for display only).
                let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(7);
                let n = 200_000;
                (0..n).map(|_| d.sample(&mut rng)).sum::<f64>() / f64::from(n)
            }
            Demand::Bimodal {
                short_ns,
                long_ns,
                p_long,
            } => p_long * long_ns + (1.0 - p_long) * short_ns,
            Demand::Empirical(e) => e.mean_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn mean(d: &Demand, n: u32) -> f64 {
        let mut rng = SmallRng::seed_from_u64(1);
        (0..n).map(|_| d.sample_ns(&mut rng) as f64).sum::<f64>() / f64::from(n)
    }

    #[test]
    fn parametric_means() {
        let here = Path::new(".");
        let e = DemandSpec::Exponential { mean_us: 100.0 }
            .resolve(here)
            .unwrap();
        assert!((mean(&e, 200_000) / 100_000.0 - 1.0).abs() < 0.02);
        let b = DemandSpec::Bimodal {
            short_mean_us: 1.0,
            long_mean_us: 100.0,
            long_fraction: 0.1,
        }
        .resolve(here)
        .unwrap();
        assert!((mean(&b, 400_000) / b.mean_ns() - 1.0).abs() < 0.03);
        let l = DemandSpec::Lucene.resolve(here).unwrap();
        let m = l.mean_ns();
        assert!((m / 5.83e6 - 1.0).abs() < 0.02, "lucene mean {m}");
        assert_eq!(
            DemandSpec::Constant { us: 2.5 }
                .resolve(here)
                .unwrap()
                .sample_ns(&mut SmallRng::seed_from_u64(0)),
            2500
        );
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let here = Path::new(".");
        let e = DemandSpec::Exponential { mean_us: -1.0 }
            .resolve(here)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "demand.mean_us must be a finite number > 0, got -1"
        );
        let e = DemandSpec::Lognormal {
            median_us: 1.0,
            sigma: 0.0,
        }
        .resolve(here)
        .unwrap_err();
        assert!(e.to_string().starts_with("demand.sigma"), "{e}");
        let e = DemandSpec::Bimodal {
            short_mean_us: 1.0,
            long_mean_us: 1.0,
            long_fraction: 1.5,
        }
        .resolve(here)
        .unwrap_err();
        assert!(e.to_string().starts_with("demand.long_fraction"), "{e}");
    }

    #[test]
    fn empirical_samples_inside_buckets_and_keeps_the_mean() {
        let d = Distribution {
            unit: "us".into(),
            edges: vec![10.0, 20.0, 30.0, 40.0],
            counts: vec![1, 0, 3],
            sums: vec![],
        };
        let e = Empirical::from_distribution(&d, "x").unwrap();
        assert!((e.mean_ns - (15_000.0 + 3.0 * 35_000.0) / 4.0).abs() < 1e-6);
        let dem = Demand::Empirical(e);
        let mut rng = SmallRng::seed_from_u64(3);
        for _ in 0..10_000 {
            let x = dem.sample_ns(&mut rng);
            assert!(
                (10_000..=20_000).contains(&x) || (30_000..=40_000).contains(&x),
                "{x}"
            );
        }
        assert!((mean(&dem, 100_000) / dem.mean_ns() - 1.0).abs() < 0.01);
    }

    #[test]
    fn empirical_rejects_malformed_histograms() {
        let base = Distribution {
            unit: "us".into(),
            edges: vec![1.0, 2.0],
            counts: vec![1],
            sums: vec![],
        };
        let cases = [
            (
                Distribution {
                    counts: vec![0],
                    ..base.clone()
                },
                "all counts are 0",
            ),
            (
                Distribution {
                    counts: vec![],
                    edges: vec![1.0],
                    ..base.clone()
                },
                "empty",
            ),
            (
                Distribution {
                    edges: vec![1.0, 2.0, 3.0],
                    ..base.clone()
                },
                "edges for",
            ),
            (
                Distribution {
                    edges: vec![2.0, 1.0],
                    ..base.clone()
                },
                "increasing",
            ),
            (
                Distribution {
                    unit: "furlongs".into(),
                    ..base.clone()
                },
                "unit",
            ),
        ];
        for (d, want) in cases {
            let e = Empirical::from_distribution(&d, "f.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.starts_with("f.json"), "{e}");
        }
    }
}
