//! Both signal sources against a real child process: a busy/sleep loop
//! pinned to one CPU, watched by tgid (and by cgroup for BPF). The BPF
//! tests record a skip (`elfen_cmd::skip`, need `bpf`) where BPF cannot
//! load and then check that probe() names the reason.

use elfen_bpf::{BpfError, LcEvent, Options, PollSource, SchedSource, Source, probe};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The child process: `elfen-bpf-test-child CPU` alternates ~2 ms of
/// spinning with ~2 ms of sleep pinned to CPU; `… probe` prints what
/// probe() says for it.
const CHILD: &str = env!("CARGO_BIN_EXE_elfen-bpf-test-child");

/// The child process; killed (by its pid) and reaped on drop.
struct ChildGuard(Child);

impl ChildGuard {
    fn spawn(arg: &str, uid: Option<u32>) -> std::io::Result<ChildGuard> {
        ChildGuard::spawn_exe(std::path::Path::new(CHILD), arg, uid)
    }

    fn spawn_exe(
        exe: &std::path::Path,
        arg: &str,
        uid: Option<u32>,
    ) -> std::io::Result<ChildGuard> {
        let mut cmd = Command::new(exe);
        cmd.arg(arg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        Ok(ChildGuard(cmd.spawn()?))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn test_cpu() -> u32 {
    elfen_bpf::proc::possible_cpus().unwrap().saturating_sub(1)
}

/// Collects events until both a busy and an idle event of `tgid` on `cpu`
/// arrived or `limit` passed.
fn busy_and_idle(
    mut wait: impl FnMut(Duration, &mut dyn FnMut(LcEvent)) -> usize,
    tgid: u32,
    cpu: u32,
    limit: Duration,
) -> (Option<LcEvent>, Option<LcEvent>) {
    let end = Instant::now() + limit;
    let (mut busy, mut idle) = (None, None);
    while (busy.is_none() || idle.is_none()) && Instant::now() < end {
        wait(Duration::from_millis(50), &mut |e: LcEvent| {
            if e.cpu != cpu {
                return;
            }
            if e.busy && !e.woken && e.tgid == tgid && busy.is_none() {
                busy = Some(e);
            } else if !e.busy && busy.is_some() && idle.is_none() {
                idle = Some(e);
            }
        });
    }
    (busy, idle)
}

/// Returns the SchedSource, or prints why the test is skipped and checks
/// that probe() names that reason.
fn bpf_or_skip(opts: &Options) -> Option<SchedSource> {
    match SchedSource::open(opts) {
        Ok(s) => Some(s),
        Err(e) => {
            elfen_cmd::skip::skip(
                elfen_cmd::skip::Need::Bpf,
                format!("BPF cannot load here: {e}"),
            );
            let p = probe();
            assert!(!p.loadable());
            let reason = p.reason().expect("probe names a reason").to_string();
            assert!(!reason.is_empty());
            None
        }
    }
}

#[test]
fn bpf_sees_a_watched_child_busy_and_idle() {
    let cpu = test_cpu();
    let Some(mut src) = bpf_or_skip(&Options {
        watched_cpus: Some(vec![cpu]),
        ..Options::default()
    }) else {
        return;
    };
    let child = ChildGuard::spawn(&cpu.to_string(), None).unwrap();
    src.watch_tgid(child.pid()).unwrap();
    let (busy, idle) = busy_and_idle(
        |t, f| src.wait_events(t, f).unwrap(),
        child.pid(),
        cpu,
        Duration::from_secs(10),
    );
    let busy = busy.expect("a busy event of the child on its CPU");
    let idle = idle.expect("an idle event after it");
    assert!(busy.tid != 0 && busy.time_ns > 0);
    assert!(idle.time_ns >= busy.time_ns && idle.busy_ns > 0);
    assert_ne!(idle.tgid, child.pid());

    let snap = src.snapshot(cpu).unwrap();
    assert!(snap.valid() && snap.watched() && snap.lc_periods >= 1);
    assert!(snap.lc_busy_ns > 0 && snap.seq % 2 == 0);
    assert_eq!(
        src.slots().lc_busy(cpu),
        src.slots().slot(cpu).unwrap().lc()
    );

    // After unwatching, the child's busy periods are no longer LC.
    assert!(src.unwatch_tgid(child.pid()).unwrap());
    assert!(!src.unwatch_tgid(child.pid()).unwrap());
    std::thread::sleep(Duration::from_millis(20)); // the running period ends
    src.wait_events(Duration::ZERO, |_| {}).unwrap();
    let mut late = 0;
    let end = Instant::now() + Duration::from_millis(200);
    while Instant::now() < end {
        src.wait_events(Duration::from_millis(20), |e| {
            late += usize::from(e.busy && e.tgid == child.pid());
        })
        .unwrap();
    }
    assert_eq!(late, 0, "busy events of an unwatched process");

    // Drop detaches everything: the program is gone from the kernel.
    let id = src.program_id();
    assert!(id != 0 && elfen_bpf::program_exists(id));
    drop(src);
    let end = Instant::now() + Duration::from_secs(5);
    while elfen_bpf::program_exists(id) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !elfen_bpf::program_exists(id),
        "program {id} still loaded after drop"
    );
}

/// A thread of ours at SCHED_FIFO on the watched child's CPU, woken every
/// 500 µs for 300 ms: its preemptions of the child are idle edges (events
/// that name it as the task switched in) until it is made quiet, then none.
#[test]
fn a_quiet_threads_switches_are_no_transitions() {
    let cpu = test_cpu();
    let Some(mut src) = bpf_or_skip(&Options {
        watched_cpus: Some(vec![cpu]),
        ..Options::default()
    }) else {
        return;
    };
    let child = ChildGuard::spawn(&cpu.to_string(), None).unwrap();
    src.watch_tgid(child.pid()).unwrap();
    // the preempting thread: its tid, then one run of wake-ups per request
    let (go_tx, go_rx) = std::sync::mpsc::channel::<bool>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let waker = std::thread::spawn(move || {
        elfen_topo::pin_current_thread(cpu).unwrap();
        let fifo = libc::sched_param { sched_priority: 1 };
        // SAFETY: sets the calling thread's policy; a valid param.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) };
        tid_tx.send((elfen_cmd::proc::gettid(), rc == 0)).unwrap();
        while go_rx.recv().unwrap_or(false) {
            let end = Instant::now() + Duration::from_millis(300);
            while Instant::now() < end {
                std::thread::sleep(Duration::from_micros(500));
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(20) {
                    std::hint::spin_loop();
                }
            }
            done_tx.send(()).unwrap();
        }
    });
    let (tid, fifo) = tid_rx.recv().unwrap();
    assert!(fifo, "SCHED_FIFO for the waker (BPF runs as root)");
    // the idle edges naming the waker during one run of it
    let edges_by_waker = |src: &mut SchedSource| {
        src.wait_events(Duration::ZERO, |_| {}).unwrap();
        go_tx.send(true).unwrap();
        let mut n = 0usize;
        loop {
            src.wait_events(Duration::from_millis(20), |e| {
                n += usize::from(e.cpu == cpu && !e.busy && e.tid == tid);
            })
            .unwrap();
            if done_rx.try_recv().is_ok() {
                break;
            }
        }
        src.wait_events(Duration::from_millis(20), |e| {
            n += usize::from(e.cpu == cpu && !e.busy && e.tid == tid);
        })
        .unwrap();
        n
    };
    let loud = edges_by_waker(&mut src);
    src.set_quiet_tids(&[tid]).unwrap();
    let quiet = edges_by_waker(&mut src);
    go_tx.send(false).unwrap();
    waker.join().unwrap();
    println!("idle edges naming the waker: {loud} before it was quiet, {quiet} after");
    assert!(
        loud > 0,
        "the waker preempted the child (else the check says nothing)"
    );
    assert_eq!(quiet, 0, "a quiet thread's switches are no transitions");
    // too many quiet threads: refused, naming the limit
    let many: Vec<u32> = (1..=elfen_bpf::contract::MAX_QUIET_TIDS + 1).collect();
    let e = src.set_quiet_tids(&many).unwrap_err().to_string();
    assert!(
        e.contains(&elfen_bpf::contract::MAX_QUIET_TIDS.to_string()),
        "{e}"
    );
}

#[test]
fn poll_fallback_sees_a_watched_child_busy_and_idle() {
    let cpu = test_cpu();
    let mut src = PollSource::open(Duration::from_millis(1), Some(&[cpu])).unwrap();
    let child = ChildGuard::spawn(&cpu.to_string(), None).unwrap();
    src.watch_tgid(child.pid()).unwrap();
    let (busy, idle) = busy_and_idle(
        |t, f| src.wait_events(t, f).unwrap(),
        child.pid(),
        cpu,
        Duration::from_secs(10),
    );
    let busy = busy.expect("a busy event of the child on its CPU");
    assert!(idle.expect("an idle event after it").time_ns > busy.time_ns);
    let snap = src.slots().snapshot(cpu).unwrap();
    assert!(snap.valid() && snap.lc_periods >= 1);
    assert!(src.scans() > 0);
    assert!(src.describe().contains("COARSE"));
    assert!(src.unwatch_tgid(child.pid()).unwrap());
}

#[test]
fn source_falls_back_and_describes_itself() {
    let src = Source::open_poll(&Options::default(), "told to".into()).unwrap();
    assert!(!src.is_bpf());
    assert!(src.describe().contains("told to"), "{}", src.describe());
    let src = Source::open(&Options::default()).unwrap();
    println!("{}", src.describe());
    assert_eq!(src.is_bpf(), probe().loadable());
}

fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn check_bad_input(src: &mut Source) {
    assert!(matches!(src.watch_tgid(0), Err(BpfError::PidZero)));
    let ghost = pid_max() + 1;
    let e = src.watch_tgid(ghost).unwrap_err();
    assert!(
        matches!(e, BpfError::NoSuchProcess { pid } if pid == ghost),
        "{e}"
    );
    assert!(e.to_string().contains("no process"), "{e}");
    let me = std::process::id();
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        tx.send(elfen_cmd::proc::gettid()).unwrap();
        let _ = done_rx.recv();
    });
    let tid = rx.recv().unwrap();
    let e = src.watch_tgid(tid).unwrap_err();
    assert!(
        matches!(e, BpfError::NotAProcess { pid, tgid } if pid == tid && tgid == me),
        "{e}"
    );
    done_tx.send(()).unwrap();
    t.join().unwrap();
    let n = src.cpus();
    assert!(matches!(
        src.set_watched_cpus(&[n + 7]),
        Err(BpfError::CpuOutOfRange { cpu, .. }) if cpu == n + 7
    ));
    assert!(matches!(
        src.watch_cgroup_path(std::path::Path::new("/nonexistent/cgroup")),
        Err(BpfError::Cgroup { .. })
    ));
    assert!(src.slots().snapshot(n).is_err());
    assert!(!src.lc_busy(n));
}

#[test]
fn bad_input_is_a_clear_error() {
    let mut poll = Source::open_poll(&Options::default(), "test".into()).unwrap();
    check_bad_input(&mut poll);
    assert!(matches!(
        poll.watch_cgroup_id(5),
        Err(BpfError::Unsupported(_))
    ));
    let Some(s) = bpf_or_skip(&Options::default()) else {
        return;
    };
    let mut bpf = Source::Bpf(Box::new(s));
    check_bad_input(&mut bpf);
    assert!(matches!(bpf.watch_cgroup_id(0), Err(BpfError::CgroupZero)));
}

#[test]
fn not_root_probe_names_the_reason() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let p = probe();
        println!("not root: {}", p.render());
        if !p.loadable() {
            assert!(p.reason().is_some());
        }
        return;
    }
    // As root: run the probe in a child process as user nobody, from a
    // copy of the child binary that user can reach (the build directory may
    // not be).
    use std::os::unix::fs::PermissionsExt;
    let nobody = 65534;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("probe-as-nobody");
    std::fs::copy(CHILD, &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = ChildGuard::spawn_exe(&exe, "probe", Some(nobody))
        .unwrap_or_else(|e| panic!("cannot run {} as uid {nobody}: {e}", exe.display()));
    let mut out = String::new();
    use std::io::Read;
    c.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let Some(line) = out.lines().find_map(|l| l.find("PROBE ").map(|i| &l[i..])) else {
        panic!("{} did not run as uid {nobody}: {out}", exe.display());
    };
    assert!(line.contains("loadable=false"), "{line}");
    assert!(line.contains("not privileged"), "{line}");
}

/// Counts, over `limit`, the child's WAKE events on `cpu`, its busy
/// (switch-in) events, and the busy events that follow a WAKE of the same
/// thread, checking that the WAKE comes first.
fn wakes_and_switches(
    src: &mut SchedSource,
    tgid: u32,
    cpu: u32,
    limit: Duration,
) -> (u32, u32, u32) {
    let end = Instant::now() + limit;
    let (mut wakes, mut busy, mut announced) = (0, 0, 0);
    let mut last_wake: Option<LcEvent> = None;
    while Instant::now() < end {
        src.wait_events(Duration::from_millis(20), |e: LcEvent| {
            if e.cpu != cpu || e.tgid != tgid {
                return;
            }
            if e.woken {
                assert!(e.busy, "a WAKE is a busy edge");
                wakes += 1;
                last_wake = Some(e);
            } else if e.busy {
                busy += 1;
                if let Some(w) = last_wake.take() {
                    assert!(w.time_ns <= e.time_ns, "the WAKE precedes the switch-in");
                    announced += 1;
                }
            } else {
                last_wake = None;
            }
        })
        .unwrap();
    }
    (wakes, busy, announced)
}

#[test]
fn bpf_announces_busy_edges_at_the_wakeup_when_asked() {
    let cpu = test_cpu();
    for announce in [true, false] {
        let Some(mut src) = bpf_or_skip(&Options {
            watched_cpus: Some(vec![cpu]),
            announce_wakeups: announce,
            ..Options::default()
        }) else {
            return;
        };
        let child = ChildGuard::spawn(&cpu.to_string(), None).unwrap();
        src.watch_tgid(child.pid()).unwrap();
        let (wakes, busy, announced) =
            wakes_and_switches(&mut src, child.pid(), cpu, Duration::from_millis(500));
        println!("announce_wakeups {announce}: {wakes} WAKE, {busy} busy, {announced} announced");
        assert!(busy >= 10, "the child switched in ({busy} busy events)");
        if announce {
            // the child sleeps 2 ms between bursts: each wake-up is
            // announced, and its switch-in follows (a switch-in after a
            // preemption has no wake-up, so there are more busy events)
            assert!(wakes >= 10, "the child's wake-ups announced ({wakes})");
            assert!(
                announced * 10 >= wakes * 9,
                "a switch-in follows each WAKE ({announced} of {wakes})"
            );
        } else {
            assert_eq!(wakes, 0, "no WAKE events when not asked");
        }
    }
}

/// The mount point of the v2 (default) hierarchy: `/sys/fs/cgroup` on a
/// unified host, `/sys/fs/cgroup/unified` on a hybrid one.
fn cgroup2_mount() -> Option<std::path::PathBuf> {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()?
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| std::path::PathBuf::from(f[1]))
        })
}

/// Cgroup directories made for a test, removed (deepest first, processes
/// left in them moved to the v2 root) when dropped.
struct TestCgroups {
    root: std::path::PathBuf,
    dirs: Vec<std::path::PathBuf>,
}

impl TestCgroups {
    fn make(&mut self, rel: &str) -> std::path::PathBuf {
        let d = self.root.join(rel);
        std::fs::create_dir_all(&d).unwrap();
        let mut p = d.clone();
        while p != self.root {
            if !self.dirs.contains(&p) {
                self.dirs.push(p.clone());
            }
            p = p.parent().unwrap().to_path_buf();
        }
        d
    }
}

impl Drop for TestCgroups {
    fn drop(&mut self) {
        self.dirs
            .sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in &self.dirs {
            for pid in elfen_bpf::proc::cgroup_procs(d) {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid.to_string());
            }
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Pins the single-threaded process `pid` to `cpu`.
fn pin_task(pid: u32, cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside
    // it and sched_setaffinity only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(pid as libc::pid_t, std::mem::size_of_val(&set), &set)
    };
    assert_eq!(
        rc,
        0,
        "pinning {pid} to cpu {cpu}: {}",
        std::io::Error::last_os_error()
    );
}

/// Events of `tgid` becoming busy on `cpu` within `window`.
fn busy_events_of(src: &mut SchedSource, tgid: u32, cpu: u32, window: Duration) -> usize {
    let mut n = 0;
    let end = Instant::now() + window;
    while Instant::now() < end {
        src.wait_events(Duration::from_millis(20), |e| {
            n += usize::from(e.busy && !e.woken && e.cpu == cpu && e.tgid == tgid);
        })
        .unwrap();
    }
    n
}

/// A watched cgroup is a subtree: a task in a group below it is LC (the
/// program walks the task's cgroup's ancestors), a task moved out of it is
/// not, one moved into another group below it is again, and after the
/// subtree is unwatched none is (the cached verdicts are decided again).
#[test]
fn bpf_watches_a_cgroup_subtree() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        elfen_cmd::skip::skip(elfen_cmd::skip::Need::Root, "creating cgroups");
        return;
    }
    let Some(v2) = cgroup2_mount() else {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::CgroupV2Tree,
            "no cgroup2 file system is mounted",
        );
        return;
    };
    let cpu = test_cpu();
    let Some(mut src) = bpf_or_skip(&Options {
        watched_cpus: Some(vec![cpu]),
        announce_wakeups: false,
        ..Options::default()
    }) else {
        return;
    };
    let top_name = format!("elfen-btest-{}", std::process::id());
    let mut cg = TestCgroups {
        root: v2.clone(),
        dirs: Vec::new(),
    };
    let top = cg.make(&top_name);
    let deep = cg.make(&format!("{top_name}/a/b"));
    let shallow = cg.make(&format!("{top_name}/c"));
    let outside = cg.make(&format!("{top_name}-outside"));
    let child = ChildGuard::spawn(&cpu.to_string(), None).unwrap();
    // A move between groups whose cpuset differs sets the task's affinity to
    // the new cpuset's CPUs on kernels before 6.2, undoing the child's own
    // pinning: each join pins the child to the watched CPU again.
    let join = |dir: &std::path::Path| {
        std::fs::write(dir.join("cgroup.procs"), child.pid().to_string()).unwrap();
        pin_task(child.pid(), cpu);
    };
    join(&deep);
    let id = src.watch_cgroup_path(&top).unwrap();
    assert_eq!(src.watched_cgroups().collect::<Vec<_>>(), [id]);
    let n = busy_events_of(&mut src, child.pid(), cpu, Duration::from_millis(800));
    assert!(n > 0, "a task two levels below the watched cgroup is LC");

    join(&outside);
    std::thread::sleep(Duration::from_millis(20)); // the running period ends
    src.wait_events(Duration::ZERO, |_| {}).unwrap(); // events from before
    let n = busy_events_of(&mut src, child.pid(), cpu, Duration::from_millis(500));
    assert_eq!(n, 0, "a task moved out of the subtree is not LC");

    join(&shallow);
    let n = busy_events_of(&mut src, child.pid(), cpu, Duration::from_millis(800));
    assert!(
        n > 0,
        "a task moved into another group of the subtree is LC"
    );

    assert!(src.unwatch_cgroup_id(id).unwrap());
    std::thread::sleep(Duration::from_millis(20));
    src.wait_events(Duration::ZERO, |_| {}).unwrap();
    let n = busy_events_of(&mut src, child.pid(), cpu, Duration::from_millis(500));
    assert_eq!(n, 0, "after the subtree is unwatched its tasks are not LC");
    drop(child);
}

/// With the events off, nothing is queued nor wakes the reader, and the
/// per-CPU counters still follow the child: its busy periods (as many, and
/// as long in sum, as the slot counts), the gaps between them and the
/// wake-to-run delay of each wake-up. Turned on again, events come.
#[test]
fn bpf_counts_busy_periods_without_events_when_asked() {
    let cpu = test_cpu();
    let Some(mut src) = bpf_or_skip(&Options {
        watched_cpus: Some(vec![cpu]),
        edge_events: false,
        ..Options::default()
    }) else {
        return;
    };
    let child = ChildGuard::spawn(&cpu.to_string(), None).unwrap();
    let stats = src.stats().clone();
    let before = stats.sum(&[cpu]);
    let slot_before = src.snapshot(cpu).unwrap();
    src.watch_tgid(child.pid()).unwrap();
    let mut events = 0;
    let end = Instant::now() + Duration::from_millis(500);
    while Instant::now() < end {
        events += src.wait_events(Duration::from_millis(50), |_| {}).unwrap();
    }
    src.unwatch_tgid(child.pid()).unwrap();
    std::thread::sleep(Duration::from_millis(20)); // the running period ends
    let w = stats.sum(&[cpu]).since(&before);
    let slot = src.snapshot(cpu).unwrap();
    let (periods, busy_ns) = (
        slot.lc_periods - slot_before.lc_periods,
        slot.lc_busy_ns - slot_before.lc_busy_ns,
    );
    println!(
        "events {events}; busy periods {} (slot {periods}), busy {} µs (slot {} µs), gaps {}, \
         wake-ups {} (mean {} µs)",
        w.busy.count,
        w.busy.sum_ns / 1000,
        busy_ns / 1000,
        w.gaps.count,
        w.wake.count,
        w.wake.sum_ns / w.wake.count.max(1) / 1000
    );
    assert_eq!(events, 0, "no event while they are off");
    // the child runs ~2 ms and sleeps ~2 ms: ~125 periods in 500 ms
    assert!(w.busy.count >= 20, "busy periods counted: {}", w.busy.count);
    assert_eq!(w.busy.count, periods, "as many as the slot began");
    assert_eq!(w.busy.sum_ns, busy_ns, "as long as the slot's sum");
    assert_eq!(w.busy.buckets.iter().sum::<u64>(), w.busy.count);
    assert!(
        w.gaps.count + 1 >= w.busy.count,
        "a gap before each but the first"
    );
    assert!(w.wake.count >= 10, "its wake-ups timed: {}", w.wake.count);
    assert!(
        w.wake.count <= w.busy.count + w.gaps.count,
        "at most one per switch-in"
    );

    src.set_edge_events(true);
    let child2 = ChildGuard::spawn(&cpu.to_string(), None).unwrap();
    src.watch_tgid(child2.pid()).unwrap();
    let (busy, idle) = busy_and_idle(
        |t, f| src.wait_events(t, f).unwrap(),
        child2.pid(),
        cpu,
        Duration::from_secs(10),
    );
    assert!(busy.is_some() && idle.is_some(), "events once on again");
    drop(child);
}
