//! Behaviour of the daemon's isolation beyond the CPU, through the
//! benchmarks' own code (root; skipped with the reason otherwise):
//!
//! - the kill switch toggled under a harness load: no request lost, no
//!   batch process left frozen (freeze and blind modes);
//! - egress in network namespaces: the upload marked low goes behind the
//!   LC's responses (the LC's median latency far below the normal case's);
//! - the memory, I/O and fail-safe benchmarks run and say what they must
//!   (the balloon and only it killed, no OOM kill; the I/O budget binds;
//!   the fail-safe engages in every run).
//!
//! No speed is asserted beyond wide, behavioural margins. A test this
//! machine cannot run records a skip (`elfen_cmd::skip`); a program the
//! project's setup installs (`scripts/deps/isolation.apt`) is never a
//! reason to skip: missing, it fails the test.

use elfen_cmd::skip::{Need, skip_test};
use elfen_isobench::common::{
    ChildGuard, Helpers, InProcessDaemon, Load, free_port, run_load, wait_listening,
};
use elfen_shm::KillMode;
use rand::Rng;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The helper programs, from this crate's `elfen-isobench-helper`.
fn helpers() -> Helpers {
    Helpers::Program(env!("CARGO_BIN_EXE_elfen-isobench-helper").into())
}

/// `None` (a skip recorded) unless this test can run: root, 2 CPUs. The
/// `programs` it runs, which `scripts/setup.sh` installs, must be there:
/// a missing one fails the test.
fn ok(test: &str, programs: &[&str]) -> Option<elfen_cmd::LaneLock> {
    if !Need::Root.present() {
        skip_test(test, Need::Root, "cgroups, BPF, namespaces");
        return None;
    }
    if !Need::Cpus(2).present() {
        skip_test(test, Need::Cpus(2), "an LC CPU and a batch CPU");
        return None;
    }
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| !Need::Program((*p).into()).present())
        .collect();
    assert!(
        missing.is_empty(),
        "{test}: {} not installed: `scripts/setup.sh --deps isolation` installs them \
         (scripts/deps/isolation.apt)",
        missing.join(", ")
    );
    Some(elfen_cmd::LaneLock::acquire().expect("the lane lock"))
}

fn freezer_state(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("freezer.state"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn cpu_ticks(pid: u32) -> u64 {
    elfen_cmd::proc::process_ticks(pid)
}

#[test]
fn the_kill_switch_toggled_under_load_loses_no_request_and_leaves_nothing_frozen() {
    let test = "the_kill_switch_toggled_under_load_loses_no_request_and_leaves_nothing_frozen";
    let Some(_lock) = ok(test, &["sh"]) else {
        return;
    };
    for mode in ["freeze", "blind"] {
        let helpers = helpers();
        let port = free_port().unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let lc = ChildGuard::new(
            helpers
                .command(&[
                    "lc-server".into(),
                    format!("--listen={addr}"),
                    "--cpu=0".into(),
                    "--working-set-mib=16".into(),
                ])
                .spawn()
                .unwrap(),
        );
        wait_listening(addr, Duration::from_secs(30)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let page = format!("/dev/shm/elfen-isobench-test-{}-ks", std::process::id());
        let d = InProcessDaemon::start(
            &format!(
                "page = \"{page}\"\nstate_file = \"{}\"\npairs = \"0:1\"\nundelegated = \"root\"\n\
                 [metrics]\nlisten = \"\"\n[memory]\nmin_available = 0\npressure = \"off\"\n\
                 [lc]\npid = {}\n[[batch]]\nname = \"spin\"\nmode = \"{mode}\"\n\
                 command = [\"sh\", \"-c\", \"while :; do :; done\"]\n",
                dir.path().join("state.json").display(),
                lc.pid()
            ),
            false,
        )
        .unwrap();
        let group = Path::new("/sys/fs/cgroup/freezer")
            .join(format!("elfen-daemon-{}/spin", std::process::id()));
        let spinner: u32 = std::fs::read_to_string(group.join("cgroup.procs"))
            .unwrap()
            .split_whitespace()
            .next()
            .expect("the spinner runs")
            .parse()
            .unwrap();
        let done = AtomicBool::new(false);
        let stop = AtomicBool::new(false);
        let load = Load {
            rps: 1000.0,
            work: 4,
            warmup_ms: 500,
            window_ms: 6000,
        };
        let (result, toggles) = std::thread::scope(|s| {
            let l = s.spawn(|| {
                let r = run_load(addr, &load, &[1], &stop);
                done.store(true, Ordering::Relaxed);
                r
            });
            // `elfen ctl off` / `on`, both modes, every 10-80 ms
            let mut n = 0;
            let mut rng = rand::rng();
            let modes = [
                KillMode::Paused,
                KillMode::Off,
                KillMode::Unmanaged,
                KillMode::Off,
            ];
            while !done.load(Ordering::Relaxed) {
                elfen_ops::ctl::set(Path::new(&page), modes[n % 4]).unwrap();
                n += 1;
                std::thread::sleep(Duration::from_millis(rng.random_range(10..80)));
            }
            elfen_ops::ctl::set(Path::new(&page), KillMode::Off).unwrap();
            (l.join().unwrap(), n)
        });
        let r = result.unwrap();
        println!(
            "{mode}: {toggles} toggles, {} requests, {} errors, p99 {:.0} µs",
            r.requests, r.errors, r.latency_us.p99
        );
        assert!(toggles >= 20, "{toggles} toggles");
        assert!(r.requests > 1000, "{} requests answered", r.requests);
        assert_eq!(r.errors, 0, "requests lost or failed while toggling");
        // switch clear, LC idle: the batch group thaws and runs
        let thawed = {
            let t0 = Instant::now();
            loop {
                if freezer_state(&group) == "THAWED" {
                    break true;
                }
                if t0.elapsed() > Duration::from_secs(3) {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        assert!(thawed, "{mode}: left {}", freezer_state(&group));
        let c0 = cpu_ticks(spinner);
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            cpu_ticks(spinner) > c0,
            "{mode}: the batch process does not run after the switch is cleared"
        );
        if let Err(e) = d.stop() {
            panic!("{mode}: {e:#}");
        }
        assert!(!group.exists(), "the daemon's group is removed at stop");
    }
}

#[test]
fn egress_marked_low_goes_behind_the_lc() {
    let test = "egress_marked_low_goes_behind_the_lc";
    let Some(_lock) = ok(test, &["ip", "tc", "iperf3"]) else {
        return;
    };
    let p = elfen_isobench::egress::Params {
        runs: 1,
        load: Load {
            rps: 300.0,
            work: 1,
            warmup_ms: 2000,
            window_ms: 4000,
        },
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    let reps = elfen_isobench::egress::measure(&p, &helpers(), &stop).unwrap();
    let get = |c: &str| reps.iter().find(|r| r.config == c).unwrap();
    let (alone, normal, low) = (get("alone"), get("normal"), get("low"));
    for r in [alone, normal, low] {
        assert_eq!(r.load.errors, 0, "{}: requests lost", r.config);
    }
    assert_eq!(normal.marked_packets, 0);
    assert!(low.marked_packets > 100, "{} marked", low.marked_packets);
    assert!(
        low.load.latency_us.p50 * 3.0 < normal.load.latency_us.p50,
        "the LC waits behind the upload: median {:.0} µs marked low vs {:.0} µs normal",
        low.load.latency_us.p50,
        normal.load.latency_us.p50
    );
    // nothing left: the namespaces are gone
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains(&format!("-{}-", std::process::id())),
        "namespaces left behind"
    );
}

#[test]
fn the_memory_benchmark_kills_the_balloon_and_nothing_else() {
    let test = "the_memory_benchmark_kills_the_balloon_and_nothing_else";
    let Some(_lock) = ok(test, &[]) else { return };
    if !Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists()
        && !Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
    {
        let why = "the batch groups' memory limits (v1 hierarchy, or v2 at /sys/fs/cgroup)";
        skip_test(test, Need::CgroupV1("memory".into()), why);
        return;
    }
    let p = elfen_isobench::memory::Params {
        runs: 1,
        load: Load {
            rps: 500.0,
            work: 8,
            warmup_ms: 500,
            window_ms: 4000,
        },
        working_set_mib: 64,
        headroom_mib: 384,
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    let reps = elfen_isobench::memory::measure(&p, &helpers(), &stop).unwrap();
    let s = elfen_isobench::memory::summary(&reps);
    print!("{}", elfen_isobench::memory::render(&s));
    let b = reps.iter().find(|r| r.config == "balloon").unwrap();
    let q = reps.iter().find(|r| r.config == "quiet").unwrap();
    assert_eq!(q.kills, 0, "nothing killed without the balloon");
    assert_eq!(b.kills, 1, "the balloon killed once");
    assert!(!b.others_killed && b.oom_kills == 0, "{b:?}");
    assert!(b.crossing_to_kill_ms.is_some(), "{b:?}");
    assert_eq!(b.load.errors + q.load.errors, 0);
}

#[test]
fn the_io_budget_binds_the_batch_jobs() {
    let test = "the_io_budget_binds_the_batch_jobs";
    let Some(_lock) = ok(test, &["fio", "losetup"]) else {
        return;
    };
    if !Need::CgroupV1("blkio".into()).present() {
        let why = "the benchmark's I/O budget is written to v1 blkio throttles";
        skip_test(test, Need::CgroupV1("blkio".into()), why);
        return;
    }
    let p = elfen_isobench::io::Params {
        runs: 1,
        window_s: 3,
        device_mib: 512,
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    let reps = elfen_isobench::io::measure(&p, &stop).unwrap();
    let mib = |c: &str| {
        let r = reps.iter().find(|r| r.config == c).unwrap();
        assert!(r.probe_ios > 0, "{c}: the probe read nothing");
        r.batch_mib_s
            .iter()
            .map(|b| b.1 + b.2)
            .fold(0.0, |a, b| a + b)
    };
    let (free, limited) = (mib("batch"), mib("limited"));
    let budget = (p.budget_read_mib_s + p.budget_write_mib_s) as f64;
    println!("batch {free:.1} MiB/s unlimited, {limited:.1} MiB/s under a {budget} MiB/s budget");
    assert!(
        limited > 0.0 && limited <= budget * 1.5,
        "{limited:.1} MiB/s"
    );
}

#[test]
fn the_failsafe_engages_in_every_run() {
    let test = "the_failsafe_engages_in_every_run";
    let Some(_lock) = ok(test, &[]) else { return };
    let p = elfen_isobench::failsafe::Params {
        runs: 3,
        heartbeat_ms: 50,
    };
    let stop = AtomicBool::new(false);
    let reps = elfen_isobench::failsafe::measure(&p, &helpers(), &stop).unwrap();
    for r in &reps {
        assert!(r.stale_ms.is_some(), "run {}: never stale", r.run);
        if r.frozen_busy {
            assert!(
                r.thread_napping,
                "run {}: frozen busy, the thread runs",
                r.run
            );
        }
    }
    print!(
        "{}",
        elfen_isobench::failsafe::render(&elfen_isobench::failsafe::summary(&p, &reps))
    );
}
