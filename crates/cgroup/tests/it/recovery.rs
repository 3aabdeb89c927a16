//! The state file: written before changes, recovered after a crash,
//! restored on shutdown, idempotent.

use crate::common::*;
use elfen_cgroup::{Controller, Executor, Hierarchy, Knob, RestoreAction, StateRecord};
use std::path::Path;

/// An operator's groups: `lc` in cpuset, cpu and freezer.
fn operator_groups(r: &Path) {
    put(
        &r.join("cpuset/lc"),
        &[
            ("cpuset.cpus", "0-3\n"),
            ("cpuset.mems", "0\n"),
            ("cgroup.procs", "100\n"),
        ],
    );
    put(&r.join("cpu/lc"), &v1_group_files(Controller::Cpu));
    put(&r.join("freezer/lc"), &v1_group_files(Controller::Freezer));
}

/// Changes the operator's `lc` and creates `elfen/batch`; returns nothing
/// (the executor is dropped by the caller to simulate a crash, or kept).
fn do_changes(ex: &mut Executor) {
    let lc = ex
        .open_group(
            "lc",
            &[Controller::Cpuset, Controller::Cpu, Controller::Freezer],
        )
        .unwrap();
    let batch = ex
        .create_group(
            "elfen/batch",
            &[Controller::Cpuset, Controller::Cpu, Controller::Freezer],
        )
        .unwrap();
    ex.apply(&[
        (lc.clone(), Knob::CpusetCpus(vec![0, 1])),
        (lc.clone(), Knob::CpuWeight(50)),
        (batch.clone(), Knob::CpusetCpus(vec![2, 3])),
        (
            batch.clone(),
            Knob::CpuMax {
                quota_us: Some(10_000),
                period_us: 100_000,
            },
        ),
    ])
    .unwrap();
    // A second change of the same knob keeps the first original.
    ex.set(&lc, Knob::CpuWeight(25)).unwrap();
    ex.set(&lc, Knob::Frozen(true)).unwrap();
    ex.add_process(&batch, 4242).unwrap();
}

fn assert_changed(r: &Path) {
    assert_eq!(read(r.join("cpuset/lc/cpuset.cpus")), "0-1");
    assert_eq!(read(r.join("cpu/lc/cpu.shares")), "256");
    assert_eq!(read(r.join("freezer/lc/freezer.state")), "FROZEN");
    assert_eq!(read(r.join("cpuset/elfen/batch/cpuset.cpus")), "2-3");
}

fn assert_restored(r: &Path) {
    assert_eq!(read(r.join("cpuset/lc/cpuset.cpus")), "0-3");
    assert_eq!(read(r.join("cpu/lc/cpu.shares")), "1024");
    assert_eq!(read(r.join("freezer/lc/freezer.state")), "THAWED");
    for c in ["cpuset", "cpu", "freezer"] {
        assert!(!r.join(c).join("elfen").exists(), "{c}/elfen left behind");
        assert!(r.join(c).join("lc").exists(), "{c}/lc must stay");
    }
    assert_eq!(
        read(r.join("cpuset/cgroup.procs")),
        "4242",
        "batch task back in the root"
    );
}

#[test]
fn state_file_records_originals_and_creations() {
    let (root, h) = fake_v1();
    let r = root.path();
    operator_groups(r);
    let state = r.join("run/state.json");
    std::fs::create_dir_all(r.join("run")).unwrap();
    let (mut ex, _) = Executor::with_state_file(h, &state).unwrap();
    do_changes(&mut ex);
    let rec = StateRecord::load(&state).unwrap().unwrap();
    assert_eq!(rec.root, r);
    assert_eq!(rec.pid, std::process::id());
    let created: Vec<_> = rec
        .created
        .iter()
        .map(|c| format!("{}:{}", c.controller, c.group))
        .collect();
    assert_eq!(
        created,
        [
            "cpuset:elfen",
            "cpu:elfen",
            "freezer:elfen",
            "cpuset:elfen/batch",
            "cpu:elfen/batch",
            "freezer:elfen/batch"
        ]
    );
    let originals: Vec<_> = rec
        .originals
        .iter()
        .map(|o| format!("{} {}", o.group, o.knob))
        .collect();
    assert_eq!(
        originals,
        ["lc cpus=0-3", "lc cpu.shares=1024", "lc frozen=false"]
    );
    let text = read(&state);
    assert!(text.contains(r#""cpuset_cpus": "0-3""#), "{text}");
    // Atomic writes leave no temp files behind.
    let names: Vec<_> = std::fs::read_dir(r.join("run"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["state.json"]);
}

#[test]
fn the_original_is_recorded_before_the_write() {
    // A "cgroup file" that reads fine but refuses writes, even by root:
    // sysfs's read-only CPU list.
    let online = Path::new("/sys/devices/system/cpu/online");
    let Ok(text) = std::fs::read_to_string(online) else {
        let why = format!("{} is not readable here", online.display());
        elfen_cmd::skip::skip(elfen_cmd::skip::Need::Input(online.into()), why);
        return;
    };
    let cpus = elfen_topo::parse_cpu_list(&text).unwrap();
    let (root, h) = fake_v1();
    let r = root.path();
    std::fs::write(r.join("cpuset/cpuset.cpus"), "0-63\n").unwrap();
    put(
        &r.join("cpuset/lc"),
        &[("cpuset.mems", "0\n"), ("cgroup.procs", "")],
    );
    std::os::unix::fs::symlink(online, r.join("cpuset/lc/cpuset.cpus")).unwrap();
    let state = r.join("state.json");
    let (mut ex, _) = Executor::with_state_file(h, &state).unwrap();
    let lc = ex.open_group("lc", &[Controller::Cpuset]).unwrap();
    let want = if cpus == [63] { vec![62] } else { vec![63] };
    let e = ex.set(&lc, Knob::CpusetCpus(want)).unwrap_err().to_string();
    assert!(e.contains("lc/cpuset.cpus") && e.contains("writing"), "{e}");
    let rec = StateRecord::load(&state)
        .unwrap()
        .expect("recorded before the write");
    assert_eq!(rec.originals.len(), 1);
    assert_eq!(rec.originals[0].knob, Knob::CpusetCpus(cpus));
    // Restoring it finds the original in place: nothing to write, clean.
    let rep = ex.restore_all();
    assert!(rep.is_clean(), "{rep}");
    assert!(!state.exists());
}

#[test]
fn crash_then_recover_puts_everything_back() {
    let (root, h) = fake_v1();
    let r = root.path();
    operator_groups(r);
    let state = r.join("state.json");
    {
        let (mut ex, _) = Executor::with_state_file(h.clone(), &state).unwrap();
        do_changes(&mut ex);
        // Dropped without restore: what kill -9 leaves.
    }
    assert_changed(r);
    let rep = Executor::recover(&state).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_restored(r);
    assert!(!state.exists(), "a clean recovery removes the state file");
    // The thaw came first.
    assert!(
        matches!(
            &rep.actions[0],
            RestoreAction::Restored {
                knob: Knob::Frozen(false),
                written: true,
                ..
            }
        ),
        "{rep}"
    );
    let removed = rep
        .actions
        .iter()
        .filter(|a| matches!(a, RestoreAction::Removed { .. }))
        .count();
    assert_eq!(removed, 6, "{rep}");
    // Idempotent.
    let again = Executor::recover(&state).unwrap();
    assert!(again.is_empty(), "{again}");
}

#[test]
fn with_state_file_recovers_leftovers_first() {
    let (root, h) = fake_v1();
    let r = root.path();
    operator_groups(r);
    let state = r.join("state.json");
    {
        let (mut ex, _) = Executor::with_state_file(h.clone(), &state).unwrap();
        do_changes(&mut ex);
    }
    let (ex, rep) = Executor::with_state_file(h, &state).unwrap();
    assert!(rep.is_clean() && !rep.is_empty(), "{rep}");
    assert_restored(r);
    assert!(ex.record().is_empty());
    assert!(!state.exists());
}

#[test]
fn clean_shutdown_restores_and_twice_is_harmless() {
    let (root, h) = fake_v1();
    let r = root.path();
    operator_groups(r);
    let state = r.join("state.json");
    let (mut ex, _) = Executor::with_state_file(h, &state).unwrap();
    do_changes(&mut ex);
    assert_changed(r);
    let rep = ex.restore_all();
    assert!(rep.is_clean(), "{rep}");
    assert_restored(r);
    assert!(ex.restore_all().is_empty());
    assert!(!state.exists());
}

#[test]
fn recover_skips_groups_that_are_gone_and_keeps_failures() {
    let (root, h) = fake_v1();
    let r = root.path();
    operator_groups(r);
    let state = r.join("state.json");
    {
        let (mut ex, _) = Executor::with_state_file(h.clone(), &state).unwrap();
        let lc = ex.open_group("lc", &[Controller::Cpu]).unwrap();
        ex.set(&lc, Knob::CpuIdle(true)).unwrap();
        let b = ex.create_group("b", &[Controller::Cpu]).unwrap();
        ex.add_process(&b, 7).unwrap();
    }
    // The operator removed lc meanwhile; b's parent refuses tasks.
    std::fs::remove_dir_all(r.join("cpu/lc")).unwrap();
    std::fs::remove_file(r.join("cpu/cgroup.procs")).unwrap();
    let rep = Executor::recover(&state).unwrap();
    assert_eq!(rep.failures.len(), 1, "{rep}");
    assert!(rep.failures[0].contains("cpu/cgroup.procs"), "{rep}");
    assert!(
        rep.actions
            .iter()
            .any(|a| matches!(a, RestoreAction::Skipped { reason, .. } if reason.contains("gone"))),
        "{rep}"
    );
    let rec = StateRecord::load(&state)
        .unwrap()
        .expect("the failure stays recorded");
    assert!(rec.originals.is_empty());
    assert_eq!(rec.created.len(), 1);
    // Fixed: the next recovery finishes the job.
    std::fs::write(r.join("cpu/cgroup.procs"), "").unwrap();
    let rep = Executor::recover(&state).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert!(!r.join("cpu/b").exists());
    assert!(!state.exists());
}

#[test]
fn restore_on_drop_for_the_harness() {
    let (root, h) = fake_v1();
    let r = root.path();
    {
        let mut ex = Executor::new(h.clone()).restore_on_drop(true);
        ex.create_group("elfen-bench-1-cpuset", &[Controller::Cpuset])
            .unwrap();
        assert!(r.join("cpuset/elfen-bench-1-cpuset").exists());
    }
    assert!(!r.join("cpuset/elfen-bench-1-cpuset").exists());
    // Without it, a drop leaves the group (as a crash would).
    {
        let mut ex = Executor::new(h);
        ex.create_group("elfen-bench-2-cpuset", &[Controller::Cpuset])
            .unwrap();
    }
    assert!(r.join("cpuset/elfen-bench-2-cpuset").exists());
}

#[test]
fn a_bad_state_file_is_an_error_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("s.json");
    std::fs::write(&f, "{ not json").unwrap();
    let e = Executor::recover(&f).unwrap_err().to_string();
    assert!(
        e.contains("s.json") && e.contains("not a valid state file"),
        "{e}"
    );
    std::fs::write(&f, r#"{"version":9,"root":"/x","layout":"v1","pid":1}"#).unwrap();
    let e = Executor::recover(&f).unwrap_err().to_string();
    assert!(e.contains("version 9"), "{e}");
    std::fs::write(
        &f,
        r#"{"version":1,"root":"/nonexistent-root","layout":"v1","pid":1}"#,
    )
    .unwrap();
    let e = Executor::recover(&f).unwrap_err().to_string();
    assert!(e.contains("hierarchy is gone"), "{e}");
    let _ = Hierarchy::detect(d.path()).unwrap_err();
}
