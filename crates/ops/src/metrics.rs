//! Prometheus metrics: what a signal page shows, exposed over HTTP on a
//! local port in the OpenMetrics text format (`prometheus-client`).
//!
//! [`PageCollector`] reads the page at every scrape (as `elfen status`
//! does) and emits, per lane:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `elfen_lc_busy_seconds_total{lane,cpu}` | counter | time in completed LC requests; `rate()` is the LC busy fraction |
//! | `elfen_lc_requests_total{lane,cpu}` | counter | completed LC requests |
//! | `elfen_lc_running{lane,cpu}` | gauge | 1 while a request runs |
//! | `elfen_lc_queue_length{lane,cpu}` | gauge | requests waiting |
//! | `elfen_batch_run_seconds_total{lane,cpu}` | counter | batch threads' run time (counted at naps); `rate()` is the batch run fraction |
//! | `elfen_batch_corun_seconds_total{lane,cpu}` | counter | of which co-running with a request (budget policies) |
//! | `elfen_batch_naps_total{lane,cpu}`, `elfen_batch_wakes_total{lane,cpu}` | counter | naps taken, naps ended |
//! | `elfen_batch_threads{lane,cpu}`, `elfen_batch_napping{lane,cpu}` | gauge | batch threads attached, napping now |
//! | `elfen_lane_policy{lane,cpu,role,policy}` | gauge | 1, labelled with the lane's role and policy |
//! | `elfen_lane_budget_seconds{lane,cpu}` | gauge | the co-running budget |
//!
//! and for the page: `elfen_kill_switch` (0 clear, 1 paused, 2 unmanaged),
//! `elfen_heartbeat_age_seconds` (absent when the controller never beat),
//! `elfen_controller_alive` (1 = beating, or no heartbeat and the creator
//! alive). A daemon registers its own metrics (guard occupations, cpuset
//! changes, failed knob writes; `docs/daemon.md`) in the same [`Registry`]
//! and serves it with [`serve`] (the endpoint and its bounds: [`server`]).

use crate::status::{Controller, LaneStatus, PageStatus};
use elfen_shm::Page;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;

pub mod server;

pub use server::{
    CONTENT_TYPE, MetricsError, MetricsListener, MetricsServer, bind, serve, serve_on,
};

/// Emits a page's metrics at every scrape.
#[derive(Debug)]
pub struct PageCollector {
    page: Arc<Page>,
    stale_ms: f64,
}

impl PageCollector {
    /// A collector over `page`; a heartbeat older than `stale_ms` counts as
    /// a dead controller.
    pub fn new(page: Arc<Page>, stale_ms: f64) -> PageCollector {
        PageCollector { page, stale_ms }
    }
}

type Labels = Vec<(&'static str, String)>;

/// Which lanes a per-lane metric covers.
#[derive(Clone, Copy, PartialEq)]
enum Lanes {
    /// Request lanes only (the LC line).
    Request,
    /// Every lane (the batch line, the controller line).
    All,
}

/// One per-lane metric: name, help, unit (seconds or none), type, lanes,
/// value.
type LaneMetric = (
    &'static str,
    &'static str,
    bool,
    MetricType,
    Lanes,
    fn(&LaneStatus) -> f64,
);

const LANE_METRICS: &[LaneMetric] = &[
    (
        "elfen_lc_busy",
        "Time in completed LC requests",
        true,
        MetricType::Counter,
        Lanes::Request,
        |l| l.lc.busy_ms / 1e3,
    ),
    (
        "elfen_lc_requests",
        "Completed LC requests",
        false,
        MetricType::Counter,
        Lanes::Request,
        |l| l.lc.requests as f64,
    ),
    (
        "elfen_lc_running",
        "1 while an LC request runs",
        false,
        MetricType::Gauge,
        Lanes::Request,
        |l| f64::from(u8::from(l.lc.busy)),
    ),
    (
        "elfen_lc_queue_length",
        "LC requests waiting",
        false,
        MetricType::Gauge,
        Lanes::Request,
        |l| f64::from(l.lc.queue_len),
    ),
    (
        "elfen_batch_run",
        "Batch threads' run time, counted at naps",
        true,
        MetricType::Counter,
        Lanes::All,
        |l| l.batch.run_ms / 1e3,
    ),
    (
        "elfen_batch_corun",
        "Batch run time while a request ran (budget policies)",
        true,
        MetricType::Counter,
        Lanes::All,
        |l| l.batch.corun_ms / 1e3,
    ),
    (
        "elfen_batch_naps",
        "Batch naps taken",
        false,
        MetricType::Counter,
        Lanes::All,
        |l| l.batch.naps as f64,
    ),
    (
        "elfen_batch_wakes",
        "Batch naps ended",
        false,
        MetricType::Counter,
        Lanes::All,
        |l| l.batch.wakes as f64,
    ),
    (
        "elfen_batch_threads",
        "Batch threads attached",
        false,
        MetricType::Gauge,
        Lanes::All,
        |l| f64::from(l.batch.attached),
    ),
    (
        "elfen_batch_napping",
        "Batch threads napping now",
        false,
        MetricType::Gauge,
        Lanes::All,
        |l| f64::from(l.batch.napping),
    ),
    (
        "elfen_lane_budget",
        "Co-running budget per period",
        true,
        MetricType::Gauge,
        Lanes::All,
        |l| l.budget_us / 1e6,
    ),
];

fn lane_labels(l: &LaneStatus) -> Labels {
    vec![("lane", l.lane.to_string()), ("cpu", l.cpu.to_string())]
}

/// Encodes one per-lane metric family.
fn encode_lane_metric(
    enc: &mut DescriptorEncoder,
    s: &PageStatus,
    m: &LaneMetric,
) -> Result<(), std::fmt::Error> {
    let (name, help, seconds, kind, lanes, value) = *m;
    let unit = seconds.then_some(Unit::Seconds);
    let mut fam = enc.encode_descriptor(name, help, unit.as_ref(), kind)?;
    for l in &s.lanes {
        if lanes == Lanes::Request && l.role != "request" {
            continue;
        }
        let labels = lane_labels(l);
        let me = fam.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(value(l)).encode(me)?,
            _ => ConstGauge::new(value(l)).encode(me)?,
        }
    }
    Ok(())
}

/// Encodes the page-wide metrics and the per-lane policy labels.
fn encode_page_metrics(enc: &mut DescriptorEncoder, s: &PageStatus) -> Result<(), std::fmt::Error> {
    let mut fam = enc.encode_descriptor(
        "elfen_lane_policy",
        "The lane's role and policy (value 1)",
        None,
        MetricType::Gauge,
    )?;
    for l in &s.lanes {
        let mut labels = lane_labels(l);
        labels.push(("role", l.role.to_string()));
        labels.push(("policy", l.policy.to_string()));
        ConstGauge::new(1i64).encode(fam.encode_family(&labels)?)?;
    }
    let gauge = |enc: &mut DescriptorEncoder, name, help, unit: Option<&Unit>, v: f64| {
        ConstGauge::new(v).encode(enc.encode_descriptor(name, help, unit, MetricType::Gauge)?)
    };
    let mode = match s.kill_mode {
        "paused" => 1.0,
        "unmanaged" => 2.0,
        _ => 0.0,
    };
    gauge(
        enc,
        "elfen_kill_switch",
        "The kill switch: 0 clear, 1 paused (batch must not run), 2 unmanaged (borrowing off)",
        None,
        mode,
    )?;
    if let Some(age) = s.heartbeat_age_ms {
        gauge(
            enc,
            "elfen_heartbeat_age",
            "Age of the controller's last heartbeat",
            Some(&Unit::Seconds),
            age / 1e3,
        )?;
    }
    let alive = matches!(s.controller, Controller::Beating | Controller::CreatorAlive);
    gauge(
        enc,
        "elfen_controller_alive",
        "1 if the page's controller beats (or, without a heartbeat, its creator lives)",
        None,
        f64::from(u8::from(alive)),
    )
}

impl Collector for PageCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A page that cannot be read (a controller line rewritten for longer
        // than the seqlock bound) yields no metrics for this scrape.
        let Ok(s) = PageStatus::read(&self.page, self.stale_ms) else {
            return Ok(());
        };
        for m in LANE_METRICS {
            encode_lane_metric(&mut enc, &s, m)?;
        }
        encode_page_metrics(&mut enc, &s)
    }
}

/// A registry with a page's metrics (a daemon adds its own to it).
pub fn page_registry(page: Arc<Page>, stale_ms: f64) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(PageCollector::new(page, stale_ms)));
    r
}
