//! The blind-isolation thread's loop: it reads the slots, steps the
//! [`BlindState`] and writes the group's cpuset or freezer.

use super::{BlindOptions, BlindReport, BlindState, BlindWaking, Target, idle_cpus, lc_on};
use crate::guard::{LatencySummary, latency_histogram};
use crate::health::{GroupReporter, retry};
use elfen_bpf::SlotReader;
use elfen_cgroup::{Executor, Group, Knob};
use elfen_ops::health::DaemonKnob;
use elfen_policy::blind::BlindIsolation;
use elfen_shm::Page;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the blind-isolation thread writes, and where failures are told.
pub(super) struct Io<'a> {
    pub(super) group: &'a Group,
    pub(super) executor: &'a Mutex<Executor>,
    pub(super) reporter: Option<&'a GroupReporter>,
}

impl Io<'_> {
    /// One write of `knob`, retried while transient; counted when it fails.
    pub(super) fn write(&self, knob: DaemonKnob, value: Knob, rep: &mut BlindReport) -> bool {
        let mut ex = self.executor.lock().unwrap_or_else(|p| p.into_inner());
        match retry(|| ex.set(self.group, value.clone())) {
            Ok(_) => {
                if let Some(r) = self.reporter {
                    r.succeeded(knob);
                }
                true
            }
            Err(e) => {
                rep.failed_writes += 1;
                if let Some(r) = self.reporter {
                    r.failed(knob, &e);
                }
                if rep.errors.len() < 5 {
                    rep.errors.push(format!("{}: {e}", knob.name()));
                }
                false
            }
        }
    }
}

pub(super) fn run(
    page: &Page,
    slots: &SlotReader,
    cpus: Vec<u32>,
    io: Io<'_>,
    opts: &BlindOptions,
    stop: &AtomicBool,
    changes: &AtomicU64,
) -> BlindReport {
    let law = BlindIsolation {
        buffer_cores: opts.buffer_cores,
    };
    let mut st = BlindState::new(law, cpus.clone(), opts.grow_hold);
    let mut rep = BlindReport {
        group: io.group.path().as_str().to_string(),
        ..BlindReport::default()
    };
    let bell = match &opts.waking {
        BlindWaking::Events(b) => Some(Arc::clone(b)),
        BlindWaking::Poll => None,
    };
    let mut hist = latency_histogram();
    // CPUs taken away on an announcement, before the LC ran there: when
    // (the write's return), timed once the switch-in shows
    let mut pending: Vec<(u32, u64)> = Vec::new();
    let mut frozen = false;
    let mut woken = false;
    let mut duty = crate::rt::DutyBound::new(opts.priority, &opts.bound);
    while !stop.load(Relaxed) {
        duty.step(elfen_shm::clock::monotonic_ns());
        if woken {
            rep.woken += 1;
        } else {
            rep.polled += 1;
        }
        let now = elfen_shm::clock::monotonic_ns();
        let snaps: Vec<_> = cpus.iter().map(|&c| slots.snapshot(c).ok()).collect();
        let edge = |c: u32| bell.as_ref().map_or(0, |b| b.busy_edge_on(c));
        let busy_now: Vec<bool> = cpus
            .iter()
            .zip(&snaps)
            .map(|(&c, s)| lc_on(s.as_ref(), edge(c), now))
            .collect();
        let busy = |c: u32| {
            cpus.iter()
                .position(|&x| x == c)
                .is_some_and(|i| busy_now[i])
        };
        // the switch-ins of CPUs taken before the LC ran there
        pending.retain(|&(c, done)| {
            let Some(s) = cpus
                .iter()
                .position(|&x| x == c)
                .and_then(|i| snaps[i].as_ref())
            else {
                return false;
            };
            if s.lc() {
                let _ = hist.record(done.saturating_sub(s.lc_since_ns).max(1));
                return false;
            }
            now.saturating_sub(done) < elfen_bpf::contract::ANNOUNCE_NS
        });
        let idle = idle_cpus(&cpus, &snaps, st.current(), &opts.own.tids());
        let before = st.current().to_vec();
        if let Some(t) = st.step(page.kill_mode(), busy, idle, now) {
            let ok = match &t {
                Target::Frozen => {
                    rep.freezes += 1;
                    let ok = io.write(DaemonKnob::Freeze, Knob::Frozen(true), &mut rep);
                    frozen |= ok;
                    ok
                }
                Target::Cpus(c) => {
                    let set = io.write(DaemonKnob::Cpuset, Knob::CpusetCpus(c.clone()), &mut rep);
                    if set && frozen {
                        frozen = !io.write(DaemonKnob::Thaw, Knob::Frozen(false), &mut rep);
                        !frozen
                    } else {
                        set
                    }
                }
            };
            let done = elfen_shm::clock::monotonic_ns();
            if ok {
                changes.fetch_add(1, Relaxed);
                rep.cpuset_changes += 1;
                let after = st.current();
                rep.shrinks += u64::from(after.len() < before.len());
                // reaction: an LC CPU batch had is taken away
                for (i, &c) in cpus.iter().enumerate() {
                    if !(before.contains(&c) && !after.contains(&c) && busy_now[i]) {
                        continue;
                    }
                    match snaps[i].as_ref() {
                        Some(s) if s.lc() => {
                            let _ = hist.record(done.saturating_sub(s.lc_since_ns).max(1));
                        }
                        // announced: the switch-in is still to come
                        _ => pending.push((c, done)),
                    }
                }
            } else {
                // the group still has what it had: decide again next time
                st.rollback(before.clone());
            }
        }
        woken = match &bell {
            Some(b) => {
                let now = elfen_shm::clock::monotonic_ns();
                let until_grow = st
                    .grow_deadline_ns()
                    .map(|d| Duration::from_nanos(d.saturating_sub(now).max(1)));
                let wait = until_grow.map_or(opts.poll, |g| g.min(opts.poll));
                // a grow deadline just past never makes the thread spin
                b.wait(wait.max(Duration::from_micros(20)))
            }
            None => {
                std::thread::sleep(opts.poll);
                false
            }
        };
    }
    // Give batch its CPUs back (and thaw) before it is stopped or killed:
    // a frozen process cannot die until thawed.
    let release = opts.release.clone().unwrap_or(cpus);
    io.write(DaemonKnob::Cpuset, Knob::CpusetCpus(release), &mut rep);
    if frozen {
        io.write(DaemonKnob::Thaw, Knob::Frozen(false), &mut rep);
    }
    rep.reaction = LatencySummary::of(&hist);
    rep.rt_demotions = duty.demotions;
    rep
}
