//! What the page tests share: a two-lane spec and a scratch directory.

use elfen_shm::*;

/// One LC lane (cpu 0) and one batch lane (cpu 1).
pub fn two_lanes() -> PageSpec {
    PageSpec::for_pairs(&[(0, vec![1])], 1, 0)
}

/// A scratch directory, removed when dropped.
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}
