//! The lanes a benchmark runs on and the signal page it runs over.

use crate::error::MicroError;
use elfen_cmd::interrupt::{self, CleanupGuard};
use elfen_shm::{Page, PageSpec};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The request lane (LC side) and the batch lane (batch thread) measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lanes {
    /// CPU of the request lane: the LC thread runs here.
    pub request_cpu: u32,
    /// CPU of the batch lane: the batch thread runs here.
    pub batch_cpu: u32,
    /// How the pair was chosen (`elfen_topo::PairPlan::describe`).
    pub pairing: String,
}

impl Lanes {
    /// The first pair of `elfen_topo::plan_pairs` (SMT siblings, `spec`, or
    /// consecutive CPUs: 0↔1 on the 2-vCPU development machines).
    pub fn plan(spec: Option<&str>) -> Result<Lanes, MicroError> {
        let topo = elfen_topo::Topology::detect()?;
        let plan = elfen_topo::plan_pairs(&topo, spec)?;
        let pair = plan.first().ok_or_else(|| {
            MicroError::Setup(format!(
                "no request/batch lane pair on this machine ({}); the micro-benchmarks need two lanes",
                plan.describe()
            ))
        })?;
        Ok(Lanes {
            request_cpu: pair.request,
            batch_cpu: pair.batch[0],
            pairing: plan.describe(),
        })
    }
}

/// Lane indices in the benchmark page: the request lane is lane 0, its
/// batch lane lane 1.
pub const REQUEST_LANE: u32 = 0;
/// See [`REQUEST_LANE`].
pub const BATCH_LANE: u32 = 1;

/// A signal page for one request/batch pair (borrow idle), in a fresh
/// directory under `/dev/shm` (or the temp dir where `/dev/shm` is
/// missing). The page files and the directory are removed when it drops, and
/// by a second Ctrl-C.
pub struct BenchPage {
    page: Arc<Page>,
    path: PathBuf,
    _cleanup: CleanupGuard,
    // Dropped last: the page removes its files first, then the directory goes.
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for BenchPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchPage")
            .field("path", &self.path)
            .finish()
    }
}

impl BenchPage {
    /// Creates the page for `lanes`.
    pub fn create(lanes: &Lanes) -> Result<BenchPage, MicroError> {
        let builder = {
            let mut b = tempfile::Builder::new();
            b.prefix("elfen-micro-");
            b
        };
        let dir = builder
            .tempdir_in("/dev/shm")
            .or_else(|_| builder.tempdir())
            .map_err(|source| MicroError::Io {
                what: "create a directory for the signal page".into(),
                source,
            })?;
        let path = dir.path().join("page");
        let spec = PageSpec::for_pairs(
            &[(lanes.request_cpu, vec![lanes.batch_cpu])],
            elfen_policy::PolicyKind::BorrowIdle.id(),
            0,
        );
        let cleanup = interrupt::register(&[&path], &[dir.path()]);
        let page = Arc::new(Page::create(&path, &spec)?);
        Ok(BenchPage {
            page,
            path,
            _cleanup: cleanup,
            dir,
        })
    }

    /// The page.
    pub fn page(&self) -> &Arc<Page> {
        &self.page
    }

    /// The page file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory holding the page.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
