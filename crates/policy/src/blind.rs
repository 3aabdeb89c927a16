//! PerfIso's **CPU blind isolation** control law (PerfIso, ATC'18, §4.1).
//!
//! The primary (LC) service is a black box that may run on any core. The
//! secondary (batch) tenant is confined to a set of cores chosen so that the
//! primary always has `buffer_cores` idle cores to absorb a burst of threads
//! waking up. The controller polls core idleness in a tight loop and moves
//! the secondary's allocation S toward that target:
//!
//! ```text
//! I = idle cores (running neither primary nor secondary), B = buffer cores
//! if I < B: S shrinks;  if I > B: S grows;   i.e.  S' = S + (I - B)
//! clamped to 0 <= S' <= total - B.
//! ```
//!
//! Since a CPU-bound secondary keeps its S cores busy, `I = total − P − S`
//! (P = cores busy with the primary) and the fixed point is
//! `S = total − P − B` — the "all − busy − B" cpuset of the design notes.
//! The law is pure; the daemon applies it to a cgroup cpuset and the
//! simulator to its model of a chip.

use serde::{Deserialize, Serialize};

/// Parameters of blind isolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlindIsolation {
    /// Cores kept idle for the primary's bursts (PerfIso's B).
    pub buffer_cores: u32,
}

impl BlindIsolation {
    /// The secondary's next core allocation, given the cores of the machine,
    /// the secondary's current allocation and the idle cores just observed.
    pub fn next_allocation(&self, total_cores: u32, current: u32, idle_cores: u32) -> u32 {
        let max = total_cores.saturating_sub(self.buffer_cores);
        let next = i64::from(current.min(total_cores)) + i64::from(idle_cores)
            - i64::from(self.buffer_cores);
        next.clamp(0, i64::from(max)) as u32
    }

    /// The steady-state allocation when `primary_busy` cores run the primary
    /// and the secondary fills what it is given: `total − busy − B`.
    pub fn steady_allocation(&self, total_cores: u32, primary_busy: u32) -> u32 {
        total_cores
            .saturating_sub(primary_busy)
            .saturating_sub(self.buffer_cores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_when_idle_below_buffer_and_grows_above() {
        let b = BlindIsolation { buffer_cores: 4 };
        // 48 cores, secondary has 40, primary wakes 6 threads: idle = 2 < 4.
        assert_eq!(b.next_allocation(48, 40, 2), 38);
        // primary quiets down: idle = 10 > 4.
        assert_eq!(b.next_allocation(48, 30, 10), 36);
        // exactly B idle: unchanged.
        assert_eq!(b.next_allocation(48, 30, 4), 30);
    }

    #[test]
    fn clamps_to_machine_and_never_underflows() {
        let b = BlindIsolation { buffer_cores: 4 };
        assert_eq!(b.next_allocation(48, 2, 0), 0);
        assert_eq!(b.next_allocation(48, 44, 48), 44, "at most total - B");
        assert_eq!(
            b.next_allocation(2, 0, 2),
            0,
            "buffer larger than the machine"
        );
        assert_eq!(
            b.next_allocation(8, 100, 0),
            4,
            "current above total is clamped first"
        );
    }

    #[test]
    fn iterating_the_law_reaches_the_steady_allocation() {
        let b = BlindIsolation { buffer_cores: 2 };
        let (total, primary) = (16u32, 5u32);
        let mut s = 0;
        for _ in 0..10 {
            let idle = total - primary - s;
            s = b.next_allocation(total, s, idle);
        }
        assert_eq!(s, b.steady_allocation(total, primary));
        assert_eq!(s, 9);
    }
}
