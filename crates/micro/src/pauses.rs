//! **Host pauses**: how often each measured vCPU stops running our code,
//! seen from inside it — the background every latency tail here sits on.
//!
//! One thread per lane (request and batch, at the same time), pinned, reads
//! the page clock in a tight loop for `dur`; every gap between consecutive
//! reads longer than `disturb_ns` is a pause (the host descheduled the vCPU,
//! or the guest ran an interrupt or another task). Reported per lane: pauses
//! per second, the fraction of time paused, and the pause lengths. The
//! fraction paused is also the chance that a given instant falls in a pause:
//! a wake or step-aside whose *batch* vCPU is paused when the request
//! changes is delayed by the pause, and the runtime's nap cannot tell.

use crate::error::{MicroError, panic_text};
use crate::setup::Lanes;
use crate::stats::{Percentiles, new_histogram, record};
use elfen_shm::Clock;
use elfen_topo::PinGuard;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Pauses seen on one lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LanePauses {
    /// The CPU.
    pub cpu: u32,
    /// `request` or `batch`.
    pub lane: String,
    /// Pauses (gaps > `disturb_ns`) per second.
    pub pauses_per_s: f64,
    /// Fraction of the time spent in pauses.
    pub paused_fraction: f64,
    /// Pause lengths (`None` if there was none).
    pub pause_ns: Option<Percentiles>,
}

/// The figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostPauses {
    /// How long each lane was watched, ms.
    pub watched_ms: u64,
    /// The gap that counts as a pause, ns.
    pub disturb_ns: u64,
    /// Per lane.
    pub lanes: Vec<LanePauses>,
}

fn watch(clock: &Clock, cpu: u32, lane: &str, dur: Duration, gap_ns: u64) -> LanePauses {
    let gap = clock.ns_to_ticks(gap_ns);
    let total = clock.ns_to_ticks(dur.as_nanos() as u64);
    let mut h = new_histogram();
    let (mut paused, mut n) = (0u64, 0u64);
    let start = clock.now();
    let mut prev = start;
    loop {
        let now = clock.now();
        let d = now.wrapping_sub(prev);
        if d > gap {
            n += 1;
            paused += d;
            record(&mut h, clock.ticks_to_ns(d));
        }
        prev = now;
        if now.wrapping_sub(start) >= total {
            break;
        }
    }
    let secs = clock.ticks_to_ns(prev.wrapping_sub(start)) as f64 / 1e9;
    LanePauses {
        cpu,
        lane: lane.to_string(),
        pauses_per_s: n as f64 / secs,
        paused_fraction: clock.ticks_to_ns(paused) as f64 / 1e9 / secs,
        pause_ns: Percentiles::of(&h),
    }
}

/// Watches both lanes at once for `dur`.
pub fn measure(
    lanes: &Lanes,
    clock: Clock,
    dur: Duration,
    disturb_ns: u64,
) -> Result<HostPauses, MicroError> {
    let run = |cpu: u32, lane: &'static str| {
        move || -> Result<LanePauses, MicroError> {
            let _pin = PinGuard::new(cpu)?;
            Ok(watch(&clock, cpu, lane, dur, disturb_ns))
        }
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(run(lanes.request_cpu, "request"));
        let b = s.spawn(run(lanes.batch_cpu, "batch"));
        (a.join(), b.join())
    });
    let j = |r: std::thread::Result<Result<LanePauses, MicroError>>| {
        r.map_err(|p| MicroError::Panicked(panic_text(p)))?
    };
    Ok(HostPauses {
        watched_ms: dur.as_millis() as u64,
        disturb_ns,
        lanes: vec![j(a)?, j(b)?],
    })
}
