//! The proxy in front of two replicas of the Lucene search server
//! (`bindings/java/lucene`, publishing through the Java `LcLane`): a small
//! index in a temporary directory, the replicas started by the proxy from
//! the harness's Lucene command, replica A stopped with SIGSTOP under load.
//! Needs a JDK >= 22 and the jar (`scripts/test.sh` builds it with Maven
//! before running this; `scripts/lucene.sh` too): without them it is
//! a recorded skip (`elfen_cmd::skip`) and why.

mod support;

use elfen_bench::lc::{lucene, tasks};
use elfen_cmd::skip::Need;
use elfen_proxy::Proxy;
use elfen_proxy::config::ProxyConfig;
use elfen_proxy::engine::Health;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use support::{wait_for, wire_load};

/// Why the Lucene server cannot run here, if it cannot.
fn missing() -> Option<(Need, String)> {
    let exe = lucene::launcher();
    if !exe.is_file() {
        return Some((Need::Input(exe.clone()), "the Lucene launcher".into()));
    }
    let Some(root) = lucene::repo_root() else {
        let why = "the repository root (with the launcher) is not found";
        return Some((Need::Input(exe), why.into()));
    };
    let jdk = std::process::Command::new("bash")
        .arg(root.join("scripts/java-env.sh"))
        .output();
    if !jdk.is_ok_and(|o| o.status.success()) {
        let why = "no JDK >= 22 (scripts/java-env.sh found none)";
        return Some((Need::Program("java".into()), why.into()));
    }
    let jar = lucene::jar_of(&exe);
    (!jar.is_file()).then(|| {
        let why = "not built (the Java step of scripts/test.sh, or scripts/lucene.sh, builds it)";
        (Need::Input(jar), why.into())
    })
}

/// A corpus of 2,000 documents made of the tasks file's terms, and its
/// index; the environment points the server at them. Returns the terms.
fn setup(dir: &Path) -> Vec<String> {
    let corpus = dir.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let q = tasks::read_term_queries(&tasks::find_tasks_file(None).unwrap()).unwrap();
    let terms: Vec<String> = q.queries.iter().map(|t| t.term.clone()).collect();
    let mut tsv = String::from("id\tsource\ttitle\tbody\n");
    for i in 0..2000 {
        let body: Vec<&str> = (0..40)
            .map(|k| terms[(i * 7 + k * 13) % terms.len().min(300)].as_str())
            .collect();
        tsv.push_str(&format!(
            "t/{i}\twiki\tTitle {i}\tdocument {i} {}\n",
            body.join(" ")
        ));
    }
    std::fs::write(corpus.join("docs.tsv"), tsv).unwrap();
    // SAFETY: set before this test starts any thread; children inherit them.
    unsafe {
        std::env::set_var("ELFEN_CORPUS_DIR", &corpus);
        std::env::set_var("ELFEN_LUCENE_COPIES", "1");
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
    terms
}

/// The active replica (a JVM) is stopped under load: every query is
/// answered once, by the other after the swap; the stopped one, continued,
/// is taken back and warmed; at the end both JVMs are gone.
fn a_stopped_lucene_replica_hands_over(terms: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ProxyConfig::default();
    cfg.replicas.command = Some(format!(
        "{} serve --port {{port}} --cpu {{cpu}} --side-cpus {{side_cpus}} --lc-signal {{lc_signal}} \
         --page {{page}} --lane {{lane}} --copies 1 --warmup-rounds 2",
        lucene::launcher().display()
    ));
    cfg.replicas.page = Some(dir.path().join("page"));
    cfg.replicas.startup_timeout_s = lucene::STARTUP_TIMEOUT_S;
    // well above a busy machine's preemptions, far below the stop
    cfg.pause.floor_ms = 50.0;
    cfg.pause.offcpu_ms = 20.0;
    cfg.warm.requests = 20;
    let proxy = Proxy::start(cfg, &AtomicBool::new(false)).unwrap();
    let e = proxy.engine().clone();
    let pids = [proxy.replica_pid(0).unwrap(), proxy.replica_pid(1).unwrap()];
    // the JVMs may pause on their own too (a collection): stop whichever
    // replica is active at request 150
    let stopped = std::sync::atomic::AtomicUsize::new(usize::MAX);
    let got = wire_load(
        proxy.addr(),
        400,
        Duration::from_millis(2),
        |i| (i as u64, terms[i % terms.len()].as_bytes().to_vec()),
        Duration::from_secs(30),
        |i| {
            if i == 150 {
                let a = e.active();
                stopped.store(a, std::sync::atomic::Ordering::Relaxed);
                elfen_cmd::proc::signal_pid(pids[a], libc::SIGSTOP);
            }
        },
    );
    let x = stopped.load(std::sync::atomic::Ordering::Relaxed);
    got.assert_each_answered_once_ok();
    let s = proxy.summary();
    assert!(s.swaps >= 1, "{}", s.line());
    assert!(matches!(e.health(x), Health::Paused { .. }), "{}", s.line());
    assert_eq!(e.active(), 1 - x, "{}", s.line());
    elfen_cmd::proc::signal_pid(pids[x], libc::SIGCONT);
    wait_for(
        "the stopped replica back and warmed",
        Duration::from_secs(60),
        || e.health(x) == Health::Up && e.warm_left(x) == 0,
    );
    let s = proxy.stop();
    assert_eq!(s.failed, 0, "{}", s.line());
    assert!(s.replicas[x].warmups >= 20, "{}", s.line());
    for pid in pids {
        assert!(!elfen_shm::pid_alive(pid), "replica {pid} left running");
    }
}

fn main() {
    if let Some((need, why)) = missing() {
        elfen_cmd::skip::skip_test("a_stopped_lucene_replica_hands_over", need, why);
        println!("\ntest result: ok. 0 passed; 0 failed; 1 skipped");
        return;
    }
    let _lanes = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let terms = setup(dir.path());
    let ok = std::panic::catch_unwind(|| a_stopped_lucene_replica_hands_over(&terms)).is_ok();
    println!(
        "test a_stopped_lucene_replica_hands_over ... {} ({:.1} s)",
        if ok { "ok" } else { "FAILED" },
        t0.elapsed().as_secs_f64()
    );
    let (p, f) = if ok { (1, 0) } else { (0, 1) };
    println!(
        "\ntest result: {}. {p} passed; {f} failed",
        if ok { "ok" } else { "FAILED" }
    );
    if !ok {
        std::process::exit(1);
    }
}
