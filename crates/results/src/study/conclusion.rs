//! What a run **concluded**, as facts to put in words: per batch program,
//! each configuration's verdict with the utilization and batch progress it
//! reached at the judged loads, and how each configuration that steps
//! aside for the LC (Elfen's policies, the daemon's modes) compares with
//! plain `SCHED_IDLE` beside it — and whether the machine could show what
//! stepping aside frees on a shared core.

use super::{Protection, SeriesKey, Verdict, point, protection};
use crate::{Config, ResultFile};

/// The smallest and largest of some figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Smallest.
    pub lo: f64,
    /// Largest.
    pub hi: f64,
}

impl Range {
    /// The range of `xs` (non-finite values left out); `None` if none is left.
    pub fn of(xs: impl IntoIterator<Item = f64>) -> Option<Range> {
        xs.into_iter()
            .filter(|x| x.is_finite())
            .fold(None, |r: Option<Range>, x| {
                Some(r.map_or(Range { lo: x, hi: x }, |r| Range {
                    lo: r.lo.min(x),
                    hi: r.hi.max(x),
                }))
            })
    }
}

/// One configuration with one batch program, over the loads it was judged
/// at.
#[derive(Debug, Clone, PartialEq)]
pub struct Showing {
    /// The series.
    pub key: SeriesKey,
    /// Its verdict.
    pub verdict: Verdict,
    /// The judged loads, rps.
    pub rps: Option<Range>,
    /// The paired p99 ratio to LC alone (median over rounds) per load.
    pub ratio: Option<Range>,
    /// Total utilization (median per load).
    pub util: Option<Range>,
    /// Batch progress relative to the batch alone (median per load).
    pub progress: Option<Range>,
    /// The median over the judged loads of the per-load median progress —
    /// the figure comparisons use.
    pub progress_mid: Option<f64>,
    /// Most rounds at one judged load.
    pub rounds: usize,
}

/// How a configuration that steps aside compares with `SCHED_IDLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versus {
    /// Both kept p99; `SCHED_IDLE` made at least as much batch progress.
    IdleAsGoodMoreProgress,
    /// Both kept p99; this configuration made more batch progress.
    BothKeptThisMoreProgress,
    /// This configuration kept p99, `SCHED_IDLE` did not.
    OnlyThisKept,
    /// `SCHED_IDLE` kept p99, this configuration did not.
    OnlyIdleKept,
    /// Neither kept p99.
    NeitherKept,
    /// One of the two verdicts is open (or progress is unknown).
    Open,
}

/// One batch program's conclusion.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchConclusion {
    /// The batch program.
    pub batch: String,
    /// Every configuration that ran with it, in the file's order.
    pub showings: Vec<Showing>,
    /// `SCHED_IDLE`'s showing, when it ran.
    pub sched_idle: Option<Showing>,
    /// Each configuration that steps aside, against `SCHED_IDLE` (empty
    /// without it).
    pub versus: Vec<(SeriesKey, Versus)>,
}

/// A run's conclusion.
#[derive(Debug, Clone, PartialEq)]
pub struct Conclusion {
    /// Per batch program, in the file's order.
    pub batches: Vec<BatchConclusion>,
    /// Whether the batch lanes share the request lane's core (SMT
    /// siblings); `None` when the file does not say.
    pub batch_shares_core: Option<bool>,
}

/// Whether `c` steps its batch work aside for the LC's requests (Elfen's
/// policies, the daemon's modes): what `SCHED_IDLE` is the plain
/// alternative to.
pub fn steps_aside(c: Config) -> bool {
    c.policy().is_some() || c.is_daemon_mode()
}

fn showing(f: &ResultFile, p: &Protection) -> Showing {
    let progress: Vec<f64> = p
        .loads
        .iter()
        .filter_map(|l| {
            point(f, p.key.config, p.key.batch.as_deref(), l.rps)
                .and_then(|pt| pt.summary.batch_progress)
                .map(|s| s.median)
        })
        .collect();
    Showing {
        key: p.key.clone(),
        verdict: p.verdict,
        rps: Range::of(p.loads.iter().map(|l| l.rps)),
        ratio: Range::of(p.loads.iter().map(|l| l.ratio)),
        util: Range::of(p.loads.iter().map(|l| l.util_total)),
        progress: Range::of(progress.iter().copied()),
        progress_mid: crate::Stat::of(&progress).map(|s| s.median),
        rounds: p.loads.iter().map(|l| l.rounds).max().unwrap_or(0),
    }
}

/// How `s` compares with `idle` (`SCHED_IDLE` with the same batch).
pub fn versus(s: &Showing, idle: &Showing) -> Versus {
    use Verdict::{Hurt, Kept};
    match (s.verdict, idle.verdict) {
        (Kept, Kept) => match (s.progress_mid, idle.progress_mid) {
            (Some(a), Some(b)) if b >= a => Versus::IdleAsGoodMoreProgress,
            (Some(_), Some(_)) => Versus::BothKeptThisMoreProgress,
            _ => Versus::Open,
        },
        (Kept, Hurt) => Versus::OnlyThisKept,
        (Hurt, Kept) => Versus::OnlyIdleKept,
        (Hurt, Hurt) => Versus::NeitherKept,
        _ => Versus::Open,
    }
}

/// Whether the batch lanes share the request lane's core: as recorded, else
/// from the machine's SMT ways (1: no SMT, so they cannot).
pub fn batch_shares_core(f: &ResultFile) -> Option<bool> {
    f.run
        .as_ref()
        .and_then(|r| r.lanes.batch_shares_core)
        .or_else(|| {
            f.system
                .get("smt_ways")
                .and_then(serde_json::Value::as_u64)
                .filter(|&w| w == 1)
                .map(|_| false)
        })
}

/// The conclusion of `f`, judged with `tolerance` as [`protection`] does.
pub fn conclusion(f: &ResultFile, tolerance: f64) -> Conclusion {
    let prot = protection(f, tolerance, None);
    let mut batches: Vec<BatchConclusion> = Vec::new();
    for b in super::batches(f) {
        let showings: Vec<Showing> = prot
            .iter()
            .filter(|p| p.key.batch.as_deref() == Some(b.as_str()) && p.key.label.is_none())
            .map(|p| showing(f, p))
            .collect();
        let sched_idle = showings
            .iter()
            .find(|s| s.key.config == Config::SchedIdle)
            .cloned();
        let versus = match &sched_idle {
            Some(idle) => showings
                .iter()
                .filter(|s| steps_aside(s.key.config))
                .map(|s| (s.key.clone(), versus(s, idle)))
                .collect(),
            None => Vec::new(),
        };
        batches.push(BatchConclusion {
            batch: b,
            showings,
            sched_idle,
            versus,
        });
    }
    Conclusion {
        batches,
        batch_shares_core: batch_shares_core(f),
    }
}
