//! [`BlindState`]: the pure decision — PerfIso's law, shrinking at once
//! and growing after the hold, the kill switch over it.

use elfen_policy::blind::BlindIsolation;
use elfen_shm::KillMode;
use std::time::Duration;

/// What the batch group should be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// These CPUs.
    Cpus(Vec<u32>),
    /// None: frozen.
    Frozen,
}

/// The pure decision: PerfIso's law with shrink-now / grow-after-hold.
#[derive(Debug, Clone)]
pub struct BlindState {
    law: BlindIsolation,
    cpus: Vec<u32>,
    current: Vec<u32>,
    hold_ns: u64,
    grow_since_ns: Option<u64>,
}

impl BlindState {
    /// Starts with batch on all of `cpus` (the CPUs blind isolation may
    /// hand out).
    pub fn new(law: BlindIsolation, cpus: Vec<u32>, grow_hold: Duration) -> BlindState {
        BlindState {
            law,
            current: cpus.clone(),
            cpus,
            hold_ns: grow_hold.as_nanos() as u64,
            grow_since_ns: None,
        }
    }

    /// The CPUs batch has now (empty = frozen).
    pub fn current(&self) -> &[u32] {
        &self.current
    }

    /// When a larger allocation waiting for its hold may be made, ns.
    pub fn grow_deadline_ns(&self) -> Option<u64> {
        self.grow_since_ns.map(|s| s.saturating_add(self.hold_ns))
    }

    /// Takes back a step whose write failed: batch still has `cpus`, so the
    /// next step decides (and writes) again.
    pub fn rollback(&mut self, cpus: Vec<u32>) {
        self.current = cpus;
    }

    /// One step: `kill` is the page's kill switch, `lc_busy(cpu)` says
    /// whether the LC runs on a CPU, `idle` how many of the CPUs run
    /// nothing. Returns the new target when it changes.
    pub fn step(
        &mut self,
        kill: KillMode,
        lc_busy: impl Fn(u32) -> bool,
        idle: u32,
        now_ns: u64,
    ) -> Option<Target> {
        // The kill switch overrides the law: paused, batch gets no CPU
        // (frozen); unmanaged, batch gets every CPU.
        let forced = match kill {
            KillMode::Paused => Some(Vec::new()),
            KillMode::Unmanaged => Some(self.cpus.clone()),
            KillMode::Off => None,
        };
        if let Some(next) = forced {
            self.grow_since_ns = None;
            return self.jump(next);
        }
        let total = self.cpus.len() as u32;
        let s = self.current.len() as u32;
        let available: Vec<u32> = self.cpus.iter().copied().filter(|&c| !lc_busy(c)).collect();
        let want = self
            .law
            .next_allocation(total, s, idle)
            .min(available.len() as u32) as usize;
        let lost = self.current.iter().any(|&c| lc_busy(c));
        let next_len = if lost || want < s as usize {
            self.grow_since_ns = None;
            want.min(s as usize)
        } else if want > s as usize {
            let since = *self.grow_since_ns.get_or_insert(now_ns);
            if now_ns.saturating_sub(since) < self.hold_ns {
                return None;
            }
            self.grow_since_ns = None;
            want
        } else {
            self.grow_since_ns = None;
            return None;
        };
        // keep what batch has (and may keep), then add in CPU order
        let mut next: Vec<u32> = self
            .current
            .iter()
            .copied()
            .filter(|c| available.contains(c))
            .take(next_len)
            .collect();
        for &c in &available {
            if next.len() >= next_len {
                break;
            }
            if !next.contains(&c) {
                next.push(c);
            }
        }
        next.sort_unstable();
        self.jump(next)
    }

    /// Batch gets `next` (sorted; empty = frozen): the target if that is a
    /// change.
    fn jump(&mut self, next: Vec<u32>) -> Option<Target> {
        if next == self.current {
            return None;
        }
        self.current = next.clone();
        Some(if next.is_empty() {
            Target::Frozen
        } else {
            Target::Cpus(next)
        })
    }
}
