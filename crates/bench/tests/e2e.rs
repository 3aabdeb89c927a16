//! End-to-end tests of `elfen bench` through the same code path as the
//! command (`elfen_bench::cli::Command::run` / `sweep::run`):
//!
//! - every configuration runs, its batch makes progress (outside the idle class) and every Elfen
//!   configuration naps; the result file, the verdicts and the report exist;
//! - the built-in service run as an external process (`serve`) gives a file
//!   of the same shape;
//! - bad input only detectable at run time fails before any load (a port in
//!   use, a missing signal page, an external service that cannot start or
//!   never listens — nothing left running);
//! - a service that closes connections mid-run: errors counted, the run
//!   goes on and says so;
//! - an interrupted sweep keeps its finished rounds;
//! - the budget policies see the queue length the built-in service
//!   publishes (Figure 9's `queue_len`), through the service, not only
//!   through the runtime's own test.
//!
//! `harness = false`: this binary is also the batch worker executable and
//! the external services — the sweep starts `<this binary>
//! bench-batch-worker …` as its child, just as the `elfen` binary does.

mod e2e_support;

use e2e_support::*;
use elfen_bench::cli::{BenchArgs, Command};
use elfen_results::{Config, ResultFile, study};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = dispatch_child(&args) {
        std::process::exit(code);
    }
    // The sweeps pin threads to the lanes: one lane user at a time, machine-wide.
    let _lanes = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let tests: [NamedTest<()>; 8] = [
        (
            "bad_runtime_input_fails_before_any_load",
            bad_runtime_input_fails_before_any_load,
        ),
        (
            "every_configuration_runs_and_is_judged",
            every_configuration_runs_and_is_judged,
        ),
        (
            "the_builtin_service_runs_as_an_external_process",
            the_builtin_service_runs_as_an_external_process,
        ),
        (
            "a_service_closing_connections_counts_errors",
            a_service_closing_connections_counts_errors,
        ),
        (
            "an_interrupted_sweep_keeps_finished_rounds",
            an_interrupted_sweep_keeps_finished_rounds,
        ),
        (
            "rounds_are_added_where_verdicts_are_open",
            rounds_are_added_where_verdicts_are_open,
        ),
        (
            "budget_policies_see_the_published_queue",
            budget_policies_see_the_published_queue,
        ),
        (
            "the_daemon_modes_protect_an_unmodified_service",
            the_daemon_modes_protect_an_unmodified_service,
        ),
    ];
    run_tests(&tests, &());
    assert!(no_page_left(), "a signal page was left in /dev/shm");
}

/// Every configuration but those on the kernel signal (the daemon-mode
/// test runs them), with kernels and unmodified programs.
fn every_configuration_runs_and_is_judged(_: &()) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.configs = Some(configs_without_kernel_signal());
    a.programs = Some("xz,stress-ng".into());
    Command::Bench(a).run().unwrap();
    let json = dir.path().join("out/bench.json");
    let f = ResultFile::load(&json).unwrap();
    let run = f.run.as_ref().unwrap();
    let ran: Vec<Config> = study::configs(&f);
    record_config_skips("every_configuration_runs_and_is_judged", run);
    for c in Config::ALL
        .into_iter()
        .filter(|c| c.in_harness() && !c.needs_lc_writer())
    {
        if !run.skipped.iter().any(|s| s.config == c) {
            assert!(ran.contains(&c), "{c} did not run: {ran:?}");
        }
    }
    for p in &f.points {
        assert_eq!(p.reps.len(), 1);
        let r = &p.reps[0];
        assert!(r.requests > 0, "{}: no requests measured", p.config);
        assert_eq!(r.round, Some(1));
        let m = r.measured.as_ref().unwrap();
        assert!(m.window_s > 0.0 && m.sent > 0);
        // batch in the idle class may get nothing while other work keeps
        // every CPU busy; the rest progresses whatever else runs here
        if p.config.has_batch() && !p.config.batch_runs_idle_class() {
            let units = r.batch_units_per_s.unwrap_or(0.0);
            assert!(units > 0.0, "{}: the batch made no progress", p.config);
            assert!(r.batch_progress.unwrap_or(0.0) > 0.0, "{}", p.config);
        }
        if p.config.policy().is_some() {
            assert!(
                r.naps_per_s.unwrap_or(0.0) > 0.0,
                "{}: an Elfen configuration never napped",
                p.config
            );
        }
    }
    // the unmodified programs ran every configuration that needs no checks
    for prog in ["xz", "stress-ng"] {
        let cs: Vec<Config> = f
            .points
            .iter()
            .filter(|p| p.batch.as_deref() == Some(prog))
            .map(|p| p.config)
            .collect();
        assert!(
            cs.contains(&Config::Naive) && cs.contains(&Config::SchedIdle),
            "{prog}: {cs:?}"
        );
        assert!(cs.iter().all(|c| c.policy().is_none()), "{prog}: {cs:?}");
    }
    // every configuration sent the same requests in round 1 (common random numbers)
    let sent: Vec<u64> = f
        .points
        .iter()
        .map(|p| p.reps[0].measured.as_ref().unwrap().sent)
        .collect();
    assert!(sent.windows(2).all(|w| w[0] == w[1]), "{sent:?}");
    assert!(f.demand.is_some());
    assert!(run.wall.is_some() && run.slo.p99_us.is_some());
    assert!(run.common_random_numbers);
    // a verdict for every series with batch work
    let prot = study::protection(&f, 0.1, None);
    assert!(!prot.is_empty());
    // the report goes beside the result file, named after it
    let md = dir.path().join("out/bench-report/report.md");
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("borrow_idle") && text.contains("### Verdicts"));
    // the report regenerates from the JSON alone
    Command::Report(elfen_bench::cli::ReportArgs {
        files: vec![json],
        out: Some(dir.path().join("again")),
    })
    .run()
    .unwrap();
    assert!(dir.path().join("again/report.md").is_file());
    Outcome::Ran
}

/// The daemon's modes in the harness, as `elfen daemon` runs them: an
/// unmodified LC service (the built-in one as its own process, publishing
/// nothing) whose busy state comes from the kernel (`--lc-signal bpf`),
/// unmodified batch (a kernel without checks, and xz) handed back by
/// `cpu.idle`, guards, the freezer or `auto` — and borrow idle on the same kernel
/// signal. Each ran, its batch progressed, the LC line was written.
fn the_daemon_modes_protect_an_unmodified_service(_: &()) -> Outcome {
    if !daemon_modes_ok("the_daemon_modes_protect_an_unmodified_service") {
        return Outcome::Skipped;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.lc_signal = Some("bpf".into());
    a.configs = Some("cpu_idle,guard,freeze,blind_isolation,auto,borrow_idle".into());
    a.programs = Some("xz".into());
    Command::Bench(a).run().unwrap();
    let f = ResultFile::load(&dir.path().join("out/bench.json")).unwrap();
    let run = f.run.as_ref().unwrap();
    assert!(
        run.lc.service.starts_with("external:"),
        "{}",
        run.lc.service
    );
    assert!(
        run.notes
            .iter()
            .any(|n| n.contains("LC signal: the kernel")),
        "{:?}",
        run.notes
    );
    assert!(run.skipped.is_empty(), "{:?}", run.skipped);
    let ran: Vec<Config> = study::configs(&f);
    for c in [
        Config::BlindIsolation,
        Config::CpuIdle,
        Config::Guard,
        Config::Freeze,
        Config::Auto,
        Config::BorrowIdle,
    ] {
        assert!(ran.contains(&c), "{c} did not run: {ran:?}");
    }
    for p in &f.points {
        let r = &p.reps[0];
        assert!(r.requests > 0, "{}: no requests", p.config);
        // the LC's busy time comes from the LC line the kernel signal's writer fills
        assert!(r.utilization.lc > 0.0, "{}: no LC utilization", p.config);
        // batch in the idle class may get nothing while other work keeps
        // every CPU busy; the rest progresses whatever else runs here
        if p.config.has_batch() && !p.config.batch_runs_idle_class() {
            assert!(
                r.batch_units_per_s.unwrap_or(0.0) > 0.0,
                "{} · {:?}: the batch made no progress",
                p.config,
                p.batch
            );
        }
        if p.config == Config::BorrowIdle {
            assert!(
                r.naps_per_s.unwrap_or(0.0) > 0.0,
                "borrow idle never napped"
            );
        }
    }
    assert!(served_children_gone(), "the service was left running");
    Outcome::Ran
}

fn the_builtin_service_runs_as_an_external_process(_: &()) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.lc_command = Some(format!(
        "{} serve --port {{port}} --cpu {{cpu}} --side-cpus {{side_cpus}} --page {{page}} \
         --lane {{lane}} --signal {{lc_signal}} --working-set-kib 1024 --calibrate-ms 20",
        exe()
    ));
    Command::Bench(a).run().unwrap();
    let f = ResultFile::load(&dir.path().join("out/bench.json")).unwrap();
    let run = f.run.as_ref().unwrap();
    assert!(
        run.lc.service.starts_with("external:"),
        "{}",
        run.lc.service
    );
    for p in &f.points {
        let r = &p.reps[0];
        assert!(r.requests > 0 && r.errors == 0, "{}: {r:?}", p.config);
        // the LC's busy time comes from the page the external service publishes on
        assert!(r.utilization.lc > 0.0, "{}: no LC utilization", p.config);
        assert!(r.measured.as_ref().unwrap().breakdown.is_some());
    }
    assert!(
        served_children_gone(),
        "the external service was left running"
    );
    Outcome::Ran
}

fn a_service_closing_connections_counts_errors(_: &()) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.configs = Some("lc_alone".into());
    a.lc_signal = Some("none".into());
    a.lc_command = Some(format!("{} flaky-serve --port {{port}} --answer 20", exe()));
    Command::Bench(a).run().unwrap();
    let f = ResultFile::load(&dir.path().join("out/bench.json")).unwrap();
    let r = &f.points[0].reps[0];
    assert!(r.errors > 0, "{r:?}");
    assert_eq!(r.measured.as_ref().unwrap().connections_closed, 1);
    assert!(f.points[0].summary.errors > 0);
    Outcome::Ran
}

fn bad_runtime_input_fails_before_any_load(_: &()) -> Outcome {
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
    // an external service that cannot start: the command is named
    let mut a = args(dir.path());
    a.lc_command = Some("/nonexistent/lc-server --port {port}".into());
    let e = format!("{:#}", Command::Bench(a).run().unwrap_err());
    assert!(e.contains("/nonexistent/lc-server"), "{e}");
    // one that exits at once: its stderr tail is shown
    let mut a = args(dir.path());
    a.lc_command = Some(format!("{} failing-serve", exe()));
    let e = format!("{:#}", Command::Bench(a).run().unwrap_err());
    assert!(
        e.contains("exited") && e.contains("index is corrupt"),
        "{e}"
    );
    // one that never listens: stopped after the start-up timeout
    let cfg = dir.path().join("short.toml");
    std::fs::write(
        &cfg,
        std::fs::read_to_string(tiny_config(dir.path())).unwrap()
            + "\n[lc]\nstartup_timeout_s = 1.0\n",
    )
    .unwrap();
    let mut a = args(dir.path());
    a.config = Some(cfg);
    a.lc_command = Some(format!("{} silent-serve", exe()));
    let e = format!("{:#}", Command::Bench(a).run().unwrap_err());
    assert!(
        e.contains("did not answer a ping") && e.contains("silent-serve"),
        "{e}"
    );
    assert!(served_children_gone(), "a failed service was left running");
    assert!(!dir.path().join("out/bench.json").exists(), "nothing ran");
    Outcome::Ran
}

/// Ctrl-C after round 1 (of 3): the file keeps round 1 of both points (and
/// round 2 of LC alone if it finished first), says it was interrupted, and
/// every point says how many invocations it has.
fn an_interrupted_sweep_keeps_finished_rounds(_: &()) -> Outcome {
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
                let saved = ResultFile::load(&json)
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
    let f = ResultFile::load(&json).unwrap();
    assert!(f.run.as_ref().unwrap().interrupted);
    let configs: Vec<Config> = f.points.iter().map(|p| p.config).collect();
    assert_eq!(configs, [Config::LcAlone, Config::BorrowIdle]);
    for p in &f.points {
        let n = p.reps.len();
        assert!((1..3).contains(&n), "{}: {n} reps", p.config);
        for (i, r) in p.reps.iter().enumerate() {
            assert_eq!(r.round, Some(i as u32 + 1));
        }
        assert!(p.summary.latency_us.p99.median > 0.0);
    }
    assert_eq!(
        f.points[1].reps.len(),
        1,
        "round 2 of borrow idle never ran"
    );
    Outcome::Ran
}

/// One round per point, then added rounds up to a cap of 3: with one
/// round no verdict can conclude (it needs 3), so the one judged load runs
/// rounds 2 and 3 — LC alone and every open point, paired by round — and
/// the file records them, the caps and why they stopped.
fn rounds_are_added_where_verdicts_are_open(_: &()) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.configs = Some("naive,borrow_idle".into());
    a.max_reps = Some(3);
    a.added_reps_budget = Some(120.0);
    Command::Bench(a).run().unwrap();
    let f = ResultFile::load(&dir.path().join("out/bench.json")).unwrap();
    let run = f.run.as_ref().unwrap();
    let rounds = run.rounds.as_ref().expect("the added rounds' record");
    assert_eq!((rounds.max_reps, rounds.budget_s), (3, 120.0));
    assert_eq!(rounds.knee_rps, Some(300.0));
    assert_eq!(rounds.by_rps.len(), 1);
    let load = &rounds.by_rps[0];
    assert_eq!(load.rounds, 3, "{rounds:?}");
    assert_eq!(
        load.added.iter().map(|r| r.round).collect::<Vec<_>>(),
        vec![2, 3]
    );
    // rounds 2 and 3 run every point (none can conclude with fewer than 3)
    for r in &load.added {
        assert_eq!(
            r.series,
            vec![
                "naive · stream".to_string(),
                "borrow_idle · stream".to_string()
            ]
        );
    }
    assert!(rounds.spent_s > 0.0 && rounds.spent_s < 120.0);
    for p in &f.points {
        let got: Vec<Option<u32>> = p.reps.iter().map(|r| r.round).collect();
        let want: Vec<Option<u32>> = (1..=got.len() as u32).map(Some).collect();
        assert_eq!(got, want, "{}: every round kept, in order", p.config);
        assert_eq!(p.reps.len(), 3, "{}", p.config);
    }
    // every round paired up
    let prot = study::protection(&f, 0.1, None);
    for p in &prot {
        let n = study::point(&f, p.key.config, p.key.batch.as_deref(), 300.0)
            .unwrap()
            .reps
            .len();
        assert_eq!(p.loads[0].rounds, n, "{}", p.key.name());
    }
    // and the words say so
    let t = elfen_bench::report::terminal_report(&f);
    assert!(
        t.contains("up to 3 rounds a point and 120 s in all") && t.contains("added 2 at 300 rps"),
        "{t}"
    );
    Outcome::Ran
}

fn budget_policies_see_the_published_queue(_: &()) -> Outcome {
    queue::budget_is_spent_once_per_burst()
}

#[allow(dead_code)]
fn unused(_: BenchArgs) {}
