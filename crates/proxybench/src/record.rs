//! The bench's record: one [`InvocationRecord`] per invocation, and per
//! (variant, way) the medians and spread over invocations
//! ([`WaySummary`]); the table printed from them.

use crate::spec::{BenchSpec, Way};
use elfen_proxy::status::Summary;
use elfen_results::{Percentiles, Stat};
use serde::{Deserialize, Serialize};

/// The schema tag of the bench's JSON.
pub const SCHEMA: &str = "elfen-proxy-bench/1";

/// One invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvocationRecord {
    /// The variant.
    pub variant: String,
    /// The way.
    pub way: Way,
    /// The round (0-based); the ways of one round share arrivals and
    /// request order.
    pub round: usize,
    /// Client-observed latency from the intended send time, µs.
    pub latency_us: Percentiles,
    /// Measured requests answered.
    pub requests: u64,
    /// Measured requests unanswered or failed.
    pub errors: u64,
    /// Requests sent in all.
    pub sent: usize,
    /// The proxy's record of the invocation (not for `alone`).
    pub proxy: Option<Summary>,
    /// Busy time of replica B's LC line during the invocation, ms (its
    /// extra work: hedges and warm-ups; from the signal page).
    pub backup_busy_ms: Option<f64>,
}

/// One (variant, way) over its invocations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaySummary {
    /// The variant.
    pub variant: String,
    /// The way.
    pub way: Way,
    /// Invocations.
    pub invocations: usize,
    /// p50, µs.
    pub p50_us: Stat,
    /// p99, µs.
    pub p99_us: Stat,
    /// p99.9, µs.
    pub p999_us: Stat,
    /// Maximum, µs.
    pub max_us: Stat,
    /// p50 minus `alone`'s in the same round, µs (the added latency).
    pub added_p50_us: Option<Stat>,
    /// p99 minus `alone`'s in the same round, µs.
    pub added_p99_us: Option<Stat>,
    /// Hedged requests per request.
    pub hedge_rate: Option<Stat>,
    /// Role swaps.
    pub swaps: Option<Stat>,
    /// Requests served twice.
    pub duplicate_work: Option<Stat>,
    /// Service time of those, ms.
    pub duplicate_work_ms: Option<Stat>,
    /// Warm-up requests.
    pub warmups: Option<Stat>,
    /// Replica B's busy time, ms.
    pub backup_busy_ms: Option<Stat>,
    /// Errors over all invocations.
    pub errors: u64,
}

/// The bench's JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchRecord {
    /// [`SCHEMA`].
    pub schema: String,
    /// What ran.
    pub spec: BenchSpec,
    /// When it started, Unix s.
    pub started_unix_s: u64,
    /// The load average before and after.
    pub loadavg: [[f64; 3]; 2],
    /// Whether a Ctrl-C cut it short (the invocations done are kept).
    pub interrupted: bool,
    /// Every invocation.
    pub invocations: Vec<InvocationRecord>,
    /// Per (variant, way).
    pub summary: Vec<WaySummary>,
    /// The ladder (the thesis's table), where the file has one: its steps
    /// with the profiler's rankings, and `elfen trace`'s overhead.
    #[serde(default)]
    pub ladder: Option<crate::ladder::LadderRecord>,
}

fn stat_of(xs: impl Iterator<Item = f64>) -> Option<Stat> {
    Stat::of(&xs.collect::<Vec<_>>())
}

/// The summaries of `inv`, in the order of `spec`'s variants and ways.
pub fn summarize(spec: &BenchSpec, inv: &[InvocationRecord]) -> Vec<WaySummary> {
    let mut out = Vec::new();
    for v in &spec.variants {
        for &way in &crate::ways_of(spec, v) {
            let mine: Vec<&InvocationRecord> = inv
                .iter()
                .filter(|r| r.variant == v.name && r.way == way)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let alone_of = |round: usize| {
                inv.iter()
                    .find(|r| r.variant == v.name && r.way == Way::Alone && r.round == round)
            };
            let added = |f: fn(&Percentiles) -> f64| {
                (way != Way::Alone)
                    .then(|| {
                        stat_of(mine.iter().filter_map(|r| {
                            alone_of(r.round).map(|a| f(&r.latency_us) - f(&a.latency_us))
                        }))
                    })
                    .flatten()
            };
            let proxied = |f: fn(&Summary) -> f64| {
                stat_of(mine.iter().filter_map(|r| r.proxy.as_ref().map(f)))
            };
            let p = |f: fn(&Percentiles) -> f64| {
                stat_of(mine.iter().map(|r| f(&r.latency_us))).unwrap_or(Stat::NAN)
            };
            out.push(WaySummary {
                variant: v.name.clone(),
                way,
                invocations: mine.len(),
                p50_us: p(|x| x.p50),
                p99_us: p(|x| x.p99),
                p999_us: p(|x| x.p999),
                max_us: p(|x| x.max),
                added_p50_us: added(|x| x.p50),
                added_p99_us: added(|x| x.p99),
                hedge_rate: proxied(|s| s.hedge_rate),
                swaps: proxied(|s| s.swaps as f64),
                duplicate_work: proxied(|s| s.duplicate_work as f64),
                duplicate_work_ms: proxied(|s| s.duplicate_work_ms),
                warmups: proxied(|s| s.warmups as f64),
                backup_busy_ms: stat_of(mine.iter().filter_map(|r| r.backup_busy_ms)),
                errors: mine.iter().map(|r| r.errors).sum(),
            });
        }
    }
    out
}

fn ms(s: &Stat) -> String {
    format!(
        "{:.2} ({:.2}–{:.2})",
        s.median / 1e3,
        s.min / 1e3,
        s.max / 1e3
    )
}

fn us(s: &Option<Stat>) -> String {
    s.as_ref().map_or("-".into(), |s| {
        format!("{:+.0} ({:+.0}…{:+.0})", s.median, s.min, s.max)
    })
}

/// The table: per (variant, way), latency in ms (median, min–max over
/// invocations), added latency in µs against `alone`, hedge rate, work done
/// twice, the backup's busy time, errors.
pub fn table(summary: &[WaySummary]) -> String {
    let mut t = format!(
        "{:<14} {:<8} {:>22} {:>22} {:>22} {:>20} {:>20} {:>9} {:>6} {:>10} {:>10} {:>6}\n",
        "variant",
        "way",
        "p50 ms",
        "p99 ms",
        "max ms",
        "added p50 us",
        "added p99 us",
        "hedged %",
        "swaps",
        "twice (ms)",
        "B busy ms",
        "errors"
    );
    for s in summary {
        t.push_str(&format!(
            "{:<14} {:<8} {:>22} {:>22} {:>22} {:>20} {:>20} {:>9} {:>6} {:>10} {:>10} {:>6}\n",
            s.variant,
            s.way.name(),
            ms(&s.p50_us),
            ms(&s.p99_us),
            ms(&s.max_us),
            us(&s.added_p50_us),
            us(&s.added_p99_us),
            s.hedge_rate
                .map_or("-".into(), |h| format!("{:.2}", h.median * 100.0)),
            s.swaps.map_or("-".into(), |h| format!("{:.0}", h.median)),
            s.duplicate_work_ms
                .map_or("-".into(), |h| format!("{:.1}", h.median)),
            s.backup_busy_ms
                .map_or("-".into(), |h| format!("{:.1}", h.median)),
            s.errors,
        ));
    }
    t
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use elfen_proxy::status::HedgeCounts;

    /// A proxy's record with `requests` and `hedges` of them re-sent.
    pub(crate) fn proxied(requests: u64, hedges: u64, swaps: u64) -> Summary {
        Summary {
            listen: "127.0.0.1:1".into(),
            protocol: "wire".into(),
            hedge: "signal".into(),
            duration_s: 1.0,
            clients: 1,
            requests,
            answered: requests,
            failed: 0,
            hedges: HedgeCounts::default(),
            hedges_total: hedges,
            hedge_rate: hedges as f64 / requests as f64,
            hedge_wins: 0,
            swaps,
            duplicate_work: hedges,
            duplicate_work_ms: hedges as f64 * 0.5,
            warmups: 0,
            malformed: 0,
            stray_answers: 0,
            in_flight: 0,
            pause_bound_ms: 5.0,
            hedge_timeout_ms: 0.0,
            replicas: Vec::new(),
        }
    }

    /// An invocation whose percentiles are all `p50_us` but p99 (twice)
    /// and max (ten times).
    pub(crate) fn inv(variant: &str, way: Way, round: usize, p50_us: f64) -> InvocationRecord {
        InvocationRecord {
            variant: variant.into(),
            way,
            round,
            latency_us: Percentiles {
                p50: p50_us,
                p95: p50_us,
                p99: 2.0 * p50_us,
                p999: 2.0 * p50_us,
                max: 10.0 * p50_us,
                mean: p50_us,
            },
            requests: 100,
            errors: u64::from(way == Way::Hedge),
            sent: 100,
            proxy: (way != Way::Alone).then(|| proxied(100, 2 * round as u64, 1)),
            backup_busy_ms: (way != Way::Alone).then_some(3.0),
        }
    }

    #[test]
    fn summaries_take_medians_over_rounds_and_added_latency_against_alone_in_the_same_round() {
        let mut spec = BenchSpec {
            ways: vec![Way::Proxy, Way::Hedge],
            ..BenchSpec::default()
        };
        let mut only_alone = spec.variants[0].clone();
        only_alone.name = "step0".into();
        only_alone.ways = Some(vec![Way::Alone]);
        spec.variants.insert(0, only_alone);
        let mut v = Vec::new();
        for (round, (alone, proxy)) in [(100.0, 130.0), (200.0, 210.0), (300.0, 320.0)]
            .into_iter()
            .enumerate()
        {
            v.push(inv("default", Way::Alone, round, alone));
            v.push(inv("default", Way::Proxy, round, proxy));
            v.push(inv("step0", Way::Alone, round, 50.0));
        }
        v.push(inv("default", Way::Hedge, 0, 400.0));
        // a variant the spec does not have and a way its variant does not run
        v.push(inv("gone", Way::Alone, 0, 1.0));
        v.push(inv("step0", Way::Proxy, 0, 1.0));
        let s = summarize(&spec, &v);
        let keys: Vec<(&str, Way, usize)> = s
            .iter()
            .map(|x| (x.variant.as_str(), x.way, x.invocations))
            .collect();
        assert_eq!(
            keys,
            [
                ("step0", Way::Alone, 3),
                ("default", Way::Alone, 3),
                ("default", Way::Proxy, 3),
                ("default", Way::Hedge, 1),
            ]
        );
        let proxy = &s[2];
        assert_eq!(
            (proxy.p50_us.median, proxy.p50_us.min, proxy.p50_us.max),
            (210.0, 130.0, 320.0)
        );
        // 30, 10, 20 µs added in rounds 0, 1, 2
        let a = proxy.added_p50_us.unwrap();
        assert_eq!((a.median, a.min, a.max), (20.0, 10.0, 30.0));
        assert_eq!(proxy.added_p99_us.unwrap().median, 40.0);
        assert_eq!(proxy.max_us.max, 3200.0);
        let h = proxy.hedge_rate.unwrap();
        assert_eq!((h.median, h.min, h.max), (0.02, 0.0, 0.04));
        assert_eq!(proxy.backup_busy_ms.unwrap().median, 3.0);
        assert_eq!(s[3].added_p50_us.unwrap().median, 300.0);
        assert_eq!(s[3].errors, 1);
        let alone = &s[1];
        assert!(alone.added_p50_us.is_none() && alone.hedge_rate.is_none());
        assert!(table(&s).lines().count() == 5 && table(&s).contains("step0"));
    }
}
