//! Bad input: each is a clear error (asserted on the message), nothing
//! panics, the calling thread's affinity is what it was, and no batch line
//! is left with `attached`/`napping`/`sleepers` set.

use crate::common::*;
use elfen_policy::PolicyKind;
use elfen_runtime::{BatchOptions, BatchThread, LcLane, NapChoice, RuntimeError, machine_features};
use elfen_shm::{Access, Page, PageSpec, nap, role};
use std::fmt::Debug;
use std::io::{Seek, SeekFrom, Write};
use std::sync::Arc;

/// `r` must fail with a message containing every piece, leaving the
/// thread's affinity as `before`.
#[track_caller]
fn expect_err<T: Debug>(r: Result<T, RuntimeError>, before: &[u32], pieces: &[&str]) -> String {
    let msg = r.expect_err("attach must fail").to_string();
    for p in pieces {
        assert!(msg.contains(p), "message lacks {p:?}: {msg}");
    }
    assert_eq!(
        elfen_topo::current_affinity().unwrap(),
        before,
        "a failed attach changed the thread's affinity ({msg})"
    );
    msg
}

fn batch(page: &Arc<Page>, lane: u32) -> Result<BatchThread, RuntimeError> {
    BatchThread::attach(page.clone(), lane, BatchOptions::default())
}

#[test]
fn missing_short_wrong_magic_and_wrong_version_pages() {
    let before = elfen_topo::current_affinity().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    expect_err(
        BatchThread::open(&missing, 1, BatchOptions::default()),
        &before,
        &["nope", "does not exist"],
    );
    expect_err(
        LcLane::open(&missing, 0),
        &before,
        &["nope", "does not exist"],
    );

    let short = dir.path().join("short");
    std::fs::write(&short, b"ELFENSIG").unwrap();
    expect_err(
        BatchThread::open(&short, 1, BatchOptions::default()),
        &before,
        &["short", "8 bytes, shorter than its 128-byte header"],
    );

    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, vec![b'x'; 384]).unwrap();
    expect_err(
        LcLane::open(&garbage, 0),
        &before,
        &[
            "garbage",
            "magic is \"xxxxxxxx\"",
            "not an elfen signal page",
        ],
    );

    let old = dir.path().join("old");
    let page = Page::create(&old, &pair_spec(PolicyKind::BorrowIdle.id())).unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(&old).unwrap();
    f.seek(SeekFrom::Start(8)).unwrap();
    f.write_all(&99u32.to_le_bytes()).unwrap();
    expect_err(
        BatchThread::open(&old, 1, BatchOptions::default()),
        &before,
        &["old", "ABI version 99, this build speaks version 2"],
    );
    expect_err(LcLane::open(&old, 0), &before, &["ABI version 99"]);
    assert_quiescent(&page);
}

#[test]
fn wrong_lanes_and_roles() {
    let before = elfen_topo::current_affinity().unwrap();
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let page = &fx.page;
    expect_err(
        batch(page, 7),
        &before,
        &["lane 7 is out of range", "has 2 lanes"],
    );
    expect_err(
        LcLane::attach(page.clone(), 7),
        &before,
        &["lane 7 is out of range"],
    );
    expect_err(
        batch(page, 0),
        &before,
        &[
            "lane 0",
            "is a request lane",
            "a batch thread attaches to a batch lane",
            "its batch lane is 1",
        ],
    );
    expect_err(
        LcLane::attach(page.clone(), 1),
        &before,
        &[
            "lane 1",
            "is a batch lane (partner of request lane 0)",
            "an LC thread attaches to a request lane",
        ],
    );

    // An unused lane, and a batch lane whose partner is not a request lane.
    let mut spec = pair_spec(PolicyKind::BorrowIdle.id());
    spec.lanes.push(lane(2, role::UNUSED, vec![], 1));
    let fx3 = Fixture::with_spec(spec.clone(), 0);
    expect_err(batch(&fx3.page, 2), &before, &["lane 2", "takes no part"]);
    expect_err(
        LcLane::attach(fx3.page.clone(), 2),
        &before,
        &["lane 2", "takes no part"],
    );
    let mut bad = spec.lanes[1].clone();
    bad.partners = vec![2];
    fx3.page.write_controller(1, &bad).unwrap();
    expect_err(
        batch(&fx3.page, 1),
        &before,
        &["lane 1", "lane 2, is not a request lane"],
    );
    fx.assert_quiescent();
    fx3.assert_quiescent();
}

#[test]
fn read_only_attachments() {
    let before = elfen_topo::current_affinity().unwrap();
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let path = fx.page.path().to_path_buf();
    for access in [Access::Batch, Access::Observer] {
        let p = Arc::new(Page::attach(&path, access).unwrap());
        expect_err(
            LcLane::attach(p, 0),
            &before,
            &["read-only", "page file", "LC or controller access"],
        );
    }
    for access in [Access::Lc, Access::Observer] {
        let p = Arc::new(Page::attach(&path, access).unwrap());
        expect_err(
            batch(&p, 1),
            &before,
            &["read-only", "batch segment", "batch or controller access"],
        );
    }
    fx.assert_quiescent();
}

#[test]
fn unknown_policy_and_nap_ids() {
    let before = elfen_topo::current_affinity().unwrap();
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let mut l = pair_spec(1).lanes[1].clone();
    l.policy = 9;
    fx.page.write_controller(1, &l).unwrap();
    expect_err(
        batch(&fx.page, 1),
        &before,
        &["lane 1", "unknown policy id 9"],
    );
    l.policy = PolicyKind::FixedBudget.id();
    fx.page.write_controller(1, &l).unwrap();
    // write_controller itself refuses an unknown nap id; a controller that
    // writes the line directly (another implementation, or a bug) must still
    // be caught at attach.
    l.nap = 9;
    assert!(fx.page.write_controller(1, &l).is_err());
    fx.page
        .controller(1)
        .unwrap()
        .nap
        .store(9, std::sync::atomic::Ordering::Release);
    expect_err(
        batch(&fx.page, 1),
        &before,
        &["lane 1", "unknown nap backend id 9"],
    );
    fx.assert_quiescent();
}

#[test]
fn explicit_umwait_or_mwaitx_where_absent() {
    let before = elfen_topo::current_affinity().unwrap();
    let f = machine_features();
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let mut checked = 0;
    for (choice, id, present, lacks) in [
        (NapChoice::Umwait, nap::UMWAIT, f.umwait_allowed, "umwait"),
        (NapChoice::Mwaitx, nap::MWAITX, f.mwaitx, "MONITORX"),
    ] {
        if present {
            eprintln!("{choice} exists on this machine: not an error here");
            continue;
        }
        checked += 1;
        let name = format!("nap backend {choice} is unavailable");
        // asked for in the options …
        expect_err(
            BatchThread::attach(fx.page.clone(), 1, BatchOptions::default().nap(choice)),
            &before,
            &[&name, lacks, "use auto, hybrid, spin or futex"],
        );
        // … or by the controller line
        let mut l = pair_spec(1).lanes[1].clone();
        l.nap = id;
        fx.page.write_controller(1, &l).unwrap();
        expect_err(batch(&fx.page, 1), &before, &[&name]);
    }
    println!("checked {checked} absent hardware waits");
    fx.assert_quiescent();
}

#[test]
fn pinning_to_a_cpu_that_does_not_exist() {
    let before = elfen_topo::current_affinity().unwrap();
    let spec = PageSpec::for_pairs(&[(0, vec![4000])], PolicyKind::BorrowIdle.id(), 0);
    let fx = Fixture::with_spec(spec, 0);
    expect_err(
        batch(&fx.page, 1),
        &before,
        &[
            "cannot pin the batch thread to lane 1 (cpu 4000)",
            "sched_setaffinity",
        ],
    );
    // Without pinning the same lane attaches.
    let b = BatchThread::attach(fx.page.clone(), 1, BatchOptions::default().pin(false)).unwrap();
    assert!(!b.pinned());
    drop(b);
    fx.assert_quiescent();
}

#[test]
fn one_lc_thread_per_request_lane() {
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let lc = LcLane::attach(fx.page.clone(), 0).unwrap();
    let e = LcLane::attach(fx.page.clone(), 0).unwrap_err().to_string();
    assert!(
        e.contains("lane 0") && e.contains("already has an LC thread"),
        "{e}"
    );
    // From another thread too.
    let p = fx.page.clone();
    let e = std::thread::spawn(move || LcLane::attach(p, 0).unwrap_err().to_string())
        .join()
        .unwrap();
    assert!(e.contains("already has an LC thread"), "{e}");
    drop(lc);
    // Released: it attaches again.
    LcLane::attach(fx.page.clone(), 0).unwrap();
    fx.assert_quiescent();
}

#[test]
fn dynamic_refresh_reports_missing_counters_at_attach() {
    let fx = Fixture::with_spec(pair_spec(PolicyKind::DynamicRefresh.id()), 0);
    let b = BatchThread::attach(fx.page.clone(), 1, BatchOptions::default().pin(false)).unwrap();
    let note = b
        .ipc_note()
        .expect("dynamic refresh always says where its IPC comes from");
    if machine_features().perf_hw_counters {
        eprintln!("this machine has hardware counters: {note}");
    } else {
        assert!(
            note.contains("no hardware counters: dynamic refresh behaves as refresh budget"),
            "{note}"
        );
        assert!(b.describe().contains(note), "{}", b.describe());
    }
    drop(b);
    let fx = Fixture::with_spec(pair_spec(PolicyKind::RefreshBudget.id()), 0);
    let b = BatchThread::attach(fx.page.clone(), 1, BatchOptions::default().pin(false)).unwrap();
    assert_eq!(b.ipc_note(), None);
    drop(b);
    fx.assert_quiescent();
}

#[test]
fn a_controller_that_died_mid_rewrite_blocks_nobody() {
    use std::sync::atomic::Ordering::Relaxed;
    let before = elfen_topo::current_affinity().unwrap();
    let fx = Fixture::with_spec(pair_spec(PolicyKind::BorrowIdle.id()), 0);
    let mut lc = LcLane::attach(fx.page.clone(), 0).unwrap();
    let mut b =
        BatchThread::attach(fx.page.clone(), 1, BatchOptions::default().pin(false)).unwrap();
    b.check();
    // The controller died with the batch lane's seqlock odd.
    let seq = &fx.page.controller(1).unwrap().config_seq;
    seq.store(seq.load(Relaxed) | 1, Relaxed);
    lc.request_begin(1);
    lc.request_end();
    b.check(); // keeps its configuration instead of waiting forever
    assert_eq!(b.policy().kind, PolicyKind::BorrowIdle);
    expect_err(
        BatchThread::attach(fx.page.clone(), 1, BatchOptions::default()),
        &before,
        &["lane 1", "mid-rewrite (odd config_seq)"],
    );
    // The LC side's partner lookup does not wait either.
    let seq0 = &fx.page.controller(0).unwrap().config_seq;
    seq0.store(seq0.load(Relaxed) | 1, Relaxed);
    lc.request_begin(2);
    lc.request_end();
    drop(b);
    fx.assert_quiescent();
}
