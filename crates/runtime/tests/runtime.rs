//! Smoke test (the full suite follows).
use elfen_runtime::*;
use elfen_shm::{Page, PageSpec};
use std::sync::Arc;

#[test]
fn smoke() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("sig");
    let page = Arc::new(Page::create(&p, &PageSpec::for_pairs(&[(0, vec![1])], 1, 0)).unwrap());
    let mut lc = LcLane::attach(page.clone(), 0).unwrap();
    let mut b = BatchThread::attach(
        page.clone(),
        1,
        BatchOptions::default().nap(NapChoice::Spin),
    )
    .unwrap();
    println!("{}", b.describe());
    b.check();
    lc.request_begin(1);
    lc.request_end();
    b.check();
    println!("{:?}", b.stats());
}
