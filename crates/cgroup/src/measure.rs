//! How long the executor's operations take on a real hierarchy: freeze
//! (request to seen frozen) and thaw per freezer, cpuset shrink and widen
//! with a running task, a CFS quota write. Medians over repetitions.
//!
//! The subject is one busy-looping child (`sh -c 'while :; do :; done'`)
//! in a temporary group `elfen-measure-<pid>` that is removed (and the
//! child killed) on every exit path. It is held to 20 % of a CPU by a CFS
//! quota while cpusets and quotas are measured, then pinned to the last
//! CPU with the quota lifted while freezes are measured: a task throttled
//! by CFS bandwidth cannot be frozen before its next period, which would
//! measure the period, not the freezer. Needs root and a writable cgroup
//! hierarchy.

use crate::error::{CgroupError, Result};
use crate::executor::Executor;
use crate::group::Group;
use crate::knob::{Knob, KnobKind};
use crate::layout::{Controller, FreezerBackend, Hierarchy, Layout};
use elfen_cmd::child::ChildGuard;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Summary of one measured operation, µs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Repetitions.
    pub n: usize,
    /// Median.
    pub median_us: f64,
    /// 90th percentile (nearest rank).
    pub p90_us: f64,
    /// Smallest.
    pub min_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Stats {
    /// Summarises samples in µs (`None` if there are none).
    pub fn of(samples_us: &[f64]) -> Option<Stats> {
        if samples_us.is_empty() {
            return None;
        }
        let mut s = samples_us.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median_us = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        let p90 = s[((n as f64 * 0.9).ceil() as usize).clamp(1, n) - 1];
        Some(Stats {
            n,
            median_us,
            p90_us: p90,
            min_us: s[0],
            max_us: s[n - 1],
        })
    }
}

/// Everything [`measure_latency`] measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyReport {
    /// The cgroup root.
    pub root: PathBuf,
    /// Its layout.
    pub layout: Layout,
    /// Repetitions asked for.
    pub reps: usize,
    /// v1 `freezer.state`: request to `FROZEN`.
    pub freeze_v1: Option<Stats>,
    /// v1 thaw write.
    pub thaw_v1: Option<Stats>,
    /// v2 `cgroup.freeze`: request to `frozen 1`.
    pub freeze_v2: Option<Stats>,
    /// v2 thaw write.
    pub thaw_v2: Option<Stats>,
    /// `cpuset.cpus` all → last CPU, the child running.
    pub cpuset_shrink: Option<Stats>,
    /// `cpuset.cpus` last CPU → all.
    pub cpuset_widen: Option<Stats>,
    /// One CFS quota write (alternating two values).
    pub cfs_quota_write: Option<Stats>,
    /// Freezes that timed out (1 s), per freezer.
    pub freeze_timeouts: usize,
    /// What was skipped and why.
    pub notes: Vec<String>,
}

fn spawn_busy() -> Result<ChildGuard> {
    std::process::Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .map(ChildGuard::new)
        .map_err(|e| CgroupError::io("sh", "spawning the busy child", e))
}

fn time_us(f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let t0 = Instant::now();
    f()?;
    Ok(t0.elapsed().as_secs_f64() * 1e6)
}

/// Measures on the hierarchy under `root` (detected layout), `reps` times
/// each. Needs root.
pub fn measure_latency(root: &Path, reps: usize) -> Result<LatencyReport> {
    let hier = Hierarchy::detect(root)?;
    let mut report = LatencyReport {
        root: root.to_path_buf(),
        layout: hier.layout(),
        reps,
        freeze_v1: None,
        thaw_v1: None,
        freeze_v2: None,
        thaw_v2: None,
        cpuset_shrink: None,
        cpuset_widen: None,
        cfs_quota_write: None,
        freeze_timeouts: 0,
        notes: Vec::new(),
    };
    let child = spawn_busy()?;
    let pid = child.pid();
    let name = format!("elfen-measure-{}", std::process::id());
    let ctls: Vec<Controller> = [Controller::Cpu, Controller::Cpuset, Controller::Freezer]
        .into_iter()
        .filter(|c| hier.supports(*c))
        .collect();
    let mut ex = Executor::new(hier.clone()).restore_on_drop(true);
    let g = ex.create_group(&name, &ctls)?;
    if g.has(Controller::Cpu) {
        ex.set(
            &g,
            Knob::CpuMax {
                quota_us: Some(20_000),
                period_us: 100_000,
            },
        )?;
    }
    ex.add_process(&g, pid)?;
    if g.has(Controller::Cpu) {
        let mut s = Vec::new();
        for i in 0..reps {
            let q = if i % 2 == 0 { 30_000 } else { 20_000 };
            s.push(time_us(|| {
                ex.set(
                    &g,
                    Knob::CpuMax {
                        quota_us: Some(q),
                        period_us: 100_000,
                    },
                )
                .map(|_| ())
            })?);
        }
        report.cfs_quota_write = Stats::of(&s);
    }
    if g.has(Controller::Cpuset) {
        measure_cpuset(&mut ex, &g, reps, &mut report)?;
        if let Knob::CpusetCpus(all) = ex.get(&g, KnobKind::CpusetCpus)? {
            if let Some(&last) = all.last() {
                ex.set(&g, Knob::CpusetCpus(vec![last]))?;
            }
        }
    } else {
        report
            .notes
            .push("no cpuset controller: cpuset not measured".into());
    }
    // A task throttled by CFS bandwidth cannot be frozen before its next
    // period (it must run to reach the freezer): freezes are measured with
    // the quota lifted, the child pinned to one CPU by the cpuset.
    if g.has(Controller::Cpu) {
        ex.set(
            &g,
            Knob::CpuMax {
                quota_us: None,
                period_us: 100_000,
            },
        )?;
    }
    if g.has(Controller::Freezer) {
        let (f, t) = measure_freeze(&mut ex, &g, reps, &mut report.freeze_timeouts)?;
        match hier.freezer() {
            Some(FreezerBackend::V2) => (report.freeze_v2, report.thaw_v2) = (f, t),
            _ => (report.freeze_v1, report.thaw_v1) = (f, t),
        }
    }
    // Hybrid: the unified tree's cgroup.freeze too.
    if hier.layout() == Layout::Hybrid && hier.freezer() == Some(FreezerBackend::V1) {
        match hier.clone().with_freezer(FreezerBackend::V2) {
            Ok(h2) => {
                let mut ex2 = Executor::new(h2).restore_on_drop(true);
                let g2 = ex2.create_group(&name, &[Controller::Freezer])?;
                ex2.add_process(&g2, pid)?;
                let (f, t) = measure_freeze(&mut ex2, &g2, reps, &mut report.freeze_timeouts)?;
                (report.freeze_v2, report.thaw_v2) = (f, t);
                let r = ex2.restore_all();
                if !r.is_clean() {
                    report
                        .notes
                        .push(format!("unified cleanup: {}", r.failures.join("; ")));
                }
            }
            Err(e) => report.notes.push(format!("no unified freezer: {e}")),
        }
    }
    drop(child);
    let r = ex.restore_all();
    if !r.is_clean() {
        report
            .notes
            .push(format!("cleanup: {}", r.failures.join("; ")));
    }
    Ok(report)
}

fn measure_cpuset(
    ex: &mut Executor,
    g: &Group,
    reps: usize,
    report: &mut LatencyReport,
) -> Result<()> {
    let Knob::CpusetCpus(all) = ex.get(g, KnobKind::CpusetCpus)? else {
        unreachable!("cpuset read gives CpusetCpus")
    };
    let Some(&last) = all.last() else {
        report.notes.push("empty cpuset: not measured".into());
        return Ok(());
    };
    if all.len() < 2 {
        report
            .notes
            .push("one CPU: cpuset shrink not measured".into());
        return Ok(());
    }
    let (mut shrink, mut widen) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        shrink.push(time_us(|| {
            ex.set(g, Knob::CpusetCpus(vec![last])).map(|_| ())
        })?);
        std::thread::sleep(Duration::from_millis(1));
        widen.push(time_us(|| {
            ex.set(g, Knob::CpusetCpus(all.clone())).map(|_| ())
        })?);
        std::thread::sleep(Duration::from_millis(1));
    }
    report.cpuset_shrink = Stats::of(&shrink);
    report.cpuset_widen = Stats::of(&widen);
    Ok(())
}

fn measure_freeze(
    ex: &mut Executor,
    g: &Group,
    reps: usize,
    timeouts: &mut usize,
) -> Result<(Option<Stats>, Option<Stats>)> {
    let (mut fr, mut th) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let out = ex.freeze(g, Duration::from_secs(1))?;
        if out.is_frozen() {
            fr.push(out.waited().as_secs_f64() * 1e6);
        } else {
            *timeouts += 1;
        }
        th.push(time_us(|| ex.thaw(g).map(|_| ()))?);
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok((Stats::of(&fr), Stats::of(&th)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_median_and_p90() {
        let s = Stats::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (s.n, s.median_us, s.min_us, s.max_us, s.p90_us),
            (5, 3.0, 1.0, 5.0, 5.0)
        );
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(s.median_us, 2.5);
        assert!(Stats::of(&[]).is_none());
    }
}
