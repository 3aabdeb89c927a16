//! End-to-end smoke test: a tiny sweep (LC alone + borrow idle with Stream,
//! one load, half a second per point) through the same code path as
//! `elfen bench` (`elfen_bench::cli::Command::run`), then the result JSON
//! and the report must exist; and the bad inputs that are only detectable
//! at run time (a port in use, a missing signal page) must fail before any
//! load is sent; and an interrupted sweep keeps its finished invocations.
//!
//! `harness = false`: this binary is also the batch worker executable — the
//! sweep starts `<this test binary> bench-batch-worker …` as its child, just
//! as the `elfen` binary starts `elfen bench-batch-worker …`.

use elfen_bench::cli::{BenchArgs, Command};
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(elfen_bench::batch::WORKER_SUBCOMMAND) {
        std::process::exit(elfen_bench::batch::worker_main(&args[2..]));
    }
    let t0 = std::time::Instant::now();
    bad_runtime_input_fails_before_any_load();
    println!("test bad_runtime_input_fails_before_any_load ... ok");
    tiny_sweep_writes_results_and_report();
    println!("test tiny_sweep_writes_results_and_report ... ok");
    an_interrupted_sweep_keeps_finished_rounds();
    println!("test an_interrupted_sweep_keeps_finished_rounds ... ok");
    println!(
        "test result: ok. 3 passed; finished in {:.2}s",
        t0.elapsed().as_secs_f64()
    );
}

fn tiny_config(dir: &std::path::Path) -> PathBuf {
    let cfg = dir.join("tiny.toml");
    std::fs::write(
        &cfg,
        r#"
warmup_s = 0.05
duration_s = 0.4
reps = 1
drain_s = 1.0
[demand]
kind = "exponential"
mean_us = 100.0
set_size = 50
[service]
working_set_kib = 1024
calibrate_ms = 20
[batch]
alone_s = 0.2
settle_ms = 20
stream_mib = 8
"#,
    )
    .unwrap();
    cfg
}

fn args(dir: &std::path::Path) -> BenchArgs {
    BenchArgs {
        config: Some(tiny_config(dir)),
        json: Some(dir.join("out/bench.json")),
        configs: Some("borrow_idle".into()),
        kernels: Some("stream".into()),
        rps: Some("300".into()),
        quiet: true,
        worker_exe: Some(std::env::current_exe().unwrap()),
        ..BenchArgs::default()
    }
}

fn tiny_sweep_writes_results_and_report() {
    let dir = tempfile::tempdir().unwrap();
    Command::Bench(args(dir.path())).run().unwrap();
    let json = dir.path().join("out/bench.json");
    let f = elfen_results::ResultFile::load(&json).unwrap();
    let configs: Vec<&str> = f.points.iter().map(|p| p.config.as_str()).collect();
    assert_eq!(configs, ["lc_alone", "borrow_idle"]);
    assert!(f.distributions.contains_key("demand"));
    for p in &f.points {
        assert_eq!(p.reps.len(), 1);
        assert!(p.reps[0].requests > 0, "{}: no requests measured", p.config);
        assert_eq!(p.reps[0].extra.get("round"), Some(&1.0));
        assert!(p.distributions.contains_key("idle_periods"));
    }
    let bi = &f.points[1];
    assert_eq!(bi.batch.as_deref(), Some("stream"));
    assert!(bi.reps[0].batch_units_per_s.is_some());
    assert!(bi.reps[0].naps_per_s.is_some());
    assert!(f.spec.pointer("/resolved/slo_p99_us").is_some());
    assert!(elfen_bench::report::common_random_numbers(&f));
    assert!(
        f.spec
            .pointer("/resolved/wall_breakdown_s/points")
            .is_some()
    );
    // same round, same seed: both configurations sent the same requests
    assert_eq!(f.points[0].reps[0].extra["sent"], bi.reps[0].extra["sent"]);
    let md = dir.path().join("out/report.md");
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("borrow_idle"));
    // the report regenerates from the JSON alone
    Command::Report(elfen_bench::cli::ReportArgs {
        files: vec![json],
        out: Some(dir.path().join("again")),
    })
    .run()
    .unwrap();
    assert!(dir.path().join("again/report.md").is_file());
    // no page left behind
    let pid = std::process::id();
    assert!(!std::path::Path::new(&format!("/dev/shm/elfen-bench-{pid}")).exists());
}

fn bad_runtime_input_fails_before_any_load() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut a = args(dir.path());
    a.port = Some(port);
    let e = format!("{:#}", Command::Bench(a).run().unwrap_err());
    assert!(e.contains("in use") && e.contains(&port.to_string()), "{e}");
    let mut a = args(dir.path());
    a.page = Some(dir.path().join("no-such-page").display().to_string());
    let e = format!("{:#}", Command::Bench(a).run().unwrap_err());
    assert!(
        e.contains("no-such-page") && e.contains("does not exist"),
        "{e}"
    );
    assert!(!dir.path().join("out/bench.json").exists(), "nothing ran");
}

/// Ctrl-C after round 1 (of 3): the file keeps round 1 of both points (and
/// round 2 of LC alone if it finished first), says it was interrupted, and
/// every point says how many invocations it has.
fn an_interrupted_sweep_keeps_finished_rounds() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.reps = Some(3);
    a.duration = Some(0.2);
    let spec = elfen_bench::cli::build_spec(&a).unwrap();
    let json = dir.path().join("out/bench.json");
    let stop = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            // stop as soon as the first round is saved
            let t0 = std::time::Instant::now();
            while t0.elapsed().as_secs() < 60 {
                let saved = elfen_results::ResultFile::load(&json)
                    .map(|f| f.points.len() == 2)
                    .unwrap_or(false);
                if saved {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            stop.store(true, Ordering::Relaxed);
        });
        elfen_bench::sweep::run(
            elfen_bench::sweep::SweepOptions {
                spec,
                command: "e2e interrupted".into(),
                json_path: json.clone(),
                worker_exe: std::env::current_exe().unwrap(),
                progress: false,
            },
            &stop,
        )
    })
    .unwrap();
    assert!(out.interrupted);
    let f = elfen_results::ResultFile::load(&json).unwrap();
    assert_eq!(f.spec.pointer("/resolved/interrupted"), Some(&true.into()));
    let configs: Vec<&str> = f.points.iter().map(|p| p.config.as_str()).collect();
    assert_eq!(configs, ["lc_alone", "borrow_idle"]);
    for p in &f.points {
        let n = p.reps.len();
        assert!((1..3).contains(&n), "{}: {n} reps", p.config);
        for (i, r) in p.reps.iter().enumerate() {
            assert_eq!(r.extra.get("round"), Some(&((i + 1) as f64)));
        }
        assert!(p.summary.latency_us["p99"].median > 0.0);
    }
    assert_eq!(
        f.points[1].reps.len(),
        1,
        "round 2 of borrow idle never ran"
    );
}
