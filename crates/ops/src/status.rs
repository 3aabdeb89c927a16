//! A typed snapshot of a signal page ([`PageStatus`]) and the rates between
//! two snapshots ([`Rates`]). Reading attaches as an observer (both files
//! read-only), so it never disturbs the writers.

use crate::health::DaemonHealth;
use elfen_policy::PolicyKind;
use elfen_shm::{Access, Page, ShmError, pid_alive, role, state};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Acquire;

/// A heartbeat older than this many milliseconds is stale by default
/// (`elfen status --stale-ms`).
pub const DEFAULT_STALE_MS: f64 = 1000.0;

/// Whether the process that controls the page is alive, as far as the page
/// can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Controller {
    /// The controller beats and its last beat is recent.
    Beating,
    /// The controller beat once, but not within the staleness bound.
    Stale,
    /// Nothing beats on this page (a page whose creator does not run a
    /// controller loop, e.g. an LC service publishing through the LC API);
    /// the creator process is alive.
    CreatorAlive,
    /// Nothing beats and the process that created the page is gone.
    CreatorGone,
}

impl Controller {
    /// One word for tables.
    pub fn word(self) -> &'static str {
        match self {
            Controller::Beating => "beating",
            Controller::Stale => "STALE",
            Controller::CreatorAlive => "no heartbeat (a page without a controller loop)",
            Controller::CreatorGone => "no heartbeat, creator gone",
        }
    }
}

/// One lane's view.
#[derive(Debug, Clone, Serialize)]
pub struct LaneStatus {
    /// Lane index.
    pub lane: u32,
    /// Logical CPU.
    pub cpu: u32,
    /// `request`, `batch` or `unused`.
    pub role: &'static str,
    /// Policy name (`unmanaged` or one of Figure 9's).
    pub policy: &'static str,
    /// Co-running budget, µs.
    pub budget_us: f64,
    /// Partner lanes.
    pub partners: Vec<u32>,
    /// The LC line (request lanes).
    pub lc: LcView,
    /// The batch line.
    pub batch: BatchView,
}

/// A request lane's LC line.
#[derive(Debug, Clone, Serialize)]
pub struct LcView {
    /// A request is running.
    pub busy: bool,
    /// Its id (valid while busy).
    pub request_id: u64,
    /// How long it has been running, µs (while busy).
    pub busy_for_us: f64,
    /// Requests waiting.
    pub queue_len: u32,
    /// Request begins so far (31-bit sequence).
    pub begins: u32,
    /// Completed requests.
    pub requests: u64,
    /// Time in completed requests, ms.
    pub busy_ms: f64,
    /// The attached LC thread (0 = none).
    pub lc_tid: u32,
    /// Whether that thread still exists.
    pub lc_tid_alive: bool,
}

/// A lane's batch line.
#[derive(Debug, Clone, Serialize)]
pub struct BatchView {
    /// Batch threads attached.
    pub attached: u32,
    /// Napping now.
    pub napping: u32,
    /// Blocked in the OS now.
    pub sleepers: u32,
    /// Naps taken.
    pub naps: u64,
    /// Wakes.
    pub wakes: u64,
    /// Time batch threads ran batch code, ms (summed over threads).
    pub run_ms: f64,
    /// Of that, ms co-running with a request (budget policies).
    pub corun_ms: f64,
    /// Slow-path entries.
    pub slow_checks: u64,
}

/// A snapshot of a whole page.
#[derive(Debug, Clone, Serialize)]
pub struct PageStatus {
    /// The page file.
    pub path: PathBuf,
    /// Layout version.
    pub abi_version: u32,
    /// `tsc` or `monotonic`.
    pub clock: &'static str,
    /// Process that created the page, and whether it is alive.
    pub creator_pid: u32,
    /// Whether `creator_pid` still exists.
    pub creator_alive: bool,
    /// Seconds since the Unix epoch at creation.
    pub created_unix_s: u64,
    /// Age of the controller's last heartbeat, ms (`None`: it never beat).
    pub heartbeat_age_ms: Option<f64>,
    /// What that says about the controller.
    pub controller: Controller,
    /// The kill switch is set (paused or unmanaged): borrowing stopped.
    pub killed: bool,
    /// The kill switch: `off`, `paused` or `unmanaged`.
    pub kill_mode: &'static str,
    /// What batch threads do now, header line 1 considered: `managed`,
    /// `unmanaged`, `paused (kill switch)`, `paused (heartbeat stale)`.
    pub batch_mode: &'static str,
    /// The page's heartbeat staleness bound, ms (`None`: no check).
    pub heartbeat_stale_ms: Option<f64>,
    /// What the daemon that created the page says of its batch groups
    /// (`<page>.health.json`; `None`: no such record — not a daemon's page).
    pub daemon: Option<DaemonHealth>,
    /// Why a record beside the page is not shown (untrusted, unreadable).
    pub daemon_note: Option<String>,
    /// Monotonic time of the snapshot, ns (for rates).
    pub taken_ns: u64,
    /// Per lane.
    pub lanes: Vec<LaneStatus>,
}

fn role_name(r: u32) -> &'static str {
    match r {
        role::REQUEST => "request",
        role::BATCH => "batch",
        _ => "unused",
    }
}

fn policy_name(id: u32) -> &'static str {
    if id == elfen_shm::policy::UNMANAGED {
        return "unmanaged";
    }
    PolicyKind::from_id(id).map_or("unknown", PolicyKind::name)
}

/// Attaches to the page at `path` as an observer.
pub fn attach(path: &Path) -> Result<Page, ShmError> {
    Page::attach(path, Access::Observer)
}

impl PageStatus {
    /// Reads a snapshot of an attached page; `stale_ms` bounds a live
    /// heartbeat's age.
    pub fn read(page: &Page, stale_ms: f64) -> Result<PageStatus, ShmError> {
        let h = page.header();
        let clock = page.clock();
        let now = clock.now();
        let ms = |ticks: u64| clock.ticks_to_ns(ticks) as f64 / 1e6;
        let beat = h.heartbeat.load(Acquire);
        let heartbeat_age_ms = (beat != 0).then(|| ms(now.saturating_sub(beat)));
        let creator_pid = h.creator_pid.load(Acquire);
        let creator_alive = pid_alive(creator_pid);
        // the page's own bound when its controller set one
        let stale_bound_ns = page.heartbeat_stale_ns();
        let stale_ms = if stale_bound_ns > 0 {
            stale_bound_ns as f64 / 1e6
        } else {
            stale_ms
        };
        let controller = match heartbeat_age_ms {
            Some(a) if a <= stale_ms => Controller::Beating,
            Some(_) => Controller::Stale,
            None if creator_alive => Controller::CreatorAlive,
            None => Controller::CreatorGone,
        };
        let mut lanes = Vec::with_capacity(page.lane_count() as usize);
        for lane in 0..page.lane_count() {
            let c = page.read_controller(lane)?;
            let lc = page.lc(lane)?;
            let s = lc.state.load(Acquire);
            let busy = state::busy(s);
            let since = lc.busy_since.load(Acquire);
            let tid = lc.lc_tid.load(Acquire);
            let b = page.batch(lane)?;
            lanes.push(LaneStatus {
                lane,
                cpu: c.cpu,
                role: role_name(c.role),
                policy: policy_name(c.policy),
                budget_us: c.budget_ns as f64 / 1e3,
                partners: c.partners().to_vec(),
                lc: LcView {
                    busy,
                    request_id: if busy { lc.request_id.load(Acquire) } else { 0 },
                    busy_for_us: if busy && since != 0 {
                        ms(now.saturating_sub(since)) * 1e3
                    } else {
                        0.0
                    },
                    queue_len: state::queue_len(s),
                    begins: state::seq(s),
                    requests: lc.requests.load(Acquire),
                    busy_ms: ms(lc.busy_ticks.load(Acquire)),
                    lc_tid: tid,
                    lc_tid_alive: tid != 0 && pid_alive(tid),
                },
                batch: BatchView {
                    attached: b.attached.load(Acquire),
                    napping: b.napping.load(Acquire),
                    sleepers: b.sleepers.load(Acquire),
                    naps: b.naps.load(Acquire),
                    wakes: b.wakes.load(Acquire),
                    run_ms: ms(b.run_ticks.load(Acquire)),
                    corun_ms: ms(b.corun_ticks.load(Acquire)),
                    slow_checks: b.slow_checks.load(Acquire),
                },
            });
        }
        let (daemon, daemon_note) = match DaemonHealth::read(page.path(), creator_pid) {
            Ok(h) => (h, None),
            Err(e) => (None, Some(e)),
        };
        Ok(PageStatus {
            daemon,
            daemon_note,
            path: page.path().to_path_buf(),
            abi_version: h.abi_version.load(Acquire),
            clock: if clock.kind == elfen_shm::clock_kind::TSC {
                "tsc"
            } else {
                "monotonic"
            },
            creator_pid,
            creator_alive,
            created_unix_s: h.created_unix_s.load(Acquire),
            heartbeat_age_ms,
            controller,
            killed: page.kill_mode() != elfen_shm::KillMode::Off,
            kill_mode: page.kill_mode().name(),
            batch_mode: page.batch_mode().name(),
            heartbeat_stale_ms: (stale_bound_ns > 0).then(|| stale_bound_ns as f64 / 1e6),
            taken_ns: elfen_shm::clock::monotonic_ns(),
            lanes,
        })
    }
}

/// One lane's rates between two snapshots.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LaneRates {
    /// Lane index.
    pub lane: u32,
    /// Share of the interval the LC line spent in completed requests.
    /// Requests still running at the end are counted when they complete.
    pub lc_busy_frac: f64,
    /// Requests completed per second.
    pub requests_per_s: f64,
    /// Batch run time per second of interval (summed over batch threads;
    /// counted at naps, so a thread that never naps shows 0 until it does).
    pub batch_run_frac: f64,
    /// Naps per second.
    pub naps_per_s: f64,
}

/// Rates between two snapshots of the same page.
#[derive(Debug, Clone, Serialize)]
pub struct Rates {
    /// Interval, s.
    pub interval_s: f64,
    /// Per lane.
    pub lanes: Vec<LaneRates>,
}

impl Rates {
    /// Rates from `before` to `after` (same page, same lane count).
    pub fn between(before: &PageStatus, after: &PageStatus) -> Rates {
        let dt_s = (after.taken_ns.saturating_sub(before.taken_ns) as f64 / 1e9).max(1e-9);
        let lanes = before
            .lanes
            .iter()
            .zip(&after.lanes)
            .map(|(a, b)| LaneRates {
                lane: b.lane,
                lc_busy_frac: (b.lc.busy_ms - a.lc.busy_ms).max(0.0) / 1e3 / dt_s,
                requests_per_s: b.lc.requests.saturating_sub(a.lc.requests) as f64 / dt_s,
                batch_run_frac: (b.batch.run_ms - a.batch.run_ms).max(0.0) / 1e3 / dt_s,
                naps_per_s: b.batch.naps.saturating_sub(a.batch.naps) as f64 / dt_s,
            })
            .collect();
        Rates {
            interval_s: dt_s,
            lanes,
        }
    }
}
