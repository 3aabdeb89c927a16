//! `elfen advise` end to end, as an operator runs it: against the built-in
//! service driven by `elfen load` (live: root, BPF, two CPUs), and on bad
//! input (an LC that is not there, one that is not under load). The
//! plumbing is checked — every probe and knob has a row or a stated
//! reason, a recommendation is given, nothing is left running or changed
//! — never a speed.

use elfen_advise::record::{AdviseResult, Knob, Outcome, Probe};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const ELFEN: &str = env!("CARGO_BIN_EXE_elfen");

/// A child process, killed by pid and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGINT first: `elfen load` stops the service it started
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGINT) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What may be left behind by advise and the daemons it runs: signal
/// pages, batch helpers, daemon configurations in use, and the groups of
/// the daemons `pids` in any cgroup hierarchy.
fn traces_of(pids: &[u32]) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("elfen-advise-") {
            out.push(format!("/dev/shm/{n}"));
        }
    }
    for c in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        for g in std::fs::read_dir(c.path()).into_iter().flatten().flatten() {
            let n = g.file_name().to_string_lossy().into_owned();
            if pids.iter().any(|p| n == format!("elfen-daemon-{p}")) {
                out.push(g.path().display().to_string());
            }
        }
    }
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains("advise batch-helper") || cmd.contains("elfen-advise-") {
            out.push(format!(
                "process {}: {cmd}",
                p.file_name().to_string_lossy()
            ));
        }
    }
    out
}

fn traces() -> Vec<String> {
    traces_of(&[])
}

/// Traces (of the daemons `pids` too) that were not there `before`.
fn new_traces(before: &[String], pids: &[u32]) -> Vec<String> {
    traces_of(pids)
        .into_iter()
        .filter(|t| !before.contains(t))
        .collect()
}

fn run(args: &[&str]) -> Output {
    Command::new(ELFEN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running elfen")
}

fn live_ok() -> bool {
    use elfen_cmd::skip::{Need, skip};
    if !Need::Root.present() {
        skip(Need::Root, "the daemon's knobs, BPF, SCHED_FIFO");
        return false;
    }
    if !Need::Bpf.present() {
        skip(Need::Bpf, "the kernel signal of the LC");
        return false;
    }
    if !Need::Cpus(2).present() {
        skip(Need::Cpus(2), "a request lane and a batch lane");
        return false;
    }
    true
}

/// Waits for `elfen load` to write the LC's pid.
fn wait_pid(path: &Path, load: &mut Proc) -> u32 {
    let t0 = Instant::now();
    loop {
        if let Some(p) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return p;
        }
        if let Ok(Some(s)) = load.0.try_wait() {
            panic!("elfen load exited before it started the service: {s}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "elfen load did not start the service within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn advise_profiles_a_loaded_service_and_leaves_nothing_behind() {
    if !live_ok() {
        return;
    }
    let _lock = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let before = traces();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("lc.pid");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut load = Proc(
        Command::new(ELFEN)
            .args([
                "load",
                "--lc",
                "builtin",
                "--rps",
                "600",
                "--duration",
                "120",
            ])
            .args(["--port", &port.to_string()])
            .arg("--pid-file")
            .arg(&pid_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lc = wait_pid(&pid_file, &mut load);
    let json: PathBuf = dir.path().join("advise.json");
    let t0 = Instant::now();
    let out = run(&[
        "advise",
        "--pid",
        &lc.to_string(),
        "--latency-probe",
        &format!("wire@127.0.0.1:{port}"),
        "--window-s",
        "0.5",
        "--warmup-s",
        "0.2",
        "--json",
        json.to_str().unwrap(),
    ]);
    let took = t0.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "elfen advise: {stdout}\n{stderr}");
    println!("{stdout}\n(took {:.1} s)", took.as_secs_f64());
    let r: AdviseResult = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r.schema, elfen_advise::record::SCHEMA);
    assert!(!r.interrupted);
    assert_eq!(r.lc.as_ref().map(|l| l.pids.clone()), Some(vec![lc]));
    assert_eq!(r.solo.len(), 2, "alone before and after the probes");
    assert!(
        r.reference.as_ref().unwrap().p99_us.is_some(),
        "latency probed"
    );
    // every probe and every knob: measured, stopped, or a stated reason
    for p in Probe::ALL {
        let row = r.probes.iter().find(|x| x.probe == p);
        let row = row.unwrap_or_else(|| panic!("no row for probe {}", p.name()));
        match &row.outcome {
            Outcome::Measured | Outcome::Stopped { .. } => {
                let w = row.window.as_ref().expect("a window");
                assert!(w.wall_ns > 0 && row.contention.is_some(), "{}", p.name());
                assert!(w.batch.is_some(), "{}: its co-runner's work", p.name());
            }
            Outcome::NotRun { reason } => {
                panic!("probe {} did not run: {reason}", p.name());
            }
        }
        assert!(stdout.contains(p.name()), "{} in the table", p.name());
    }
    for k in Knob::ALL {
        let row = r.knobs.iter().find(|x| x.knob == k);
        let row = row.unwrap_or_else(|| panic!("no row for knob {}", k.name()));
        match &row.outcome {
            Outcome::Measured | Outcome::Stopped { .. } => {
                let w = row.window.as_ref().expect("a window");
                assert!(
                    w.daemon.as_ref().is_some_and(|d| d.cpu_ns > 0),
                    "{}: daemon CPU",
                    k.name()
                );
                assert!(row.config.as_ref().is_some_and(|c| c.contains("[[batch]]")));
                assert!(
                    row.daemon_log
                        .iter()
                        .any(|l| l.starts_with("exit: stopped by SIGTERM")),
                    "{}: {:?}",
                    k.name(),
                    row.daemon_log
                );
            }
            Outcome::NotRun { reason } => assert!(!reason.is_empty(), "{}", k.name()),
        }
        assert!(stdout.contains(k.name()), "{} in the table", k.name());
    }
    let rec = r.recommendation.as_ref().expect("a recommendation");
    assert!(!rec.reason.is_empty() && !rec.predicted.is_empty());
    assert!(stdout.contains("recommended: ") && stdout.contains("total time"));
    assert!(
        r.notes.iter().all(|n| !n.contains("left")),
        "a daemon left something: {:?}",
        r.notes
    );
    let daemons: Vec<u32> = r.knobs.iter().filter_map(|k| k.daemon_pid).collect();
    assert!(!daemons.is_empty(), "some knob ran a daemon");
    assert_eq!(
        new_traces(&before, &daemons),
        Vec::<String>::new(),
        "left behind"
    );
    drop(load);
}

#[test]
fn advise_refuses_an_lc_that_is_not_there_or_not_loaded() {
    if !elfen_cmd::skip::Need::Cpus(2).present() {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Cpus(2),
            "a request lane and a batch lane",
        );
        return;
    }
    let _lock = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let before = traces();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("advise.json");
    // a pid that does not exist (above any pid_max)
    let out = run(&[
        "advise",
        "--pid",
        "4194305",
        "--json",
        json.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not running") && err.contains("4194305"),
        "{err}"
    );
    let out = run(&["advise", "--comm", "no-such-lc-here"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no-such-lc-here"),
        "{err}"
    );
    // an LC that sleeps: not under load
    let idle = Proc(
        Command::new(ELFEN)
            .args(["daemon", "lc-helper", "--cpu", "0", "--busy-us", "0"])
            .args(["--idle-min-us", "50000", "--idle-max-us", "50000"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(200));
    let out = run(&[
        "advise",
        "--pid",
        &idle.0.id().to_string(),
        "--window-s",
        "0.5",
        "--json",
        json.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not under load") && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(!json.exists(), "no result for a run that did not start");
    drop(idle);
    assert_eq!(
        new_traces(&before, &[]),
        Vec::<String>::new(),
        "left behind"
    );
}
