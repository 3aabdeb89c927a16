//! Memory and I/O knobs (soft and hard memory limits, I/O bandwidth, IOPS
//! and weight), the I/O counters, and groups of the v2 tree for cgroup BPF
//! programs — on fake roots, with crash recovery.

use crate::common::*;
use elfen_cgroup::{CgroupError, Controller, Device, Executor, Hierarchy, IoStat, Knob, KnobKind};

const DEV: Device = Device {
    major: 254,
    minor: 0,
};

fn io(rb: Option<u64>, wb: Option<u64>, ri: Option<u64>, wi: Option<u64>) -> Knob {
    Knob::IoMax {
        device: DEV,
        read_bps: rb,
        write_bps: wb,
        read_iops: ri,
        write_iops: wi,
    }
}

#[test]
fn v1_memory_high_is_the_soft_limit_and_io_has_four_files() {
    let (root, h) = fake_v1();
    let r = root.path();
    put(&r.join("memory/jobs"), &v1_group_files(Controller::Memory));
    put(&r.join("blkio/jobs"), &v1_group_files(Controller::Io));
    let state = r.join("state.json");
    let (mut ex, _) = Executor::with_state_file(h.clone(), &state).unwrap();
    let g = ex
        .open_group("jobs", &[Controller::Memory, Controller::Io])
        .unwrap();
    ex.apply(&[
        (g.clone(), Knob::MemoryHigh(Some((1 << 30) + 100))),
        (g.clone(), Knob::MemoryMax(Some(2 << 30))),
        (g.clone(), io(None, Some(50 << 20), Some(300), None)),
        (g.clone(), Knob::IoWeight(500)),
    ])
    .unwrap();
    let m = r.join("memory/jobs");
    let b = r.join("blkio/jobs");
    assert_eq!(
        read(m.join("memory.soft_limit_in_bytes")),
        (1u64 << 30).to_string(),
        "rounded down to whole pages"
    );
    assert_eq!(
        read(m.join("memory.limit_in_bytes")),
        (2u64 << 30).to_string()
    );
    assert_eq!(read(b.join("blkio.throttle.read_bps_device")), "");
    assert_eq!(
        read(b.join("blkio.throttle.write_bps_device")),
        "254:0 52428800"
    );
    assert_eq!(read(b.join("blkio.throttle.read_iops_device")), "254:0 300");
    assert_eq!(read(b.join("blkio.throttle.write_iops_device")), "");
    assert_eq!(read(b.join("blkio.bfq.weight")), "500");
    assert_eq!(
        ex.get(&g, KnobKind::MemoryHigh).unwrap(),
        Knob::MemoryHigh(Some(1 << 30))
    );
    // The kernel shows a file's devices one per line.
    std::fs::write(
        b.join("blkio.throttle.read_iops_device"),
        "8:0 5\n254:0 300\n",
    )
    .unwrap();
    assert_eq!(
        ex.get(&g, KnobKind::IoMax(DEV)).unwrap(),
        io(None, Some(50 << 20), Some(300), None)
    );

    // A crash: the next executor puts the operator's values back.
    drop(ex);
    let rep = Executor::recover(&state).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(
        read(m.join("memory.soft_limit_in_bytes")),
        "-1",
        "unlimited again"
    );
    assert_eq!(read(m.join("memory.limit_in_bytes")), "-1");
    assert_eq!(read(b.join("blkio.throttle.write_bps_device")), "254:0 0");
    assert_eq!(read(b.join("blkio.throttle.read_iops_device")), "254:0 0");
    assert_eq!(read(b.join("blkio.bfq.weight")), "100");
    assert!(!state.exists());
}

#[test]
fn v2_memory_high_io_max_iops_and_io_weights() {
    let (root, h) = fake_v2();
    let r = root.path();
    let mut ex = Executor::new(h);
    let g = ex
        .create_group("b", &[Controller::Memory, Controller::Io])
        .unwrap();
    ex.apply(&[
        (g.clone(), Knob::MemoryHigh(Some(1 << 20))),
        (g.clone(), io(Some(1 << 20), None, None, Some(40))),
        (g.clone(), Knob::IoWeight(2000)),
        (g.clone(), Knob::IoBfqWeight(300)),
    ])
    .unwrap();
    let d = r.join("b");
    // BFQ reads only its own file; iocost only io.weight
    assert_eq!(read(d.join("io.bfq.weight")), "default 300");
    assert_eq!(
        ex.get(&g, KnobKind::IoBfqWeight).unwrap(),
        Knob::IoBfqWeight(300)
    );
    assert_eq!(read(d.join("memory.high")), "1048576");
    assert_eq!(
        read(d.join("io.max")),
        "254:0 rbps=1048576 wbps=max riops=max wiops=40"
    );
    assert_eq!(read(d.join("io.weight")), "default 2000");
    std::fs::write(d.join("io.weight"), "default 2000\n254:0 50\n").unwrap();
    assert_eq!(
        ex.get(&g, KnobKind::IoWeight).unwrap(),
        Knob::IoWeight(2000)
    );
    ex.set(&g, Knob::MemoryHigh(None)).unwrap();
    assert_eq!(read(d.join("memory.high")), "max");
    // I/O counters per device.
    std::fs::write(
        d.join("io.stat"),
        "8:0 rbytes=1 wbytes=1 rios=1 wios=1 dbytes=0 dios=0\n\
         254:0 rbytes=4096 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n",
    )
    .unwrap();
    assert_eq!(
        ex.io_stat(&g, DEV).unwrap(),
        IoStat {
            read_bytes: 4096,
            write_bytes: 0,
            read_ios: 1,
            write_ios: 0
        }
    );
    assert!(ex.restore_all().is_clean());
}

#[test]
fn bad_limits_name_the_file_and_write_nothing() {
    let (root, h) = fake_v1();
    let r = root.path();
    let mut ex = Executor::new(h);
    let g = ex
        .create_group("b", &[Controller::Memory, Controller::Io])
        .unwrap();
    let b = r.join("blkio/b");
    for f in [
        "blkio.throttle.read_bps_device",
        "blkio.throttle.read_iops_device",
        "blkio.bfq.weight",
    ] {
        age(b.join(f));
    }
    let e = ex
        .apply(&[
            (g.clone(), io(Some(1), None, None, None)),
            (g.clone(), Knob::IoWeight(5000)),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, CgroupError::Invalid { .. }) && e.to_string().contains("blkio.bfq.weight"),
        "{e}"
    );
    let e = ex.set(&g, io(None, None, Some(0), None)).unwrap_err();
    assert!(e.to_string().contains("an I/O limit of 0"), "{e}");
    let e = ex.set(&g, Knob::MemoryHigh(Some(10))).unwrap_err();
    assert!(e.to_string().contains("below one page"), "{e}");
    for f in [
        "blkio.throttle.read_bps_device",
        "blkio.throttle.read_iops_device",
        "blkio.bfq.weight",
    ] {
        assert!(untouched(b.join(f)), "{f} was written");
    }
    // A kernel without BFQ has no blkio.bfq.weight: said so.
    std::fs::remove_file(b.join("blkio.bfq.weight")).unwrap();
    let e = ex.set(&g, Knob::IoWeight(200)).unwrap_err();
    assert!(e.to_string().contains("BFQ"), "{e}");
}

#[test]
fn unified_groups_live_in_the_v2_tree_of_a_hybrid_layout() {
    let (root, h) = fake_hybrid();
    let r = root.path();
    assert!(h.is_v2(Controller::Unified));
    assert_eq!(
        h.controller_root(Controller::Unified).unwrap(),
        r.join("unified")
    );
    let state = r.join("state.json");
    let (mut ex, _) = Executor::with_state_file(h, &state).unwrap();
    let g = ex
        .create_group("elfen-d-1/net", &[Controller::Memory, Controller::Unified])
        .unwrap();
    assert!(r.join("unified/elfen-d-1/net").is_dir());
    assert!(r.join("memory/elfen-d-1/net").is_dir());
    ex.add_process(&g, 77).unwrap();
    assert_eq!(read(r.join("unified/elfen-d-1/net/cgroup.procs")), "77");
    assert_eq!(read(r.join("memory/elfen-d-1/net/cgroup.procs")), "77");
    // A crash: recovery removes both.
    drop(ex);
    let rep = Executor::recover(&state).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert!(!r.join("unified/elfen-d-1").exists());
    assert!(!r.join("memory/elfen-d-1").exists());
    // v1 alone has no v2 tree: unsupported, said why.
    let (_r1, h1) = fake_v1();
    let e = Hierarchy::controller_root(&h1, Controller::Unified).unwrap_err();
    assert!(e.to_string().contains("cgroup BPF"), "{e}");
}
