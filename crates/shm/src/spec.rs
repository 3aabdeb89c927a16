//! Where pages live ([`page_path`]), what a page to create describes ([`PageSpec`]: its lanes, identity and
//! clock) and the checks a spec must pass before anything is written
//! ([`PageSpec::validate`]), and what a lane's controller line says when
//! read back ([`ControllerConfig`]). `crate::page` creates pages from it.

use crate::clock::Clock;
use crate::error::ShmError;
use crate::layout::*;
use std::path::{Path, PathBuf};

/// Directory of pages named without a `/`.
pub const SHM_DIR: &str = "/dev/shm";
/// The default page name.
pub const DEFAULT_NAME: &str = "elfen";

/// The page file for `name`: a name without `/` lives in `/dev/shm`; anything
/// else is taken as a path.
pub fn page_path(name: &str) -> PathBuf {
    if name.contains('/') {
        PathBuf::from(name)
    } else {
        Path::new(SHM_DIR).join(name)
    }
}

/// Default permission bits of the batch segment: its creator's user writes,
/// every user reads (observers such as `elfen status`).
pub const DEFAULT_BATCH_MODE: u32 = 0o644;
/// Permission bits of a batch segment given to a batch group: the group
/// writes too.
pub const DEFAULT_GROUP_BATCH_MODE: u32 = 0o664;

/// Default spin bound of the hybrid nap (50 µs: longer than a futex round
/// trip on a virtual machine, shorter than most idle periods).
pub const DEFAULT_HYBRID_SPIN_NS: u32 = 50_000;

/// One lane of a page to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneSpec {
    /// Logical CPU id of the lane.
    pub cpu: u32,
    /// [`role`] of the lane.
    pub role: u32,
    /// Partner lane indices (see [`ControllerLine::partners`]).
    pub partners: Vec<u32>,
    /// [`crate::policy`] id.
    pub policy: u32,
    /// Budget, ns.
    pub budget_ns: u64,
    /// [`nap`] backend requested.
    pub nap: u32,
    /// Hybrid nap spin bound, ns.
    pub hybrid_spin_ns: u32,
    /// Reference IPC × 1000 for dynamic refresh (0 = none).
    pub ref_ipc_milli: u32,
}

/// A fixed page identity, for reproducible pages (golden test vectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The clock timestamps count.
    pub clock: Clock,
    /// Instance id.
    pub instance: u64,
    /// Creator pid.
    pub creator_pid: u32,
    /// Creation time, Unix seconds.
    pub created_unix_s: u64,
}

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSpec {
    /// The lanes, in page order (lane index = position).
    pub lanes: Vec<LaneSpec>,
    /// `None`: this process, now, a random instance, [`PageSpec::clock`].
    pub identity: Option<Identity>,
    /// The clock of a page without a fixed identity; `None`: the detected
    /// one (TSC where invariant). Pages that writers without a TSC reader
    /// attach to (Java) need [`Clock::MONOTONIC`].
    pub clock: Option<Clock>,
    /// Mode of the page file (default 0644: LC and controller write, all
    /// read). Group or other write bits are refused: attach refuses a page
    /// file others can write.
    pub page_mode: u32,
    /// Permission bits of the batch segment (default [`DEFAULT_BATCH_MODE`]:
    /// the creator's user writes, everyone reads; with a `batch_gid`,
    /// [`DEFAULT_GROUP_BATCH_MODE`] lets that group write too).
    pub batch_mode: u32,
    /// Group of the batch segment: the batch users who may attach batch
    /// threads (set `batch_mode` to let it write, e.g. with
    /// [`PageSpec::with_batch_group`]).
    pub batch_gid: Option<u32>,
    /// Replace an existing page at the path instead of failing.
    pub replace: bool,
}

impl PageSpec {
    /// A page for request/batch pairs given as `(request cpu, batch cpus)`:
    /// lanes are laid out pair by pair, request lane first.
    pub fn for_pairs(pairs: &[(u32, Vec<u32>)], policy: u32, budget_ns: u64) -> PageSpec {
        let mut lanes = Vec::new();
        for (req, batch) in pairs {
            let r = lanes.len() as u32;
            lanes.push(LaneSpec {
                cpu: *req,
                role: role::REQUEST,
                partners: (1..=batch.len() as u32).map(|i| r + i).collect(),
                policy,
                budget_ns,
                nap: nap::AUTO,
                hybrid_spin_ns: DEFAULT_HYBRID_SPIN_NS,
                ref_ipc_milli: 0,
            });
            for b in batch {
                lanes.push(LaneSpec {
                    cpu: *b,
                    role: role::BATCH,
                    partners: vec![r],
                    policy,
                    budget_ns,
                    nap: nap::AUTO,
                    hybrid_spin_ns: DEFAULT_HYBRID_SPIN_NS,
                    ref_ipc_milli: 0,
                });
            }
        }
        PageSpec {
            lanes,
            identity: None,
            clock: None,
            page_mode: 0o644,
            batch_mode: DEFAULT_BATCH_MODE,
            batch_gid: None,
            replace: false,
        }
    }

    /// This spec with its batch segment given to group `gid`, which may
    /// write it ([`DEFAULT_GROUP_BATCH_MODE`]).
    pub fn with_batch_group(self, gid: u32) -> PageSpec {
        PageSpec {
            batch_mode: DEFAULT_GROUP_BATCH_MODE,
            batch_gid: Some(gid),
            ..self
        }
    }

    /// Checks that the lanes form a consistent page.
    pub fn validate(&self) -> Result<(), ShmError> {
        let n = self.lanes.len();
        let bad = |m: String| Err(ShmError::BadSpec(m));
        if n == 0 || n > MAX_LANES as usize {
            return bad(format!("a page has 1..={MAX_LANES} lanes, got {n}"));
        }
        if self.page_mode & !0o777 != 0 || self.page_mode & 0o022 != 0 {
            return bad(format!(
                "page_mode {:o}: the page file may be written by its owner only (attach \
                 refuses a page file others can write); use 644 or 600",
                self.page_mode
            ));
        }
        if self.batch_mode & !0o777 != 0 {
            return bad(format!(
                "batch_mode {:o}: permission bits only (e.g. 644, 664)",
                self.batch_mode
            ));
        }
        for (i, l) in self.lanes.iter().enumerate() {
            if self.lanes[..i].iter().any(|o| o.cpu == l.cpu) {
                return bad(format!("lane {i}: cpu {} appears twice", l.cpu));
            }
            for &p in &l.partners {
                if p as usize >= n || p as usize == i {
                    return bad(format!(
                        "lane {i}: partner {p} is not another lane of this page"
                    ));
                }
            }
            match l.role {
                role::UNUSED if l.partners.is_empty() => {}
                role::UNUSED => return bad(format!("lane {i}: an unused lane has no partners")),
                role::REQUEST => {
                    if l.partners.len() > MAX_PARTNERS {
                        return bad(format!(
                            "lane {i}: {} batch partners, at most {MAX_PARTNERS}",
                            l.partners.len()
                        ));
                    }
                    if let Some(p) = l
                        .partners
                        .iter()
                        .find(|&&p| self.lanes[p as usize].role != role::BATCH)
                    {
                        return bad(format!(
                            "lane {i}: partner {p} of a request lane must be a batch lane"
                        ));
                    }
                }
                role::BATCH => {
                    if l.partners.len() != 1
                        || self.lanes[l.partners[0] as usize].role != role::REQUEST
                    {
                        return bad(format!(
                            "lane {i}: a batch lane watches exactly one request lane"
                        ));
                    }
                }
                r => return bad(format!("lane {i}: unknown role {r}")),
            }
            if l.nap > nap::MWAITX {
                return bad(format!("lane {i}: unknown nap backend {}", l.nap));
            }
        }
        Ok(())
    }
}

/// A controller line read consistently (under its seqlock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerConfig {
    /// [`role`].
    pub role: u32,
    /// Logical CPU.
    pub cpu: u32,
    /// Policy id.
    pub policy: u32,
    /// [`nap`] backend.
    pub nap: u32,
    /// Budget, ns.
    pub budget_ns: u64,
    /// Reference IPC × 1000.
    pub ref_ipc_milli: u32,
    /// Valid entries of `partners`.
    pub partner_count: u32,
    /// Partner lanes.
    pub partners: [u32; MAX_PARTNERS],
    /// Hybrid spin bound, ns.
    pub hybrid_spin_ns: u32,
    /// The seqlock value the snapshot was taken at (even).
    pub seq: u32,
}

impl ControllerConfig {
    /// The partner lanes.
    pub fn partners(&self) -> &[u32] {
        &self.partners[..(self.partner_count as usize).min(MAX_PARTNERS)]
    }
}
