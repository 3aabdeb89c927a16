//! The proxy in front of two replicas of the Lucene search server
//! (`bindings/java/lucene`, publishing through the Java `LcLane`): a small
//! index in a temporary directory, the replicas started by the proxy from
//! the harness's Lucene command; replica A stopped with SIGSTOP under load;
//! replicas with a small heap (`--hazards small-heap`) whose collections
//! the proxy's BPF watch of each JVM sees and hides.
//! Needs a JDK >= 22 and the jar (`scripts/test.sh` builds it with Maven
//! before running this; `scripts/lucene.sh` too): without them it is
//! a recorded skip (`elfen_cmd::skip`) and why.

mod support;

use elfen_bench::lc::{lucene, tasks};
use elfen_cmd::skip::Need;
use elfen_proxy::Proxy;
use elfen_proxy::config::ProxyConfig;
use elfen_proxy::engine::Health;
use elfen_proxy::jvm::WatchState;
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

/// Two small-heap replicas (`--hazards small-heap`: young collections
/// every few dozen requests, full ones as the old generation fills) under
/// an open-loop-like load of term queries, the proxy's other signals set
/// far above a collection (off-CPU off, demand bounds 10 s): the BPF watch
/// of each JVM sees the collections, those of the active replica that last
/// the `jvm_pause` bound hand over — requests in flight re-sent, roles
/// swapped — and every query is answered once. Rounds of load until that
/// happened (at most 6): how long a collection lasts depends on the
/// machine, that one does not.
fn gc_pauses_of_a_small_heap_replica_are_seen_and_hidden(terms: &[String]) {
    if let Some(why) = no_bpf() {
        elfen_cmd::skip::skip_test(
            "gc_pauses_of_a_small_heap_replica_are_seen_and_hidden",
            Need::Bpf,
            why,
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ProxyConfig::default();
    cfg.replicas.command = Some(format!(
        "{} serve --port {{port}} --cpu {{cpu}} --side-cpus {{side_cpus}} --lc-signal {{lc_signal}} \
         --page {{page}} --lane {{lane}} --copies 1 --warmup-rounds 2 --hazards small-heap",
        lucene::launcher().display()
    ));
    cfg.replicas.page = Some(dir.path().join("page"));
    cfg.replicas.startup_timeout_s = lucene::STARTUP_TIMEOUT_S;
    cfg.pause.offcpu_ms = 0.0;
    cfg.pause.floor_ms = 10_000.0;
    cfg.pause.jvm_pause_ms = 1.0;
    let proxy = Proxy::start(cfg, &AtomicBool::new(false)).unwrap();
    for r in 0..2 {
        assert_eq!(
            proxy.jvm().state(r).0,
            WatchState::On,
            "replica {r}: {}",
            proxy.jvm().describe(r)
        );
    }
    let e = proxy.engine().clone();
    let pids = [proxy.replica_pid(0).unwrap(), proxy.replica_pid(1).unwrap()];
    let mut rounds = 0;
    let s = loop {
        rounds += 1;
        let got = wire_load(
            proxy.addr(),
            400,
            Duration::from_millis(3),
            |i| (i as u64, terms[(i * 7) % terms.len()].as_bytes().to_vec()),
            Duration::from_secs(30),
            |_| {},
        );
        got.assert_each_answered_once_ok();
        let s = proxy.summary();
        println!("    round {rounds}: {}", s.line());
        if s.hedges.signal.jvm_pause >= 1 || rounds == 6 {
            break s;
        }
    };
    let seen: u64 = s.replicas.iter().map(|r| r.jvm_pauses).sum();
    assert!(seen >= 1, "the watch saw no collection: {}", s.line());
    let fired: u64 = s.replicas.iter().map(|r| r.pauses.jvm_pause).sum();
    assert!(
        fired >= 1 && s.hedges.signal.jvm_pause >= 1 && s.swaps >= 1,
        "{seen} collections seen, none handed over: {}",
        s.line()
    );
    assert_eq!(
        s.hedges_total, s.hedges.signal.jvm_pause,
        "only the JVM watch fired: {:?}",
        s.hedges
    );
    wait_for("both replicas up", Duration::from_secs(30), || {
        e.health(0) == Health::Up && e.health(1) == Health::Up
    });
    let s = proxy.stop();
    assert_eq!(s.failed, 0, "{}", s.line());
    for pid in pids {
        assert!(!elfen_shm::pid_alive(pid), "replica {pid} left running");
    }
}

/// Why BPF cannot be used here, if it cannot.
fn no_bpf() -> Option<String> {
    elfen_bpf::check_privileges()
        .and_then(|()| elfen_bpf::check_btf())
        .err()
        .map(|e| e.to_string())
}

fn main() {
    const TESTS: [&str; 2] = [
        "a_stopped_lucene_replica_hands_over",
        "gc_pauses_of_a_small_heap_replica_are_seen_and_hidden",
    ];
    if let Some((need, why)) = missing() {
        for t in TESTS {
            elfen_cmd::skip::skip_test(t, need.clone(), why.clone());
        }
        println!("\ntest result: ok. 0 passed; 0 failed; 2 skipped");
        return;
    }
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let _lanes = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let dir = tempfile::tempdir().unwrap();
    let terms = setup(dir.path());
    let tests: [fn(&[String]); 2] = [
        a_stopped_lucene_replica_hands_over,
        gc_pauses_of_a_small_heap_replica_are_seen_and_hidden,
    ];
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in TESTS.into_iter().zip(tests) {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let t0 = Instant::now();
        let ok = std::panic::catch_unwind(|| f(&terms)).is_ok();
        println!(
            "test {name} ... {} ({:.1} s)",
            if ok { "ok" } else { "FAILED" },
            t0.elapsed().as_secs_f64()
        );
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
