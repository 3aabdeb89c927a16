//! The **request set** an LC service is driven with: drawn once per run,
//! then shuffled and sent pass after pass (the paper's method: "loads 1141
//! requests, shuffles the requests, and sends requests 5 times").
//!
//! Two kinds, for two kinds of service:
//!
//! - **work** (`requests = "demand"`): each request carries its demand in
//!   ns of work as the wire protocol's `arg` — the built-in chase service
//!   (in process or as `elfen serve`) runs that much. Demands come from a
//!   [`DemandSpec`]: by default the paper's Lucene term queries, with demand
//!   proportional to each term's document frequency.
//! - **query** (`requests = "term_queries"`): each request carries one term
//!   of the tasks file as its payload (`arg` = its index) — a search
//!   service (Lucene) runs the query; its demand is whatever the query
//!   costs, measured alone.
//! - **keys** (`requests = "keys"`): each request reads one key drawn
//!   uniformly from a key-value service's key space (a fresh draw per
//!   request, not passes over a set: the set is only the sample the demand
//!   alone runs).

use crate::demand::{DemandSpec, RequestsKind};
use crate::error::{LoadError, Result};
use crate::tasks;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, Exp, LogNormal};
use std::path::Path;

/// One request of the set.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The wire protocol's `arg`: ns of work (work sets) or the query's
    /// index (query sets).
    pub arg: u64,
    /// The payload (the query text), empty for work sets.
    pub payload: Box<[u8]>,
}

/// A request set and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSet {
    /// Work (arg = ns, may be scaled by the harness's calibration) or query.
    pub kind: RequestsKind,
    /// The requests.
    pub requests: Vec<Request>,
    /// Where they come from, for the result file and messages.
    pub source: String,
    /// A note to show the user.
    pub note: Option<String>,
    /// Key sets: the key space requests draw from (`requests` is the
    /// demand-alone sample).
    pub keys: Option<u64>,
}

impl RequestSet {
    /// Nominal demand of each request, µs (work sets only).
    pub fn nominal_us(&self) -> Option<Vec<f64>> {
        (self.kind == RequestsKind::Demand)
            .then(|| self.requests.iter().map(|r| r.arg as f64 / 1e3).collect())
    }

    /// The `arg` to send for pick `i` of [`RequestSet::sequence`] with work
    /// scale `scale` (work sets are scaled; query indices are not; a key
    /// set's pick is the key itself, anywhere in its key space).
    pub fn arg(&self, i: usize, scale: f64) -> u64 {
        if self.keys.is_some() {
            return i as u64;
        }
        let a = self.requests[i].arg;
        match self.kind {
            RequestsKind::Demand => ((a as f64 * scale).round() as u64).max(1),
            RequestsKind::TermQueries | RequestsKind::Keys => a,
        }
    }

    /// The payload to send for pick `i` of [`RequestSet::sequence`] (a key
    /// set's requests carry none: the key goes into the text request).
    pub fn payload(&self, i: usize) -> &[u8] {
        if self.keys.is_some() {
            return &[];
        }
        &self.requests[i].payload
    }

    /// `n` request indices: the set shuffled, pass after pass (each pass a
    /// new shuffle), cut at `n`; for key sets, `n` keys drawn uniformly
    /// from the key space.
    pub fn sequence(&self, n: usize, rng: &mut SmallRng) -> Vec<u32> {
        if let Some(keys) = self.keys {
            use rand::Rng;
            return (0..n).map(|_| rng.random_range(0..keys) as u32).collect();
        }
        let mut out = Vec::with_capacity(n);
        let mut pass: Vec<u32> = (0..self.requests.len() as u32).collect();
        while out.len() < n {
            pass.shuffle(rng);
            let take = (n - out.len()).min(pass.len());
            out.extend_from_slice(&pass[..take]);
        }
        out
    }
}

fn work_set(demands_us: Vec<f64>, source: String) -> RequestSet {
    RequestSet {
        kind: RequestsKind::Demand,
        requests: demands_us
            .iter()
            .map(|d| Request {
                arg: ((d * 1e3).round() as u64).max(1),
                payload: Box::new([]),
            })
            .collect(),
        source,
        note: None,
        keys: None,
    }
}

/// The key set of a key-value service with `keys` keys: `sample` keys
/// drawn uniformly (seeded) for the demand alone; the load draws its own.
pub fn keys(name: &str, keys: u64, sample: usize, seed: u64) -> RequestSet {
    use rand::Rng;
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x4B45_5953);
    RequestSet {
        kind: RequestsKind::Keys,
        requests: (0..sample)
            .map(|_| Request {
                arg: rng.random_range(0..keys),
                payload: Box::new([]),
            })
            .collect(),
        source: format!(
            "{name}: a key drawn uniformly from {keys} keys per request ({sample} of them for the \
             demand alone)"
        ),
        note: None,
        keys: Some(keys),
    }
}

/// Builds the request set of kind `kind` from `demand` (work sets) or the
/// tasks file (query sets); `seed` fixes the draws.
pub fn build(
    kind: RequestsKind,
    demand: &DemandSpec,
    tasks_path: Option<&Path>,
    seed: u64,
) -> Result<RequestSet> {
    match kind {
        RequestsKind::Demand => build_work(demand, seed),
        RequestsKind::TermQueries => build_queries(tasks_path),
        RequestsKind::Keys => Err(LoadError::Config(
            "lc.requests = \"keys\" is built from [lc.kv] (requests::keys)".into(),
        )),
    }
}

fn build_queries(tasks_path: Option<&Path>) -> Result<RequestSet> {
    let path = tasks::find_tasks_file(tasks_path)?;
    let q = tasks::read_term_queries(&path)?;
    if q.queries.is_empty() {
        return Err(LoadError::Demand(format!(
            "{}: no HighTerm/MedTerm/LowTerm lines",
            path.display()
        )));
    }
    Ok(RequestSet {
        kind: RequestsKind::TermQueries,
        requests: q
            .queries
            .iter()
            .enumerate()
            .map(|(i, t)| Request {
                arg: i as u64,
                payload: t.term.as_bytes().into(),
            })
            .collect(),
        source: format!(
            "term queries: {} HighTerm/MedTerm/LowTerm lines of {}",
            q.queries.len(),
            path.display()
        ),
        note: (!q.bad.is_empty()).then(|| {
            format!(
                "{} term-query lines of {} did not parse and were left out (first: line {}: {:?})",
                q.bad.len(),
                path.display(),
                q.bad[0].0,
                q.bad[0].1
            )
        }),
        keys: None,
    })
}

fn build_work(spec: &DemandSpec, seed: u64) -> Result<RequestSet> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xD3A4_D000);
    match spec {
        DemandSpec::Lucene {
            mean_us,
            tasks_path,
        } => {
            let path = tasks::find_tasks_file(tasks_path.as_deref())?;
            let q = tasks::read_term_queries(&path)?;
            if let Some((line, text)) = q.bad.first() {
                return Err(LoadError::Demand(format!(
                    "{}:{line}: expected `HighTerm: <term> # freq=<n>`, got {text:?}",
                    path.display()
                )));
            }
            if q.queries.is_empty() {
                return Err(LoadError::Demand(format!(
                    "{}: no HighTerm/MedTerm/LowTerm lines with freq=N",
                    path.display()
                )));
            }
            let freqs: Vec<f64> = q.queries.iter().map(|t| t.freq as f64).collect();
            let mean_f = freqs.iter().sum::<f64>() / freqs.len() as f64;
            Ok(work_set(
                freqs.iter().map(|f| mean_us * f / mean_f).collect(),
                format!(
                    "lucene: {} term queries of {} (demand proportional to term frequency), mean {mean_us} us",
                    freqs.len(),
                    path.display()
                ),
            ))
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
            Ok(work_set(
                d,
                format!("bimodal: {short_us} us, {n_long} of {set_size} requests {long_us} us"),
            ))
        }
        DemandSpec::Exponential { mean_us, set_size } => {
            let exp = Exp::new(1.0 / mean_us).map_err(|e| LoadError::Demand(e.to_string()))?;
            let mut d: Vec<f64> = (0..*set_size).map(|_| exp.sample(&mut rng)).collect();
            rescale(&mut d, *mean_us);
            Ok(work_set(
                d,
                format!("exponential: mean {mean_us} us, {set_size} requests"),
            ))
        }
        DemandSpec::Constant { us } => Ok(work_set(vec![*us], format!("constant: {us} us"))),
    }
}

fn lognormal(rng: &mut SmallRng, mean_us: f64, sigma: f64, n: usize) -> RequestSet {
    // mean = exp(mu + sigma^2 / 2)
    let mu = mean_us.ln() - sigma * sigma / 2.0;
    let dist = LogNormal::new(mu, sigma).expect("sigma > 0 was validated");
    let mut d: Vec<f64> = (0..n).map(|_| dist.sample(rng)).collect();
    rescale(&mut d, mean_us);
    work_set(
        d,
        format!("lognormal: mean {mean_us} us, sigma {sigma}, {n} requests"),
    )
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
mod tests;
