//! **Verdicts and targets** in words: what a run concluded, from
//! `elfen_results::study` — did each configuration keep the LC's p99 at LC
//! alone's (paired ratio, loads up to the knee), how much utilization it
//! recovered, and the harness's targets (borrow idle fills the request
//! lane's idle time, budget policies recover more where the SLO leaves
//! headroom, the default sweep fits in five minutes).

use crate::spec::BenchSpec;
use elfen_results::study::{self, LoadVerdict, Protection, Verdict};
use elfen_results::{Config, ResultFile};
use std::fmt::Write as _;

/// The verdict tolerance a file was judged with (from its spec), as a
/// fraction.
pub fn tolerance(f: &ResultFile) -> f64 {
    f.spec
        .get("verdict_tolerance_pct")
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(BenchSpec::default().verdict_tolerance_pct)
        / 100.0
}

fn knee_words(f: &ResultFile) -> String {
    match study::knee_rps(f) {
        Some(k) => format!("loads up to LC alone's knee ({k:.0} rps)"),
        None => "no LC-alone curve".into(),
    }
}

/// The rule the verdicts of `f` follow, in words (with its limit).
pub fn rule_line(f: &ResultFile) -> String {
    format!("rule: {}", study::verdict_rule(1.0 + tolerance(f)))
}

/// How many rounds the verdicts rest on: the rounds every point ran, and
/// those added where a verdict was open, with the caps (`None` for files
/// without a run record).
pub fn rounds_line(f: &ResultFile) -> Option<String> {
    let r = f.run.as_ref()?;
    let Some(a) = &r.rounds else {
        return Some(format!(
            "rounds: {} per point (none added: this file predates added rounds)",
            r.reps_planned
        ));
    };
    let added: Vec<String> = a
        .by_rps
        .iter()
        .filter(|l| !l.added.is_empty())
        .map(|l| format!("{} at {:.0} rps", l.added.len(), l.rps))
        .collect();
    let what = if added.is_empty() {
        "none added".to_string()
    } else {
        format!("added {} in {:.0} s", added.join(", "), a.spent_s)
    };
    Some(format!(
        "rounds: {} per point, then more where a judged verdict was open (its interval \
         straddled the limit), beside LC alone, up to {} rounds a point and {:.0} s in all: {what}; \
         stopped because {}",
        r.reps_planned,
        a.max_reps,
        a.budget_s,
        a.end.words()
    ))
}

/// One line per protection judgement: the verdict, then per load the
/// ratio judged (pooled or the paired median, its interval, rounds; `✗`
/// above the limit, `?` inconclusive) and the total utilization.
pub fn protection_lines(f: &ResultFile) -> Vec<String> {
    let tol = tolerance(f);
    study::protection(f, tol, None)
        .iter()
        .map(|p| protection_line(p, tol))
        .collect()
}

fn protection_line(p: &Protection, tol: f64) -> String {
    let mut s = format!("{:<10} {}:", p.verdict.word(), p.key.name());
    for l in &p.loads {
        let ratio = match (l.pooled, l.paired, l.interval) {
            (Some(x), _, _) => format!(
                "{:.2}x pooled ({:.2}-{:.2}, {} rounds)",
                x.ratio, x.interval.0, x.interval.1, x.rounds
            ),
            (None, Some(st), Some((lo, hi))) => {
                format!("{:.2}x ({lo:.2}-{hi:.2}, {} rounds)", st.median, l.rounds)
            }
            (None, Some(st), None) => format!("{:.2}x ({} rounds)", st.median, l.rounds),
            (None, None, _) => format!("{:.2}x (ratio of medians)", l.ratio),
        };
        let _ = write!(
            s,
            " {:.0} rps {ratio}{}, util {:.2} vs {:.2};",
            l.rps,
            match l.verdict {
                LoadVerdict::Kept => "",
                LoadVerdict::Hurt => " ✗",
                LoadVerdict::Inconclusive => " ?",
            },
            l.util_total,
            l.base_util_total
        );
    }
    if p.verdict == Verdict::NotJudged {
        s.push_str(" no load up to the knee with LC alone beside it");
    } else {
        s.pop();
        let _ = write!(s, " (limit {:.2}x)", 1.0 + tol);
    }
    s
}

/// A harness target, judged on a measured file.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// What is claimed.
    pub claim: String,
    /// Met (`None`: not enough data to judge).
    pub met: Option<bool>,
    /// The numbers behind the verdict.
    pub detail: String,
}

/// `met`, `NOT met` or `not judged`.
pub fn word(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "not judged",
    }
}

/// The default sweep's time for everything but the added rounds, s.
pub const FIRST_ROUNDS_LIMIT_S: f64 = 300.0;

/// The harness's targets on a measured file.
pub fn targets(f: &ResultFile) -> Vec<Target> {
    let mut out = Vec::new();
    let tol = tolerance(f);
    let prot = study::protection(f, tol, None);
    // 1. borrow idle keeps p99 and fills the idle request lane
    for p in prot.iter().filter(|p| p.key.config == Config::BorrowIdle) {
        let util_ok = p.loads.iter().all(|l| l.util_total >= 0.9);
        out.push(Target {
            claim: format!(
                "{}: p99 kept at LC alone's (paired ratio <= {:.2}x) at {}, total utilization >= 0.9",
                p.key.name(),
                1.0 + tol,
                knee_words(f)
            ),
            met: match p.verdict {
                Verdict::Kept => Some(util_ok),
                Verdict::Hurt => Some(false),
                Verdict::Inconclusive | Verdict::NotJudged => None,
            },
            detail: protection_line(p, tol),
        });
    }
    // 2. budget policies: more utilization than borrow idle, SLO met, at
    //    loads up to the knee where the budget is > 0
    let knee = study::knee_rps(f);
    for c in [
        Config::FixedBudget,
        Config::RefreshBudget,
        Config::DynamicRefresh,
    ] {
        for b in study::batches(f) {
            let mut met = None::<bool>;
            let mut detail = Vec::new();
            for p in study::config_series(f, c, Some(&b))
                .into_iter()
                .filter(|p| knee.is_some_and(|k| p.rps_target <= k))
            {
                let Some(bi) = study::point(f, Config::BorrowIdle, Some(&b), p.rps_target) else {
                    continue;
                };
                let budget = study::budget_us(p).unwrap_or(0.0);
                let (u, ub) = (
                    p.summary.utilization.total.median,
                    bi.summary.utilization.total.median,
                );
                if budget <= 0.0 {
                    detail.push(format!(
                        "{:.0} rps: budget 0 (no headroom): util {u:.2} vs {ub:.2}, not judged",
                        p.rps_target
                    ));
                    continue;
                }
                let slo = p.summary.slo_met == Some(true);
                met = Some(met.unwrap_or(true) && u > ub && slo);
                detail.push(format!(
                    "{:.0} rps (budget {:.2} ms): util {u:.2} vs {ub:.2}, p99 {:.2} ms {}",
                    p.rps_target,
                    budget / 1e3,
                    p.summary.latency_us.p99.median / 1e3,
                    if slo { "(SLO ok)" } else { "(SLO missed)" }
                ));
            }
            if !detail.is_empty() {
                out.push(Target {
                    claim: format!(
                        "{c} · {b}: utilization above borrow idle's while meeting the SLO, at {} \
                         where the SLO leaves headroom (budget > 0)",
                        knee_words(f)
                    ),
                    met,
                    detail: detail.join("; "),
                });
            }
        }
    }
    // 3. the default sweep's wall time: its first rounds in 5 minutes, the
    //    rounds added to open verdicts within their budget
    if let Some(w) = f.run.as_ref().and_then(|r| r.wall) {
        let default = serde_json::to_value(BenchSpec::default()).unwrap_or_default();
        let is_default = [
            "configs",
            "kernels",
            "rps",
            "rps_fractions",
            "duration_s",
            "min_requests",
            "warmup_s",
            "reps",
            "max_reps",
            "added_reps_budget_s",
            "disturbed_retries",
            "rerun_budget_s",
        ]
        .iter()
        .all(|k| f.spec.get(k) == default.get(k));
        let added_s = f
            .run
            .as_ref()
            .and_then(|r| r.rounds.as_ref())
            .map_or(0.0, |a| a.spent_s);
        let limit_s = FIRST_ROUNDS_LIMIT_S + BenchSpec::default().added_reps_budget_s;
        out.push(Target {
            claim: format!(
                "the default sweep fits in {:.0} minutes ({:.0} for its first rounds, {:.0} for \
                 rounds added to open verdicts)",
                limit_s / 60.0,
                FIRST_ROUNDS_LIMIT_S / 60.0,
                BenchSpec::default().added_reps_budget_s / 60.0
            ),
            met: is_default.then_some(w.total_s <= limit_s),
            detail: format!(
                "{:.0} s wall time, {added_s:.0} s of it added rounds{}",
                w.total_s,
                if is_default {
                    ""
                } else {
                    " (not the default sweep: not judged)"
                }
            ),
        });
    }
    out
}

/// The targets as text lines.
pub fn targets_text(f: &ResultFile) -> String {
    let mut s = String::new();
    for t in targets(f) {
        let _ = writeln!(s, "- [{}] {}\n    {}", word(t.met), t.claim, t.detail);
    }
    s
}

/// The noise line of a measured file.
pub fn noise_line(f: &ResultFile) -> Option<String> {
    let limit = f
        .spec
        .get("disturbed_lanes")
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(BenchSpec::default().disturbed_lanes);
    let n = study::noise(f, limit)?;
    Some(format!(
        "machine noise during measured windows: other processes {:.2} lanes median, {:.2} max; \
         host steal {:.2} median, {:.2} max; {} disturbed invocations re-run, {} of {} kept \
         although above {limit} lanes",
        n.foreign.median,
        n.foreign.max,
        n.steal.median,
        n.steal.max,
        n.reruns,
        n.kept_disturbed,
        n.invocations
    ))
}

/// Where a sweep's wall time went, one line.
pub fn wall_line(f: &ResultFile) -> Option<String> {
    let w = f.run.as_ref()?.wall?;
    Some(format!(
        "wall time {:.0} s: setup {:.1} s, capacity probe {:.1} s, batch alone {:.1} s, \
         pre-sweep {:.1} s, points {:.1} s (batch start/settle/stop {:.1} s), disturbed re-runs \
         {:.1} s, saving {:.1} s, other {:.1} s",
        w.total_s,
        w.setup_s,
        w.probe_s,
        w.batch_alone_s,
        w.presweep_s,
        w.points_s,
        w.points_batch_start_stop_s,
        w.reruns_s,
        w.saving_s,
        w.other_s
    ))
}
