//! The **format** side: the tables and the recommendation from an
//! [`AdviseResult`] alone (the terminal output, and what `--json` files
//! can be printed again with).

use crate::record::{AdviseResult, Outcome, Reference, Window};
use crate::study;
use std::fmt::Write;

fn ratio(x: Option<f64>) -> String {
    x.map_or("–".into(), |c| format!("×{:.2}", 1.0 + c))
}

fn pct_or_dash(x: Option<f64>) -> String {
    x.map_or("–".into(), study::pct)
}

/// Other processes' and the host's share of the window, lanes.
fn other(w: Option<&Window>) -> String {
    w.filter(|w| w.wall_ns > 0)
        .map_or("–".into(), |w| format!("{:.2}", study::other_lanes(w)))
}

/// One line for a finished probe or knob (the progress line).
pub fn outcome_line(o: &Outcome, w: Option<&Window>, r: &Reference) -> String {
    match (o, w) {
        (Outcome::NotRun { reason }, _) => format!("not run: {reason}"),
        (Outcome::Stopped { after_ms, reason }, _) => {
            format!("STOPPED after {after_ms} ms: {reason}")
        }
        (Outcome::Measured, Some(w)) => {
            let c = study::contention(w, r);
            format!(
                "service {}, response {}{}",
                study::pct(c.service),
                study::pct(c.response),
                c.p99
                    .map_or(String::new(), |p| format!(", p99 ×{:.2}", 1.0 + p))
            )
        }
        (Outcome::Measured, None) => "measured".into(),
    }
}

fn outcome_word(o: &Outcome) -> String {
    match o {
        Outcome::Measured => "measured".into(),
        Outcome::Stopped { after_ms, reason } => {
            format!("STOPPED after {after_ms} ms: {reason}")
        }
        Outcome::NotRun { reason } => format!("not run: {reason}"),
    }
}

/// The whole report.
pub fn render(r: &AdviseResult) -> String {
    let mut s = String::new();
    let p = &r.params;
    let _ = writeln!(s, "elfen advise: {}", p.target);
    if let Some(lc) = &r.lc {
        let _ = writeln!(
            s,
            "LC: pid {} ({}), request lane cpu {}, partner cpu {}; pairs {}\nkernel signal: {}",
            elfen_topo::format_cpu_list(&lc.pids),
            lc.comm.as_deref().unwrap_or("?"),
            lc.request_cpu,
            elfen_topo::format_cpu_list(&lc.batch_cpus),
            lc.pairs,
            lc.signal
        );
    }
    if let Some(rf) = &r.reference {
        let _ = writeln!(
            s,
            "alone ({} windows of {:.1} s): busy {:.1} % of a lane, {:.0} µs per busy period, \
             {:.0} periods/s, {:.0} µs on-CPU + wait per run{}",
            r.solo.len(),
            p.window_s,
            100.0 * rf.cpu_per_s,
            rf.busy_per_period_us,
            rf.periods_per_s,
            rf.response_us,
            match (rf.p50_us, rf.p99_us) {
                (Some(a), Some(b)) => format!("; probe latency p50 {a:.0} µs, p99 {b:.0} µs"),
                _ => "; latency not known (no --latency-probe)".into(),
            }
        );
    }
    let _ = writeln!(
        s,
        "\nsensitivity per resource (res_cont = co-run / alone − 1; service = on-CPU per unit \
         of load, response = on-CPU + run-queue wait per run; other = lanes taken by other \
         processes and the host):"
    );
    let _ = writeln!(
        s,
        "  {:<17} {:>9} {:>9} {:>7} {:>6}  co-runner / outcome",
        "probe", "service", "response", "p99", "other"
    );
    for row in &r.probes {
        let c = row.contention;
        let _ = writeln!(
            s,
            "  {:<17} {:>9} {:>9} {:>7} {:>6}  {}{}",
            row.probe.name(),
            pct_or_dash(c.map(|c| c.service)),
            pct_or_dash(c.map(|c| c.response)),
            ratio(c.and_then(|c| c.p99)),
            other(row.window.as_ref()),
            row.probe.describe(),
            match &row.outcome {
                Outcome::Measured => String::new(),
                o => format!(" — {}", outcome_word(o)),
            }
        );
    }
    for sens in &r.sensitivity {
        let _ = writeln!(
            s,
            "  → {}: {} ({}{})",
            sens.resource.describe(),
            study::pct(sens.contention),
            sens.probe.name(),
            if sens.stopped { ", stopped" } else { "" }
        );
    }
    if !r.knobs.is_empty() {
        let _ = writeln!(
            s,
            "\nknobs ({} batch under elfen daemon; threshold {}; progress relative to the same \
             kernel at SCHED_IDLE on the partner lane without a daemon):",
            p.batch_kernel,
            study::pct(p.threshold)
        );
        let _ = writeln!(
            s,
            "  {:<16} {:>10} {:>9} {:>9} {:>17} {:>6}  verdict",
            "knob", "contention", "p99 ratio", "progress", "daemon CPU (own)", "other"
        );
        for k in &r.knobs {
            let c = k.contention;
            let daemon = match (k.daemon_cpu_lanes, k.daemon_own_lanes) {
                (Some(a), Some(b)) => format!("{:.1} % ({:.1} %)", 100.0 * a, 100.0 * b),
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "  {:<16} {:>10} {:>9} {:>9} {:>17} {:>6}  {}",
                k.knob.name(),
                pct_or_dash(c.map(|c| c.headline())),
                ratio(c.and_then(|c| c.p99)),
                k.progress.map_or("–".into(), |x| format!("{x:.2}")),
                daemon,
                other(k.window.as_ref()),
                match &k.outcome {
                    Outcome::Measured => k.verdict.word().to_string(),
                    o => outcome_word(o),
                }
            );
        }
    }
    if let Some(rec) = &r.recommendation {
        let _ = writeln!(s, "\npredicted from the probes: {}", rec.predicted);
        match rec.knob {
            Some(k) => {
                let _ = writeln!(s, "recommended: {} — {}", k.name(), k.describe());
            }
            None => {
                let _ = writeln!(s, "recommended: none");
            }
        }
        let _ = writeln!(s, "why: {}", rec.reason);
    }
    let o = &r.offered;
    let _ = writeln!(s, "\nthis machine:");
    for (what, a) in [
        ("SMT", &o.smt),
        ("counters", &o.counters),
        ("CAT", &o.cat),
        ("MBA", &o.mba),
        ("MBM", &o.mbm),
    ] {
        let _ = writeln!(s, "  {what}: {}", a.detail);
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(
        s,
        "\ntotal time {:.1} s{}",
        r.wall_s,
        if r.interrupted { " (ended early)" } else { "" }
    );
    s
}
