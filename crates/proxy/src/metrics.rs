//! Prometheus metrics of the proxy, read from its counters at every scrape
//! and served through `elfen_ops::metrics::serve` (the endpoint every elfen
//! command uses; this crate only adds a collector):
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `elfen_proxy_requests_total` | counter | | client work requests |
//! | `elfen_proxy_failed_total` | counter | | answered with the proxy's failure (no replica) |
//! | `elfen_proxy_hedges_total` | counter | `reason` | requests re-sent to the other replica, by why: a pause signal, `link_lost`, `timeout_pct` |
//! | `elfen_proxy_hedge_wins_total` | counter | | hedged requests the other replica answered first |
//! | `elfen_proxy_swaps_total` | counter | | role swaps |
//! | `elfen_proxy_duplicate_work_total` | counter | `replica` | answers after the other replica's: requests served twice |
//! | `elfen_proxy_duplicate_work_seconds_total` | counter | `replica` | their service time |
//! | `elfen_proxy_warmup_requests_total` | counter | `replica` | warm-up requests sent |
//! | `elfen_proxy_replica_errors_total` | counter | `replica`, `kind` | `link_lost`, `connect_failed`, `error_answer`, `restart_failed` |
//! | `elfen_proxy_pauses_total` | counter | `replica`, `signal` | pauses detected |
//! | `elfen_proxy_restarts_total` | counter | `replica` | restarts of a started replica |
//! | `elfen_proxy_replica_state` | gauge | `replica`, `role`, `state` | 1 for the replica's role and state (`up`, `warming`, `paused`, `down`, `starting`) |
//! | `elfen_proxy_jvm_watch` | gauge | `replica`, `state` | 1 for the state of the BPF watch of the replica's JVM (`on`, `disabled`, `no_process`, `opening`, `not_jvm`, `no_bpf`): whether the `jvm_pause` signal works for it |
//! | `elfen_proxy_jvm_pauses_total` | counter | `replica` | stop-the-world pauses of its JVM the watch saw |
//! | `elfen_proxy_jvm_pause_seconds_total` | counter | `replica` | their total length |
//! | `elfen_proxy_in_flight` | gauge | | requests in flight |
//! | `elfen_proxy_malformed_total` | counter | | malformed client requests |

use crate::detect::Signal;
use crate::engine::{Engine, Health};
use crate::jvm::JvmWatches;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// Emits the proxy's metrics at every scrape.
#[derive(Debug)]
pub struct ProxyCollector {
    engine: Arc<Engine>,
    jvm: Arc<JvmWatches>,
}

type Labels = Vec<(&'static str, String)>;

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut fam = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(fam.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut fam = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(fam.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for ProxyCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_requests(&mut enc)?;
        self.encode_replicas(&mut enc)?;
        self.encode_jvm(&mut enc)?;
        let e = &self.engine;
        gauge(
            &mut enc,
            "elfen_proxy_in_flight",
            "Requests in flight",
            &[(Labels::new(), e.in_flight() as f64)],
        )
    }
}

impl ProxyCollector {
    /// The engine's counters of client requests, hedges and swaps.
    fn encode_requests(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &self.engine;
        let c = &e.counters;
        let one = |v: u64| vec![(Labels::new(), v as f64)];
        counter(
            enc,
            "elfen_proxy_requests",
            "Client work requests",
            None,
            &one(c.requests.load(Relaxed)),
        )?;
        counter(
            enc,
            "elfen_proxy_failed",
            "Requests answered with the proxy's failure (no replica could answer)",
            None,
            &one(c.failed.load(Relaxed)),
        )?;
        let mut hedges: Vec<(Labels, f64)> = Signal::ALL
            .iter()
            .map(|s| {
                (
                    vec![("reason", s.name().to_string())],
                    c.hedges_signal[s.index()].load(Relaxed) as f64,
                )
            })
            .collect();
        hedges.push((
            vec![("reason", "timeout_pct".into())],
            c.hedges_timeout.load(Relaxed) as f64,
        ));
        counter(
            enc,
            "elfen_proxy_hedges",
            "Requests re-sent to the other replica, by why",
            None,
            &hedges,
        )?;
        counter(
            enc,
            "elfen_proxy_hedge_wins",
            "Hedged requests the other replica answered first",
            None,
            &one(c.hedge_wins.load(Relaxed)),
        )?;
        counter(
            enc,
            "elfen_proxy_swaps",
            "Role swaps (active to backup)",
            None,
            &one(c.swaps.load(Relaxed)),
        )?;
        counter(
            enc,
            "elfen_proxy_malformed",
            "Malformed client requests (answered with an error, that client only)",
            None,
            &one(c.malformed.load(Relaxed)),
        )?;
        Ok(())
    }

    /// Each replica's counters, errors, pauses, role and state.
    fn encode_replicas(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &self.engine;
        let per = |f: &dyn Fn(usize) -> f64| per_replica(e, f);
        let rc = |r: usize| &e.replicas[r].counters;
        counter(
            enc,
            "elfen_proxy_duplicate_work",
            "Answers after the other replica's: requests served twice",
            None,
            &per(&|r| rc(r).late_answers.load(Relaxed) as f64),
        )?;
        counter(
            enc,
            "elfen_proxy_duplicate_work",
            "Service time of requests served twice",
            Some(&Unit::Seconds),
            &per(&|r| rc(r).late_service_ns.load(Relaxed) as f64 / 1e9),
        )?;
        counter(
            enc,
            "elfen_proxy_warmup_requests",
            "Warm-up requests sent",
            None,
            &per(&|r| rc(r).warmups.load(Relaxed) as f64),
        )?;
        counter(
            enc,
            "elfen_proxy_restarts",
            "Restarts of a started replica",
            None,
            &per(&|r| rc(r).restarts.load(Relaxed) as f64),
        )?;
        let mut errors = Vec::new();
        let mut pauses = Vec::new();
        let mut states = Vec::new();
        for r in 0..2 {
            let name = e.replicas[r].name.to_string();
            let k = rc(r);
            for (kind, v) in [
                ("link_lost", &k.links_lost),
                ("connect_failed", &k.connect_failures),
                ("error_answer", &k.error_answers),
                ("restart_failed", &k.restart_failures),
            ] {
                errors.push((
                    vec![("replica", name.clone()), ("kind", kind.to_string())],
                    v.load(Relaxed) as f64,
                ));
            }
            for s in Signal::ALL {
                pauses.push((
                    vec![("replica", name.clone()), ("signal", s.name().to_string())],
                    k.pauses[s.index()].load(Relaxed) as f64,
                ));
            }
            let state = match e.health(r) {
                Health::Starting => "starting",
                Health::Up if e.warm_left(r) > 0 => "warming",
                Health::Up => "up",
                Health::Paused { .. } => "paused",
                Health::Down { .. } => "down",
            };
            let role = if e.active() == r { "active" } else { "backup" };
            states.push((
                vec![
                    ("replica", name),
                    ("role", role.to_string()),
                    ("state", state.to_string()),
                ],
                1.0,
            ));
        }
        counter(
            enc,
            "elfen_proxy_replica_errors",
            "Errors per replica, by kind",
            None,
            &errors,
        )?;
        counter(
            enc,
            "elfen_proxy_pauses",
            "Pauses detected per replica, by signal",
            None,
            &pauses,
        )?;
        gauge(
            enc,
            "elfen_proxy_replica_state",
            "The replica's role and state (value 1)",
            &states,
        )?;
        Ok(())
    }

    /// The BPF watch of each replica's JVM and the pauses it saw.
    fn encode_jvm(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &self.engine;
        let per = |f: &dyn Fn(usize) -> f64| per_replica(e, f);
        let jvm = &self.jvm;
        gauge(
            enc,
            "elfen_proxy_jvm_watch",
            "The state of the BPF watch of the replica's JVM (value 1): on, or why the jvm_pause signal is off",
            &(0..2)
                .map(|r| {
                    (
                        vec![
                            ("replica", e.replicas[r].name.to_string()),
                            ("state", jvm.state(r).0.name().to_string()),
                        ],
                        1.0,
                    )
                })
                .collect::<Vec<_>>(),
        )?;
        counter(
            enc,
            "elfen_proxy_jvm_pauses",
            "Stop-the-world pauses of the replica's JVM the BPF watch saw",
            None,
            &per(&|r| jvm.counts[r].pauses.load(Relaxed) as f64),
        )?;
        counter(
            enc,
            "elfen_proxy_jvm_pause",
            "Total length of the stop-the-world pauses of the replica's JVM",
            Some(&Unit::Seconds),
            &per(&|r| jvm.counts[r].pause_ns.load(Relaxed) as f64 / 1e9),
        )?;
        Ok(())
    }
}

/// One value per replica, labelled with its name.
fn per_replica(e: &Engine, f: &dyn Fn(usize) -> f64) -> Vec<(Labels, f64)> {
    (0..2)
        .map(|r| (vec![("replica", e.replicas[r].name.to_string())], f(r)))
        .collect()
}

/// A registry with the proxy's metrics.
pub fn registry(engine: Arc<Engine>, jvm: Arc<JvmWatches>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(ProxyCollector { engine, jvm }));
    r
}
