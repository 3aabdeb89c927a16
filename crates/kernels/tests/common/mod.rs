//! Helpers of the tests that run kernels against a real signal page.

use elfen_shm::{Page, PageSpec};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits (yielding) until `cond` holds; fails the test after 10 s.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// A borrow-idle page with request lane 0 (CPU 0) and batch lane 1 (CPU 1)
/// in a temporary directory (returned too: the page lives as long as it).
pub fn page() -> (tempfile::TempDir, Arc<Page>) {
    let dir = tempfile::tempdir().unwrap();
    let borrow_idle = elfen_policy::PolicyKind::BorrowIdle.id();
    let spec = PageSpec::for_pairs(&[(0, vec![1])], borrow_idle, 0);
    let page = Arc::new(Page::create(dir.path().join("sig"), &spec).unwrap());
    (dir, page)
}
