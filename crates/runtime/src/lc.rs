//! **LC API**: the latency-critical service publishes its request lane's
//! state on the lane's LC line.
//!
//! One [`LcLane`] per request lane, used by one thread at a time. Each call
//! is a few plain stores on the LC's own cache line (protocol.md, "LC
//! side"); the thread keeps a private shadow of the begin sequence, queue
//! length and counters so it never reads-modifies-writes shared memory:
//!
//! - [`LcLane::request_begin`]: `request_id`, `busy_since`, then `state` =
//!   busy | seq+1 | queue (release).
//! - [`LcLane::set_queue_len`]: `state` with the new queue length.
//! - [`LcLane::request_end`]: `busy_ticks`, `requests`, then `state` = idle
//!   (release); a full fence; a read of each partner batch lane's
//!   `sleepers`; a `FUTEX_WAKE` only if one is non-zero. With spinning or
//!   running batch threads, no syscall.

use elfen_shm::layout::{BatchLine, ControllerLine, LcLine, MAX_PARTNERS};
use elfen_shm::{Access, Clock, Page, futex_word, state};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::fence;

use crate::error::{RuntimeError, Side};
use crate::nap::futex_wake_all;

/// The begin sequence's 31 bits.
const SEQ_MASK: u32 = 0x7FFF_FFFF;

/// A request lane, as seen by the LC thread serving it.
///
/// `Send` (hand it to the thread that serves the lane) but not `Sync`: the
/// LC line has exactly one writer. Dropping it ends a request left open (so
/// no batch thread sleeps forever) and clears `lc_tid`.
pub struct LcLane {
    line: *const LcLine,
    ctl: *const ControllerLine,
    /// Partner batch lines, re-read when the controller line's `config_seq` moves.
    partners: [*const BatchLine; MAX_PARTNERS],
    partner_count: usize,
    config_seq: u32,
    clock: Clock,
    // shadows of our own line
    busy: bool,
    seq: u32,
    queue: u32,
    busy_since: u64,
    busy_ticks: u64,
    requests: u64,
    tid: u32,
    lane: u32,
    page: Arc<Page>,
}

// SAFETY: the raw pointers point into `page`'s mappings, which the Arc keeps
// alive wherever the LcLane goes; they are only read or written through
// atomics. Not Sync (raw pointers): one writer per LC line.
unsafe impl Send for LcLane {}

impl std::fmt::Debug for LcLane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LcLane")
            .field("page", &self.page.path())
            .field("lane", &self.lane)
            .field("busy", &self.busy)
            .field("seq", &self.seq)
            .field("queue", &self.queue)
            .finish()
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

impl LcLane {
    /// Attaches the page at `path` (see `elfen_shm::page_path` for names) with
    /// [`Access::Lc`] and then [`LcLane::attach`]es to `lane`.
    pub fn open(path: impl AsRef<Path>, lane: u32) -> Result<LcLane, RuntimeError> {
        LcLane::attach(Arc::new(Page::attach(path, Access::Lc)?), lane)
    }

    /// Attaches the calling thread as the LC thread of request lane `lane`.
    ///
    /// The page must be attached with [`Access::Lc`] or [`Access::Controller`]
    /// (write access to the page file). Fails on a lane out of range, a lane
    /// that is not a request lane, or a lane another live thread serves. A
    /// request left open by a dead LC thread is ended (and sleepers woken).
    pub fn attach(page: Arc<Page>, lane: u32) -> Result<LcLane, RuntimeError> {
        let cfg = crate::error::attach_check(&page, lane, Side::Lc)?;
        let line = page.lc(lane)?;
        let tid = gettid();
        // Claim the lane (the only read-modify-write the LC API does).
        let mut seen = line.lc_tid.load(Acquire);
        loop {
            if seen != 0 && seen != tid && elfen_shm::pid_alive(seen) {
                return Err(RuntimeError::LaneTaken {
                    path: page.path().to_path_buf(),
                    lane,
                    tid: seen,
                });
            }
            if seen == tid {
                return Err(RuntimeError::LaneTaken {
                    path: page.path().to_path_buf(),
                    lane,
                    tid,
                });
            }
            match line.lc_tid.compare_exchange(seen, tid, SeqCst, Acquire) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        let s = line.state.load(Acquire);
        let mut me = LcLane {
            line,
            ctl: page.controller(lane)?,
            partners: [std::ptr::null(); MAX_PARTNERS],
            partner_count: 0,
            config_seq: cfg.seq.wrapping_add(1), // force a read of the partners below
            clock: page.clock(),
            busy: state::busy(s),
            seq: state::seq(s),
            queue: state::queue_len(s),
            busy_since: line.busy_since.load(Relaxed),
            busy_ticks: line.busy_ticks.load(Relaxed),
            requests: line.requests.load(Relaxed),
            tid,
            lane,
            page,
        };
        me.reload_partners();
        if me.busy {
            // Left open by a previous LC thread: end it without accounting,
            // so batch threads napping on it wake.
            me.busy = false;
            me.line()
                .state
                .store(state::pack(false, me.seq, me.queue), Release);
            fence(SeqCst);
            me.wake_sleepers();
        }
        Ok(me)
    }

    #[inline(always)]
    fn line(&self) -> &LcLine {
        // SAFETY: points into self.page's mapping (see `unsafe impl Send`).
        unsafe { &*self.line }
    }

    /// Re-reads the partner batch lanes from the controller line.
    #[cold]
    fn reload_partners(&mut self) {
        let Ok(cfg) = self.page.read_controller(self.lane) else {
            return;
        };
        self.partner_count = 0;
        for &p in cfg.partners() {
            if let Ok(b) = self.page.batch(p) {
                self.partners[self.partner_count] = b;
                self.partner_count += 1;
            }
        }
        self.config_seq = cfg.seq;
    }

    /// After the fence of `request_end`: wakes sleeping batch threads, with a
    /// syscall only if a partner batch lane has one registered.
    #[inline]
    fn wake_sleepers(&mut self) {
        // SAFETY: points into self.page's mapping.
        let ctl = unsafe { &*self.ctl };
        let seq = ctl.config_seq.load(Relaxed);
        if seq != self.config_seq && seq % 2 == 0 {
            self.reload_partners();
        }
        let any = self.partners[..self.partner_count]
            .iter()
            // SAFETY: pointers into self.page's batch mapping.
            .any(|&b| unsafe { &*b }.sleepers.load(Relaxed) != 0);
        if any {
            futex_wake_all(futex_word(self.line()));
        }
    }

    /// A request starts on this lane: stores `request_id` and `busy_since`,
    /// then `state` = busy, begin sequence + 1, current queue length
    /// (release). No syscall. A begin while a request is open completes that
    /// one (counted in `requests`/`busy_ticks`) and begins the next without
    /// an idle gap.
    #[inline]
    pub fn request_begin(&mut self, id: u64) {
        let now = self.clock.now();
        if self.busy {
            self.account_completed(now);
        }
        let line = self.line();
        line.request_id.store(id, Relaxed);
        line.busy_since.store(now, Relaxed);
        self.seq = self.seq.wrapping_add(1) & SEQ_MASK;
        self.busy = true;
        self.busy_since = now;
        self.line()
            .state
            .store(state::pack(true, self.seq, self.queue), Release);
    }

    fn account_completed(&mut self, now: u64) {
        self.busy_ticks = self
            .busy_ticks
            .wrapping_add(now.saturating_sub(self.busy_since));
        self.requests = self.requests.wrapping_add(1);
        let line = self.line();
        line.busy_ticks.store(self.busy_ticks, Relaxed);
        line.requests.store(self.requests, Relaxed);
    }

    /// Counts `requests` completed requests that took `busy_ns` in all,
    /// measured by whoever writes this line for the service without
    /// following each one (the daemon's writer taking the kernel's counts
    /// on its tick): stores `busy_ticks` and `requests`; the busy state and
    /// the begin sequence are unchanged, and nobody is woken.
    pub fn count_completed(&mut self, requests: u64, busy_ns: u64) {
        if requests == 0 && busy_ns == 0 {
            return;
        }
        self.busy_ticks = self
            .busy_ticks
            .wrapping_add(self.clock.ns_to_ticks(busy_ns));
        self.requests = self.requests.wrapping_add(requests);
        let line = self.line();
        line.busy_ticks.store(self.busy_ticks, Relaxed);
        line.requests.store(self.requests, Relaxed);
    }

    /// The running request ends: stores `busy_ticks`, `requests`, then
    /// `state` = idle (release); a full fence; reads the partner batch
    /// lanes' `sleepers` and wakes the futex sleepers only if there are any.
    /// A no-op when no request is open.
    #[inline]
    pub fn request_end(&mut self) {
        if !self.busy {
            return;
        }
        let now = self.clock.now();
        self.account_completed(now);
        self.busy = false;
        self.line()
            .state
            .store(state::pack(false, self.seq, self.queue), Release);
        // Pairs with the batch side's fence between its `sleepers` increment
        // and its re-read of `state` (protocol.md, "futex").
        fence(SeqCst);
        self.wake_sleepers();
    }

    /// [`LcLane::request_end`] publishing `queue_len` (the requests waiting
    /// now) in the same store of `state`, so batch threads never see an idle
    /// lane with a stale queue length: Figure 9's `queue_len == 0` must mean
    /// "nothing is waiting" when the lane goes idle.
    #[inline]
    pub fn request_end_with_queue(&mut self, queue_len: u32) {
        self.queue = queue_len.min(state::MAX_QUEUE_LEN);
        self.request_end();
    }

    /// [`LcLane::request_begin`] publishing `queue_len` (the requests still
    /// waiting after this one was taken) in the same store of `state`.
    #[inline]
    pub fn request_begin_with_queue(&mut self, id: u64, queue_len: u32) {
        self.queue = queue_len.min(state::MAX_QUEUE_LEN);
        self.request_begin(id);
    }

    /// Publishes the LC service's queue length (requests waiting, not
    /// counting the running one; saturates at `u32::MAX - 1`). One store;
    /// it wakes nobody. Call it when a request arrives while one runs, if
    /// the service can (its dispatcher may not write the LC line: one
    /// writer per line); [`LcLane::request_begin_with_queue`] and
    /// [`LcLane::request_end_with_queue`] publish it at the moments the
    /// budget policies read it.
    #[inline]
    pub fn set_queue_len(&mut self, n: u32) {
        let n = n.min(state::MAX_QUEUE_LEN);
        if n == self.queue {
            return;
        }
        self.queue = n;
        self.line()
            .state
            .store(state::pack(self.busy, self.seq, n), Release);
    }

    /// Whether a request is open.
    #[inline]
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// The queue length last published.
    pub fn queue_len(&self) -> u32 {
        self.queue
    }

    /// The begin sequence of the last request begun (31 bits, wrapping).
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// The lane index.
    pub fn lane(&self) -> u32 {
        self.lane
    }

    /// The page.
    pub fn page(&self) -> &Arc<Page> {
        &self.page
    }
}

impl Drop for LcLane {
    fn drop(&mut self) {
        self.request_end();
        let _ = self
            .line()
            .lc_tid
            .compare_exchange(self.tid, 0, SeqCst, Relaxed);
    }
}
