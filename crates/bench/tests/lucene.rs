//! End-to-end tests of Lucene in the harness, through the command's code
//! path, over a 40-document corpus and its index built in a temporary
//! directory (`ELFEN_CORPUS_DIR`, `ELFEN_LUCENE_COPIES=1`):
//!
//! - `--lc lucene`: every configuration runs against the Lucene server
//!   (the Elfen ones nap, batch progresses, the LC's busy time comes from
//!   the page the Java `LcLane` writes); the report says which service ran;
//! - the daemon's modes with the kernel signal (`--lc-signal bpf`, as
//!   root): every point serves every request, no retry (the JVM stalled
//!   ~1 s when its dispatchers ran real-time beside its normal threads, or
//!   when the writer, woken on the CPU where they ran, kept preempting
//!   them: both fixed);
//!   unparseable term lines of the tasks file are counted and noted, not
//!   fatal (for the Rust loader and the Java server alike);
//! - a missing index fails before any load naming `scripts/lucene.sh`; a
//!   corrupt one fails with the server's own words (its stderr tail); no
//!   server is left running;
//! - `lucene-index`, the Java batch job, as a harness batch program: it
//!   naps under borrow idle, progresses in the baselines too, and its whole
//!   JVM (JIT and GC threads included) stays on the CPU it was given.
//!
//! Needs a JDK >= 22 and the built jar (`scripts/lucene.sh`, or the Maven
//! package step); without them it records a skip (`elfen_cmd::skip`) that
//! names what is missing.
//! `harness = false`: this binary is also the kernels' batch worker.

#[allow(dead_code)] // the e2e tests use the rest
mod e2e_support;

use e2e_support::*;
use elfen_bench::batch::ThreadPlan;
use elfen_bench::batch::{BatchPlan, BatchProgram, BatchRun, ProgramKind, ProgramProcess};
use elfen_bench::cli::Command;
use elfen_bench::lc::{lucene, tasks};
use elfen_cmd::skip::Need;
use elfen_results::{Config, ResultFile, study};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = dispatch_child(&args) {
        std::process::exit(code);
    }
    if let Err((need, why)) = java_ready() {
        elfen_cmd::skip::skip_test("lucene (every test)", need, why);
        println!("test result: ok. 0 passed; 5 skipped");
        return;
    }
    // The sweeps pin threads to the lanes: one lane user at a time, machine-wide.
    let _lanes = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let dir = tempfile::tempdir().unwrap();
    let data = setup(dir.path());
    let tests: [NamedTest<Path>; 5] = [
        (
            "bad_lucene_input_fails_before_any_load",
            bad_lucene_input_fails_before_any_load,
        ),
        (
            "every_configuration_runs_against_lucene",
            every_configuration_runs_against_lucene,
        ),
        (
            "daemon_modes_run_against_lucene_on_the_kernel_signal",
            daemon_modes_run_against_lucene_on_the_kernel_signal,
        ),
        (
            "lucene_index_naps_and_progresses_as_a_batch_program",
            lucene_index_naps_and_progresses_as_a_batch_program,
        ),
        (
            "lucene_index_jvm_stays_on_its_cpu",
            lucene_index_jvm_stays_on_its_cpu,
        ),
    ];
    run_tests(&tests, &data);
    assert!(no_page_left(), "a signal page was left in /dev/shm");
    assert!(served_children_gone(), "a child process was left running");
}

/// What the Lucene tests need and why, if they cannot run here.
fn java_ready() -> Result<(), (Need, String)> {
    let Some(root) = lucene::repo_root() else {
        let why = format!("{} not found", lucene::LAUNCHER);
        return Err((Need::Input(lucene::LAUNCHER.into()), why));
    };
    let exe = lucene::launcher();
    let ok = std::process::Command::new(root.join("scripts/java-env.sh"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let why = "no JDK >= 22 (scripts/java-env.sh found none)";
        return Err((Need::Program("java".into()), why.into()));
    }
    let jar = lucene::jar_of(&exe);
    if !jar.is_file() {
        let why = "not built (the Java step of scripts/test.sh, or scripts/lucene.sh, builds it)";
        return Err((Need::Input(jar), why.into()));
    }
    Ok(())
}

/// The corpus, its index (one copy) and a tasks file with two bad term
/// lines, in `dir`; the environment points the harness and the Java side
/// at them. Returns `dir`.
fn setup(dir: &Path) -> PathBuf {
    let corpus = dir.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    // 40 documents using terms of the real tasks file, so queries hit
    let real = tasks::find_tasks_file(None).expect("the tasks file ships with the repository");
    let q = tasks::read_term_queries(&real).unwrap();
    let terms: Vec<&str> = q.queries.iter().take(60).map(|t| t.term.as_str()).collect();
    let mut tsv = String::from("id\tsource\ttitle\tbody\n");
    for i in 0..40 {
        let body: Vec<&str> = terms
            .iter()
            .skip(i % 7)
            .step_by(1 + i % 5)
            .copied()
            .collect();
        tsv.push_str(&format!(
            "t/{i}\twiki\tTitle {i}\tdocument {i} {}\n",
            body.join(" ")
        ));
    }
    std::fs::write(corpus.join("docs.tsv"), tsv).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut text = std::fs::read_to_string(&real).unwrap();
    text.push_str("HighTerm: two words # freq=3\nLowTerm: # freq=9\n");
    std::fs::write(data.join(tasks::TASKS_FILE), text).unwrap();
    // SAFETY: set before this test starts any thread; children inherit them.
    unsafe {
        std::env::set_var("ELFEN_CORPUS_DIR", &corpus);
        std::env::set_var("ELFEN_LUCENE_COPIES", "1");
        std::env::set_var("ELFEN_DATA_DIR", &data);
        std::env::remove_var("ELFEN_INDEX_DIR");
    }
    let out = std::process::Command::new(lucene::launcher())
        .args(["index", "--copies", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the test index: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_path_buf()
}

fn lucene_command(extra: &str) -> String {
    format!(
        "{} serve --port {{port}} --cpu {{cpu}} --side-cpus {{side_cpus}} --lc-signal {{lc_signal}} \
         --page {{page}} --lane {{lane}} --copies 1 --warmup-rounds 2 {extra}",
        lucene::launcher().display()
    )
}

fn bad_lucene_input_fails_before_any_load(data: &Path) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    // no index: pre-flight names the setup script; nothing starts
    let mut a = args(dir.path());
    a.lc = Some("external".into());
    a.lc_command = Some(lucene_command(&format!(
        "--index {}",
        dir.path().join("none").display()
    )));
    let e = format!("{:#}", Command::Bench(a).run().unwrap_err());
    assert!(e.contains("no index") && e.contains(lucene::SETUP), "{e}");
    assert!(served_children_gone());
    // a half-built index (no marker): pre-flight says so
    let half = dir.path().join("half");
    std::fs::create_dir_all(&half).unwrap();
    let mut a = args(dir.path());
    a.lc = Some("external".into());
    a.lc_command = Some(lucene_command(&format!("--index {}", half.display())));
    let e = format!("{:#}", Command::Bench(a).run().unwrap_err());
    assert!(e.contains("half-built") && e.contains("--rebuild"), "{e}");
    // a corrupt index: the server refuses it; its own words reach the user
    let good = data.join("corpus/index-lucene10");
    let bad = dir.path().join("corrupt");
    std::fs::create_dir_all(&bad).unwrap();
    let mut largest = (0, PathBuf::new());
    for f in std::fs::read_dir(&good).unwrap().flatten() {
        let to = bad.join(f.file_name());
        std::fs::copy(f.path(), &to).unwrap();
        let len = f.metadata().unwrap().len();
        if len > largest.0 && !to.ends_with(lucene::INDEX_MARKER) {
            largest = (len, to);
        }
    }
    let mut bytes = std::fs::read(&largest.1).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&largest.1, bytes).unwrap();
    let mut a = args(dir.path());
    a.lc = Some("external".into());
    a.lc_command = Some(lucene_command(&format!("--index {}", bad.display())));
    let e = format!("{:#}", Command::Bench(a).run().unwrap_err());
    assert!(
        e.contains("exited") && e.contains("stderr ends with") && e.contains("corrupt"),
        "{e}"
    );
    assert!(served_children_gone());
    assert!(
        !dir.path().join("out/bench.json").exists(),
        "no load was sent"
    );
    Outcome::Ran
}

fn every_configuration_runs_against_lucene(_: &Path) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.lc = Some("lucene".into());
    a.configs = Some(configs_without_kernel_signal());
    a.rps = Some("200".into());
    // A 1 µs budget: the 40-document index answers in tens of µs, often
    // within the tiny config's 50 µs, and a budget policy that never runs out
    // of budget never naps (the assertion below is on the plumbing, not on
    // the budget's size).
    a.budget_us = Some("1".into());
    Command::Bench(a).run().unwrap();
    let f = ResultFile::load(&dir.path().join("out/bench.json")).unwrap();
    let run = f.run.as_ref().unwrap();
    assert!(
        run.lc.service.contains("elfen-lucene serve"),
        "{}",
        run.lc.service
    );
    assert!(run.lc.service.contains("--copies 1"), "{}", run.lc.service);
    assert_eq!(run.lc.signal, "api");
    // the tasks file's two bad term lines: counted, noted, left out
    assert_eq!(run.lc.request_set_size, 1237);
    assert!(
        run.notes
            .iter()
            .any(|n| n.contains("2 term-query lines") && n.contains("did not parse")),
        "{:?}",
        run.notes
    );
    assert!(
        run.notes.iter().any(|n| n.contains("shortest query")),
        "{:?}",
        run.notes
    );
    assert!(f.demand.as_ref().is_some_and(|d| d.total() == 1237));
    let ran = study::configs(&f);
    record_config_skips("every_configuration_runs_against_lucene", run);
    for c in Config::ALL
        .into_iter()
        .filter(|c| c.in_harness() && !c.needs_lc_writer())
    {
        if !run.skipped.iter().any(|s| s.config == c) {
            assert!(ran.contains(&c), "{c} did not run against Lucene: {ran:?}");
        }
    }
    for p in &f.points {
        let r = &p.reps[0];
        assert!(r.requests > 0, "{}: no requests", p.config);
        assert_eq!(r.errors, 0, "{}: errors", p.config);
        // busy time from the page the Java LcLane writes
        assert!(r.utilization.lc > 0.0, "{}: no LC busy time", p.config);
        // batch in the idle class may get nothing while other work keeps
        // every CPU busy; the rest progresses whatever else runs here
        if p.config.has_batch() && !p.config.batch_runs_idle_class() {
            assert!(
                r.batch_units_per_s.unwrap_or(0.0) > 0.0,
                "{}: the batch made no progress",
                p.config
            );
        }
        if p.config.policy().is_some() {
            assert!(
                r.naps_per_s.unwrap_or(0.0) > 0.0,
                "{} never napped",
                p.config
            );
        }
    }
    let text = elfen_bench::report::terminal_report(&f);
    assert!(
        text.contains("LC service: external:") && text.contains("elfen-lucene"),
        "{text}"
    );
    assert!(dir.path().join("out/bench-report/report.md").is_file());
    Outcome::Ran
}

/// The daemon's modes, on the kernel signal: Lucene then publishes nothing;
/// every point serves every request (a stalled JVM loses them).
fn daemon_modes_run_against_lucene_on_the_kernel_signal(_: &Path) -> Outcome {
    if !daemon_modes_ok("daemon_modes_run_against_lucene_on_the_kernel_signal") {
        return Outcome::Skipped;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.lc = Some("lucene".into());
    a.lc_signal = Some("bpf".into());
    a.configs = Some("guard,freeze,blind_isolation,borrow_idle".into());
    a.rps = Some("200".into());
    a.json = Some(dir.path().join("bpf/bench.json"));
    Command::Bench(a).run().unwrap();
    let f = ResultFile::load(&dir.path().join("bpf/bench.json")).unwrap();
    let run = f.run.as_ref().unwrap();
    assert!(
        run.lc.service.contains("--lc-signal none"),
        "{}",
        run.lc.service
    );
    assert!(run.skipped.is_empty(), "{:?}", run.skipped);
    let ran = study::configs(&f);
    for c in [
        Config::Guard,
        Config::Freeze,
        Config::BlindIsolation,
        Config::BorrowIdle,
    ] {
        assert!(ran.contains(&c), "{c} did not run: {ran:?}");
    }
    for p in &f.points {
        let r = &p.reps[0];
        assert!(
            r.requests > 0 && r.errors == 0,
            "{}: {} requests, {} errors, p99 {:.0} µs, measured {:?}",
            p.config,
            r.requests,
            r.errors,
            r.latency_us.p99,
            r.measured
        );
    }
    Outcome::Ran
}

/// A sweep config with the Java batch job as the only batch program.
fn java_batch_config(dir: &Path) -> PathBuf {
    let tiny = std::fs::read_to_string(tiny_config(dir)).unwrap();
    let cfg = dir.join("java-batch.toml");
    std::fs::write(
        &cfg,
        format!("kernels = []\nprograms = [\"lucene-index\"]\n{tiny}"),
    )
    .unwrap();
    cfg
}

fn lucene_index_naps_and_progresses_as_a_batch_program(_: &Path) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.config = Some(java_batch_config(dir.path()));
    a.kernels = None;
    a.configs = Some("naive,borrow_idle".into());
    a.rps = Some("500".into());
    Command::Bench(a).run().unwrap();
    let f = ResultFile::load(&dir.path().join("out/bench.json")).unwrap();
    let run = f.run.as_ref().unwrap();
    let alone = run
        .batch
        .alone_units_per_s
        .iter()
        .find(|(k, _)| k == "lucene-index")
        .map(|(_, u)| *u);
    assert!(
        alone.unwrap_or(0.0) > 0.0,
        "{:?}",
        run.batch.alone_units_per_s
    );
    for c in [Config::Naive, Config::BorrowIdle] {
        let p = study::config_series(&f, c, Some("lucene-index"));
        assert_eq!(p.len(), 1, "{c}");
        let r = &p[0].reps[0];
        assert!(
            r.batch_units_per_s.unwrap_or(0.0) > 0.0,
            "{c}: no documents indexed"
        );
        assert!(r.batch_progress.unwrap_or(0.0) > 0.0, "{c}");
        if c == Config::BorrowIdle {
            assert!(
                r.naps_per_s.unwrap_or(0.0) > 0.0,
                "the Java job never napped"
            );
            assert!(r.utilization.batch > 0.0);
        }
    }
    Outcome::Ran
}

/// `Cpus_allowed_list` and scheduling policy of every thread of `pid`.
fn threads_of(pid: u32) -> Vec<(String, String, i32)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let st = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let get = |k: &str| {
            st.lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let tid: libc::pid_t = t.file_name().to_string_lossy().parse().unwrap();
        // SAFETY: a plain query of a thread's policy.
        let policy = unsafe { libc::sched_getscheduler(tid) };
        out.push((get("Name:"), get("Cpus_allowed_list:"), policy));
    }
    out
}

fn lucene_index_jvm_stays_on_its_cpu(_: &Path) -> Outcome {
    let kind = ProgramKind::LuceneIndex;
    let cpus = elfen_topo::current_affinity().unwrap();
    let cpu = *cpus.last().unwrap();
    let plan = BatchPlan {
        program: BatchProgram::Program(kind),
        stream_mib: 8,
        threads: vec![ThreadPlan {
            cpu: Some(cpu),
            lane: None,
        }],
        page: None,
        nap: elfen_runtime::NapChoice::Spin,
        sched: elfen_cmd::proc::SchedClass::Idle,
    };
    let input = std::env::temp_dir().join("unused");
    // spawn returns once the job reported documents: the JVM is up
    let mut p = ProgramProcess::spawn(kind, &plan, &input, None).unwrap();
    let s0 = p.sample();
    std::thread::sleep(Duration::from_millis(300));
    let d = p.sample().since(&s0);
    assert!(p.alive());
    assert!(d.total().units > 0, "no documents reported: {d:?}");
    let java: Vec<u32> = p
        .pids()
        .into_iter()
        .filter(|&q| {
            std::fs::read_to_string(format!("/proc/{q}/comm")).is_ok_and(|c| c.trim() == "java")
        })
        .collect();
    assert_eq!(java.len(), 1, "one JVM per planned thread: {:?}", p.pids());
    let threads = threads_of(java[0]);
    assert!(threads.len() > 5, "a JVM has many threads: {threads:?}");
    for (name, allowed, policy) in &threads {
        assert_eq!(
            allowed,
            &cpu.to_string(),
            "thread {name} is off the batch CPU"
        );
        assert_eq!(*policy, libc::SCHED_IDLE, "thread {name} is not SCHED_IDLE");
    }
    let tmp = format!("elfen-bench-{}-lucene-index-", std::process::id());
    let mine = || {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&tmp))
            .count()
    };
    assert_eq!(mine(), 1, "the job's own temporary directory");
    drop(p);
    assert_eq!(mine(), 0, "the job's temporary directory was left behind");
    Outcome::Ran
}
