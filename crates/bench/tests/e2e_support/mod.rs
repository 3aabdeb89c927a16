//! What the end-to-end tests share: the child roles this test binary plays
//! (batch worker, the built-in service as a process, misbehaving
//! services), a tiny sweep's arguments, and checks that nothing was left
//! behind.

pub mod queue;

use clap::Parser;
use elfen_bench::cli::BenchArgs;
use elfen_wire::{self as wire, Kind, RequestHeader, Response, Status};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    a: elfen_bench::lc::serve::ServeArgs,
}

/// Runs this binary's child role, if `args` asks for one; the exit code.
pub fn dispatch_child(args: &[String]) -> Option<i32> {
    match args.get(1).map(String::as_str) {
        Some(elfen_bench::batch::WORKER_SUBCOMMAND) => {
            Some(elfen_bench::batch::worker_main(&args[2..]))
        }
        Some("serve") => {
            let s = Serve::parse_from(args[1..].iter());
            Some(match elfen_bench::lc::serve::run(s.a) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("serve: {e:#}");
                    1
                }
            })
        }
        Some("flaky-serve") => Some(flaky_serve(args)),
        Some("failing-serve") => {
            eprintln!("opening the index: the index is corrupt (checksum mismatch in _0.cfs)");
            Some(3)
        }
        Some("silent-serve") => {
            std::thread::sleep(std::time::Duration::from_secs(60));
            Some(0)
        }
        _ => None,
    }
}

/// A service that answers pings, answers the first `--answer` work
/// requests of a connection, then closes it.
fn flaky_serve(args: &[String]) -> i32 {
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let (Some(port), Some(answer)) = (get("--port"), get("--answer")) else {
        eprintln!("flaky-serve --port P --answer N");
        return 2;
    };
    let l = TcpListener::bind(("127.0.0.1", port as u16)).expect("bind");
    for s in l.incoming() {
        let Ok(mut s) = s else { continue };
        let _ = s.set_nodelay(true);
        let mut served = 0;
        let mut head = [0u8; wire::REQUEST_HEADER];
        while s.read_exact(&mut head).is_ok() {
            let h = RequestHeader::decode(&head);
            let mut payload = vec![0u8; h.len as usize];
            if s.read_exact(&mut payload).is_err() {
                break;
            }
            if h.kind == Kind::Work {
                if served == answer {
                    break; // close mid-run
                }
                served += 1;
            }
            let r = Response {
                id: h.id,
                service_ns: if h.kind == Kind::Work { 10_000 } else { 0 },
                queued_ns: 0,
                status: Status::Ok,
                result: 0,
            };
            if s.write_all(&r.encode()).is_err() {
                break;
            }
        }
    }
    0
}

/// This test binary.
pub fn exe() -> String {
    std::env::current_exe().unwrap().display().to_string()
}

/// Whether we run as root.
pub fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A tiny sweep: half-second invocations, one round, one load, a fixed
/// SLO (no pre-sweep), a small working set.
pub fn tiny_config(dir: &Path) -> PathBuf {
    let cfg = dir.join("tiny.toml");
    std::fs::write(
        &cfg,
        r#"
warmup_s = 0.05
duration_s = 0.4
min_requests = 0
reps = 1
max_reps = 1
drain_s = 1.0
slo_p99_ms = 50.0
budget_us = 50.0
[demand]
kind = "exponential"
mean_us = 100.0
set_size = 50
[chase]
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

/// `elfen bench` arguments for a tiny sweep of borrow idle with Stream at
/// 300 rps, results in `<dir>/out/bench.json`.
pub fn args(dir: &Path) -> BenchArgs {
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

/// Whether no signal page of this process is left in /dev/shm.
pub fn no_page_left() -> bool {
    !Path::new(&format!("/dev/shm/elfen-bench-{}", std::process::id())).exists()
}

/// Whether no child process of ours is still running (external services
/// and batch workers are stopped and reaped by the harness).
pub fn served_children_gone() -> bool {
    let me = std::process::id();
    let rd = std::fs::read_dir("/proc").unwrap();
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let ppid: u32 = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if ppid == me {
            eprintln!("still running: {stat}");
            return false;
        }
    }
    true
}

/// What a test of these runners did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran (and passed: a failure panics).
    Ran,
    /// It could not run here; the skip is recorded (`elfen_cmd::skip`).
    Skipped,
}

/// A test of these runners: its name and body (given the runner's argument).
pub type NamedTest<T> = (&'static str, fn(&T) -> Outcome);

/// Runs the tests named in `tests` (all, or those whose name contains the
/// first argument), printing each outcome and the counts: a skip is
/// reported as one, not as a pass. Each runs on a thread named after it, as
/// libtest's do, so what it records (`elfen_cmd::skip`, `elfen_cmd::rerun`)
/// carries its name.
pub fn run_tests<T: ?Sized + Sync>(tests: &[NamedTest<T>], arg: &T) {
    let t0 = std::time::Instant::now();
    let only = std::env::args().nth(1);
    let (mut passed, mut skipped) = (0, 0);
    for (name, f) in tests {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let outcome = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name((*name).to_string())
                .spawn_scoped(s, || f(arg))
                .expect("a thread for the test")
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        });
        match outcome {
            Outcome::Ran => {
                passed += 1;
                println!("test {name} ... ok");
            }
            Outcome::Skipped => {
                skipped += 1;
                println!("test {name} ... skipped");
            }
        }
    }
    println!(
        "test result: ok. {passed} passed; {skipped} skipped; finished in {:.2}s",
        t0.elapsed().as_secs_f64()
    );
}

/// Whether the daemon's modes can run here — root (guards at real-time
/// priority, cgroups) and BPF (the kernel signal) — recording the skip of
/// `test` when not.
pub fn daemon_modes_ok(test: &str) -> bool {
    use elfen_cmd::skip::{Need, skip_test};
    if !is_root() {
        skip_test(
            test,
            Need::Root,
            "the daemon's modes: cgroups, real-time guards",
        );
        return false;
    }
    let p = elfen_bpf::probe();
    if !p.loadable() {
        let why = p.reason().map(|e| e.to_string()).unwrap_or_default();
        skip_test(test, Need::Bpf, format!("the kernel signal: {why}"));
        return false;
    }
    true
}

/// Every configuration of the harness that runs without the kernel signal,
/// comma-separated (those that need it run in the daemon-mode tests).
pub fn configs_without_kernel_signal() -> String {
    elfen_results::Config::ALL
        .into_iter()
        .filter(|c| c.in_harness() && !c.needs_lc_writer())
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// Records every configuration `run` skipped as a skip of `test/<config>`
/// (all of them need root: a cgroup or real-time threads), and fails when
/// this process is root, which should have run it.
pub fn record_config_skips(test: &str, run: &elfen_results::Run) {
    for s in &run.skipped {
        let name = format!("{test}/{}", s.config);
        elfen_cmd::skip::skip_test(&name, elfen_cmd::skip::Need::Root, &s.reason);
        assert!(
            !is_root(),
            "{} skipped although root: {}",
            s.config,
            s.reason
        );
    }
}
