//! The egress program on a real cgroup2 group: packets of a process in the
//! group pass it, packets of a process outside do not, and detaching (or
//! dropping the program) ends it. The priority's effect on queueing is the
//! daemon's netns test (`crates/daemon/tests/it/egress.rs`).

use elfen_bpf::egress::{EgressMarking, EgressProgram};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A cgroup2 group made for the test, removed whatever happens.
struct TempGroup(PathBuf);

impl Drop for TempGroup {
    fn drop(&mut self) {
        // move anything left to the parent, then remove
        if let Ok(p) = std::fs::read_to_string(self.0.join("cgroup.procs")) {
            for pid in p.split_whitespace() {
                let _ = std::fs::write(self.0.parent().unwrap().join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The cgroup2 tree here (v2 or hybrid), or why not.
fn cgroup2() -> Result<PathBuf, String> {
    for p in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
        if Path::new(p).join("cgroup.controllers").exists() {
            return Ok(PathBuf::from(p));
        }
    }
    Err("no cgroup2 tree at /sys/fs/cgroup or /sys/fs/cgroup/unified".into())
}

/// Sends `n` UDP datagrams to 127.0.0.1:9 from a shell that first joins
/// `procs` (if given).
fn send_from(procs: Option<&Path>, n: u32) {
    let join = procs.map_or(String::new(), |p| format!("echo $$ > {} && ", p.display()));
    let st = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{join}for i in $(seq {n}); do echo x > /dev/udp/127.0.0.1/9; done"
        ))
        .status()
        .expect("bash");
    assert!(st.success());
}

#[test]
fn packets_of_the_group_and_only_those_are_marked() {
    use elfen_cmd::skip::{Need, skip};
    if !Need::Root.present() {
        skip(Need::Root, "cgroup BPF");
        return;
    }
    let root = match cgroup2() {
        Ok(r) => r,
        Err(e) => {
            skip(Need::CgroupV2Tree, e);
            return;
        }
    };
    let dir = root.join(format!("elfen-egress-test-{}", std::process::id()));
    std::fs::create_dir(&dir).expect("creating the test group");
    let g = TempGroup(dir);
    let mut prog = EgressProgram::load(EgressMarking {
        priority: 1,
        mark: 7,
    })
    .expect("the egress program loads as root");
    prog.attach(&g.0).expect("attach");
    assert_eq!(prog.groups().count(), 1);
    send_from(None, 5);
    assert_eq!(
        prog.packets(),
        0,
        "a process outside the group is not marked"
    );
    send_from(Some(&g.0.join("cgroup.procs")), 5);
    assert!(
        prog.packets() >= 5,
        "5 datagrams from the group, {} marked",
        prog.packets()
    );
    let n = prog.packets();
    assert!(prog.detach(&g.0));
    send_from(Some(&g.0.join("cgroup.procs")), 3);
    assert_eq!(prog.packets(), n, "detached: nothing more is marked");
    // a group that is no cgroup2 directory is refused, naming it
    let e = prog.attach(Path::new("/proc")).unwrap_err();
    assert!(e.to_string().contains("/proc"), "{e}");
}
