//! Configs: every example under `configs/sim/` parses and checks; bad input
//! gives an error naming the field, never a panic.

use elfen_sim::SimConfig;
use std::path::{Path, PathBuf};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/sim")
}

#[test]
fn every_example_config_parses_and_checks() {
    let mut n = 0;
    for entry in std::fs::read_dir(examples_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let exp = elfen_sim::Experiment::load(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!exp.configs.is_empty() && !exp.loads.is_empty());
            n += 1;
        }
    }
    assert!(n >= 5, "found only {n} example configs");
}

const BASE: &str = r#"
[load]
rps = [10]
[[configs]]
kind = "borrow_idle"
"#;

/// Checks `text` (a whole config) fails with a message containing `want`.
fn fails(text: &str, want: &str) {
    let dir = tempfile::tempdir().unwrap();
    let r = SimConfig::from_toml(text, "t.toml").and_then(|c| c.resolve(dir.path()));
    match r {
        Ok(_) => panic!("accepted, wanted an error with {want:?}:\n{text}"),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains(want), "error {e:?} does not contain {want:?}");
        }
    }
}

fn with(prefix: &str) -> String {
    format!("{prefix}\n{BASE}")
}

#[test]
fn the_base_config_is_fine_and_defaults_are_filled() {
    let c = SimConfig::from_toml(BASE, "t").unwrap();
    let e = c.resolve(Path::new(".")).unwrap();
    assert_eq!(e.reps, 3);
    assert_eq!(e.requests, 100_000);
    assert_eq!(e.warmup_requests, 10_000);
    assert_eq!(e.topology.server.smt_ways, 2);
    assert_eq!(e.timing.nap_ns, 1640);
    assert_eq!(e.configs[0].name, "borrow_idle");
    assert_eq!(e.configs[0].batch.as_ref().unwrap().0, "loop");
}

#[test]
fn impossible_topologies_name_the_field() {
    fails(
        &with("[topology]\nsmt_ways = 0"),
        "topology.smt_ways must be >= 1, got 0",
    );
    fails(
        &with("[topology]\nkind = \"chip\"\ncores = 0"),
        "topology.cores must be >= 1, got 0",
    );
    fails(
        &with("[topology]\nkind = \"chip\"\ncores = 4\ndispatcher_cores = 4"),
        "topology.dispatcher_cores must be < topology.cores (4)",
    );
    fails(
        &with("[topology]\nkind = \"chip\"\ndispatcher_cores = -1"),
        "topology.dispatcher_cores must be >= 0, got -1",
    );
    fails(
        &with("[topology]\nkind = \"cluster\"\nleaves = 0"),
        "topology.leaves must be >= 1, got 0",
    );
    fails(
        &with("[topology]\nkind = \"cluster\""),
        "topology.leaves is required",
    );
    fails(
        &with("[topology]\ncores = 3"),
        "topology.cores must be 1 for a single core, got 3",
    );
    fails(
        &with("[topology]\nleaves = 3"),
        "topology.leaves only applies",
    );
    fails(
        &with("[topology]\nsmt_ways = 1"),
        "topology.smt_ways must be >= 2 for configs[0]",
    );
    fails(
        &with("[topology]\nkind = \"mesh\""),
        "unknown variant `mesh`",
    );
}

#[test]
fn bad_rates_and_counts_name_the_field() {
    let loads = |l: &str| format!("{l}\n[[configs]]\nkind = \"lc_alone\"");
    fails(
        &loads("[load]\nrps = [10, -5]"),
        "load.rps[1] must be a finite number > 0, got -5",
    );
    fails(
        &loads("[load]\nrps = [0]"),
        "load.rps[0] must be a finite number > 0, got 0",
    );
    fails(
        &loads("[load]\nrps_from = 0\nrps_to = 5\nsteps = 3"),
        "load.rps_from must be a finite number > 0, got 0",
    );
    fails(
        &loads("[load]\nrps_from = 5\nrps_to = 1\nsteps = 3"),
        "load.rps_to must be >= load.rps_from",
    );
    fails(
        &loads("[load]\nrps_from = 1\nrps_to = 5\nsteps = 0"),
        "load.steps must be >= 1, got 0",
    );
    fails(&loads("[load]\nrps = [1]\nsteps = 3"), "not a mix");
    fails(&loads("[load]"), "load needs rps");
    fails(&with("reps = 0"), "reps must be >= 1, got 0");
    fails(&with("requests = 1"), "requests must be >= 2, got 1");
    fails(
        &with("warmup_requests = -3"),
        "warmup_requests must be >= 0, got -3",
    );
    fails(
        &with("slo_p99_us = -1"),
        "slo_p99_us must be a finite number > 0, got -1",
    );
    fails(
        &with("[timing]\nnap_ns = -1"),
        "timing.nap_ns must be >= 0, got -1",
    );
    fails(
        &with("[timing]\nwake_ns = -7"),
        "timing.wake_ns must be >= 0, got -7",
    );
    fails(
        "configs = []\n[load]\nrps = [1]",
        "configs needs at least one",
    );
    fails("[[configs]]\nkind = \"lc_alone\"", "missing field `load`");
}

#[test]
fn bad_policies_and_baselines_name_the_field() {
    let cfg = |c: &str| format!("slo_p99_us = 100000\n[load]\nrps = [10]\n[[configs]]\n{c}");
    fails(
        &cfg("kind = \"fixed_budget\"\nbudget_us = -1"),
        "configs[0].budget_us must be a finite number >= 0, got -1",
    );
    fails(
        &cfg("kind = \"fixed_budget\""),
        "configs[0].budget_us is required",
    );
    fails(
        &cfg("kind = \"borrow_idle\"\nbudget_us = 5"),
        "configs[0].budget_us does not apply",
    );
    fails(
        &cfg("kind = \"refresh_budget\"\nbudget_us = 5\nbudget_from_slo = true"),
        "not both",
    );
    fails(
        "[load]\nrps = [10]\n[[configs]]\nkind = \"fixed_budget\"\nbudget_from_slo = true",
        "configs[0].budget_from_slo needs slo_p99_us",
    );
    fails(
        &cfg("kind = \"dynamic_refresh\"\nbudget_us = 5\nref_ipc = 0"),
        "configs[0].ref_ipc must be a finite number > 0, got 0",
    );
    fails(
        &cfg("kind = \"dynamic_refresh\"\nbudget_us = 5\nmax_budget_ratio = 0.5"),
        "configs[0].max_budget_ratio",
    );
    fails(
        &cfg("kind = \"blind_isolation\"\nbuffer_cores = 0"),
        "configs[0].buffer_cores must be >= 1, got 0",
    );
    fails(
        &cfg("kind = \"blind_isolation\""),
        "configs[0].buffer_cores is required",
    );
    fails(
        &cfg("kind = \"blind_isolation\"\nbuffer_cores = 2"),
        "configs[0].buffer_cores must be <= the worker cores (1)",
    );
    fails(
        &cfg("kind = \"static_partition\"\nbatch_cores = 1"),
        "configs[0].batch_cores must be < the worker cores (1)",
    );
    fails(
        &cfg("kind = \"lc_alone\"\nbatch = \"loop\""),
        "configs[0].batch does not apply",
    );
    fails(
        &cfg("kind = \"cpuset\"\nbatch = \"nope\""),
        "configs[0].batch \"nope\" is neither a built-in",
    );
    fails(
        &cfg("kind = \"naive\""),
        "configs[0].kind naive is not modelled by the simulator",
    );
    fails(
        &cfg("kind = \"cfs_quota\""),
        "configs[0].kind cfs_quota is not modelled by the simulator",
    );
    fails(&cfg("kind = \"greedy\""), "unknown variant `greedy`");
    fails(
        &cfg("kind = \"cpuset\"\nbudget = 3"),
        "unknown field `budget`",
    );
    fails(
        &format!(
            "{}\n[[configs]]\nkind = \"cpuset\"",
            cfg("kind = \"cpuset\"")
        ),
        "configs[1].name \"cpuset\" is used twice",
    );
    fails(
        &with("[batch]\nkind = \"x\"\n[batch.kinds.x]\nlc_slowdown = 0.9\ncorun_rate = 1"),
        "batch.kinds.x.lc_slowdown must be a finite number >= 1, got 0.9",
    );
    fails(
        &with("[batch]\nkind = \"x\"\n[batch.kinds.x]\nlc_slowdown = 1.2\ncorun_rate = 0"),
        "batch.kinds.x.corun_rate must be in (0, 1], got 0",
    );
    fails(
        &with("[batch]\nkind = \"zzz\""),
        "batch.kind \"zzz\" is neither a built-in",
    );
    fails(&with("colour = \"red\""), "unknown field `colour`");
}

#[test]
fn bad_demand_and_trace_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let run = |demand: &str| {
        let text = format!("{demand}\n{BASE}");
        SimConfig::from_toml(&text, "t.toml")
            .unwrap()
            .resolve(dir.path())
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    std::fs::write(dir.path().join("empty.json"), "").unwrap();
    std::fs::write(dir.path().join("junk.json"), "{ not json").unwrap();
    std::fs::write(
        dir.path().join("zero.json"),
        r#"{"unit":"us","edges":[1,2],"counts":[0]}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("other.json"), r#"{"hello": 1}"#).unwrap();
    let mut rf = elfen_results::ResultFile::new(
        elfen_results::Source::Measured,
        "x".into(),
        serde_json::json!({}),
        serde_json::json!({}),
    );
    rf.save(&dir.path().join("nodemand.json")).unwrap();
    for (file, want) in [
        ("empty.json", "demand file is empty"),
        ("junk.json", "not JSON"),
        ("zero.json", "all counts are 0"),
        ("other.json", "neither a result file nor a Distribution"),
        ("nodemand.json", "has no demand"),
        ("missing.json", "missing.json"),
    ] {
        let e = run(&format!("[demand]\nkind = \"file\"\npath = \"{file}\""));
        assert!(e.contains(want) && e.contains(file), "{file}: {e}");
    }
    let e = run("[demand]\nkind = \"exponential\"\nmean_us = 0");
    assert_eq!(e, "demand.mean_us must be a finite number > 0, got 0");
    let e = run("[demand]\nkind = \"file\"\npath = \"\"");
    assert!(e.starts_with("demand.path"), "{e}");
    std::fs::write(dir.path().join("bad.trace"), "0\n10\nabc\n").unwrap();
    let e = run("[arrivals]\nkind = \"trace\"\npath = \"bad.trace\"");
    assert!(e.contains("bad.trace") && e.contains("line 3"), "{e}");

    // A good empirical demand and trace resolve, relative to the config.
    let mut d = elfen_results::Distribution::log_buckets("us", 100.0, 10_000.0, 10);
    for x in [150.0, 300.0, 900.0, 2500.0] {
        d.record(x);
    }
    rf.demand = Some(d);
    rf.save(&dir.path().join("measured.json")).unwrap();
    std::fs::write(dir.path().join("ok.trace"), "# us\n0\n1000\n2500\n").unwrap();
    let text = format!(
        "[demand]\nkind = \"file\"\npath = \"measured.json\"\n[arrivals]\nkind = \"trace\"\npath = \"ok.trace\"\n{BASE}"
    );
    let exp = SimConfig::from_toml(&text, "t.toml")
        .unwrap()
        .resolve(dir.path())
        .unwrap();
    assert!(exp.trace.is_some());
}

#[test]
fn a_small_experiment_runs_into_a_result_file() {
    let text = r#"
requests = 3000
reps = 2
slo_p99_us = 100000
record_idle_periods = true
[load]
rps = [50, 100]
[[configs]]
kind = "lc_alone"
[[configs]]
kind = "fixed_budget"
budget_from_slo = true
[[configs]]
kind = "cpuset"
batch = "pause"
"#;
    let exp = SimConfig::from_toml(text, "t")
        .unwrap()
        .resolve(Path::new("."))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.json");
    let file = exp
        .run(&elfen_sim::RunOptions {
            threads: 2,
            progress: false,
            save: Some(path.clone()),
            command: "test".into(),
        })
        .unwrap();
    assert_eq!(file.points.len(), 6);
    assert_eq!(file.source, elfen_results::Source::Simulated);
    let back = elfen_results::ResultFile::load(&path).unwrap();
    // (Not compared with ==: serde_json without `float_roundtrip` may read
    // a float back 1 ULP off.)
    assert_eq!(back.points.len(), file.points.len());
    for (x, y) in back.points.iter().zip(&file.points) {
        assert_eq!(
            (&x.config, x.rps_target, x.reps.len()),
            (&y.config, y.rps_target, y.reps.len())
        );
        let (px, py) = (
            x.summary.latency_us.p99.median,
            y.summary.latency_us.p99.median,
        );
        assert!((px - py).abs() <= 1e-9 * py, "{px} vs {py}");
    }
    for p in &file.points {
        assert_eq!(p.reps.len(), 2);
        assert!(p.idle_periods.is_some());
        assert!(
            p.reps
                .iter()
                .all(|r| r.round.is_some() && r.simulated.is_some())
        );
    }
    use elfen_results::{Config, study};
    let fb = study::config_series(&file, Config::FixedBudget, Some("loop"));
    let alone = study::config_series(&file, Config::LcAlone, None);
    assert_eq!(fb.len(), 2);
    for (f, a) in fb.iter().zip(&alone) {
        // Budget = SLO - p99 alone at the same load, recorded per rep.
        let want = 100_000.0 - a.summary.latency_us.p99.median;
        let got = f.reps[0].budget_us.unwrap();
        assert!((got - want).abs() < 1.0, "{got} vs {want}");
    }
    assert_eq!(
        study::config_series(&file, Config::Cpuset, Some("pause")).len(),
        2
    );
}
