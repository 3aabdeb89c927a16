//! What the proxy did, as a typed record ([`Summary`]: the `--json` file
//! and the bench's per-invocation record) and as one status line.

use crate::detect::Signal;
use crate::engine::{Engine, Health};
use crate::jvm::{JvmWatches, WatchState};
use elfen_shm::clock::monotonic_ns as mono_ns;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A count per pause [`Signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalCounts {
    /// [`Signal::Stopped`].
    pub stopped: u64,
    /// [`Signal::JvmPause`].
    pub jvm_pause: u64,
    /// [`Signal::OffCpu`].
    pub off_cpu: u64,
    /// [`Signal::BusyTooLong`].
    pub busy_too_long: u64,
    /// [`Signal::NoProgress`].
    pub no_progress: u64,
    /// [`Signal::Timeout`].
    pub timeout: u64,
    /// [`Signal::LinkLost`].
    pub link_lost: u64,
}

impl SignalCounts {
    /// The counters, indexed by [`Signal::index`], read now.
    pub fn of(c: &[AtomicU64; Signal::ALL.len()]) -> SignalCounts {
        let n = |s: Signal| c[s.index()].load(Relaxed);
        SignalCounts {
            stopped: n(Signal::Stopped),
            jvm_pause: n(Signal::JvmPause),
            off_cpu: n(Signal::OffCpu),
            busy_too_long: n(Signal::BusyTooLong),
            no_progress: n(Signal::NoProgress),
            timeout: n(Signal::Timeout),
            link_lost: n(Signal::LinkLost),
        }
    }

    /// The count of `s`.
    pub fn get(&self, s: Signal) -> u64 {
        match s {
            Signal::Stopped => self.stopped,
            Signal::JvmPause => self.jvm_pause,
            Signal::OffCpu => self.off_cpu,
            Signal::BusyTooLong => self.busy_too_long,
            Signal::NoProgress => self.no_progress,
            Signal::Timeout => self.timeout,
            Signal::LinkLost => self.link_lost,
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        Signal::ALL.iter().map(|&s| self.get(s)).sum()
    }
}

/// Requests re-sent to the other replica, by why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HedgeCounts {
    /// After a pause (by its signal) or a lost connection.
    pub signal: SignalCounts,
    /// After the timeout hedge's percentile.
    pub timeout_pct: u64,
}

/// One replica's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaSummary {
    /// `A` or `B`.
    pub name: String,
    /// Its address.
    pub addr: String,
    /// Its process, where the proxy started it.
    pub pid: Option<u32>,
    /// Its request lane's CPU, where known.
    pub cpu: Option<u32>,
    /// Its lane in the signal page, where it publishes on one.
    pub lane: Option<u32>,
    /// `active` or `backup`.
    pub role: String,
    /// `up`, `warming`, `paused (<signal>)`, `down`, `starting`.
    pub state: String,
    /// Requests sent to it (first tries, hedges, warm-ups).
    pub sent: u64,
    /// Requests it answered first.
    pub first_answers: u64,
    /// Answers it gave after the other replica's (work done twice).
    pub late_answers: u64,
    /// Service time of those, ms.
    pub late_service_ms: f64,
    /// Warm-up requests it was sent.
    pub warmups: u64,
    /// Answers with an error status of its own.
    pub error_answers: u64,
    /// Connections to it lost.
    pub links_lost: u64,
    /// Connection attempts to it that failed.
    pub connect_failures: u64,
    /// Pauses detected, by signal.
    pub pauses: SignalCounts,
    /// Whether its JVM is watched by BPF for the `jvm_pause` signal
    /// (`on`, `disabled`, `no_process`, `opening`, `not_jvm`, `no_bpf`).
    pub jvm_watch: WatchState,
    /// The process watched, or why it is not.
    pub jvm_watch_detail: String,
    /// Stop-the-world pauses of its JVM the watch saw (whether or not they
    /// reached the bound).
    pub jvm_pauses: u64,
    /// Their total length, ms.
    pub jvm_pause_ms: f64,
    /// The longest, ms.
    pub jvm_pause_longest_ms: f64,
    /// Restarts.
    pub restarts: u64,
    /// Restarts that failed.
    pub restart_failures: u64,
}

/// What the proxy did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Where clients connect.
    pub listen: String,
    /// `wire` or `http`.
    pub protocol: String,
    /// `signal`, `timeout` or `none`.
    pub hedge: String,
    /// Seconds it ran.
    pub duration_s: f64,
    /// Client connections.
    pub clients: u64,
    /// Client work requests.
    pub requests: u64,
    /// Of those, answered (by a replica, or with the proxy's failure).
    pub answered: u64,
    /// Answered with the proxy's failure (no replica could answer).
    pub failed: u64,
    /// Requests re-sent to the other replica, by why.
    pub hedges: HedgeCounts,
    /// All of those.
    pub hedges_total: u64,
    /// `hedges_total / requests`.
    pub hedge_rate: f64,
    /// Hedged requests the other replica answered first.
    pub hedge_wins: u64,
    /// Role swaps.
    pub swaps: u64,
    /// Requests served by both replicas (late answers, dropped).
    pub duplicate_work: u64,
    /// Service time spent on those twice-served requests, ms (the backup's
    /// extra work; wire protocol).
    pub duplicate_work_ms: f64,
    /// Warm-up requests sent.
    pub warmups: u64,
    /// Malformed client requests (answered with an error, that client only).
    pub malformed: u64,
    /// Answers for requests the proxy did not know.
    pub stray_answers: u64,
    /// Requests in flight when the record was taken.
    pub in_flight: u64,
    /// The pause bound for a request of unknown demand now, ms (signal
    /// mode).
    pub pause_bound_ms: f64,
    /// The timeout of the timeout hedge now, ms (timeout mode).
    pub hedge_timeout_ms: f64,
    /// The two replicas.
    pub replicas: Vec<ReplicaSummary>,
}

/// Where a replica runs, for the record.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Its process.
    pub pid: Option<u32>,
    /// Its request lane's CPU.
    pub cpu: Option<u32>,
    /// Its lane in the page.
    pub lane: Option<u32>,
}

/// A replica's state in words.
pub fn state_word(e: &Engine, r: usize) -> String {
    match e.health(r) {
        Health::Starting => "starting".into(),
        Health::Up if e.warm_left(r) > 0 => "warming".into(),
        Health::Up => "up".into(),
        Health::Paused { signal, since_ns } => format!(
            "paused ({}, {:.1} s)",
            signal.name(),
            mono_ns().saturating_sub(since_ns) as f64 / 1e9
        ),
        Health::Down { since_ns } => format!(
            "down ({:.1} s)",
            mono_ns().saturating_sub(since_ns) as f64 / 1e9
        ),
    }
}

impl Summary {
    /// The record of `e` now.
    pub fn of(
        e: &Engine,
        jvm: &JvmWatches,
        listen: &str,
        protocol: &str,
        duration_s: f64,
        places: &[Placement; 2],
    ) -> Summary {
        let c = &e.counters;
        let hedges = HedgeCounts {
            signal: SignalCounts::of(&c.hedges_signal),
            timeout_pct: c.hedges_timeout.load(Relaxed),
        };
        let requests = c.requests.load(Relaxed);
        let hedges_total = c.hedges();
        let replicas: Vec<ReplicaSummary> = (0..2)
            .map(|r| {
                let rep = &e.replicas[r];
                let rc = &rep.counters;
                let (jvm_watch, jvm_watch_detail) = jvm.state(r);
                let jc = &jvm.counts[r];
                ReplicaSummary {
                    name: rep.name.into(),
                    addr: rep.link.addr().to_string(),
                    pid: places[r].pid,
                    cpu: places[r].cpu,
                    lane: places[r].lane,
                    role: if e.active() == r { "active" } else { "backup" }.into(),
                    state: state_word(e, r),
                    sent: rc.sent.load(Relaxed),
                    first_answers: rc.first_answers.load(Relaxed),
                    late_answers: rc.late_answers.load(Relaxed),
                    late_service_ms: rc.late_service_ns.load(Relaxed) as f64 / 1e6,
                    warmups: rc.warmups.load(Relaxed),
                    error_answers: rc.error_answers.load(Relaxed),
                    links_lost: rc.links_lost.load(Relaxed),
                    connect_failures: rc.connect_failures.load(Relaxed),
                    pauses: SignalCounts::of(&rc.pauses),
                    jvm_watch,
                    jvm_watch_detail,
                    jvm_pauses: jc.pauses.load(Relaxed),
                    jvm_pause_ms: jc.pause_ns.load(Relaxed) as f64 / 1e6,
                    jvm_pause_longest_ms: jc.longest_ns.load(Relaxed) as f64 / 1e6,
                    restarts: rc.restarts.load(Relaxed),
                    restart_failures: rc.restart_failures.load(Relaxed),
                }
            })
            .collect();
        Summary {
            listen: listen.into(),
            protocol: protocol.into(),
            hedge: e.mode().name().into(),
            duration_s,
            clients: c.clients.load(Relaxed),
            requests,
            answered: c.answered.load(Relaxed),
            failed: c.failed.load(Relaxed),
            hedges,
            hedges_total,
            hedge_rate: if requests > 0 {
                hedges_total as f64 / requests as f64
            } else {
                0.0
            },
            hedge_wins: c.hedge_wins.load(Relaxed),
            swaps: c.swaps.load(Relaxed),
            duplicate_work: replicas.iter().map(|r| r.late_answers).sum(),
            duplicate_work_ms: replicas.iter().map(|r| r.late_service_ms).sum(),
            warmups: replicas.iter().map(|r| r.warmups).sum(),
            malformed: c.malformed.load(Relaxed),
            stray_answers: c.stray_answers.load(Relaxed),
            in_flight: e.in_flight() as u64,
            pause_bound_ms: e.demand().stall_bound_ns() as f64 / 1e6,
            hedge_timeout_ms: e.hedge_timeout_ns() as f64 / 1e6,
            replicas,
        }
    }

    /// One line: roles and states, requests, hedges, swaps, work done
    /// twice, failures, errors per replica; the JVM watch where it is not
    /// switched off.
    pub fn line(&self) -> String {
        let jvm: Vec<String> = self
            .replicas
            .iter()
            .filter(|r| r.jvm_watch != WatchState::Disabled)
            .map(|r| match r.jvm_watch {
                WatchState::On => format!("{} on, {} pauses", r.name, r.jvm_pauses),
                w => format!("{} {}", r.name, w.name()),
            })
            .collect();
        let jvm = if jvm.is_empty() {
            String::new()
        } else {
            format!(" | JVM watch: {}", jvm.join(", "))
        };
        let reps: Vec<String> = self
            .replicas
            .iter()
            .map(|r| format!("{} {} {}", r.name, r.role, r.state))
            .collect();
        let errs: Vec<String> = self
            .replicas
            .iter()
            .map(|r| {
                format!(
                    "{} {} lost/{} refused/{} error answers",
                    r.name, r.links_lost, r.connect_failures, r.error_answers
                )
            })
            .collect();
        format!(
            "{} | {} requests, {} hedged ({:.2} %), {} swap{}, {} served twice, {} failed, {} malformed | {}{}",
            reps.join(", "),
            self.requests,
            self.hedges_total,
            self.hedge_rate * 100.0,
            self.swaps,
            if self.swaps == 1 { "" } else { "s" },
            self.duplicate_work,
            self.failed,
            self.malformed,
            errs.join("; "),
            jvm
        )
    }
}
