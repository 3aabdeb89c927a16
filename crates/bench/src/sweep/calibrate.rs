//! What the sweep measures before its points: the LC service's **demand
//! alone** (the paper's Figure 1, and the capacity the automatic loads are
//! fractions of) and each batch kernel **alone** (the progress baseline).

use super::invocation::check_stop;
use super::rig::Rig;
use crate::batch::{self, BatchPlan, BatchProgram, Start, ThreadPlan};
use crate::error::Result;
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
    let addr = rig.lc().addr();
    let first = measure_demand(addr, &rig.set, 1.0, stop)?;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    if rig.set.kind == RequestsKind::Demand {
        let nominal = mean(&rig.set.nominal_us().unwrap_or_default());
        let factor = mean(&first) / nominal;
        if factor.is_finite() && factor > 0.0 && (factor - 1.0).abs() > 0.05 {
            let work_scale = 1.0 / factor;
            return Ok(DemandAlone {
                demand_us: measure_demand(addr, &rig.set, work_scale, stop)?,
                work_scale,
            });
        }
    }
    Ok(DemandAlone {
        demand_us: first,
        work_scale: 1.0,
    })
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
