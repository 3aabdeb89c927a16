//! v1 layout on a fake root: exact file contents after each operation.

use crate::common::*;
use elfen_cgroup::{
    CgroupError, Controller, Device, Executor, FreezeOutcome, FreezerBackend, FreezerState,
    Hierarchy, Knob, KnobKind, Layout,
};
use std::time::Duration;

#[test]
fn detects_v1_and_finds_co_mounted_controllers() {
    let d = tempfile::tempdir().unwrap();
    put(&d.path().join("cpu,cpuacct"), &[("cpu.shares", "1024\n")]);
    put(&d.path().join("cpuset"), &[("cpuset.cpus", "0-1\n")]);
    put(&d.path().join("systemd"), &[("cgroup.procs", "")]);
    let h = Hierarchy::detect(d.path()).unwrap();
    assert_eq!(h.layout(), Layout::V1);
    assert_eq!(
        h.controller_root(Controller::Cpu).unwrap(),
        d.path().join("cpu,cpuacct")
    );
    assert_eq!(h.freezer(), None, "no freezer hierarchy mounted");
    let e = h
        .controller_root(Controller::Freezer)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no freezer"), "{e}");
    let e = h.controller_root(Controller::Io).unwrap_err().to_string();
    assert!(
        e.contains("blkio") && e.contains("no v1 blkio hierarchy"),
        "{e}"
    );

    let empty = tempfile::tempdir().unwrap();
    let e = Hierarchy::detect(empty.path()).unwrap_err().to_string();
    assert!(e.contains("no cgroup hierarchy here"), "{e}");
}

#[test]
fn create_set_add_remove_exact_contents() {
    let (root, h) = fake_v1();
    let r = root.path();
    let mut ex = Executor::new(h);
    let g = ex.create_group("elfen-bench-1-x", &V1_CONTROLLERS).unwrap();
    let cs = r.join("cpuset/elfen-bench-1-x");
    assert_eq!(read(cs.join("cpuset.mems")), "0", "copied from the parent");
    assert_eq!(
        read(cs.join("cpuset.cpus")),
        "0-3",
        "copied from the parent"
    );

    let rep = ex
        .apply(&[
            (g.clone(), Knob::CpusetCpus(vec![1, 2])),
            (
                g.clone(),
                Knob::CpuMax {
                    quota_us: Some(50_000),
                    period_us: 100_000,
                },
            ),
            (g.clone(), Knob::CpuWeight(200)),
            (g.clone(), Knob::CpuIdle(true)),
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
    assert_eq!(rep.written.len(), 7, "{rep:?}");
    assert_eq!(read(cs.join("cpuset.cpus")), "1-2");
    let cpu = r.join("cpu/elfen-bench-1-x");
    assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "50000");
    assert_eq!(
        read(cpu.join("cpu.cfs_period_us")),
        "100000\n",
        "unchanged: not rewritten"
    );
    assert_eq!(
        read(cpu.join("cpu.shares")),
        "2048",
        "weight 200 = 2048 shares"
    );
    assert_eq!(read(cpu.join("cpu.idle")), "1");
    let mem = r.join("memory/elfen-bench-1-x");
    assert_eq!(read(mem.join("memory.limit_in_bytes")), "1048576");
    let io = r.join("blkio/elfen-bench-1-x");
    assert_eq!(
        read(io.join("blkio.throttle.read_bps_device")),
        "8:0 1048576"
    );
    assert_eq!(read(io.join("blkio.throttle.write_bps_device")), "");
    assert_eq!(read(io.join("blkio.throttle.write_iops_device")), "8:0 200");
    assert_eq!(read(io.join("blkio.throttle.read_iops_device")), "");

    // Reading back in native form.
    assert_eq!(
        ex.get(&g, KnobKind::CpuWeight).unwrap(),
        Knob::CpuShares(2048)
    );
    assert_eq!(
        ex.get(&g, KnobKind::MemoryMax).unwrap(),
        Knob::MemoryMax(Some(1 << 20))
    );

    ex.add_process(&g, 4242).unwrap();
    for c in ["cpuset", "cpu", "freezer", "memory", "blkio"] {
        assert_eq!(read(r.join(c).join("elfen-bench-1-x/cgroup.procs")), "4242");
    }
    assert_eq!(ex.procs(&g).unwrap(), [4242]);
    std::fs::write(mem.join("memory.usage_in_bytes"), "12288\n").unwrap();
    assert_eq!(ex.memory_current(&g).unwrap(), 12288);

    // Created groups: no originals recorded.
    assert_eq!(ex.record().created.len(), 5);
    assert!(ex.record().originals.is_empty());

    // Unlimited again: -1 and 0.
    ex.apply(&[
        (
            g.clone(),
            Knob::CpuMax {
                quota_us: None,
                period_us: 100_000,
            },
        ),
        (g.clone(), Knob::MemoryMax(None)),
        (
            g.clone(),
            Knob::IoMax {
                device: Device { major: 8, minor: 0 },
                read_bps: None,
                write_bps: None,
                read_iops: None,
                write_iops: None,
            },
        ),
    ])
    .unwrap();
    assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "-1");
    assert_eq!(read(mem.join("memory.limit_in_bytes")), "-1");
    assert_eq!(read(io.join("blkio.throttle.read_bps_device")), "8:0 0");
    assert_eq!(read(io.join("blkio.throttle.write_iops_device")), "8:0 0");

    let moved = ex.remove_group(&g).unwrap();
    assert_eq!(moved, 5, "one process per hierarchy");
    assert_eq!(
        read(r.join("cpuset/cgroup.procs")),
        "4242",
        "moved to the parent"
    );
    for c in ["cpuset", "cpu", "freezer", "memory", "blkio"] {
        assert!(!r.join(c).join("elfen-bench-1-x").exists(), "{c}");
    }
    assert!(ex.record().is_empty());
}

#[test]
fn unchanged_values_are_not_rewritten() {
    let (root, h) = fake_v1();
    let r = root.path();
    put(
        &r.join("cpuset/lc"),
        &[
            ("cpuset.cpus", "0,1\n"),
            ("cpuset.mems", "0\n"),
            ("cgroup.procs", ""),
        ],
    );
    put(&r.join("cpu/lc"), &v1_group_files(Controller::Cpu));
    put(&r.join("memory/lc"), &v1_group_files(Controller::Memory));
    let state = r.join("state.json");
    let (mut ex, rep) = Executor::with_state_file(h, &state).unwrap();
    assert!(rep.is_empty());
    let g = ex
        .open_group(
            "lc",
            &[Controller::Cpuset, Controller::Cpu, Controller::Memory],
        )
        .unwrap();
    let files = [
        r.join("cpuset/lc/cpuset.cpus"),
        r.join("cpu/lc/cpu.cfs_quota_us"),
        r.join("cpu/lc/cpu.cfs_period_us"),
        r.join("cpu/lc/cpu.shares"),
        r.join("memory/lc/memory.limit_in_bytes"),
    ];
    for f in &files {
        age(f);
    }
    let rep = ex
        .apply(&[
            (g.clone(), Knob::CpusetCpus(vec![0, 1])), // "0,1" == 0-1
            (
                g.clone(),
                Knob::CpuMax {
                    quota_us: None,
                    period_us: 100_000,
                },
            ), // -1
            (g.clone(), Knob::CpuWeight(100)),         // = 1024 shares
            (g.clone(), Knob::MemoryMax(None)),        // 9223372036854771712
        ])
        .unwrap();
    assert!(rep.is_noop(), "{rep:?}");
    assert_eq!(rep.unchanged.len(), 4);
    for f in &files {
        assert!(untouched(f), "{} was written", f.display());
    }
    assert!(!state.exists(), "nothing changed, nothing recorded");

    // A real change writes exactly one file; repeating it writes none.
    let q = Knob::CpuMax {
        quota_us: Some(20_000),
        period_us: 100_000,
    };
    assert_eq!(ex.set(&g, q.clone()).unwrap().written.len(), 1);
    assert!(untouched(&files[2]), "period unchanged");
    age(&files[1]);
    assert!(ex.set(&g, q).unwrap().is_noop());
    assert!(untouched(&files[1]));
}

#[test]
fn cpuset_widen_parent_first_narrow_child_first() {
    let (root, h) = fake_v1();
    let r = root.path();
    put(
        &r.join("cpuset/lc"),
        &[
            ("cpuset.cpus", "0-1\n"),
            ("cpuset.mems", "0\n"),
            ("cgroup.procs", ""),
        ],
    );
    put(
        &r.join("cpuset/lc/child"),
        &[
            ("cpuset.cpus", "0\n"),
            ("cpuset.mems", "0\n"),
            ("cgroup.procs", "77\n"),
        ],
    );
    let mut ex = Executor::new(h);
    let p = ex.open_group("lc", &[Controller::Cpuset]).unwrap();
    let c = ex.open_group("lc/child", &[Controller::Cpuset]).unwrap();
    let pf = r.join("cpuset/lc/cpuset.cpus");
    let cf = r.join("cpuset/lc/child/cpuset.cpus");

    // Widen, given child first: the parent is written first.
    let rep = ex
        .apply(&[
            (c.clone(), Knob::CpusetCpus(vec![0, 1, 2])),
            (p.clone(), Knob::CpusetCpus(vec![0, 1, 2, 3])),
        ])
        .unwrap();
    let order: Vec<_> = rep
        .written
        .iter()
        .map(|w| (w.path.clone(), w.value.clone()))
        .collect();
    assert_eq!(
        order,
        [(pf.clone(), "0-3".into()), (cf.clone(), "0-2".into())]
    );

    // Narrow, given parent first: the child is written first.
    let rep = ex
        .apply(&[
            (p.clone(), Knob::CpusetCpus(vec![1, 2])),
            (c.clone(), Knob::CpusetCpus(vec![2])),
        ])
        .unwrap();
    let order: Vec<_> = rep
        .written
        .iter()
        .map(|w| (w.path.clone(), w.value.clone()))
        .collect();
    assert_eq!(
        order,
        [(cf.clone(), "2".into()), (pf.clone(), "1-2".into())]
    );

    // A move (parent 1-2 → 0, child 2 → 0) goes through the union.
    let rep = ex
        .apply(&[
            (p.clone(), Knob::CpusetCpus(vec![0])),
            (c.clone(), Knob::CpusetCpus(vec![0])),
        ])
        .unwrap();
    let order: Vec<_> = rep
        .written
        .iter()
        .map(|w| (w.path.clone(), w.value.clone()))
        .collect();
    assert_eq!(
        order,
        [
            (pf.clone(), "0-2".into()),
            (cf.clone(), "0,2".into()),
            (cf.clone(), "0".into()),
            (pf.clone(), "0".into()),
        ]
    );
    assert_eq!((read(&pf), read(&cf)), ("0".into(), "0".into()));
}

#[test]
fn bad_input_names_the_file_and_writes_nothing() {
    let (root, h) = fake_v1();
    let r = root.path();
    put(
        &r.join("cpuset/lc"),
        &[
            ("cpuset.cpus", "0-1\n"),
            ("cpuset.mems", "0\n"),
            ("cgroup.procs", "5\n"),
        ],
    );
    put(
        &r.join("cpuset/lc/child"),
        &[
            ("cpuset.cpus", "1\n"),
            ("cpuset.mems", "0\n"),
            ("cgroup.procs", ""),
        ],
    );
    let mut files = v1_group_files(Controller::Cpu);
    files.retain(|(f, _)| *f != "cpu.idle");
    put(&r.join("cpu/old"), &files);
    let state = r.join("state.json");
    let (mut ex, _) = Executor::with_state_file(h, &state).unwrap();

    // A missing group.
    let e = ex.open_group("nope", &[Controller::Cpu]).unwrap_err();
    assert!(matches!(e, CgroupError::Group { .. }));
    let e = e.to_string();
    assert!(e.contains("cpu/nope") && e.contains("no such group"), "{e}");
    assert!(ex.open_group("../etc", &[Controller::Cpu]).is_err());

    let lc = ex.open_group("lc", &[Controller::Cpuset]).unwrap();
    let child = ex.open_group("lc/child", &[Controller::Cpuset]).unwrap();
    let lcf = r.join("cpuset/lc/cpuset.cpus");
    let chf = r.join("cpuset/lc/child/cpuset.cpus");
    age(&lcf);
    age(&chf);

    // An unknown CPU: not in the parent's cpuset.cpus.
    let e = ex
        .set(&child, Knob::CpusetCpus(vec![1, 7]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lc/child/cpuset.cpus")
            && e.contains("cpus 7 not in the parent's")
            && e.contains("0-1"),
        "{e}"
    );
    let e = ex
        .set(&lc, Knob::CpusetCpus(vec![9]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cpus 9 not in the parent's") && e.contains("0-3"),
        "{e}"
    );

    // Narrowing a parent below an unchanged child.
    let e = ex
        .set(&lc, Knob::CpusetCpus(vec![0]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("child group lc/child holds cpus 1"), "{e}");

    // Emptying a v1 cpuset that has tasks.
    let e = ex
        .apply(&[
            (child.clone(), Knob::CpusetCpus(vec![])),
            (lc.clone(), Knob::CpusetCpus(vec![])),
        ])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot have no cpus"), "{e}");

    // A knob this kernel lacks.
    let old = ex.open_group("old", &[Controller::Cpu]).unwrap();
    let e = ex.set(&old, Knob::CpuIdle(true)).unwrap_err();
    assert!(matches!(e, CgroupError::Unsupported { .. }));
    let e = e.to_string();
    assert!(
        e.contains("old/cpu.idle") && e.contains("no cpu.idle"),
        "{e}"
    );

    // A controller the group was not opened with.
    let e = ex.set(&lc, Knob::CpuWeight(10)).unwrap_err().to_string();
    assert!(e.contains("without the cpu controller"), "{e}");

    // Values out of range; one bad change stops the whole apply.
    let old_q = r.join("cpu/old/cpu.cfs_quota_us");
    let old_s = r.join("cpu/old/cpu.shares");
    age(&old_q);
    age(&old_s);
    let e = ex
        .apply(&[
            (old.clone(), Knob::CpuWeight(300)),
            (
                old.clone(),
                Knob::CpuMax {
                    quota_us: Some(10),
                    period_us: 100_000,
                },
            ),
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cpu.cfs_period_us") && e.contains("at least 1000"),
        "{e}"
    );
    let e = ex.set(&old, Knob::CpuWeight(0)).unwrap_err().to_string();
    assert!(e.contains("cpu.shares") && e.contains("1..=10000"), "{e}");

    for f in [&lcf, &chf, &old_q, &old_s] {
        assert!(untouched(f), "{} was written", f.display());
    }
    assert!(!state.exists(), "nothing was changed, so nothing recorded");

    // A v1 cpuset without mems takes no task.
    put(
        &r.join("cpuset/nomems"),
        &[
            ("cpuset.cpus", "0\n"),
            ("cpuset.mems", "\n"),
            ("cgroup.procs", ""),
        ],
    );
    let nm = ex.open_group("nomems", &[Controller::Cpuset]).unwrap();
    let e = ex.add_process(&nm, 1).unwrap_err().to_string();
    assert!(
        e.contains("nomems/cgroup.procs") && e.contains("cpuset.mems is empty"),
        "{e}"
    );
    assert_eq!(read(r.join("cpuset/nomems/cgroup.procs")), "");

    // Creating what exists, or in a hierarchy that is not there.
    let e = ex
        .create_group("lc", &[Controller::Cpuset])
        .unwrap_err()
        .to_string();
    assert!(e.contains("already exists"), "{e}");
    let d = tempfile::tempdir().unwrap();
    make_v1(d.path(), &[Controller::Cpu]);
    let mut ex2 = Executor::new(Hierarchy::detect(d.path()).unwrap());
    let e = ex2
        .create_group("x", &[Controller::Cpu, Controller::Io])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("blkio") && e.contains("no v1 blkio hierarchy"),
        "{e}"
    );
    assert!(
        !d.path().join("cpu/x").exists(),
        "checked before the first mkdir"
    );
    // Removing a group it did not create is refused.
    let e = ex.remove_group(&lc).unwrap_err().to_string();
    assert!(e.contains("not created by this executor"), "{e}");
    assert!(r.join("cpuset/lc").exists());
}

#[test]
fn freezer_freezing_then_frozen_and_timeout() {
    let (root, h) = fake_v1();
    assert_eq!(h.freezer(), Some(FreezerBackend::V1));
    let r = root.path();
    let mut ex = Executor::new(h);
    let g = ex.create_group("elfen-f", &[Controller::Freezer]).unwrap();
    let st = r.join("freezer/elfen-f/freezer.state");
    assert_eq!(ex.freezer_state(&g).unwrap(), FreezerState::Thawed);

    // The request; then the kernel reports FREEZING until it is done.
    ex.set(&g, Knob::Frozen(true)).unwrap();
    assert_eq!(read(&st), "FROZEN");
    std::fs::write(&st, "FREEZING\n").unwrap();
    assert_eq!(ex.freezer_state(&g).unwrap(), FreezerState::Freezing);
    // FREEZING counts as requested: not rewritten.
    age(&st);
    assert!(ex.set(&g, Knob::Frozen(true)).unwrap().is_noop());
    assert!(untouched(&st));
    let t = later(st.clone(), "FROZEN\n", Duration::from_millis(30));
    let out = ex.wait_frozen(&g, Duration::from_secs(10)).unwrap();
    t.join().unwrap();
    assert!(out.is_frozen(), "{out:?}");

    // Stuck in FREEZING: a timeout, and it says so.
    std::fs::write(&st, "FREEZING\n").unwrap();
    let out = ex.wait_frozen(&g, Duration::from_millis(20)).unwrap();
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

    ex.thaw(&g).unwrap();
    assert_eq!(read(&st), "THAWED");
    // freeze() on the fake: the file reads FROZEN at once.
    assert!(ex.freeze(&g, Duration::from_secs(1)).unwrap().is_frozen());
    // Removing a frozen group thaws it first.
    ex.remove_group(&g).unwrap();
    assert!(!r.join("freezer/elfen-f").exists());
}

#[test]
fn remove_moves_tasks_and_removes_children_first() {
    let (root, h) = fake_v1();
    let r = root.path();
    let mut ex = Executor::new(h);
    let g = ex.create_group("elfen/batch", &[Controller::Cpu]).unwrap();
    let dir = r.join("cpu/elfen/batch");
    std::fs::write(dir.join("cgroup.procs"), "11\n12\n").unwrap();
    // A batch job made its own subgroup.
    put(&dir.join("sub"), &[("cgroup.procs", "13\n")]);
    assert_eq!(ex.remove_group(&g).unwrap(), 3);
    assert!(!dir.exists());
    assert!(
        r.join("cpu/elfen").exists(),
        "the parent stays until removed"
    );
    assert_eq!(
        read(r.join("cpu/elfen/cgroup.procs")),
        "12",
        "last task moved to the parent"
    );
    let parent = ex.open_group("elfen", &[Controller::Cpu]).unwrap();
    ex.remove_group(&parent).unwrap();
    assert!(!r.join("cpu/elfen").exists());
}

#[test]
fn stale_groups_of_dead_processes_are_removed() {
    let (root, h) = fake_v1();
    let r = root.path();
    let me = std::process::id();
    put(
        &r.join(format!("cpu/elfen-bench-{me}-quota")),
        &[("cgroup.procs", "")],
    );
    // pid 2147483632 does not exist
    put(
        &r.join("cpu/elfen-bench-2147483632-quota"),
        &[("cgroup.procs", "99\n")],
    );
    put(
        &r.join("cpuset/elfen-bench-2147483632-cpuset"),
        &[("cgroup.procs", "")],
    );
    put(&r.join("cpu/other"), &[("cgroup.procs", "")]);
    let ex = Executor::new(h);
    let mut removed = ex.remove_stale("elfen-bench-");
    removed.sort();
    assert_eq!(
        removed,
        [
            r.join("cpu/elfen-bench-2147483632-quota"),
            r.join("cpuset/elfen-bench-2147483632-cpuset")
        ]
    );
    assert_eq!(
        read(r.join("cpu/cgroup.procs")),
        "99",
        "its task went to the root"
    );
    assert!(r.join(format!("cpu/elfen-bench-{me}-quota")).exists());
    assert!(r.join("cpu/other").exists());
}

#[test]
fn idle_and_weight_are_ordered() {
    let (root, h) = fake_v1();
    let r = root.path();
    let mut ex = Executor::new(h);
    let g = ex.create_group("i", &[Controller::Cpu]).unwrap();
    let d = r.join("cpu/i");
    // Entering idle: the weight is written first.
    let rep = ex
        .apply(&[
            (g.clone(), Knob::CpuIdle(true)),
            (g.clone(), Knob::CpuWeight(50)),
        ])
        .unwrap();
    let files: Vec<_> = rep.written.iter().map(|w| w.path.clone()).collect();
    assert_eq!(files, [d.join("cpu.shares"), d.join("cpu.idle")]);
    // The kernel then shows a placeholder weight and refuses writes.
    std::fs::write(d.join("cpu.shares"), "3\n").unwrap();
    age(d.join("cpu.shares"));
    let e = ex.set(&g, Knob::CpuWeight(100)).unwrap_err().to_string();
    assert!(
        e.contains("i/cpu.shares") && e.contains("cpu.idle is 1"),
        "{e}"
    );
    assert!(untouched(d.join("cpu.shares")));
    // Leaving idle: cpu.idle first, then the weight.
    let rep = ex
        .apply(&[
            (g.clone(), Knob::CpuWeight(100)),
            (g.clone(), Knob::CpuIdle(false)),
        ])
        .unwrap();
    let files: Vec<_> = rep.written.iter().map(|w| w.path.clone()).collect();
    assert_eq!(files, [d.join("cpu.idle"), d.join("cpu.shares")]);
    assert_eq!(read(d.join("cpu.shares")), "1024");
}
