//! Against the machine's real cgroup hierarchy: runs only as root with a
//! writable hierarchy, records a skip (`elfen_cmd::skip`) otherwise. Everything it makes
//! (`elfen-test-<pid>-*` groups, a `sleep` child) is removed by guards, also
//! when an assertion fails. Times are printed, never asserted.

use elfen_cgroup::{
    Controller, Executor, FreezerBackend, FreezerState, Hierarchy, Knob, KnobKind, Layout,
};
use elfen_cmd::skip::{Need, skip};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Kills and reaps the child; removes the operator-style directories;
/// turns off again the v2 controllers the test turned on (`subtree`: the
/// `cgroup.subtree_control` file and the controller).
struct Guard {
    child: Option<std::process::Child>,
    dirs: Vec<PathBuf>,
    subtree: Vec<(PathBuf, &'static str)>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
        for (file, ctl) in self.subtree.iter().rev() {
            if let Err(e) = std::fs::write(file, format!("-{ctl}")) {
                println!("cleanup: {ctl} stays on in {}: {e}", file.display());
            }
        }
    }
}

/// The real hierarchy, if this test can write to it; else what it needs
/// and why.
fn writable_hierarchy() -> Result<Hierarchy, (Need, String)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err((Need::Root, "writes the machine's cgroups".into()));
    }
    let v1 = |c: &str| Need::CgroupV1(c.into());
    let h = Hierarchy::detect(elfen_cgroup::default_root())
        .map_err(|e| (v1("cpuset"), e.to_string()))?;
    for ctl in [Controller::Cpuset, Controller::Cpu, Controller::Freezer] {
        let need = || v1(&ctl.to_string());
        let base = h
            .controller_root(ctl)
            .map_err(|e| (need(), e.to_string()))?;
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe = base.join(format!("elfen-test-{}-probe{n}", std::process::id()));
        std::fs::create_dir(&probe)
            .map_err(|e| (need(), format!("{} not writable: {e}", base.display())))?;
        let _ = std::fs::remove_dir(&probe);
    }
    Ok(h)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[test]
fn real_hierarchy_create_cpuset_quota_freeze_restore() {
    let h = match writable_hierarchy() {
        Ok(h) => h,
        Err((need, why)) => {
            skip(need, why);
            return;
        }
    };
    let pid = std::process::id();
    println!("real hierarchy: {:?} at {}", h.layout(), h.root().display());
    let child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let cpid = child.id();
    let mut guard = Guard {
        child: Some(child),
        dirs: Vec::new(),
        subtree: Vec::new(),
    };
    // An "operator's" group the executor opens and changes (not creates).
    // On v2 the operator (or systemd, for a unit with CPU settings) turns
    // the cpu controller on in the parent first, else the group has no
    // cpu files.
    if h.layout() == Layout::V2 {
        let sc = h.root().join("cgroup.subtree_control");
        let on = std::fs::read_to_string(&sc).unwrap();
        if !on.split_whitespace().any(|c| c == "cpu") {
            std::fs::write(&sc, "+cpu").unwrap();
            guard.subtree.push((sc, "cpu"));
        }
    }
    let op_name = format!("elfen-test-{pid}-op");
    let op_dir = h.controller_root(Controller::Cpu).unwrap().join(&op_name);
    std::fs::create_dir(&op_dir).unwrap();
    guard.dirs.push(op_dir.clone());
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let (ex, rep) = Executor::with_state_file(h.clone(), &state).unwrap();
    assert!(rep.is_empty());
    // Restores on drop too, so a failed assertion still cleans up.
    let mut ex = ex.restore_on_drop(true);

    let op = ex.open_group(&op_name, &[Controller::Cpu]).unwrap();
    let shares0 = ex.get(&op, KnobKind::CpuWeight).unwrap();
    ex.set(&op, Knob::CpuWeight(50)).unwrap();
    // read back in the layout's own unit: v2 cpu.weight, v1 cpu.shares
    assert_eq!(
        ex.get(&op, KnobKind::CpuWeight).unwrap(),
        if h.is_v2(Controller::Cpu) {
            Knob::CpuWeight(50)
        } else {
            Knob::CpuShares(512)
        }
    );
    let idle = op_dir.join("cpu.idle").exists();
    if idle {
        ex.set(&op, Knob::CpuIdle(true)).unwrap();
        assert_eq!(ex.get(&op, KnobKind::CpuIdle).unwrap(), Knob::CpuIdle(true));
    } else {
        let e = ex.set(&op, Knob::CpuIdle(true)).unwrap_err();
        println!("cpu.idle unsupported here: {e}");
    }

    let name = format!("elfen-test-{pid}");
    let g = ex
        .create_group(
            &name,
            &[Controller::Cpuset, Controller::Cpu, Controller::Freezer],
        )
        .unwrap();
    let Knob::CpusetCpus(all) = ex.get(&g, KnobKind::CpusetCpus).unwrap() else {
        unreachable!()
    };
    let all = if h.is_v2(Controller::Cpuset) {
        // v2: a new group's cpuset.cpus is empty, it uses its parent's
        assert!(all.is_empty(), "a new v2 cpuset is empty: {all:?}");
        let dir = h.controller_root(Controller::Cpuset).unwrap().join(&name);
        let eff = std::fs::read_to_string(dir.join("cpuset.cpus.effective")).unwrap();
        elfen_topo::parse_cpu_list(eff.trim()).unwrap()
    } else {
        assert!(!all.is_empty(), "a new v1 cpuset gets its parent's cpus");
        all
    };
    ex.set(
        &g,
        Knob::CpuMax {
            quota_us: Some(50_000),
            period_us: 100_000,
        },
    )
    .unwrap();
    assert_eq!(
        ex.get(&g, KnobKind::CpuMax).unwrap(),
        Knob::CpuMax {
            quota_us: Some(50_000),
            period_us: 100_000
        }
    );
    ex.add_process(&g, cpid).unwrap();
    assert!(ex.procs(&g).unwrap().contains(&cpid));
    assert_eq!(
        h.group_of(cpid, Controller::Cpuset).unwrap().as_str(),
        name,
        "/proc/<pid>/cgroup agrees"
    );

    // An unknown CPU is refused by the executor, not the kernel.
    let e = ex
        .set(&g, Knob::CpusetCpus(vec![4000]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not in the parent's"), "{e}");

    if all.len() >= 2 {
        let last = *all.last().unwrap();
        let t = Instant::now();
        ex.set(&g, Knob::CpusetCpus(vec![last])).unwrap();
        let shrink = t.elapsed();
        let t = Instant::now();
        ex.set(&g, Knob::CpusetCpus(all.clone())).unwrap();
        println!(
            "cpuset shrink {} -> {last}: {:.1} us, widen back: {:.1} us (one sample, busy machine)",
            elfen_topo::format_cpu_list(&all),
            us(shrink),
            us(t.elapsed())
        );
    } else {
        println!("one CPU: cpuset shrink not measured");
    }

    let out = ex.freeze(&g, Duration::from_secs(5)).unwrap();
    assert!(out.is_frozen(), "{out:?}");
    assert_eq!(ex.freezer_state(&g).unwrap(), FreezerState::Frozen);
    println!(
        "freeze ({:?} freezer): {:.1} us",
        h.freezer().unwrap(),
        us(out.waited())
    );
    let t = Instant::now();
    ex.thaw(&g).unwrap();
    println!("thaw write: {:.1} us", us(t.elapsed()));
    assert_eq!(ex.freezer_state(&g).unwrap(), FreezerState::Thawed);

    // The unified tree's cgroup.freeze, if this is a hybrid layout.
    if h.layout() == Layout::Hybrid && h.freezer() == Some(FreezerBackend::V1) {
        let h2 = h.clone().with_freezer(FreezerBackend::V2).unwrap();
        let mut ex2 = Executor::new(h2).restore_on_drop(true);
        let g2 = ex2.create_group(&name, &[Controller::Freezer]).unwrap();
        ex2.add_process(&g2, cpid).unwrap();
        let out = ex2.freeze(&g2, Duration::from_secs(5)).unwrap();
        assert!(out.is_frozen(), "{out:?}");
        println!("freeze (unified cgroup.freeze): {:.1} us", us(out.waited()));
        ex2.thaw(&g2).unwrap();
        let rep = ex2.restore_all();
        assert!(rep.is_clean(), "{rep}");
        assert!(!h.unified().unwrap().join(&name).exists());
    }

    let rep = ex.restore_all();
    println!("restore:\n{rep}");
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(ex.get(&op, KnobKind::CpuWeight).unwrap(), shares0);
    if idle {
        assert_eq!(
            ex.get(&op, KnobKind::CpuIdle).unwrap(),
            Knob::CpuIdle(false)
        );
    }
    for ctl in [Controller::Cpuset, Controller::Cpu, Controller::Freezer] {
        assert!(
            !h.controller_root(ctl).unwrap().join(&name).exists(),
            "{ctl}"
        );
    }
    assert!(h.group_of(cpid, Controller::Cpuset).unwrap().is_root());
    assert!(op_dir.exists(), "the operator's group stays");
    assert!(!state.exists());
    drop(ex);
    drop(guard);
    assert!(!op_dir.exists());
}

#[test]
fn real_hierarchy_crash_and_recover() {
    let h = match writable_hierarchy() {
        Ok(h) => h,
        Err((need, why)) => {
            skip(need, why);
            return;
        }
    };
    let name = format!("elfen-test-{}-crash", std::process::id());
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let dirs: Vec<PathBuf> = [Controller::Cpu, Controller::Freezer]
        .iter()
        .map(|&c| h.controller_root(c).unwrap().join(&name))
        .collect();
    let _guard = Guard {
        child: None,
        dirs: dirs.clone(),
        subtree: Vec::new(),
    };
    {
        let (mut ex, _) = Executor::with_state_file(h.clone(), &state).unwrap();
        let g = ex
            .create_group(&name, &[Controller::Cpu, Controller::Freezer])
            .unwrap();
        ex.set(
            &g,
            Knob::CpuMax {
                quota_us: Some(20_000),
                period_us: 100_000,
            },
        )
        .unwrap();
        ex.set(&g, Knob::Frozen(true)).unwrap();
        // Dropped without restore: a crash.
    }
    assert!(dirs.iter().all(|d| d.exists()));
    let rep = Executor::recover(&state).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert!(dirs.iter().all(|d| !d.exists()), "{rep}");
    assert!(!state.exists());
}

/// v2: an operator's group with tasks whose `cpuset.cpus` is empty (it uses
/// its parent's CPUs) is confined, then restored. The kernel refuses to
/// empty a populated cpuset again (ENOSPC), so the restore writes the
/// parent's CPUs instead and says so: the tasks get every CPU back.
#[test]
fn real_v2_populated_group_gets_its_inherited_cpus_back() {
    let test = "real_v2_populated_group_gets_its_inherited_cpus_back";
    let h = match writable_hierarchy() {
        Ok(h) => h,
        Err((need, why)) => {
            elfen_cmd::skip::skip_test(test, need, why);
            return;
        }
    };
    if !h.is_v2(Controller::Cpuset) {
        let why = format!(
            "the real hierarchy is {} here: an empty (inherited) cpuset is a v2 state",
            h.layout()
        );
        elfen_cmd::skip::skip_test(test, Need::CgroupV2("cpuset".into()), why);
        return;
    }
    let root = h.controller_root(Controller::Cpuset).unwrap();
    let all = std::fs::read_to_string(root.join("cpuset.cpus.effective")).unwrap();
    let all = elfen_topo::parse_cpu_list(all.trim()).unwrap();
    if all.len() < 2 {
        elfen_cmd::skip::skip_test(test, Need::Cpus(2), "nothing to confine the group to");
        return;
    }
    let child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let cpid = child.id();
    let mut guard = Guard {
        child: Some(child),
        dirs: Vec::new(),
        subtree: Vec::new(),
    };
    let sc = root.join("cgroup.subtree_control");
    if !std::fs::read_to_string(&sc)
        .unwrap()
        .split_whitespace()
        .any(|c| c == "cpuset")
    {
        std::fs::write(&sc, "+cpuset").unwrap();
        guard.subtree.push((sc, "cpuset"));
    }
    let name = format!("elfen-test-{}-inherit", std::process::id());
    let dir = root.join(&name);
    std::fs::create_dir(&dir).unwrap();
    guard.dirs.push(dir.clone());
    std::fs::write(dir.join("cgroup.procs"), cpid.to_string()).unwrap();
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(read("cpuset.cpus"), "", "a new v2 group inherits");
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let (ex, _) = Executor::with_state_file(h.clone(), &state).unwrap();
    let mut ex = ex.restore_on_drop(true);
    let g = ex.open_group(&name, &[Controller::Cpuset]).unwrap();
    let last = *all.last().unwrap();
    ex.set(&g, Knob::CpusetCpus(vec![last])).unwrap();
    assert_eq!(read("cpuset.cpus.effective"), last.to_string());
    let rep = ex.restore_all();
    println!("restore:\n{rep}");
    assert!(rep.is_clean(), "{rep}");
    assert!(
        rep.actions
            .iter()
            .any(|a| matches!(a, elfen_cgroup::RestoreAction::RestoredAs { .. })),
        "the report says the parent's CPUs were written instead: {rep}"
    );
    assert_eq!(
        read("cpuset.cpus.effective"),
        elfen_topo::format_cpu_list(&all),
        "the tasks have every CPU of the parent again"
    );
    assert!(!state.exists(), "nothing left to restore");
    drop(ex);
    drop(guard);
    assert!(!dir.exists());
}
