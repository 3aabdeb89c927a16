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
    assert_eq!(bi.verdict, Verdict::Kept, "{bi:?}");
    assert_eq!(bi.loads.len(), 2, "loads above the knee are not judged");
    // round 3 is 4x, rounds 1-2 1.02x and 1.03x: the median is 1.03
    assert!((bi.loads[0].ratio - 1.03).abs() < 1e-9, "{:?}", bi.loads[0]);
    assert_eq!(bi.loads[0].rounds, 3);
    assert!(bi.loads[0].paired.unwrap().max > 3.9);
    let naive = of(Config::Naive);
    assert_eq!(naive.verdict, Verdict::Hurt);
    assert!(
        naive
            .loads
            .iter()
            .all(|l| !l.kept && (l.ratio - 3.0).abs() < 1e-9)
    );
    // a stricter tolerance turns borrow idle's 3% into a hurt
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
    // medians: LC alone 1.0 ms, borrow idle 1.133 ms (1.02, 1.133, 3.6)
    assert!(b.loads[0].paired.is_none());
    assert!((b.loads[0].ratio - 1.133).abs() < 1e-9, "{:?}", b.loads[0]);
    assert_eq!(b.verdict, Verdict::Hurt);
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
