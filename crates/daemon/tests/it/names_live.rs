//! An LC service named by its group, for real: the daemon watches a group
//! of the v2 tree as a subtree (the LC runs in a group below it), and when
//! the group is removed and made anew — what systemd does when it restarts
//! a unit: a new directory, a new kernel id, at the same path — it finds
//! the service again. Runs wherever a v2 tree is mounted (the unified
//! hierarchy, or a hybrid host's `unified`), as root with BPF.

use crate::common::*;
use crate::live::lc_bursts;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Acquire;
use std::time::{Duration, Instant};

/// The v2 tree's mount point.
fn cgroup2_mount() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()?
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
}

/// Groups a test made in the v2 tree: removed deepest first, their
/// processes moved to the tree's root, when dropped.
struct V2Groups {
    root: PathBuf,
    dirs: Vec<PathBuf>,
}

impl V2Groups {
    fn make(&mut self, rel: &str) -> PathBuf {
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

    fn remove_all(&mut self) {
        self.dirs
            .sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in std::mem::take(&mut self.dirs) {
            for pid in elfen_bpf::proc::cgroup_procs(&d) {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid.to_string());
            }
            for _ in 0..50 {
                if std::fs::remove_dir(&d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for V2Groups {
    fn drop(&mut self) {
        self.remove_all();
    }
}

fn join(dir: &Path, pid: u32) {
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
}

/// The LC line of request lane 0 was busy at some moment within `limit`.
fn line_goes_busy(page: &Path, limit: Duration) -> bool {
    let Ok(p) = elfen_shm::Page::attach(page, elfen_shm::Access::Observer) else {
        return false;
    };
    let l = p.lc(0).unwrap();
    let before = l.requests.load(Acquire);
    wait_until(limit, || {
        elfen_shm::state::busy(l.state.load(Acquire)) || l.requests.load(Acquire) > before
    })
}

#[test]
fn an_lc_named_by_its_group_is_a_subtree_followed_across_recreation() {
    let Some(()) = live_ok("an_lc_named_by_its_group_is_a_subtree_followed_across_recreation")
    else {
        return;
    };
    let Some(v2) = cgroup2_mount() else {
        elfen_cmd::skip::skip_test(
            "an_lc_named_by_its_group_is_a_subtree_followed_across_recreation",
            elfen_cmd::skip::Need::CgroupV2Tree,
            "no cgroup2 file system is mounted",
        );
        return;
    };
    let _one = serial();
    let name = unique("lcg");
    let mut groups = V2Groups {
        root: v2.clone(),
        dirs: Vec::new(),
    };
    let top = groups.make(&name);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let page = PathBuf::from(format!("/dev/shm/{}", unique("page")));
    let config = dir.path().join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}pairs = \"0:1\"\nheartbeat_ms = 20\n\
             [metrics]\nlisten = \"\"\n\
             [lc]\ncgroup = \"{}\"\nliveness_ms = 20\nlost_rescan_ms = 10\nrescan_ms = 200\n\
             [[batch]]\nname = \"spin\"\nmode = \"idle\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n",
            page.display(),
            state.display(),
            top.display()
        ),
    )
    .unwrap();
    let d = DaemonProc::start(&config, &state, &page);
    d.wait_for("running", Duration::from_secs(10));
    d.wait_for("waiting for it", Duration::from_secs(5));

    // the LC in a group two levels below the named one
    let inner = groups.make(&format!("{name}/svc/main"));
    let a = lc_bursts("elfen-lcg-a", 0, None, 300, 2_000, (2_000, 2_000));
    join(&inner, a.pid());
    let found = d.wait_for("LC service found", Duration::from_secs(5));
    assert!(found.contains(&a.pid().to_string()), "{found}");
    assert!(
        line_goes_busy(&page, Duration::from_secs(5)),
        "the LC line follows a process two groups below the named one:\n{}",
        d.output()
    );

    // the group removed and made anew (a unit's restart): a new kernel id
    let pa = a.pid();
    drop(a);
    d.wait_for("LC service exited", Duration::from_secs(5));
    let old_id = std::fs::metadata(&top)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    groups.remove_all();
    let t0 = Instant::now();
    let top2 = groups.make(&name);
    assert_eq!(top2, top);
    let inner = groups.make(&format!("{name}/svc/main"));
    let new_id = std::fs::metadata(&top)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    assert_ne!(old_id, new_id, "a new group, a new id");
    let b = lc_bursts("elfen-lcg-b", 0, None, 300, 2_000, (2_000, 2_000));
    join(&inner, b.pid());
    let line = d.wait_for("LC service restarted", Duration::from_secs(5));
    println!("found again after {} ms: {line}", t0.elapsed().as_millis());
    assert!(line.contains(&format!("pid {pa} → {}", b.pid())), "{line}");
    assert!(
        line_goes_busy(&page, Duration::from_secs(5)),
        "the LC line follows the service in its new group:\n{}",
        d.output()
    );
    drop(b);
    drop(d);
    groups.remove_all();
}

/// An existing group's `cpu.idle`, written back by its owner (systemd does
/// at a daemon-reload), is set again at the next rescan, and said.
#[test]
fn a_knob_its_owner_wrote_over_is_written_again() {
    let Some(()) = live_ok("a_knob_its_owner_wrote_over_is_written_again") else {
        return;
    };
    let _one = serial();
    let name = unique("own");
    let g = TestGroup::new(&name, &["cpu", "freezer"]);
    let idle = g.dir("cpu").join("cpu.idle");
    if !idle.exists() {
        elfen_cmd::skip::skip_test(
            "a_knob_its_owner_wrote_over_is_written_again",
            elfen_cmd::skip::Need::CgroupV1("cpu".into()),
            "cpu.idle (Linux 5.15)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let page = PathBuf::from(format!("/dev/shm/{}", unique("page")));
    let config = dir.path().join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}pairs = \"0:1\"\nheartbeat_ms = 20\n\
             [metrics]\nlisten = \"\"\n[signal]\npriority = 0\n\
             [lc]\ncomm = \"nobody-runs-this\"\nrescan_ms = 100\n\
             [[batch]]\nname = \"b\"\nmode = \"idle\"\nidle_method = \"cpu_idle\"\ncgroup = \"{name}\"\n",
            page.display(),
            state.display()
        ),
    )
    .unwrap();
    let d = DaemonProc::start(&config, &state, &page);
    d.wait_for("running", Duration::from_secs(10));
    let read = || std::fs::read_to_string(&idle).unwrap().trim().to_string();
    assert_eq!(read(), "1", "the daemon made the group idle");
    std::fs::write(&idle, "0").unwrap(); // its owner writes it back
    let line = d.wait_for("changed under the daemon", Duration::from_secs(5));
    assert!(line.contains(&name), "{line}");
    assert!(
        wait_until(Duration::from_secs(2), || read() == "1"),
        "idle again"
    );
    drop(d);
    assert_eq!(read(), "0", "the stop restores the original value");
}
