//! What the tests share: skip checks, one test at a time on the CPUs,
//! fake cgroup roots, and RAII guards that clean up whatever happens —
//! child processes (killed by pid), the daemon (SIGTERM, then SIGKILL, then
//! recovery of its state file), cgroups, pages.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The daemon binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_elfen-daemon");

static SERIAL: Mutex<()> = Mutex::new(());

/// Tests that run processes on the lanes run one at a time, in this process
/// and machine-wide (`elfen_cmd::LaneLock`).
pub fn serial() -> (MutexGuard<'static, ()>, elfen_cmd::LaneLock) {
    let inner = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    (
        inner,
        elfen_cmd::LaneLock::acquire().expect("the lane lock"),
    )
}

/// `None` (and a printed reason) unless this test can use root, BPF and
/// the real cgroup hierarchy with two CPUs.
pub fn live_ok(test: &str) -> Option<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        elfen_cmd::skip::skip_test(
            test,
            elfen_cmd::skip::Need::Root,
            "BPF, SCHED_FIFO, cgroups",
        );
        return None;
    }
    let p = elfen_bpf::probe();
    if !p.loadable() {
        let why = p.reason().map(|e| e.to_string()).unwrap_or_default();
        elfen_cmd::skip::skip_test(test, elfen_cmd::skip::Need::Bpf, why);
        return None;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        elfen_cmd::skip::skip_test(test, elfen_cmd::skip::Need::Cpus(2), "LC and batch lanes");
        return None;
    }
    for c in ["cpuset", "freezer", "cpu"] {
        if !Path::new("/sys/fs/cgroup")
            .join(c)
            .join("cgroup.procs")
            .exists()
        {
            let need = elfen_cmd::skip::Need::CgroupV1(c.into());
            elfen_cmd::skip::skip_test(test, need, "the daemon's groups");
            return None;
        }
    }
    Some(())
}

/// A unique name for this test process.
pub fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "elfen-dtest-{}-{tag}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A child process, SIGKILLed by pid and reaped when dropped.
pub struct Proc(pub Child);

impl Proc {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        elfen_cmd::proc::kill_pid(self.0.id());
        let _ = self.0.wait();
    }
}

/// Starts `elfen-daemon lc-helper` with `args` (named `name`).
pub fn lc_helper(name: &str, args: &[&str]) -> Proc {
    let c = Command::new(BIN)
        .arg("lc-helper")
        .arg(format!("--name={name}"))
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .expect("starting the LC helper");
    Proc(c)
}

/// Starts `elfen-daemon spin-helper` with `args`.
pub fn spinner(args: &[&str]) -> Proc {
    let c = Command::new(BIN)
        .arg("spin-helper")
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .expect("starting the spinner");
    Proc(c)
}

/// A daemon run as a child process, its stderr collected line by line.
/// Dropping it stops it (SIGTERM; SIGKILL after 5 s), then recovers its
/// state file and removes its page, so nothing is left if a test fails.
pub struct DaemonProc {
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    state_file: PathBuf,
    page: PathBuf,
}

impl DaemonProc {
    /// Starts `elfen-daemon --config config`.
    pub fn start(config: &Path, state_file: &Path, page: &Path) -> DaemonProc {
        let mut c = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting elfen-daemon");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = Arc::clone(&lines);
        let err = c.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                println!("daemon| {line}");
                l2.lock().unwrap().push(line);
            }
        });
        DaemonProc {
            child: Some(c),
            lines,
            state_file: state_file.to_path_buf(),
            page: page.to_path_buf(),
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until a line contains `text`; panics with the output after `timeout`.
    pub fn wait_for(&self, text: &str, timeout: Duration) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| l.contains(text)) {
                return l.clone();
            }
            if let Some(c) = &self.child {
                assert!(
                    elfen_shm::pid_alive(c.id()),
                    "the daemon is gone while waiting for {text:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                t0.elapsed() < timeout,
                "no line with {text:?} after {timeout:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` and waits for the exit (at most `timeout`).
    pub fn stop_with(&mut self, signal: i32, timeout: Duration) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        elfen_cmd::proc::signal_pid(c.id(), signal);
        let t0 = Instant::now();
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                std::thread::sleep(Duration::from_millis(50)); // let the reader drain
                return Some(s);
            }
            if t0.elapsed() > timeout {
                elfen_cmd::proc::kill_pid(c.id());
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The threads of the daemon named `name`.
    pub fn threads_named(&self, name: &str) -> Vec<u32> {
        let pid = self.pid();
        elfen_cmd::proc::thread_ids(pid)
            .into_iter()
            .filter(|t| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                    .is_ok_and(|c| c.trim() == name)
            })
            .collect()
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if self.child.is_some()
            && self
                .stop_with(libc::SIGTERM, Duration::from_secs(5))
                .is_none()
        {
            println!("cleanup: the daemon ignored SIGTERM; killed it");
        }
        match elfen_cgroup::Executor::recover(&self.state_file) {
            Ok(r) if !r.is_empty() => println!("cleanup: recovered\n{r}"),
            Err(e) => println!("cleanup: recovery failed: {e}"),
            _ => {}
        }
        let _ = elfen_shm::Page::remove(&self.page);
    }
}

/// A cgroup made by a test in the real v1 hierarchies (`controllers`),
/// removed when dropped: thawed, its processes moved to the root, rmdir.
pub struct TestGroup {
    /// The group name (a top-level group).
    pub name: String,
    dirs: Vec<PathBuf>,
}

impl TestGroup {
    /// Creates `name` in each of `controllers` (v1 cpuset groups get the
    /// root's cpus and mems).
    pub fn new(name: &str, controllers: &[&str]) -> TestGroup {
        let mut g = TestGroup {
            name: name.to_string(),
            dirs: Vec::new(),
        };
        for c in controllers {
            let root = Path::new("/sys/fs/cgroup").join(c);
            let d = root.join(name);
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
            g.dirs.push(d.clone());
            if *c == "cpuset" {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(root.join(f)).unwrap();
                    std::fs::write(d.join(f), v.trim()).unwrap();
                }
            }
        }
        g
    }

    /// The group's directory in controller `c`.
    pub fn dir(&self, c: &str) -> PathBuf {
        Path::new("/sys/fs/cgroup").join(c).join(&self.name)
    }

    /// Moves `pid` in (every controller).
    pub fn add(&self, pid: u32) {
        for d in &self.dirs {
            std::fs::write(d.join("cgroup.procs"), pid.to_string()).unwrap();
        }
    }

    /// The v1 freezer state.
    pub fn freezer_state(&self) -> String {
        std::fs::read_to_string(self.dir("freezer").join("freezer.state"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

impl Drop for TestGroup {
    fn drop(&mut self) {
        for d in self.dirs.iter().rev() {
            if d.join("freezer.state").exists() {
                let _ = std::fs::write(d.join("freezer.state"), "THAWED");
            }
            let root = d.parent().unwrap().join("cgroup.procs");
            for _ in 0..10 {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                if procs.trim().is_empty() {
                    break;
                }
                for p in procs.lines() {
                    let _ = std::fs::write(&root, p.trim());
                }
            }
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Waits until `f` holds, for at most `timeout`.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

/// A fake v1 cgroup root (cpu, cpuset, freezer) with one group `batch`.
pub fn fake_root(dir: &Path) -> PathBuf {
    let root = dir.join("cgroup");
    for c in ["cpu", "cpuset", "freezer"] {
        let d = root.join(c);
        let mut files = vec![("cgroup.procs", ""), ("tasks", "")];
        match c {
            "cpu" => files.extend([("cpu.shares", "1024\n"), ("cpu.idle", "0\n")]),
            "cpuset" => files.extend([("cpuset.cpus", "0-1\n"), ("cpuset.mems", "0\n")]),
            _ => {}
        }
        for sub in [d.clone(), d.join("batch")] {
            std::fs::create_dir_all(&sub).unwrap();
            for (f, v) in &files {
                std::fs::write(sub.join(f), v).unwrap();
            }
        }
        if c == "freezer" {
            std::fs::write(d.join("batch/freezer.state"), "THAWED\n").unwrap();
        }
    }
    root
}

/// Every file under `dir` with its content, for "nothing changed" checks.
pub fn tree(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
                out.push((p, String::from("<dir>")));
            } else {
                out.push((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}
