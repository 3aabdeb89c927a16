//! The engine's internal state: requests, cores, batch lanes, events.

use elfen_policy::Policy;
use elfen_policy::blind::BlindIsolation;
use std::cmp::Ordering;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ReqState {
    Free,
    /// OS-priority: a request is assigned; the OS preempts the batch thread.
    Starting,
    Busy,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum LaneState {
    /// Executing batch code, checking its policy at every signal change.
    Running,
    /// Decided to nap; still executing for `nap_ns`.
    SteppingAside,
    /// Lane released.
    Napping,
    /// Woken; executes again after `wake_ns`.
    Waking,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum EvKind {
    Complete,
    Start,
    NapDone,
    WakeDone,
    Expiry,
    BlindUpdate,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Ev {
    pub(super) t: u64,
    pub(super) seq: u64,
    pub(super) idx: u32,
    pub(super) epoch: u32,
    pub(super) kind: EvKind,
}

impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        self.t == o.t && self.seq == o.seq
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    // Reversed: BinaryHeap is a max-heap, we want the earliest (then the
    // first scheduled) on top.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Req {
    pub(super) id: u64,
    pub(super) arrival: u64,
    pub(super) demand: u64,
}

/// One worker core: its request lane and the count of its executing batch lanes.
#[derive(Clone, Debug)]
pub(super) struct Core {
    pub(super) state: ReqState,
    pub(super) req: Req,
    /// Work left on the running request, in ns of alone execution.
    pub(super) remaining: f64,
    /// When `remaining` was last brought up to date.
    pub(super) last: u64,
    /// Co-run time of the running request so far.
    pub(super) corun_ns: u64,
    /// Batch lanes of this core executing now (Running or SteppingAside).
    pub(super) active: u32,
    pub(super) epoch: u32,
    pub(super) idle_since: u64,
    /// A batch thread executes on the request lane (OS-priority, idle lane).
    pub(super) rl_batch: bool,
    pub(super) dirty: bool,
}

/// One batch lane under a policy.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lane {
    pub(super) core: u32,
    pub(super) state: LaneState,
    pub(super) epoch: u32,
    pub(super) policy: Policy,
    /// When the pending budget-expiry event fires (u64::MAX: none).
    pub(super) expiry_at: u64,
}

pub(super) struct BlindState {
    pub(super) law: BlindIsolation,
    /// Cores now given to the batch.
    pub(super) s: u32,
    pub(super) pending: bool,
    pub(super) secondary: Vec<u32>,
}
