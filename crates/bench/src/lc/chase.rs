//! The LC service's work: a **pointer chase** over a working set sized to
//! live in the last-level cache but not in L2, so each step is one
//! dependent load that a memory-streaming co-runner on another lane slows
//! (on a machine without SMT, co-runners meet only in L3 and memory).
//!
//! A request of demand `d` µs walks `d × steps_per_us` steps, where
//! `steps_per_us` is calibrated at start-up with nothing else running. So a
//! request's *work* is fixed, and interference shows up as a longer
//! service time.

use std::hint::black_box;
use std::time::Instant;

/// u32 slots per node: one node per 64-byte cache line.
const NODE_WORDS: usize = 16;

/// A random cyclic walk over cache lines.
pub struct Chase {
    words: Vec<u32>,
    pos: u32,
}

impl std::fmt::Debug for Chase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chase")
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Chase {
    /// A chase over `bytes` (rounded down to whole 64-byte lines, at least
    /// 2): one random cycle through every line (Sattolo's algorithm), so the
    /// walk touches the whole working set and no prefetcher can guess it.
    pub fn new(bytes: usize, seed: u64) -> Chase {
        let nodes = (bytes / (NODE_WORDS * 4)).max(2);
        let mut perm: Vec<u32> = (0..nodes as u32).collect();
        // xorshift: no need for a crypto RNG, and no allocation per draw
        let mut x = seed | 1;
        let mut next_rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in (1..nodes).rev() {
            let j = (next_rand() % i as u64) as usize; // j < i: a single cycle
            perm.swap(i, j);
        }
        let mut words = vec![0u32; nodes * NODE_WORDS];
        // perm as a cycle: node perm[k] -> perm[k+1]
        for k in 0..nodes {
            let from = perm[k] as usize;
            let to = perm[(k + 1) % nodes];
            words[from * NODE_WORDS] = to;
        }
        Chase { words, pos: 0 }
    }

    /// The working set in bytes.
    pub fn bytes(&self) -> usize {
        self.words.len() * 4
    }

    /// Walks `steps` steps.
    #[inline(never)]
    pub fn run(&mut self, steps: u64) {
        let w = &self.words;
        let mut p = self.pos as usize;
        for _ in 0..steps {
            // SAFETY-free: indices come from the permutation, always < nodes.
            p = w[p * NODE_WORDS] as usize;
        }
        self.pos = black_box(p as u32);
    }

    /// Steps per µs measured over about `ms` milliseconds: the median of
    /// five windows, after one full warm-up walk of the working set.
    pub fn calibrate(&mut self, ms: u64) -> f64 {
        self.run((self.words.len() / NODE_WORDS) as u64);
        let window_ns = (ms.max(5) * 1_000_000 / 5) as u128;
        let mut rates = Vec::with_capacity(5);
        for _ in 0..5 {
            let t0 = Instant::now();
            let mut steps = 0u64;
            while t0.elapsed().as_nanos() < window_ns {
                self.run(4096);
                steps += 4096;
            }
            let us = t0.elapsed().as_nanos() as f64 / 1e3;
            rates.push(steps as f64 / us);
        }
        rates.sort_by(f64::total_cmp);
        rates[2]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_is_one_cycle_through_every_line() {
        let mut c = Chase::new(64 * 1000, 42);
        let nodes = 1000;
        let mut seen = vec![false; nodes];
        let mut p = 0usize;
        for _ in 0..nodes {
            assert!(!seen[p], "node {p} visited twice before the cycle closed");
            seen[p] = true;
            p = c.words[p * NODE_WORDS] as usize;
        }
        assert_eq!(p, 0, "back at the start after exactly `nodes` steps");
        c.run(nodes as u64);
        assert_eq!(c.pos, 0);
        assert!(c.calibrate(5) > 0.0);
    }
}
