//! Hybrid layout (v1 controllers + a controller-less v2 tree at `unified/`).

use crate::common::*;
use elfen_cgroup::{Controller, Executor, FreezerBackend, GroupPath, Hierarchy, Knob, Layout};
use std::path::Path;
use std::time::Duration;

#[test]
fn detects_hybrid_and_places_controllers() {
    let (root, h) = fake_hybrid();
    let r = root.path();
    assert_eq!(h.layout(), Layout::Hybrid);
    assert_eq!(
        h.freezer(),
        Some(FreezerBackend::V1),
        "v1 freezer by default"
    );
    assert_eq!(h.controller_root(Controller::Cpu).unwrap(), r.join("cpu"));
    assert_eq!(
        h.controller_root(Controller::Freezer).unwrap(),
        r.join("freezer")
    );
    assert!(!h.is_v2(Controller::Freezer));
    let h2 = h.clone().with_freezer(FreezerBackend::V2).unwrap();
    assert_eq!(
        h2.controller_root(Controller::Freezer).unwrap(),
        r.join("unified")
    );
    assert!(h2.is_v2(Controller::Freezer));
    assert!(!h2.is_v2(Controller::Cpuset));

    // Explicit override: the same root read as v1 ignores unified/.
    let v1 = Hierarchy::with_layout(r, Layout::V1).unwrap();
    assert_eq!(v1.unified(), None);
    // ... and unified/ read as v2 has no cpu controller.
    let v2 = Hierarchy::with_layout(r.join("unified"), Layout::V2).unwrap();
    let e = v2.controller_root(Controller::Cpu).unwrap_err().to_string();
    assert!(e.contains("does not offer the cpu controller"), "{e}");
    // A v2 override on a root without a v2 tree fails and says why.
    let e = Hierarchy::with_layout(r.join("cpu"), Layout::V2)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cgroup.controllers") && e.contains("needs a v2 tree"),
        "{e}"
    );
}

#[test]
fn v1_knobs_and_both_freezers() {
    let (root, h) = fake_hybrid();
    let r = root.path();
    let mut ex = Executor::new(h.clone());
    let g = ex
        .create_group(
            "elfen-h",
            &[Controller::Cpuset, Controller::Cpu, Controller::Freezer],
        )
        .unwrap();
    ex.set(
        &g,
        Knob::CpuMax {
            quota_us: Some(25_000),
            period_us: 100_000,
        },
    )
    .unwrap();
    ex.set(&g, Knob::CpusetCpus(vec![1])).unwrap();
    assert_eq!(read(r.join("cpu/elfen-h/cpu.cfs_quota_us")), "25000");
    assert_eq!(read(r.join("cpuset/elfen-h/cpuset.cpus")), "1");
    assert!(ex.freeze(&g, Duration::from_secs(1)).unwrap().is_frozen());
    assert_eq!(read(r.join("freezer/elfen-h/freezer.state")), "FROZEN");
    assert!(
        !r.join("unified/elfen-h").exists(),
        "v1 freezer: unified untouched"
    );
    let rep = ex.restore_all();
    assert!(rep.is_clean(), "{rep}");
    for c in ["cpu", "cpuset", "freezer"] {
        assert!(!r.join(c).join("elfen-h").exists());
    }

    // The unified tree's cgroup.freeze.
    let mut ex2 = Executor::new(h.with_freezer(FreezerBackend::V2).unwrap());
    let g2 = ex2.create_group("elfen-u", &[Controller::Freezer]).unwrap();
    let d = r.join("unified/elfen-u");
    assert!(d.join("cgroup.freeze").exists());
    assert_eq!(
        read(r.join("unified/cgroup.subtree_control")),
        "\n",
        "nothing to enable"
    );
    let t = later(
        d.join("cgroup.events"),
        "populated 1\nfrozen 1\n",
        Duration::from_millis(20),
    );
    let out = ex2.freeze(&g2, Duration::from_secs(10)).unwrap();
    t.join().unwrap();
    assert!(out.is_frozen(), "{out:?}");
    assert_eq!(read(d.join("cgroup.freeze")), "1");
    ex2.add_process(&g2, 31).unwrap();
    assert_eq!(read(d.join("cgroup.procs")), "31");
    let rep = ex2.restore_all();
    assert!(rep.is_clean(), "{rep}");
    assert!(!d.exists());
    assert_eq!(read(r.join("unified/cgroup.procs")), "31");
}

#[test]
fn group_of_a_process_from_proc_cgroup() {
    let (_root, h) = fake_hybrid();
    let text =
        "9:name=systemd:/\n6:freezer:/batch\n3:cpuset:/\n1:cpu,cpuacct:/lc.slice/lc\n0::/u/x\n";
    let f = Path::new("/proc/1/cgroup");
    let at = |h: &Hierarchy, c| h.group_in_proc_cgroup(f, text, c).unwrap();
    assert_eq!(
        at(&h, Controller::Cpu),
        GroupPath::new("lc.slice/lc").unwrap()
    );
    assert_eq!(
        at(&h, Controller::Freezer),
        GroupPath::new("batch").unwrap()
    );
    assert!(at(&h, Controller::Cpuset).is_root());
    let h2 = h.with_freezer(FreezerBackend::V2).unwrap();
    assert_eq!(at(&h2, Controller::Freezer), GroupPath::new("u/x").unwrap());
    let e = h2
        .group_in_proc_cgroup(f, "1:cpu:/\n", Controller::Memory)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no line for the memory hierarchy"), "{e}");
    // This process, on the real machine: some group in each hierarchy.
    if let Ok(real) = Hierarchy::detect(elfen_cgroup::default_root()) {
        if real.supports(Controller::Cpu) {
            real.group_of(std::process::id(), Controller::Cpu).unwrap();
        }
    }
}

#[test]
fn stale_groups_in_the_unified_tree_are_thawed_and_removed() {
    let (root, h) = fake_hybrid();
    let r = root.path();
    // pid 2147483632 does not exist
    let u = r.join("unified/elfen-bench-2147483632-x");
    put(&u, &[("cgroup.freeze", "1\n"), ("cgroup.procs", "55\n")]);
    put(
        &r.join("freezer/elfen-bench-2147483632-x"),
        &[("freezer.state", "FROZEN\n"), ("cgroup.procs", "")],
    );
    let ex = Executor::new(h);
    let removed = ex.remove_stale("elfen-bench-");
    assert_eq!(
        removed,
        [u.clone(), r.join("freezer/elfen-bench-2147483632-x")]
    );
    assert_eq!(read(r.join("unified/cgroup.procs")), "55");
}
