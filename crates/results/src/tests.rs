//! Tests of the record: summaries, save/load, schema check, distributions.

use super::*;

pub(crate) fn rep(round: u32, p99: f64, total: f64) -> Rep {
    Rep {
        round: Some(round),
        rps_achieved: 100.0,
        requests: 1000,
        errors: 0,
        latency_us: Percentiles {
            p50: p99 / 4.0,
            p95: p99 / 2.0,
            p99,
            p999: p99 * 1.5,
            max: p99 * 2.0,
            mean: p99 / 3.0,
        },
        utilization: Utilization {
            lc: 0.5,
            batch: total - 0.5,
            total,
        },
        batch_units_per_s: None,
        batch_progress: None,
        naps_per_s: None,
        wakes_per_s: None,
        budget_us: None,
        histogram: None,
        measured: None,
        simulated: None,
    }
}

#[test]
fn stat_is_median_and_spread() {
    assert_eq!(
        Stat::of(&[3.0, 1.0, 2.0]),
        Some(Stat {
            median: 2.0,
            min: 1.0,
            max: 3.0
        })
    );
    assert_eq!(Stat::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
    assert_eq!(Stat::of(&[f64::NAN]), None);
    assert_eq!(Stat::of(&[]), None);
}

#[test]
fn summary_takes_medians_and_judges_the_slo() {
    let reps = vec![rep(1, 10.0, 0.9), rep(2, 30.0, 1.0), rep(3, 20.0, 0.8)];
    let mut s = Summary::of(&reps, Some(25.0));
    assert_eq!(s.latency_us.p99.median, 20.0);
    assert_eq!(s.latency_us.p99.max, 30.0);
    assert_eq!(s.utilization.total.median, 0.9);
    assert_eq!(s.slo_met, Some(true));
    assert_eq!(Summary::of(&reps, Some(15.0)).slo_met, Some(false));
    assert_eq!(Summary::of(&reps, None).slo_met, None);
    assert_eq!(s.batch_progress, None);
    s.judge(Some(19.0));
    assert_eq!((s.slo_p99_us, s.slo_met), (Some(19.0), Some(false)));
}

#[test]
fn save_load_round_trip_and_schema_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/run.json");
    let mut f = ResultFile::new(
        Source::Measured,
        "elfen bench".into(),
        serde_json::json!({"rps": [100]}),
        serde_json::json!({}),
    );
    f.run = Some(Run {
        rps: vec![100.0],
        common_random_numbers: true,
        ..Run::default()
    });
    let mut reps = vec![rep(1, 10.0, 1.0)];
    reps[0].rps_achieved = 0.1 + 0.2; // not exactly representable in short decimal form
    reps[0].measured = Some(MeasuredRep {
        window_s: 1.0 / 3.0,
        ..MeasuredRep::default()
    });
    f.points.push(Point {
        config: Config::BorrowIdle,
        label: None,
        batch: Some("stream".into()),
        rps_target: 100.0,
        summary: Summary::of(&reps, None),
        reps,
        idle_periods: None,
        service: None,
    });
    f.save(&path).unwrap();
    let g = ResultFile::load(&path).unwrap();
    assert_eq!(
        f, g,
        "floats round-trip exactly (serde_json float_roundtrip)"
    );

    assert_eq!(
        g.schema, SCHEMA,
        "new files are written with the current tag"
    );
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace(SCHEMA, "elfen-result/1");
    std::fs::write(&path, text).unwrap();
    let e = ResultFile::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("elfen-result/1") && e.contains("run.json") && e.contains("re-run"),
        "{e}"
    );
    std::fs::write(&path, "{").unwrap();
    assert!(
        ResultFile::load(&path)
            .unwrap_err()
            .to_string()
            .contains("not an elfen result")
    );
    let missing = dir.path().join("nope.json");
    assert!(
        ResultFile::load(&missing)
            .unwrap_err()
            .to_string()
            .contains("nope.json")
    );
}

/// A file `elfen bench` wrote with schema `elfen-result/2` (its
/// histograms and per-point distributions left out to keep it small; the
/// `elfen-result/2` reader accepts both).
const V2_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/elfen-result-2.json");

#[test]
fn files_of_the_older_schema_are_read() {
    let text = std::fs::read_to_string(V2_FILE).unwrap_or_else(|e| panic!("{V2_FILE}: {e}"));
    assert!(
        text.contains("\"schema\":\"elfen-result/2\""),
        "the fixture is a /2 file"
    );
    let f = ResultFile::parse(&text, V2_FILE).unwrap();
    assert_eq!(f.schema, "elfen-result/2");
    let run = f.run.as_ref().unwrap();
    assert_eq!(run.rounds, None, "no added rounds before /3");
    assert_eq!(run.lanes.batch_shares_core, None);
    assert_eq!(run.reps_planned, 3);
    assert!(!f.points.is_empty());
    // the studies answer on it as on a new file
    let prot = crate::study::protection(&f, 0.1, None);
    assert!(prot.iter().all(|p| !p.loads.is_empty()), "{prot:?}");
    assert_eq!(
        crate::study::conclusion::batch_shares_core(&f),
        Some(false),
        "from the machine's SMT ways: a 2-vCPU VM without SMT"
    );
}

#[test]
fn distribution_buckets_quantiles_and_merge() {
    let mut d = Distribution::log_buckets("us", 1.0, 1000.0, 10);
    assert_eq!(d.edges.len(), d.counts.len() + 1);
    for x in [0.5, 1.0, 5.0, 50.0, 2e6] {
        d.record(x);
    }
    assert_eq!(d.total(), 5);
    assert_eq!(d.counts[0], 2, "below the range lands in the first bucket");
    assert_eq!(*d.counts.last().unwrap(), 1, "above lands in the last");
    assert!(d.quantile(0.5).unwrap() > 5.0 && d.quantile(0.5).unwrap() < 7.0);
    assert_eq!(
        Distribution::log_buckets("us", 1.0, 10.0, 1).quantile(0.5),
        None
    );
    let before = d.clone();
    assert!(d.merge(&before));
    assert_eq!(d.total(), 10);
    assert!(!d.merge(&Distribution::log_buckets("us", 1.0, 10.0, 1)));
    assert_eq!(d.total(), 10, "other edges: unchanged");
}

/// Found by the reader's fuzzing: counts that add up past 2^64 panicked
/// the report (`Distribution::total` overflowed), and mismatched edges
/// indexed out of bounds. The reader refuses both, naming where; the
/// methods themselves saturate and stay in bounds.
#[test]
fn impossible_distributions_are_refused_by_the_reader() {
    let mut f = ResultFile::new(
        Source::Measured,
        "elfen bench".into(),
        serde_json::json!({}),
        serde_json::json!({}),
    );
    let mut d = Distribution::log_buckets("us", 1.0, 100.0, 1);
    d.counts = vec![u64::MAX, u64::MAX];
    f.demand = Some(d.clone());
    let text = serde_json::to_string(&f).unwrap();
    let e = ResultFile::parse(&text, "x.json").unwrap_err().to_string();
    assert!(
        e.contains("x.json") && e.contains("demand") && e.contains("2^64"),
        "{e}"
    );
    assert_eq!(d.total(), u64::MAX);
    assert_eq!(d.quantile(0.5), Some(10.0));

    let mut short = Distribution::log_buckets("us", 1.0, 100.0, 1);
    short.edges.truncate(1);
    short.counts = vec![1, 2];
    f.demand = None;
    f.points.push(Point {
        config: Config::LcAlone,
        label: None,
        batch: None,
        rps_target: 1.0,
        summary: Summary::of(&[rep(1, 10.0, 1.0)], None),
        reps: vec![rep(1, 10.0, 1.0)],
        idle_periods: None,
        service: Some(short.clone()),
    });
    let text = serde_json::to_string(&f).unwrap();
    let e = ResultFile::parse(&text, "x.json").unwrap_err().to_string();
    assert!(
        e.contains("points[0].service") && e.contains("edges"),
        "{e}"
    );
    assert_eq!(short.quantile(1.0), Some(1.0));
    assert_eq!(crate::study::share_below(&short, 5.0), None);
    short.record(3.0);
    assert_eq!(short.total(), 3);
}
