//! The record turned into intervals: what ran on each CPU, and each
//! thread's on-CPU, runnable and blocked periods, with the wake-up that
//! ended each blocked one. Lookups by time are binary searches.

use crate::record::{Event, Fault, RUNNABLE, TraceRecord, Wakeup};
use std::collections::HashMap;

/// A half-open interval `[start, end)`, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Iv {
    /// Start.
    pub start: u64,
    /// End.
    pub end: u64,
}

impl Iv {
    /// Length of the part of `self` inside `[a, b)`.
    pub fn overlap(&self, a: u64, b: u64) -> u64 {
        self.end.min(b).saturating_sub(self.start.max(a))
    }
}

/// The CPU of a runnable period not known (yet): a woken thread is
/// runnable from its wake-up until it is switched in, on a CPU known then.
const UNKNOWN_CPU: u32 = u32::MAX;

/// A thread's state over an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Running on this CPU.
    OnCpu(u32),
    /// Runnable, waiting for a CPU (it was preempted on this one).
    Runnable(u32),
    /// Asleep (the kernel's state bits at the switch-out).
    Blocked(u32),
}

/// One period of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// When.
    pub iv: Iv,
    /// In which state.
    pub state: State,
    /// The thread switched in when this one left the CPU (for an off-CPU
    /// period).
    pub successor: u32,
}

/// What ran on one CPU: `(start, tid)`, each until the next start.
#[derive(Debug, Clone, Default)]
pub struct CpuRuns {
    starts: Vec<(u64, u32)>,
}

impl CpuRuns {
    /// Time each thread ran on this CPU inside `[a, b)`, ns.
    pub fn who_ran(&self, a: u64, b: u64) -> Vec<(u32, u64)> {
        let mut out: HashMap<u32, u64> = HashMap::new();
        let i = self
            .starts
            .partition_point(|&(t, _)| t <= a)
            .saturating_sub(1);
        for w in i..self.starts.len() {
            let (s, tid) = self.starts[w];
            if s >= b {
                break;
            }
            let e = self.starts.get(w + 1).map_or(b, |x| x.0);
            let ov = Iv { start: s, end: e }.overlap(a, b);
            if ov > 0 {
                *out.entry(tid).or_default() += ov;
            }
        }
        let mut v: Vec<(u32, u64)> = out.into_iter().collect();
        v.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        v
    }

    /// The switches recorded, `(time, tid switched in)`.
    pub fn starts(&self) -> &[(u64, u32)] {
        &self.starts
    }
}

/// The whole record as intervals.
#[derive(Debug, Default)]
pub struct Timeline {
    /// Per CPU (index = CPU): who ran, for the lanes recorded fully.
    pub cpus: Vec<CpuRuns>,
    /// Per thread: its periods in time order (from its first switch on).
    pub threads: HashMap<u32, Vec<Period>>,
    /// Per woken thread: the wake-ups, in time order.
    pub wakeups: HashMap<u32, Vec<Wakeup>>,
    /// Per thread: its page faults, in time order.
    pub faults: HashMap<u32, Vec<Fault>>,
}

impl Timeline {
    /// Builds the intervals of `rec`.
    pub fn build(rec: &TraceRecord) -> Timeline {
        let ncpu = rec.cpus as usize;
        let mut cpus = vec![CpuRuns::default(); ncpu];
        let mut threads: HashMap<u32, Vec<Period>> = HashMap::new();
        // the open period of each thread: (since, state)
        let mut open: HashMap<u32, (u64, State, u32)> = HashMap::new();
        let mut wakeups: HashMap<u32, Vec<Wakeup>> = HashMap::new();
        let mut faults: HashMap<u32, Vec<Fault>> = HashMap::new();
        // closes `tid`'s open period at `at` (a runnable period whose CPU is
        // not known yet gets `cpu`, where it is switched in) and opens `next`
        let mut close = |tid: u32,
                         at: u64,
                         cpu: u32,
                         next: (State, u32),
                         open: &mut HashMap<u32, (u64, State, u32)>| {
            if tid == 0 {
                return;
            }
            if let Some((since, st, succ)) = open.insert(tid, (at, next.0, next.1)) {
                let st = match st {
                    State::Runnable(UNKNOWN_CPU) => State::Runnable(cpu),
                    x => x,
                };
                if at > since {
                    threads.entry(tid).or_default().push(Period {
                        iv: Iv {
                            start: since,
                            end: at,
                        },
                        state: st,
                        successor: succ,
                    });
                }
            }
        };
        for e in &rec.events {
            match e {
                Event::Switch(s) => {
                    if let Some(c) = cpus.get_mut(s.cpu as usize) {
                        if rec.lanes.contains(&s.cpu) {
                            c.starts.push((s.t, s.next));
                        }
                    }
                    let off = if s.prev_state == RUNNABLE {
                        State::Runnable(s.cpu)
                    } else {
                        State::Blocked(s.prev_state)
                    };
                    close(s.prev, s.t, s.cpu, (off, s.next), &mut open);
                    close(s.next, s.t, s.cpu, (State::OnCpu(s.cpu), 0), &mut open);
                }
                Event::Wakeup(w) => {
                    // asleep until the wake-up, then runnable until it runs
                    if let Some(&(_, State::Blocked(_), succ)) = open.get(&w.wakee) {
                        let next = (State::Runnable(UNKNOWN_CPU), succ);
                        close(w.wakee, w.t, UNKNOWN_CPU, next, &mut open);
                    }
                    wakeups.entry(w.wakee).or_default().push(w.clone());
                }
                Event::Fault(f) => faults.entry(f.tid).or_default().push(*f),
                Event::Tcp(_) | Event::Exit(_) => {}
            }
        }
        for (tid, (since, st, succ)) in open {
            if rec.end_ns > since {
                threads.entry(tid).or_default().push(Period {
                    iv: Iv {
                        start: since,
                        end: rec.end_ns,
                    },
                    state: st,
                    successor: succ,
                });
            }
        }
        for f in faults.values_mut() {
            f.sort_by_key(|x| x.t);
        }
        Timeline {
            cpus,
            threads,
            wakeups,
            faults,
        }
    }

    /// The periods of `tid` that overlap `[a, b)`.
    pub fn periods(&self, tid: u32, a: u64, b: u64) -> &[Period] {
        let Some(v) = self.threads.get(&tid) else {
            return &[];
        };
        let i = v.partition_point(|p| p.iv.end <= a);
        let j = v.partition_point(|p| p.iv.start < b);
        &v[i..j.max(i)]
    }

    /// On-CPU time of `tid` inside `[a, b)`.
    pub fn on_cpu(&self, tid: u32, a: u64, b: u64) -> u64 {
        self.periods(tid, a, b)
            .iter()
            .filter(|p| matches!(p.state, State::OnCpu(_)))
            .map(|p| p.iv.overlap(a, b))
            .sum()
    }

    /// The last wake-up of `tid` at or before `t`.
    pub fn wakeup_before(&self, tid: u32, t: u64) -> Option<&Wakeup> {
        let v = self.wakeups.get(&tid)?;
        let i = v.partition_point(|w| w.t <= t);
        i.checked_sub(1).map(|k| &v[k])
    }

    /// The faults of `tid` that overlap `[a, b)`.
    pub fn faults_in(&self, tid: u32, a: u64, b: u64) -> impl Iterator<Item = &Fault> {
        let v = self.faults.get(&tid).map_or(&[][..], |v| v.as_slice());
        let i = v.partition_point(|f| f.t + f.dur_ns <= a);
        v[i..].iter().take_while(move |f| f.t < b)
    }
}

/// Merges intervals closer than `gap` into one (input in any order).
pub fn merge(mut v: Vec<Iv>, gap: u64) -> Vec<Iv> {
    v.sort();
    let mut out: Vec<Iv> = Vec::with_capacity(v.len());
    for iv in v {
        match out.last_mut() {
            Some(last) if iv.start <= last.end + gap => last.end = last.end.max(iv.end),
            _ => out.push(iv),
        }
    }
    out
}

/// Total overlap of sorted, disjoint intervals `v` with `[a, b)`.
pub fn overlap_sum(v: &[Iv], a: u64, b: u64) -> u64 {
    let i = v.partition_point(|x| x.end <= a);
    v[i..]
        .iter()
        .take_while(|x| x.start < b)
        .map(|x| x.overlap(a, b))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_and_overlap() {
        let v = merge(
            vec![
                Iv { start: 10, end: 20 },
                Iv { start: 0, end: 5 },
                Iv { start: 22, end: 30 },
            ],
            3,
        );
        assert_eq!(v, vec![Iv { start: 0, end: 5 }, Iv { start: 10, end: 30 }]);
        assert_eq!(overlap_sum(&v, 3, 12), 2 + 2);
        assert_eq!(overlap_sum(&v, 40, 50), 0);
    }
}
