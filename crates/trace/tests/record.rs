//! The recorder against real child processes (this test binary re-run in a
//! child role), as root: every kernel signal shows what the child did.
//!
//! - `signals_record_what_a_child_does`: a child whose two threads wake
//!   each other, which touches fresh memory (page faults, huge pages where
//!   THP is on), and which answers on a TCP socket without `TCP_NODELAY`
//!   in two writes (Nagle holds the second until the client's delayed ACK):
//!   switches, wake-ups with chains, faults, HELD / RELEASED / DELACK.
//! - `a_target_that_exits_ends_the_trace_and_is_written`.
//! - `a_missing_hook_skips_its_signal_and_the_rest_records`.
//! - `a_pid_that_does_not_exist_is_a_clear_error`.
//!
//! Without root (or BPF) the run is a recorded skip (`elfen_cmd::skip`).

use elfen_trace::record::{EndReason, Event, Fault, Signal, TcpKind};
use elfen_trace::recorder::{self, Options};
use elfen_trace::target::{Target, TargetSpec};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const CHILD: &str = "ELFEN_TRACE_TEST_CHILD";

/// The child role: `pingpong` threads, fresh memory, a Nagle server.
fn child_main(role: &str) {
    match role {
        "busy" => {
            // waits for the tracer, then: two threads wake each other 2000
            // times, fresh memory, then TCP
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).unwrap();
            // a relay of three threads: main wakes "relay-a", which wakes
            // "relay-b", which wakes main
            let (to_a, at_a) = std::sync::mpsc::channel::<u32>();
            let (to_b, at_b) = std::sync::mpsc::channel::<u32>();
            let (to_main, at_main) = std::sync::mpsc::channel::<u32>();
            let a = std::thread::Builder::new()
                .name("relay-a".into())
                .spawn(move || {
                    while let Ok(v) = at_a.recv() {
                        to_b.send(v).unwrap();
                    }
                })
                .unwrap();
            let b = std::thread::Builder::new()
                .name("relay-b".into())
                .spawn(move || {
                    while let Ok(v) = at_b.recv() {
                        if to_main.send(v).is_err() {
                            break;
                        }
                    }
                })
                .unwrap();
            for i in 0..2000 {
                to_a.send(i).unwrap();
                at_main.recv().unwrap();
            }
            drop(to_a);
            a.join().unwrap();
            b.join().unwrap();
            // 32 MiB of fresh anonymous memory, touched page by page
            // (calloc'd: fresh zero pages from mmap, faulted in by the writes)
            let mut v: Vec<u8> = vec![0; 32 << 20];
            for i in (0..v.len()).step_by(4096) {
                v[i] = 1;
            }
            std::hint::black_box(&v);
            // and 32 MiB asking for transparent huge pages
            let len = 34 << 20;
            // SAFETY: a fresh private anonymous mapping, used only here
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            let start = (p as usize).next_multiple_of(2 << 20);
            // SAFETY: [start, start + 32 MiB) lies inside the mapping
            unsafe {
                libc::madvise(start as *mut libc::c_void, 32 << 20, libc::MADV_HUGEPAGE);
                for off in (0..(32usize << 20)).step_by(4096) {
                    std::ptr::write_volatile((start + off) as *mut u8, 1);
                }
            }
            // a server answering in two writes, Nagle on
            let port: u16 = std::env::var("PORT").unwrap().parse().unwrap();
            let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
            println!("listening");
            let (mut s, _) = l.accept().unwrap();
            s.set_nodelay(false).unwrap();
            let mut req = [0u8; 8];
            while s.read_exact(&mut req).is_ok() {
                s.write_all(&[1u8; 16]).unwrap();
                s.write_all(&[2u8; 16]).unwrap();
            }
        }
        "vm-thread" => {
            // a thread named like HotSpot's VM thread runs 5 ms every 50 ms
            // (a stop-the-world pause, as the scheduler sees it)
            std::thread::Builder::new()
                .name("VM Thread".into())
                .spawn(|| {
                    for _ in 0..200 {
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_millis(5) {
                            std::hint::spin_loop();
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                })
                .unwrap()
                .join()
                .unwrap();
        }
        "naps" => {
            // sleeps 1 ms at a time for 5 s: switches and wake-ups
            for _ in 0..5000 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        "exit-soon" => {
            // exits once told (or when the tracer's end of stdin closes)
            let mut go = String::new();
            let _ = std::io::stdin().read_line(&mut go);
            std::thread::sleep(Duration::from_millis(50));
        }
        _ => panic!("unknown role {role}"),
    }
}

fn main() {
    if let Ok(role) = std::env::var(CHILD) {
        child_main(&role);
        return;
    }
    if let Err(why) = bpf_ready() {
        elfen_cmd::skip::skip_test("record", elfen_cmd::skip::Need::Bpf, why);
        return;
    }
    let t0 = Instant::now();
    let tests: [(&str, fn()); 7] = [
        (
            "a_pause_watch_sees_the_vm_thread_run",
            a_pause_watch_sees_the_vm_thread_run,
        ),
        ("a_cgroup_names_its_processes", a_cgroup_names_its_processes),
        (
            "the_command_writes_the_record_the_trace_and_the_report",
            the_command_writes_the_record_the_trace_and_the_report,
        ),
        (
            "signals_record_what_a_child_does",
            signals_record_what_a_child_does,
        ),
        (
            "a_target_that_exits_ends_the_trace_and_is_written",
            a_target_that_exits_ends_the_trace_and_is_written,
        ),
        (
            "a_missing_hook_skips_its_signal_and_the_rest_records",
            a_missing_hook_skips_its_signal_and_the_rest_records,
        ),
        (
            "a_pid_that_does_not_exist_is_a_clear_error",
            a_pid_that_does_not_exist_is_a_clear_error,
        ),
    ];
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let mut ran = 0;
    for (name, f) in tests {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        f();
        ran += 1;
        println!("test {name} ... ok");
    }
    println!(
        "test result: ok. {ran} passed; finished in {:.2}s",
        t0.elapsed().as_secs_f64()
    );
}

fn bpf_ready() -> Result<(), String> {
    elfen_bpf::check_privileges().map_err(|e| e.to_string())?;
    elfen_bpf::check_btf().map_err(|e| e.to_string())?;
    Ok(())
}

/// A child of this binary in `role`, stdout piped.
struct Child(std::process::Child);

impl Child {
    fn spawn(role: &str, port: u16) -> Child {
        Child(
            std::process::Command::new(std::env::current_exe().unwrap())
                .env(CHILD, role)
                .env("PORT", port.to_string())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn signals_record_what_a_child_does() {
    let port = free_port();
    let child = Child::spawn("busy", port);
    let target = Target::resolve(TargetSpec::Pid(child.pid())).unwrap();
    let opts = Options::default();
    let mut rec = recorder::Recorder::start(target, None, &opts, None).unwrap();
    for s in rec.signals() {
        println!(
            "  signal {:<12} {}",
            s.signal.name(),
            s.skipped.as_deref().unwrap_or("recorded")
        );
    }
    // wait for the child's server, then talk to it as a client that sends
    // its next request only after the whole answer
    let mut line = String::new();
    let mut child = child;
    child.0.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "listening");
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_nodelay(true).unwrap();
    let mut answer = [0u8; 32];
    let mut slow = 0;
    for i in 0..40u64 {
        let t = Instant::now();
        c.write_all(&i.to_le_bytes()).unwrap();
        c.read_exact(&mut answer).unwrap();
        if t.elapsed() > Duration::from_millis(20) {
            slow += 1;
        }
    }
    drop(c);
    rec.refresh();
    let r = rec.finish(EndReason::Duration, "test".into()).unwrap();
    println!(
        "  {} events: {:?}; {slow} of 40 round trips took > 20 ms",
        r.events.len(),
        r.counts
    );
    let pid = child.pid();
    let mine = |tid: u32| r.threads.get(&tid).is_some_and(|t| t.tgid == pid);
    // switches of the child's threads, both directions
    let switches = r
        .events
        .iter()
        .filter(|e| matches!(e, Event::Switch(s) if mine(s.prev) || mine(s.next)))
        .count();
    assert!(switches > 1000, "{switches} switches of the child");
    // its threads wake each other, and each wake-up of relay-b by relay-a
    // says who woke relay-a: the main thread (the chain)
    let named = |n: &str| {
        r.threads
            .iter()
            .find(|(_, t)| t.tgid == pid && t.comm == n)
            .map(|(&tid, _)| tid)
            .unwrap_or_else(|| panic!("no thread {n}"))
    };
    let (a, b) = (named("relay-a"), named("relay-b"));
    let wakes: Vec<_> = r
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Wakeup(w) if w.wakee == b && w.waker == a => Some(w),
            _ => None,
        })
        .collect();
    assert!(
        wakes.len() > 500,
        "{} wake-ups of relay-b by relay-a",
        wakes.len()
    );
    let chained = wakes
        .iter()
        .filter(|w| w.chain.first() == Some(&pid))
        .count();
    println!(
        "  {} wake-ups of relay-b by relay-a, {chained} with main as relay-a's waker",
        wakes.len()
    );
    assert!(
        chained * 2 > wakes.len(),
        "{chained} of {} name main",
        wakes.len()
    );
    // page faults of the 64 MiB
    if r.recorded(Signal::Faults) {
        let faults: Vec<_> = r
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Fault(f) if mine(f.tid) => Some(f),
                _ => None,
            })
            .collect();
        let huge = faults.iter().filter(|f| f.huge).count();
        println!(
            "  {} faults ({huge} huge), {:.1} ms in them",
            faults.len(),
            faults.iter().map(|f| f.dur_ns).sum::<u64>() as f64 / 1e6
        );
        assert!(faults.len() >= 8192, "{} faults", faults.len());
        assert!(
            faults
                .iter()
                .all(|f| f.dur_ns > 0 && f.dur_ns < 1_000_000_000)
        );
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if r.recorded(Signal::HugeFaults) && !thp.contains("[never]") && !thp.is_empty() {
            // 16 huge pages (some may fall back to small ones)
            assert!(huge >= 4, "{huge} huge-page faults with THP {}", thp.trim());
            let mean = |v: Vec<u64>| v.iter().sum::<u64>() / v.len().max(1) as u64;
            let (h, s): (Vec<&Fault>, Vec<&Fault>) = faults.iter().partition(|f| f.huge);
            println!(
                "  mean fault: huge {} us, small {} us",
                mean(h.iter().map(|f| f.dur_ns).collect()) / 1000,
                mean(s.iter().map(|f| f.dur_ns).collect()) / 1000
            );
        } else {
            println!("  huge pages not checked: THP is {}", thp.trim());
        }
    }
    // Nagle: the second write of an answer waits for the first's ACK
    if r.recorded(Signal::TcpHeld) {
        let held: Vec<_> = r
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Tcp(t) if t.kind == TcpKind::Held && mine(t.tid) => Some(t),
                _ => None,
            })
            .collect();
        let released = r
            .events
            .iter()
            .filter(|e| matches!(e, Event::Tcp(t) if t.kind == TcpKind::Released))
            .count();
        let delack = r
            .events
            .iter()
            .filter(|e| matches!(e, Event::Tcp(t) if t.kind == TcpKind::DelayedAck))
            .count();
        println!(
            "  tcp: {} held ({} with Nagle on and data in flight), {released} released, {delack} delayed ACKs of the peer",
            held.len(),
            held.iter().filter(|t| t.nagle && t.in_flight > 0).count()
        );
        assert!(!held.is_empty(), "no send was held back");
        assert!(held.iter().all(|t| t.nagle && t.unsent == 16), "{held:?}");
        assert!(
            released >= held.len().saturating_sub(1),
            "{released} released"
        );
        if r.recorded(Signal::DelayedAck) {
            assert!(delack > 0, "the client never delayed an ACK");
        }
    }
    assert_eq!(r.counts.malformed, 0);
}

fn a_target_that_exits_ends_the_trace_and_is_written() {
    let mut child = Child::spawn("exit-soon", 0);
    let target = Target::resolve(TargetSpec::Pid(child.pid())).unwrap();
    let stop = AtomicBool::new(false);
    let rec = recorder::Recorder::start(target, None, &Options::default(), None).unwrap();
    let t = Instant::now();
    // tell it to exit, and reap it when it does so /proc/<pid> goes away
    child.0.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let pid = child.pid();
    let reaper = std::thread::spawn(move || {
        let mut c = child;
        let _ = c.0.wait();
    });
    let r = rec
        .run_until(Duration::from_secs(30), &stop, "test".into())
        .unwrap();
    reaper.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(
        matches!(r.end, EndReason::TargetExited { .. }),
        "{:?}",
        r.end
    );
    assert!(
        r.notes.iter().any(|n| n.contains("exited while traced")),
        "{:?}",
        r.notes
    );
    if r.recorded(Signal::Exit) {
        assert!(
            r.events
                .iter()
                .any(|e| matches!(e, Event::Exit(x) if x.tid == pid && x.leader)),
            "the exit was recorded"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("record.json");
    r.save(&p).unwrap();
    let back = elfen_trace::record::TraceRecord::load(&p).unwrap();
    assert_eq!(back, r);
}

fn a_missing_hook_skips_its_signal_and_the_rest_records() {
    let child = Child::spawn("exit-soon", 0);
    let target = Target::resolve(TargetSpec::Pid(child.pid())).unwrap();
    let opts = Options {
        pretend_missing: vec!["tcp_probe".into(), "page-faults".into()],
        ..Options::default()
    };
    let rec = recorder::Recorder::start(target, None, &opts, None).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let r = rec.finish(EndReason::Duration, "test".into()).unwrap();
    for (s, hook) in [
        (Signal::TcpHeld, "tcp_probe"),
        (Signal::DelayedAck, "tcp_held"),
        (Signal::Faults, "page-faults"),
        (Signal::HugeFaults, "faults"),
    ] {
        let st = r.signals.iter().find(|x| x.signal == s).unwrap();
        assert!(
            st.skipped.as_deref().is_some_and(|w| w.contains(hook)),
            "{st:?}"
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains(s.name()) && n.contains(hook)),
            "{:?}",
            r.notes
        );
    }
    assert!(r.recorded(Signal::Sched) && r.recorded(Signal::Wakeups));
    assert!(r.counts.switches > 0, "the rest still records");
    assert!(!r.events.iter().any(|e| matches!(e, Event::Fault(_))));
}

fn a_pid_that_does_not_exist_is_a_clear_error() {
    let e = Target::resolve(TargetSpec::Pid(4_000_000)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no process 4000000 (/proc/4000000 does not exist)"
    );
}

#[derive(clap::Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: elfen_trace::cli::Command,
}

fn elfen(args: &[&str]) -> anyhow::Result<()> {
    use clap::Parser;
    let mut v = vec!["elfen"];
    v.extend_from_slice(args);
    Cli::try_parse_from(v)?.cmd.run()
}

fn the_command_writes_the_record_the_trace_and_the_report() {
    let child = Child::spawn("naps", 0);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let report = dir.path().join("report.json");
    let pid = child.pid().to_string();
    elfen(&[
        "trace",
        "--pid",
        &pid,
        "--duration-s",
        "0.5",
        "--out",
        out.to_str().unwrap(),
        "--json",
        report.to_str().unwrap(),
    ])
    .unwrap();
    let rec = elfen_trace::record::TraceRecord::load(&out.join("record.json")).unwrap();
    assert!(rec.counts.switches > 100, "{:?}", rec.counts);
    assert_eq!(rec.end, EndReason::Duration);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    let sum = elfen_trace::render::perfetto::check(&json).unwrap();
    assert!(sum.slices > 100, "{sum:?}");
    let r: elfen_trace::report::TraceReport =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r.tgids, vec![child.pid()]);
    // studied again from the record alone
    let again = dir.path().join("again.json");
    let perfetto = dir.path().join("again-trace.json");
    elfen(&[
        "trace",
        "report",
        out.to_str().unwrap(),
        "--above-pct",
        "95",
        "--json",
        again.to_str().unwrap(),
        "--perfetto",
        perfetto.to_str().unwrap(),
    ])
    .unwrap();
    let r2: elfen_trace::report::TraceReport =
        serde_json::from_str(&std::fs::read_to_string(&again).unwrap()).unwrap();
    assert_eq!(r2.params.above_pct, 95.0);
    assert!(perfetto.is_file());
    // bad input: named, nothing written
    let e = elfen(&["trace", "--pid", "4000000", "--out", out.to_str().unwrap()]).unwrap_err();
    assert!(e.to_string().contains("no process 4000000"), "{e}");
    let e = elfen(&["trace", "--pid", &pid, "--signals", "sched,bogus"]).unwrap_err();
    assert!(format!("{e:#}").contains("unknown signal 'bogus'"), "{e:#}");
    let e = elfen(&["trace", "report", dir.path().join("none").to_str().unwrap()]).unwrap_err();
    assert!(format!("{e:#}").contains("none"), "{e:#}");
}

fn a_pause_watch_sees_the_vm_thread_run() {
    let child = Child::spawn("vm-thread", 0);
    let w = elfen_trace::pause::PauseWatch::open(child.pid()).unwrap();
    let t = Instant::now();
    let mut seen_live = 0;
    let mut pauses = Vec::new();
    while t.elapsed() < Duration::from_secs(2) {
        if w.paused_since().is_some() {
            seen_live += 1;
        }
        pauses.extend(w.take_pauses());
        std::thread::sleep(Duration::from_micros(500));
    }
    assert!(w.alive());
    drop(w);
    let lens: Vec<f64> = pauses.iter().map(|p| p.len_ns() as f64 / 1e6).collect();
    println!(
        "  {} pauses seen in 2 s ({seen_live} polls during one), lengths ms: {:?}",
        pauses.len(),
        &lens[..lens.len().min(8)]
    );
    // ~40 runs of 5 ms; on a loaded machine a run may stretch or two merge
    assert!(pauses.len() >= 10, "{} pauses", pauses.len());
    assert!(seen_live > 0, "never seen while going on");
    let typical = {
        let mut v = lens.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    assert!(
        (4.0..40.0).contains(&typical),
        "median pause {typical} ms for runs of 5 ms"
    );
}

/// A cgroup v1 directory (pids controller) made for a test; removed on drop.
struct TestCgroup(std::path::PathBuf);

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn a_cgroup_names_its_processes() {
    let root = std::path::Path::new("/sys/fs/cgroup/pids");
    let need = elfen_cmd::skip::Need::CgroupV1("pids".into());
    if !need.present() {
        let why = format!(
            "a test group in the v1 pids hierarchy at {}",
            root.display()
        );
        elfen_cmd::skip::skip_test("a_cgroup_names_its_processes", need, why);
        return;
    }
    let cg = TestCgroup(root.join(format!("elfen-trace-test-{}", std::process::id())));
    std::fs::create_dir(&cg.0).unwrap();
    let mut child = Child::spawn("naps", 0);
    std::fs::write(cg.0.join("cgroup.procs"), child.pid().to_string()).unwrap();
    let t = Target::resolve(TargetSpec::Cgroup(cg.0.clone())).unwrap();
    assert_eq!(t.tgids, vec![child.pid()]);
    assert!(t.alive());
    let _ = child.0.kill();
    let _ = child.0.wait();
    assert!(!t.alive());
    let e = Target::resolve(TargetSpec::Cgroup(cg.0.clone())).unwrap_err();
    assert!(e.to_string().contains("holds no process"), "{e}");
}
