//! What the tests share: skip checks, one test at a time on the CPUs,
//! the machine's cgroup hierarchy whatever its layout (v1, v2 or hybrid, as
//! elfen-cgroup detects it), fake cgroup roots, timing assertions whose
//! bounds the VM test bed stretches by its slack, and RAII guards that
//! clean up whatever happens — child processes (killed by pid), the daemon
//! (SIGTERM, then SIGKILL, then recovery of its state file), cgroups, pages.

use elfen_cgroup::{Controller, GroupPath, Hierarchy, Layout};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The daemon binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_elfen-daemon");

/// The config line every test's daemon opts in with: `undelegated = "root"`.
/// In the VM test bed the tests run inside a systemd unit that is not
/// delegated (`elfen-vmtest.service`, no `Delegate=`), where on cgroup v2 the
/// daemon refuses to start commands by default; with this line the
/// commands' groups go at the root of each hierarchy (or of the test's fake
/// cgroup root) instead. The refusal itself is checked explicitly (`hosts`).
pub const HOST_ROOT: &str = "undelegated = \"root\"\n";

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

/// `None` (and a printed reason) unless this test can use root, BPF, two
/// CPUs and the machine's cgroup hierarchy with the cpuset, cpu and freezer
/// controllers (v1 hierarchies, or a v2 tree offering cpuset and cpu, whose
/// freezer is `cgroup.freeze`).
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
    use elfen_cmd::skip::{Need, skip_test};
    let h = match Hierarchy::detect(elfen_cgroup::default_root()) {
        Ok(h) => h,
        Err(e) => {
            let why = format!("the daemon's groups: no cgroup hierarchy: {e}");
            skip_test(test, Need::CgroupV1("cpuset".into()), why);
            return None;
        }
    };
    for c in [Controller::Cpuset, Controller::Freezer, Controller::Cpu] {
        if let Err(e) = h.controller_root(c) {
            let need = match h.layout() {
                elfen_cgroup::Layout::V2 => Need::CgroupV2(c.to_string()),
                _ => Need::CgroupV1(c.to_string()),
            };
            let why = format!("the daemon's groups (cgroup {}): {e}", h.layout());
            skip_test(test, need, why);
            return None;
        }
    }
    Some(())
}

/// The controller v1 names `name` (`cpuset`, `cpu`, `freezer`, `memory`, `blkio`).
pub fn controller(name: &str) -> Controller {
    Controller::ALL
        .into_iter()
        .find(|c| c.v1_name() == name)
        .unwrap_or_else(|| panic!("no controller named {name:?}"))
}

/// The machine's cgroup hierarchy (detected; `live_ok` has checked it).
pub fn cgroups() -> Hierarchy {
    Hierarchy::detect(elfen_cgroup::default_root()).expect("a cgroup hierarchy (live_ok checked)")
}

/// The directory of group `path` (below each controller's root) in
/// controller `c` (a v1 name): `/sys/fs/cgroup/<c>/<path>` on v1,
/// `/sys/fs/cgroup/<path>` on v2.
pub fn group_dir(c: &str, path: &str) -> PathBuf {
    cgroups()
        .group_dir(controller(c), &GroupPath::new(path).expect("a group path"))
        .expect("the controller (live_ok checked)")
}

/// The freezer state of group `path` as v1 names it, read from the files
/// (not through the executor under test): `THAWED`, `FREEZING`, `FROZEN`;
/// on v2 from `cgroup.freeze` (asked) and `cgroup.events` (done), where a
/// group asked to thaw that is still frozen reads `THAWING`.
pub fn freezer_state(path: &str) -> String {
    let h = cgroups();
    let dir = group_dir("freezer", path);
    if !h.is_v2(Controller::Freezer) {
        return std::fs::read_to_string(dir.join("freezer.state"))
            .unwrap_or_default()
            .trim()
            .to_string();
    }
    let asked = std::fs::read_to_string(dir.join("cgroup.freeze")).unwrap_or_default();
    let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap_or_default();
    let frozen = events.lines().any(|l| l.trim() == "frozen 1");
    match (asked.trim() == "1", frozen) {
        (true, true) => "FROZEN",
        (true, false) => "FREEZING",
        (false, true) => "THAWING",
        (false, false) => "THAWED",
    }
    .to_string()
}

/// Whether this runs in the VM test bed (`ELFEN_VM` = `tcg` or `kvm`, set
/// by its guest script), where emulation runs code about ten times slower.
pub fn in_vm() -> bool {
    std::env::var_os("ELFEN_VM").is_some()
}

/// How many times longer than on the host things may take here: 1 on the
/// host; in the VM test bed `ELFEN_VM_SLACK` (its guest script sets it;
/// 10 if unset). Live tests stretch their timelines (LC bursts, budgets)
/// and bounds (how long to wait for the daemon) by it, so that what they
/// assert is still behaviour under emulation.
pub fn slack() -> u32 {
    if !in_vm() {
        return 1;
    }
    std::env::var("ELFEN_VM_SLACK")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&k| k >= 1)
        .unwrap_or(10)
}

/// `d` × [`slack`]: a bound on how long something may take here, or a
/// stretched time line.
pub fn patient(d: Duration) -> Duration {
    d * slack()
}

/// The bound of a check of a figure that speed decides.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    /// The figure (a share, a count) is at least this; divided by
    /// [`slack`] here.
    AtLeast(f64),
    /// The figure (a time) is at most this; multiplied by [`slack`] here.
    AtMost(f64),
    /// The figure (a time) is at most `ratio` times `reference`, a time
    /// measured side by side with it in the same run (speed hits both
    /// alike: the ratio is not stretched), or at most `reference` plus
    /// `plus` (an absolute margin, multiplied by [`slack`] here).
    NearReference {
        /// The time measured beside the figure.
        reference: f64,
        /// How many times it the figure may be.
        ratio: f64,
        /// How much more than it the figure may be.
        plus: f64,
    },
}

/// A check of a figure that speed decides, asserted everywhere: on the
/// host with `bound` as it is, in the VM test bed with the bound stretched
/// by [`slack`] as [`Bound`] says (so that emulation's slowness is not a
/// failure, while a behaviour that is absent still is). Prints `timing: …` with the figure,
/// the bound used and the slack (the VM test bed keeps it as the note).
pub fn assert_timing(figure: f64, bound: Bound, what: impl std::fmt::Display) {
    let k = f64::from(slack());
    let (ok, used) = match bound {
        Bound::AtLeast(b) => (figure >= b / k, format!("at least {:.4}", b / k)),
        Bound::AtMost(b) => (figure <= b * k, format!("at most {:.4}", b * k)),
        Bound::NearReference {
            reference,
            ratio,
            plus,
        } => {
            let b = (ratio * reference).max(reference + plus * k);
            (
                figure <= b,
                format!(
                    "at most {b:.4} ({ratio}x {reference:.4}, or it + {:.4})",
                    plus * k
                ),
            )
        }
    };
    let place = match std::env::var("ELFEN_VM") {
        Ok(vm) => format!("VM under {}, slack {k}", vm.to_uppercase()),
        Err(_) => "host".to_string(),
    };
    println!(
        "timing: {what}: {figure:.4}, {used} ({place}): {}",
        if ok { "holds" } else { "does NOT hold" }
    );
    assert!(
        ok,
        "{what}: {figure:.4}, wanted {used} ({place}; {bound:?} on the host)"
    );
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
/// Its lines are printed (`daemon| …`) as they come in the VM test bed or
/// with `ELFEN_TEST_ECHO=1`; elsewhere only when it is dropped by a failing
/// test, after the failure's message, so a report cut to its head and tail
/// still shows why the test failed.
pub struct DaemonProc {
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    state_file: PathBuf,
    page: PathBuf,
    /// Leave the state file and the page to the next daemon (a crash test).
    leave: bool,
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
        let echo = echo_live();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if echo {
                    println!("daemon| {line}");
                }
                l2.lock().unwrap().push(line);
            }
        });
        DaemonProc {
            child: Some(c),
            lines,
            state_file: state_file.to_path_buf(),
            page: page.to_path_buf(),
            leave: false,
        }
    }

    /// SIGKILLs it and leaves its state file and page as a crash leaves
    /// them, for the next daemon to repair (dropping it recovers nothing).
    pub fn kill_leaving_state(mut self) {
        self.stop_with(libc::SIGKILL, patient(Duration::from_secs(5)))
            .expect("killed");
        self.leave = true;
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until a line contains `text`; panics with the output after
    /// `timeout` (stretched by [`patient`] in the VM test bed).
    pub fn wait_for(&self, text: &str, timeout: Duration) -> String {
        let timeout = patient(timeout);
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

/// Whether a daemon's lines are printed as they come (see [`DaemonProc`]).
fn echo_live() -> bool {
    in_vm() || std::env::var_os("ELFEN_TEST_ECHO").is_some_and(|v| v == "1")
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
        if std::thread::panicking() && !echo_live() {
            let lines = self.lines.lock().map(|l| l.clone()).unwrap_or_default();
            println!("the daemon's output ({} lines):", lines.len());
            for line in lines {
                println!("daemon| {line}");
            }
        }
        if self.leave {
            return;
        }
        match elfen_cgroup::Executor::recover(&self.state_file) {
            Ok(r) if !r.is_empty() => println!("cleanup: recovered\n{r}"),
            Err(e) => println!("cleanup: recovery failed: {e}"),
            _ => {}
        }
        let _ = elfen_shm::Page::remove(&self.page);
    }
}

/// A cgroup made by a test in the machine's hierarchy as an operator would
/// make it, removed when dropped: thawed, its processes moved to the root,
/// rmdir. On v1 a directory per controller (a cpuset gets the root's cpus
/// and mems); on v2 one directory, with the controllers it needs turned on
/// in the root's `cgroup.subtree_control` where they were off (and off again
/// when dropped).
pub struct TestGroup {
    /// The group name (a top-level group).
    pub name: String,
    dirs: Vec<PathBuf>,
    /// v2 controllers this group turned on in the root's subtree_control.
    enabled: Vec<&'static str>,
}

impl TestGroup {
    /// Creates `name` in each of `controllers` (named as v1 names them:
    /// `cpuset`, `cpu`, `freezer`, …, whatever the layout).
    pub fn new(name: &str, controllers: &[&str]) -> TestGroup {
        let controllers: Vec<Controller> = controllers.iter().map(|c| controller(c)).collect();
        let h = cgroups();
        let mut g = TestGroup {
            name: name.to_string(),
            dirs: Vec::new(),
            enabled: Vec::new(),
        };
        if h.layout() == Layout::V2 {
            let root = h.root().to_path_buf();
            let sc = root.join("cgroup.subtree_control");
            let on = std::fs::read_to_string(&sc).unwrap_or_default();
            for c in controllers.iter().filter_map(|c| c.v2_name()) {
                if !on.split_whitespace().any(|w| w == c) {
                    std::fs::write(&sc, format!("+{c}"))
                        .unwrap_or_else(|e| panic!("{}: +{c}: {e}", sc.display()));
                    g.enabled.push(c);
                }
            }
            let d = root.join(name);
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
            g.dirs.push(d);
            return g;
        }
        for &c in &controllers {
            let root = h
                .controller_root(c)
                .expect("live_ok checked the controller");
            let d = root.join(name);
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
            g.dirs.push(d.clone());
            if c == Controller::Cpuset {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(root.join(f)).unwrap();
                    std::fs::write(d.join(f), v.trim()).unwrap();
                }
            }
        }
        g
    }

    /// The group's directory in controller `c` (a v1 name).
    pub fn dir(&self, c: &str) -> PathBuf {
        group_dir(c, &self.name)
    }

    /// Moves `pid` in (every controller).
    pub fn add(&self, pid: u32) {
        for d in &self.dirs {
            std::fs::write(d.join("cgroup.procs"), pid.to_string()).unwrap();
        }
    }

    /// The freezer state, as v1 names it ([`freezer_state`]).
    pub fn freezer_state(&self) -> String {
        freezer_state(&self.name)
    }
}

impl Drop for TestGroup {
    fn drop(&mut self) {
        for d in self.dirs.iter().rev() {
            if d.join("freezer.state").exists() {
                let _ = std::fs::write(d.join("freezer.state"), "THAWED");
            }
            if d.join("cgroup.freeze").exists() {
                let _ = std::fs::write(d.join("cgroup.freeze"), "0");
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
        if !self.enabled.is_empty() {
            let sc = cgroups().root().join("cgroup.subtree_control");
            for c in self.enabled.iter().rev() {
                if let Err(e) = std::fs::write(&sc, format!("-{c}")) {
                    println!(
                        "cleanup: could not turn {c} off again in {}: {e}",
                        sc.display()
                    );
                }
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

/// `None` (the skip recorded with the need of this layout: the v1
/// hierarchy `c`, or the v2 controller) unless the machine's hierarchy
/// offers controller `c` (a v1 name: `memory`, `blkio`, …) to the daemon's
/// groups. Call after [`live_ok`].
pub fn controller_ok(test: &str, c: &str) -> Option<()> {
    use elfen_cmd::skip::{Need, skip_test};
    let h = cgroups();
    let ctl = controller(c);
    let Err(e) = h.controller_root(ctl) else {
        return Some(());
    };
    let need = if h.is_v2(ctl) {
        Need::CgroupV2(ctl.v2_name().unwrap_or(c).to_string())
    } else {
        Need::CgroupV1(c.to_string())
    };
    skip_test(
        test,
        need,
        format!("the daemon's groups (cgroup {}): {e}", h.layout()),
    );
    None
}
