//! The **study** of an advise record: pure functions of measured windows,
//! no I/O — HIS's `res_cont = co-run / solo − 1`, the solo reference, the
//! stop rule that ends a probe or knob pushing the LC past the max
//! slowdown, the LC's sensitivity per resource, and the recommendation
//! rule.
//!
//! The LC's measures, from its threads' `schedstat` over a window at its
//! steady offered load:
//!
//! - **service**: on-CPU time per second of wall time. At a fixed offered
//!   load it is the request rate times the work per request, so its
//!   co-run / solo ratio is the ratio of the service times — how much
//!   slower each request computes (cache and memory interference);
//! - **response**: on-CPU time plus run-queue wait per run (each time the
//!   kernel switches an LC thread in: per busy period) — what a request
//!   waits for its CPU and runs (CPU interference shows here);
//! - **latency**: the probe's requests, from their intended send times,
//!   where a latency probe runs.

use crate::record::{
    Contention, Knob, KnobRow, Outcome, Probe, ProbeRow, Reference, Sensitivity, Verdict, Window,
};

/// HIS's contention of one measure: `co / solo − 1`; `None` when the solo
/// value is not a positive number (nothing to compare with).
pub fn res_cont(co: f64, solo: f64) -> Option<f64> {
    (solo > 0.0 && solo.is_finite() && co.is_finite()).then(|| co / solo - 1.0)
}

/// The LC's on-CPU time per second of the window (its busy share of a lane).
pub fn cpu_per_s(w: &Window) -> f64 {
    if w.wall_ns == 0 {
        return 0.0;
    }
    w.lc_cpu_ns as f64 / w.wall_ns as f64
}

/// On-CPU plus run-queue wait per run, µs (`None` without runs).
pub fn response_us(w: &Window) -> Option<f64> {
    (w.lc_runs > 0).then(|| (w.lc_cpu_ns + w.lc_wait_ns) as f64 / w.lc_runs as f64 / 1e3)
}

/// The kernel signal's LC busy time over all CPUs, as a share of one lane.
pub fn busy_share(w: &Window) -> f64 {
    if w.wall_ns == 0 {
        return 0.0;
    }
    w.signal_busy_ns.iter().sum::<u64>() as f64 / w.wall_ns as f64
}

/// Busy time per busy period (the kernel signal), µs.
pub fn busy_per_period_us(w: &Window) -> Option<f64> {
    let periods: u64 = w.signal_periods.iter().sum();
    (periods > 0).then(|| w.signal_busy_ns.iter().sum::<u64>() as f64 / periods as f64 / 1e3)
}

/// Busy periods per second (the kernel signal).
pub fn periods_per_s(w: &Window) -> f64 {
    if w.wall_ns == 0 {
        return 0.0;
    }
    w.signal_periods.iter().sum::<u64>() as f64 * 1e9 / w.wall_ns as f64
}

/// CPU time of processes that are neither the LC, the batch work, the
/// daemon nor advise, as lanes' worth over the window (the machine's
/// other load — a load generator running here among it — plus the host's
/// steal): what disturbs a window.
pub fn other_lanes(w: &Window) -> f64 {
    if w.wall_ns == 0 {
        return 0.0;
    }
    let known = w.lc_cpu_ns
        + w.batch.as_ref().map_or(0, |b| b.cpu_ns)
        + w.daemon.as_ref().map_or(0, |d| d.cpu_ns)
        + w.advise_cpu_ns;
    (w.machine_busy_ns.saturating_sub(known) + w.steal_ns) as f64 / w.wall_ns as f64
}

/// The CPU the LC was busy on most (the kernel signal), if any.
pub fn busiest_cpu(w: &Window) -> Option<u32> {
    w.signal_busy_ns
        .iter()
        .enumerate()
        .filter(|(_, b)| **b > 0)
        .max_by_key(|(_, b)| **b)
        .map(|(c, _)| c as u32)
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut s, mut n) = (0.0, 0usize);
    for x in v {
        s += x;
        n += 1;
    }
    (n > 0).then(|| s / n as f64)
}

/// The solo reference: the mean of the solo windows' measures, and how
/// much they differ.
pub fn reference(solo: &[Window]) -> Reference {
    let cpus: Vec<f64> = solo.iter().map(cpu_per_s).collect();
    let (lo, hi) = cpus.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &c| {
        (lo.min(c), hi.max(c))
    });
    Reference {
        cpu_per_s: mean(cpus.iter().copied()).unwrap_or(0.0),
        response_us: mean(solo.iter().filter_map(response_us)).unwrap_or(0.0),
        busy_share: mean(solo.iter().map(busy_share)).unwrap_or(0.0),
        busy_per_period_us: mean(solo.iter().filter_map(busy_per_period_us)).unwrap_or(0.0),
        periods_per_s: mean(solo.iter().map(periods_per_s)).unwrap_or(0.0),
        p50_us: mean(
            solo.iter()
                .filter_map(|w| w.latency.as_ref())
                .filter(|l| l.samples > 0)
                .map(|l| l.p50_us),
        ),
        p99_us: mean(
            solo.iter()
                .filter_map(|w| w.latency.as_ref())
                .filter(|l| l.samples > 0)
                .map(|l| l.p99_us),
        ),
        drift: if lo > 0.0 && lo.is_finite() {
            hi / lo - 1.0
        } else {
            0.0
        },
    }
}

/// The contention of a co-run window against the reference.
pub fn contention(w: &Window, r: &Reference) -> Contention {
    let lat = w.latency.as_ref().filter(|l| l.samples > 0);
    Contention {
        service: res_cont(cpu_per_s(w), r.cpu_per_s).unwrap_or(0.0),
        response: response_us(w)
            .and_then(|x| res_cont(x, r.response_us))
            .unwrap_or(0.0),
        p99: lat.and_then(|l| res_cont(l.p99_us, r.p99_us?)),
        p50: lat.and_then(|l| res_cont(l.p50_us, r.p50_us?)),
    }
}

impl Contention {
    /// The headline figure: the larger of the service and response
    /// contention (the LC's own time; the latency is shown beside it).
    pub fn headline(&self) -> f64 {
        self.service.max(self.response)
    }

    /// The largest of every measure, the latency's included.
    pub fn worst(&self) -> f64 {
        [Some(self.service), Some(self.response), self.p99]
            .into_iter()
            .flatten()
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// Within `threshold`: the headline, and the p99 where known.
    pub fn within(&self, threshold: f64) -> bool {
        self.headline() <= threshold && self.p99.is_none_or(|p| p <= threshold)
    }
}

/// Least runs in a watch interval for its response time to count.
pub const MIN_WATCH_RUNS: u64 = 20;
/// Least latency samples in a watch interval for its median to count.
pub const MIN_WATCH_SAMPLES: u64 = 5;

/// The **stop rule**, checked every watch interval while a probe or knob
/// runs: past `max_slowdown` × solo in the LC's service time (on-CPU per
/// second), its response time (on-CPU + wait per run, with at least
/// [`MIN_WATCH_RUNS`] runs) or the probe's median latency (at least
/// [`MIN_WATCH_SAMPLES`] samples, unanswered requests counted with their
/// age) — returns what went past, in words. Medians and means, not
/// maxima: one pause of the host does not stop a probe.
pub fn over_limit(r: &Reference, interval: &Window, max_slowdown: f64) -> Option<String> {
    let ratio = |co: f64, solo: f64| (solo > 0.0).then(|| co / solo);
    if let Some(x) = ratio(cpu_per_s(interval), r.cpu_per_s).filter(|&x| x > max_slowdown) {
        return Some(format!(
            "service time ×{x:.1} of alone's (on-CPU {:.1} % of a lane vs {:.1} %)",
            100.0 * cpu_per_s(interval),
            100.0 * r.cpu_per_s
        ));
    }
    if interval.lc_runs >= MIN_WATCH_RUNS {
        if let Some((x, us)) = response_us(interval)
            .and_then(|us| Some((ratio(us, r.response_us)?, us)))
            .filter(|&(x, _)| x > max_slowdown)
        {
            return Some(format!(
                "response time ×{x:.1} of alone's ({us:.0} µs per run vs {:.0} µs)",
                r.response_us
            ));
        }
    }
    let lat = interval
        .latency
        .as_ref()
        .filter(|l| l.samples >= MIN_WATCH_SAMPLES)?;
    let x = ratio(lat.p50_us, r.p50_us?).filter(|&x| x > max_slowdown)?;
    Some(format!(
        "median latency ×{x:.1} of alone's ({:.0} µs vs {:.0} µs)",
        lat.p50_us,
        r.p50_us.unwrap_or(0.0)
    ))
}

/// Watch intervals in a row past the limit that stop a probe or knob.
pub const STOP_AFTER_INTERVALS: u32 = 2;

/// The stop rule over time: a probe or knob is stopped when
/// [`over_limit`] holds for [`STOP_AFTER_INTERVALS`] watch intervals in a
/// row — within two intervals of the harm, while a burst of other load on
/// the machine lasting one interval does not stop it.
#[derive(Debug, Clone, Default)]
pub struct StopWatch {
    over: u32,
}

impl StopWatch {
    /// One interval's verdict of [`over_limit`]; returns the reason once
    /// enough intervals in a row were past the limit.
    pub fn observe(&mut self, over: Option<String>) -> Option<String> {
        match over {
            Some(why) => {
                self.over += 1;
                (self.over >= STOP_AFTER_INTERVALS).then_some(why)
            }
            None => {
                self.over = 0;
                None
            }
        }
    }
}

/// The measure of a probe's row that counts for its resource: the worst
/// contention, at least `max_slowdown − 1` when it was stopped.
fn probe_measure(row: &ProbeRow, max_slowdown: f64) -> Option<(f64, bool)> {
    let c = row.contention.as_ref().map(Contention::worst);
    match &row.outcome {
        Outcome::Measured => c.map(|c| (c, false)),
        Outcome::Stopped { .. } => Some((c.unwrap_or(0.0).max(max_slowdown - 1.0), true)),
        Outcome::NotRun { .. } => None,
    }
}

/// The LC's sensitivity per resource: the worst probe of each, most
/// contentious first.
pub fn sensitivity(probes: &[ProbeRow], max_slowdown: f64) -> Vec<Sensitivity> {
    let mut out: Vec<Sensitivity> = Vec::new();
    for row in probes {
        let Some((c, stopped)) = probe_measure(row, max_slowdown) else {
            continue;
        };
        let resource = row.probe.resource();
        match out.iter_mut().find(|s| s.resource == resource) {
            Some(s) if s.contention >= c => {}
            Some(s) => {
                *s = Sensitivity {
                    resource,
                    contention: c,
                    probe: row.probe,
                    stopped,
                }
            }
            None => out.push(Sensitivity {
                resource,
                contention: c,
                probe: row.probe,
                stopped,
            }),
        }
    }
    out.sort_by(|a, b| b.contention.total_cmp(&a.contention));
    out
}

/// A percentage with its sign, for messages.
pub fn pct(x: f64) -> String {
    format!("{:+.1} %", 100.0 * x)
}

/// What the probes alone predict about the knobs (HIS's scheduler picks by
/// the most contentious resource and the knobs available): whether batch
/// work at SCHED_IDLE confined to the partner lane should already keep
/// the LC within `threshold`, or whether the partner lane must be taken
/// from batch work while the LC runs.
pub fn predicted(probes: &[ProbeRow], threshold: f64, max_slowdown: f64) -> String {
    let get = |p: Probe| {
        probes
            .iter()
            .find(|r| r.probe == p)
            .and_then(|r| probe_measure(r, max_slowdown))
    };
    let mut out = Vec::new();
    match (get(Probe::StreamPartner), get(Probe::HogIdlePartner)) {
        (Some((s, _)), Some((h, _))) if s <= threshold && h <= threshold => out.push(format!(
            "SCHED_IDLE batch on the partner lane stays within {} (streamer {}, hog {}): a \
             static knob (idle, confined) should suffice",
            pct(threshold),
            pct(s),
            pct(h)
        )),
        (Some((s, _)), _) if s > threshold => out.push(format!(
            "a streamer on the partner lane costs {} even at SCHED_IDLE: batch must leave the \
             partner lane while the LC runs (guard, blind, freeze or cooperative), or the cache \
             be partitioned",
            pct(s)
        )),
        (_, Some((h, _))) if h > threshold => out.push(format!(
            "a SCHED_IDLE hog on the partner lane costs {}: batch must leave the partner lane \
             while the LC runs",
            pct(h)
        )),
        _ => out.push("no partner-lane probe measured: nothing predicted".into()),
    }
    if let Some((c, stopped)) = get(Probe::HogIdleOwn) {
        if c > threshold {
            out.push(format!(
                "SCHED_IDLE batch on the LC's own lane costs {}{}: confine batch to the batch \
                 lanes",
                pct(c),
                if stopped { " (stopped)" } else { "" }
            ));
        }
    }
    if let Some((c, true)) = get(Probe::HogOwn) {
        out.push(format!(
            "batch at the LC's priority on its lane pushed it past the max slowdown (≥ {}): \
             never run batch there at equal priority",
            pct(c)
        ));
    }
    out.join("; ")
}

/// The verdict of a knob's row.
pub fn verdict(outcome: &Outcome, c: Option<&Contention>, threshold: f64) -> Verdict {
    match (outcome, c) {
        (Outcome::Stopped { .. }, _) => Verdict::Stopped,
        (Outcome::NotRun { .. }, _) | (Outcome::Measured, None) => Verdict::NotRun,
        (Outcome::Measured, Some(c)) if c.within(threshold) => Verdict::Within,
        (Outcome::Measured, Some(_)) => Verdict::Over,
    }
}

/// Two knobs whose batch share less the daemon's own CPU differ by less
/// than this many lanes are a tie (broken by less daemon CPU).
pub const TIE_LANES: f64 = 0.02;

/// What a knob leaves to batch work, in lanes: its progress (relative to
/// the reference run) times the reference run's batch CPU, less the
/// daemon's own CPU.
fn net_lanes(row: &KnobRow, ref_batch_lanes: f64) -> Option<f64> {
    Some(row.progress? * ref_batch_lanes - row.daemon_own_lanes?)
}

/// The **recommendation rule**: of the knobs whose verdict is within the
/// threshold, the cheapest — the one that leaves the most to batch work
/// (batch progress in lanes less the daemon's own CPU); within
/// [`TIE_LANES`] of it, the one with the least daemon CPU. `None` when no
/// knob is within. Returns the knob and the reason in words.
pub fn recommend(rows: &[KnobRow], threshold: f64, ref_batch_lanes: f64) -> (Option<Knob>, String) {
    let mut within: Vec<(&KnobRow, f64)> = rows
        .iter()
        .filter(|r| r.verdict == Verdict::Within)
        .filter_map(|r| Some((r, net_lanes(r, ref_batch_lanes)?)))
        .collect();
    if within.is_empty() {
        let least = rows
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Measured))
            .filter_map(|r| Some((r, r.contention?.worst())))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let measured = rows
            .iter()
            .filter(|r| !matches!(r.outcome, Outcome::NotRun { .. }))
            .count();
        let stopped: Vec<&str> = rows
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Stopped { .. }))
            .map(|r| r.knob.name())
            .collect();
        let reason = match least {
            None if !stopped.is_empty() => format!(
                "no knob kept the LC within {}: every knob that ran ({}) pushed it past the max \
                 slowdown and was stopped: co-locate less batch work with this service",
                pct(threshold),
                stopped.join(", ")
            ),
            Some((r, c)) => format!(
                "no knob kept the LC within {} ({measured} run); the least contended was {} \
                 ({}): co-locate less batch work with this service, or accept a larger \
                 threshold",
                pct(threshold),
                r.knob.name(),
                pct(c)
            ),
            None => format!(
                "no knob was measured ({measured} run, {} not run): nothing to recommend",
                rows.len() - measured
            ),
        };
        return (None, reason);
    }
    let best_net = within
        .iter()
        .map(|&(_, n)| n)
        .fold(f64::NEG_INFINITY, f64::max);
    within.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (best, net) = within
        .iter()
        .filter(|&&(_, n)| n >= best_net - TIE_LANES)
        .min_by(|a, b| {
            let own = |r: &KnobRow| r.daemon_own_lanes.unwrap_or(f64::INFINITY);
            own(a.0).total_cmp(&own(b.0))
        })
        .copied()
        .expect("within is not empty");
    let c = best.contention.unwrap_or_default();
    let mut reason = format!(
        "{} keeps the LC within {} (contention {}{}) with batch progress {:.2} at {:.1} % of a \
         lane of daemon CPU ({:.1} % besides its guards' occupation): of the {} knob{} within, \
         it leaves the most to batch work ({:.2} lanes)",
        best.knob.name(),
        pct(threshold),
        pct(c.headline()),
        c.p99
            .map_or(String::new(), |p| format!(", p99 ×{:.2}", 1.0 + p)),
        best.progress.unwrap_or(0.0),
        100.0 * best.daemon_cpu_lanes.unwrap_or(0.0),
        100.0 * best.daemon_own_lanes.unwrap_or(0.0),
        within.len(),
        if within.len() == 1 { "" } else { "s" },
        net
    );
    let ties: Vec<&str> = within
        .iter()
        .filter(|&&(r, n)| r.knob != best.knob && n >= best_net - TIE_LANES)
        .map(|&(r, _)| r.knob.name())
        .collect();
    if !ties.is_empty() {
        reason.push_str(&format!(
            "; {} leave{} as much within {TIE_LANES} lanes but cost the daemon more",
            ties.join(", "),
            if ties.len() == 1 { "s" } else { "" }
        ));
    }
    (Some(best.knob), reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{LatencyWindow, Resource};

    fn w(cpu_ms: u64, wait_ms: u64, runs: u64) -> Window {
        Window {
            wall_ns: 1_000_000_000,
            lc_cpu_ns: cpu_ms * 1_000_000,
            lc_wait_ns: wait_ms * 1_000_000,
            lc_runs: runs,
            signal_busy_ns: vec![cpu_ms * 1_000_000, 0],
            signal_periods: vec![runs, 0],
            ..Window::default()
        }
    }

    fn lat(p50: f64, p99: f64, n: u64) -> Option<LatencyWindow> {
        Some(LatencyWindow {
            samples: n,
            errors: 0,
            p50_us: p50,
            p99_us: p99,
            max_us: p99 * 2.0,
        })
    }

    #[test]
    fn res_cont_is_co_run_over_solo_minus_one() {
        assert!((res_cont(2.4, 1.0).unwrap() - 1.4).abs() < 1e-12);
        assert_eq!(res_cont(110.0, 100.0).map(|x| (x * 1e9).round()), Some(1e8));
        assert_eq!(res_cont(0.9, 1.0).map(|x| (x * 100.0).round()), Some(-10.0));
        assert_eq!(res_cont(1.0, 0.0), None, "no solo value");
        assert_eq!(res_cont(f64::NAN, 1.0), None);
    }

    #[test]
    fn contention_of_a_window_against_the_reference() {
        // alone: 400 ms on-CPU per s, 10,000 runs, 2 ms waiting in all
        let solo = [w(400, 2, 10_000), w(400, 2, 10_000)];
        let r = reference(&solo);
        assert!((r.cpu_per_s - 0.4).abs() < 1e-12);
        assert!((r.response_us - 40.2).abs() < 1e-9, "{}", r.response_us);
        assert_eq!(r.drift, 0.0);
        assert!((busy_per_period_us(&solo[0]).unwrap() - 40.0).abs() < 1e-9);
        assert_eq!(busiest_cpu(&solo[0]), Some(0));
        // a streamer: each request computes 20 % longer
        let c = contention(&w(480, 2, 10_000), &r);
        assert!((c.service - 0.2).abs() < 1e-9, "{c:?}");
        assert!((c.response - (48.2 / 40.2 - 1.0)).abs() < 1e-9);
        assert_eq!((c.p99, c.p50), (None, None), "no latency known");
        assert!(c.within(0.2 + 1e-9) && !c.within(0.19));
        // a hog on its lane: the same work, but waiting 300 ms for the CPU
        let c = contention(&w(400, 300, 10_000), &r);
        assert!(c.service.abs() < 1e-9);
        assert!((c.response - (70.0 / 40.2 - 1.0)).abs() < 1e-9, "{c:?}");
        assert_eq!(c.headline(), c.response);
    }

    #[test]
    fn the_p99_ratio_counts_where_the_latency_is_known() {
        let mut a = w(400, 2, 10_000);
        a.latency = lat(100.0, 200.0, 1000);
        let r = reference(&[a.clone()]);
        assert_eq!((r.p50_us, r.p99_us), (Some(100.0), Some(200.0)));
        let mut b = a.clone();
        b.latency = lat(105.0, 300.0, 1000);
        let c = contention(&b, &r);
        assert!((c.p99.unwrap() - 0.5).abs() < 1e-12);
        assert!(c.headline().abs() < 1e-12, "service unchanged");
        assert!(!c.within(0.10), "p99 ×1.5 is over 10 %");
        assert!((c.worst() - 0.5).abs() < 1e-12);
        // a window without samples says nothing about latency
        b.latency = lat(0.0, 0.0, 0);
        assert_eq!(contention(&b, &r).p99, None);
    }

    #[test]
    fn solo_windows_that_differ_show_as_drift() {
        let r = reference(&[w(400, 0, 100), w(500, 0, 100)]);
        assert!((r.cpu_per_s - 0.45).abs() < 1e-12);
        assert!((r.drift - 0.25).abs() < 1e-12);
        assert_eq!(reference(&[]).cpu_per_s, 0.0);
    }

    #[test]
    fn the_stop_rule_trips_on_service_response_or_latency_past_the_limit() {
        let mut solo = w(100, 1, 10_000);
        solo.latency = lat(100.0, 300.0, 500);
        let r = reference(&[solo]);
        // ×2.9 on every measure: below a max slowdown of 3
        let mut i = w(290, 0, 10_000);
        i.latency = lat(290.0, 5000.0, 40);
        assert_eq!(
            over_limit(&r, &i, 3.0),
            None,
            "a p99 spike alone does not stop"
        );
        // service ×3.1
        let e = over_limit(&r, &w(310, 0, 10_000), 3.0).unwrap();
        assert!(e.contains("service") && e.contains("×3.1"), "{e}");
        // the same work, waiting: response ×4
        let e = over_limit(&r, &w(100, 303, 10_000), 3.0).unwrap();
        assert!(e.starts_with("response"), "{e}");
        // too few runs to judge the response
        assert_eq!(over_limit(&r, &w(10, 300, 5), 3.0), None);
        // the median latency ×3.5 (outstanding requests count)
        let mut i = w(100, 1, 10_000);
        i.latency = lat(350.0, 900.0, 10);
        let e = over_limit(&r, &i, 3.0).unwrap();
        assert!(e.contains("median latency ×3.5"), "{e}");
        // too few samples
        i.latency = lat(350.0, 900.0, 4);
        assert_eq!(over_limit(&r, &i, 3.0), None);
        // a larger limit lets it run
        i.latency = lat(350.0, 900.0, 10);
        assert_eq!(over_limit(&r, &i, 4.0), None);
    }

    #[test]
    fn a_probe_stops_after_two_intervals_in_a_row_past_the_limit() {
        let mut w = StopWatch::default();
        assert_eq!(w.observe(None), None);
        assert_eq!(w.observe(Some("a".into())), None, "one interval: not yet");
        assert_eq!(w.observe(None), None, "a burst of one interval is forgiven");
        assert_eq!(w.observe(Some("b".into())), None);
        assert_eq!(w.observe(Some("c".into())), Some("c".into()));
    }

    fn probe_row(p: Probe, outcome: Outcome, service: f64) -> ProbeRow {
        ProbeRow {
            probe: p,
            outcome,
            window: None,
            contention: Some(Contention {
                service,
                response: service / 2.0,
                p99: None,
                p50: None,
            }),
            readings: Vec::new(),
        }
    }

    #[test]
    fn sensitivity_takes_the_worst_probe_per_resource() {
        let stopped = Outcome::Stopped {
            after_ms: 200,
            reason: "x".into(),
        };
        let rows = [
            probe_row(Probe::HogIdlePartner, Outcome::Measured, 0.01),
            probe_row(Probe::HogPartner, Outcome::Measured, 0.03),
            probe_row(Probe::StreamPartner, Outcome::Measured, 0.40),
            probe_row(Probe::HogIdleOwn, Outcome::Measured, 0.08),
            probe_row(Probe::HogOwn, stopped, 0.5),
        ];
        let s = sensitivity(&rows, 3.0);
        assert_eq!(s.len(), 3);
        assert_eq!(
            (s[0].resource, s[0].probe, s[0].stopped),
            (Resource::CpuOwnLane, Probe::HogOwn, true)
        );
        assert!(
            (s[0].contention - 2.0).abs() < 1e-12,
            "stopped: at least ×3"
        );
        assert_eq!(
            (s[1].resource, s[1].probe),
            (Resource::CacheMemory, Probe::StreamPartner)
        );
        assert_eq!(
            (s[2].resource, s[2].probe),
            (Resource::CpuPartnerLane, Probe::HogPartner)
        );
        let p = predicted(&rows, 0.10, 3.0);
        assert!(p.contains("streamer") && p.contains("+40.0 %"), "{p}");
        assert!(p.contains("equal priority"), "{p}");
        let calm = [
            probe_row(Probe::HogIdlePartner, Outcome::Measured, 0.01),
            probe_row(Probe::StreamPartner, Outcome::Measured, 0.05),
        ];
        assert!(predicted(&calm, 0.10, 3.0).contains("static knob"));
    }

    fn knob(k: Knob, contention: f64, p99: Option<f64>, progress: f64, daemon_own: f64) -> KnobRow {
        let c = Contention {
            service: contention,
            response: 0.0,
            p99,
            p50: None,
        };
        let outcome = Outcome::Measured;
        KnobRow {
            knob: k,
            verdict: verdict(&outcome, Some(&c), 0.10),
            outcome,
            window: None,
            contention: Some(c),
            progress: Some(progress),
            daemon_cpu_lanes: Some(daemon_own + 0.1),
            daemon_own_lanes: Some(daemon_own),
            config: None,
            daemon_pid: None,
            daemon_log: Vec::new(),
        }
    }

    #[test]
    fn the_recommendation_is_the_cheapest_knob_within_the_threshold() {
        let rows = vec![
            knob(Knob::Idle, 0.35, None, 1.0, 0.001), // over: cheapest, but hurts
            knob(Knob::Guard, 0.02, Some(0.05), 0.70, 0.03),
            knob(Knob::Blind, 0.08, Some(0.12), 0.85, 0.01), // p99 over
            knob(Knob::Freeze, 0.04, None, 0.60, 0.25),
            knob(Knob::BorrowIdle, 0.05, None, 0.75, 0.005),
        ];
        assert_eq!(rows[0].verdict, Verdict::Over);
        assert_eq!(rows[2].verdict, Verdict::Over, "p99 ×1.12");
        // net: guard 0.9*0.70 - 0.03 = 0.60; freeze 0.29; borrow_idle 0.67
        let (k, why) = recommend(&rows, 0.10, 0.9);
        assert_eq!(k, Some(Knob::BorrowIdle), "{why}");
        assert!(
            why.starts_with("borrow_idle keeps the LC within +10.0 %"),
            "{why}"
        );
        assert!(why.contains("of the 3 knobs within"), "{why}");
        // a tie within 0.02 lanes goes to the lower daemon CPU
        let rows = vec![
            knob(Knob::Guard, 0.02, None, 0.80, 0.030),
            knob(Knob::BorrowIdle, 0.02, None, 0.81, 0.045),
        ];
        // net: guard 0.77, borrow_idle 0.765: a tie
        let (k, why) = recommend(&rows, 0.10, 1.0);
        assert_eq!(k, Some(Knob::Guard), "{why}");
        assert!(why.contains("borrow_idle leaves as much"), "{why}");
    }

    #[test]
    fn no_recommendation_when_no_knob_is_within() {
        let mut stopped = knob(Knob::Guard, 5.0, None, 0.5, 0.02);
        stopped.outcome = Outcome::Stopped {
            after_ms: 100,
            reason: "x".into(),
        };
        stopped.verdict = verdict(&stopped.outcome, stopped.contention.as_ref(), 0.10);
        assert_eq!(stopped.verdict, Verdict::Stopped);
        let rows = vec![
            knob(Knob::Idle, 0.35, None, 1.0, 0.001),
            knob(Knob::Blind, 0.20, None, 0.8, 0.01),
            stopped,
        ];
        let (k, why) = recommend(&rows, 0.10, 1.0);
        assert_eq!(k, None);
        assert!(why.contains("least contended was blind (+20.0 %)"), "{why}");
        let all_stopped: Vec<KnobRow> = rows
            .iter()
            .filter(|r| r.knob == Knob::Guard)
            .cloned()
            .collect();
        let (k, why) = recommend(&all_stopped, 0.10, 1.0);
        assert_eq!(k, None);
        assert!(
            why.contains("every knob that ran (guard) pushed it past"),
            "{why}"
        );
        let not_run = KnobRow {
            outcome: Outcome::NotRun {
                reason: "not offered here".into(),
            },
            verdict: Verdict::NotRun,
            ..knob(Knob::Blind, 0.0, None, 0.0, 0.0)
        };
        let (k, why) = recommend(&[not_run], 0.10, 1.0);
        assert_eq!(k, None);
        assert!(why.contains("no knob was measured"), "{why}");
    }

    #[test]
    fn other_load_is_what_the_known_parts_do_not_explain() {
        let mut x = w(400, 0, 100);
        x.machine_busy_ns = 1_500_000_000;
        x.steal_ns = 100_000_000;
        x.advise_cpu_ns = 50_000_000;
        x.batch = Some(crate::record::BatchWindow {
            units: 1,
            cpu_ns: 800_000_000,
        });
        // 1.5 s busy − 0.4 LC − 0.8 batch − 0.05 advise + 0.1 steal
        assert!((other_lanes(&x) - 0.35).abs() < 1e-9, "{}", other_lanes(&x));
    }

    #[test]
    fn verdicts() {
        let c = Contention {
            service: 0.05,
            response: 0.02,
            p99: Some(0.09),
            p50: None,
        };
        assert_eq!(verdict(&Outcome::Measured, Some(&c), 0.10), Verdict::Within);
        assert_eq!(verdict(&Outcome::Measured, Some(&c), 0.08), Verdict::Over);
        assert_eq!(verdict(&Outcome::Measured, None, 0.10), Verdict::NotRun);
        let nr = Outcome::NotRun { reason: "r".into() };
        assert_eq!(verdict(&nr, Some(&c), 0.10), Verdict::NotRun);
    }
}
