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
            "page = \"{}\"\nstate_file = \"{}\"\npairs = \"0:1\"\nheartbeat_ms = 20\n{extra}\n\
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
        "page = \"{}\"\nstate_file = \"{}\"\ncgroup_root = \"{}\"\n[signal]\npriority = 0\n\
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
        println!("not root: another user's state file not tried");
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
