//! Header line 1 as batch threads read it: the kill switch and its two
//! modes, and the heartbeat fail-safe (`docs/protocol.md`, "Kill switch and
//! heartbeat").
//!
//! - **Kill switch** ([`KillMode`], the control word's bits): *paused*
//!   ([`control::KILL`]: batch threads nap until it clears) or *unmanaged*
//!   ([`control::UNMANAGED`] without `KILL`: batch threads never nap, as if
//!   no elfen were there) — PerfIso's two kill-switch behaviours.
//! - **Heartbeat fail-safe**: a controller that beats sets
//!   `heartbeat_stale_ns`; while `now − heartbeat` exceeds it, the LC lines
//!   the controller writes cannot be trusted, and batch threads pause as
//!   under `KILL` until a fresh beat. `heartbeat_stale_ns` = 0 (every page
//!   whose controller does not beat) disables the check.
//!
//! [`batch_mode`] folds the words into what a batch thread's slow path does
//! ([`BatchMode`]); the runtime, the C library (through the runtime) and the
//! Java binding all implement exactly this function. None of it is on the
//! check's fast path: a thread whose request lane never changes does not
//! look at header line 1 until its next slow path or nap.

use crate::clock::Clock;
use crate::error::ShmError;
use crate::layout::control;
use crate::page::Page;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// The operator's kill switch: what the control word's `KILL` and
/// `UNMANAGED` bits ask of batch threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KillMode {
    /// Neither bit: batch threads follow their lane's policy.
    Off,
    /// `KILL` (whatever `UNMANAGED` says): batch threads must not run batch
    /// code; they nap until the bit clears.
    Paused,
    /// `UNMANAGED` without `KILL`: borrowing off — batch threads run
    /// without napping, as policy `UNMANAGED` would.
    Unmanaged,
}

impl KillMode {
    /// Every mode.
    pub const ALL: [KillMode; 3] = [KillMode::Off, KillMode::Paused, KillMode::Unmanaged];

    /// The mode a control word means (`KILL` wins over `UNMANAGED`).
    #[inline]
    pub const fn from_control(word: u64) -> KillMode {
        if word & control::KILL != 0 {
            KillMode::Paused
        } else if word & control::UNMANAGED != 0 {
            KillMode::Unmanaged
        } else {
            KillMode::Off
        }
    }

    /// The control bits of this mode (within `KILL | UNMANAGED`).
    pub const fn bits(self) -> u64 {
        match self {
            KillMode::Off => 0,
            KillMode::Paused => control::KILL,
            KillMode::Unmanaged => control::UNMANAGED,
        }
    }

    /// The name on the command line and in JSON: `off`, `paused`, `unmanaged`.
    pub const fn name(self) -> &'static str {
        match self {
            KillMode::Off => "off",
            KillMode::Paused => "paused",
            KillMode::Unmanaged => "unmanaged",
        }
    }
}

impl fmt::Display for KillMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A kill-switch mode name that is not one of [`KillMode::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown kill-switch mode {0:?}: expected off, paused or unmanaged")]
pub struct UnknownKillMode(pub String);

impl FromStr for KillMode {
    type Err = UnknownKillMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase();
        KillMode::ALL
            .into_iter()
            .find(|m| m.name() == norm)
            .ok_or_else(|| UnknownKillMode(s.to_string()))
    }
}

/// What a batch thread's slow path does, header line 1 considered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchMode {
    /// Run the lane's policy on the request lane's state.
    Managed,
    /// Never nap ([`KillMode::Unmanaged`]).
    Unmanaged,
    /// Nap until the control word changes ([`KillMode::Paused`]).
    Killed,
    /// Nap until a fresh heartbeat (or `heartbeat_stale_ns` or the control
    /// word changes): the controller stopped beating, so the LC lines it
    /// writes may be frozen.
    Stale,
}

impl BatchMode {
    /// Whether batch threads nap whatever the request lane does.
    pub const fn paused(self) -> bool {
        matches!(self, BatchMode::Killed | BatchMode::Stale)
    }

    /// A short name for humans and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            BatchMode::Managed => "managed",
            BatchMode::Unmanaged => "unmanaged",
            BatchMode::Killed => "paused (kill switch)",
            BatchMode::Stale => "paused (heartbeat stale)",
        }
    }
}

impl fmt::Display for BatchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a heartbeat is stale: the check is on (`stale_ns` ≠ 0) and the
/// controller never beat (`heartbeat` = 0) or its last beat is more than
/// `stale_ns` old at page-clock time `now`. A beat stamped slightly after
/// `now` (another CPU's clock read) has age 0.
#[inline]
pub fn heartbeat_stale(heartbeat: u64, stale_ns: u64, now: u64, clock: Clock) -> bool {
    stale_ns != 0 && (heartbeat == 0 || clock.ticks_to_ns(now.saturating_sub(heartbeat)) > stale_ns)
}

/// What batch threads do, from header line 1 read at page-clock time `now`.
///
/// Precedence: `KILL` → [`BatchMode::Killed`]; a stale heartbeat →
/// [`BatchMode::Stale`] (the fail-safe acts as `KILL`, so it also wins over
/// `UNMANAGED`); `UNMANAGED` → [`BatchMode::Unmanaged`]; otherwise
/// [`BatchMode::Managed`].
#[inline]
pub fn batch_mode(
    control: u64,
    heartbeat: u64,
    stale_ns: u64,
    now: u64,
    clock: Clock,
) -> BatchMode {
    if control & control::KILL != 0 {
        BatchMode::Killed
    } else if heartbeat_stale(heartbeat, stale_ns, now, clock) {
        BatchMode::Stale
    } else if control & control::UNMANAGED != 0 {
        BatchMode::Unmanaged
    } else {
        BatchMode::Managed
    }
}

impl Page {
    /// Sets the kill switch's mode (controller only): both bits in one
    /// atomic update, other bits untouched.
    pub fn set_control(&self, mode: KillMode) -> Result<(), ShmError> {
        self.require_page_writable("set the kill switch")?;
        let mask = control::KILL | control::UNMANAGED;
        let _ = self
            .header()
            .control
            .fetch_update(Release, Relaxed, |w| Some((w & !mask) | mode.bits()));
        Ok(())
    }

    /// The kill switch's mode.
    #[inline]
    pub fn kill_mode(&self) -> KillMode {
        KillMode::from_control(self.header().control.load(Acquire))
    }

    /// Sets or clears the kill switch's `KILL` bit (controller only),
    /// leaving `UNMANAGED` as it is.
    pub fn set_kill(&self, kill: bool) -> Result<(), ShmError> {
        self.set_bit(control::KILL, kill, "set the kill switch")
    }

    /// Whether `KILL` is set (batch paused).
    #[inline]
    pub fn killed(&self) -> bool {
        self.header().control.load(Acquire) & control::KILL != 0
    }

    /// Sets or clears the `UNMANAGED` bit (controller only), leaving `KILL`
    /// as it is (while `KILL` is set, batch threads stay paused).
    pub fn set_unmanaged(&self, unmanaged: bool) -> Result<(), ShmError> {
        self.set_bit(control::UNMANAGED, unmanaged, "set the kill switch")
    }

    /// Whether `UNMANAGED` is set (it takes effect only without `KILL`).
    #[inline]
    pub fn unmanaged(&self) -> bool {
        self.header().control.load(Acquire) & control::UNMANAGED != 0
    }

    fn set_bit(&self, bit: u64, on: bool, what: &'static str) -> Result<(), ShmError> {
        self.require_page_writable(what)?;
        let c = &self.header().control;
        if on {
            c.fetch_or(bit, Release);
        } else {
            c.fetch_and(!bit, Release);
        }
        Ok(())
    }

    /// Records a sign of life of the controller (heartbeat = now).
    pub fn beat(&self) -> Result<(), ShmError> {
        self.require_page_writable("write the heartbeat")?;
        self.header().heartbeat.store(self.clock().now(), Release);
        Ok(())
    }

    /// Turns the heartbeat fail-safe on (`stale_ns` > 0) or off (0);
    /// controller only. A controller that beats every `T` sets a bound
    /// well above `T` (10 × `T`), so a late beat does not pause batch work.
    /// Turning it on beats first, so the page is never stale for want of a
    /// first beat.
    pub fn set_heartbeat_stale(&self, stale_ns: u64) -> Result<(), ShmError> {
        self.require_page_writable("set heartbeat_stale_ns")?;
        if stale_ns != 0 {
            self.beat()?;
        }
        self.header().heartbeat_stale_ns.store(stale_ns, Release);
        Ok(())
    }

    /// The fail-safe's bound, ns (0 = off).
    #[inline]
    pub fn heartbeat_stale_ns(&self) -> u64 {
        self.header().heartbeat_stale_ns.load(Acquire)
    }

    /// How long ago the controller last beat, ns (`None`: it never beat).
    pub fn heartbeat_age_ns(&self) -> Option<u64> {
        let beat = self.header().heartbeat.load(Acquire);
        let clock = self.clock();
        (beat != 0).then(|| clock.ticks_to_ns(clock.now().saturating_sub(beat)))
    }

    /// Whether the fail-safe is on and the heartbeat stale (batch threads
    /// then pause), now.
    pub fn heartbeat_stale(&self) -> bool {
        let h = self.header();
        let stale_ns = h.heartbeat_stale_ns.load(Acquire);
        stale_ns != 0
            && heartbeat_stale(
                h.heartbeat.load(Acquire),
                stale_ns,
                self.clock().now(),
                self.clock(),
            )
    }

    /// What batch threads' slow paths do now ([`batch_mode`] of this
    /// page's header line 1).
    pub fn batch_mode(&self) -> BatchMode {
        let h = self.header();
        let control = h.control.load(Acquire);
        let stale_ns = h.heartbeat_stale_ns.load(Acquire);
        let beat = h.heartbeat.load(Acquire);
        batch_mode(control, beat, stale_ns, self.clock().now(), self.clock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TSC_2GHZ: Clock = Clock {
        kind: crate::layout::clock::TSC,
        ticks_per_sec: 2_000_000_000,
    };

    #[test]
    fn kill_mode_round_trips_and_kill_wins() {
        for m in KillMode::ALL {
            assert_eq!(KillMode::from_control(m.bits()), m);
            assert_eq!(m.name().parse::<KillMode>().unwrap(), m);
            assert_eq!(m.to_string(), m.name());
        }
        let both = control::KILL | control::UNMANAGED;
        assert_eq!(KillMode::from_control(both), KillMode::Paused);
        // unknown bits do not change the mode
        assert_eq!(KillMode::from_control(1 << 40), KillMode::Off);
        let e = "stop".parse::<KillMode>().unwrap_err().to_string();
        assert!(e.contains("\"stop\"") && e.contains("unmanaged"), "{e}");
        assert_eq!(" Paused ".parse::<KillMode>().unwrap(), KillMode::Paused);
    }

    #[test]
    fn staleness_needs_the_check_on_and_an_old_or_missing_beat() {
        let m = Clock::MONOTONIC;
        // off: never stale, whatever the heartbeat
        assert!(!heartbeat_stale(0, 0, 1_000_000_000, m));
        assert!(!heartbeat_stale(1, 0, u64::MAX, m));
        // on: never beat = stale
        assert!(heartbeat_stale(0, 10, 5, m));
        // on: exactly the bound is fresh, one more is stale
        assert!(!heartbeat_stale(1_000, 500, 1_500, m));
        assert!(heartbeat_stale(1_000, 500, 1_501, m));
        // a beat after `now` (another CPU's read) is fresh
        assert!(!heartbeat_stale(2_000, 1, 1_000, m));
        // ticks are converted: 2,000 TSC ticks at 2 GHz = 1 µs
        assert!(!heartbeat_stale(10_000, 1_000, 12_000, TSC_2GHZ));
        assert!(heartbeat_stale(10_000, 1_000, 12_002, TSC_2GHZ));
    }

    #[test]
    fn batch_mode_precedence() {
        let m = Clock::MONOTONIC;
        let (fresh, stale) = ((1_000, 100, 1_050), (1_000, 100, 2_000));
        let mode = |c: u64, (hb, s, now): (u64, u64, u64)| batch_mode(c, hb, s, now, m);
        assert_eq!(mode(0, fresh), BatchMode::Managed);
        assert_eq!(mode(0, (0, 0, 99)), BatchMode::Managed);
        assert_eq!(mode(control::UNMANAGED, fresh), BatchMode::Unmanaged);
        assert_eq!(mode(control::KILL, fresh), BatchMode::Killed);
        assert_eq!(
            mode(control::KILL | control::UNMANAGED, fresh),
            BatchMode::Killed
        );
        assert_eq!(mode(0, stale), BatchMode::Stale);
        // the fail-safe acts as KILL: it wins over UNMANAGED, KILL over it
        assert_eq!(mode(control::UNMANAGED, stale), BatchMode::Stale);
        assert_eq!(mode(control::KILL, stale), BatchMode::Killed);
        assert!(BatchMode::Killed.paused() && BatchMode::Stale.paused());
        assert!(!BatchMode::Managed.paused() && !BatchMode::Unmanaged.paused());
    }
}
