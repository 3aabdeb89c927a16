//! The text report: what was traced, the causes over the slow requests,
//! and each slow request with its causes.

use crate::record::SpanSource;
use crate::report::{CauseKind, TraceReport};
use std::fmt::Write;

fn ms(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// The report as text; at most `shown` slow requests are listed.
pub fn text(r: &TraceReport, shown: usize) -> String {
    let mut s = String::new();
    what_was_traced(&mut s, r);
    cause_table(&mut s, r);
    slowest(&mut s, r, shown);
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// What was traced: the target, the signals, the requests and their
/// latency, the run's JVM pauses, faults, TCP holds and JIT.
fn what_was_traced(s: &mut String, r: &TraceReport) {
    let _ = writeln!(
        s,
        "elfen trace: {} (process {}), {:.1} s",
        r.target,
        r.tgids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        r.duration_ns as f64 / 1e9
    );
    if let Some(t) = &r.lc_thread {
        let _ = writeln!(s, "LC thread: {t}");
    }
    let recorded: Vec<&str> = r
        .signals
        .iter()
        .filter(|x| x.skipped.is_none())
        .map(|x| x.signal.name())
        .collect();
    let _ = writeln!(s, "signals recorded: {}", recorded.join(", "));
    for x in r.signals.iter().filter(|x| x.skipped.is_some()) {
        let _ = writeln!(
            s,
            "  not recorded: {} — {}",
            x.signal.name(),
            x.skipped.as_deref().unwrap_or("")
        );
    }
    if r.lost > 0 {
        let _ = writeln!(
            s,
            "LOST: {} kernel records (the ring buffer was full)",
            r.lost
        );
    }
    let src = match &r.span_source {
        SpanSource::Page { page, lane } => format!("the LC line of lane {lane} of {page}"),
        SpanSource::None => "the client's spans".into(),
    };
    let _ = writeln!(
        s,
        "requests: {} from {src}{}; latency {}: p50 {}, p99 {}, max {}",
        r.requests,
        if r.client_spans && matches!(r.span_source, SpanSource::Page { .. }) {
            " joined to the client's spans"
        } else {
            ""
        },
        if r.client_spans {
            "(client: intended send → response)"
        } else {
            "(begin → response leaving)"
        },
        ms(r.latency.p50_ns),
        ms(r.latency.p99_ns),
        ms(r.latency.max_ns)
    );
    let f = &r.facts;
    let _ = writeln!(
        s,
        "run: {} JVM pauses ({} total, longest {}); {} page faults of the LC thread ({} total, {} huge, longest {}); \
         {} TCP holds ({} total, {} with the peer's delayed ACK); JIT {}",
        f.jvm_pauses,
        ms(f.jvm_pause_ns),
        ms(f.jvm_pause_max_ns),
        f.faults,
        ms(f.fault_ns),
        f.huge_faults,
        ms(f.fault_max_ns),
        f.tcp_holds,
        ms(f.tcp_hold_ns),
        f.delayed_acks,
        ms(f.jit_ns)
    );
}

/// The causes over the slow requests: how often each was named, top cause
/// and top hazard, and its total time.
fn cause_table(s: &mut String, r: &TraceReport) {
    let _ = writeln!(
        s,
        "\n{} requests above p{} ({}); a cause is named when ≥ {}% of the latency and ≥ {}:",
        r.slow.len(),
        r.params.above_pct,
        ms(r.threshold_ns),
        r.params.min_share_pct,
        ms(r.params.min_cause_ns)
    );
    let _ = writeln!(
        s,
        "  {:<20} {:>10} {:>10} {:>12} {:>12}",
        "cause", "named in", "top cause", "top hazard", "total"
    );
    for c in &r.counts {
        if c.attributed == 0 && c.top == 0 && c.hazard_top == 0 {
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<20} {:>10} {:>10} {:>12} {:>12}{}",
            c.kind.label(),
            c.attributed,
            c.top,
            if c.kind.is_hazard() {
                c.hazard_top.to_string()
            } else {
                "-".into()
            },
            ms(c.total_ns),
            if c.kind.is_parallel() {
                "  (beside the request)"
            } else {
                ""
            }
        );
    }
    let hazards: Vec<String> = CauseKind::ALL
        .into_iter()
        .filter(|k| k.is_hazard())
        .map(|k| format!("{} {}", k.label(), r.count(k).hazard_top))
        .collect();
    let _ = writeln!(
        s,
        "hazards (top hazard of each slow request, own or of the request it queued behind): {}",
        hazards.join(", ")
    );
}

/// The `shown` slowest requests, each with its causes.
fn slowest(s: &mut String, r: &TraceReport, shown: usize) {
    if !r.slow.is_empty() {
        let _ = writeln!(s, "\nslowest:");
    }
    for q in r.slow.iter().take(shown) {
        let _ = writeln!(
            s,
            "  #{} {} at +{:.3} s{}",
            q.id,
            ms(q.latency_ns),
            q.at_ns as f64 / 1e9,
            match (q.top_hazard, q.root_hazard) {
                (Some(h), _) => format!("  [{}]", h.label()),
                (None, Some(h)) => format!("  [queued behind a request hit by {}]", h.label()),
                _ => String::new(),
            }
        );
        for c in q.causes.iter().filter(|c| c.share_pct >= 1.0).take(6) {
            let _ = writeln!(
                s,
                "      {:>5.1}% {:<20} {}{}",
                c.share_pct,
                c.kind.label(),
                c.text,
                if c.attributed {
                    ""
                } else {
                    " (not named: small)"
                }
            );
        }
    }
    if r.slow.len() > shown {
        let _ = writeln!(s, "  … {} more in the JSON report", r.slow.len() - shown);
    }
}
