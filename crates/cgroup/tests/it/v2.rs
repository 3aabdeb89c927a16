//! v2 layout on a fake root.

use crate::common::*;
use elfen_cgroup::{
    Controller, Device, Executor, FreezeOutcome, FreezerBackend, FreezerState, Hierarchy, Knob,
    Layout,
};
use std::time::Duration;

#[test]
fn create_enables_controllers_and_sets_knobs() {
    let (root, h) = fake_v2();
    let r = root.path();
    assert_eq!(h.layout(), Layout::V2);
    assert_eq!(h.freezer(), Some(FreezerBackend::V2));
    let state = r.join("state.json");
    let (mut ex, _) = Executor::with_state_file(h, &state).unwrap();
    let g = ex
        .create_group(
            "elfen/batch",
            &[
                Controller::Cpu,
                Controller::Cpuset,
                Controller::Memory,
                Controller::Io,
            ],
        )
        .unwrap();
    // One write per ancestor; the root's is recorded (not ours), elfen's not.
    assert_eq!(
        read(r.join("cgroup.subtree_control")),
        "+cpuset +cpu +memory +io"
    );
    assert_eq!(
        read(r.join("elfen/cgroup.subtree_control")),
        "+cpuset +cpu +memory +io"
    );
    let enabled: Vec<_> = ex
        .record()
        .enabled
        .iter()
        .map(|e| (e.group.as_str().to_string(), e.controller))
        .collect();
    assert_eq!(
        enabled,
        [
            ("".into(), Controller::Cpuset),
            ("".into(), Controller::Cpu),
            ("".into(), Controller::Memory),
            ("".into(), Controller::Io),
        ]
    );
    assert!(read(&state).contains("\"enabled\""));

    let d = r.join("elfen/batch");
    ex.apply(&[
        (
            g.clone(),
            Knob::CpuMax {
                quota_us: Some(50_000),
                period_us: 100_000,
            },
        ),
        (g.clone(), Knob::CpuShares(2048)),
        (g.clone(), Knob::CpuIdle(true)),
        (g.clone(), Knob::CpusetCpus(vec![1, 2])),
        (g.clone(), Knob::MemoryMax(Some(1 << 20))),
        (
            g.clone(),
            Knob::IoMax {
                device: Device { major: 8, minor: 0 },
                read_bps: Some(1 << 20),
                write_bps: None,
                read_iops: None,
                write_iops: Some(200),
            },
        ),
    ])
    .unwrap();
    assert_eq!(read(d.join("cpu.max")), "50000 100000");
    assert_eq!(
        read(d.join("cpu.weight")),
        "200",
        "2048 shares = weight 200"
    );
    assert_eq!(read(d.join("cpu.idle")), "1");
    assert_eq!(read(d.join("cpuset.cpus")), "1-2");
    assert_eq!(
        read(d.join("cpuset.mems")),
        "\n",
        "v2: empty mems inherit; untouched"
    );
    assert_eq!(read(d.join("memory.max")), "1048576");
    assert_eq!(
        read(d.join("io.max")),
        "8:0 rbps=1048576 wbps=max riops=max wiops=200"
    );
    // io.max reads back (the kernel shows all four fields).
    std::fs::write(
        d.join("io.max"),
        "8:0 rbps=1048576 wbps=max riops=max wiops=200\n",
    )
    .unwrap();
    age(d.join("io.max"));
    let same = Knob::IoMax {
        device: Device { major: 8, minor: 0 },
        read_bps: Some(1 << 20),
        write_bps: None,
        read_iops: None,
        write_iops: Some(200),
    };
    assert!(ex.set(&g, same).unwrap().is_noop());
    assert!(untouched(d.join("io.max")));

    ex.add_process(&g, 4242).unwrap();
    assert_eq!(
        read(d.join("cgroup.procs")),
        "4242",
        "one directory for every controller"
    );
    std::fs::write(d.join("memory.current"), "8192\n").unwrap();
    assert_eq!(ex.memory_current(&g).unwrap(), 8192);

    ex.set(
        &g,
        Knob::CpuMax {
            quota_us: None,
            period_us: 100_000,
        },
    )
    .unwrap();
    ex.set(&g, Knob::MemoryMax(None)).unwrap();
    assert_eq!(read(d.join("cpu.max")), "max 100000");
    assert_eq!(read(d.join("memory.max")), "max");

    // Restore: groups removed, controllers turned off in one write.
    let rep = ex.restore_all();
    assert!(rep.is_clean(), "{rep}");
    assert!(!r.join("elfen").exists());
    assert_eq!(
        read(r.join("cgroup.subtree_control")),
        "-io -memory -cpu -cpuset"
    );
    assert_eq!(read(r.join("cgroup.procs")), "4242");
    assert!(!state.exists());
}

#[test]
fn cpuset_is_checked_against_the_parents_effective_cpus() {
    let (root, h) = fake_v2();
    let r = root.path();
    let mut ex = Executor::new(h);
    let g = ex.create_group("b", &[Controller::Cpuset]).unwrap();
    let e = ex
        .set(&g, Knob::CpusetCpus(vec![2, 5]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("b/cpuset.cpus")
            && e.contains("cpus 5 not in the parent's")
            && e.contains("cpuset.cpus.effective"),
        "{e}"
    );
    assert_eq!(read(r.join("b/cpuset.cpus")), "\n");
    // v2 allows emptying (= inherit the parent's): written as a newline,
    // since a write of no bytes never reaches the kernel.
    ex.set(&g, Knob::CpusetCpus(vec![3])).unwrap();
    ex.set(&g, Knob::CpusetCpus(vec![])).unwrap();
    assert_eq!(read(r.join("b/cpuset.cpus")), "\n");
}

#[test]
fn controller_not_offered_is_unsupported() {
    let d = tempfile::tempdir().unwrap();
    put(
        d.path(),
        &[
            ("cgroup.controllers", "memory pids\n"),
            ("cgroup.subtree_control", ""),
        ],
    );
    let h = Hierarchy::detect(d.path()).unwrap();
    let mut ex = Executor::new(h);
    let e = ex
        .create_group("x", &[Controller::Cpu])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cgroup.controllers") && e.contains("does not offer the cpu controller"),
        "{e}"
    );
    assert!(!d.path().join("x").exists());
    assert_eq!(read(d.path().join("cgroup.subtree_control")), "");
}

#[test]
fn freezer_waits_for_frozen_in_cgroup_events() {
    let (root, h) = fake_v2();
    let r = root.path();
    let mut ex = Executor::new(h);
    let g = ex.create_group("f", &[Controller::Freezer]).unwrap();
    assert_eq!(
        read(r.join("cgroup.subtree_control")),
        "\n",
        "the freezer needs no enabling"
    );
    let ev = r.join("f/cgroup.events");
    let t = later(
        ev.clone(),
        "populated 1\nfrozen 1\n",
        Duration::from_millis(30),
    );
    let out = ex.freeze(&g, Duration::from_secs(10)).unwrap();
    t.join().unwrap();
    assert!(out.is_frozen(), "{out:?}");
    assert_eq!(read(r.join("f/cgroup.freeze")), "1");

    ex.thaw(&g).unwrap();
    assert_eq!(read(r.join("f/cgroup.freeze")), "0");
    std::fs::write(&ev, "populated 1\nfrozen 0\n").unwrap();
    assert_eq!(ex.freezer_state(&g).unwrap(), FreezerState::Thawed);
    let out = ex.freeze(&g, Duration::from_millis(20)).unwrap();
    assert!(
        matches!(
            out,
            FreezeOutcome::TimedOut {
                state: FreezerState::Freezing,
                ..
            }
        ),
        "{out:?}"
    );
    // Removal thaws first.
    ex.remove_group(&g).unwrap();
    assert!(!r.join("f").exists());
}

/// Confined to a delegated subtree, the executor creates groups below it
/// turning controllers on only in the delegated group's own
/// `cgroup.subtree_control`; a controller systemd did not delegate (off in
/// the slice above) is refused before any write, naming the file.
#[test]
fn a_delegated_executor_never_writes_above_its_subtree() {
    let (root, h) = fake_v2();
    let r = root.path();
    // systemd's tree: cpu and cpuset on down to the unit (Delegate=yes)
    std::fs::write(r.join("cgroup.subtree_control"), "cpuset cpu\n").unwrap();
    let unit = r.join("system.slice/elfen-daemon.service");
    put(
        &r.join("system.slice"),
        &[
            ("cgroup.procs", ""),
            ("cgroup.subtree_control", "cpuset cpu\n"),
            ("cgroup.controllers", "cpuset cpu\n"),
        ],
    );
    put(
        &unit,
        &[
            ("cgroup.procs", ""),
            ("cgroup.subtree_control", "\n"),
            ("cgroup.controllers", "cpuset cpu\n"),
        ],
    );
    for f in [
        r.join("cgroup.subtree_control"),
        r.join("system.slice/cgroup.subtree_control"),
    ] {
        age(&f);
    }
    let mut ex = Executor::new(h);
    ex.set_delegated(Some(
        elfen_cgroup::GroupPath::new("system.slice/elfen-daemon.service").unwrap(),
    ));
    ex.create_group(
        "system.slice/elfen-daemon.service/batch-b",
        &[Controller::Cpu, Controller::Cpuset],
    )
    .unwrap();
    assert_eq!(read(unit.join("cgroup.subtree_control")), "+cpuset +cpu");
    assert!(untouched(r.join("cgroup.subtree_control")));
    assert!(untouched(r.join("system.slice/cgroup.subtree_control")));
    // memory is not on in system.slice: it would have to be turned on there
    let e = ex
        .create_group(
            "system.slice/elfen-daemon.service/batch-m",
            &[Controller::Memory],
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("above system.slice/elfen-daemon.service") && e.contains("memory"),
        "{e}"
    );
    assert!(!unit.join("batch-m").exists(), "nothing created");
    assert!(untouched(r.join("cgroup.subtree_control")));
    ex.restore_all();
}

/// A group's owner freezes it under the executor (`podman pause`): told
/// so, the executor restores the owner's value at the end, not the one it
/// found first; a knob it never changed stays unrecorded.
#[test]
fn what_the_owner_set_is_what_is_restored() {
    let (root, h) = fake_v2();
    let r = root.path();
    put(&r.join("svc"), &v2_group_files());
    put(&r.join("other"), &v2_group_files());
    let mut ex = Executor::new(h);
    let g = ex.open_group("svc", &[Controller::Freezer]).unwrap();
    ex.set(&g, Knob::Frozen(true)).unwrap();
    ex.thaw(&g).unwrap();
    // the owner pauses it; the executor is told
    std::fs::write(r.join("svc/cgroup.freeze"), "1\n").unwrap();
    ex.owner_set(&g, Knob::Frozen(true)).unwrap();
    let other = ex.open_group("other", &[Controller::Freezer]).unwrap();
    ex.owner_set(&other, Knob::Frozen(true)).unwrap();
    assert!(
        ex.record().originals.iter().all(|o| o.group == *g.path()),
        "a knob the executor never changed is not recorded: {:?}",
        ex.record().originals
    );
    let rep = ex.restore_all();
    assert!(rep.is_clean(), "{rep:?}");
    assert_eq!(
        read(r.join("svc/cgroup.freeze")).trim(),
        "1",
        "the owner's pause stays"
    );

    // told of the owner's thaw, the executor restores thawed again
    let mut ex = Executor::new(Hierarchy::detect(r).unwrap());
    let g = ex.open_group("svc", &[Controller::Freezer]).unwrap();
    std::fs::write(r.join("svc/cgroup.freeze"), "0\n").unwrap();
    ex.set(&g, Knob::Frozen(true)).unwrap();
    ex.owner_set(&g, Knob::Frozen(true)).unwrap();
    ex.owner_set(&g, Knob::Frozen(false)).unwrap();
    ex.restore_all();
    assert_eq!(read(r.join("svc/cgroup.freeze")).trim(), "0");
}
