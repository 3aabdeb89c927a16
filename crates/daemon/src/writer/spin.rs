//! Holding the lane (see the module docs of `crate::writer`): the spin,
//! and its budget under the kernel's real-time throttling.

use super::lane::{Lane, Record, reconciled, set_busy};
use super::thread::{handle, holds};
use super::{Hold, WriterOptions};
use crate::error::DaemonError;
use crate::lc::Discovery;
use elfen_bpf::LcEvent;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// The kernel throttles real-time threads that run more than 95 % of a
/// second (`sched_rt_runtime_us`): the writer spins at most this share of
/// each second, so it is never throttled in the middle of publishing.
const SPIN_SHARE_MAX: f64 = 0.85;

/// The writer's spinning in the current second.
#[derive(Debug, Default)]
pub(super) struct SpinBudget {
    second_ns: u64,
    spun_ns: u64,
}

impl SpinBudget {
    pub(super) fn allows(&mut self, now_ns: u64) -> bool {
        if now_ns.saturating_sub(self.second_ns) >= 1_000_000_000 {
            self.second_ns = now_ns;
            self.spun_ns = 0;
        }
        (self.spun_ns as f64) < SPIN_SHARE_MAX * 1e9
    }

    pub(super) fn spent(&mut self, ns: u64) {
        self.spun_ns += ns;
    }
}

/// One spell of holding the lane (see the module docs).
pub(super) struct Spin<'a> {
    pub(super) hold: &'a Hold,
    pub(super) stop: &'a AtomicBool,
    pub(super) disc: &'a Discovery,
    pub(super) budget: &'a mut SpinBudget,
}

impl Spin<'_> {
    /// Spins, consuming events, until the request lane has been idle for
    /// the hold (or the spin budget, the stop flag, or discovery's next
    /// look ends it). The BPF program does not wake the writer meanwhile;
    /// after the spin it does again, and events that came in between are
    /// taken by the next wait at once.
    pub(super) fn run(
        self,
        src: &mut elfen_bpf::Source,
        lanes: &mut [Lane],
        events: &mut Vec<LcEvent>,
        wake: &mut hdrhistogram::Histogram<u64>,
        rec: &mut Record<'_>,
        opts: &WriterOptions,
    ) -> Result<(), DaemonError> {
        let h = self.hold;
        let Some(i) = lanes.iter().position(|l| l.lc.lane() == h.request_lane) else {
            return Ok(());
        };
        src.set_reader_polling(true);
        h.spins.fetch_add(1, Relaxed);
        rec.holding_cpu = Some(h.cpu);
        let t0 = elfen_shm::clock::monotonic_ns();
        // CPU time, read at each change of the lane's state: spinning's
        // cost is the CPU it takes, not the wall time it spans
        let mut last = crate::guard::thread_cpu_ns();
        let mut was_busy = lanes[i].lc.is_busy();
        let mut checks = 0u32;
        let result = loop {
            if let Err(e) = src.consume_events(|e| events.push(e)) {
                break Err(DaemonError::from(e));
            }
            let now = elfen_shm::clock::monotonic_ns();
            if !events.is_empty() {
                let begins = rec.stats.begins.load(Relaxed);
                handle(lanes, events, now, wake, rec, opts);
                let began = rec.stats.begins.load(Relaxed) - begins;
                h.caught.fetch_add(began, Relaxed);
            }
            // a switch the tracepoint did not report, or an announcement
            // whose LC never ran: the slot decides, as after a wake-up —
            // once its last switch is old enough that its event, sent just
            // after the slot is written, would have come
            let l = &mut lanes[i];
            let runs_lc = src.lc_busy(l.cpu);
            if runs_lc != l.lc.is_busy() {
                let settled = src
                    .snapshot(l.cpu)
                    .is_ok_and(|s| now.saturating_sub(s.switch_ns) > IN_FLIGHT_NS);
                let busy = reconciled(l, runs_lc, now);
                if settled && busy != l.lc.is_busy() {
                    rec.stats.reconciled.fetch_add(1, Relaxed);
                    set_busy(l, busy, now, None, rec);
                }
            }
            let busy = l.lc.is_busy();
            let done = self.stop.load(Relaxed) || !holds(h, lanes, now);
            if busy != was_busy || done {
                let cpu = crate::guard::thread_cpu_ns();
                let d = cpu.saturating_sub(last);
                if was_busy {
                    h.occupied_ns.fetch_add(d, Relaxed);
                } else {
                    h.held_ns.fetch_add(d, Relaxed);
                }
                last = cpu;
                was_busy = busy;
            }
            if done {
                break Ok(());
            }
            checks = checks.wrapping_add(1);
            if checks % 1024 == 0
                && (self.disc.until_next(Instant::now()).is_zero() || !self.budget.allows(now))
            {
                break Ok(());
            }
            std::hint::spin_loop();
        };
        let end = elfen_shm::clock::monotonic_ns();
        self.budget.spent(end - t0);
        src.set_reader_polling(false);
        rec.holding_cpu = None;
        // the spin ends inside a busy period (its budget, discovery): the
        // guard of this lane, not rung meanwhile, takes over
        let l = &lanes[i];
        if l.lc.is_busy() {
            l.bells
                .iter()
                .filter(|b| b.sleeper_cpu() == Some(h.cpu))
                .for_each(|b| b.ring_busy(l.busy_start_ns));
        }
        result
    }
}

/// How long after a slot's switch its transition event is surely in the
/// ring buffer (the program writes the slot, then sends the event).
const IN_FLIGHT_NS: u64 = 50_000;
