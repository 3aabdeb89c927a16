//! The daemon's Prometheus endpoint: the page's metrics (`elfen_ops`'s
//! collector, read at each scrape) plus the daemon's own, copied at every
//! upkeep tick into a snapshot the collector reads:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `elfen_guard_occupations_total{lane,cpu}` | counter | times a guard occupied its batch lane |
//! | `elfen_guard_occupied_seconds_total{lane,cpu}` | counter | time it held the lane |
//! | `elfen_writer_events_total` | counter | LC busy/idle transitions the writer received |
//! | `elfen_writer_reconciled_total` | counter | lanes set from the slots because no event said so |
//! | `elfen_lc_restarts_total` | counter | times the LC service was found again under new pids |
//! | `elfen_cpuset_changes_total` | counter | blind isolation's writes of a batch group's cpuset |
//! | `elfen_daemon_repaired_values` | gauge | values the start repaired from a killed predecessor |
//! | `elfen_daemon_up_seconds` | gauge | time since the daemon started |
//!
//!
//! Memory, I/O and egress isolation add theirs (`crate::isolation`):
//!
//! | metric | type | what |
//! |---|---|---|
//! | `elfen_batch_kills_total{group}` | counter | times the memory watermark killed the group |
//! | `elfen_batch_killed_processes_total{group}` | counter | processes those kills ended |
//! | `elfen_memory_available_bytes` | gauge | `MemAvailable` at the watermark's last read |
//! | `elfen_memory_pressure_events_total` | counter | PSI memory-pressure triggers that fired |
//! | `elfen_io_budget_changes_total` | counter | `io.max` writes of the I/O budget |
//! | `elfen_egress_packets_total` | counter | batch packets sent at low priority |

use elfen_ops::metrics::{MetricsError, MetricsListener, MetricsServer, page_registry, serve_on};
use elfen_shm::Page;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;
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

/// What the daemon exports besides the page; updated at every tick.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Per guard.
    pub guards: Vec<GuardCounts>,
    /// Writer: transition events.
    pub writer_events: u64,
    /// Writer: lanes reconciled from the slots.
    pub writer_reconciled: u64,
    /// LC restarts found.
    pub lc_restarts: u64,
    /// Values the start repaired.
    pub repaired: u64,
    /// Blind isolation's cpuset writes.
    pub cpuset_changes: u64,
    /// Memory, I/O and egress isolation.
    pub isolation: crate::isolation::IsolationCounts,
}

/// The collector over a shared [`Snapshot`].
#[derive(Debug)]
struct DaemonCollector {
    snap: Arc<Mutex<Snapshot>>,
    started: Instant,
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    c.encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

impl Collector for DaemonCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.snap.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let labels =
            |g: &GuardCounts| vec![("lane", g.lane.to_string()), ("cpu", g.cpu.to_string())];
        let mut fam = enc.encode_descriptor(
            "elfen_guard_occupations",
            "Times a guard occupied its batch lane",
            None,
            MetricType::Counter,
        )?;
        for g in &s.guards {
            ConstCounter::new(g.occupations).encode(fam.encode_family(&labels(g))?)?;
        }
        let mut fam = enc.encode_descriptor(
            "elfen_guard_occupied",
            "Time a guard held its batch lane",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        for g in &s.guards {
            ConstCounter::new(g.occupied_ns as f64 / 1e9).encode(fam.encode_family(&labels(g))?)?;
        }
        counter(
            &mut enc,
            "elfen_writer_events",
            "LC busy/idle transitions received",
            s.writer_events,
        )?;
        counter(
            &mut enc,
            "elfen_writer_reconciled",
            "Lanes set from the slots because no event said so",
            s.writer_reconciled,
        )?;
        counter(
            &mut enc,
            "elfen_lc_restarts",
            "Times the LC service was found again under new pids",
            s.lc_restarts,
        )?;
        crate::isolation::encode_metrics(&s.isolation, &mut enc)?;
        ConstGauge::new(s.repaired as i64).encode(enc.encode_descriptor(
            "elfen_daemon_repaired_values",
            "Values the start repaired from a killed predecessor",
            None,
            MetricType::Gauge,
        )?)?;
        ConstGauge::new(self.started.elapsed().as_secs_f64()).encode(enc.encode_descriptor(
            "elfen_daemon_up",
            "Time since the daemon started",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?)
    }
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
        let mut registry = page_registry(page, stale_ms);
        registry.register_collector(Box::new(DaemonCollector {
            snap: Arc::clone(&snap),
            started: Instant::now(),
        }));
        let server = serve_on(bound, registry)?;
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
