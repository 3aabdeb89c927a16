//! Integration tests for elfen-topo: topology over fake sysfs trees, pairing,
//! pinning and system info. Nothing here asserts facts about the test machine.

use std::fs;
use std::path::Path;

use elfen_topo::{
    CgroupMode, Pair, PairingSource, PinGuard, SysPaths, SystemInfo, TopoError, Topology,
    current_affinity, format_pair_spec, parse_pair_spec, pin_current_thread, plan_pairs,
};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------
// Fake sysfs trees
// ---------------------------------------------------------------------------------

/// Writes `content` to `root/rel`, creating parent directories.
fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

/// Builds a sysfs CPU root: `online` holds `online`, and each entry of `cores` is one
/// physical core's `thread_siblings_list` (core_id = its index, package 0). Every CPU
/// named in `cores` gets a directory, online or not, as the kernel does.
fn fake_sysfs(online: &str, cores: &[&str]) -> TempDir {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "online", &format!("{online}\n"));
    for (core_id, siblings) in cores.iter().enumerate() {
        for cpu in elfen_topo::parse_cpu_list(siblings).unwrap() {
            let topo = format!("cpu{cpu}/topology");
            write(
                dir.path(),
                &format!("{topo}/core_id"),
                &format!("{core_id}\n"),
            );
            write(dir.path(), &format!("{topo}/physical_package_id"), "0\n");
            write(
                dir.path(),
                &format!("{topo}/thread_siblings_list"),
                &format!("{siblings}\n"),
            );
        }
    }
    dir
}

/// 2-way SMT numbered like Intel: cpu N and N+2 share a core.
fn smt2() -> TempDir {
    fake_sysfs("0-3", &["0,2", "1,3"])
}

/// 4-way SMT, two cores, siblings interleaved.
fn smt4() -> TempDir {
    fake_sysfs("0-7", &["0,2,4,6", "1,3,5,7"])
}

/// No SMT: every lane its own core.
fn no_smt(n: u32) -> TempDir {
    let cores: Vec<String> = (0..n).map(|c| c.to_string()).collect();
    let cores: Vec<&str> = cores.iter().map(String::as_str).collect();
    fake_sysfs(&format!("0-{}", n - 1), &cores)
}

/// 2-way SMT with cpu2 offline: its directory exists (with garbage that must not be
/// read) and cpu0's sibling list still names it.
fn smt2_cpu2_offline() -> TempDir {
    let dir = fake_sysfs("0-1,3", &["0,2", "1,3"]);
    write(dir.path(), "cpu2/topology/core_id", "garbage\n");
    dir
}

fn topo(dir: &TempDir) -> Topology {
    Topology::from_sysfs(dir.path()).unwrap()
}

/// The error message of a failed `from_sysfs`.
fn topo_err(dir: &TempDir) -> String {
    Topology::from_sysfs(dir.path()).unwrap_err().to_string()
}

fn pair(request: u32, batch: &[u32]) -> Pair {
    Pair {
        request,
        batch: batch.to_vec(),
    }
}

// ---------------------------------------------------------------------------------
// Topology
// ---------------------------------------------------------------------------------

#[test]
fn smt2_non_contiguous_siblings() {
    let t = topo(&smt2());
    assert_eq!(t.cpus(), vec![0, 1, 2, 3]);
    assert_eq!(t.smt_ways(), 2);
    assert!(t.has_smt());
    assert_eq!(t.lane(2).unwrap().siblings, vec![0, 2]);
    assert_eq!(t.lane(2).unwrap().core_id, 0);
    assert_eq!(t.lane(3).unwrap().siblings, vec![1, 3]);
    assert_eq!(t.lane(3).unwrap().core_id, 1);
    assert_eq!(t.cores(), vec![vec![0, 2], vec![1, 3]]);
    assert!(t.lane(4).is_none());
}

#[test]
fn smt4_lanes() {
    let t = topo(&smt4());
    assert_eq!(t.smt_ways(), 4);
    assert_eq!(t.lane(5).unwrap().siblings, vec![1, 3, 5, 7]);
    assert_eq!(t.cores().len(), 2);
}

#[test]
fn no_smt_lanes_are_their_own_core() {
    let t = topo(&no_smt(4));
    assert_eq!(t.smt_ways(), 1);
    assert!(!t.has_smt());
    for lane in &t.lanes {
        assert_eq!(lane.siblings, vec![lane.cpu]);
        assert_eq!(lane.core_id, lane.cpu);
        assert_eq!(lane.package_id, 0);
    }
}

#[test]
fn reads_package_ids() {
    let dir = no_smt(2);
    write(dir.path(), "cpu1/topology/physical_package_id", "1\n");
    assert_eq!(topo(&dir).lane(1).unwrap().package_id, 1);
}

#[test]
fn offline_cpus_are_ignored_and_filtered_from_siblings() {
    let t = topo(&smt2_cpu2_offline());
    assert_eq!(t.cpus(), vec![0, 1, 3]);
    assert_eq!(t.lane(0).unwrap().siblings, vec![0]);
    assert_eq!(t.lane(3).unwrap().siblings, vec![1, 3]);
    assert!(t.lane(2).is_none());
    assert_eq!(t.smt_ways(), 2);
}

/// Ways to break the 2-way SMT tree (`None` = delete the path) and what the error
/// must say. Every message must also start with the tree's path.
const BROKEN_TREES: &[(&str, Option<&str>, &[&str])] = &[
    (
        "cpu3/topology/core_id",
        Some("abc\n"),
        &["/cpu3/topology/core_id: expected an integer, found \"abc\""],
    ),
    (
        "online",
        Some("zero-three\n"),
        &["/online: invalid cpu list \"zero-three\""],
    ),
    (
        "cpu1/topology/thread_siblings_list",
        Some("1,,3\n"),
        &[
            "/cpu1/topology/thread_siblings_list: invalid cpu list",
            "empty entry",
        ],
    ),
    ("online", None, &["/online: cannot read"]),
    ("cpu1/topology", None, &["/cpu1/topology/", ": cannot read"]),
    ("online", Some("\n"), &["/online: no online cpus"]),
    (
        "cpu2/topology/thread_siblings_list",
        Some("0\n"),
        &["/cpu2/topology/thread_siblings_list: sibling list \"0\" does not contain cpu2 itself"],
    ),
    (
        "cpu2/topology/thread_siblings_list",
        Some("2\n"),
        &["cpu0 lists siblings \"0,2\" but cpu2 lists \"2\""],
    ),
];

#[test]
fn broken_trees_give_errors_naming_file_and_problem() {
    for (rel, content, needles) in BROKEN_TREES {
        let dir = smt2();
        let path = dir.path().join(rel);
        match content {
            Some(c) => write(dir.path(), rel, c),
            None if path.is_dir() => fs::remove_dir_all(&path).unwrap(),
            None => fs::remove_file(&path).unwrap(),
        }
        let e = topo_err(&dir);
        assert!(e.starts_with(&dir.path().display().to_string()), "{e}");
        for needle in *needles {
            assert!(e.contains(needle), "{rel} = {content:?}: {e}");
        }
    }
}

#[test]
fn missing_file_is_an_io_error() {
    let dir = smt2();
    fs::remove_file(dir.path().join("online")).unwrap();
    let e = Topology::from_sysfs(dir.path()).unwrap_err();
    assert!(matches!(e, TopoError::Io { .. }), "{e:?}");
}

#[test]
fn detect_reads_the_running_machine() {
    // Whatever the machine, it has a lane and the lane we are on is online.
    if let Ok(t) = Topology::detect() {
        assert!(!t.lanes.is_empty());
        assert!(t.smt_ways() >= 1);
        let allowed = current_affinity().unwrap();
        assert!(allowed.iter().any(|c| t.lane(*c).is_some()));
    }
}

// ---------------------------------------------------------------------------------
// Pairing
// ---------------------------------------------------------------------------------

#[test]
fn smt2_pairs_siblings() {
    let plan = plan_pairs(&topo(&smt2()), None).unwrap();
    assert_eq!(plan.source, PairingSource::Siblings);
    assert_eq!(plan.pairs, vec![pair(0, &[2]), pair(1, &[3])]);
    assert!(plan.unpaired.is_empty());
}

#[test]
fn smt4_pairs_one_request_lane_with_three_batch_lanes() {
    let plan = plan_pairs(&topo(&smt4()), None).unwrap();
    assert_eq!(plan.source, PairingSource::Siblings);
    assert_eq!(plan.pairs, vec![pair(0, &[2, 4, 6]), pair(1, &[3, 5, 7])]);
}

#[test]
fn smt_with_offline_sibling_leaves_the_lonely_lane_unpaired() {
    let plan = plan_pairs(&topo(&smt2_cpu2_offline()), None).unwrap();
    assert_eq!(plan.source, PairingSource::Siblings);
    assert_eq!(plan.pairs, vec![pair(1, &[3])]);
    assert_eq!(plan.unpaired, vec![0]);
}

#[test]
fn no_smt_defaults_to_consecutive_cpus() {
    let plan = plan_pairs(&topo(&no_smt(4)), None).unwrap();
    assert_eq!(plan.source, PairingSource::DefaultConsecutive);
    assert_eq!(plan.pairs, vec![pair(0, &[1]), pair(2, &[3])]);

    let plan = plan_pairs(&topo(&no_smt(3)), None).unwrap();
    assert_eq!(plan.pairs, vec![pair(0, &[1])]);
    assert_eq!(plan.unpaired, vec![2]);
    assert!(
        plan.describe().contains("unpaired: 2"),
        "{}",
        plan.describe()
    );
    assert!(
        plan.describe().contains("consecutive"),
        "{}",
        plan.describe()
    );

    let plan = plan_pairs(&topo(&no_smt(1)), None).unwrap();
    assert!(plan.is_empty());
    assert_eq!(plan.unpaired, vec![0]);
}

#[test]
fn no_smt_default_pairs_consecutive_online_cpus_across_holes() {
    let dir = fake_sysfs("0,2-4", &["0", "1", "2", "3", "4"]);
    let plan = plan_pairs(&topo(&dir), None).unwrap();
    assert_eq!(plan.pairs, vec![pair(0, &[2]), pair(3, &[4])]);
}

#[test]
fn explicit_specs() {
    let t = topo(&no_smt(4));
    let plan = plan_pairs(&t, Some("0:1")).unwrap();
    assert_eq!(plan.source, PairingSource::Explicit);
    assert_eq!(plan.pairs, vec![pair(0, &[1])]);
    assert_eq!(plan.unpaired, vec![2, 3]);

    let plan = plan_pairs(&t, Some("2:3, 0:1")).unwrap();
    assert_eq!(plan.pairs, vec![pair(2, &[3]), pair(0, &[1])]);

    let plan = plan_pairs(&t, Some("3:0+1+2")).unwrap();
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0], pair(3, &[0, 1, 2]));
    assert!(plan.unpaired.is_empty());

    // On SMT a spec is taken as given, even across cores, as long as lanes are online.
    let plan = plan_pairs(&topo(&smt2()), Some("0:1")).unwrap();
    assert_eq!(plan.source, PairingSource::Explicit);
    assert_eq!(plan.into_pairs(), vec![pair(0, &[1])]);
}

#[test]
fn malformed_specs() {
    for (spec, needle) in [
        ("0-1", "pair \"0-1\" must be request:batch"),
        ("", "empty"),
        ("  ", "empty"),
        ("0:", "expected a cpu number, found \"\""),
        ("0:x", "found \"x\""),
        ("a:1", "found \"a\""),
        ("0:1,", "pair \"\" must be request:batch"),
        ("0:1+", "found \"\""),
        ("0:+1", "found \"\""),
        ("0:1:2", "found \"1:2\""),
        ("-1:0", "found \"-1\""),
    ] {
        let e = parse_pair_spec(spec).unwrap_err();
        assert!(matches!(e, TopoError::PairSpec { .. }), "{spec:?}: {e:?}");
        let e = e.to_string();
        assert!(e.starts_with(&format!("pairing spec {spec:?}: ")), "{e}");
        assert!(e.contains(needle), "{spec:?}: {e}");
    }
}

#[test]
fn spec_must_fit_the_machine() {
    let t = topo(&smt2_cpu2_offline());
    for (spec, needle) in [
        ("0:2", "lane 2 is not online (online: 0-1,3)"),
        ("9:0", "lane 9 is not online"),
        ("0:1,1:3", "lane 1 is used twice"),
        ("0:1,3:1", "lane 1 is used twice"),
        ("0:1+1", "lane 1 is used twice"),
        ("1:1", "lane 1 cannot be its own batch lane"),
    ] {
        let e = plan_pairs(&t, Some(spec)).unwrap_err().to_string();
        assert!(e.contains(needle), "{spec:?}: {e}");
        assert!(e.contains(&format!("{spec:?}")), "{spec:?}: {e}");
    }
}

#[test]
fn spec_formatting_round_trips() {
    for spec in ["0:1", "0:1,2:3", "0:1+2,5:4"] {
        assert_eq!(format_pair_spec(&parse_pair_spec(spec).unwrap()), spec);
    }
    assert_eq!(pair(0, &[2, 4]).to_string(), "0:2+4");
}

// ---------------------------------------------------------------------------------
// Pinning (each test runs on its own thread; the harness thread is never pinned)
// ---------------------------------------------------------------------------------

fn on_fresh_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().unwrap()
}

#[test]
fn pin_guard_pins_and_restores() {
    on_fresh_thread(|| {
        let before = current_affinity().unwrap();
        assert!(!before.is_empty());
        let target = *before.last().unwrap();
        {
            let guard = PinGuard::new(target).unwrap();
            assert_eq!(current_affinity().unwrap(), vec![target]);
            assert_eq!(guard.previous(), before.as_slice());
            {
                // Nested guards unwind in order.
                let first = before[0];
                let _inner = PinGuard::new(first).unwrap();
                assert_eq!(current_affinity().unwrap(), vec![first]);
            }
            assert_eq!(current_affinity().unwrap(), vec![target]);
        }
        assert_eq!(current_affinity().unwrap(), before);

        let _set = PinGuard::with_cpus(&before).unwrap();
        assert_eq!(current_affinity().unwrap(), before);
    });
}

#[test]
fn pinning_is_thread_local() {
    let before = current_affinity().unwrap();
    let target = before[0];
    let pinned = on_fresh_thread(move || {
        pin_current_thread(target).unwrap();
        current_affinity().unwrap()
    });
    assert_eq!(pinned, vec![target]);
    assert_eq!(current_affinity().unwrap(), before);
}

#[test]
fn pinning_to_an_unavailable_cpu_fails_and_changes_nothing() {
    on_fresh_thread(|| {
        let before = current_affinity().unwrap();
        let e = PinGuard::new(elfen_topo::MAX_CPU_ID)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("sched_setaffinity(65535): "), "{e}");
        let e = pin_current_thread(elfen_topo::MAX_CPU_ID + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
        assert_eq!(current_affinity().unwrap(), before);
    });
}

// ---------------------------------------------------------------------------------
// System info
// ---------------------------------------------------------------------------------

fn sys_paths(root: &Path) -> SysPaths {
    SysPaths {
        cpu_root: root.join("cpu"),
        proc_root: root.join("proc"),
        cgroup_root: root.join("cgroup"),
    }
}

#[test]
fn system_info_from_empty_tree_is_all_none() {
    let dir = TempDir::new().unwrap();
    let info = SystemInfo::collect_from(&sys_paths(dir.path()));
    assert_eq!(info.cpu_model, None);
    assert_eq!(info.online_cpu_count, None);
    assert_eq!(info.online_cpus, None);
    assert_eq!(info.smt_ways, None);
    assert_eq!(info.l2_bytes, None);
    assert_eq!(info.l3_bytes, None);
    assert_eq!(info.mem_total_bytes, None);
    assert_eq!(info.cgroup_mode, None);
    assert!(!info.features.smt);
    assert!(!info.features.umwait_allowed);
}

#[test]
fn system_info_from_fake_tree() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    let cpu = smt2();
    fs::rename(cpu.path(), root.join("cpu")).unwrap();
    for (index, level, kind, size) in [
        (0, 1, "Data", "48K"),
        (1, 1, "Instruction", "32K"),
        (2, 2, "Unified", "2048K"),
        (3, 3, "Unified", "32M"),
    ] {
        let d = format!("cpu/cpu0/cache/index{index}");
        write(root, &format!("{d}/level"), &format!("{level}\n"));
        write(root, &format!("{d}/type"), &format!("{kind}\n"));
        write(root, &format!("{d}/size"), &format!("{size}\n"));
    }
    write(
        root,
        "proc/cpuinfo",
        "processor\t: 0\nmodel name\t: Fake CPU @ 3.00GHz\nflags\t: fpu\n",
    );
    write(root, "proc/meminfo", "MemTotal:        1024 kB\n");
    fs::create_dir_all(root.join("cgroup/cpuset")).unwrap();

    let paths = sys_paths(root);
    let info = SystemInfo::collect_from(&paths);
    assert_eq!(info.cpu_model.as_deref(), Some("Fake CPU @ 3.00GHz"));
    assert_eq!(info.online_cpu_count, Some(4));
    assert_eq!(info.online_cpus.as_deref(), Some("0-3"));
    assert_eq!(info.smt_ways, Some(2));
    assert!(info.features.smt);
    assert_eq!(info.l2_bytes, Some(2 << 20));
    assert_eq!(info.l3_bytes, Some(32 << 20));
    assert_eq!(info.mem_total_bytes, Some(1 << 20));
    assert_eq!(info.cgroup_mode, Some(CgroupMode::V1));

    fs::create_dir_all(root.join("cgroup/unified")).unwrap();
    assert_eq!(
        SystemInfo::collect_from(&paths).cgroup_mode,
        Some(CgroupMode::Hybrid)
    );
    write(root, "cgroup/cgroup.controllers", "cpu cpuset\n");
    assert_eq!(
        SystemInfo::collect_from(&paths).cgroup_mode,
        Some(CgroupMode::V2)
    );
}

#[test]
fn system_info_round_trips_through_json() {
    let info = SystemInfo::collect();
    if let (Some(n), Some(list)) = (info.online_cpu_count, &info.online_cpus) {
        assert_eq!(elfen_topo::parse_cpu_list(list).unwrap().len(), n);
    }
    let json = serde_json::to_string(&info).unwrap();
    let back: SystemInfo = serde_json::from_str(&json).unwrap();
    assert_eq!(back, info);
}
