//! LC request **arrivals**: an open-loop Poisson process at the point's RPS,
//! or a recorded trace time-scaled to it.

use crate::error::SimError;
use rand::Rng;
use rand_distr::{Distribution as _, Exp1};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// Arrivals as written in a config (`[arrivals]`, `kind = …`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ArrivalSpec {
    /// Exponential inter-arrival times at the point's RPS (the paper's load
    /// generator: "random intervals following an exponential distribution").
    #[default]
    Poisson,
    /// A recorded trace: a text file with one arrival time in microseconds
    /// per line (increasing; blank lines and `#` comments ignored). Its gaps
    /// are scaled so the trace's mean rate becomes the point's RPS, and it
    /// repeats when a run needs more requests than it holds. Relative paths
    /// are relative to the config file.
    Trace {
        /// The trace file.
        path: String,
    },
}

/// A loaded trace: inter-arrival gaps at the trace's own rate.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Gaps between consecutive arrivals, ns (the last one wraps around with
    /// the mean gap).
    pub gaps_ns: Arc<[f64]>,
    /// Mean gap, ns.
    pub mean_gap_ns: f64,
}

impl Trace {
    /// Reads a trace file.
    pub fn load(path: &Path) -> Result<Trace, SimError> {
        let (what, text) = crate::error::read_text(path)?;
        Trace::parse(&text, &what)
    }

    /// Parses trace text; `what` names the source in errors.
    pub fn parse(text: &str, what: &str) -> Result<Trace, SimError> {
        let bad = |line: usize, p: String| SimError::File {
            path: what.to_string(),
            problem: format!("line {line}: {p}"),
        };
        let mut times = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let t: f64 = line
                .parse()
                .map_err(|_| bad(i + 1, format!("not a number of microseconds: {line:?}")))?;
            if !t.is_finite() || t < 0.0 {
                return Err(bad(
                    i + 1,
                    format!("arrival time must be finite and >= 0, got {t}"),
                ));
            }
            if let Some(&prev) = times.last() {
                if t < prev {
                    return Err(bad(
                        i + 1,
                        format!("arrival times must not decrease ({t} < {prev})"),
                    ));
                }
            }
            times.push(t);
        }
        if times.len() < 2 {
            return Err(SimError::File {
                path: what.to_string(),
                problem: format!("a trace needs at least 2 arrivals, got {}", times.len()),
            });
        }
        let span_us = times[times.len() - 1] - times[0];
        if span_us <= 0.0 {
            return Err(SimError::File {
                path: what.to_string(),
                problem: "all arrivals are at the same time".into(),
            });
        }
        let mean_gap_ns = span_us * 1e3 / (times.len() - 1) as f64;
        let mut gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) * 1e3).collect();
        gaps.push(mean_gap_ns);
        Ok(Trace {
            gaps_ns: gaps.into(),
            mean_gap_ns,
        })
    }

    /// The trace's own mean rate, requests per second.
    pub fn rps(&self) -> f64 {
        1e9 / self.mean_gap_ns
    }
}

/// A resolved arrival process for one run.
#[derive(Debug, Clone)]
pub enum Arrivals {
    /// Poisson with this mean gap, ns.
    Poisson {
        /// Mean gap, ns.
        mean_gap_ns: f64,
    },
    /// A trace with its gaps multiplied by `scale`.
    Trace {
        /// The trace.
        trace: Trace,
        /// Gap multiplier (`trace rps / target rps`).
        scale: f64,
    },
}

impl Arrivals {
    /// The process at `rps` requests per second.
    pub fn at_rps(spec_trace: Option<&Trace>, rps: f64) -> Arrivals {
        match spec_trace {
            None => Arrivals::Poisson {
                mean_gap_ns: 1e9 / rps,
            },
            Some(t) => Arrivals::Trace {
                trace: t.clone(),
                scale: t.rps() / rps,
            },
        }
    }

    /// The gap before arrival number `i` (ns, rounded, at least 1 so two
    /// arrivals never share an instant).
    #[inline]
    pub fn gap_ns<R: Rng>(&self, i: u64, rng: &mut R) -> u64 {
        let g = match self {
            Arrivals::Poisson { mean_gap_ns } => {
                let e: f64 = Exp1.sample(rng);
                e * mean_gap_ns
            }
            Arrivals::Trace { trace, scale } => {
                trace.gaps_ns[(i % trace.gaps_ns.len() as u64) as usize] * scale
            }
        };
        (g.round() as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_parses_and_scales() {
        let t = Trace::parse("# t_us\n0\n100\n\n300 # third\n", "t.txt").unwrap();
        assert_eq!(t.gaps_ns.len(), 3);
        assert!((t.rps() - 1e9 / 150_000.0).abs() < 1e-9);
        let a = Arrivals::at_rps(Some(&t), t.rps() * 2.0);
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
        assert_eq!(a.gap_ns(0, &mut rng), 50_000);
        assert_eq!(a.gap_ns(1, &mut rng), 100_000);
        assert_eq!(a.gap_ns(2, &mut rng), 75_000);
        assert_eq!(a.gap_ns(3, &mut rng), 50_000, "wraps around");
    }

    #[test]
    fn bad_traces_name_file_and_line() {
        for (text, want) in [
            ("0\nx\n", "line 2: not a number"),
            ("5\n3\n", "line 2: arrival times must not decrease"),
            ("-1\n3\n", "line 1: arrival time must be finite"),
            ("1\n", "at least 2 arrivals"),
            ("", "at least 2 arrivals"),
            ("4\n4\n", "same time"),
        ] {
            let e = Trace::parse(text, "tr.txt").unwrap_err().to_string();
            assert!(e.starts_with("tr.txt: ") && e.contains(want), "{e}");
        }
    }
}
