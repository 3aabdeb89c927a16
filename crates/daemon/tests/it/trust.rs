//! What batch work, other users and a vanished group can do to a running
//! daemon (root, BPF, a cgroup hierarchy; skipped with a printed reason
//! otherwise):
//!
//! - a batch command that forks a tree (a subshell with two children, a
//!   grandchild that leaves its session and double-forks): SIGTERM stops
//!   the whole tree; after a SIGKILL of the daemon the tree stays in its
//!   group, and the next start kills it and removes the groups.

use crate::common::*;
use elfen_cgroup::{Controller, GroupPath, Hierarchy};
use elfen_cmd::proc::start_ticks;
use std::path::PathBuf;
use std::time::Duration;

struct Setup {
    _dir: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
    page: PathBuf,
}

/// A config for one test: an LC named `lc` (it need not run), `extra`
/// top-level keys, `batch` the batch groups.
fn setup(lc: &str, extra: &str, batch: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let page = PathBuf::from(format!("/dev/shm/{}", unique("tpage")));
    let config = dir.path().join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}pairs = \"0:1\"\nheartbeat_ms = 20\n{extra}\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n\
             [lc]\ncomm = \"{lc}\"\nliveness_ms = 20\nrescan_ms = 100\n{batch}",
            page.display(),
            state.display()
        ),
    )
    .unwrap();
    Setup {
        _dir: dir,
        config,
        state,
        page,
    }
}

fn hierarchy() -> Hierarchy {
    Hierarchy::detect(elfen_cgroup::default_root()).expect("a cgroup hierarchy")
}

/// A batch command whose process forks a tree: a subshell that ignores
/// SIGTERM with two sleeping children (they inherit that: only SIGKILL
/// stops them), and a grandchild that calls setsid and leaves a sleeping
/// child behind when it exits (reparented away from the tree).
const TREE: &str = r#"sh -c 'trap "" TERM; sleep 1000 & sleep 1000 & wait' & setsid sh -c 'sleep 1000 & exit 0' & wait"#;

fn tree_batch(name: &str) -> String {
    format!(
        "[[batch]]\nname = \"{name}\"\nmode = \"guard\"\ncommand = [\"/bin/sh\", \"-c\", '''{TREE}''']\n"
    )
}

/// A process of the tree: its pid and start time (so a reused pid is
/// never mistaken for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    pid: u32,
    start: u64,
}

impl Member {
    fn alive(&self) -> bool {
        elfen_shm::pid_alive(self.pid) && start_ticks(self.pid) == Some(self.start)
    }
}

/// Kills, by pid, whatever of the tree still runs when dropped (a failed
/// test must not leave sleeps behind).
struct Tree(Vec<Member>);

impl Drop for Tree {
    fn drop(&mut self) {
        for m in &self.0 {
            if m.alive() {
                elfen_cmd::proc::kill_pid(m.pid);
            }
        }
    }
}

/// The processes of the daemon's group `name` once the tree has formed
/// (five processes: two shells, three sleeps).
fn wait_tree(h: &Hierarchy, d: &DaemonProc, name: &str) -> (GroupPath, Tree) {
    let group = GroupPath::new(&format!("elfen-daemon-{}/{name}", d.pid())).unwrap();
    let procs = h
        .group_dir(Controller::Cpuset, &group)
        .unwrap()
        .join("cgroup.procs");
    let read = || -> Vec<u32> {
        std::fs::read_to_string(&procs)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    let sleeps = |pids: &[u32]| {
        pids.iter()
            .filter(|&&p| elfen_daemon::lc::comm_of(p).as_deref() == Some("sleep"))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(10), || {
            let p = read();
            p.len() == 5 && sleeps(&p) == 3
        }),
        "the tree formed in {} (procs {:?}):\n{}",
        procs.display(),
        read(),
        d.output()
    );
    let members = read()
        .into_iter()
        .filter_map(|pid| {
            Some(Member {
                pid,
                start: start_ticks(pid)?,
            })
        })
        .collect();
    (group, Tree(members))
}

/// The tree's processes still running, each with its cpuset group.
fn running(h: &Hierarchy, t: &Tree) -> Vec<(u32, String)> {
    t.0.iter()
        .filter(|m| m.alive())
        .map(|m| {
            let g = h
                .group_of(m.pid, Controller::Cpuset)
                .map_or_else(|e| e.to_string(), |g| g.to_string());
            (m.pid, g)
        })
        .collect()
}

#[test]
fn sigterm_stops_the_whole_tree_of_a_batch_command() {
    let Some(()) = live_ok("sigterm_stops_the_whole_tree_of_a_batch_command") else {
        return;
    };
    let _one = serial();
    let h = hierarchy();
    let s = setup(&unique("t")[..15], "", &tree_batch("tree"));
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let (group, tree) = wait_tree(&h, &d, "tree");
    // (the endpoint of a running guard-mode daemon against the docs'
    // metric tables: every documented metric served, nothing else)
    let metrics = scrape(&metrics_addr(&d));
    let p = crate::metrics_doc::problems(&metrics, false);
    assert!(
        p.is_empty(),
        "the endpoint against the docs:\n{}\n{metrics}",
        p.join("\n")
    );
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits on SIGTERM");
    let left = running(&h, &tree);
    assert!(
        left.is_empty(),
        "after SIGTERM, processes of the batch command's tree still run (pid, cpuset group): \
         {left:?}\n{}",
        d.output()
    );
    assert!(status.success(), "SIGTERM exits 0:\n{}", d.output());
    let top = group.parent().unwrap();
    assert!(
        !h.group_dir(Controller::Cpuset, &top).unwrap().exists(),
        "the daemon's groups are removed"
    );
}

#[test]
fn after_sigkill_the_next_start_kills_the_tree_left_in_its_group() {
    let Some(()) = live_ok("after_sigkill_the_next_start_kills_the_tree_left_in_its_group") else {
        return;
    };
    let _one = serial();
    let h = hierarchy();
    let s = setup(&unique("k")[..15], "", &tree_batch("tree"));
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let (group, tree) = wait_tree(&h, &d, "tree");
    d.stop_with(libc::SIGKILL, Duration::from_secs(5))
        .expect("killed");
    // The command's own process dies with the daemon (PDEATHSIG); the rest
    // of the tree stays in the dead daemon's group — never outside it.
    std::thread::sleep(Duration::from_millis(200));
    let left = running(&h, &tree);
    assert!(
        !left.is_empty(),
        "the tree outlives a SIGKILL of the daemon"
    );
    for (pid, g) in &left {
        assert_eq!(
            g,
            &group.to_string(),
            "pid {pid} of the tree runs outside the daemon's group"
        );
    }
    // the next start (same state file) kills what is left and removes the groups
    let mut d2 = DaemonProc::start(&s.config, &s.state, &s.page);
    d2.wait_for("running", Duration::from_secs(10));
    let left = running(&h, &tree);
    assert!(
        left.is_empty(),
        "after the next start, processes of the tree still run (pid, cpuset group): {left:?}\n{}",
        d2.output()
    );
    let out = d2.output();
    assert!(
        out.contains("killed"),
        "the start says it killed them:\n{out}"
    );
    let top = group.parent().unwrap();
    assert!(
        !h.group_dir(Controller::Cpuset, &top).unwrap().exists(),
        "the dead daemon's groups are removed:\n{out}"
    );
    // the new daemon's own tree (it starts the same command) stops with it
    let (_, tree2) = wait_tree(&h, &d2, "tree");
    let status = d2
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d2.output());
    let left = running(&h, &tree2);
    assert!(left.is_empty(), "{left:?}\n{}", d2.output());
}

/// A config on a fake cgroup root (nothing here needs root, BPF or a real
/// hierarchy), with its page and state file in `dir`.
fn plan_config(dir: &std::path::Path, state: &std::path::Path) -> elfen_daemon::Config {
    let root = fake_root(dir);
    let text = format!(
        "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n[signal]\npriority = 0\n\
         [lc]\ncomm = \"nobody-runs-this\"\n\
         [[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"batch\"\n",
        dir.join("page").display(),
        state.display(),
        root.display()
    );
    elfen_daemon::Config::parse(&text).unwrap()
}

/// A state record written by `pid` (started at `start`, if recorded).
fn state_record(path: &std::path::Path, pid: u32, start: Option<u64>) {
    let start = start.map_or(String::new(), |s| format!("\"pid_start\": {s},\n"));
    std::fs::write(
        path,
        format!(
            "{{\"version\": 1, \"root\": \"/sys/fs/cgroup\", \"layout\": \"v1\", \"pid\": {pid},\n\
             {start}\"created\": [], \"originals\": [], \"enabled\": []}}\n"
        ),
    )
    .unwrap();
}

/// A process that is not a daemon: `sleep 60`, killed when dropped.
fn bystander() -> (Proc, u64) {
    let p = Proc(
        std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap(),
    );
    let start = (0..100)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(5));
            start_ticks(p.pid())
        })
        .unwrap();
    (p, start)
}

#[test]
fn a_state_file_held_by_a_running_process_blocks_the_start_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let c = plan_config(tmp.path(), &state);
    let (p, start) = bystander();
    state_record(&state, p.pid(), Some(start));
    let e = elfen_daemon::Plan::resolve(&c).expect_err("held");
    println!("{e}");
    assert_eq!(e.field, "state_file");
    for want in [
        format!("held by pid {} (sleep, ", p.pid()),
        "user root".to_string(),
        format!("kill -TERM {}", p.pid()),
        "another state_file".to_string(),
    ] {
        if want == "user root" && !elfen_cmd::proc::is_root() {
            continue;
        }
        assert!(e.reason.contains(&want), "{want:?} in {e}");
    }
    assert!(!tmp.path().join("page").exists(), "nothing applied");
}

#[test]
fn a_pid_reused_by_another_program_does_not_hold_the_state_file_or_the_page() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let c = plan_config(tmp.path(), &state);
    let (p, start) = bystander();
    // its start is not the one recorded: the writer is gone
    state_record(&state, p.pid(), Some(start.saturating_sub(1)));
    let plan = elfen_daemon::Plan::resolve(&c).expect("a dead writer's file is recovered");
    assert_eq!(plan.stale_state, Some(p.pid()));
    let note = plan.notes.join("\n");
    assert!(
        note.contains("now belongs to another program") && note.contains("sleep"),
        "{note}"
    );
    // a file of an older build (no start recorded), last written before
    // the process with its pid started
    state_record(&state, p.pid(), None);
    let f = std::fs::File::options().write(true).open(&state).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(f);
    let plan = elfen_daemon::Plan::resolve(&c).expect("judged by the file's time");
    assert_eq!(plan.stale_state, Some(p.pid()));
    // written after it started: it may be that process's own, so held
    state_record(&state, p.pid(), None);
    let e = elfen_daemon::Plan::resolve(&c).expect_err("held");
    assert!(e.reason.contains("held by"), "{e}");
    std::fs::remove_file(&state).unwrap();
    // a page whose creator's pid now belongs to a program started after it
    let page_path = tmp.path().join("page");
    let spec = elfen_shm::PageSpec::for_pairs(&[(0, vec![1])], 1, 0);
    let held = elfen_shm::Page::create(&page_path, &spec).unwrap();
    let h = held.header();
    h.creator_pid
        .store(p.pid(), std::sync::atomic::Ordering::Relaxed);
    h.created_unix_s
        .store(1_000, std::sync::atomic::Ordering::Relaxed);
    let plan = elfen_daemon::Plan::resolve(&c).expect("a dead creator's page is replaced");
    assert_eq!(plan.stale_page, Some(p.pid()));
    // created after that process started: its creator may be it, so in use
    h.created_unix_s.store(
        elfen_cmd::time::now_unix_s(),
        std::sync::atomic::Ordering::Relaxed,
    );
    let e = elfen_daemon::Plan::resolve(&c).expect_err("in use");
    assert!(
        e.field == "page"
            && e.reason.contains(&format!("pid {} (sleep", p.pid()))
            && e.reason.contains("kill -TERM"),
        "{e}"
    );
}

#[test]
fn a_state_file_another_user_could_write_blocks_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let state = shared.join("state.json");
    let c = plan_config(tmp.path(), &state);
    let e = elfen_daemon::Plan::resolve(&c).expect_err("a shared directory");
    println!("{e}");
    assert!(
        e.field == "state_file"
            && e.reason.contains(&shared.display().to_string())
            && e.reason.contains("writable by every user"),
        "{e}"
    );
    if !elfen_cmd::proc::is_root() {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Root,
            "another user's state file not tried",
        );
        return;
    }
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    state_record(&state, 1, None);
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let e = elfen_daemon::Plan::resolve(&c).expect_err("another user's file");
    println!("{e}");
    assert!(
        e.reason.contains("uid 65534") && e.reason.contains("remove it"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(&state).unwrap().lines().count(),
        2,
        "the file is left as it was"
    );
}

/// `name` run as user nobody: `sleep` with `argv[0]` set to `name` (the
/// daemon matches the base name of `argv[0]` as it matches `comm`).
fn impostor(name: &str) -> Proc {
    use std::os::unix::process::CommandExt;
    Proc(
        std::process::Command::new("/bin/bash")
            .args(["-c", &format!("exec -a {name} sleep 60")])
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("starting a process as nobody"),
    )
}

/// An LC service named `name` on cpu 0, idle but alive.
fn quiet_lc(name: &str) -> Proc {
    lc_helper(
        name,
        &[
            "--cpu=0",
            "--busy-us=0",
            "--idle-min-us=1000",
            "--idle-max-us=1000",
        ],
    )
}

/// The metrics address a daemon printed.
fn metrics_addr(d: &DaemonProc) -> String {
    let line = d.wait_for("metrics at http://", Duration::from_secs(5));
    line.split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("an address in the line")
        .to_string()
}

/// GET /metrics.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("the metrics port answers");
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n")
        .map_or(out.clone(), |(_, b)| b.to_string())
}

/// The value of the sample line starting with `prefix` (name and labels).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn a_same_named_process_of_another_user_is_not_adopted() {
    let Some(()) = live_ok("a_same_named_process_of_another_user_is_not_adopted") else {
        return;
    };
    let _one = serial();
    let name = unique("u");
    let name = name[name.len() - 15..].to_string();
    let s = setup(
        &name,
        "",
        &format!(
            "[[batch]]\nname = \"spin\"\nmode = \"idle\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n"
        ),
    );
    // the LC (root) runs first: its user is the one adopted
    let lc = quiet_lc(&name);
    assert!(wait_until(Duration::from_secs(5), || {
        elfen_daemon::lc::find_by_name(&name).contains(&lc.pid())
    }));
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let start = d.output();
    assert!(
        start.contains("processes of user root (uid 0) only"),
        "the plan says whose processes are adopted:\n{start}"
    );
    d.wait_for(
        &format!("LC service found: pid {}", lc.pid()),
        Duration::from_secs(5),
    );
    // a process of nobody with the same name: seen, said once, not adopted
    let imp = impostor(&name);
    let said = d.wait_for(&format!("process {} ", imp.pid()), Duration::from_secs(5));
    assert!(
        said.contains("runs as user nobody (uid 65534), not user root (uid 0): ignored"),
        "{said}"
    );
    // the LC exits: the daemon looks for it every lost_rescan (10 ms) and
    // must not take the impostor for its restart
    drop(lc);
    d.wait_for("LC service exited", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(700));
    let out = d.output();
    let imp_s = imp.pid().to_string();
    for l in out.lines() {
        assert!(
            !(l.contains("LC service restarted") || l.contains("LC service found"))
                || !l.contains(&imp_s),
            "the impostor was adopted: {l}"
        );
    }
    assert_eq!(
        out.matches(&format!("process {} ", imp.pid())).count(),
        1,
        "said once per process, although looked at every 10 ms:\n{out}"
    );
    let metrics = scrape(&metrics_addr(&d));
    assert_eq!(
        sample(&metrics, "elfen_lc_ignored_processes_total"),
        Some(1.0),
        "{metrics}"
    );
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
}

#[test]
fn lc_user_adopts_that_users_processes_only_even_when_another_runs_first() {
    let Some(()) = live_ok("lc_user_adopts_that_users_processes_only_even_when_another_runs_first")
    else {
        return;
    };
    let _one = serial();
    let name = unique("w");
    let name = name[name.len() - 15..].to_string();
    let s = setup(
        &format!("{name}\"\nuser = \"root"),
        "",
        &format!(
            "[[batch]]\nname = \"spin\"\nmode = \"idle\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n"
        ),
    );
    // nobody's process runs first
    let imp = impostor(&name);
    assert!(wait_until(Duration::from_secs(5), || {
        elfen_daemon::lc::find_by_name(&name).contains(&imp.pid())
    }));
    let check = std::process::Command::new(BIN)
        .args(["--config", s.config.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{plan}");
    assert!(
        plan.contains("processes of user root (uid 0) only ([lc] user)")
            && plan.contains(&format!("pid {} (user nobody (uid 65534))", imp.pid())),
        "--check says whose processes are adopted, and which are not:\n{plan}"
    );
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    d.wait_for(&format!("process {} ", imp.pid()), Duration::from_secs(5));
    let lc = quiet_lc(&name);
    let found = d.wait_for("LC service found", Duration::from_secs(5));
    assert!(
        found.ends_with(&format!("pid {}", lc.pid())),
        "only root's process is the LC: {found}"
    );
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
}

#[test]
fn lc_user_is_checked_before_anything_is_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let base = plan_config(tmp.path(), &state);
    let with = |f: &dyn Fn(&mut elfen_daemon::Config)| {
        let mut c = base.clone();
        f(&mut c);
        elfen_daemon::Plan::resolve(&c).expect_err("refused")
    };
    let e = with(&|c| c.lc.user = Some(" ".into()));
    assert!(
        e.field == "lc.user" && e.reason.contains("not empty"),
        "{e}"
    );
    let e = with(&|c| c.lc.user = Some("no-such-user-here-xyz".into()));
    assert!(
        e.field == "lc.user" && e.reason.contains("no user named"),
        "{e}"
    );
    let e = with(&|c| {
        c.lc.comm = None;
        c.lc.cgroup = Some("/sys/fs/cgroup".into());
        c.lc.user = Some("root".into());
    });
    assert!(e.field == "lc.user" && e.reason.contains("cgroup"), "{e}");
    // a pid of another user than lc.user
    let (p, _) = bystander();
    let e = with(&|c| {
        c.lc.comm = None;
        c.lc.pid = Some(p.pid());
        c.lc.user = Some("65534".into());
    });
    assert!(
        e.field == "lc.pid" && e.reason.contains("not lc.user uid 65534")
            || e.reason.contains("not lc.user user nobody"),
        "{e}"
    );
    assert!(!state.exists() && !tmp.path().join("page").exists());
    // the defaults the docs give, and a bad value named
    let d = elfen_daemon::Config::default();
    assert_eq!(d.on_group_lost, elfen_daemon::config::OnGroupLost::Stop);
    assert!(d.lc.user.is_none());
    let e = elfen_daemon::Config::parse("on_group_lost = \"sometimes\"\n").unwrap_err();
    assert!(
        e.field.contains("line 1") && e.reason.contains("sometimes"),
        "{e}"
    );
}

/// A freeze group (an operator's, empty) beside a guarded command group
/// (the freezer must not wait for a guard that occupies the batch lane).
fn lost_setup(extra: &str, g: &TestGroup) -> (Setup, String) {
    let name = unique("g");
    let name = name[name.len() - 15..].to_string();
    // freeze from the start: these tests are about the group, not about
    // whether freeze fits the service (judged after observe_ms otherwise)
    let extra = format!("{extra}\n[freeze]\nunfit = \"warn\"\n");
    let s = setup(
        &name,
        &extra,
        &format!(
            "[[batch]]\nname = \"frz\"\nmode = \"freeze\"\ncgroup = \"{}\"\n\
             [[batch]]\nname = \"spin\"\nmode = \"guard\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n",
            g.name
        ),
    );
    (s, name)
}

/// Removes the group's directories (waiting while the kernel still holds
/// a dying task).
fn remove_group(g: &TestGroup, ctls: &[&str]) {
    for c in ctls {
        let d = g.dir(c);
        assert!(
            wait_until(Duration::from_secs(5), || std::fs::remove_dir(&d).is_ok()
                || !d.exists()),
            "{} removed",
            d.display()
        );
    }
}

#[test]
fn a_group_removed_under_the_daemon_is_counted_shown_and_kept_running_when_asked() {
    let Some(()) =
        live_ok("a_group_removed_under_the_daemon_is_counted_shown_and_kept_running_when_asked")
    else {
        return;
    };
    let _one = serial();
    let g = TestGroup::new(&unique("lost"), &["freezer"]);
    let (s, lc_name) = lost_setup("on_group_lost = \"continue\"", &g);
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let _lc = lc_helper(
        &lc_name,
        &[
            "--cpu=0",
            "--busy-us=30000",
            "--idle-min-us=30000",
            "--idle-max-us=30000",
        ],
    );
    d.wait_for("LC service found", Duration::from_secs(5));
    // the freezer freezes and thaws the (empty) group; then it is removed.
    // Watched from the LC's CPU at SCHED_FIFO 1: on the batch CPU a guard
    // (or the writer) spins while the LC is busy, and an ordinary thread
    // may get to read the state only once the LC is idle and the group
    // thawed again; preempting the LC, this one reads it at once.
    let pin = elfen_topo::PinGuard::new(0).unwrap();
    let fifo = libc::sched_param { sched_priority: 1 };
    // SAFETY: this thread's own policy, a valid parameter.
    assert_eq!(
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) },
        0
    );
    let frozen = wait_until(Duration::from_secs(5), || g.freezer_state() != "THAWED");
    let other = libc::sched_param { sched_priority: 0 };
    // SAFETY: as above.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &other) };
    drop(pin);
    assert!(frozen, "frozen while the LC is busy:\n{}", d.output());
    remove_group(&g, &["freezer"]);
    let lost = d.wait_for("LOST: batch frz", Duration::from_secs(5));
    assert!(
        lost.contains("removed while the daemon ran") || lost.contains("its cgroup is gone"),
        "{lost}"
    );
    assert!(lost.contains("carries on without it"), "{lost}");
    // the freezer's next write (a thaw of the group it froze, or a freeze)
    // fails: counted and said
    let failed = d.wait_for("writes of", Duration::from_secs(5));
    assert!(
        failed.contains("batch frz")
            && failed.contains("in all")
            && failed.contains("no such group"),
        "{failed}"
    );
    // metrics: counted, marked lost
    let addr = metrics_addr(&d);
    let metrics = scrape(&addr);
    assert_eq!(
        sample(&metrics, "elfen_batch_group_lost{group=\"frz\"}"),
        Some(1.0),
        "{metrics}"
    );
    let failures: f64 = ["freeze", "thaw"]
        .iter()
        .filter_map(|k| {
            sample(
                &metrics,
                &format!("elfen_knob_failures_total{{group=\"frz\",knob=\"{k}\"}}"),
            )
        })
        .sum();
    assert!(failures >= 1.0, "{metrics}");
    assert_eq!(
        sample(&metrics, "elfen_batch_group_lost{group=\"spin\"}"),
        Some(0.0)
    );
    // elfen status shows it (its typed record and its text)
    let page = elfen_ops::status::attach(&s.page).unwrap();
    let st = elfen_ops::status::PageStatus::read(&page, 1000.0).unwrap();
    let h = st
        .daemon
        .as_ref()
        .unwrap_or_else(|| panic!("{:?}", st.daemon_note));
    let frz = h.groups.iter().find(|g| g.name == "frz").unwrap();
    assert_eq!(frz.state, elfen_ops::health::GroupState::Lost);
    assert!(
        frz.failures.iter().map(|f| f.count).sum::<u64>() >= 1,
        "{frz:?}"
    );
    let text = elfen_ops::render::text(&st, None);
    println!("{text}");
    assert!(
        text.contains("LOST") && text.contains("failed writes: "),
        "{text}"
    );
    drop(page);
    // still running, and a clean stop
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        elfen_shm::pid_alive(d.pid()),
        "continue: the daemon keeps running"
    );
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
    assert!(
        !elfen_ops::health::health_path(&s.page).exists(),
        "the health record goes with the page"
    );
}

#[test]
fn a_group_removed_under_the_daemon_stops_it_with_a_distinct_status() {
    let Some(()) = live_ok("a_group_removed_under_the_daemon_stops_it_with_a_distinct_status")
    else {
        return;
    };
    let _one = serial();
    let g = TestGroup::new(&unique("stop"), &["freezer"]);
    let (s, _) = lost_setup("", &g);
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    remove_group(&g, &["freezer"]);
    d.wait_for("LOST: batch frz", Duration::from_secs(5));
    let status = d
        .stop_with(0, Duration::from_secs(15))
        .expect("the daemon exits by itself");
    let out = d.output();
    assert_eq!(status.code(), Some(3), "exit status 3:\n{out}");
    assert!(out.contains("the daemon stops"), "{out}");
    assert!(
        out.contains("stopping: restoring"),
        "it restores first:\n{out}"
    );
    assert!(
        out.contains("was removed while the daemon ran"),
        "the error names the group:\n{out}"
    );
    assert!(
        !s.state.exists() && !s.page.exists(),
        "everything given back"
    );
}
