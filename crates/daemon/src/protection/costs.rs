//! What the knobs cost **on this machine**, measured at the daemon's start
//! (`fit::KnobCosts`): the charge of a cross-CPU wake-up (the guard's
//! sleep/wake cycle, the hold's unit; `crate::measure::wake_charge`, the
//! same reference `elfen daemon measure` reports), a freeze and a thaw of
//! a freeze group, a cpuset write of a blind group. Every write goes
//! through the executor (recorded and restored like the rest).

use super::fit::KnobCosts;
use super::profile::us;
use elfen_cgroup::{Executor, FreezeOutcome, Group, Knob};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wake-ups the measurement rings (one a millisecond).
const WAKE_WINDOW: Duration = Duration::from_millis(100);
/// Freeze/thaw or cpuset cycles timed.
const CYCLES: usize = 3;
/// Used when the wake-up cannot be measured (no real-time priority): a
/// generous figure for a VM, said in the notes.
pub const WAKE_FALLBACK_NS: u64 = 50_000;

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// The charge of a wake-up of a SCHED_FIFO `priority` thread on
/// `batch_cpu` rung from `request_cpu`, ns; or why not.
pub fn wake_ns(request_cpu: u32, batch_cpu: u32, priority: u8) -> Result<u64, String> {
    crate::measure::wake_charge(request_cpu, batch_cpu, priority.max(1), WAKE_WINDOW)
        .map(|c| c.charged_ns_per_wake.round() as u64)
        .map_err(|e| format!("{e:#}"))
}

/// A freeze (request → frozen) and a thaw of `group`, medians over a few
/// cycles, ns; `None` if the freezer refuses (said by the caller).
pub fn freeze_ns(ex: &Mutex<Executor>, group: &Group) -> Result<(u64, u64), String> {
    let (mut fr, mut th) = (Vec::new(), Vec::new());
    for _ in 0..CYCLES {
        let mut ex = ex.lock().unwrap_or_else(|p| p.into_inner());
        match ex.freeze(group, Duration::from_millis(100)) {
            Ok(FreezeOutcome::Frozen { waited }) => fr.push(waited.as_nanos() as u64),
            Ok(_) => fr.push(100_000_000),
            Err(e) => {
                let _ = ex.thaw(group);
                return Err(e.to_string());
            }
        }
        let t0 = Instant::now();
        ex.thaw(group).map_err(|e| e.to_string())?;
        th.push(t0.elapsed().as_nanos() as u64);
    }
    Ok((median(fr).unwrap_or(0), median(th).unwrap_or(0)))
}

/// A cpuset write of `group`, median, ns: its set `base` changed to
/// another and back — narrowed by one CPU, or, with one CPU, widened to
/// `all` for the moment of the write.
pub fn cpuset_ns(
    ex: &Mutex<Executor>,
    group: &Group,
    base: &[u32],
    all: &[u32],
) -> Result<u64, String> {
    let other: Vec<u32> = if base.len() >= 2 {
        base[..base.len() - 1].to_vec()
    } else {
        all.to_vec()
    };
    if base.is_empty() || other == base {
        return Err("no other set to write".into());
    }
    let mut v = Vec::new();
    let mut ex = ex.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..CYCLES {
        for set in [&other[..], base] {
            let t0 = Instant::now();
            ex.set(group, Knob::CpusetCpus(set.to_vec()))
                .map_err(|e| e.to_string())?;
            v.push(t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(median(v).unwrap_or(0))
}

/// One line: what was measured.
pub fn describe(c: &KnobCosts) -> String {
    let mut parts = vec![format!("a wake-up {}", us(c.wake_ns as f64))];
    if let (Some(f), Some(t)) = (c.freeze_ns, c.thaw_ns) {
        parts.push(format!("a freeze {} (thaw {})", us(f as f64), us(t as f64)));
    }
    if let Some(c) = c.cpuset_ns {
        parts.push(format!("a cpuset write {}", us(c as f64)));
    }
    parts.push(if c.edge_ns == 0 {
        "busy edges announced at the LC's wake-up".into()
    } else {
        format!("busy edges seen {} late", us(c.edge_ns as f64))
    });
    format!("knob costs here: {}", parts.join(", "))
}
