use super::*;

#[test]
fn defaults_and_empty_file_agree() {
    let d = BenchSpec::default();
    assert_eq!(BenchSpec::from_toml("").unwrap(), d);
    d.validate().unwrap();
    // Round trip through TOML keeps everything.
    let text = toml::to_string(&d).unwrap();
    assert_eq!(BenchSpec::from_toml(&text).unwrap(), d);
    assert!(d.configs.iter().all(|c| c.in_harness()));
    assert!(d.configs.contains(&Config::Naive) && d.configs.contains(&Config::SchedIdle));
}

#[test]
fn unknown_keys_are_refused() {
    for (text, key) in [
        ("durations = 3", "durations"),
        ("[batch]\nnapp = 'spin'", "napp"),
        ("[demand]\nkind = 'lucene'\nmean = 3", "mean"),
        ("[lc]\ncmd = 'x'", "cmd"),
        ("[service]\nworking_set_kib = 64", "service"),
    ] {
        let e = BenchSpec::from_toml(text).unwrap_err().to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn names_parse_and_errors_list_the_valid_ones() {
    let e = "streem".parse::<KernelKind>().unwrap_err().to_string();
    assert!(e.contains("streem") && e.contains("matrix"), "{e}");
    let e = BenchSpec::from_toml("configs = ['nope']")
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
    assert_eq!(
        parse_list("all", &KernelKind::ALL, str::parse).unwrap(),
        KernelKind::ALL.to_vec()
    );
    let e = BenchSpec::from_toml("[batch]\nnap = 'doze'")
        .unwrap_err()
        .to_string();
    assert!(e.contains("doze") && e.contains("futex"), "{e}");
    let s = BenchSpec::from_toml("configs = ['static_partition']").unwrap();
    let e = s.validate().unwrap_err().to_string();
    assert!(
        e.contains("static_partition") && e.contains("elfen sim"),
        "{e}"
    );
}

#[test]
fn bad_values_are_refused() {
    assert!(parse_rps("0").unwrap_err().to_string().contains("> 0"));
    assert!(parse_rps("-5").is_err());
    assert!(
        parse_rps("100,abc")
            .unwrap_err()
            .to_string()
            .contains("abc")
    );
    assert_eq!(parse_rps("100, 200").unwrap(), vec![100.0, 200.0]);
    assert!(parse_rps("auto").unwrap().is_empty());
    let e = Auto::parse("fast", "--slo-p99-ms", "ms").unwrap_err();
    assert!(e.to_string().contains("fast") && e.to_string().contains("auto"));
    assert_eq!(Auto::parse("2.5", "x", "ms").unwrap(), Auto::Value(2.5));
    let bad = |f: &dyn Fn(&mut BenchSpec)| {
        let mut s = BenchSpec::default();
        f(&mut s);
        s.validate().unwrap_err().to_string()
    };
    assert!(bad(&|s| s.rps = vec![0.0]).contains("> 0"));
    assert!(bad(&|s| s.slo_p99_ms = Auto::Value(-1.0)).contains("slo_p99_ms"));
    assert!(bad(&|s| s.reps = 0).contains("reps"));
    let e = bad(&|s| s.max_reps = 2);
    assert!(e.contains("max_reps (2)") && e.contains("reps (3)"), "{e}");
    let e = bad(&|s| s.added_reps_budget_s = f64::NAN);
    assert!(e.contains("added_reps_budget_s"), "{e}");
    let e = bad(&|s| s.rerun_budget_s = -1.0);
    assert!(e.contains("rerun_budget_s") && e.contains("-1"), "{e}");
    assert!(bad(&|s| s.verdict_tolerance_pct = -5.0).contains("verdict_tolerance_pct"));
    assert!(bad(&|s| s.generator_fifo_priority = 100).contains("generator_fifo_priority"));
    assert!(bad(&|s| s.chase.working_set_kib = 8).contains("chase.working_set_kib"));
    let e = bad(&|s| s.lc.service = ServiceKind::External);
    assert!(e.contains("lc.command"), "{e}");
    let e = bad(&|s| s.lc.command = Some("x".into()));
    assert!(e.contains("external"), "{e}");
    let e = bad(&|s| s.lc.requests = RequestsKind::TermQueries);
    assert!(e.contains("built-in"), "{e}");
    let e = BenchSpec::from_toml("slo_p99_ms = 'soon'").unwrap_err();
    assert!(e.to_string().contains("soon"), "{e}");
    assert_eq!(
        BenchSpec::from_toml("slo_p99_ms = 3").unwrap().slo_p99_ms,
        Auto::Value(3.0)
    );
    let s = BenchSpec {
        rerun_budget_s: 0.0,
        ..BenchSpec::default()
    };
    s.validate().unwrap();
}

#[test]
fn windows_hold_min_requests_at_low_loads() {
    let s = BenchSpec::default();
    assert_eq!((s.duration_s, s.min_requests), (1.0, 1000));
    // 370 rps: 1 s would hold 370 requests; 1000 need 2.7 s
    assert!((s.window_s(370.0) - 1000.0 / 370.0).abs() < 1e-9);
    assert_eq!(s.window_s(1000.0), 1.0);
    assert_eq!(s.window_s(5000.0), 1.0);
    let off = BenchSpec {
        min_requests: 0,
        ..BenchSpec::default()
    };
    assert_eq!(off.window_s(10.0), 1.0);
}

#[test]
fn normalize_puts_the_baseline_first() {
    let mut s = BenchSpec {
        configs: vec![Config::Naive, Config::BorrowIdle, Config::Naive],
        kernels: vec![KernelKind::Stream, KernelKind::Stream],
        ..BenchSpec::default()
    };
    s.normalize();
    assert_eq!(
        s.configs,
        vec![Config::LcAlone, Config::Naive, Config::BorrowIdle]
    );
    assert_eq!(s.kernels, vec![KernelKind::Stream]);
    assert_eq!(s.batch_configs(), vec![Config::Naive, Config::BorrowIdle]);
}

#[test]
fn every_example_config_parses_and_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/bench");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let mut s = BenchSpec::load(&path).unwrap_or_else(|e| panic!("{e}"));
            s.normalize();
            s.validate()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 4, "expected example configs in {}", dir.display());
}

#[test]
fn the_key_value_examples_are_the_presets() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/bench");
    for (file, kv) in [
        ("redis.toml", KvSpec::redis()),
        ("memcached.toml", KvSpec::memcached()),
    ] {
        let s = BenchSpec::load(&dir.join(file)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.lc,
            LcSpec::kv(kv),
            "configs/bench/{file} differs from its preset"
        );
    }
}

#[test]
fn default_toml_spells_out_the_built_in_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/bench/default.toml");
    let file = BenchSpec::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        serde_json::to_value(&file).unwrap(),
        serde_json::to_value(BenchSpec::default()).unwrap(),
        "configs/bench/default.toml differs from BenchSpec::default()"
    );
}
