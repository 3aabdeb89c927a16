//! **Fake cgroup roots** for tests, this crate's and other crates': temp
//! dirs with the files the kernel would show in a v1, v2 or hybrid
//! hierarchy ([`fake_v1`], [`fake_v2`], [`fake_hybrid`]), and a create hook
//! that populates new groups the way the kernel does ([`hook`]). Behind
//! the feature `fake` (a dev-dependency's feature); the helpers panic on an
//! I/O error, as a test would.

use elfen_cgroup::{Controller, CreateHook, Hierarchy};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The controllers with v1 hierarchies of their own.
pub const V1_CONTROLLERS: [Controller; 5] = [
    Controller::Cpuset,
    Controller::Cpu,
    Controller::Freezer,
    Controller::Memory,
    Controller::Io,
];

/// Writes `files` (name, content) into `dir`, creating it.
pub fn put(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (f, c) in files {
        std::fs::write(dir.join(f), c).unwrap();
    }
}

/// Writes the files in `dir` that do not exist yet.
pub fn put_missing(dir: &Path, files: &[(&str, &str)]) {
    for (f, c) in files {
        let p = dir.join(f);
        if !p.exists() {
            std::fs::write(p, c).unwrap();
        }
    }
}

/// Files of a new v1 group in `ctl`'s hierarchy, as the kernel shows them.
pub fn v1_group_files(ctl: Controller) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![("cgroup.procs", ""), ("tasks", "")];
    v.extend(match ctl {
        Controller::Cpuset => vec![
            ("cpuset.cpus", "\n"),
            ("cpuset.mems", "\n"),
            ("cpuset.effective_cpus", "\n"),
        ],
        Controller::Cpu => vec![
            ("cpu.cfs_quota_us", "-1\n"),
            ("cpu.cfs_period_us", "100000\n"),
            ("cpu.shares", "1024\n"),
            ("cpu.idle", "0\n"),
        ],
        Controller::Freezer => vec![("freezer.state", "THAWED\n")],
        Controller::Memory => vec![
            ("memory.limit_in_bytes", "9223372036854771712\n"),
            ("memory.soft_limit_in_bytes", "9223372036854771712\n"),
            ("memory.usage_in_bytes", "0\n"),
        ],
        Controller::Io => vec![
            ("blkio.throttle.read_bps_device", ""),
            ("blkio.throttle.write_bps_device", ""),
            ("blkio.throttle.read_iops_device", ""),
            ("blkio.throttle.write_iops_device", ""),
            ("blkio.throttle.io_service_bytes", "Total 0\n"),
            ("blkio.throttle.io_serviced", "Total 0\n"),
            ("blkio.bfq.weight", "100\n"),
        ],
        Controller::Unified => vec![],
    });
    v
}

/// Files of a new v2 group (all controllers enabled).
pub fn v2_group_files() -> Vec<(&'static str, &'static str)> {
    vec![
        ("cgroup.procs", ""),
        ("cgroup.threads", ""),
        ("cgroup.freeze", "0\n"),
        ("cgroup.events", "populated 0\nfrozen 0\n"),
        ("cgroup.subtree_control", "\n"),
        ("cpu.max", "max 100000\n"),
        ("cpu.weight", "100\n"),
        ("cpu.idle", "0\n"),
        ("cpuset.cpus", "\n"),
        ("cpuset.mems", "\n"),
        ("cpuset.cpus.effective", "0-3\n"),
        ("cpuset.mems.effective", "0\n"),
        ("memory.max", "max\n"),
        ("memory.high", "max\n"),
        ("memory.current", "0\n"),
        ("io.max", ""),
        ("io.weight", "default 100\n"),
        // present while the BFQ scheduler is loaded
        ("io.bfq.weight", "default 100\n"),
        ("io.stat", ""),
    ]
}

/// The hook populating new groups: v2 files under the v2 tree, v1 files
/// elsewhere.
pub fn hook(v2_tree: Option<PathBuf>) -> CreateHook {
    Arc::new(move |dir: &Path, ctl: Controller| {
        if v2_tree.as_ref().is_some_and(|t| dir.starts_with(t)) {
            put_missing(dir, &v2_group_files());
        } else {
            put_missing(dir, &v1_group_files(ctl));
        }
    })
}

/// v1 root files of each controller (the root group has no freezer.state).
pub fn make_v1(root: &Path, ctls: &[Controller]) {
    for &c in ctls {
        let d = root.join(c.v1_name());
        let mut files = v1_group_files(c);
        files.retain(|(f, _)| *f != "freezer.state");
        put(&d, &files);
        if c == Controller::Cpuset {
            put(
                &d,
                &[
                    ("cpuset.cpus", "0-3\n"),
                    ("cpuset.mems", "0\n"),
                    ("cpuset.effective_cpus", "0-3\n"),
                ],
            );
        }
    }
}

/// A fake v1 root with every controller.
pub fn fake_v1() -> (tempfile::TempDir, Hierarchy) {
    let d = tempfile::tempdir().unwrap();
    make_v1(d.path(), &V1_CONTROLLERS);
    let h = Hierarchy::detect(d.path())
        .unwrap()
        .with_create_hook(hook(None));
    (d, h)
}

/// A fake v2 root offering cpuset, cpu, io, memory.
pub fn fake_v2() -> (tempfile::TempDir, Hierarchy) {
    let d = tempfile::tempdir().unwrap();
    put(
        d.path(),
        &[
            ("cgroup.controllers", "cpuset cpu io memory hugetlb pids\n"),
            ("cgroup.subtree_control", "\n"),
            ("cgroup.procs", ""),
            ("cpuset.cpus.effective", "0-3\n"),
            ("cpuset.mems.effective", "0\n"),
        ],
    );
    let h = Hierarchy::detect(d.path())
        .unwrap()
        .with_create_hook(hook(Some(d.path().to_path_buf())));
    (d, h)
}

/// A fake hybrid root: v1 controllers plus `unified/` without controllers.
pub fn fake_hybrid() -> (tempfile::TempDir, Hierarchy) {
    let d = tempfile::tempdir().unwrap();
    make_v1(d.path(), &V1_CONTROLLERS);
    put(
        &d.path().join("unified"),
        &[
            ("cgroup.controllers", "hugetlb\n"),
            ("cgroup.subtree_control", "\n"),
            ("cgroup.procs", ""),
        ],
    );
    let h = Hierarchy::detect(d.path())
        .unwrap()
        .with_create_hook(hook(Some(d.path().join("unified"))));
    (d, h)
}
