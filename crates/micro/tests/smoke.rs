//! `elfen micro --quick` end to end: it runs, the JSON parses and has every
//! field, the table is printed, nothing is left in /dev/shm. No speed
//! assertions, ever: these are benchmarks, and the machine is shared.

mod common;

use common::shm_dirs as leftovers;
use serde_json::Value;
use std::collections::BTreeSet;

fn run(args: &[&str]) -> anyhow::Result<()> {
    common::parse(args)?.run()
}

fn get<'a>(v: &'a Value, path: &str) -> &'a Value {
    let mut cur = v;
    for key in path.split('.') {
        cur = match key.parse::<usize>() {
            Ok(i) => cur.get(i),
            Err(_) => cur.get(key),
        }
        .unwrap_or_else(|| panic!("missing field {path} (at {key})"));
    }
    cur
}

fn num(v: &Value, path: &str) -> f64 {
    get(v, path)
        .as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number: {}", get(v, path)))
}

fn spread(v: &Value, path: &str) {
    for k in ["median", "min", "max"] {
        num(v, &format!("{path}.{k}"));
    }
}

fn percentiles(v: &Value, path: &str) {
    for k in [
        "count",
        "p50_ns",
        "p99_ns",
        "p999_ns",
        "max_ns",
        "mean_ns",
        "over_2us_fraction",
    ] {
        num(v, &format!("{path}.{k}"));
    }
}

#[test]
fn quick_run_writes_every_field() {
    let before = leftovers();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sub/micro.json");
    run(&[
        "micro",
        "--quick",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ])
    .unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();

    assert_eq!(get(&v, "schema"), "elfen-micro/1");
    for f in [
        "created_unix_s",
        "load_before.0",
        "load_after.2",
        "others_busy_fraction",
        "clock.ticks_per_sec",
        "hybrid_spin_ns",
        "lanes.request_cpu",
        "lanes.batch_cpu",
        "params.toggle.toggles",
        "params.reps",
    ] {
        num(&v, f);
    }
    assert_eq!(get(&v, "params.quick"), true);
    get(&v, "system.features");
    get(&v, "command");

    let run0 = get(&v, "runs.0");
    for lane in 0..2 {
        let l = get(run0, &format!("host_pauses.lanes.{lane}"));
        num(l, "cpu");
        num(l, "pauses_per_s");
        num(l, "paused_fraction");
        get(l, "pause_ns");
    }
    let backends = get(run0, "backends").as_array().unwrap();
    let names: Vec<&str> = backends
        .iter()
        .map(|b| b["backend"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["spin", "futex", "hybrid", "umwait", "mwaitx"]);
    for b in backends {
        assert!(!b["reason"].as_str().unwrap().is_empty());
        if b["available"] == true {
            for lat in ["step_aside", "wake", "wake_from_os", "wake_from_spin"] {
                num(b, &format!("{lat}.disturbed_fraction"));
                num(b, &format!("{lat}.disturbed"));
            }
            percentiles(b, "step_aside.all");
            percentiles(b, "wake.all");
            assert_eq!(num(b, "toggles"), 500.0);
            assert_eq!(num(b, "step_aside.all.count"), 500.0);
            num(b, "os_wake_fraction");
            get(b, "describe").as_str().unwrap();
        } else {
            // Never pretend: an unavailable backend says why and has no figures.
            assert!(b["reason"].as_str().unwrap().contains("unavailable"), "{b}");
            assert!(b["step_aside"].is_null() && b["wake"].is_null());
        }
    }
    assert_eq!(backends[0]["available"], true, "spin runs everywhere");
    assert_eq!(backends[1]["available"], true, "futex runs everywhere");

    for imp in ["rust", "c"] {
        let c = get(run0, &format!("fast_path.{imp}"));
        assert!(
            !c.is_null(),
            "fast_path.{imp} missing: {}",
            get(run0, "fast_path")
        );
        spread(c, "ns_per_check");
        spread(c, "with_check_ns_per_iter");
        spread(c, "without_check_ns_per_iter");
    }
    let overhead = get(run0, "overhead").as_array().unwrap();
    let pairs: BTreeSet<(String, String)> = overhead
        .iter()
        .map(|o| {
            for f in [
                "checked_units_per_s",
                "unchecked_units_per_s",
                "overhead_pct",
            ] {
                spread(o, f);
            }
            (
                o["implementation"].as_str().unwrap().to_string(),
                o["kernel"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut imps = vec!["rust", "c"];
    if cfg!(target_arch = "x86_64") {
        imps.push("c-fentry");
    }
    for imp in imps {
        for k in ["loop", "matrix", "flush", "stream"] {
            assert!(
                pairs.contains(&(imp.into(), k.into())),
                "no overhead for {imp} {k}"
            );
        }
    }
    let si = get(run0, "stream_interference");
    let sizes = get(si, "sizes").as_array().unwrap();
    assert_eq!(sizes.len(), 4);
    for z in sizes {
        num(z, "chase_bytes");
        for f in [
            "baseline_ns_per_hop",
            "plain_ns_per_hop",
            "non_temporal_ns_per_hop",
            "plain_slowdown",
            "non_temporal_slowdown",
        ] {
            spread(z, f);
        }
    }
    num(si, "plain_slowdown_max");
    num(si, "non_temporal_slowdown_max");
    num(si, "plain_slowdown_geomean");
    num(si, "non_temporal_slowdown_geomean");
    let worse = get(si, "worse");
    assert!(worse.is_null() || worse.is_string(), "{worse}");

    let s = get(&v, "summary");
    assert_eq!(num(s, "runs"), 1.0);
    spread(s, "fast_path_rust_ns_per_check");
    spread(s, "fast_path_c_ns_per_check");
    // 2 fast paths, 3 × 2 overheads (C, C -pg -mfentry, Rust), 4 latencies.
    assert_eq!(get(s, "targets").as_array().unwrap().len(), 12);
    for t in get(s, "targets").as_array().unwrap() {
        let fentry = t["figure"].as_str().unwrap_or("").contains("c-fentry");
        assert!(
            t["measured"].is_number() || (fentry && !cfg!(target_arch = "x86_64")),
            "target without a measurement: {t}"
        );
    }

    // --show re-prints the table from the file.
    run(&["micro", "--show", json.to_str().unwrap()]).unwrap();
    // Nothing left behind.
    let after = leftovers();
    assert!(
        after.is_subset(&before),
        "left in /dev/shm: {:?}",
        after.difference(&before)
    );
}

#[test]
fn bad_arguments_are_clear_errors() {
    let e = run(&["micro", "--runs", "0"]).unwrap_err().to_string();
    assert!(e.contains("--runs"), "{e}");
    let e = run(&["micro", "--pairs", "0:4095", "--quick"]).unwrap_err();
    let e = format!("{e:#}");
    assert!(e.contains("choosing the lanes"), "{e}");
    let e = run(&["micro", "--show", "/nonexistent/micro.json"]).unwrap_err();
    assert!(
        format!("{e:#}").contains("/nonexistent/micro.json"),
        "{e:#}"
    );
    let e = run(&["micro", "--quick", "--disturb-us=-1"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--disturb-us"), "{e}");
}
