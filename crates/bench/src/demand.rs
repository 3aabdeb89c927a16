//! The LC service's **request set**: a list of request demands (µs of work
//! when the request runs alone), drawn once per run from a [`DemandSpec`],
//! then shuffled and sent pass after pass (the paper's method: "loads 1141
//! requests, shuffles the requests, and sends requests 5 times").

use crate::config::{DemandSpec, LUCENE_LOG_SIGMA};
use crate::error::{BenchError, Result};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, Exp, LogNormal};
use std::path::{Path, PathBuf};

/// The tasks file of luceneutil the `lucene` demand reads.
pub const TASKS_FILE: &str = "wikimedium.10M.nostopwords.tasks";

/// A request set: demands in µs, and where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSet {
    /// Demand of each request, µs (> 0).
    pub demands_us: Vec<f64>,
    /// Where the demands come from, for the result file and messages.
    pub source: String,
    /// A note to show the user (e.g. a fallback was taken).
    pub note: Option<String>,
}

impl RequestSet {
    /// Mean demand, µs.
    pub fn mean_us(&self) -> f64 {
        self.demands_us.iter().sum::<f64>() / self.demands_us.len().max(1) as f64
    }

    /// `n` requests: the set shuffled, pass after pass (each pass a new
    /// shuffle), cut at `n`.
    pub fn sequence(&self, n: usize, rng: &mut SmallRng) -> Vec<f64> {
        let mut out = Vec::with_capacity(n);
        let mut pass = self.demands_us.clone();
        while out.len() < n {
            pass.shuffle(rng);
            let take = (n - out.len()).min(pass.len());
            out.extend_from_slice(&pass[..take]);
        }
        out
    }
}

/// The term document frequencies of the `HighTerm`, `MedTerm` and `LowTerm`
/// queries of a luceneutil tasks file (`HighTerm: ref # freq=3793973`).
pub fn lucene_term_freqs(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| {
            l.starts_with("HighTerm:") || l.starts_with("MedTerm:") || l.starts_with("LowTerm:")
        })
        .filter_map(|l| l.rsplit_once("freq=")?.1.trim().parse::<u64>().ok())
        .filter(|&f| f > 0)
        .collect()
}

/// Where the tasks file is looked for when no path is given:
/// `$ELFEN_DATA_DIR/<file>`, then `../shared/data/<file>` relative to the
/// working directory and to each ancestor of the running binary (so it is
/// found from the repository root, from `target/release/` and from tests).
pub fn tasks_candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(d) = std::env::var_os("ELFEN_DATA_DIR") {
        c.push(PathBuf::from(d).join(TASKS_FILE));
    }
    let mut roots = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    for r in roots {
        for a in r.ancestors().take(4) {
            let p = a.join("../shared/data").join(TASKS_FILE);
            if !c.contains(&p) {
                c.push(p);
            }
        }
    }
    c
}

/// Builds the request set of `spec`; `seed` fixes the draws.
pub fn build(spec: &DemandSpec, seed: u64) -> Result<RequestSet> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xD3A4_D000);
    match spec {
        DemandSpec::Lucene {
            mean_us,
            tasks_path,
        } => {
            let found = match tasks_path {
                Some(p) => Some(p.clone()),
                None => tasks_candidates().into_iter().find(|p| p.is_file()),
            };
            match found {
                Some(path) => {
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        BenchError::Demand(format!("reading {}: {e}", path.display()))
                    })?;
                    let freqs = lucene_term_freqs(&text);
                    if freqs.is_empty() {
                        return Err(BenchError::Demand(format!(
                            "{}: no HighTerm/MedTerm/LowTerm lines with freq=N",
                            path.display()
                        )));
                    }
                    let mean_f = freqs.iter().map(|&f| f as f64).sum::<f64>() / freqs.len() as f64;
                    Ok(RequestSet {
                        demands_us: freqs.iter().map(|&f| mean_us * f as f64 / mean_f).collect(),
                        source: format!(
                            "lucene: {} term queries of {} (demand proportional to term frequency), mean {mean_us} us",
                            freqs.len(),
                            path.display()
                        ),
                        note: None,
                    })
                }
                None => {
                    let mut set = lognormal(&mut rng, *mean_us, LUCENE_LOG_SIGMA, 1237);
                    set.note = Some(format!(
                        "{TASKS_FILE} not found (looked in $ELFEN_DATA_DIR and ../shared/data next to the \
                         repository); using the lognormal fit of the Lucene term set instead (sigma {LUCENE_LOG_SIGMA})"
                    ));
                    set.source = format!("lucene fallback: {}", set.source);
                    Ok(set)
                }
            }
        }
        DemandSpec::Lognormal {
            mean_us,
            sigma,
            set_size,
        } => Ok(lognormal(&mut rng, *mean_us, *sigma, *set_size)),
        DemandSpec::Bimodal {
            short_us,
            long_us,
            long_fraction,
            set_size,
        } => {
            let n_long = ((*set_size as f64) * long_fraction).round().max(1.0) as usize;
            let n_long = n_long.min(*set_size);
            let mut d = vec![*short_us; set_size - n_long];
            d.extend(std::iter::repeat_n(*long_us, n_long));
            Ok(RequestSet {
                demands_us: d,
                source: format!(
                    "bimodal: {short_us} us, {n_long} of {set_size} requests {long_us} us"
                ),
                note: None,
            })
        }
        DemandSpec::Exponential { mean_us, set_size } => {
            let exp = Exp::new(1.0 / mean_us).map_err(|e| BenchError::Demand(e.to_string()))?;
            let mut d: Vec<f64> = (0..*set_size).map(|_| exp.sample(&mut rng)).collect();
            rescale(&mut d, *mean_us);
            Ok(RequestSet {
                demands_us: d,
                source: format!("exponential: mean {mean_us} us, {set_size} requests"),
                note: None,
            })
        }
        DemandSpec::Constant { us } => Ok(RequestSet {
            demands_us: vec![*us],
            source: format!("constant: {us} us"),
            note: None,
        }),
    }
}

fn lognormal(rng: &mut SmallRng, mean_us: f64, sigma: f64, n: usize) -> RequestSet {
    // mean = exp(mu + sigma^2 / 2)
    let mu = mean_us.ln() - sigma * sigma / 2.0;
    let dist = LogNormal::new(mu, sigma).expect("sigma > 0 was validated");
    let mut d: Vec<f64> = (0..n).map(|_| dist.sample(rng)).collect();
    rescale(&mut d, mean_us);
    RequestSet {
        demands_us: d,
        source: format!("lognormal: mean {mean_us} us, sigma {sigma}, {n} requests"),
        note: None,
    }
}

/// Scales `d` so its mean is exactly `mean` (so the capacity the sweep
/// derives its loads from does not depend on the draw); floors at 1 µs.
fn rescale(d: &mut [f64], mean: f64) {
    let m = d.iter().sum::<f64>() / d.len().max(1) as f64;
    if m > 0.0 {
        for x in d.iter_mut() {
            *x = (*x * mean / m).max(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantile(v: &[f64], q: f64) -> f64 {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s[((s.len() - 1) as f64 * q).round() as usize]
    }

    #[test]
    fn lucene_lines_parse() {
        let text = "HighTerm: ref # freq=3000\nMedTerm: x # freq=100\nLowTerm: y # freq=20\n\
                    OrHighHigh: a b # freq=5 freq=6\nHighTerm: bad # freq=\n\n";
        assert_eq!(lucene_term_freqs(text), vec![3000, 100, 20]);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.tasks");
        std::fs::write(&p, text).unwrap();
        let set = build(
            &DemandSpec::Lucene {
                mean_us: 100.0,
                tasks_path: Some(p),
            },
            1,
        )
        .unwrap();
        assert_eq!(set.demands_us.len(), 3);
        assert!((set.mean_us() - 100.0).abs() < 1e-9);
        assert!((set.demands_us[0] / set.demands_us[2] - 150.0).abs() < 1e-9);
        let e = build(
            &DemandSpec::Lucene {
                mean_us: 100.0,
                tasks_path: Some(dir.path().join("missing")),
            },
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn the_real_lucene_set_is_heavy_tailed() {
        let Some(path) = tasks_candidates().into_iter().find(|p| p.is_file()) else {
            eprintln!("skipped: {TASKS_FILE} not found");
            return;
        };
        let set = build(
            &DemandSpec::Lucene {
                mean_us: 300.0,
                tasks_path: Some(path),
            },
            1,
        )
        .unwrap();
        let d = &set.demands_us;
        assert!(d.len() > 1000);
        let (p50, p99, max) = (quantile(d, 0.5), quantile(d, 0.99), quantile(d, 1.0));
        let min = quantile(d, 0.0);
        assert!(p50 < set.mean_us(), "most requests are short");
        assert!(p99 > 5.0 * p50 && max > 10.0 * p50, "a few are far longer");
        assert!(max / min > 50.0 && max / min < 200.0);
    }

    #[test]
    fn parametric_shapes() {
        let ln = build(
            &DemandSpec::Lognormal {
                mean_us: 200.0,
                sigma: 1.2,
                set_size: 20_000,
            },
            7,
        )
        .unwrap();
        assert!((ln.mean_us() - 200.0).abs() < 0.01);
        // median / mean = exp(-sigma^2 / 2) = 0.487
        let ratio = quantile(&ln.demands_us, 0.5) / 200.0;
        assert!((ratio - 0.487).abs() < 0.05, "{ratio}");
        let bi = build(
            &DemandSpec::Bimodal {
                short_us: 100.0,
                long_us: 5000.0,
                long_fraction: 0.02,
                set_size: 1000,
            },
            1,
        )
        .unwrap();
        assert_eq!(bi.demands_us.iter().filter(|&&x| x == 5000.0).count(), 20);
        let ex = build(
            &DemandSpec::Exponential {
                mean_us: 50.0,
                set_size: 20_000,
            },
            3,
        )
        .unwrap();
        let cv = {
            let m = ex.mean_us();
            let var = ex.demands_us.iter().map(|x| (x - m).powi(2)).sum::<f64>()
                / ex.demands_us.len() as f64;
            var.sqrt() / m
        };
        assert!((cv - 1.0).abs() < 0.05, "exponential cv {cv}");
        let c = build(&DemandSpec::Constant { us: 7.0 }, 1).unwrap();
        assert_eq!(c.demands_us, vec![7.0]);
    }

    #[test]
    fn sequences_are_shuffled_passes() {
        let set = RequestSet {
            demands_us: (1..=10).map(f64::from).collect(),
            source: String::new(),
            note: None,
        };
        let mut rng = SmallRng::seed_from_u64(1);
        let s = set.sequence(25, &mut rng);
        assert_eq!(s.len(), 25);
        for pass in s.chunks(10).take(2) {
            let mut p = pass.to_vec();
            p.sort_by(f64::total_cmp);
            assert_eq!(p, set.demands_us, "each full pass is a permutation");
        }
        assert_ne!(&s[..10], &set.demands_us[..], "shuffled");
        // Same seed, same sequence.
        let mut rng2 = SmallRng::seed_from_u64(1);
        assert_eq!(set.sequence(25, &mut rng2), s);
    }
}
