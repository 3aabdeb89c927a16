//! [`StatsReader`]: the LC counters the BPF program keeps on every CPU
//! (`cpu_stats`: histograms of the LC's busy periods, the gaps between
//! them and its wake-to-run delay), mapped read-only, for a reader that
//! takes them on its own tick instead of being woken at every busy edge.

use crate::contract::{CpuStats, HIST_BUCKETS, Hist};
use crate::slots::Backing;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// A copy of one kernel histogram (or a sum, or a difference, of copies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistCounts {
    /// Values recorded.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: u64,
    /// Values per bucket ([`crate::contract::hist_bucket`]).
    pub buckets: Vec<u64>,
}

impl Default for HistCounts {
    fn default() -> Self {
        HistCounts {
            count: 0,
            sum_ns: 0,
            buckets: vec![0; HIST_BUCKETS],
        }
    }
}

impl HistCounts {
    fn of(h: &Hist) -> HistCounts {
        HistCounts {
            count: h.count.load(Relaxed),
            sum_ns: h.sum_ns.load(Relaxed),
            buckets: h.buckets.iter().map(|b| b.load(Relaxed)).collect(),
        }
    }

    fn add(&mut self, o: &HistCounts) {
        self.count = self.count.wrapping_add(o.count);
        self.sum_ns = self.sum_ns.wrapping_add(o.sum_ns);
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a = a.wrapping_add(*b);
        }
    }

    /// What was recorded after `earlier` (a copy of the same counters).
    pub fn since(&self, earlier: &HistCounts) -> HistCounts {
        HistCounts {
            count: self.count.saturating_sub(earlier.count),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            buckets: self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
        }
    }
}

/// The LC's counters on a set of CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LcCounts {
    /// LC busy periods that ended.
    pub busy: HistCounts,
    /// Gaps between them.
    pub gaps: HistCounts,
    /// Wake-up to switch-in of LC tasks.
    pub wake: HistCounts,
}

impl LcCounts {
    /// What was counted after `earlier`.
    pub fn since(&self, earlier: &LcCounts) -> LcCounts {
        LcCounts {
            busy: self.busy.since(&earlier.busy),
            gaps: self.gaps.since(&earlier.gaps),
            wake: self.wake.since(&earlier.wake),
        }
    }
}

/// Read access to every CPU's [`CpuStats`] (cheap to clone, any thread;
/// plain loads from shared memory, no system call). A copy is not
/// atomic as a whole: it may miss the one value being recorded.
#[derive(Clone)]
pub struct StatsReader {
    /// Keeps the mapping (and so the kernel's map memory) alive.
    _backing: Arc<Backing>,
    base: *const CpuStats,
    count: u32,
}

// SAFETY: `base` points into `backing`, which the Arc keeps alive; the
// counters are read only through atomics.
unsafe impl Send for StatsReader {}
// SAFETY: as above.
unsafe impl Sync for StatsReader {}

impl std::fmt::Debug for StatsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsReader")
            .field("cpus", &self.count)
            .finish()
    }
}

impl StatsReader {
    /// Over a read-only shared mapping (`ptr`, `len`, unmapped when the
    /// last clone goes) of `count` [`CpuStats`].
    pub(crate) fn mapped(ptr: *mut libc::c_void, len: usize, count: u32) -> StatsReader {
        debug_assert!(len >= count as usize * std::mem::size_of::<CpuStats>());
        StatsReader {
            _backing: Arc::new(Backing::Mmap { ptr, len }),
            base: ptr.cast_const().cast::<CpuStats>(),
            count,
        }
    }

    /// Number of CPUs (the machine's possible CPUs).
    pub fn cpus(&self) -> u32 {
        self.count
    }

    fn stats(&self, cpu: u32) -> Option<&CpuStats> {
        // SAFETY: cpu < count records live at base for as long as self.
        (cpu < self.count).then(|| unsafe { &*self.base.add(cpu as usize) })
    }

    /// The counters of `cpus` summed (a CPU out of range counts nothing).
    pub fn sum(&self, cpus: &[u32]) -> LcCounts {
        let mut out = LcCounts::default();
        for s in cpus.iter().filter_map(|&c| self.stats(c)) {
            out.busy.add(&HistCounts::of(&s.busy));
            out.gaps.add(&HistCounts::of(&s.gaps));
            out.wake.add(&HistCounts::of(&s.wake));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_and_sums() {
        let mut a = HistCounts {
            count: 3,
            sum_ns: 30,
            ..HistCounts::default()
        };
        a.buckets[5] = 3;
        let mut b = a.clone();
        b.add(&a);
        assert_eq!((b.count, b.sum_ns, b.buckets[5]), (6, 60, 6));
        let d = b.since(&a);
        assert_eq!(d, a);
        assert_eq!(a.since(&b), HistCounts::default(), "never below zero");
    }
}
