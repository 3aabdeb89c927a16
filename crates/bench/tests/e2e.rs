//! End-to-end smoke test: a tiny sweep (LC alone + borrow idle with Stream,
//! one load, half a second per point) through the same code path as
//! `elfen bench` (`elfen_bench::cli::Command::run`), then the result JSON
//! and the report must exist; and the bad inputs that are only detectable
//! at run time (a port in use, a missing signal page) must fail before any
//! load is sent.
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
    println!(
        "test result: ok. 2 passed; finished in {:.2}s",
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
        assert!(p.distributions.contains_key("idle_periods"));
    }
    let bi = &f.points[1];
    assert_eq!(bi.batch.as_deref(), Some("stream"));
    assert!(bi.reps[0].batch_units_per_s.is_some());
    assert!(bi.reps[0].naps_per_s.is_some());
    assert!(f.spec.pointer("/resolved/slo_p99_us").is_some());
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
