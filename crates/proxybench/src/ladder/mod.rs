//! **The thesis's table, ours**, as a ladder of variants the profiler
//! orders (Tailor's workflow: trace → fix → proxy). Step 0 runs the
//! service with every hazard of [`LadderSpec::hazards`] on; before each
//! step but the last, `elfen trace` (this crate's dependency
//! `elfen-trace`: BPF recording, the LC line's spans, a client's spans,
//! the study) records one replica of the service with those hazards under
//! the bench's load, and the removable hazard that is the top hazard of
//! most slow requests is fixed next (switched off); the kept hazards
//! (`keep`: a collection cannot be removed, only hidden) are what the last
//! step runs behind the proxy. Each step's typed trace report is saved
//! beside the results, its ranking kept in the record; with
//! [`LadderSpec::order`] the order is given instead (no tracing). Then
//! `elfen trace overhead` measures what tracing costs the service.
//!
//! The parts: this file (the ladder's records, its ranking and its plan)
//! and `trace` (the recording of a step, and `elfen trace overhead`).

mod trace;

pub use trace::overhead;
use trace::trace_step;

use crate::replicas::TempDir;
use crate::spec::{BenchSpec, HAZARDS, LadderSpec, Restart, Variant, Way};
use elfen_bench::lc::requests::RequestSet;
use elfen_trace::overhead::OverheadReport;
use elfen_trace::report::{CauseCount, CauseKind};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The cause the profiler names for a hazard of the server.
pub fn cause_of(hazard: &str) -> Option<CauseKind> {
    match hazard {
        "nagle" => Some(CauseKind::TcpHeld),
        "untouched-heap" => Some(CauseKind::PageFaults),
        "cold-start" => Some(CauseKind::JvmWarmup),
        "small-heap" => Some(CauseKind::JvmPause),
        _ => None,
    }
}

/// What the profiler said of one hazard at one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HazardRank {
    /// The hazard (the server's name).
    pub hazard: String,
    /// The cause the profiler names for it.
    pub cause: CauseKind,
    /// Slow requests whose top (or root) hazard it was.
    pub hazard_top: u64,
    /// Slow requests it was named in.
    pub attributed: u64,
    /// Its total over the slow requests, ms.
    pub total_ms: f64,
    /// Whether the ladder may remove it (not kept).
    pub removable: bool,
}

/// Deeper percentiles the study of a step's trace descends to when no
/// removable hazard is named above the configured one (a kept hazard —
/// long collections — can fill the top of the tail alone).
pub const DEEPER_PCT: [f64; 4] = [95.0, 90.0, 75.0, 50.0];

/// The most requests a deeper study takes on: each slow request's causes
/// are followed back through the requests it queued behind, so a study of
/// half of a saturated service's requests takes minutes and says no more.
pub const DEEPER_MAX_STUDIED: u64 = 300;

/// The percentiles a step's trace is studied at, in order: the configured
/// one, then the deeper ones while they study at most
/// [`DEEPER_MAX_STUDIED`] of `requests`.
pub fn study_pcts(above_pct: f64, requests: u64) -> Vec<f64> {
    let mut v = vec![above_pct];
    v.extend(DEEPER_PCT.iter().copied().filter(|&p| {
        p < above_pct && (requests as f64 * (1.0 - p / 100.0)).ceil() as u64 <= DEEPER_MAX_STUDIED
    }));
    v
}

/// What a step's trace measured (the full report is saved beside).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepTrace {
    /// The saved report at the configured percentile
    /// (`elfen-trace-report/1`).
    pub report: String,
    /// The percentile whose study ranked the hazards: the configured one,
    /// or the first of [`DEEPER_PCT`] below it at which a removable hazard
    /// was named.
    pub ranked_at_pct: f64,
    /// The report of that study (the same file at the configured
    /// percentile).
    pub ranking_report: String,
    /// Requests seen.
    pub requests: u64,
    /// Requests studied (above the percentile).
    pub studied: usize,
    /// The client's p99 and max in that trace, ms.
    pub p99_ms: f64,
    /// Max, ms.
    pub max_ms: f64,
    /// Length of the recording, s.
    pub duration_s: f64,
    /// Kernel records kept.
    pub records: u64,
    /// Kernel records lost.
    pub lost: u64,
}

/// One step of the ladder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LadderStep {
    /// 0, 1, …
    pub step: usize,
    /// Its variant in the bench.
    pub variant: String,
    /// The hazards on.
    pub hazards: Vec<String>,
    /// The hazard fixed after this step (none at the last).
    pub fixed_next: Option<String>,
    /// How it was chosen: `profiler` (the top-ranked removable hazard),
    /// `profiler: none named` (no removable hazard named: the first in the
    /// server's order), `order` (given by the configuration).
    pub chosen_by: Option<String>,
    /// The profiler's ranking of the hazards on, first the one most slow
    /// requests had as their top hazard.
    pub ranking: Vec<HazardRank>,
    /// The trace, where the step was traced.
    pub trace: Option<StepTrace>,
}

/// The ladder's part of the bench's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LadderRecord {
    /// What was asked.
    pub spec: LadderSpec,
    /// The steps, in order.
    pub steps: Vec<LadderStep>,
    /// `elfen trace`'s cost on the service with its hazards off.
    pub overhead: Option<OverheadReport>,
}

/// The `--hazards` argument for a list.
pub fn hazards_arg(on: &[String]) -> String {
    if on.is_empty() {
        "--hazards none".into()
    } else {
        format!("--hazards {}", on.join(","))
    }
}

/// The variant of a step with hazards `on`: a restarted active replica
/// (beside a warm backup) per invocation while a hazard of a fresh JVM is
/// on (cold start, an untouched heap).
pub fn step_variant(step: usize, on: &[String], ways: &[Way]) -> Variant {
    let fresh = on
        .iter()
        .any(|h| h == "cold-start" || h == "untouched-heap");
    Variant {
        name: format!("step{step}"),
        args: hazards_arg(on),
        env: Default::default(),
        restart: if fresh {
            Restart::Active
        } else {
            Restart::Variant
        },
        ways: Some(ways.to_vec()),
    }
}

/// The profiler's ranking of the hazards `on` in `report`, first the one
/// most slow requests had as their top (or root) hazard, then by how many
/// it was named in and its total.
pub fn rank(counts: &[CauseCount], on: &[String], keep: &[String]) -> Vec<HazardRank> {
    let mut v: Vec<HazardRank> = on
        .iter()
        .filter_map(|h| {
            let cause = cause_of(h)?;
            let c = counts.iter().find(|c| c.kind == cause)?;
            Some(HazardRank {
                hazard: h.clone(),
                cause,
                hazard_top: c.hazard_top,
                attributed: c.attributed,
                total_ms: c.total_ns as f64 / 1e6,
                removable: !keep.contains(h),
            })
        })
        .collect();
    v.sort_by(|a, b| {
        (b.hazard_top, b.attributed)
            .cmp(&(a.hazard_top, a.attributed))
            .then(b.total_ms.total_cmp(&a.total_ms))
    });
    v
}

/// The hazard to fix next from a ranking: the first removable one the
/// profiler named; if it named none, the first removable one in the
/// server's order. Returns it and how it was chosen.
pub fn pick(ranking: &[HazardRank], on: &[String], keep: &[String]) -> Option<(String, String)> {
    if let Some(r) = ranking
        .iter()
        .find(|r| r.removable && (r.hazard_top > 0 || r.attributed > 0))
    {
        return Some((r.hazard.clone(), "profiler".into()));
    }
    HAZARDS
        .iter()
        .find(|h| on.iter().any(|o| o == *h) && !keep.iter().any(|k| k == *h))
        .map(|h| (h.to_string(), "profiler: none named".into()))
}

/// What the ladder's steps and traces need.
pub struct Ctx<'a> {
    /// The bench.
    pub spec: &'a BenchSpec,
    /// The service's command line.
    pub command: &'a str,
    /// The requests.
    pub set: &'a Arc<RequestSet>,
    /// Where the replicas' pages go.
    pub dir: &'a TempDir,
    /// Where the traces' reports go (`<prefix>-step<k>-trace.json`).
    pub out_prefix: &'a Path,
    /// Ctrl-C.
    pub stop: &'a AtomicBool,
}

/// The ladder's plan: its steps' variants and records.
pub struct Plan {
    /// One variant per step, run before the file's variants.
    pub variants: Vec<Variant>,
    /// The steps as planned (with the traces that chose them).
    pub steps: Vec<LadderStep>,
    /// Whether a Ctrl-C stopped a trace (the steps before it are kept).
    pub interrupted: bool,
}

/// Plans the ladder: traces each step (unless an order is given) and
/// returns the steps' variants and their records.
pub fn plan(c: &Ctx, l: &LadderSpec) -> anyhow::Result<Plan> {
    plan_with(l, c.stop, |k, on| trace_step(c, l, k, on))
}

/// [`plan`] with the tracing of step `k` (hazards `on`) done by `trace`:
/// the ladder's decisions apart from the recording.
pub fn plan_with(
    l: &LadderSpec,
    stop: &AtomicBool,
    mut trace: impl FnMut(usize, &[String]) -> anyhow::Result<(Vec<HazardRank>, StepTrace)>,
) -> anyhow::Result<Plan> {
    let mut on: Vec<String> = HAZARDS
        .iter()
        .filter(|h| l.hazards.iter().any(|x| x == *h))
        .map(|h| h.to_string())
        .collect();
    let mut variants = Vec::new();
    let mut steps = Vec::new();
    let mut order = l.order.iter();
    for k in 0.. {
        let removable: Vec<&String> = on.iter().filter(|h| !l.keep.contains(h)).collect();
        let last = removable.is_empty();
        let ways = if last { &l.last_ways } else { &l.ways };
        let v = step_variant(k, &on, ways);
        let mut step = LadderStep {
            step: k,
            variant: v.name.clone(),
            hazards: on.clone(),
            fixed_next: None,
            chosen_by: None,
            ranking: Vec::new(),
            trace: None,
        };
        variants.push(v);
        if last {
            steps.push(step);
            break;
        }
        let next = if l.order.is_empty() {
            let (ranking, trace) = match trace(k, &on) {
                Ok(x) => x,
                Err(_) if stop.load(Ordering::Relaxed) => {
                    steps.push(step);
                    return Ok(Plan {
                        variants,
                        steps,
                        interrupted: true,
                    });
                }
                Err(e) => return Err(e),
            };
            let deeper = trace.ranked_at_pct < l.trace.above_pct;
            let at = trace.ranked_at_pct;
            step.ranking = ranking;
            step.trace = Some(trace);
            pick(&step.ranking, &on, &l.keep).map(|(h, how)| {
                if deeper && how == "profiler" {
                    (h, format!("profiler, above p{at}"))
                } else {
                    (h, how)
                }
            })
        } else {
            order
                .find(|h| on.contains(h) && !l.keep.contains(h))
                .map(|h| (h.clone(), "order".to_string()))
        };
        let Some((fix, how)) = next else {
            steps.push(step);
            break;
        };
        eprintln!(
            "elfen proxy bench: ladder step {k} ({}): fixing {fix} next ({how}{})",
            on.join(", "),
            step.ranking
                .iter()
                .map(|r| format!(
                    "; {} top hazard of {}, named in {}",
                    r.hazard, r.hazard_top, r.attributed
                ))
                .collect::<String>()
        );
        on.retain(|h| *h != fix);
        step.fixed_next = Some(fix);
        step.chosen_by = Some(how);
        steps.push(step);
    }
    Ok(Plan {
        variants,
        steps,
        interrupted: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hz(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn steps_switch_hazards_with_the_servers_flag_and_restart_fresh_jvms() {
        let v = step_variant(0, &hz(&["nagle", "cold-start"]), &[Way::Alone]);
        assert_eq!(v.args, "--hazards nagle,cold-start");
        assert_eq!(v.restart, Restart::Active);
        let v = step_variant(2, &hz(&["small-heap"]), &[Way::Alone, Way::Proxy]);
        assert_eq!(
            (v.args.as_str(), v.restart),
            ("--hazards small-heap", Restart::Variant)
        );
        assert_eq!(v.ways, Some(vec![Way::Alone, Way::Proxy]));
        assert_eq!(hazards_arg(&[]), "--hazards none");
        for h in HAZARDS {
            assert!(cause_of(h).is_some_and(CauseKind::is_hazard), "{h}");
        }
    }

    fn ranked(h: &str, top: u64, attributed: u64, keep: bool) -> HazardRank {
        HazardRank {
            hazard: h.into(),
            cause: cause_of(h).unwrap(),
            hazard_top: top,
            attributed,
            total_ms: 1.0,
            removable: !keep,
        }
    }

    #[test]
    fn the_top_ranked_removable_hazard_is_fixed_next() {
        let on = hz(&["nagle", "untouched-heap", "small-heap"]);
        let keep = hz(&["small-heap"]);
        // the kept hazard ranks first: the next removable one is fixed
        let r = vec![
            ranked("small-heap", 9, 9, true),
            ranked("untouched-heap", 3, 5, false),
            ranked("nagle", 1, 7, false),
        ];
        assert_eq!(
            pick(&r, &on, &keep),
            Some(("untouched-heap".into(), "profiler".into()))
        );
        // none named: the server's order
        let r = vec![
            ranked("nagle", 0, 0, false),
            ranked("untouched-heap", 0, 0, false),
        ];
        assert_eq!(
            pick(&r, &on, &keep),
            Some(("nagle".into(), "profiler: none named".into()))
        );
        // nothing removable left
        assert_eq!(pick(&[], &keep, &keep), None);
    }

    fn count(kind: CauseKind, hazard_top: u64, attributed: u64, total_ms: u64) -> CauseCount {
        CauseCount {
            kind,
            attributed,
            top: hazard_top,
            hazard_top,
            total_ns: total_ms * 1_000_000,
        }
    }

    #[test]
    fn deeper_studies_stay_bounded() {
        assert_eq!(study_pcts(99.0, 2400), [99.0, 95.0, 90.0]);
        assert_eq!(study_pcts(99.0, 500), [99.0, 95.0, 90.0, 75.0, 50.0]);
        assert_eq!(study_pcts(90.0, 500), [90.0, 75.0, 50.0]);
        assert_eq!(study_pcts(99.0, 100_000), [99.0]);
    }

    #[test]
    fn hazards_rank_by_the_slow_requests_they_top_then_named_in_then_total() {
        let counts = vec![
            count(CauseKind::TcpHeld, 2, 9, 5),
            count(CauseKind::PageFaults, 4, 4, 1),
            count(CauseKind::JvmWarmup, 2, 9, 8),
            count(CauseKind::JvmPause, 7, 7, 90),
            // not a hazard of the server: never ranked
            count(CauseKind::Queueing, 50, 50, 500),
        ];
        let r = rank(&counts, &hz(&HAZARDS), &hz(&["small-heap"]));
        let order: Vec<&str> = r.iter().map(|x| x.hazard.as_str()).collect();
        assert_eq!(
            order,
            ["small-heap", "untouched-heap", "cold-start", "nagle"],
            "{r:?}"
        );
        assert!(!r[0].removable && r[1].removable);
        assert_eq!((r[1].hazard_top, r[1].attributed), (4, 4));
        assert_eq!(r[2].total_ms, 8.0);
        // only the hazards on are ranked
        let r = rank(&counts, &hz(&["nagle"]), &[]);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].cause, CauseKind::TcpHeld);
    }

    fn traced(pct: f64) -> StepTrace {
        StepTrace {
            report: "r.json".into(),
            ranked_at_pct: pct,
            ranking_report: "r.json".into(),
            requests: 100,
            studied: 1,
            p99_ms: 1.0,
            max_ms: 2.0,
            duration_s: 1.0,
            records: 10,
            lost: 0,
        }
    }

    #[test]
    fn the_ladder_fixes_what_the_profiler_ranks_first_and_ends_behind_the_proxy() {
        let l = LadderSpec::default();
        let stop = AtomicBool::new(false);
        let mut seen = Vec::new();
        let p = plan_with(&l, &stop, |k, on| {
            seen.push(on.to_vec());
            let ranking = match k {
                // the kept collections top the tail; faults next
                0 => vec![
                    ranked("small-heap", 9, 9, true),
                    ranked("untouched-heap", 3, 5, false),
                    ranked("nagle", 1, 7, false),
                ],
                // found only deeper in the tail
                1 => vec![ranked("nagle", 2, 2, false)],
                // nothing named: the server's order
                _ => vec![ranked("cold-start", 0, 0, false)],
            };
            Ok((ranking, traced(if k == 1 { 95.0 } else { 99.0 })))
        })
        .unwrap();
        assert!(!p.interrupted);
        assert_eq!(
            seen,
            vec![
                hz(&HAZARDS),
                hz(&["nagle", "cold-start", "small-heap"]),
                hz(&["cold-start", "small-heap"]),
            ],
            "each step traced with the hazards still on"
        );
        let fixed: Vec<_> = p
            .steps
            .iter()
            .map(|s| (s.fixed_next.as_deref(), s.chosen_by.as_deref()))
            .collect();
        assert_eq!(
            fixed,
            [
                (Some("untouched-heap"), Some("profiler")),
                (Some("nagle"), Some("profiler, above p95")),
                (Some("cold-start"), Some("profiler: none named")),
                (None, None),
            ]
        );
        let last = &p.variants[3];
        assert_eq!(last.args, "--hazards small-heap");
        assert_eq!(last.restart, Restart::Variant);
        assert_eq!(last.ways.as_deref(), Some(&l.last_ways[..]));
        assert_eq!(
            p.variants[0].args,
            "--hazards nagle,untouched-heap,cold-start,small-heap"
        );
        assert_eq!(p.variants[0].restart, Restart::Active);
        assert_eq!(p.variants[0].ways.as_deref(), Some(&l.ways[..]));
        assert!(p.steps[3].trace.is_none() && p.steps[0].trace.is_some());
        let names: Vec<_> = p.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["step0", "step1", "step2", "step3"]);
    }

    #[test]
    fn a_given_order_is_followed_without_tracing_and_a_stopped_trace_keeps_the_steps_before() {
        let l = LadderSpec {
            order: hz(&["cold-start", "nagle", "untouched-heap"]),
            ..LadderSpec::default()
        };
        let stop = AtomicBool::new(false);
        let p = plan_with(&l, &stop, |_, _| panic!("no trace with an order")).unwrap();
        let fixed: Vec<_> = p
            .steps
            .iter()
            .filter_map(|s| s.fixed_next.clone())
            .collect();
        assert_eq!(fixed, hz(&["cold-start", "nagle", "untouched-heap"]));
        assert!(p.steps.iter().all(|s| s.trace.is_none()));
        assert!(
            p.steps[..3]
                .iter()
                .all(|s| s.chosen_by.as_deref() == Some("order"))
        );

        let l = LadderSpec::default();
        let p = plan_with(&l, &stop, |k, _| {
            if k == 1 {
                stop.store(true, Ordering::Relaxed);
                anyhow::bail!("interrupted while tracing");
            }
            Ok((vec![ranked("nagle", 1, 1, false)], traced(99.0)))
        })
        .unwrap();
        assert!(p.interrupted);
        assert_eq!(p.steps.len(), 2);
        assert_eq!(p.steps[0].fixed_next.as_deref(), Some("nagle"));
        assert!(p.steps[1].trace.is_none() && p.steps[1].fixed_next.is_none());
        // a failing trace without a Ctrl-C is an error
        let stop = AtomicBool::new(false);
        assert!(plan_with(&l, &stop, |_, _| anyhow::bail!("no BPF")).is_err());
    }
}
