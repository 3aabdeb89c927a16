//! End-to-end tests of an unmodified key-value server as the harness's LC
//! (`--lc redis`, `--lc memcached`), through the command's spec and the
//! sweep's code path, with a small key space (seconds):
//!
//! - Redis next to every daemon mode (`cpu_idle`, `guard`,
//!   `blind_isolation`, `freeze`) and `naive` / `sched_idle`, its busy
//!   state from the kernel signal: every configuration produced a point,
//!   requests were answered (no errors) and their latencies recorded, the
//!   LC's busy time came from the LC line (LC alone, and the modes that act
//!   on it), the batch progressed (at the LC's priority; idle batch may get
//!   nothing on a busy machine), the
//!   daemon's own CPU was recorded for its modes and shows in the table;
//!   the key space was filled (and said so); nothing is left running;
//! - memcached in its text line protocol, LC alone and naive: the same
//!   plumbing for the second protocol;
//! - a server that is not installed fails before any load, naming its
//!   Debian package; a key space that is not there after filling fails
//!   naming the key, and the server is stopped.
//!
//! Needs the servers of `scripts/deps/bench.apt` (without one the test is a
//! recorded skip, `elfen_cmd::skip`); without root (BPF, cgroups, real-time guards) it
//! runs naive and sched_idle only, publishing nothing, and says so.
//! `harness = false`: this binary is also the kernels' batch worker.

#[allow(dead_code)] // the e2e tests use the rest
mod e2e_support;

use e2e_support::*;
use elfen_bench::cli::build_spec;
use elfen_bench::spec::{BenchSpec, KvSpec};
use elfen_bench::sweep::{self, SweepOptions};
use elfen_results::{Config, ResultFile, study};
use std::path::Path;
use std::sync::atomic::AtomicBool;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = dispatch_child(&args) {
        std::process::exit(code);
    }
    // The sweeps pin threads to the lanes: one lane user at a time, machine-wide.
    let _lanes = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let tests: [NamedTest<()>; 4] = [
        (
            "a_missing_server_fails_before_any_load",
            a_missing_server_fails_before_any_load,
        ),
        (
            "redis_runs_beside_every_daemon_mode",
            redis_runs_beside_every_daemon_mode,
        ),
        (
            "memcached_runs_in_its_line_protocol",
            memcached_runs_in_its_line_protocol,
        ),
        (
            "a_key_space_that_is_not_there_fails",
            a_key_space_that_is_not_there_fails,
        ),
    ];
    run_tests(&tests, &());
    assert!(no_page_left(), "a signal page was left in /dev/shm");
}

/// Whether `program` is in `PATH`.
fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Whether `test` cannot run here for want of `kv`'s server (the skip
/// recorded).
fn cannot_run(test: &str, kv: &KvSpec) -> bool {
    if !installed(&kv.command[0]) {
        elfen_cmd::skip::skip_test(
            test,
            elfen_cmd::skip::Need::Program(kv.command[0].clone()),
            format!("Debian package {}, scripts/deps/bench.apt", kv.package),
        );
        return true;
    }
    false
}

/// Without root there is no kernel signal (BPF), no cgroup and no
/// real-time guard: the service publishes nothing (`--lc-signal none`) and
/// only the configurations that need none of them run (said so).
fn without_root(test: &str, spec: &mut BenchSpec, configs: &str) -> bool {
    if is_root() {
        return false;
    }
    elfen_cmd::skip::skip_test(
        &format!("{test}/daemon-modes"),
        elfen_cmd::skip::Need::Root,
        format!(
            "the kernel signal and the daemon's modes (BPF, cgroups, real-time guards); ran {configs} only"
        ),
    );
    spec.lc.signal = elfen_bench::spec::LcSignal::None;
    spec.configs = std::iter::once(Config::LcAlone)
        .chain(configs.split(',').map(|c| c.parse().unwrap()))
        .collect();
    true
}

/// The spec of `elfen bench --lc <lc> --configs <configs> --kernels stream
/// --rps 1500` over the tiny sweep, results in `<dir>/out/bench.json`,
/// with a key space of `keys` keys.
fn kv_spec(dir: &Path, lc: &str, configs: &str, keys: u64) -> BenchSpec {
    let mut a = args(dir);
    a.lc = Some(lc.into());
    a.configs = Some(configs.into());
    a.rps = Some("1500".into());
    let mut spec = build_spec(&a).unwrap();
    spec.lc.kv.as_mut().expect("a key-value service").keys = keys;
    spec.lc
        .kv
        .as_mut()
        .expect("a key-value service")
        .demand_sample = 100;
    spec
}

fn run(dir: &Path, spec: BenchSpec) -> elfen_bench::error::Result<ResultFile> {
    let stop = AtomicBool::new(false);
    sweep::run(
        SweepOptions {
            spec,
            command: "elfen bench (kv test)".into(),
            json_path: dir.join("out/bench.json"),
            worker_exe: std::env::current_exe().unwrap(),
            progress: false,
        },
        &stop,
    )
    .map(|o| o.result)
}

fn redis_runs_beside_every_daemon_mode(_: &()) -> Outcome {
    let test = "redis_runs_beside_every_daemon_mode";
    if cannot_run(test, &KvSpec::redis()) {
        return Outcome::Skipped;
    }
    let dir = tempfile::tempdir().unwrap();
    let configs = "naive,sched_idle,cpu_idle,guard,blind_isolation,freeze";
    let mut spec = kv_spec(dir.path(), "redis", configs, 20_000);
    spec.programs = vec![elfen_bench::spec::ProgramKind::StressNg];
    if without_root(test, &mut spec, "naive,sched_idle") {
        redis_runs_without_root(dir.path(), spec);
        return Outcome::Ran;
    }
    let f = run(dir.path(), spec).unwrap();
    let run = f.run.as_ref().unwrap();
    assert!(run.skipped.is_empty(), "{:?}", run.skipped);
    assert!(
        run.lc.service.starts_with("redis (unmodified"),
        "{}",
        run.lc.service
    );
    assert!(
        run.notes
            .iter()
            .any(|n| n.starts_with("redis: filled 20000 keys of 256 B")),
        "{:?}",
        run.notes
    );
    assert!(
        run.notes
            .iter()
            .any(|n| n.contains("LC signal: the kernel")),
        "{:?}",
        run.notes
    );
    let ran = study::configs(&f);
    for c in [
        Config::LcAlone,
        Config::Naive,
        Config::SchedIdle,
        Config::CpuIdle,
        Config::Guard,
        Config::BlindIsolation,
        Config::Freeze,
    ] {
        assert!(ran.contains(&c), "{c} produced no result: {ran:?}");
    }
    // lc_alone, and 6 configurations with stream and with stress-ng
    assert_eq!(f.points.len(), 1 + 6 * 2, "{:?}", f.points.len());
    println!("{}", elfen_bench::report::terminal_report(&f));
    let mut batch_units = 0.0;
    for p in &f.points {
        let what = format!("{} · {:?}", p.config, p.batch);
        let r = &p.reps[0];
        assert!(r.requests > 0, "{what}: no requests answered");
        assert_eq!(r.errors, 0, "{what}: errors");
        assert!(r.latency_us.p99 > 0.0, "{what}: no latency recorded");
        assert!(r.histogram.is_some(), "{what}: no histogram");
        // the LC's busy time comes from the LC line the kernel signal
        // writes (and the guards, freezer and blind isolation act on it)
        if p.config == Config::LcAlone || p.config.needs_lc_writer() {
            assert!(r.utilization.lc > 0.0, "{what}: no LC utilization");
        }
        let m = r.measured.as_ref().unwrap();
        assert!(m.daemon.is_some(), "{what}: the writer's CPU not recorded");
        if p.config.has_batch() {
            let units = r.batch_units_per_s.expect("batch progress recorded");
            println!(
                "  {what}: p99 {:.0} µs, LC busy {:.2}, progress {:.2}, daemon CPU {:.3} lanes",
                r.latency_us.p99,
                r.utilization.lc,
                r.batch_progress.unwrap_or(0.0),
                m.daemon.map_or(0.0, |d| d.on_cpu_util)
            );
            batch_units += units;
            // batch at the LC's priority makes progress whatever else runs
            // here; idle batch may get nothing on a busy machine
            if !p.config.batch_runs_idle_class() {
                assert!(units > 0.0, "{what}: the batch made no progress");
            }
        }
        if p.config.is_daemon_mode() {
            assert!(
                p.summary.daemon_util.is_some_and(|d| d.median > 0.0),
                "{what}: no daemon CPU"
            );
        }
        if p.config == Config::Guard {
            let d = m.daemon.unwrap();
            assert!(
                d.occupied_util >= 0.0 && d.occupied_util.is_finite(),
                "{d:?}"
            );
        }
    }
    assert!(batch_units > 0.0, "no batch progressed at all");
    let table = elfen_bench::report::terminal_report(&f);
    assert!(
        table.contains("daemon") && table.contains("redis"),
        "{table}"
    );
    assert!(served_children_gone(), "redis was left running");
    Outcome::Ran
}

/// Redis with naive and sched_idle, publishing nothing: the plumbing
/// without the kernel signal.
fn redis_runs_without_root(dir: &Path, spec: BenchSpec) {
    let f = run(dir, spec).unwrap();
    assert_eq!(
        study::configs(&f),
        [Config::LcAlone, Config::Naive, Config::SchedIdle]
    );
    for p in &f.points {
        let r = &p.reps[0];
        assert!(r.requests > 0 && r.errors == 0, "{}: {r:?}", p.config);
        assert!(r.latency_us.p99 > 0.0, "{}: no latency recorded", p.config);
        if p.config == Config::Naive {
            assert!(
                r.batch_units_per_s.unwrap_or(0.0) > 0.0,
                "naive: no progress"
            );
        }
    }
    assert!(served_children_gone(), "redis was left running");
}

fn memcached_runs_in_its_line_protocol(_: &()) -> Outcome {
    let test = "memcached_runs_in_its_line_protocol";
    if cannot_run(test, &KvSpec::memcached()) {
        return Outcome::Skipped;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = kv_spec(dir.path(), "memcached", "naive", 20_000);
    let root = !without_root(test, &mut spec, "naive");
    let f = run(dir.path(), spec).unwrap();
    let run = f.run.as_ref().unwrap();
    assert!(
        run.notes
            .iter()
            .any(|n| n.starts_with("memcached: filled 20000 keys") && n.contains("pipelined")),
        "{:?}",
        run.notes
    );
    assert_eq!(study::configs(&f), [Config::LcAlone, Config::Naive]);
    for p in &f.points {
        let r = &p.reps[0];
        assert!(r.requests > 0 && r.errors == 0, "{}: {r:?}", p.config);
        if root && p.config == Config::LcAlone {
            assert!(r.utilization.lc > 0.0, "{}: no LC utilization", p.config);
        }
    }
    assert!(served_children_gone(), "memcached was left running");
    Outcome::Ran
}

fn a_missing_server_fails_before_any_load(_: &()) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path());
    a.lc = Some("redis".into());
    let mut spec = build_spec(&a).unwrap();
    let kv = spec.lc.kv.as_mut().unwrap();
    kv.command[0] = "no-such-kv-server".into();
    kv.package = "no-such-package".into();
    let e = run(dir.path(), spec).unwrap_err().to_string();
    assert!(
        e.contains("no-such-kv-server is not installed")
            && e.contains("no-such-package")
            && e.contains("scripts/deps/bench.apt"),
        "{e}"
    );
    assert!(!dir.path().join("out/bench.json").exists());
    assert!(served_children_gone());
    Outcome::Ran
}

fn a_key_space_that_is_not_there_fails(_: &()) -> Outcome {
    let test = "a_key_space_that_is_not_there_fails";
    if cannot_run(test, &KvSpec::redis()) {
        return Outcome::Skipped;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = kv_spec(dir.path(), "redis", "naive", 1000);
    // a "populate" that writes nothing
    spec.lc.kv.as_mut().unwrap().populate = Some("PING".into());
    let e = run(dir.path(), spec).unwrap_err().to_string();
    assert!(
        e.contains("redis: key 0 is missing after filling the key space")
            && e.contains("GET key:0"),
        "{e}"
    );
    assert!(served_children_gone(), "redis was left running");
    Outcome::Ran
}
