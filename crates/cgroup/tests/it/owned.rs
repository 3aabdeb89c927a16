//! Groups made for an owner's commands (`create_owned_group`): every
//! process left in them is killed — by `kill_tasks`, by a restore, and by
//! the recovery after a crash — never moved to the parent; other groups'
//! processes are never killed. And the state file's trust: its directory,
//! its owner, links.

use crate::common::*;
use elfen_cgroup::{Controller, Executor, Group, Hierarchy, RestoreAction, StateRecord};
use std::path::Path;
use std::time::Duration;

#[test]
fn the_state_file_records_owned_groups_and_its_writer_start() {
    let (_t, h) = fake_v1();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let (mut ex, _) = Executor::with_state_file(h.clone(), &state).unwrap();
    let owned = ex
        .create_owned_group("elfen-d/cmd", &[Controller::Cpuset])
        .unwrap();
    ex.create_group("plain", &[Controller::Cpu]).unwrap();
    let rec = StateRecord::load(&state).unwrap().unwrap();
    assert_eq!(rec.pid, std::process::id());
    assert_eq!(
        rec.pid_start,
        elfen_cmd::proc::start_ticks(std::process::id()),
        "the writer's start is recorded beside its pid"
    );
    let owned_paths: Vec<&str> = rec
        .created
        .iter()
        .filter(|c| c.kill_tasks)
        .map(|c| c.group.as_str())
        .collect();
    assert_eq!(owned_paths, ["elfen-d", "elfen-d/cmd"]);
    // another group's processes are never killed
    let plain = ex.open_group("plain", &[Controller::Cpu]).unwrap();
    let e = ex
        .kill_tasks(&plain, Duration::from_millis(10))
        .unwrap_err()
        .to_string();
    assert!(e.contains("left alone"), "{e}");
    // a test root's made-up pids are never signalled
    ex.add_process(&owned, 1).unwrap();
    let r = ex.kill_tasks(&owned, Duration::from_millis(10)).unwrap();
    assert_eq!(r.killed, 0, "{r}");
    // a record of an older build (no kill_tasks, no pid_start) still reads
    let old = std::fs::read_to_string(&state)
        .unwrap()
        .replace(",\n      \"kill_tasks\": true", "")
        .lines()
        .filter(|l| !l.contains("pid_start"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&state, old).unwrap();
    let rec = StateRecord::load(&state).unwrap().unwrap();
    assert!(rec.pid_start.is_none() && rec.created.iter().all(|c| !c.kill_tasks));
    ex.restore_all();
}

#[test]
fn a_state_file_others_could_have_written_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (_t, h) = fake_v1();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let state = shared.join("state.json");
    let e = Executor::with_state_file(h.clone(), &state)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("state.json") && e.contains("writable by every user"),
        "{e}"
    );
    // a link in a private directory is not followed
    let private = dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    let target = private.join("elsewhere.json");
    std::fs::write(&target, "{}").unwrap();
    let link = private.join("state.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = Executor::recover(&link).unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
    std::fs::remove_file(&link).unwrap();
    // another user's state file: refused, naming the user
    if elfen_cmd::proc::is_root() {
        let (mut ex, _) = Executor::with_state_file(h.clone(), &link).unwrap();
        ex.create_group("x", &[Controller::Cpu]).unwrap();
        drop(ex);
        std::os::unix::fs::chown(&link, Some(65534), None).unwrap();
        let e = Executor::recover(&link).unwrap_err().to_string();
        assert!(e.contains("uid 65534") && e.contains("not trusted"), "{e}");
        std::os::unix::fs::chown(&link, Some(0), None).unwrap();
        assert!(Executor::recover(&link).unwrap().is_clean());
    } else {
        let why = "gives a state file to another user (the shared directory was checked)";
        elfen_cmd::skip::skip(elfen_cmd::skip::Need::Root, why);
    }
}

/// The real hierarchy, if `test` can write to it (else the skip recorded).
fn real(test: &str) -> Option<Hierarchy> {
    use elfen_cmd::skip::{Need, skip_test};
    if !elfen_cmd::proc::is_root() {
        skip_test(test, Need::Root, "writes the machine's cgroups");
        return None;
    }
    match Hierarchy::detect(elfen_cgroup::default_root()) {
        Ok(h) if h.supports(Controller::Cpuset) && h.freezer().is_some() => Some(h),
        Ok(h) => {
            let need = match h.layout() {
                elfen_cgroup::Layout::V2 => Need::CgroupV2("cpuset".into()),
                _ => Need::CgroupV1("freezer".into()),
            };
            skip_test(
                test,
                need,
                "owned groups are held by the cpuset and the freezer",
            );
            None
        }
        Err(e) => {
            skip_test(test, Need::CgroupV1("cpuset".into()), e);
            None
        }
    }
}

/// A shell that forks two sleeps and a session leader that leaves a third
/// behind (four processes), started inside `procs` files (it joins before
/// it forks).
fn tree_in(files: &[std::path::PathBuf]) -> u32 {
    use std::os::unix::process::CommandExt;
    let files: Vec<std::ffi::CString> = files
        .iter()
        .map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap())
        .collect();
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args([
        "-c",
        "sleep 1000 & sleep 1000 & setsid sh -c 'sleep 1000 & exit 0' & wait",
    ]);
    // SAFETY: open/write/close only, on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for f in &files {
                let fd = libc::open(f.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            Ok(())
        });
    }
    let c = cmd.spawn().unwrap();
    let pid = c.id();
    // reaped by a thread so that it does not linger as a zombie
    std::thread::spawn(move || {
        let mut c = c;
        let _ = c.wait();
    });
    pid
}

/// Pids in `dir`'s cgroup.procs.
fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Kills, by pid, what a failed test leaves.
struct Reap(Vec<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for &p in &self.0 {
            if matches!(elfen_cmd::proc::comm(p).as_deref(), Some("sleep" | "sh")) {
                elfen_cmd::proc::kill_pid(p);
            }
        }
    }
}

/// Removes a top-level test group (and the groups below it) in the cpuset
/// and freezer hierarchies when dropped, whatever the test left.
struct Groups(Hierarchy, String);

impl Drop for Groups {
    fn drop(&mut self) {
        for c in [Controller::Cpuset, Controller::Freezer] {
            let Ok(root) = self.0.controller_root(c) else {
                continue;
            };
            let top = root.join(&self.1);
            let mut all = Vec::new();
            let mut stack = vec![top];
            while let Some(d) = stack.pop() {
                if let Ok(rd) = std::fs::read_dir(&d) {
                    stack.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
                }
                all.push(d);
            }
            for d in all.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

fn owned_tree(ex: &mut Executor, name: &str) -> (Group, std::path::PathBuf, Reap) {
    let g = ex
        .create_owned_group(name, &[Controller::Cpuset, Controller::Freezer])
        .unwrap();
    let files: Vec<_> = g
        .controllers()
        .iter()
        .map(|&c| {
            ex.hierarchy()
                .group_dir(c, g.path())
                .unwrap()
                .join("cgroup.procs")
        })
        .collect();
    tree_in(&files);
    let cpuset = ex
        .hierarchy()
        .group_dir(Controller::Cpuset, g.path())
        .unwrap();
    // formed: the outer shell and its three sleeps. Until the inner shell
    // has forked its sleep and exited there are transiently 4 or 5
    // processes of other names (setsid, the inner sh): counting 4 alone
    // could stop at such a moment, before the inner sleep joins.
    let formed = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        let p = procs(&cpuset);
        let sleeps = p
            .iter()
            .filter(|&&q| elfen_cmd::proc::comm(q).as_deref() == Some("sleep"))
            .count();
        p.len() == 4 && sleeps == 3
    });
    assert!(formed, "the tree formed: {:?}", procs(&cpuset));
    let reap = Reap(procs(&cpuset));
    (g, cpuset, reap)
}

/// The tree's processes still running, after waiting up to 5 s for them to
/// end (`pid_alive`: a zombie counts as ended) — a killed process leaves a
/// loaded or emulated machine's process table late.
fn all_dead(reap: &Reap) -> Vec<u32> {
    let t = std::time::Instant::now();
    loop {
        let left: Vec<u32> = reap
            .0
            .iter()
            .copied()
            .filter(|&p| elfen_cmd::proc::pid_alive(p))
            .collect();
        if left.is_empty() || t.elapsed() > Duration::from_secs(5) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn real_owned_group_processes_are_killed_by_kill_tasks_restore_and_recovery() {
    let test = "real_owned_group_processes_are_killed_by_kill_tasks_restore_and_recovery";
    let Some(h) = real(test) else { return };
    let pid = std::process::id();
    let _groups = Groups(h.clone(), format!("elfen-test-{pid}-own"));
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    // kill_tasks: every process of the tree, the group left empty
    let (mut ex, _) = Executor::with_state_file(h.clone(), &state).unwrap();
    let (g, cpuset, reap) = owned_tree(&mut ex, &format!("elfen-test-{pid}-own/a"));
    let r = ex.kill_tasks(&g, Duration::from_secs(2)).unwrap();
    println!("kill_tasks: {r}");
    assert!(r.is_clean() && r.killed == 4, "{r}");
    assert!(procs(&cpuset).is_empty());
    assert_eq!(all_dead(&reap), Vec::<u32>::new());
    // a restore kills what is left in an owned group, moves nothing
    let (_g, cpuset, reap) = owned_tree(&mut ex, &format!("elfen-test-{pid}-own/b"));
    let rep = ex.restore_all();
    println!("restore:\n{rep}");
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(all_dead(&reap), Vec::<u32>::new(), "{rep}");
    let killed: usize = rep
        .actions
        .iter()
        .map(|a| match a {
            RestoreAction::Removed {
                tasks_killed,
                tasks_moved,
                ..
            } => {
                assert_eq!(*tasks_moved, 0, "nothing moved to a parent: {rep}");
                *tasks_killed
            }
            _ => 0,
        })
        .sum();
    assert_eq!(killed, 4, "{rep}");
    assert!(!cpuset.exists());
    // a crash: the executor is dropped without a restore; the recovery kills
    let (mut ex, _) = Executor::with_state_file(h, &state).unwrap();
    let (_g, cpuset, reap) = owned_tree(&mut ex, &format!("elfen-test-{pid}-own/c"));
    drop(ex);
    assert_eq!(
        procs(&cpuset).len(),
        4,
        "a crash leaves the tree in its group"
    );
    let rep = Executor::recover(&state).unwrap();
    println!("recovery:\n{rep}");
    assert!(rep.is_clean(), "{rep}");
    assert!(
        rep.to_string().contains("4 processes left in it killed"),
        "{rep}"
    );
    assert_eq!(all_dead(&reap), Vec::<u32>::new(), "{rep}");
    assert!(!cpuset.parent().unwrap().exists(), "the groups are removed");
}

#[test]
fn real_v2_owned_group_is_killed_through_cgroup_kill() {
    use elfen_cgroup::FreezerBackend;
    use elfen_cmd::skip::{Need, skip_test};
    let test = "real_v2_owned_group_is_killed_through_cgroup_kill";
    let Some(h) = real(test) else { return };
    let Some(unified) = h.unified().map(Path::to_path_buf) else {
        skip_test(test, Need::CgroupV2("freezer".into()), "a v1-only layout");
        return;
    };
    if !unified.join("cgroup.procs").exists() {
        let why = format!("{} is not a v2 tree", unified.display());
        skip_test(test, Need::CgroupV2("freezer".into()), why);
        return;
    }
    let h = if h.layout() == elfen_cgroup::Layout::Hybrid {
        h.with_freezer(FreezerBackend::V2).unwrap()
    } else {
        h
    };
    let pid = std::process::id();
    let name = format!("elfen-test-{pid}-v2kill");
    let dir = unified.join(&name);
    struct Rm(std::path::PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _rm = Rm(dir.clone());
    let mut ex = Executor::new(h);
    let g = ex
        .create_owned_group(&name, &[Controller::Freezer])
        .unwrap();
    if !dir.join("cgroup.kill").exists() {
        let why = "the kernel's cgroup.kill (Linux 5.14 and later)";
        skip_test(test, Need::Input(dir.join("cgroup.kill")), why);
        ex.restore_all();
        return;
    }
    tree_in(&[dir.join("cgroup.procs")]);
    let formed = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        procs(&dir).len() == 4
    });
    let reap = Reap(procs(&dir));
    assert!(formed, "the tree formed: {:?}", procs(&dir));
    let r = ex.kill_tasks(&g, Duration::from_secs(2)).unwrap();
    println!("kill_tasks on v2: {r}");
    assert_eq!(r.method, "cgroup.kill");
    assert!(r.is_clean() && r.killed == 4, "{r}");
    assert_eq!(all_dead(&reap), Vec::<u32>::new());
    assert!(ex.restore_all().is_clean());
    assert!(!dir.exists());
}
