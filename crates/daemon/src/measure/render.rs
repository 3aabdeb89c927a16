//! The table `elfen daemon measure` prints, read from the report's
//! [`Summary`](super::Summary).

use super::{MeasureReport, PhaseSummary};
use elfen_results::Stat;

fn us(s: Option<Stat>) -> String {
    s.map_or("-".into(), |s| format!("{:.1} µs", s.median / 1000.0))
}

fn pct(s: Stat) -> String {
    format!("{:.2} %", s.median)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// The table of a report, with the targets' verdicts.
pub fn render(r: &MeasureReport) -> String {
    let sum = &r.summary;
    let mut s = format!(
        "source: {}\n{} run(s), {} ms windows; load average before {:.2}, after {:.2}\n\n",
        r.source,
        r.runs.len(),
        r.params.window_ms,
        r.load_before[0],
        r.load_after[0]
    );
    s += &format!(
        "{:<8} {:>9} {:>9} {:>10} {:>13} {:>13} {:>13} {:>13}\n",
        "phase",
        "LC busy",
        "batch",
        "overhead",
        "off-lane p50",
        "off-lane p99",
        "occupy p50",
        "occupy p99"
    );
    let phases: [(&str, &Option<PhaseSummary>); 5] = [
        ("zero", &sum.zero),
        ("half", &sum.half),
        ("freeze", &sum.freeze),
        ("blind-ev", &sum.blind_events),
        ("blind-po", &sum.blind_polled),
    ];
    for (name, p) in phases {
        let Some(p) = p else { continue };
        s += &format!(
            "{name:<8} {:>9} {:>9} {:>10} {:>13} {:>13} {:>13} {:>13}\n",
            pct(p.lc_busy_pct),
            pct(p.batch_pct),
            pct(p.overhead_pct),
            us(p.off_lane_p50_ns),
            us(p.off_lane_p99_ns),
            us(p.step_aside_p50_ns),
            us(p.step_aside_p99_ns),
        );
    }
    if let Some(h) = &sum.half
        && let Some(p99) = h.off_lane_p99_ns
    {
        s += &format!(
            "\nstep-aside (batch thread off the lane) p99 {:.1} µs (target <= 50 µs: {}); \
             the guard occupies it by p99 {}\n",
            p99.median / 1000.0,
            verdict(p99.median <= 50_000.0),
            us(h.step_aside_p99_ns)
        );
    }
    for (name, p) in &phases[..2] {
        if let Some(p) = p {
            let o = p.overhead_pct.median;
            s += &format!(
                "daemon CPU at {name} load {o:.2} % of a lane (target <= 2 %: {})\n",
                verdict(o <= 2.0)
            );
        }
    }
    if let Some(h) = &sum.half {
        let window_ns = r.params.window_ms as f64 * 1e6;
        let share = |ns: f64| ns * 100.0 / window_ns;
        s += &format!(
            "at half load, besides that own work: the lane occupied while the LC was busy {:.2} % \
             (the protection), held through its idle gaps {:.2} % (lane time batch did not get)\n",
            share(h.occupied_ns.median),
            share(h.held_ns.map_or(0.0, |x| x.median))
        );
    }
    if let Some(c) = sum.wake_charge_ns {
        s += &format!(
            "the machine's charge per wake-up of a thread on the batch lane from the request \
             lane: {:.1} µs (a thread that does nothing else)\n",
            c.median / 1000.0
        );
        if let Some(h) = &sum.half
            && let Some(pct) = h.busy_edge_charge_pct
        {
            let o = h.overhead_pct.median;
            s += &format!(
                "at half load the busy edges' wake-ups of the writer cost {:.2} % of the lane at \
                 that charge; the daemon's own work {:.2} % (of the {o:.2} % overhead)\n",
                pct.median,
                (o - pct.median).max(0.0)
            );
        }
    }
    if let Some(f) = &sum.freeze
        && f.freeze_p50_ns.is_some()
    {
        s += &format!(
            "freeze mode: freeze p50 {} p99 {}, thaw p50 {}; busy edge → frozen p50 {} p99 {}\n",
            us(f.freeze_p50_ns),
            us(f.freeze_p99_ns),
            us(f.thaw_p50_ns),
            us(f.step_aside_p50_ns),
            us(f.step_aside_p99_ns)
        );
    }
    if let Some(e) = &sum.blind_events {
        let p99 = e.reaction_p99_ns;
        s += &format!(
            "blind isolation, LC switch-in → its CPU taken from batch: woken at busy edges \
             p50 {} p99 {} (target p99 <= 100 µs: {})",
            us(e.reaction_p50_ns),
            us(p99),
            p99.map_or("no sample", |p| verdict(p.median <= 100_000.0))
        );
        if let Some(q) = &sum.blind_polled {
            s += &format!(
                "; polling every {} µs p50 {} p99 {}",
                r.params.blind_poll_us,
                us(q.reaction_p50_ns),
                us(q.reaction_p99_ns)
            );
        }
        s += "\n";
    }
    s + "(medians over runs; every run is in the JSON. off-lane: LC switch-in → the daemon's \
         SCHED_FIFO writer running on the batch lane to publish the busy edge (when the LC's \
         wake-up announced it, that may be before the switch-in: then 0); occupy and the freeze \
         row: the published busy edge (the wake-up when announced) → the guard running there, \
         → the group frozen; blind: 0 when the wake-up announced the LC and its CPU was taken \
         before the switch-in)\n"
}
