//! The result-file reader fuzzed (bounded, seeded: `elfen_cmd::fuzz`):
//! arbitrary bytes, a valid file's text with bytes changed, and a valid
//! file's JSON with values replaced, removed or repeated anywhere — each
//! is read into a file or refused with an error naming the path, never a
//! panic; and every question `elfen report` asks of a file that was read
//! ([`crate::study`], the distributions) answers without a panic too.

use crate::study;
use crate::tests::rep;
use crate::{
    BatchTimes, Config, Distribution, LatencyBreakdown, MeasuredRep, Point, ResultFile, Run,
    Source, Summary,
};
use proptest::prelude::*;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A file with a bit of everything a sweep writes.
fn rich_file() -> ResultFile {
    let mut f = ResultFile::new(
        Source::Measured,
        "elfen bench --test".into(),
        serde_json::json!({ "verdict_tolerance_pct": 10.0, "reps": 3 }),
        serde_json::json!({ "cpus": 2 }),
    );
    f.run = Some(Run {
        common_random_numbers: true,
        ..Run::default()
    });
    let mut d = Distribution::log_buckets("us", 1.0, 1e4, 5);
    for x in [3.0, 30.0, 300.0, 3000.0, 250.0] {
        d.record(x);
    }
    f.demand = Some(d.clone());
    for (rps, base) in [(100.0, 1000.0), (200.0, 1300.0)] {
        for (config, batch, k) in [
            (Config::LcAlone, None, 1.0),
            (Config::BorrowIdle, Some("stream"), 1.05),
            (Config::Naive, Some("stream"), 2.5),
        ] {
            let reps: Vec<_> = (1..=3)
                .map(|round| {
                    let mut r = rep(round, base * k * (0.9 + 0.1 * f64::from(round)), 0.9);
                    r.budget_us = Some(50.0);
                    r.measured = Some(MeasuredRep {
                        window_s: 1.0,
                        sent: 100,
                        foreign_util: 0.01,
                        breakdown: Some(LatencyBreakdown::default()),
                        batch: Some(BatchTimes::default()),
                        ..MeasuredRep::default()
                    });
                    r
                })
                .collect();
            f.points.push(Point {
                config,
                label: None,
                batch: batch.map(str::to_string),
                rps_target: rps,
                summary: Summary::of(&reps, Some(5000.0)),
                reps,
                idle_periods: Some(d.clone()),
                service: Some(d.clone()),
            });
        }
    }
    f
}

/// Every question `elfen report` asks of a file.
fn study_all(f: &ResultFile) {
    let _ = study::loads(f);
    let _ = study::configs(f);
    let _ = study::paired_rounds(f);
    let _ = study::knee_rps(f);
    let _ = study::slo_us(f);
    let _ = study::p99_at_zero_us(f);
    let _ = study::lc_alone_curve(f);
    if let Some(k) = study::knee_rps(f) {
        let _ = study::lc_alone_slo_us(f, k);
    }
    let _ = study::noise(f, 0.05);
    let _ = study::protection(f, 0.1, None);
    let _ = study::rows(f, None);
    for b in study::batches(f) {
        let _ = study::rows(f, Some(&b));
    }
    for key in study::series_keys(f) {
        let _ = key.name();
        for p in study::series(f, &key) {
            let _ = study::paired_ratio(f, p);
            let _ = study::ratio_of_medians(f, p);
            let _ = study::budget_us(p);
            let _ = study::rep_stat(p, |r| r.naps_per_s);
            let _ = Summary::of(&p.reps, Some(1000.0));
        }
    }
    let dists = f.demand.iter().chain(
        f.points
            .iter()
            .flat_map(|p| p.idle_periods.iter().chain(&p.service)),
    );
    for d in dists {
        let _ = d.total();
        for q in [0.0, 0.5, 0.99, 1.0] {
            let _ = d.quantile(q);
        }
        let _ = study::share_below(d, 1000.0);
        let mut m = d.clone();
        m.record(42.0);
        let _ = m.merge(d);
    }
}

/// Counts of what the cases came to.
#[derive(Default)]
struct Reached {
    refused: AtomicU64,
    read: AtomicU64,
}

fn read_and_study(text: &str, reached: &Reached) -> Result<(), TestCaseError> {
    match ResultFile::parse(text, "fuzzed.json") {
        Ok(f) => {
            reached.read.fetch_add(1, Relaxed);
            study_all(&f);
        }
        Err(e) => {
            reached.refused.fetch_add(1, Relaxed);
            prop_assert!(e.to_string().contains("fuzzed.json"), "{e}");
        }
    }
    Ok(())
}

/// JSON values that break readers.
fn nasty() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        Just(serde_json::json!(0)),
        Just(serde_json::json!(-1)),
        Just(serde_json::json!(u64::MAX)),
        Just(serde_json::json!(i64::MIN)),
        Just(serde_json::json!(1e308)),
        Just(serde_json::json!(-1e308)),
        Just(serde_json::json!(0.5)),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| serde_json::json!(x)),
        any::<u64>().prop_map(|x| serde_json::json!(x)),
        Just(serde_json::json!("")),
        "[a-z_]{0,10}".prop_map(Value::String),
        Just(serde_json::json!([])),
        Just(serde_json::json!([0, 1e308])),
        Just(serde_json::json!([u64::MAX, u64::MAX])),
        Just(serde_json::json!({})),
    ]
}

/// One change somewhere in a JSON tree: the path is followed by taking
/// child `i % len` at each level, `depth` levels down.
#[derive(Debug, Clone)]
enum Change {
    Replace(Vec<usize>, Value),
    Remove(Vec<usize>),
    Repeat(Vec<usize>),
}

fn change() -> impl Strategy<Value = Change> {
    let path = proptest::collection::vec(any::<usize>(), 1..9);
    prop_oneof![
        3 => (path.clone(), nasty()).prop_map(|(p, v)| Change::Replace(p, v)),
        1 => path.clone().prop_map(Change::Remove),
        1 => path.prop_map(Change::Repeat),
    ]
}

/// The children of `v`, as (key or index) positions.
fn child_count(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    }
}

fn apply(v: &mut Value, path: &[usize], change: &Change) {
    let n = child_count(v);
    if n == 0 {
        return;
    }
    let i = path[0] % n;
    if path.len() > 1 && child_count(nth(v, i)) > 0 {
        return apply(nth(v, i), &path[1..], change);
    }
    match (change, v) {
        (Change::Replace(_, new), v) => *nth(v, i) = new.clone(),
        (Change::Remove(_), Value::Object(m)) => {
            let k = m.keys().nth(i).cloned().unwrap_or_default();
            m.remove(&k);
        }
        (Change::Remove(_), Value::Array(a)) => {
            a.remove(i);
        }
        (Change::Repeat(_), Value::Array(a)) => {
            let x = a[i].clone();
            a.insert(i, x);
        }
        _ => {}
    }
}

fn nth(v: &mut Value, i: usize) -> &mut Value {
    match v {
        Value::Object(m) => m.values_mut().nth(i).expect("i < len"),
        Value::Array(a) => &mut a[i],
        _ => unreachable!("nth of a leaf"),
    }
}

#[test]
fn fuzz_result_json_mutations() {
    let base = serde_json::to_value(rich_file()).unwrap();
    let reached = Reached::default();
    let strategy = proptest::collection::vec(change(), 1..4);
    elfen_cmd::fuzz::run("result file JSON", 2000, strategy, |changes| {
        let mut v = base.clone();
        for c in &changes {
            let (Change::Replace(p, _) | Change::Remove(p) | Change::Repeat(p)) = c;
            apply(&mut v, p, c);
        }
        read_and_study(&v.to_string(), &reached)
    });
    let (refused, read) = (reached.refused.load(Relaxed), reached.read.load(Relaxed));
    println!("result file JSON: {refused} refused, {read} read and studied");
    assert!(
        refused > 0 && read > 0,
        "the cases did not reach both outcomes"
    );
}

#[test]
fn fuzz_result_bytes() {
    let text = serde_json::to_string_pretty(&rich_file()).unwrap();
    let reached = Reached::default();
    let edits = proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..5);
    let strategy = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512).prop_map(|b| (b, Vec::new())),
        edits.prop_map(|e| (Vec::new(), e)),
    ];
    elfen_cmd::fuzz::run("result file bytes", 3000, strategy, |(raw, edits)| {
        let bytes = if edits.is_empty() {
            raw
        } else {
            let mut b = text.clone().into_bytes();
            for (at, byte, op) in edits {
                let i = at % (b.len() + 1);
                match op {
                    0 if i < b.len() => b[i] = byte,
                    1 => b.insert(i, byte),
                    _ if i < b.len() => {
                        b.remove(i);
                    }
                    _ => {}
                }
            }
            b
        };
        read_and_study(&String::from_utf8_lossy(&bytes), &reached)
    });
    println!(
        "result file bytes: {} refused, {} read and studied",
        reached.refused.load(Relaxed),
        reached.read.load(Relaxed)
    );
}
