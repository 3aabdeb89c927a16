//! The daemon's real-time spinning, bounded: the kernel's real-time
//! throttling read at start ([`RtThrottle`]), the bound a spin at
//! SCHED_FIFO obeys ([`SpinBound`], with its pure account [`SpinLedger`]),
//! and the account one batch lane's spinners share ([`LaneSpin`]).
//!
//! A guard keeps batch work off its lane by spinning at SCHED_FIFO while
//! the policy says nap; the writer does the same while it holds its batch
//! lane. A real-time spin keeps every normal task off that CPU as well: the
//! kernel's per-CPU workers (a `lru_add_drain_all` or `flush_work` on
//! another CPU waits for them), RCU callbacks, and the LC service's own
//! normal threads placed there (a JVM's VM thread ending a safepoint while
//! the LC's worker waits for it, its GC, its JIT). So a spin at SCHED_FIFO
//! is bounded, whatever the LC does:
//!
//! - **per busy period** at most `max` (`[guard] spin_max_us`); the busy
//!   period is named by its busy edge, so the guard and the writer on one
//!   lane share it ([`LaneSpin`]);
//! - **over time** at most `share` of the CPU (`[guard] spin_share_pct`,
//!   and never more than [`RT_SHARE_USE`] of what the kernel's real-time
//!   throttling allows, so the kernel never throttles the daemon's threads
//!   mid-spin): a token bucket of capacity `max` refilled at `share`, so
//!   over any interval `T` a lane spins at most `max + share · T`.
//!
//! Past its bound a spinner does not hold the CPU at real-time priority:
//! the guard goes on occupying at SCHED_OTHER until the next edge (normal
//! tasks share the lane with it as the fair class shares; batch work, idle
//! by its set-up, still waits), the writer stops holding. That time is the
//! bound's cost, reported as `bounded_ns` beside the occupation.
//!
//! The threads that do not spin but are woken at every edge (the writer,
//! freezers, blind isolation) are bounded by their own work: at most
//! [`DUTY_SHARE_MAX`] (or the bound's share, if smaller) of each 100 ms
//! window at SCHED_FIFO, the rest of the window at SCHED_OTHER
//! ([`DutyBound`]). Their work is not occupation: the spin's share (most of
//! the lane, so a guard can hold it) would let a thread whose cgroup writes
//! are slow keep the LC's own normal threads off the lane.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// The share of the kernel's real-time allowance a spin may use: the rest
/// is for the daemon's other real-time threads (the writer's own work,
/// freezers) and any other tenant's.
pub const RT_SHARE_USE: f64 = 0.9;

/// Where the kernel's real-time throttling is set.
pub const RT_RUNTIME_FILE: &str = "/proc/sys/kernel/sched_rt_runtime_us";
/// Its period.
pub const RT_PERIOD_FILE: &str = "/proc/sys/kernel/sched_rt_period_us";

/// The kernel's real-time throttling: real-time tasks of a CPU may run
/// `runtime_us` of every `period_us` (`runtime_us` -1: no throttling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtThrottle {
    /// `sched_rt_runtime_us` (-1: off).
    pub runtime_us: i64,
    /// `sched_rt_period_us`.
    pub period_us: u64,
}

impl RtThrottle {
    /// The kernel's default: 950 ms of every second.
    pub const DEFAULT: RtThrottle = RtThrottle {
        runtime_us: 950_000,
        period_us: 1_000_000,
    };

    /// Reads the two files; `None` when either cannot be read or parsed
    /// (a kernel without them).
    pub fn read() -> Option<RtThrottle> {
        let num = |f: &str| std::fs::read_to_string(f).ok()?.trim().parse::<i64>().ok();
        let runtime_us = num(RT_RUNTIME_FILE)?;
        let period_us = u64::try_from(num(RT_PERIOD_FILE)?).ok()?;
        Some(RtThrottle {
            runtime_us,
            period_us,
        })
    }

    /// The share of a CPU real-time tasks may take (`None`: no throttling).
    pub fn share(&self) -> Option<f64> {
        if self.runtime_us < 0 || self.period_us == 0 {
            return None;
        }
        Some((self.runtime_us as f64 / self.period_us as f64).min(1.0))
    }
}

/// The bound on a spin at SCHED_FIFO (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpinBound {
    /// The longest spin per busy period (and the bucket's capacity), ns.
    pub max_ns: u64,
    /// The share of the CPU spinning may take over time, 0..=1.
    pub share: f64,
}

impl SpinBound {
    /// The bound from the settings (`[guard] spin_max_us`,
    /// `spin_share_pct`) and the kernel's throttling (`None`: unknown,
    /// taken as the kernel's default), with one sentence saying what it is
    /// and what the throttling does here.
    pub fn resolve(max_us: u64, share_pct: u8, rt: Option<RtThrottle>) -> (SpinBound, String) {
        let asked = f64::from(share_pct.min(100)) / 100.0;
        let (kernel, said) = match rt {
            Some(t) => match t.share() {
                Some(s) => (
                    Some(s),
                    format!(
                        "the kernel's real-time throttling lets real-time threads run {} µs of \
                         every {} µs ({:.0} %)",
                        t.runtime_us,
                        t.period_us,
                        s * 100.0
                    ),
                ),
                None => (
                    None,
                    format!(
                        "the kernel's real-time throttling is off ({RT_RUNTIME_FILE} = {}): \
                         nothing but this bound keeps kernel work on the batch lanes running",
                        t.runtime_us
                    ),
                ),
            },
            None => (
                RtThrottle::DEFAULT.share(),
                format!("{RT_RUNTIME_FILE} unreadable: the kernel's default (95 %) assumed"),
            ),
        };
        let share = match kernel {
            Some(k) => asked.min(k * RT_SHARE_USE),
            None => asked,
        };
        let bound = SpinBound {
            max_ns: max_us.saturating_mul(1000),
            share,
        };
        let capped = if share < asked {
            format!(
                " (spin_share_pct {share_pct} capped at {:.0} % of the kernel's allowance)",
                RT_SHARE_USE * 100.0
            )
        } else {
            String::new()
        };
        let note = format!(
            "real-time spin bound: guards and the writer's hold spin at SCHED_FIFO at most \
             {:.1} ms per LC busy period and {:.1} % of a lane over time{capped}, then occupy at \
             SCHED_OTHER until the next edge; {said}",
            bound.max_ns as f64 / 1e6,
            bound.share * 100.0
        );
        (bound, note)
    }
}

/// The pure account of one lane's spinning under a [`SpinBound`]: the
/// bucket (its tokens and when they were last counted) and the current
/// busy period's spin. No clock of its own: every call says when it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpinLedger {
    tokens_ns: u64,
    at_ns: u64,
    started: bool,
    period: u64,
    period_ns: u64,
}

impl SpinLedger {
    fn refill(&mut self, b: &SpinBound, now_ns: u64) {
        if !self.started {
            self.started = true;
            self.tokens_ns = b.max_ns;
        } else {
            let add = now_ns.saturating_sub(self.at_ns) as f64 * b.share;
            self.tokens_ns = (self.tokens_ns as f64 + add).min(b.max_ns as f64) as u64;
        }
        self.at_ns = self.at_ns.max(now_ns);
    }

    /// How long a spin in busy period `period` (its busy edge; the kill
    /// switch's: when it was seen set) may last from `now_ns`: what the bucket holds and
    /// the period has left, the smaller (0: none).
    pub fn allowance(&mut self, b: &SpinBound, period: u64, now_ns: u64) -> u64 {
        self.refill(b, now_ns);
        if period != self.period {
            self.period = period;
            self.period_ns = 0;
        }
        self.tokens_ns.min(b.max_ns.saturating_sub(self.period_ns))
    }

    /// What the bucket holds at `now_ns`, whatever the period.
    pub fn tokens(&mut self, b: &SpinBound, now_ns: u64) -> u64 {
        self.refill(b, now_ns);
        self.tokens_ns
    }

    /// Records a spin of `spun_ns` in the current period, ended at `now_ns`.
    pub fn charge(&mut self, b: &SpinBound, spun_ns: u64, now_ns: u64) {
        self.refill(b, now_ns);
        self.tokens_ns = self.tokens_ns.saturating_sub(spun_ns);
        self.period_ns = self.period_ns.saturating_add(spun_ns);
    }
}

/// One batch lane's spinning: its bound, its ledger (shared by the guard
/// of the lane and the writer holding it: they never spin at once, the
/// writer's priority being above the guard's) and what the bound cost.
#[derive(Debug)]
pub struct LaneSpin {
    /// The lane's CPU.
    pub cpu: u32,
    /// The bound.
    pub bound: SpinBound,
    ledger: Mutex<SpinLedger>,
    /// Spins the bound ended while the spinner still had reason to spin.
    pub cuts: AtomicU64,
    /// CPU time occupied at SCHED_OTHER past the bound, ns.
    pub bounded_ns: AtomicU64,
}

impl LaneSpin {
    /// The account of batch CPU `cpu` under `bound`.
    pub fn new(cpu: u32, bound: SpinBound) -> LaneSpin {
        LaneSpin {
            cpu,
            bound,
            ledger: Mutex::new(SpinLedger::default()),
            cuts: AtomicU64::new(0),
            bounded_ns: AtomicU64::new(0),
        }
    }

    /// [`SpinLedger::allowance`] of this lane.
    pub fn allowance(&self, period: u64, now_ns: u64) -> u64 {
        let b = self.bound;
        self.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .allowance(&b, period, now_ns)
    }

    /// [`SpinLedger::tokens`] of this lane.
    pub fn tokens(&self, now_ns: u64) -> u64 {
        let b = self.bound;
        self.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tokens(&b, now_ns)
    }

    /// [`SpinLedger::charge`] of this lane.
    pub fn charge(&self, spun_ns: u64, now_ns: u64) {
        let b = self.bound;
        self.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .charge(&b, spun_ns, now_ns);
    }

    /// Counts a spin the bound ended.
    pub fn cut(&self) {
        self.cuts.fetch_add(1, Relaxed);
    }
}

/// The window over which a real-time thread's own work is bounded.
pub const DUTY_WINDOW_NS: u64 = 100_000_000;

/// The most of a [`DUTY_WINDOW_NS`] window a thread woken per edge spends
/// at SCHED_FIFO on its own work (a writer's wake-up costs microseconds,
/// so this leaves it real-time at tens of thousands of transitions a
/// second).
pub const DUTY_SHARE_MAX: f64 = 0.2;

/// A real-time thread's own work bounded whatever the LC does (the writer
/// woken by every transition, a freezer by every busy edge, blind isolation
/// by every busy edge of any CPU — a service with many a second wakes them
/// as often): past [`DUTY_SHARE_MAX`] (or the bound's share, if smaller) of
/// a [`DUTY_WINDOW_NS`] window at SCHED_FIFO the thread runs at SCHED_OTHER
/// until the window ends.
#[derive(Debug)]
pub struct DutyBound {
    priority: u8,
    share: f64,
    window_ns: u64,
    cpu0: u64,
    demoted: bool,
    /// Windows in which the thread stepped down.
    pub demotions: u64,
}

impl DutyBound {
    /// For the calling thread at SCHED_FIFO `priority` (0: SCHED_OTHER,
    /// nothing to bound) under `bound`.
    pub fn new(priority: u8, bound: &SpinBound) -> DutyBound {
        DutyBound {
            priority,
            share: duty_share(bound),
            window_ns: 0,
            cpu0: crate::guard::thread_cpu_ns(),
            demoted: false,
            demotions: 0,
        }
    }

    /// After a wake-up's work, at `now_ns`: steps the calling thread down
    /// when the window's share is spent, back up when a new window begins.
    /// Returns whether it runs at SCHED_OTHER now.
    pub fn step(&mut self, now_ns: u64) -> bool {
        use elfen_cmd::proc::{SchedClass, set_sched};
        if self.priority == 0 {
            return false;
        }
        let cpu = crate::guard::thread_cpu_ns();
        match duty_step(
            self.demoted,
            now_ns.saturating_sub(self.window_ns),
            cpu.saturating_sub(self.cpu0),
            self.share,
        ) {
            Duty::NewWindow => {
                if self.demoted && set_sched(0, SchedClass::Fifo(self.priority)).is_ok() {
                    self.demoted = false;
                }
                self.window_ns = now_ns;
                self.cpu0 = cpu;
            }
            Duty::StepDown => {
                if set_sched(0, SchedClass::Other).is_ok() {
                    self.demoted = true;
                    self.demotions += 1;
                }
            }
            Duty::Stay => {}
        }
        self.demoted
    }
}

/// The share of each window a [`DutyBound`] allows at SCHED_FIFO.
fn duty_share(bound: &SpinBound) -> f64 {
    bound.share.min(DUTY_SHARE_MAX)
}

/// What a [`DutyBound`] does at a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Duty {
    NewWindow,
    StepDown,
    Stay,
}

/// The pure rule of [`DutyBound::step`]: `into_ns` into the window, `cpu_ns`
/// of CPU used in it.
fn duty_step(demoted: bool, into_ns: u64, cpu_ns: u64, share: f64) -> Duty {
    if into_ns >= DUTY_WINDOW_NS {
        Duty::NewWindow
    } else if !demoted && cpu_ns as f64 > share * DUTY_WINDOW_NS as f64 {
        Duty::StepDown
    } else {
        Duty::Stay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// A period named by when the kill switch was seen set.
    const KILL: u64 = 123;

    fn bound() -> SpinBound {
        SpinBound {
            max_ns: 10 * MS,
            share: 0.5,
        }
    }

    #[test]
    fn a_busy_period_gets_at_most_max_however_long_it_lasts() {
        let b = bound();
        let mut l = SpinLedger::default();
        // a saturated LC: one busy period from t = 0, the spinner asks again
        // and again (each time it wakes) and spins all it is allowed
        let mut now = 0;
        let mut spun = 0;
        for _ in 0..100 {
            let a = l.allowance(&b, 7, now);
            spun += a;
            now += a;
            l.charge(&b, a, now);
            now += 100 * MS;
        }
        assert_eq!(spun, b.max_ns, "one period, one budget");
        // the next busy period has a budget again (the bucket refilled)
        assert_eq!(l.allowance(&b, 8, now), b.max_ns);
    }

    #[test]
    fn back_to_back_periods_spin_at_most_the_share_over_time() {
        let b = bound();
        let mut l = SpinLedger::default();
        // busy periods of 9 ms each one 1 µs gap apart, for 10 s: each would
        // take its whole 9 ms; the bucket keeps the total to max + share·T
        let (mut now, mut spun, mut period) = (0u64, 0u64, 0u64);
        let end = 10_000 * MS;
        while now < end {
            period += 1;
            let a = l.allowance(&b, period, now).min(9 * MS);
            l.charge(&b, a, now + a);
            spun += a;
            now += 9 * MS + 1_000;
        }
        let most = b.max_ns as f64 + b.share * now as f64;
        assert!(spun as f64 <= most, "{spun} > {most}");
        // and the share is used, not starved
        assert!(spun as f64 >= 0.9 * b.share * now as f64, "{spun}");
    }

    #[test]
    fn an_empty_bucket_refills_at_the_share() {
        let b = bound();
        let mut l = SpinLedger::default();
        let a = l.allowance(&b, KILL, 0);
        assert_eq!(a, b.max_ns);
        l.charge(&b, a, a);
        // a clock read out of order mints no tokens
        assert_eq!(l.allowance(&b, KILL, 0), 0);
        // the kill switch asks again as one period: nothing left of it
        assert_eq!(l.allowance(&b, KILL, a + 4 * MS), 0);
        // the bucket refilled meanwhile, whatever the period
        assert_eq!(l.tokens(&b, a + 4 * MS), 2 * MS);
        // a new busy period 4 ms later: 2 ms of tokens (share 0.5)
        assert_eq!(l.allowance(&b, 1, a + 4 * MS), 2 * MS);
        // never more than the capacity, however long the rest
        assert_eq!(l.allowance(&b, 2, a + 1_000 * MS), b.max_ns);
    }

    #[test]
    fn the_share_is_capped_below_the_kernels_throttling_and_said() {
        let (b, note) = SpinBound::resolve(10_000, 100, Some(RtThrottle::DEFAULT));
        assert_eq!(b.max_ns, 10 * MS);
        assert!((b.share - 0.95 * RT_SHARE_USE).abs() < 1e-9, "{}", b.share);
        assert!(note.contains("950000 µs of every 1000000 µs"), "{note}");
        assert!(note.contains("capped"), "{note}");
        let (b, note) = SpinBound::resolve(
            5_000,
            50,
            Some(RtThrottle {
                runtime_us: -1,
                period_us: 1_000_000,
            }),
        );
        assert!((b.share - 0.5).abs() < 1e-9);
        assert!(note.contains("off") && note.contains("= -1"), "{note}");
        assert!(!note.contains("capped"), "{note}");
        let (b, note) = SpinBound::resolve(5_000, 50, None);
        assert!((b.share - 0.5).abs() < 1e-9);
        assert!(note.contains("unreadable"), "{note}");
    }

    #[test]
    fn a_woken_threads_work_gets_less_of_a_window_than_a_spin() {
        // the default spin share (most of the lane) is not a woken
        // thread's: its work is held to DUTY_SHARE_MAX
        let (b, _) = SpinBound::resolve(10_000, 90, Some(RtThrottle::DEFAULT));
        assert!(b.share > DUTY_SHARE_MAX);
        assert!((duty_share(&b) - DUTY_SHARE_MAX).abs() < 1e-9);
        // a smaller spin share bounds it too
        let (b, _) = SpinBound::resolve(10_000, 5, Some(RtThrottle::DEFAULT));
        assert!((duty_share(&b) - 0.05).abs() < 1e-9);
    }

    #[test]
    fn a_thread_steps_down_past_its_share_of_a_window_and_back_up_after() {
        let w = DUTY_WINDOW_NS;
        // within the share: stays
        assert_eq!(duty_step(false, w / 2, 40 * MS, 0.5), Duty::Stay);
        // past it: down, and stays down for the rest of the window
        assert_eq!(duty_step(false, w / 2, 51 * MS, 0.5), Duty::StepDown);
        assert_eq!(duty_step(true, w - 1, 99 * MS, 0.5), Duty::Stay);
        // a new window: back up, whatever was used
        assert_eq!(duty_step(true, w, 100 * MS, 0.5), Duty::NewWindow);
        assert_eq!(duty_step(false, 3 * w, 0, 0.5), Duty::NewWindow);
    }

    #[test]
    fn the_kernels_files_parse_here() {
        // every Linux with real-time scheduling has them
        let t = RtThrottle::read().expect("sched_rt_runtime_us and sched_rt_period_us");
        assert!(t.period_us > 0);
        assert!(t.runtime_us == -1 || t.runtime_us as u64 <= t.period_us);
    }
}
