//! Tests of the study questions on synthetic files.

use super::*;
use crate::tests::rep;
use crate::{MeasuredRep, Run, Summary};

/// A point of `config` whose reps have `p99s` (ms) in rounds 1, 2, ….
fn point_of(config: Config, batch: Option<&str>, rps: f64, p99s_ms: &[f64], util: f64) -> Point {
    let reps: Vec<Rep> = p99s_ms
        .iter()
        .enumerate()
        .map(|(i, &ms)| {
            let mut r = rep(i as u32 + 1, ms * 1e3, util);
            r.measured = Some(MeasuredRep {
                foreign_util: 0.01 * (i as f64 + 1.0),
                steal_util: 0.0,
                ..MeasuredRep::default()
            });
            r
        })
        .collect();
    Point {
        config,
        label: None,
        batch: batch.map(str::to_string),
        rps_target: rps,
        summary: Summary::of(&reps, None),
        reps,
        idle_periods: None,
        service: None,
    }
}

fn file(points: Vec<Point>) -> ResultFile {
    let mut f = ResultFile::new(
        Source::Measured,
        "test".into(),
        serde_json::json!({}),
        serde_json::json!({}),
    );
    f.run = Some(Run {
        common_random_numbers: true,
        ..Run::default()
    });
    f.points = points;
    f
}

#[test]
fn paired_ratios_pair_invocations_of_the_same_round() {
    let base = point_of(Config::LcAlone, None, 500.0, &[10.0, 11.0, 40.0], 0.3);
    let mut bi = point_of(
        Config::BorrowIdle,
        Some("stream"),
        500.0,
        &[30.0, 11.2, 41.0],
        1.0,
    );
    let r = paired_p99_ratios(&bi, &base);
    assert_eq!(r.len(), 3);
    assert!((r[0] - 3.0).abs() < 1e-9 && (r[2] - 41.0 / 40.0).abs() < 1e-9);
    // an interrupted point: rounds 1 and 3 only, out of order
    bi.reps.remove(1);
    bi.reps.reverse();
    let r = paired_p99_ratios(&bi, &base);
    assert_eq!(r.len(), 2);
    assert!((r[0] - 41.0 / 40.0).abs() < 1e-9 && (r[1] - 3.0).abs() < 1e-9);
}

#[test]
fn the_knee_is_where_the_curve_turns_up() {
    let pts = [
        (100.0, 1.0),
        (200.0, 1.1),
        (300.0, 1.3),
        (400.0, 3.0),
        (500.0, 9.0),
    ];
    assert_eq!(knee_index(&pts, 0.9), Some(2));
    let lin = [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)];
    assert!(knee_index(&lin, 0.0).is_some());
    assert_eq!(knee_index(&[(1.0, 5.0), (2.0, 5.0)], 5.0), Some(1));
    assert_eq!(knee_index(&[], 1.0), None);
}

/// LC alone at three loads with a knee at the second; borrow idle close to
/// it in every round but one noisy one; naive three times worse.
fn three_loads() -> ResultFile {
    let mut pts = Vec::new();
    for (rps, base) in [(100.0, 1.0), (200.0, 1.2), (300.0, 9.0)] {
        pts.push(point_of(
            Config::LcAlone,
            None,
            rps,
            &[base, base * 1.1, base * 0.9],
            0.2,
        ));
        pts.push(point_of(
            Config::BorrowIdle,
            Some("stream"),
            rps,
            &[base * 1.02, base * 1.1 * 1.03, base * 0.9 * 4.0],
            1.0,
        ));
        pts.push(point_of(
            Config::Naive,
            Some("stream"),
            rps,
            &[base * 3.0, base * 1.1 * 3.0, base * 0.9 * 3.0],
            1.9,
        ));
    }
    file(pts)
}

#[test]
fn protection_is_judged_by_the_paired_ratio_up_to_the_knee() {
    let f = three_loads();
    assert_eq!(knee_rps(&f), Some(200.0));
    assert_eq!(lc_alone_slo_us(&f, 200.0), Some(1200.0));
    let v = protection(&f, 0.10, None);
    let of = |c: Config| v.iter().find(|p| p.key.config == c).unwrap();
    let bi = of(Config::BorrowIdle);
    assert_eq!(bi.loads.len(), 2, "loads above the knee are not judged");
    // round 3 is 4x, rounds 1-2 1.02x and 1.03x: the median is 1.03, but
    // the rounds straddle the limit, so the word is not "kept"
    assert!((bi.loads[0].ratio - 1.03).abs() < 1e-9, "{:?}", bi.loads[0]);
    assert_eq!(bi.loads[0].rounds, 3);
    assert!(bi.loads[0].paired.unwrap().max > 3.9);
    assert_eq!(bi.loads[0].verdict, LoadVerdict::Inconclusive);
    assert_eq!(bi.verdict, Verdict::Inconclusive, "{bi:?}");
    let naive = of(Config::Naive);
    assert_eq!(naive.verdict, Verdict::Hurt);
    assert!(
        naive
            .loads
            .iter()
            .all(|l| l.verdict == LoadVerdict::Hurt && (l.ratio - 3.0).abs() < 1e-9)
    );
    // a stricter tolerance puts even borrow idle's best round above it
    assert_eq!(
        protection(&f, 0.01, None)
            .iter()
            .find(|p| p.key.config == Config::BorrowIdle)
            .unwrap()
            .verdict,
        Verdict::Hurt
    );
    // without LC alone nothing is judged
    let mut g = f.clone();
    g.points.retain(|p| p.config != Config::LcAlone);
    assert!(
        protection(&g, 0.1, None)
            .iter()
            .all(|p| p.verdict == Verdict::NotJudged)
    );
}

#[test]
fn without_paired_rounds_the_ratio_of_medians_is_judged() {
    let mut f = three_loads();
    f.run.as_mut().unwrap().common_random_numbers = false;
    let bi = f
        .points
        .iter()
        .find(|p| p.config == Config::BorrowIdle)
        .unwrap();
    assert_eq!(paired_ratio(&f, bi), None);
    let v = protection(&f, 0.10, None);
    let b = v
        .iter()
        .find(|p| p.key.config == Config::BorrowIdle)
        .unwrap();
    // medians: LC alone 1.0 ms, borrow idle 1.133 ms (1.02, 1.133, 3.6);
    // each invocation over LC alone's median: 1.02 .. 3.6 straddles 1.10
    assert!(b.loads[0].paired.is_none());
    assert!((b.loads[0].ratio - 1.133).abs() < 1e-9, "{:?}", b.loads[0]);
    let (lo, hi) = b.loads[0].interval.unwrap();
    assert!(
        (lo - 1.02).abs() < 1e-9 && (hi - 3.6).abs() < 1e-9,
        "{lo} {hi}"
    );
    assert_eq!(b.verdict, Verdict::Inconclusive);
}

#[test]
fn the_median_interval_is_the_sign_tests() {
    let xs: Vec<f64> = (1..=9).map(f64::from).collect();
    // fewer than 3 values cannot reach 75 %
    assert_eq!(median_interval(&xs[..1], 0.75), None);
    assert_eq!(median_interval(&xs[..2], 0.75), None);
    // 3-5: lowest to highest (75 %, 87.5 %, 93.8 %)
    assert_eq!(median_interval(&[3.0, 1.0, 2.0], 0.75), Some((1.0, 3.0)));
    assert_eq!(median_interval(&xs[..5], 0.75), Some((1.0, 5.0)));
    // 6-8: second lowest to second highest (78 %, 87.5 %, 93 %)
    assert_eq!(median_interval(&xs[..6], 0.75), Some((2.0, 5.0)));
    assert_eq!(median_interval(&xs[..8], 0.75), Some((2.0, 7.0)));
    // 9: third (82 %)
    assert_eq!(median_interval(&xs, 0.75), Some((3.0, 7.0)));
    // a stricter confidence widens it
    assert_eq!(median_interval(&xs[..6], 0.95), Some((1.0, 6.0)));
    assert_eq!(median_interval(&[1.0, f64::NAN, 2.0], 0.75), None);
}

/// LC alone at one load (p99 1 ms every round) and borrow idle with
/// `ratios` (its p99 in ms, so the paired ratios), judged at 1.10x.
fn judged(ratios: &[f64]) -> Protection {
    let n = ratios.len();
    let f = file(vec![
        point_of(Config::LcAlone, None, 100.0, &vec![1.0; n], 0.2),
        point_of(Config::BorrowIdle, Some("stream"), 100.0, ratios, 1.0),
    ]);
    protection(&f, 0.10, Some(100.0)).remove(0)
}

#[test]
fn verdicts_say_inconclusive_where_the_rounds_straddle_the_limit() {
    // a quiet machine's noise floor: median 1.29x, rounds 0.77-1.50
    let p = judged(&[1.29, 0.77, 1.50]);
    assert_eq!(p.verdict, Verdict::Inconclusive, "{p:?}");
    assert_eq!(p.loads[0].interval, Some((0.77, 1.50)));
    // clearly above: every round over the limit
    assert_eq!(judged(&[1.4, 1.2, 1.9]).verdict, Verdict::Hurt);
    // clearly below: every round within it
    assert_eq!(judged(&[0.95, 1.02, 1.08]).verdict, Verdict::Kept);
    // at the limit counts as within it
    assert_eq!(judged(&[1.10, 1.0, 1.05]).verdict, Verdict::Kept);
    // one or two rounds say nothing, whatever their value
    assert_eq!(judged(&[0.9]).verdict, Verdict::Inconclusive);
    assert_eq!(judged(&[3.0, 3.0]).verdict, Verdict::Inconclusive);
    // with 7 rounds one outlier each way does not decide
    let p = judged(&[1.0, 0.98, 1.03, 1.05, 0.5, 1.01, 2.5]);
    assert_eq!(p.verdict, Verdict::Kept, "{p:?}");
    // a series is HURT if one load is, even where another is inconclusive
    let f = file(vec![
        point_of(Config::LcAlone, None, 100.0, &[1.0; 3], 0.2),
        point_of(Config::LcAlone, None, 200.0, &[1.0; 3], 0.3),
        point_of(Config::Naive, Some("stream"), 100.0, &[0.9, 1.3, 1.0], 1.0),
        point_of(Config::Naive, Some("stream"), 200.0, &[2.0, 2.1, 1.9], 1.0),
    ]);
    let v = protection(&f, 0.10, Some(200.0));
    assert_eq!(v[0].loads[0].verdict, LoadVerdict::Inconclusive);
    assert_eq!(v[0].loads[1].verdict, LoadVerdict::Hurt);
    assert_eq!(v[0].verdict, Verdict::Hurt);
    // the rule is stated with its limit
    let rule = verdict_rule(1.10);
    assert!(rule.contains("1.10x") && rule.contains("inconclusive") && rule.contains("75 %"));
}

#[test]
fn rows_series_and_noise() {
    let f = three_loads();
    assert_eq!(loads(&f), vec![100.0, 200.0, 300.0]);
    assert_eq!(
        configs(&f),
        vec![Config::LcAlone, Config::Naive, Config::BorrowIdle]
    );
    assert_eq!(batches(&f), vec!["stream".to_string()]);
    let r = rows(&f, Some("stream"));
    assert_eq!(r.len(), 9);
    assert_eq!(r[0].point.config, Config::LcAlone);
    assert_eq!(r[0].impact(), Some(0.0), "LC alone against itself");
    assert_eq!(r[0].paired, None);
    let naive = r.iter().find(|r| r.point.config == Config::Naive).unwrap();
    assert!((naive.impact().unwrap() - 2.0).abs() < 1e-9);
    assert_eq!(rows(&f, None).len(), 3, "LC alone only");
    let n = noise(&f, 0.025).unwrap();
    assert_eq!(n.invocations, 27);
    assert!((n.foreign.max - 0.03).abs() < 1e-12);
    assert_eq!(n.kept_disturbed, 9, "round 3 of every point is above 0.025");
    let key = SeriesKey::of(naive.point);
    assert_eq!(key.name(), "naive · stream");
    assert_eq!(series(&f, &key).len(), 3);
}

#[test]
fn share_below_counts_the_straddling_bucket_in_proportion() {
    let mut d = Distribution::log_buckets("us", 1.0, 100.0, 1);
    d.record(5.0);
    d.record(50.0);
    assert_eq!(share_below(&d, 100.0), Some(1.0));
    assert!((share_below(&d, 10.0).unwrap() - 5.0 / 55.0).abs() < 1e-12);
    assert_eq!(
        share_below(&Distribution::log_buckets("us", 1.0, 10.0, 1), 5.0),
        None
    );
}

#[test]
fn open_verdicts_are_the_straddling_loads_below_the_cap() {
    let f = file(vec![
        point_of(Config::LcAlone, None, 100.0, &[1.0; 5], 0.2),
        point_of(Config::LcAlone, None, 200.0, &[1.0; 5], 0.3),
        // straddles at 100 with 3 rounds: open, room for more
        point_of(Config::Naive, Some("stream"), 100.0, &[0.9, 1.3, 1.0], 1.0),
        // concluded at 200 (HURT): not open
        point_of(Config::Naive, Some("stream"), 200.0, &[2.0, 2.1, 1.9], 1.0),
        // straddles at 200 with 5 rounds: at a cap of 5
        point_of(
            Config::BorrowIdle,
            Some("stream"),
            200.0,
            &[0.9, 1.3, 1.0, 1.2, 0.95],
            1.0,
        ),
        // kept: not open
        point_of(Config::BorrowIdle, Some("stream"), 100.0, &[1.0; 3], 1.0),
    ]);
    let prot = protection(&f, 0.10, Some(200.0));
    // naive is HURT at 200: its straddling 100 decides nothing more
    let (open, capped) = open_verdicts(&prot, 5);
    assert!(open.is_empty(), "{open:?}");
    assert_eq!(capped.len(), 1, "{capped:?}");
    assert_eq!(
        (capped[0].key.config, capped[0].rps, capped[0].rounds),
        (Config::BorrowIdle, 200.0, 5)
    );
    // a higher cap leaves it open
    let (open, capped) = open_verdicts(&prot, 6);
    assert_eq!(open.len(), 1, "{open:?}");
    assert!(capped.is_empty());
    // loads above the knee are not judged: up to 100 rps naive is open
    // (nothing HURT there) and borrow idle kept
    let (open, _) = open_verdicts(&protection(&f, 0.10, Some(150.0)), 6);
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(
        (open[0].key.config, open[0].rps, open[0].rounds),
        (Config::Naive, 100.0, 3)
    );
}

#[test]
fn the_conclusion_compares_what_steps_aside_with_sched_idle() {
    use conclusion::{Versus, conclusion, steps_aside};
    let progress = |mut p: Point, x: f64| {
        for r in &mut p.reps {
            r.batch_progress = Some(x);
        }
        p.summary = Summary::of(&p.reps, None);
        p
    };
    let f = |idle: &[f64], idle_progress: f64| {
        file(vec![
            point_of(Config::LcAlone, None, 100.0, &[1.0; 3], 0.2),
            progress(
                point_of(Config::SchedIdle, Some("stream"), 100.0, idle, 1.5),
                idle_progress,
            ),
            progress(
                point_of(
                    Config::BorrowIdle,
                    Some("stream"),
                    100.0,
                    &[1.0, 0.98, 1.02],
                    0.9,
                ),
                0.7,
            ),
            progress(
                point_of(Config::Naive, Some("stream"), 100.0, &[3.0; 3], 1.6),
                0.9,
            ),
        ])
    };
    let versus_of = |f: &ResultFile| conclusion(f, 0.10).batches[0].versus.clone();
    // SCHED_IDLE kept p99 too and made more progress
    let c = conclusion(&f(&[1.0; 3], 1.6), 0.10);
    let b = &c.batches[0];
    assert_eq!(b.batch, "stream");
    assert_eq!(b.sched_idle.as_ref().unwrap().verdict, Verdict::Kept);
    assert_eq!(
        b.versus.len(),
        1,
        "naive does not step aside: {:?}",
        b.versus
    );
    assert_eq!(b.versus[0].1, Versus::IdleAsGoodMoreProgress);
    let bi = b
        .showings
        .iter()
        .find(|s| s.key.config == Config::BorrowIdle)
        .unwrap();
    assert_eq!(bi.progress_mid, Some(0.7));
    assert_eq!(bi.rounds, 3);
    // less progress for SCHED_IDLE: borrow idle made more
    assert_eq!(
        versus_of(&f(&[1.0; 3], 0.5))[0].1,
        Versus::BothKeptThisMoreProgress
    );
    // SCHED_IDLE hurt p99: only borrow idle kept it
    assert_eq!(versus_of(&f(&[1.5; 3], 1.6))[0].1, Versus::OnlyThisKept);
    // SCHED_IDLE open: no comparison claimed
    assert_eq!(versus_of(&f(&[0.9, 1.4, 1.0], 1.6))[0].1, Versus::Open);
    assert!(steps_aside(Config::Guard) && steps_aside(Config::FixedBudget));
    assert!(!steps_aside(Config::Cpuset) && !steps_aside(Config::SchedIdle));
    // the file says nothing of the lanes' cores here
    assert_eq!(c.batch_shares_core, None);
}
