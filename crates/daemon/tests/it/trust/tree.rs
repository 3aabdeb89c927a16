//! A batch command that forks a tree (a subshell with two children, a
//! grandchild that leaves its session and double-forks): SIGTERM stops the
//! whole tree; after a SIGKILL of the daemon the tree stays in its group,
//! and the next start kills it and removes the groups.

use super::{scrape, setup};
use crate::coalesce::metrics_addr;
use crate::common::*;
use elfen_cgroup::{Controller, GroupPath, Hierarchy};
use elfen_cmd::proc::start_ticks;
use std::time::Duration;

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
