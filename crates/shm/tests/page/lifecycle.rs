//! Create, attach, replace and clean up a page; the spec's validation.

use crate::common::{tmp, two_lanes};
use elfen_shm::*;
use std::sync::atomic::Ordering::Relaxed;

/// The segment's stat, or None once it is freed.
fn seg_stat(id: i32) -> Option<SegmentStat> {
    Segment::stat(id).ok()
}

#[test]
fn create_attach_and_cleanup() {
    let d = tmp();
    let p = d.path().join("sig");
    let page = Page::create(&p, &two_lanes()).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 384);
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["sig"], "one file: the batch lines are no file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let id = page.batch_shmid();
    assert_eq!(
        page.header().batch_shmid.load(Relaxed),
        id as u32,
        "the header names the segment"
    );
    let st = seg_stat(id).unwrap();
    assert_eq!(
        (st.size, st.mode, st.cuid),
        (192, DEFAULT_BATCH_MODE, unsafe { libc::geteuid() })
    );
    assert_eq!(
        DEFAULT_BATCH_MODE, 0o644,
        "no batch region others can write by default"
    );
    assert!(st.marked_for_removal, "freed with its last attachment");

    let lc = Page::attach(&p, Access::Lc).unwrap();
    assert!(lc.page_writable() && !lc.batch_writable());
    let b = Page::attach_expect(&p, Access::Batch, 2).unwrap();
    assert!(!b.page_writable() && b.batch_writable());
    assert_eq!(b.clock(), page.clock());
    assert_eq!(seg_stat(id).unwrap().attached, 3);
    // a store by the LC is seen by the batch side through its own mapping
    lc.lc(0)
        .unwrap()
        .state
        .store(state::pack(true, 1, 0), Relaxed);
    assert!(state::busy(b.lc(0).unwrap().state.load(Relaxed)));
    b.batch(1).unwrap().naps.fetch_add(1, Relaxed);
    assert_eq!(lc.batch(1).unwrap().naps.load(Relaxed), 1);
    let c = b.read_controller(1).unwrap();
    assert_eq!((c.role, c.cpu, c.partners()), (role::BATCH, 1, &[0][..]));
    assert_eq!(b.lane_of_cpu(1), Some(1));
    assert_eq!(b.lane_of_cpu(7), None);
    // read-only handles refuse writes with an error, not a segfault
    let e = b.set_kill(true).unwrap_err().to_string();
    assert!(e.contains("read-only") && e.contains("kill"), "{e}");
    drop(page);
    assert!(!p.exists(), "the creator removes its page file");
    assert!(
        seg_stat(id).is_some(),
        "the segment lives while others have the page attached"
    );
    drop((lc, b));
    assert!(seg_stat(id).is_none(), "and is freed with the last of them");
}

#[test]
fn a_persisted_page_without_holders_is_refused_with_the_reason() {
    let d = tmp();
    let p = d.path().join("sig");
    let mut page = Page::create(&p, &two_lanes()).unwrap();
    let id = page.batch_shmid();
    page.persist();
    drop(page);
    assert!(p.exists(), "persisted");
    assert!(
        seg_stat(id).is_none(),
        "nobody holds it: the segment is gone"
    );
    let e = Page::attach(&p, Access::Observer).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string())
            && e.contains(&format!("shm id {id}"))
            && e.contains(&format!("pid {}", std::process::id()))
            && e.contains("is gone")
            && e.contains("re-create"),
        "{e}"
    );
}

#[test]
fn create_refuses_an_existing_page_unless_replacing() {
    let d = tmp();
    let p = d.path().join("sig");
    let mut first = Page::create(&p, &two_lanes()).unwrap();
    let e = Page::create(&p, &two_lanes()).unwrap_err().to_string();
    assert!(
        e.contains("already exists")
            && e.contains("still running")
            && e.contains(&users::describe_user(users::euid()))
            && e.contains("create with replace"),
        "{e}"
    );
    first.persist();
    drop(first);
    assert!(p.exists());
    let spec = PageSpec {
        replace: true,
        ..PageSpec::for_pairs(&[(0, vec![1]), (2, vec![3])], 1, 0)
    };
    let second = Page::create(&p, &spec).unwrap();
    assert_eq!(Page::attach(&p, Access::Observer).unwrap().lane_count(), 4);
    drop(second);
    assert!(!p.exists());
    Page::remove(&p).unwrap(); // idempotent
    let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert!(names.is_empty(), "no temp files left: {names:?}");
}

#[test]
fn spec_validation() {
    let mut s = two_lanes();
    s.lanes[1].partners = vec![5];
    assert!(
        Page::create("/nonexistent/x", &s)
            .unwrap_err()
            .to_string()
            .contains("partner 5")
    );
    let mut s = two_lanes();
    s.lanes[1].cpu = 0;
    assert!(
        s.validate()
            .unwrap_err()
            .to_string()
            .contains("cpu 0 appears twice")
    );
    let mut s = two_lanes();
    s.lanes[1].role = role::REQUEST;
    assert!(
        s.validate()
            .unwrap_err()
            .to_string()
            .contains("must be a batch lane")
    );
    let mut s = two_lanes();
    s.lanes[0].role = role::BATCH;
    assert!(
        s.validate()
            .unwrap_err()
            .to_string()
            .contains("watches exactly one request lane")
    );
    let s = PageSpec {
        lanes: vec![],
        ..two_lanes()
    };
    assert!(s.validate().is_err());
    let s = PageSpec::for_pairs(&[(0, (1..8).collect())], 1, 0);
    assert!(s.validate().unwrap_err().to_string().contains("at most 6"));
}

#[test]
fn a_page_can_be_created_with_the_monotonic_clock() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("mono");
    let spec = PageSpec {
        clock: Some(elfen_shm::Clock::MONOTONIC),
        ..two_lanes()
    };
    let page = Page::create(&p, &spec).unwrap();
    assert_eq!(page.clock(), elfen_shm::Clock::MONOTONIC);
    let seen = Page::attach(&p, Access::Observer).unwrap();
    assert_eq!(seen.clock(), elfen_shm::Clock::MONOTONIC);
    assert_eq!(
        seen.header()
            .clock
            .load(std::sync::atomic::Ordering::Relaxed),
        elfen_shm::clock_kind::MONOTONIC_NS
    );
}
