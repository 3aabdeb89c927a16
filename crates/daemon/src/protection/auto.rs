//! Mode **`auto`** (HIS's scheduler): the pure state machine that decides,
//! from windows of the LC's busy periods with the batch running (co-run)
//! and stepped aside (solo), which mode of the ladder a group runs.
//!
//! The driver (`super::driver`) runs each group's **period**: a co-run
//! window in the current mode, then a solo window with the batch frozen —
//! its own switching is the A/B — and hands [`Auto::observe`] the two
//! windows' busy periods. Contention is HIS's `res_cont = co-run / solo − 1`
//! on the mean busy period (the LC's service time per busy period: a
//! black-box service publishes no requests). Then:
//!
//! - **escalate**: contention above `escalate_pct` in `confirm` periods in
//!   a row → the next mode up the ladder that fits (`super::fit`); none
//!   fits → stay, saying so;
//! - **step down, with hysteresis**: contention below `settle_pct` for
//!   `step_down_s` → a *trial* of the next mode down; contention above
//!   `escalate_pct` during the trial → back up at once, and the next trial
//!   waits twice as long (at most [`MAX_BACKOFF`] times); between the two
//!   thresholds nothing changes;
//! - **bounded rate**: switches at least `min_dwell_s` apart, except the
//!   return from a failed trial (which trials themselves bound: at most two
//!   switches per `step_down_s`, less as trials fail);
//! - a window with fewer than `min_periods` busy periods (an idle LC) says
//!   nothing: the mode stays.
//!
//! No clock, no I/O: times are passed in, so the tests walk every
//! transition with synthetic observations.

use super::fit::Verdict;
use crate::config::{AutoSection, Mode};
use serde::{Deserialize, Serialize};

/// The longest step-down wait, in `step_down_s`.
pub const MAX_BACKOFF: u64 = 16;

/// One window's busy periods.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Window {
    /// Busy periods ended in the window.
    pub periods: u64,
    /// Their total length, ns.
    pub busy_ns: u64,
}

impl Window {
    /// The mean busy period, ns.
    pub fn mean_ns(&self) -> f64 {
        if self.periods == 0 {
            0.0
        } else {
            self.busy_ns as f64 / self.periods as f64
        }
    }
}

/// One period's A/B: the current mode's co-run window and the solo window.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Observation {
    /// When the period ended, ns (any monotonic clock).
    pub now_ns: u64,
    /// Co-run: the batch running in the current mode.
    pub corun: Window,
    /// Solo: the batch stepped aside.
    pub solo: Window,
}

/// What auto decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Decision {
    /// Keep the mode.
    Stay {
        /// Why, in words.
        reason: String,
    },
    /// Switch to ladder rung `to`.
    Switch {
        /// The rung.
        to: usize,
        /// Why, with the figures.
        reason: String,
    },
}

/// A step down being tried.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Trial {
    from: usize,
}

/// The state machine of one group (see the module docs).
#[derive(Debug, Clone)]
pub struct Auto {
    s: AutoSection,
    rung: usize,
    over: u32,
    calm_since_ns: Option<u64>,
    last_switch_ns: Option<u64>,
    backoff: u64,
    trial: Option<Trial>,
    contention: Option<f64>,
}

impl Auto {
    /// Starts at the cheapest mode (the ladder's first).
    pub fn new(s: AutoSection) -> Auto {
        Auto {
            s,
            rung: 0,
            over: 0,
            calm_since_ns: None,
            last_switch_ns: None,
            backoff: 1,
            trial: None,
            contention: None,
        }
    }

    /// The ladder.
    pub fn ladder(&self) -> &[Mode] {
        &self.s.ladder
    }

    /// The current rung.
    pub fn rung(&self) -> usize {
        self.rung
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.s.ladder[self.rung]
    }

    /// The last contention measured (`co-run / solo − 1`).
    pub fn contention(&self) -> Option<f64> {
        self.contention
    }

    /// Whether a step down is being tried.
    pub fn in_trial(&self) -> bool {
        self.trial.is_some()
    }

    fn dwelt(&self, now_ns: u64) -> bool {
        self.last_switch_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= self.s.min_dwell_s * 1_000_000_000)
    }

    fn switch(&mut self, to: usize, now_ns: u64, reason: String) -> Decision {
        self.rung = to;
        self.over = 0;
        self.calm_since_ns = None;
        self.last_switch_ns = Some(now_ns);
        Decision::Switch { to, reason }
    }

    /// One period's observation; `fits(rung)` judges a rung of the ladder
    /// for the service now. Returns what to do.
    pub fn observe(&mut self, o: &Observation, fits: impl Fn(usize) -> Verdict) -> Decision {
        let (min, now) = (self.s.min_periods, o.now_ns);
        if o.corun.periods < min || o.solo.periods < min || o.solo.mean_ns() <= 0.0 {
            return Decision::Stay {
                reason: format!(
                    "too little LC activity to judge ({} busy periods co-running, {} solo; {min} \
                     needed in each)",
                    o.corun.periods, o.solo.periods
                ),
            };
        }
        let c = o.corun.mean_ns() / o.solo.mean_ns() - 1.0;
        self.contention = Some(c);
        let here = self.mode();
        let figures = format!(
            "contention {:+.1} % (mean busy period {:.1} µs co-running in {here}, {:.1} µs solo)",
            c * 100.0,
            o.corun.mean_ns() / 1e3,
            o.solo.mean_ns() / 1e3
        );
        let escalate = c * 100.0 > self.s.escalate_pct;
        if let Some(t) = self.trial {
            if escalate {
                // the cheaper mode does not do: back at once, and wait longer
                self.trial = None;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                let back = self.s.ladder[t.from];
                return self.switch(
                    t.from,
                    now,
                    format!(
                        "{figures} above {} % in a trial of {here}: back to {back}; the next \
                         trial waits {} s",
                        self.s.escalate_pct,
                        self.s.step_down_s * self.backoff
                    ),
                );
            }
            if self
                .last_switch_ns
                .is_some_and(|t0| now.saturating_sub(t0) >= self.s.step_down_s * 1_000_000_000)
            {
                self.trial = None;
                self.backoff = 1;
            }
        }
        if escalate {
            self.calm_since_ns = None;
            self.over += 1;
            if self.over < self.s.confirm {
                return Decision::Stay {
                    reason: format!(
                        "{figures} above {} % ({} of {} periods before a stronger mode)",
                        self.s.escalate_pct, self.over, self.s.confirm
                    ),
                };
            }
            if !self.dwelt(now) {
                return Decision::Stay {
                    reason: format!("{figures}: a switch waits {} s", self.s.min_dwell_s),
                };
            }
            let mut unfit = Vec::new();
            for up in self.rung + 1..self.s.ladder.len() {
                let v = fits(up);
                if v.fits() {
                    let to = self.s.ladder[up];
                    return self.switch(
                        up,
                        now,
                        format!(
                            "{figures} above {} % in {} periods: {here} → {to}",
                            self.s.escalate_pct, self.s.confirm
                        ),
                    );
                }
                unfit.push(format!("{}: {}", v.mode, v.reason));
            }
            return Decision::Stay {
                reason: if unfit.is_empty() {
                    format!("{figures}: {here} is the strongest mode of the ladder")
                } else {
                    format!(
                        "{figures}, but no stronger mode fits ({})",
                        unfit.join("; ")
                    )
                },
            };
        }
        self.over = 0;
        if c * 100.0 >= self.s.settle_pct {
            self.calm_since_ns = None;
            return Decision::Stay {
                reason: format!(
                    "{figures}: between {} % and {} %, {here} stays",
                    self.s.settle_pct, self.s.escalate_pct
                ),
            };
        }
        let since = *self.calm_since_ns.get_or_insert(now);
        let wait_ns = self.s.step_down_s * self.backoff * 1_000_000_000;
        if self.rung == 0 || now.saturating_sub(since) < wait_ns || !self.dwelt(now) {
            return Decision::Stay {
                reason: format!("{figures}: {here} keeps the LC's service time"),
            };
        }
        // the next cheaper mode that fits (the cheapest always does)
        let down = (0..self.rung).rev().find(|&d| fits(d).fits()).unwrap_or(0);
        let to = self.s.ladder[down];
        self.trial = Some(Trial { from: self.rung });
        let calm = now.saturating_sub(since) / 1_000_000_000;
        self.switch(
            down,
            now,
            format!(
                "{figures} below {} % for {calm} s: trying {to} (cheaper than {here})",
                self.s.settle_pct
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protection::fit::FitState;

    const S: u64 = 1_000_000_000;

    fn settings() -> AutoSection {
        AutoSection {
            ladder: vec![Mode::Idle, Mode::Guard, Mode::Freeze],
            period_ms: 5000,
            solo_ms: 250,
            escalate_pct: 10.0,
            settle_pct: 5.0,
            confirm: 2,
            step_down_s: 30,
            min_dwell_s: 10,
            min_periods: 50,
        }
    }

    /// A period at `t` s whose co-run mean busy period is `ratio` × solo's.
    fn obs(t: u64, ratio: f64) -> Observation {
        Observation {
            now_ns: t * S,
            corun: Window {
                periods: 1000,
                busy_ns: (1000.0 * 30_000.0 * ratio) as u64,
            },
            solo: Window {
                periods: 100,
                busy_ns: 100 * 30_000,
            },
        }
    }

    fn verdict(m: Mode, fits: bool) -> Verdict {
        Verdict {
            mode: m,
            state: if fits {
                FitState::Fits
            } else {
                FitState::Unfit
            },
            coverage: 0.0,
            cost_share: 0.0,
            reason: format!("{m} test verdict"),
        }
    }

    /// Every rung fits but freeze.
    fn no_freeze(r: usize) -> Verdict {
        let m = settings().ladder[r];
        verdict(m, m != Mode::Freeze)
    }

    fn switched(d: &Decision) -> Option<usize> {
        match d {
            Decision::Switch { to, .. } => Some(*to),
            Decision::Stay { .. } => None,
        }
    }

    #[test]
    fn escalates_after_confirmed_contention_to_the_next_mode_that_fits() {
        let mut a = Auto::new(settings());
        assert_eq!(a.mode(), Mode::Idle, "starts at the cheapest");
        assert_eq!(switched(&a.observe(&obs(5, 1.30), no_freeze)), None, "once");
        let d = a.observe(&obs(10, 1.25), no_freeze);
        assert_eq!(switched(&d), Some(1), "{d:?}");
        assert_eq!(a.mode(), Mode::Guard);
        let Decision::Switch { reason, .. } = d else {
            unreachable!()
        };
        assert!(
            reason.contains("idle → guard") && reason.contains("+25.0 %"),
            "{reason}"
        );
        // still contended at guard, but freeze does not fit: stays, says why
        a.observe(&obs(25, 1.3), no_freeze);
        let d = a.observe(&obs(30, 1.3), no_freeze);
        let Decision::Stay { reason } = d else {
            panic!("{d:?}")
        };
        assert!(
            reason.contains("no stronger mode fits") && reason.contains("freeze"),
            "{reason}"
        );
        assert_eq!(a.mode(), Mode::Guard);
    }

    #[test]
    fn nothing_changes_between_the_thresholds_or_without_activity() {
        let mut a = Auto::new(settings());
        for t in 1..20 {
            assert_eq!(switched(&a.observe(&obs(t * 5, 1.07), no_freeze)), None);
        }
        let idle = Observation {
            now_ns: 200 * S,
            corun: Window {
                periods: 3,
                busy_ns: 900_000,
            },
            solo: Window::default(),
        };
        let d = a.observe(&idle, no_freeze);
        assert!(matches!(&d, Decision::Stay { reason } if reason.contains("too little")));
        // contention between settle and escalate resets the confirmation
        a.observe(&obs(205, 1.5), no_freeze);
        a.observe(&obs(210, 1.07), no_freeze);
        assert_eq!(switched(&a.observe(&obs(215, 1.5), no_freeze)), None);
    }

    #[test]
    fn steps_down_after_calm_and_backs_off_when_the_trial_fails() {
        let mut a = Auto::new(settings());
        a.observe(&obs(5, 1.3), no_freeze);
        assert_eq!(switched(&a.observe(&obs(10, 1.3), no_freeze)), Some(1));
        // calm at guard: the trial of idle waits step_down_s (30 s)
        for t in [15, 20, 25, 30, 35] {
            assert_eq!(switched(&a.observe(&obs(t, 1.01), no_freeze)), None, "{t}");
        }
        let d = a.observe(&obs(45, 1.01), no_freeze);
        assert_eq!(switched(&d), Some(0), "{d:?}");
        assert!(a.in_trial());
        // contention returns in the trial: back at once (no dwell), and the
        // next trial waits 60 s
        let d = a.observe(&obs(50, 1.2), no_freeze);
        assert_eq!(switched(&d), Some(1), "{d:?}");
        assert!(!a.in_trial());
        for t in (55..=105).step_by(5) {
            assert_eq!(switched(&a.observe(&obs(t, 1.0), no_freeze)), None, "{t}");
        }
        assert_eq!(switched(&a.observe(&obs(115, 1.0), no_freeze)), Some(0));
        // a trial that holds for step_down_s ends; the wait is back to 30 s
        for t in (120..=150).step_by(5) {
            assert_eq!(switched(&a.observe(&obs(t, 1.0), no_freeze)), None, "{t}");
        }
        assert!(!a.in_trial());
        assert_eq!(a.mode(), Mode::Idle);
    }

    #[test]
    fn switches_are_bounded_in_rate() {
        let s = AutoSection {
            confirm: 1,
            min_dwell_s: 60,
            ..settings()
        };
        let mut a = Auto::new(s);
        assert_eq!(switched(&a.observe(&obs(5, 1.5), no_freeze)), Some(1));
        let all = |r: usize| verdict(settings().ladder[r], true);
        // contended again 5 s later: freeze fits now, but the dwell holds it
        let d = a.observe(&obs(10, 1.5), all);
        assert!(
            matches!(&d, Decision::Stay { reason } if reason.contains("waits 60 s")),
            "{d:?}"
        );
        assert_eq!(switched(&a.observe(&obs(66, 1.5), all)), Some(2));
        assert_eq!(a.mode(), Mode::Freeze);
    }
}
