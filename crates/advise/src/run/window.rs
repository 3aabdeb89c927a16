//! One **window**: a settling time, then the LC's counters (and the
//! subject's: a probe's co-runner, a knob's daemon) from start to end,
//! checked every watch interval against the stop rule.

use super::Abort;
use super::Options;
use crate::latency::LatencyProbe;
use crate::lc::{Counters, Lc};
use crate::record::{Outcome, Reference, Window};
use crate::study;
use elfen_cmd::progress::Progress;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a window measures beside the LC.
pub(super) trait Subject {
    /// At the window's start.
    fn begin(&mut self);
    /// Whether it still runs (the reason when not).
    fn check(&mut self) -> Option<String>;
    /// At the window's end: its figures into `w`.
    fn end(&mut self, w: &mut Window);
}

pub(super) struct Nothing;

impl Subject for Nothing {
    fn begin(&mut self) {}
    fn check(&mut self) -> Option<String> {
        None
    }
    fn end(&mut self, _: &mut Window) {}
}

/// What one window gave.
pub(super) struct Measured {
    pub(super) window: Window,
    pub(super) outcome: Outcome,
}

/// The run's state.
pub(super) struct Runner<'a> {
    pub(super) o: &'a Options,
    pub(super) lc: Lc,
    pub(super) probe: Option<LatencyProbe>,
    pub(super) stop: &'a AtomicBool,
    pub(super) progress: Progress,
    pub(super) notes: Vec<String>,
}

impl Runner<'_> {
    /// Sleeps `d` in short steps; ends early on Ctrl-C or the LC's exit.
    pub(super) fn sleep(&mut self, d: Duration) -> Result<(), Abort> {
        let end = Instant::now() + d;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(Abort::Interrupted);
            }
            self.lc.tick();
            if self.lc.is_lost() {
                return Err(Abort::LcLost);
            }
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }

    fn probe_failed(&mut self) {
        if let Some(e) = self.probe.as_ref().and_then(LatencyProbe::failed) {
            self.notes
                .push(format!("{e}; the latency is not known from here on"));
            self.probe = None;
        }
    }

    /// One window: settle, then measure, checking the stop rule against
    /// `reference` (if any) every watch interval.
    pub(super) fn measure(
        &mut self,
        subject: &mut dyn Subject,
        reference: Option<&Reference>,
    ) -> Result<Measured, Abort> {
        self.sleep(self.o.warmup)?;
        if let Some(e) = subject.check() {
            return Ok(Measured {
                window: Window::default(),
                outcome: Outcome::NotRun { reason: e },
            });
        }
        let start = self.lc.read();
        subject.begin();
        if let Some(p) = &self.probe {
            p.reset();
        }
        let end_ns = start.at_ns + self.o.window.as_nanos() as u64;
        let mut prev: Counters = start.clone();
        let mut outcome = Outcome::Measured;
        let mut watch = study::StopWatch::default();
        loop {
            let next = (prev.at_ns + self.o.watch.as_nanos() as u64).min(end_ns);
            let wait = next.saturating_sub(elfen_shm::clock::monotonic_ns());
            self.sleep(Duration::from_nanos(wait))?;
            let now = self.lc.read();
            let after_ms = now.at_ns.saturating_sub(start.at_ns) / 1_000_000;
            if let Some(e) = subject.check() {
                outcome = Outcome::NotRun {
                    reason: format!("ended after {after_ms} ms of its window: {e}"),
                };
                prev = now;
                break;
            }
            self.probe_failed();
            let mut iv = now.since(&prev);
            iv.latency = self.probe.as_ref().map(LatencyProbe::take_watch);
            let over = reference.and_then(|r| study::over_limit(r, &iv, self.o.max_slowdown));
            if let Some(why) = watch.observe(over) {
                outcome = Outcome::Stopped {
                    after_ms,
                    reason: why,
                };
                prev = now;
                break;
            }
            let done = now.at_ns >= end_ns;
            prev = now;
            if done {
                break;
            }
        }
        let mut window = prev.since(&start);
        window.latency = self.probe.as_ref().map(LatencyProbe::take_window);
        subject.end(&mut window);
        Ok(Measured { window, outcome })
    }
}
