//! **Whether a mode can follow the service**, and what a gap is worth:
//! pure functions of the LC's busy-period profile (`super::profile`) and
//! the measured costs of the knobs on this machine ([`KnobCosts`]).
//!
//! A dynamic knob takes the batch off the LC's lanes some time `R` after
//! a busy edge (its reaction: the signal's latency plus the knob's own —
//! a freeze, a cpuset write) and stays in place through idle gaps shorter
//! than its hold `H` (a guard holding the lane, blind isolation's grow
//! hold; a freezer thaws at once). A busy period that follows a gap of at
//! least `H` runs its first `R` beside the batch. So the share of LC busy
//! time it protects — its **coverage** — is
//!
//! ```text
//! coverage = 1 − P(gap ≥ H) · E[min(busy, R)] / E[busy]
//! ```
//!
//! and its cost per second is one knob cycle (the per-edge cost `c`) per
//! burst: `rate · P(gap ≥ H) · c`, as a share of a lane. A mode **fits**
//! when its coverage is at least [`MIN_COVERAGE`] and its cost at most
//! [`MAX_COST_SHARE`] of a lane; with fewer than [`MIN_PERIODS`] busy
//! periods seen the verdict is unknown. `idle` and `cooperative` have no
//! reaction to miss: they always fit. Freeze, at ~170 µs per freeze against
//! busy periods of tens of µs, covers nothing and costs more than a lane.
//!
//! The **hold** ([`hold_ns`]): holding a lane through a gap costs the gap
//! (batch does not get it); giving it back costs a sleep/wake cycle (the
//! measured charge of a cross-CPU wake-up, `c`). Like the hybrid nap's spin
//! bound, holding for `c` and then giving the rest of the gap back is never
//! worse than twice the best choice made knowing the gap; and when the
//! service's gaps are on average shorter than `c`, a gap given back is worth
//! less than it costs, so the hold is longer ([`LONG_HOLD_FACTOR`] × `c`).

use super::profile::{ProfileSnapshot, us};
use crate::config::Mode;
use serde::{Deserialize, Serialize};

/// Coverage below which a dynamic mode does not fit.
pub const MIN_COVERAGE: f64 = 0.5;
/// Cost (share of one lane) above which a dynamic mode does not fit.
pub const MAX_COST_SHARE: f64 = 0.25;
/// Busy periods a verdict needs.
pub const MIN_PERIODS: u64 = 5;
/// The hold when the service's gaps are shorter than a wake-up, in wake-ups.
pub const LONG_HOLD_FACTOR: u64 = 8;

/// What the knobs cost on this machine (measured at start, refined while
/// running), ns.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct KnobCosts {
    /// How late the daemon acts on a busy edge: 0 when the BPF source
    /// announces the LC's wake-up before its switch-in; one writer wake-up
    /// otherwise; the poll fallback's interval with it.
    pub edge_ns: u64,
    /// The charge of one cross-CPU wake-up of a daemon thread (a sleep/wake
    /// cycle of a guard or the writer).
    pub wake_ns: u64,
    /// Freeze request → frozen (kernel work on the batch lanes).
    pub freeze_ns: Option<u64>,
    /// A thaw write.
    pub thaw_ns: Option<u64>,
    /// A cpuset write.
    pub cpuset_ns: Option<u64>,
}

/// Whether a mode fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FitState {
    /// It can follow this service at an affordable cost.
    Fits,
    /// It cannot: too slow for the busy periods, or too costly at their rate.
    Unfit,
    /// Not enough busy periods seen (or the knob's cost not measured).
    Unknown,
}

impl FitState {
    /// One word for status and logs.
    pub fn word(self) -> &'static str {
        match self {
            FitState::Fits => "fits",
            FitState::Unfit => "UNFIT",
            FitState::Unknown => "unknown",
        }
    }
}

/// A mode's verdict for one profile, with the reason in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The mode judged.
    pub mode: Mode,
    /// The verdict.
    pub state: FitState,
    /// Share of the LC's busy time it keeps the batch off (1 for static modes).
    pub coverage: f64,
    /// Its knob cycles' cost, share of one lane.
    pub cost_share: f64,
    /// Why, with the figures.
    pub reason: String,
}

impl Verdict {
    /// Whether it fits (an unknown verdict does not).
    pub fn fits(&self) -> bool {
        self.state == FitState::Fits
    }
}

/// A dynamic knob's timing: reaction, hold, cost per cycle, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnobTiming {
    /// Busy edge → batch off the lane.
    pub reaction_ns: u64,
    /// Gaps shorter than this keep the knob in place.
    pub hold_ns: u64,
    /// One knob cycle (sleep/wake, freeze + thaw, cpuset writes).
    pub cycle_ns: u64,
}

/// Coverage and cost share of a knob with `t` on `p` (see the module docs).
pub fn coverage_and_cost(p: &ProfileSnapshot, t: KnobTiming) -> (f64, f64) {
    let mean = p.busy.mean_ns();
    if mean <= 0.0 {
        return (1.0, 0.0);
    }
    // every busy period follows some gap; the first ones none: count them
    // as following a long gap
    let long = if p.gaps.count == 0 {
        1.0
    } else {
        p.gaps.share_at_least(t.hold_ns.max(1))
    };
    let exposed = p.busy.mean_capped_ns(t.reaction_ns) / mean;
    let coverage = (1.0 - long * exposed).clamp(0.0, 1.0);
    let cost = p.rate_per_s() * long * t.cycle_ns as f64 / 1e9;
    (coverage, cost)
}

/// The timing of `mode` with `costs` and `hold_ns` (the guard's hold, or
/// blind isolation's grow hold); `None` for modes with nothing dynamic, or
/// a knob whose cost is not measured.
pub fn timing(mode: Mode, costs: &KnobCosts, hold_ns: u64) -> Option<KnobTiming> {
    match mode {
        Mode::Guard => Some(KnobTiming {
            reaction_ns: costs.edge_ns,
            hold_ns,
            cycle_ns: costs.wake_ns,
        }),
        Mode::Freeze => {
            let f = costs.freeze_ns?;
            Some(KnobTiming {
                reaction_ns: costs.edge_ns + f,
                hold_ns: 0,
                cycle_ns: f + costs.thaw_ns.unwrap_or(0) + costs.wake_ns,
            })
        }
        Mode::Blind => {
            let c = costs.cpuset_ns?;
            Some(KnobTiming {
                reaction_ns: costs.edge_ns + c,
                hold_ns,
                cycle_ns: 2 * c + costs.wake_ns,
            })
        }
        Mode::Idle | Mode::Cooperative | Mode::Auto | Mode::Scx => None,
    }
}

/// Whether `mode` can follow the service whose window is `p` (module docs).
pub fn judge(mode: Mode, p: &ProfileSnapshot, costs: &KnobCosts, hold_ns: u64) -> Verdict {
    let verdict = |state, coverage, cost_share, reason: String| Verdict {
        mode,
        state,
        coverage,
        cost_share,
        reason,
    };
    let Some(t) = timing(mode, costs, hold_ns) else {
        let why = match mode {
            Mode::Idle => "nothing dynamic: the batch yields to the LC at every wake-up",
            Mode::Cooperative => "the batch threads check and nap themselves",
            Mode::Auto => "auto chooses among modes that fit",
            Mode::Scx => {
                "the kernel follows every switch (sched_ext): nothing in user space per busy edge"
            }
            _ => "its knob's cost is not measured here",
        };
        let state = if matches!(
            mode,
            Mode::Idle | Mode::Cooperative | Mode::Auto | Mode::Scx
        ) {
            FitState::Fits
        } else {
            FitState::Unknown
        };
        return verdict(state, 1.0, 0.0, why.into());
    };
    if p.busy.count < MIN_PERIODS {
        return verdict(
            FitState::Unknown,
            0.0,
            0.0,
            format!(
                "{} busy periods seen, {MIN_PERIODS} needed to judge",
                p.busy.count
            ),
        );
    }
    let (coverage, cost) = coverage_and_cost(p, t);
    let knob = match mode {
        Mode::Freeze => format!("a freeze takes {}", us(t.reaction_ns as f64)),
        Mode::Blind => format!("a cpuset change takes {}", us(t.reaction_ns as f64)),
        _ => format!(
            "it acts {} after a busy edge, a wake-up costs {}, hold {}",
            us(t.reaction_ns as f64),
            us(t.cycle_ns as f64),
            us(t.hold_ns as f64)
        ),
    };
    let figures = format!(
        "{}; {knob}: it would keep the batch off {:.0} % of the LC's busy time at {:.1} % of a \
         lane",
        p.describe(),
        coverage * 100.0,
        cost * 100.0
    );
    if coverage < MIN_COVERAGE {
        return verdict(
            FitState::Unfit,
            coverage,
            cost,
            format!(
                "cannot follow this service's busy periods ({figures}; at least {:.0} % needed)",
                MIN_COVERAGE * 100.0
            ),
        );
    }
    if cost > MAX_COST_SHARE {
        return verdict(
            FitState::Unfit,
            coverage,
            cost,
            format!(
                "costs too much at this rate ({figures}; at most {:.0} % of a lane)",
                MAX_COST_SHARE * 100.0
            ),
        );
    }
    verdict(FitState::Fits, coverage, cost, figures)
}

/// `[guard] hold_us`: `"auto"` or a number of µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldSetting {
    /// The number, µs (0: never hold — the default, until holding is
    /// known not to starve a CPU's kernel work: a guest's kernel locked up
    /// while the writer held a lane at SCHED_FIFO).
    Us(u64),
    /// From the measured wake-up cost and the service's gaps.
    Auto,
}

impl std::fmt::Display for HoldSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HoldSetting::Us(n) => write!(f, "{n} µs"),
            HoldSetting::Auto => f.write_str("auto"),
        }
    }
}

impl Serialize for HoldSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            HoldSetting::Us(n) => s.serialize_u64(*n),
            HoldSetting::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for HoldSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = HoldSetting;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"auto\" or a number of µs")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<HoldSetting, E> {
                Ok(HoldSetting::Us(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<HoldSetting, E> {
                u64::try_from(v)
                    .map(HoldSetting::Us)
                    .map_err(|_| E::custom(format!("{v}: not a number of µs")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HoldSetting, E> {
                match v {
                    "auto" => Ok(HoldSetting::Auto),
                    _ => Err(E::custom(format!("{v:?}: \"auto\" or a number of µs"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// The hold for `setting`: a number as given; `auto` one sleep/wake cycle
/// (`wake_ns`), or [`LONG_HOLD_FACTOR`] of them when the mean of the
/// service's recent gaps (`gap_mean_ns`, 0 = none seen) is shorter than a
/// cycle (module docs).
pub fn hold_ns(setting: HoldSetting, wake_ns: u64, gap_mean_ns: f64) -> u64 {
    match setting {
        HoldSetting::Us(us) => us.saturating_mul(1000),
        HoldSetting::Auto if gap_mean_ns > 0.0 && gap_mean_ns < wake_ns as f64 => {
            wake_ns.saturating_mul(LONG_HOLD_FACTOR)
        }
        HoldSetting::Auto => wake_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protection::profile::HistSnapshot;

    /// A window of `n` busy periods of `busy_us` separated by gaps of `gap_us`.
    fn window(n: u64, busy_us: u64, gap_us: u64) -> ProfileSnapshot {
        ProfileSnapshot {
            at_ns: n * (busy_us + gap_us) * 1000,
            busy: HistSnapshot::of(&vec![busy_us * 1000; n as usize]),
            gaps: HistSnapshot::of(&vec![gap_us * 1000; n as usize]),
            wake: HistSnapshot::default(),
        }
    }

    fn costs() -> KnobCosts {
        KnobCosts {
            edge_ns: 0,
            wake_ns: 17_000,
            freeze_ns: Some(170_000),
            thaw_ns: Some(20_000),
            cpuset_ns: Some(25_000),
        }
    }

    #[test]
    fn freeze_does_not_fit_a_microsecond_service_and_fits_a_millisecond_one() {
        // ~50 µs busy periods, 10,000 a second: a freeze never lands in time
        let v = judge(Mode::Freeze, &window(10_000, 50, 50), &costs(), 0);
        assert_eq!(v.state, FitState::Unfit, "{v:?}");
        assert!(v.coverage < 0.01, "{v:?}");
        assert!(v.reason.contains("cannot follow"), "{}", v.reason);
        // 5 ms busy periods, 30 a second: it covers nearly all, cheaply
        let v = judge(Mode::Freeze, &window(30, 5_000, 28_000), &costs(), 0);
        assert!(v.fits(), "{v:?}");
        assert!(v.coverage > 0.9 && v.cost_share < 0.02, "{v:?}");
    }

    #[test]
    fn a_cheap_knob_too_costly_at_the_rate_does_not_fit() {
        let c = KnobCosts {
            wake_ns: 40_000,
            ..costs()
        };
        // 20,000 bursts a second, each a wake-up of 40 µs: 80 % of a lane
        let v = judge(Mode::Guard, &window(20_000, 10, 40), &c, 0);
        assert_eq!(v.state, FitState::Unfit, "{v:?}");
        assert!(v.reason.contains("costs too much"), "{}", v.reason);
        // the same with a hold over the gaps: one wake-up per burst, few bursts
        let v = judge(Mode::Guard, &window(20_000, 10, 40), &c, 100_000);
        assert!(v.fits(), "{v:?}");
    }

    #[test]
    fn static_modes_always_fit_and_few_periods_are_unknown() {
        for m in [Mode::Idle, Mode::Cooperative] {
            assert!(judge(m, &window(1, 50, 50), &costs(), 0).fits());
        }
        let v = judge(Mode::Guard, &window(MIN_PERIODS - 1, 50, 50), &costs(), 0);
        assert_eq!(v.state, FitState::Unknown);
        let no_cost = KnobCosts {
            freeze_ns: None,
            ..costs()
        };
        assert_eq!(
            judge(Mode::Freeze, &window(100, 5_000, 5_000), &no_cost, 0).state,
            FitState::Unknown
        );
    }

    #[test]
    fn the_hold_is_one_wake_up_or_longer_when_gaps_are_shorter() {
        assert_eq!(hold_ns(HoldSetting::Us(30), 17_000, 5_000.0), 30_000);
        assert_eq!(hold_ns(HoldSetting::Auto, 17_000, 0.0), 17_000);
        assert_eq!(hold_ns(HoldSetting::Auto, 17_000, 60_000.0), 17_000);
        assert_eq!(
            hold_ns(HoldSetting::Auto, 17_000, 5_000.0),
            17_000 * LONG_HOLD_FACTOR
        );
    }

    #[test]
    fn the_hold_setting_reads_auto_or_a_number() {
        #[derive(Deserialize)]
        struct T {
            h: HoldSetting,
        }
        let t: T = toml::from_str("h = \"auto\"").unwrap();
        assert_eq!(t.h, HoldSetting::Auto);
        let t: T = toml::from_str("h = 40").unwrap();
        assert_eq!(t.h, HoldSetting::Us(40));
        assert!(toml::from_str::<T>("h = \"soon\"").is_err());
    }
}
