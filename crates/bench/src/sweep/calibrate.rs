//! What the sweep measures before its points: the LC service's **demand
//! alone** (the paper's Figure 1, and the capacity the automatic loads are
//! fractions of) and each batch kernel **alone** (the progress baseline).

use super::invocation::check_stop;
use super::rig::Rig;
use crate::batch::{self, BatchPlan, BatchProgram, Start, ThreadPlan};
use crate::error::Result;
use crate::lc::requests::RequestSet;
use crate::load::client::measure_demand;
use crate::spec::{BenchSpec, RequestsKind};
use elfen_cmd::proc::SchedClass;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The request set run alone, back to back.
#[derive(Debug, Clone)]
pub struct DemandAlone {
    /// Service time of each request, µs.
    pub demand_us: Vec<f64>,
    /// The scale applied to work requests so that their mean service time
    /// alone is the nominal mean (1.0 for query sets).
    pub work_scale: f64,
}

impl DemandAlone {
    /// Mean service time, µs.
    pub fn mean_us(&self) -> f64 {
        self.demand_us.iter().sum::<f64>() / self.demand_us.len().max(1) as f64
    }

    /// p99 service time, µs.
    pub fn p99_us(&self) -> f64 {
        let mut s = self.demand_us.clone();
        s.sort_by(f64::total_cmp);
        s.get(((s.len().max(1) - 1) as f64 * 0.99).round() as usize)
            .copied()
            .unwrap_or(0.0)
    }
}

/// Runs every request of the set once, alone. For work requests, a service
/// calibrated on a continuous, cache-hot chase runs requests separated by
/// idle time slower (lines evicted, TLB cold): if the set's mean service
/// time is more than 5% off its nominal mean, the work is scaled to match
/// and the set run again (the second pass is Figure 1).
pub fn demand_alone(rig: &Rig, stop: &AtomicBool) -> Result<DemandAlone> {
    let first = demand_scaled(rig, 1.0, stop)?;
    if let Some(nominal) = nominal_mean_us(&rig.set) {
        let factor = first.mean_us() / nominal;
        if factor.is_finite() && factor > 0.0 && (factor - 1.0).abs() > 0.05 {
            return demand_scaled(rig, 1.0 / factor, stop);
        }
    }
    Ok(first)
}

/// The nominal mean service time of a work set, µs (`None` for query and
/// key sets, whose work is not scaled).
fn nominal_mean_us(set: &RequestSet) -> Option<f64> {
    let nominal = set.nominal_us()?;
    Some(nominal.iter().sum::<f64>() / nominal.len().max(1) as f64)
}

/// How far (as a factor either way) the open-loop probe's mean service
/// time may lie from a work set's nominal mean before the calibration is
/// taken as no longer holding. Requests after idle gaps run a little
/// colder than back to back (5–10 % on a quiet 2-vCPU VM); a factor of
/// 1.5 is a change of the host, not of the load.
pub const DRIFT_FACTOR: f64 = 1.5;

/// The service's calibration drifted: the chase's steps per µs are
/// measured once, when the service starts, and a host whose cache state
/// changes after that (a neighbour's working set taking or leaving the
/// shared cache) makes every request that many times longer or shorter.
/// For a work set whose mean service time under the open-loop probe,
/// `probe_service_us`, is off the nominal mean by more than
/// [`DRIFT_FACTOR`]: the factor to multiply the work by so the requests
/// take their nominal time again. `None` for query and key sets (their
/// work is the query's, not scaled) and within the factor.
pub fn drift_scale(set: &RequestSet, probe_service_us: f64) -> Option<f64> {
    let off = probe_service_us / nominal_mean_us(set)?;
    (off.is_finite() && off > 0.0 && !(1.0 / DRIFT_FACTOR..=DRIFT_FACTOR).contains(&off))
        .then_some(1.0 / off)
}

/// The demand alone measured again with the work scaled by `work_scale`.
pub fn demand_scaled(rig: &Rig, work_scale: f64, stop: &AtomicBool) -> Result<DemandAlone> {
    Ok(DemandAlone {
        demand_us: measure_demand(
            rig.lc().addr(),
            &rig.lc().protocol(),
            &rig.set,
            work_scale,
            stop,
        )?,
        work_scale,
    })
}

/// What the run record notes of the demand alone: the share of requests
/// per 1 ms bucket, exact from the service times (when the demand reaches
/// 1 ms: the paper's Figure 1), and for query sets the shortest and the
/// longest query with their terms.
pub fn demand_notes(set: &RequestSet, demand_us: &[f64]) -> Vec<String> {
    let mut notes = Vec::new();
    let n = demand_us.len();
    if n == 0 {
        return notes;
    }
    let mut per_ms: Vec<usize> = Vec::new();
    for &d in demand_us {
        let k = (d.max(0.0) / 1e3).floor() as usize;
        if per_ms.len() <= k {
            per_ms.resize(k + 1, 0);
        }
        per_ms[k] += 1;
    }
    if per_ms.len() > 1 {
        let shares: Vec<String> = per_ms
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(k, c)| format!("[{k},{}) {:.2}%", k + 1, *c as f64 * 100.0 / n as f64))
            .collect();
        notes.push(format!(
            "demand alone, share of requests per 1 ms bucket (Figure 1): {}",
            shares.join(", ")
        ));
    }
    if set.kind == RequestsKind::TermQueries && set.requests.len() == n {
        let by = |cmp: fn(&f64, &f64) -> std::cmp::Ordering| {
            (0..n).reduce(|a, b| {
                if cmp(&demand_us[b], &demand_us[a]).is_lt() {
                    b
                } else {
                    a
                }
            })
        };
        let (Some(lo), Some(hi)) = (by(f64::total_cmp), by(|a, b| b.total_cmp(a))) else {
            return notes;
        };
        let term = |i: usize| String::from_utf8_lossy(&set.requests[i].payload).to_string();
        notes.push(format!(
            "demand alone: shortest query {:?} {:.1} us, longest {:?} {:.1} us ({:.0}x)",
            term(lo),
            demand_us[lo],
            term(hi),
            demand_us[hi],
            demand_us[hi] / demand_us[lo].max(1e-3)
        ));
    }
    notes
}

/// Units per second of `program` alone on the first batch lane (no load).
pub fn batch_alone(
    spec: &BenchSpec,
    worker_exe: &Path,
    rig: &Rig,
    program: BatchProgram,
    stop: &AtomicBool,
) -> Result<f64> {
    let plan = BatchPlan {
        program,
        stream_mib: spec.batch.stream_mib,
        threads: vec![ThreadPlan {
            cpu: Some(rig.lanes.batch_cpus[0]),
            lane: None,
        }],
        page: None,
        nap: spec.batch.nap,
        sched: SchedClass::Other,
    };
    let bp = batch::spawn(
        Start {
            worker_exe,
            input: &rig.batch_input,
            cgroup_procs: None,
        },
        &plan,
        Duration::from_secs(20),
    )?;
    bp.go();
    std::thread::sleep(Duration::from_millis(spec.batch.settle_ms));
    let s0 = bp.sample();
    let until = Instant::now() + Duration::from_secs_f64(spec.batch.alone_s);
    while Instant::now() < until {
        check_stop(stop)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = bp.sample().since(&s0);
    let secs = d.at_ns as f64 / 1e9;
    Ok(d.total().units as f64 / secs.max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lc::requests::Request;

    fn queries(terms: &[&str]) -> RequestSet {
        RequestSet {
            kind: RequestsKind::TermQueries,
            requests: terms
                .iter()
                .enumerate()
                .map(|(i, t)| Request {
                    arg: i as u64,
                    payload: t.as_bytes().into(),
                })
                .collect(),
            source: "test".into(),
            note: None,
            keys: None,
        }
    }

    #[test]
    fn a_drifted_calibration_is_told_from_a_cold_working_set() {
        // a work set of nominal mean 300 us
        let work = RequestSet {
            kind: RequestsKind::Demand,
            requests: [200_000u64, 400_000]
                .iter()
                .map(|&ns| Request {
                    arg: ns,
                    payload: Box::new([]),
                })
                .collect(),
            ..queries(&[])
        };
        // 10 % slower under load: the cold working set, not a drift
        assert_eq!(drift_scale(&work, 330.0), None);
        assert_eq!(drift_scale(&work, 440.0), None);
        // 4.8x slower (a calibration on a cache-hot host that lost its cache)
        let s = drift_scale(&work, 1440.0).expect("a drift");
        assert!((s - 300.0 / 1440.0).abs() < 1e-9, "{s}");
        // and the other way
        assert!((drift_scale(&work, 100.0).expect("a drift") - 3.0).abs() < 1e-9);
        // query sets are not scaled, nor is a probe that measured nothing
        assert_eq!(drift_scale(&queries(&["a"]), 1440.0), None);
        assert_eq!(drift_scale(&work, f64::NAN), None);
    }

    #[test]
    fn demand_notes_give_shares_per_ms_and_the_extreme_queries() {
        let set = queries(&["a", "b", "c", "d"]);
        let n = demand_notes(&set, &[200.0, 2.0, 1500.0, 300.0]);
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n[0].ends_with("[0,1) 75.00%, [1,2) 25.00%"), "{}", n[0]);
        assert!(
            n[1].contains("\"b\" 2.0 us") && n[1].contains("\"c\" 1500.0 us"),
            "{}",
            n[1]
        );
        // all under 1 ms: no per-ms note
        assert_eq!(demand_notes(&set, &[1.0, 2.0, 3.0, 4.0]).len(), 1);
    }
}
