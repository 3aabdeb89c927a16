//! The daemon's Prometheus endpoint: the page's metrics (`elfen_ops`'s
//! collector, read at each scrape) plus the daemon's own, copied at every
//! upkeep tick into a [`Snapshot`] the collector reads.
//!
//! The daemon's own metrics are one table, [`DAEMON_METRICS`]: name, type,
//! labels, help and how each sample is read from the snapshot. The encoder
//! emits exactly that table, and a test checks it, the scrape and the
//! metrics tables of `docs/daemon.md` and `docs/operations.md` against each
//! other (every documented metric present, nothing undocumented).

use elfen_ops::health::{DaemonKnob, GroupState};
use elfen_ops::metrics::{MetricsError, MetricsListener, MetricsServer, page_registry, serve_on};
use elfen_shm::Page;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A guard's counters.
#[derive(Debug, Clone, Default)]
pub struct GuardCounts {
    /// Its batch lane.
    pub lane: u32,
    /// The lane's CPU.
    pub cpu: u32,
    /// Occupations.
    pub occupations: u64,
    /// Time held, ns.
    pub occupied_ns: u64,
}

/// A batch group's failed writes of one knob.
#[derive(Debug, Clone)]
pub struct KnobCount {
    /// The group's name.
    pub group: String,
    /// The knob.
    pub knob: DaemonKnob,
    /// Failed writes.
    pub failures: u64,
}

/// A batch group's protection, as exported.
#[derive(Debug, Clone)]
pub struct ModeState {
    /// The group's name.
    pub group: String,
    /// The modes it may run.
    pub rungs: Vec<crate::config::Mode>,
    /// The one applied now.
    pub active: crate::config::Mode,
    /// Switches so far.
    pub switches: u64,
    /// The last verdict: which mode, and whether it fits.
    pub fits: Option<(crate::config::Mode, crate::protection::fit::FitState)>,
    /// `auto`: the last contention (co-run / solo − 1).
    pub contention: Option<f64>,
    /// The sched_ext scheduler it runs (mode scx).
    pub scheduler: Option<crate::protection::SchedulerView>,
}

/// The daemon's CPU so far, split three ways, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DaemonCpu {
    /// Its own work: its threads' CPU less the two below.
    pub own_ns: u64,
    /// Spinning on a batch lane while the LC was busy: the protection.
    pub occupied_ns: u64,
    /// Spinning through the LC's idle gaps: lane time batch did not get.
    pub held_ns: u64,
}

/// What the daemon exports besides the page; updated at every tick.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Per guard.
    pub guards: Vec<GuardCounts>,
    /// Writer: transition events.
    pub writer_events: u64,
    /// Writer: lanes reconciled from the slots.
    pub writer_reconciled: u64,
    /// Writer: off the busy edges now (the kernel counts).
    pub writer_off_edges: bool,
    /// LC restarts found.
    pub lc_restarts: u64,
    /// Same-named processes of another user not adopted as the LC.
    pub lc_ignored: u64,
    /// Processes an LC process started, followed as the service.
    pub lc_followed: u64,
    /// Whether the LC goes unseen on its request lanes now.
    pub lc_unseen: bool,
    /// Values the start repaired.
    pub repaired: u64,
    /// Blind isolation's cpuset writes.
    pub cpuset_changes: u64,
    /// Failed knob writes per group and knob (the knobs a group writes
    /// while the daemon runs, at 0 before any failure).
    pub knob_failures: Vec<KnobCount>,
    /// Each batch group's state.
    pub groups: Vec<(String, GroupState)>,
    /// Each batch group's protection.
    pub modes: Vec<ModeState>,
    /// The daemon's CPU, split.
    pub cpu: DaemonCpu,
    /// The guards' hold, ns.
    pub hold_ns: u64,
    /// LC busy periods the writer saw.
    pub busy_periods: u64,
    /// Their lengths.
    pub busy: crate::protection::profile::HistSnapshot,
    /// Memory, I/O and egress isolation.
    pub isolation: crate::isolation::IsolationCounts,
    /// Seconds since the daemon started (set at each scrape).
    pub up_s: f64,
}

/// A metric's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (its name ends in `_total`).
    Counter,
    /// A value now.
    Gauge,
}

impl Kind {
    /// The word in docs and in the exposition's `# TYPE` line.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A count.
    Int(u64),
    /// A time or a fraction.
    Float(f64),
}

/// One sample: label values (in the descriptor's `labels` order), value.
pub type Sample = (Vec<String>, Value);

/// One of the daemon's own metrics.
#[derive(Debug, Clone, Copy)]
pub struct MetricDesc {
    /// The name as scraped (`_total` ends counters, `_seconds` times).
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Its label names.
    pub labels: &'static [&'static str],
    /// The help line (and the docs' description).
    pub help: &'static str,
    /// Its samples now.
    pub samples: fn(&Snapshot) -> Vec<Sample>,
}

fn one(v: Value) -> Vec<Sample> {
    vec![(Vec::new(), v)]
}

fn per_guard(s: &Snapshot, v: fn(&GuardCounts) -> Value) -> Vec<Sample> {
    s.guards
        .iter()
        .map(|g| (vec![g.lane.to_string(), g.cpu.to_string()], v(g)))
        .collect()
}

fn per_scheduler(s: &Snapshot, v: fn(&crate::protection::SchedulerView) -> u64) -> Vec<Sample> {
    s.modes
        .iter()
        .filter_map(|m| Some((vec![m.group.clone()], Value::Int(v(m.scheduler.as_ref()?)))))
        .collect()
}

fn per_group_state(s: &Snapshot, state: GroupState) -> Vec<Sample> {
    s.groups
        .iter()
        .map(|(g, st)| (vec![g.clone()], Value::Int(u64::from(*st == state))))
        .collect()
}

/// The daemon's own metrics (see the module docs).
pub const DAEMON_METRICS: &[MetricDesc] = &[
    MetricDesc {
        name: "elfen_guard_occupations_total",
        kind: Kind::Counter,
        labels: &["lane", "cpu"],
        help: "Times a guard occupied its batch lane",
        samples: |s| per_guard(s, |g| Value::Int(g.occupations)),
    },
    MetricDesc {
        name: "elfen_guard_occupied_seconds_total",
        kind: Kind::Counter,
        labels: &["lane", "cpu"],
        help: "Time a guard held its batch lane",
        samples: |s| per_guard(s, |g| Value::Float(g.occupied_ns as f64 / 1e9)),
    },
    MetricDesc {
        name: "elfen_writer_events_total",
        kind: Kind::Counter,
        labels: &[],
        help: "LC busy/idle transitions the writer received",
        samples: |s| one(Value::Int(s.writer_events)),
    },
    MetricDesc {
        name: "elfen_writer_off_edges",
        kind: Kind::Gauge,
        labels: &[],
        help: "1 while the writer takes no wake-up per LC busy edge (no guard, freezer or \
               blind isolation woken by it is applied: the kernel counts the busy periods, \
               read on the writer's tick), else 0",
        samples: |s| one(Value::Int(u64::from(s.writer_off_edges))),
    },
    MetricDesc {
        name: "elfen_writer_reconciled_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Lanes set from the slots because no event said so",
        samples: |s| one(Value::Int(s.writer_reconciled)),
    },
    MetricDesc {
        name: "elfen_lc_restarts_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Times the LC service was found again under new pids",
        samples: |s| one(Value::Int(s.lc_restarts)),
    },
    MetricDesc {
        name: "elfen_lc_ignored_processes_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Processes named like the LC service but of another user, not adopted",
        samples: |s| one(Value::Int(s.lc_ignored)),
    },
    MetricDesc {
        name: "elfen_lc_followed_processes_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Processes an LC process started (children and theirs, whatever their user), \
               followed as part of the LC service",
        samples: |s| one(Value::Int(s.lc_followed)),
    },
    MetricDesc {
        name: "elfen_lc_unseen",
        kind: Kind::Gauge,
        labels: &[],
        help: "1 while the LC service uses CPU as batch work runs but no LC busy period is \
               seen on its request lanes (nothing steps aside for it), else 0",
        samples: |s| one(Value::Int(u64::from(s.lc_unseen))),
    },
    MetricDesc {
        name: "elfen_batch_kills_total",
        kind: Kind::Counter,
        labels: &["group"],
        help: "Times the memory watermark killed the batch group",
        samples: |s| {
            s.isolation
                .kills
                .iter()
                .map(|(g, n, _)| (vec![g.clone()], Value::Int(*n)))
                .collect()
        },
    },
    MetricDesc {
        name: "elfen_batch_killed_processes_total",
        kind: Kind::Counter,
        labels: &["group"],
        help: "Processes the memory watermark's kills ended",
        samples: |s| {
            s.isolation
                .kills
                .iter()
                .map(|(g, _, n)| (vec![g.clone()], Value::Int(*n)))
                .collect()
        },
    },
    MetricDesc {
        name: "elfen_memory_available_bytes",
        kind: Kind::Gauge,
        labels: &[],
        help: "MemAvailable at the memory watermark's last read (absent when not watched)",
        samples: |s| {
            s.isolation
                .available_bytes
                .map_or(Vec::new(), |a| one(Value::Int(a)))
        },
    },
    MetricDesc {
        name: "elfen_memory_pressure_events_total",
        kind: Kind::Counter,
        labels: &[],
        help: "PSI memory-pressure triggers that fired",
        samples: |s| one(Value::Int(s.isolation.pressure_events)),
    },
    MetricDesc {
        name: "elfen_io_budget_changes_total",
        kind: Kind::Counter,
        labels: &[],
        help: "io.max writes of the batch I/O budget",
        samples: |s| one(Value::Int(s.isolation.io_budget_changes)),
    },
    MetricDesc {
        name: "elfen_egress_packets_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Batch packets sent at low priority (absent when no group asks for it)",
        samples: |s| {
            s.isolation
                .egress_packets
                .map_or(Vec::new(), |p| one(Value::Int(p)))
        },
    },
    MetricDesc {
        name: "elfen_scx_running",
        kind: Kind::Gauge,
        labels: &["group"],
        help: "1 while the kernel runs the group's sched_ext scheduler, 0 once it unloaded it \
               (absent in other modes)",
        samples: |s| per_scheduler(s, |v| u64::from(v.running)),
    },
    MetricDesc {
        name: "elfen_scx_lc_switch_ins_total",
        kind: Kind::Counter,
        labels: &["group"],
        help: "LC tasks the sched_ext scheduler saw start on a CPU that ran none",
        samples: |s| per_scheduler(s, |v| v.lc_in),
    },
    MetricDesc {
        name: "elfen_scx_sibling_kicks_total",
        kind: Kind::Counter,
        labels: &["group"],
        help: "Batch kicked off the SMT sibling of a CPU where an LC task started",
        samples: |s| per_scheduler(s, |v| v.kick_preempt),
    },
    MetricDesc {
        name: "elfen_scx_ran_held_total",
        kind: Kind::Counter,
        labels: &["group"],
        help: "Batch tasks that started beside a running LC task (kicked off at once)",
        samples: |s| per_scheduler(s, |v| v.ran_held),
    },
    MetricDesc {
        name: "elfen_cpuset_changes_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Blind isolation's writes of a batch group's cpuset",
        samples: |s| one(Value::Int(s.cpuset_changes)),
    },
    MetricDesc {
        name: "elfen_knob_failures_total",
        kind: Kind::Counter,
        labels: &["group", "knob"],
        help: "Knob writes on a batch group that failed (after retries of transient errors); \
               knob: freeze, thaw, cpuset, cpu_idle, sched_idle, move",
        samples: |s| {
            s.knob_failures
                .iter()
                .map(|k| {
                    (
                        vec![k.group.clone(), k.knob.name().to_string()],
                        Value::Int(k.failures),
                    )
                })
                .collect()
        },
    },
    MetricDesc {
        name: "elfen_batch_group_lost",
        kind: Kind::Gauge,
        labels: &["group"],
        help: "1 when the batch group's cgroup was removed under the daemon",
        samples: |s| per_group_state(s, GroupState::Lost),
    },
    MetricDesc {
        name: "elfen_batch_group_degraded",
        kind: Kind::Gauge,
        labels: &["group"],
        help: "1 while the batch group's knob writes fail or it is protected by a fallback",
        samples: |s| per_group_state(s, GroupState::Degraded),
    },
    MetricDesc {
        name: "elfen_protection_active",
        kind: Kind::Gauge,
        labels: &["group", "mode"],
        help: "1 for the mode a batch group runs now, 0 for the other modes it may switch to",
        samples: |s| {
            s.modes
                .iter()
                .flat_map(|m| {
                    m.rungs.iter().map(move |r| {
                        (
                            vec![m.group.clone(), r.name().to_string()],
                            Value::Int(u64::from(*r == m.active)),
                        )
                    })
                })
                .collect()
        },
    },
    MetricDesc {
        name: "elfen_protection_switches_total",
        kind: Kind::Counter,
        labels: &["group"],
        help: "Times a batch group's mode was switched (freeze's fallback, auto)",
        samples: |s| {
            s.modes
                .iter()
                .map(|m| (vec![m.group.clone()], Value::Int(m.switches)))
                .collect()
        },
    },
    MetricDesc {
        name: "elfen_protection_fits",
        kind: Kind::Gauge,
        labels: &["group", "mode"],
        help: "Whether the mode can follow the LC service's busy periods: 1 fits, 0 does not, \
               -1 unknown (too few busy periods seen yet)",
        samples: |s| {
            use crate::protection::fit::FitState;
            s.modes
                .iter()
                .map(|m| {
                    let (mode, st) = m.fits.unwrap_or((m.active, FitState::Unknown));
                    let v = match st {
                        FitState::Fits => 1.0,
                        FitState::Unfit => 0.0,
                        FitState::Unknown => -1.0,
                    };
                    (
                        vec![m.group.clone(), mode.name().to_string()],
                        Value::Float(v),
                    )
                })
                .collect()
        },
    },
    MetricDesc {
        name: "elfen_auto_contention_ratio",
        kind: Kind::Gauge,
        labels: &["group"],
        help: "Mode auto: the LC's mean busy period with batch running over it with batch \
               stepped aside, minus 1, in the last period (NaN until measured, and for the \
               other modes)",
        samples: |s| {
            s.modes
                .iter()
                .map(|m| {
                    (
                        vec![m.group.clone()],
                        Value::Float(m.contention.unwrap_or(f64::NAN)),
                    )
                })
                .collect()
        },
    },
    MetricDesc {
        name: "elfen_daemon_cpu_seconds_total",
        kind: Kind::Counter,
        labels: &["part"],
        help: "The daemon's threads' CPU time; part: own (its work: the writer, wake-ups, \
               control), occupied (spinning on a batch lane while the LC is busy: the \
               protection), held (spinning through the LC's idle gaps: lane time batch did not get)",
        samples: |s| {
            [
                ("own", s.cpu.own_ns),
                ("occupied", s.cpu.occupied_ns),
                ("held", s.cpu.held_ns),
            ]
            .into_iter()
            .map(|(p, ns)| (vec![p.to_string()], Value::Float(ns as f64 / 1e9)))
            .collect()
        },
    },
    MetricDesc {
        name: "elfen_guard_hold_seconds",
        kind: Kind::Gauge,
        labels: &[],
        help: "How long guards (and the writer on its batch lane) stay on the lane through an \
               idle gap of the LC",
        samples: |s| one(Value::Float(s.hold_ns as f64 / 1e9)),
    },
    MetricDesc {
        name: "elfen_lc_busy_periods_total",
        kind: Kind::Counter,
        labels: &[],
        help: "LC busy periods (on its request lanes) the writer saw end",
        samples: |s| one(Value::Int(s.busy_periods)),
    },
    MetricDesc {
        name: "elfen_lc_busy_period_seconds",
        kind: Kind::Gauge,
        labels: &["quantile"],
        help: "The LC's busy periods since the start: quantiles 0.5, 0.9, 0.99",
        samples: |s| {
            [0.5, 0.9, 0.99]
                .into_iter()
                .map(|q| {
                    (
                        vec![q.to_string()],
                        Value::Float(s.busy.quantile_ns(q) as f64 / 1e9),
                    )
                })
                .collect()
        },
    },
    MetricDesc {
        name: "elfen_daemon_repaired_values",
        kind: Kind::Gauge,
        labels: &[],
        help: "Values the start repaired from a killed predecessor",
        samples: |s| one(Value::Int(s.repaired)),
    },
    MetricDesc {
        name: "elfen_daemon_up_seconds",
        kind: Kind::Gauge,
        labels: &[],
        help: "Time since the daemon started",
        samples: |s| one(Value::Float(s.up_s)),
    },
];

impl MetricDesc {
    /// The family name and unit the encoder takes (it appends `_seconds`
    /// and, for counters, `_total` itself).
    fn family(&self) -> (&'static str, Option<Unit>) {
        let n = match self.kind {
            Kind::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            Kind::Gauge => self.name,
        };
        if let Some(base) = n.strip_suffix("_seconds") {
            return (base, Some(Unit::Seconds));
        }
        match n.strip_suffix("_bytes") {
            Some(base) => (base, Some(Unit::Bytes)),
            None => (n, None),
        }
    }

    fn encode(&self, enc: &mut DescriptorEncoder, s: &Snapshot) -> Result<(), std::fmt::Error> {
        let (base, unit) = self.family();
        let kind = match self.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        };
        let samples = (self.samples)(s);
        let mut fam = enc.encode_descriptor(base, self.help, unit.as_ref(), kind)?;
        for (values, v) in samples {
            if self.labels.is_empty() {
                return value(self.kind, v, fam);
            }
            let labels: Vec<(&str, String)> = self.labels.iter().copied().zip(values).collect();
            value(self.kind, v, fam.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

fn value(kind: Kind, v: Value, me: MetricEncoder) -> Result<(), std::fmt::Error> {
    match (kind, v) {
        (Kind::Counter, Value::Int(i)) => ConstCounter::new(i).encode(me),
        (Kind::Counter, Value::Float(f)) => ConstCounter::new(f).encode(me),
        (Kind::Gauge, Value::Int(i)) => ConstGauge::new(i as i64).encode(me),
        (Kind::Gauge, Value::Float(f)) => ConstGauge::new(f).encode(me),
    }
}

/// The collector over a shared [`Snapshot`].
#[derive(Debug)]
struct DaemonCollector {
    snap: Arc<Mutex<Snapshot>>,
    started: Instant,
}

impl Collector for DaemonCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut s = self.snap.lock().unwrap_or_else(|p| p.into_inner()).clone();
        s.up_s = self.started.elapsed().as_secs_f64();
        for m in DAEMON_METRICS {
            m.encode(&mut enc, &s)?;
        }
        Ok(())
    }
}

/// The registry the daemon serves: the page's metrics and its own, read
/// from `snap`.
pub fn registry(page: Arc<Page>, stale_ms: f64, snap: Arc<Mutex<Snapshot>>) -> Registry {
    let mut registry = page_registry(page, stale_ms);
    registry.register_collector(Box::new(DaemonCollector {
        snap,
        started: Instant::now(),
    }));
    registry
}

/// The running endpoint and the snapshot the daemon updates.
#[derive(Debug)]
pub struct DaemonMetrics {
    server: MetricsServer,
    snap: Arc<Mutex<Snapshot>>,
}

impl DaemonMetrics {
    /// Serves the page's and the daemon's metrics on an address bound
    /// before anything was applied.
    pub fn serve(
        bound: MetricsListener,
        page: Arc<Page>,
        stale_ms: f64,
    ) -> Result<DaemonMetrics, MetricsError> {
        let snap = Arc::new(Mutex::new(Snapshot::default()));
        let server = serve_on(bound, registry(page, stale_ms, Arc::clone(&snap)))?;
        Ok(DaemonMetrics { server, snap })
    }

    /// The address scraped.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }

    /// Replaces what the collector reports.
    pub fn update(&self, f: impl FnOnce(&mut Snapshot)) {
        f(&mut self.snap.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_what_the_encoder_emits() {
        for m in DAEMON_METRICS {
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}: counters and only counters end in _total",
                m.name
            );
            let (base, unit) = m.family();
            assert!(!base.ends_with("_total") && !base.ends_with("_seconds"));
            let with_unit = m.name.contains("_seconds") || m.name.ends_with("_bytes");
            assert_eq!(unit.is_some(), with_unit, "{}", m.name);
        }
        let snap = Snapshot {
            guards: vec![GuardCounts {
                lane: 1,
                cpu: 1,
                occupations: 2,
                occupied_ns: 1_500_000_000,
            }],
            knob_failures: vec![KnobCount {
                group: "frz".into(),
                knob: DaemonKnob::Freeze,
                failures: 3,
            }],
            groups: vec![("frz".into(), GroupState::Lost)],
            cpuset_changes: 7,
            ..Snapshot::default()
        };
        let mut r = Registry::default();
        r.register_collector(Box::new(DaemonCollector {
            snap: Arc::new(Mutex::new(snap)),
            started: Instant::now(),
        }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for want in [
            "elfen_guard_occupied_seconds_total{lane=\"1\",cpu=\"1\"} 1.5",
            "elfen_knob_failures_total{group=\"frz\",knob=\"freeze\"} 3",
            "elfen_batch_group_lost{group=\"frz\"} 1",
            "elfen_batch_group_degraded{group=\"frz\"} 0",
            "elfen_cpuset_changes_total 7",
            "elfen_daemon_up_seconds ",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
    }
}
