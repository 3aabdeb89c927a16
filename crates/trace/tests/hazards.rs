//! Hazards found, not assumed: the Lucene server run with each of the
//! thesis's four hazards switched on (`serve --hazards …`), and with none,
//! traced by `elfen trace` (the library the command runs) while an
//! open-loop client sends term queries; the study must name the hazard
//! that was switched on as the cause of the slow requests, and no hazard
//! when all are off. Every case also writes its Perfetto trace and checks
//! its structure.
//!
//! The index is the 40-document one `crates/bench/tests/lucene.rs` builds
//! (terms of the real tasks file), built the same way in a temporary
//! directory. Needs root (BPF), 2 CPUs, a JDK ≥ 22 and the built jar
//! (Maven, as `scripts/test.sh` builds it before the Rust tests);
//! without one of them it records a skip (`elfen_cmd::skip`). A hazard this machine
//! cannot produce (huge pages off) is skipped with its reason; every case
//! prints its figures. The request's path is shielded from the machine's
//! other tenants (the client real-time on the batch lane, the server in an
//! autogroup of its own at nice −10 with its dispatchers at nice −10 in
//! it, none of the JVM real-time), so what is left to find is the
//! service's own doing. A case runs once — unless its check fails and the
//! study names other tenants of the machine (preempting the request's path,
//! or holding its dispatch off a CPU) as the top cause of at least half of
//! its slow requests: then once more, said, and the second must pass.
//!
//! `cargo test -p elfen-trace --test hazards [-- NAME]` (`harness = false`).

use elfen_cmd::skip::{Feature, Need};
use elfen_load::demand::RequestsKind;
use elfen_load::requests::RequestSet;
use elfen_load::{lucene, tasks};
use elfen_shm::{Page, PageSpec};
use elfen_trace::lcline::LcLineTap;
use elfen_trace::load::{LoadPlan, drive};
use elfen_trace::record::{EndReason, Signal};
use elfen_trace::recorder::{Options, Recorder};
use elfen_trace::report::{CauseKind, StudyParams, TraceReport};
use elfen_trace::target::{Target, TargetSpec};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// One case: the hazards switched on, the load, and what must be found.
struct Case {
    name: &'static str,
    hazards: &'static str,
    /// The client idles this long after the server is ready (the deep idle
    /// before the measured requests).
    idle: Duration,
    rps: f64,
    duration: Duration,
    /// The requests studied: those above this percentile.
    above_pct: f64,
    /// The cause the study must find; None: no hazard at all.
    expect: Option<CauseKind>,
}

const CASES: [Case; 5] = [
    Case {
        name: "none",
        hazards: "none",
        idle: Duration::from_millis(300),
        rps: 300.0,
        duration: Duration::from_secs(4),
        above_pct: 99.0,
        expect: None,
    },
    Case {
        name: "nagle",
        hazards: "nagle",
        idle: Duration::from_millis(300),
        // a slow client: at 40 rps a fifth of the answers wait for the
        // client's delayed-ACK timer rather than its next request, so the
        // tail above p90 is theirs
        rps: 40.0,
        duration: Duration::from_secs(8),
        above_pct: 90.0,
        expect: Some(CauseKind::TcpHeld),
    },
    Case {
        name: "untouched_heap",
        hazards: "untouched-heap",
        idle: Duration::from_secs(2),
        rps: 300.0,
        duration: Duration::from_secs(4),
        above_pct: 99.0,
        expect: Some(CauseKind::PageFaults),
    },
    Case {
        name: "cold_start",
        hazards: "cold-start",
        idle: Duration::from_millis(0),
        rps: 300.0,
        duration: Duration::from_secs(4),
        above_pct: 99.0,
        expect: Some(CauseKind::JvmWarmup),
    },
    Case {
        name: "small_heap",
        hazards: "small-heap",
        idle: Duration::from_millis(300),
        rps: 300.0,
        duration: Duration::from_secs(4),
        above_pct: 99.0,
        expect: Some(CauseKind::JvmPause),
    },
];

fn main() {
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    if let Err((need, why)) = ready() {
        elfen_cmd::skip::skip_test("hazards", need, why);
        return;
    }
    let _lanes = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let mut ran = 0;
    for case in &CASES {
        if only.as_deref().is_some_and(|o| !case.name.contains(o)) {
            continue;
        }
        if let Some(why) = cannot(case) {
            let test = format!("hazard_{}", case.name);
            let need = Need::Hardware(Feature::TransparentHugePages);
            elfen_cmd::skip::skip_test(&test, need, why);
            println!("test {test} ... skipped");
            continue;
        }
        if let Err(noise) = run_case(case, dir.path()) {
            // The study itself named other tenants of the machine as what
            // made most of the slow requests slow: the machine's noise, not
            // the service's, and not this test's to judge. Once more, said.
            // TODO(ran twice): record this in `elfen_cmd::skip`'s "ran
            // twice" record once it exists, so the test command counts it.
            println!("    hazard_{}: {noise}; once more", case.name);
            if let Err(again) = run_case(case, dir.path()) {
                panic!(
                    "hazard_{}: swamped by the machine's other tenants twice: {noise}; then {again}",
                    case.name
                );
            }
        }
        ran += 1;
        println!("test hazard_{} ... ok", case.name);
    }
    println!(
        "test result: ok. {ran} passed; finished in {:.2}s",
        t0.elapsed().as_secs_f64()
    );
}

/// Why these tests cannot run here, if they cannot.
fn ready() -> Result<(), (Need, String)> {
    elfen_bpf::check_privileges().map_err(|e| (Need::Bpf, e.to_string()))?;
    elfen_bpf::check_btf().map_err(|e| (Need::Bpf, e.to_string()))?;
    let cpus = elfen_topo::current_affinity().map_err(|e| (Need::Cpus(2), e.to_string()))?;
    if cpus.len() < 2 {
        return Err((
            Need::Cpus(2),
            format!("a request lane and a batch lane; this process has {cpus:?}"),
        ));
    }
    let Some(root) = lucene::repo_root() else {
        return Err((
            Need::Input(lucene::LAUNCHER.into()),
            format!("{} not found", lucene::LAUNCHER),
        ));
    };
    let ok = std::process::Command::new(root.join("scripts/java-env.sh"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let why = "no JDK >= 22 (scripts/java-env.sh found none)";
        return Err((Need::Program("java".into()), why.into()));
    }
    let jar = lucene::jar_of(&lucene::launcher());
    if !jar.is_file() {
        let why = "not built (the Java step of scripts/test.sh, or scripts/lucene.sh, builds it)";
        return Err((Need::Input(jar), why.into()));
    }
    Ok(())
}

/// Why a case cannot be produced on this machine.
fn cannot(case: &Case) -> Option<String> {
    if case.expect == Some(CauseKind::PageFaults) {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if thp.is_empty() || thp.contains("[never]") {
            return Some(format!(
                "transparent huge pages are off here ({}): an untouched heap then faults 4 KiB pages of a few µs each, \
                 too small to stand out",
                if thp.is_empty() {
                    "no /sys/kernel/mm/transparent_hugepage"
                } else {
                    thp.trim()
                }
            ));
        }
    }
    None
}

/// The 40-document corpus and its index (as `tests/lucene.rs` in
/// elfen-bench builds them), the tasks file; the environment points the
/// Java side at them.
fn setup(dir: &Path) {
    let corpus = dir.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
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
    std::fs::copy(&real, data.join(tasks::TASKS_FILE)).unwrap();
    // SAFETY: set before this test starts any thread; children inherit them.
    unsafe {
        std::env::set_var("ELFEN_CORPUS_DIR", &corpus);
        std::env::set_var("ELFEN_LUCENE_COPIES", "1");
        std::env::set_var("ELFEN_DATA_DIR", &data);
        std::env::remove_var("ELFEN_INDEX_DIR");
        std::env::remove_var("ELFEN_LUCENE_HAZARDS");
        std::env::remove_var("ELFEN_LUCENE_HEAP");
        std::env::remove_var("ELFEN_LUCENE_YOUNG");
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
}

/// The server process; killed (SIGTERM, then SIGKILL) and reaped on drop.
struct Server {
    child: std::process::Child,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    fn start(hazards: &str, port: u16, page: &Path) -> Server {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new(lucene::launcher());
        cmd.args([
            "serve",
            "--port",
            &port.to_string(),
            "--cpu",
            "0",
            "--side-cpus",
            "1",
            "--lc-signal",
            "api",
            "--page",
            &page.display().to_string(),
            "--lane",
            "0",
            "--copies",
            "1",
            // the acceptor and dispatchers at nice -10, as the harness
            // runs them, in the server's autogroup at nice -10 (below):
            // ahead of other tenants' normal work on their CPU (at nice 0
            // a dispatcher waited 126 ms for a CPU while another tenant's
            // compiler ran, and that, not the hazard, made the slow
            // requests), yet not real-time: a real-time
            // dispatcher spinning for a monitor kept the JVM's VM
            // thread, normal on the same CPU, from ending a safepoint
            // until real-time throttling stopped it (~0.94 s stalls,
            // seen in these traces)
            "--side-nice",
            "-10",
            "--hazards",
            hazards,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        // A session of its own, so an autogroup of its own
        // (/proc/sys/kernel/sched_autogroup_enabled): a thread's nice ranks
        // it only within its autogroup, and every other tenant's session
        // (a build, a VM) weighs as much as the whole JVM. At autogroup nice
        // -10 the JVM — its worker, dispatchers, JIT and VM thread — is
        // ahead of other tenants' normal work (9.3 : 1 by weight), still in
        // the fair class: the kernel's own threads (ksoftirqd delivering
        // the responses, kworkers) get the CPU within a few slices. The
        // autogroup ends with the server's session.
        // SAFETY: setsid is async-signal-safe; nothing else runs in the
        // child before exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let autogroup = format!("/proc/{}/autogroup", child.id());
        if std::path::Path::new(&autogroup).exists() {
            std::fs::write(&autogroup, "-10").expect("the server's autogroup at nice -10 (root)");
        }
        let err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                s.push_str(&l);
                s.push('\n');
            }
            s
        });
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let t = Instant::now();
        let mut srv = Server {
            child,
            stderr: Some(stderr),
        };
        loop {
            line.clear();
            let n = out.read_line(&mut line).unwrap_or(0);
            if n == 0 {
                let e = srv.stop();
                panic!("the server exited before it was ready; stderr:\n{e}");
            }
            if line.starts_with("serve: ready") {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(180), "no ready line");
        }
        println!("  {}", line.trim());
        srv
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it; its stderr.
    fn stop(&mut self) -> String {
        elfen_cmd::proc::signal_pid(self.child.id(), libc::SIGTERM);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.stderr.is_some() {
            self.stop();
        }
    }
}

/// Waits (up to 60 s) until the JVM's JIT compiler threads ran less than
/// 5 ms in the last 500 ms.
fn jit_quiet(pid: u32) {
    let jit_ns = || elfen_trace::pause::jit_cpu_ns(pid);
    let t = Instant::now();
    let mut last = jit_ns();
    while t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(500));
        let now = jit_ns();
        if now - last < 5_000_000 {
            println!("    JIT quiet after {:.1} s", t.elapsed().as_secs_f64());
            return;
        }
        last = now;
    }
    println!("    JIT still busy after 60 s (a loaded machine): tracing anyway");
}

/// Drives the case's load in rounds of 2 s until the JIT's compiler
/// threads ran less than 0.25 % of each of two rounds in a row (at most
/// 45 s; said either way): one quiet round can fall between two bursts of
/// tier-up compilations that the traced load then sets off again.
fn warm_under_load(case: &Case, port: u16, pid: u32) {
    let t = Instant::now();
    let mut quiet_rounds = 0;
    for round in 0u64.. {
        let before = elfen_trace::pause::jit_cpu_ns(pid);
        let plan = LoadPlan {
            rps: case.rps,
            duration: Duration::from_secs(2),
            drain: Duration::from_secs(1),
            set: term_set(),
            seed: 100 + round,
            id_base: 2_000_000 + round * 100_000,
            cpus: vec![1],
            sched: elfen_cmd::proc::SchedClass::Fifo(10),
        };
        let stop = AtomicBool::new(false);
        drive(([127, 0, 0, 1], port).into(), &plan, &stop).expect("the warm-up load");
        let jit_ms = elfen_trace::pause::jit_cpu_ns(pid).saturating_sub(before) as f64 / 1e6;
        quiet_rounds = if jit_ms < 5.0 { quiet_rounds + 1 } else { 0 };
        if quiet_rounds >= 2 {
            println!(
                "    warm for this load after {:.1} s (JIT {jit_ms:.1} ms in the last 2 s round)",
                t.elapsed().as_secs_f64()
            );
            return;
        }
        if t.elapsed() > Duration::from_secs(45) {
            println!(
                "    JIT still compiling under the load after 45 s ({jit_ms:.1} ms in 2 s): tracing anyway"
            );
            return;
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs one case and checks what the study found. A failed check
/// panics — unless other tenants of the machine made most of the slow
/// requests slow (as the study names them: [`swamped`]), then it returns
/// that, in words.
fn run_case(case: &Case, dir: &Path) -> Result<(), String> {
    let page_path: PathBuf = dir.join(format!("page-{}", case.name));
    let mut spec = PageSpec::for_pairs(&[(0, vec![1])], elfen_shm::layout::policy::UNMANAGED, 0);
    spec.clock = Some(elfen_shm::Clock::MONOTONIC);
    let page = Page::create(&page_path, &spec).unwrap();
    let port = free_port();
    let mut server = Server::start(case.hazards, port, &page_path);
    let target_pid = server.pid();
    let target = Target::resolve(TargetSpec::Pid(target_pid)).unwrap();
    // the LC thread attaches when the worker starts: wait for it
    let t = Instant::now();
    let tap = loop {
        match LcLineTap::open(&page_path, Some(0), &target.tgids) {
            Ok(tap) if tap.lc_tid() != 0 => break tap,
            _ if t.elapsed() > Duration::from_secs(30) => panic!("no LC thread on the page"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    // The worker stays in the fair class, in the server's autogroup at
    // nice -10 (`Server::start`): other tenants of the machine (builds,
    // VMs) weigh a ninth of it. Not real-time: a real-time worker busy for
    // long (a cold JVM's backlog) kept ksoftirqd off its CPU, and the
    // responses it wrote waited 146 ms there before they were delivered.
    // SAFETY: a plain query of a thread's policy.
    let policy = unsafe { libc::sched_getscheduler(tap.lc_tid() as libc::pid_t) };
    assert_eq!(policy, libc::SCHED_OTHER, "the worker's policy");
    if case.expect.is_none() {
        // no hazard at all: a JVM warm for this very load (the server's own
        // warm-up leaves compilations that only this load's requests set
        // off; traced, they are a cold JVM, rightly named)
        warm_under_load(case, port, server.pid());
    }
    if case.expect != Some(CauseKind::JvmWarmup) {
        // a warm JVM: its JIT has finished the warm-up's compilations
        jit_quiet(server.pid());
    }
    // the LC line read every 50 µs at real-time priority (below the
    // dispatchers'): a busy batch lane (the JIT of a cold JVM) cannot starve
    // it, so every request longer than that is seen on the line
    let opts = Options {
        poll_us: 50,
        poller_sched: elfen_cmd::proc::SchedClass::Fifo(5),
        ..Options::default()
    };
    let rec = Recorder::start(target, Some(tap), &opts, None).unwrap();
    for s in rec.signals() {
        assert!(
            s.skipped.is_none(),
            "signal {} not recorded here: {:?}",
            s.signal.name(),
            s.skipped
        );
    }
    std::thread::sleep(case.idle);
    let set = term_set();
    let plan = LoadPlan {
        rps: case.rps,
        duration: case.duration,
        drain: Duration::from_secs(3),
        set,
        seed: 7,
        id_base: 1_000_000,
        cpus: vec![1],
        sched: elfen_cmd::proc::SchedClass::Fifo(10),
    };
    let stop = AtomicBool::new(false);
    let load = drive(([127, 0, 0, 1], port).into(), &plan, &stop).unwrap();
    let record = rec
        .finish(EndReason::Duration, format!("hazard {}", case.name))
        .unwrap();
    let stderr = server.stop();
    drop(page);
    let _ = Page::remove(&page_path);
    let params = StudyParams {
        above_pct: case.above_pct,
        ..StudyParams::default()
    };
    let report = elfen_trace::study::study(&record, &load.spans, params);
    if let Some(keep) = std::env::var_os("ELFEN_TRACE_KEEP") {
        // for a look afterwards: the record, the spans, the report
        let d = PathBuf::from(keep).join(case.name);
        record.save(&d.join("record.json")).unwrap();
        elfen_trace::spans::write(&d.join("spans.jsonl"), &load.spans).unwrap();
        report.save(&d.join("report.json")).unwrap();
        println!("    kept in {}", d.display());
    }
    print!(
        "{}",
        elfen_trace::render::text::text(&report, 8)
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    // the trace opens: structure checked
    let events = elfen_trace::render::perfetto::events(&record, &load.spans, &report);
    let p = dir.join(format!("trace-{}.json", case.name));
    elfen_trace::render::perfetto::write(&p, &events).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let sum = elfen_trace::render::perfetto::check(&json)
        .unwrap_or_else(|e| panic!("the Perfetto trace of {}: {e}", case.name));
    println!(
        "    perfetto: {} slices, {} flows, {} async, {} instants, {:.1} MB",
        sum.slices,
        sum.flows,
        sum.asyncs,
        sum.instants,
        std::fs::metadata(&p).unwrap().len() as f64 / 1e6
    );
    assert!(sum.slices > 100 && sum.flows > 0, "{sum:?}");
    assert_eq!(record.counts.lost, 0, "kernel records lost");
    assert!(
        load.errors == 0,
        "{} requests failed; server stderr:\n{stderr}",
        load.errors
    );
    // every request the client sent is studied; the LC line showed most
    assert_eq!(report.requests as usize, load.spans.len());
    println!(
        "    the LC line showed {} of the {} requests ({:?})",
        record.spans.len(),
        load.spans.len(),
        record.poller
    );
    let own = [std::process::id(), target_pid];
    let foreign = swamped(&report, &own);
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check(case, &report, &record)
    }));
    match checked {
        Ok(()) => Ok(()),
        Err(_) if 2 * foreign.len() >= report.slow.len() && !foreign.is_empty() => Err(format!(
            "{} of the {} slow requests were made slow by other tenants ({})",
            foreign.len(),
            report.slow.len(),
            foreign.join(", ")
        )),
        Err(e) => std::panic::resume_unwind(e),
    }
}

/// The slow requests another tenant of the machine made slow, each as
/// "who (what)": their top cause is a preemption or a dispatch wait (time
/// the request's path spent off a CPU it wanted) and a thread it names
/// belongs to none of `own` (the service, this test). Work beside the
/// request (a batch co-run) does not count: it need not have delayed it.
fn swamped(r: &TraceReport, own: &[u32]) -> Vec<String> {
    let foreign_kinds = [CauseKind::Preemption, CauseKind::Dispatch];
    r.slow
        .iter()
        .filter_map(|q| {
            let top = q.top.filter(|k| foreign_kinds.contains(k))?;
            let c = q.causes.iter().find(|c| c.kind == top)?;
            let who = c.who.iter().find(|w| w.tid != 0 && !own.contains(&w.pid))?;
            Some(format!("{} ({top:?})", who.comm))
        })
        .collect()
}

fn check(case: &Case, r: &TraceReport, rec: &elfen_trace::record::TraceRecord) {
    let n = r.slow.len();
    assert!(n >= 3, "{n} slow requests");
    let hz = |k: CauseKind| r.count(k).hazard_top;
    let summary = CauseKind::ALL
        .into_iter()
        .filter(|k| k.is_hazard())
        .map(|k| format!("{k:?} {}", hz(k)))
        .collect::<Vec<_>>()
        .join(", ");
    println!("    {n} slow requests; top hazard: {summary}");
    match case.expect {
        None => {
            let any: u64 = CauseKind::ALL
                .into_iter()
                .filter(|k| k.is_hazard())
                .map(hz)
                .sum();
            assert!(
                any * 5 <= n as u64,
                "all hazards off, yet a hazard is the top hazard of {any} of the {n} slow requests ({summary})"
            );
        }
        Some(k) => {
            // other tenants of a busy machine make slow requests of their
            // own (their causes are named too: batch co-runs, the client's
            // lateness): the hazard must be the top hazard of a quarter of
            // the slow requests (at least 3) and of more than any other
            let need = (n as u64).div_ceil(4).max(3);
            assert!(
                hz(k) >= need,
                "{k:?} is the top hazard of {} of the {n} slow requests, fewer than {need} ({summary})",
                hz(k)
            );
            for other in CauseKind::ALL
                .into_iter()
                .filter(|o| o.is_hazard() && *o != k)
            {
                assert!(
                    hz(other) < hz(k),
                    "{other:?} named as often as {k:?} ({summary})"
                );
            }
            let _ = rec.recorded(Signal::Sched);
        }
    }
}

fn term_set() -> Arc<RequestSet> {
    Arc::new(
        elfen_load::requests::build(RequestsKind::TermQueries, &Default::default(), None, 7)
            .unwrap(),
    )
}
