//! **Pairing**: which batch lanes lend their cycles to which request lane.
//!
//! A *request lane* runs latency-critical requests; its *batch lanes* run batch threads
//! that step aside (nap) whenever the request lane is busy. On SMT hardware the partners
//! are siblings of one core: the lowest online sibling is the request lane and the rest
//! are its batch lanes. Without SMT there are no siblings, so the pairing is either
//! given explicitly (`"0:1,2:3"`) or defaults to consecutive online CPUs; interference
//! then goes through the shared last-level cache and memory bandwidth instead of the
//! core's pipeline.

use std::collections::BTreeSet;
use std::fmt;

use crate::cpulist::{MAX_CPU_ID, format_cpu_list};
use crate::error::{Result, TopoError};
use crate::topology::Topology;

/// One request lane and its batch lanes (CPU ids).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pair {
    /// The lane latency-critical requests run on.
    pub request: u32,
    /// The lanes batch threads run on while `request` is idle; never empty.
    pub batch: Vec<u32>,
}

impl fmt::Display for Pair {
    /// Formats in spec syntax: `0:1` or `0:1+2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.request)?;
        for (i, b) in self.batch.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            write!(f, "{b}")?;
        }
        Ok(())
    }
}

/// Where a [`PairPlan`] came from, so a CLI can tell the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairingSource {
    /// SMT siblings from `thread_siblings_list`: lowest sibling = request lane.
    Siblings,
    /// A spec given by the user (`--pairs 0:1`).
    Explicit,
    /// No SMT and no spec: consecutive online CPUs (0↔1, 2↔3, ...).
    DefaultConsecutive,
}

impl fmt::Display for PairingSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PairingSource::Siblings => "SMT siblings (thread_siblings_list)",
            PairingSource::Explicit => "explicit pairing spec",
            PairingSource::DefaultConsecutive => {
                "default: consecutive online CPUs (no SMT and no pairing spec given)"
            }
        })
    }
}

/// The result of [`plan_pairs`]: the pairs plus where they came from.
///
/// Dereferences to `[Pair]`, so `plan.len()`, `plan.iter()` and `&plan[0]` work.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PairPlan {
    /// The pairs, in spec order (explicit) or by request lane (otherwise).
    pub pairs: Vec<Pair>,
    /// How the pairs were chosen.
    pub source: PairingSource,
    /// Online lanes that are in no pair (an odd last CPU, a core whose siblings are
    /// offline, lanes a spec leaves out), sorted.
    pub unpaired: Vec<u32>,
}

impl PairPlan {
    /// The pairs, dropping the provenance.
    pub fn into_pairs(self) -> Vec<Pair> {
        self.pairs
    }

    /// One line for humans: `pairs 0:1,2:3 from SMT siblings (...); unpaired: 4`.
    pub fn describe(&self) -> String {
        let mut s = if self.pairs.is_empty() {
            format!("no lane pairs ({})", self.source)
        } else {
            format!(
                "pairs {} from {}",
                format_pair_spec(&self.pairs),
                self.source
            )
        };
        if !self.unpaired.is_empty() {
            s.push_str(&format!("; unpaired: {}", format_cpu_list(&self.unpaired)));
        }
        s
    }
}

impl std::ops::Deref for PairPlan {
    type Target = [Pair];
    fn deref(&self) -> &[Pair] {
        &self.pairs
    }
}

impl IntoIterator for PairPlan {
    type Item = Pair;
    type IntoIter = std::vec::IntoIter<Pair>;
    fn into_iter(self) -> Self::IntoIter {
        self.pairs.into_iter()
    }
}

/// Parses a pairing spec: comma-separated `request:batch[+batch…]`, e.g. `"0:1"`,
/// `"0:1,2:3"`, `"0:1+2"`. Syntax only; [`plan_pairs`] checks it against a machine.
///
/// ```
/// use elfen_topo::{Pair, parse_pair_spec};
/// let pairs = parse_pair_spec("0:1+2, 4:5").unwrap();
/// assert_eq!(pairs[0], Pair { request: 0, batch: vec![1, 2] });
/// assert!(parse_pair_spec("0-1").is_err());
/// ```
pub fn parse_pair_spec(spec: &str) -> Result<Vec<Pair>> {
    let err = |reason: String| TopoError::PairSpec {
        spec: spec.to_string(),
        reason,
    };
    if spec.trim().is_empty() {
        return Err(err(
            "empty; expected request:batch pairs like 0:1 or 0:1+2,3:4".into(),
        ));
    }
    let mut pairs = Vec::new();
    for item in spec.split(',') {
        let item = item.trim();
        let Some((request, batch)) = item.split_once(':') else {
            return Err(err(format!(
                "pair {item:?} must be request:batch (e.g. 0:1 or 0:1+2)"
            )));
        };
        let lane = |token: &str| -> Result<u32> {
            let token = token.trim();
            match token.parse::<u32>() {
                Ok(id) if id <= MAX_CPU_ID && token.bytes().all(|b| b.is_ascii_digit()) => Ok(id),
                _ => Err(err(format!(
                    "in pair {item:?}: expected a cpu number, found {token:?}"
                ))),
            }
        };
        pairs.push(Pair {
            request: lane(request)?,
            batch: batch.split('+').map(lane).collect::<Result<_>>()?,
        });
    }
    Ok(pairs)
}

/// Formats pairs in spec syntax; the inverse of [`parse_pair_spec`].
pub fn format_pair_spec(pairs: &[Pair]) -> String {
    pairs
        .iter()
        .map(Pair::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Decides the request/batch pairs for `topo`.
///
/// - With `spec`: parse it and check every lane is online, no lane is used twice and no
///   request lane is its own batch lane (accepted on SMT machines too, even if the
///   partners are not siblings).
/// - Without `spec` on SMT: per core, the lowest online sibling is the request lane and
///   the other online siblings its batch lanes.
/// - Without `spec` and without SMT: consecutive online CPUs (0↔1, 2↔3, …); an odd
///   last CPU is left unpaired.
///
/// A machine with a single lane yields an empty plan, not an error; callers that
/// need a pair check `plan.is_empty()`.
pub fn plan_pairs(topo: &Topology, spec: Option<&str>) -> Result<PairPlan> {
    let cpus = topo.cpus();
    let (pairs, source) = match spec {
        Some(spec) => (validate(topo, spec)?, PairingSource::Explicit),
        None if topo.has_smt() => (
            topo.cores()
                .into_iter()
                .filter(|core| core.len() > 1)
                .map(|core| Pair {
                    request: core[0],
                    batch: core[1..].to_vec(),
                })
                .collect(),
            PairingSource::Siblings,
        ),
        None => (
            cpus.chunks_exact(2)
                .map(|two| Pair {
                    request: two[0],
                    batch: vec![two[1]],
                })
                .collect(),
            PairingSource::DefaultConsecutive,
        ),
    };
    let used: BTreeSet<u32> = pairs
        .iter()
        .flat_map(|p| std::iter::once(p.request).chain(p.batch.iter().copied()))
        .collect();
    let unpaired = cpus.into_iter().filter(|c| !used.contains(c)).collect();
    Ok(PairPlan {
        pairs,
        source,
        unpaired,
    })
}

/// Parses `spec` and checks it against the online lanes of `topo`.
fn validate(topo: &Topology, spec: &str) -> Result<Vec<Pair>> {
    let pairs = parse_pair_spec(spec)?;
    let err = |reason: String| TopoError::PairSpec {
        spec: spec.to_string(),
        reason,
    };
    let mut used = BTreeSet::new();
    for pair in &pairs {
        if pair.batch.contains(&pair.request) {
            return Err(err(format!(
                "pair {pair}: lane {} cannot be its own batch lane",
                pair.request
            )));
        }
        for lane in std::iter::once(pair.request).chain(pair.batch.iter().copied()) {
            if topo.lane(lane).is_none() {
                return Err(err(format!(
                    "pair {pair}: lane {lane} is not online (online: {})",
                    format_cpu_list(&topo.cpus())
                )));
            }
            if !used.insert(lane) {
                return Err(err(format!(
                    "pair {pair}: lane {lane} is used twice in the spec"
                )));
            }
        }
    }
    Ok(pairs)
}
