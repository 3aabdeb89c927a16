//! Holding the lane (see the module docs of `crate::writer`): the spin,
//! within its lane's real-time bound ([`crate::rt`]).

use super::lane::{Lane, Record, reconciled, set_busy};
use super::thread::{handle, holds};
use super::{Hold, WriterOptions};
use crate::error::DaemonError;
use crate::lc::Discovery;
use elfen_bpf::LcEvent;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// Whether the writer may begin a spin on `h`'s lane now: the lane has a
/// bound and its bucket is not empty. (The spin itself asks the bound of
/// its busy period, and ends at once if that is spent.)
pub(super) fn may_spin(h: &Hold, now_ns: u64) -> bool {
    h.ns() > 0 && h.spin().is_some_and(|s| s.tokens(now_ns) > 0)
}

/// One spell of holding the lane (see the module docs).
pub(super) struct Spin<'a> {
    pub(super) hold: &'a Hold,
    pub(super) stop: &'a AtomicBool,
    pub(super) disc: &'a Discovery,
}

impl Spin<'_> {
    /// Spins, consuming events, until the request lane has been idle for
    /// the hold (or the spin bound, the stop flag, or discovery's next
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
        let Some(bound) = h.spin() else {
            return Ok(());
        };
        // the busy period the spin is charged to: the current one, or the
        // last one while holding through its gap
        let mut period = lanes[i].busy_start_ns;
        let t0 = elfen_shm::clock::monotonic_ns();
        let mut deadline = t0.saturating_add(bound.allowance(period, t0));
        if deadline <= t0 {
            ring_guard(h, &lanes[i]);
            return Ok(());
        }
        src.set_reader_polling(true);
        h.spins.fetch_add(1, Relaxed);
        rec.holding_cpu = Some(h.cpu);
        // CPU time, read at each change of the lane's state: spinning's
        // cost is the CPU it takes, not the wall time it spans
        let mut last = crate::guard::thread_cpu_ns();
        let mut charged = last;
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
            if checks % 1024 == 0 {
                if self.disc.until_next(Instant::now()).is_zero() {
                    break Ok(());
                }
                // the bound: at its deadline, or when a new busy period
                // began, the spin so far is charged and the bound asked again
                let current = lanes[i].busy_start_ns;
                if now >= deadline || current != period {
                    let cpu = crate::guard::thread_cpu_ns();
                    bound.charge(cpu.saturating_sub(charged), now);
                    charged = cpu;
                    period = current;
                    let a = bound.allowance(period, now);
                    if a == 0 {
                        if lanes[i].lc.is_busy() {
                            bound.cut();
                        }
                        break Ok(());
                    }
                    deadline = now.saturating_add(a);
                }
            }
            std::hint::spin_loop();
        };
        let end = elfen_shm::clock::monotonic_ns();
        bound.charge(crate::guard::thread_cpu_ns().saturating_sub(charged), end);
        src.set_reader_polling(false);
        rec.holding_cpu = None;
        ring_guard(h, &lanes[i]);
        result
    }
}

/// A spin that ends inside a busy period (its bound, discovery): the guard
/// of this lane, not rung meanwhile, takes over.
fn ring_guard(h: &Hold, l: &Lane) {
    if l.lc.is_busy() {
        l.bells
            .iter()
            .filter(|b| b.sleeper_cpu() == Some(h.cpu))
            .for_each(|b| b.ring_busy(l.busy_start_ns));
    }
}

/// How long after a slot's switch its transition event is surely in the
/// ring buffer (the program writes the slot, then sends the event).
const IN_FLIGHT_NS: u64 = 50_000;
