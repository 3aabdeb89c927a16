//! The table `elfen micro` prints, from a result file alone
//! ([`crate::report::MicroReport`]).

use crate::report::{LatencyPair, MicroReport};
use crate::stats::Stat;
use std::fmt::Write as _;

/// `median [min–max]` (just the median when min and max print alike).
fn fs(s: &Stat, scale: f64, prec: usize) -> String {
    if s.median.is_nan() {
        return "–".into();
    }
    let (m, lo, hi) = (s.median * scale, s.min * scale, s.max * scale);
    let one = format!("{m:.prec$}");
    if format!("{lo:.prec$}") == format!("{hi:.prec$}") {
        one
    } else {
        format!("{one} [{lo:.prec$}–{hi:.prec$}]")
    }
}

fn pct(s: &Stat) -> String {
    fs(s, 100.0, 1) + " %"
}

fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let mut s = String::from("|");
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            s.push(' ');
            s.push_str(c);
            s.push_str(&" ".repeat(pad));
            s.push_str(" |");
        }
        s
    };
    let _ = writeln!(
        out,
        "{}",
        line(header.iter().map(|h| h.to_string()).collect())
    );
    let _ = writeln!(
        out,
        "|{}",
        w.iter()
            .map(|n| "-".repeat(n + 2) + "|")
            .collect::<String>()
    );
    for r in rows {
        let _ = writeln!(out, "{}", line(r.clone()));
    }
}

fn latency_rows(name: &str, p: &LatencyPair) -> Vec<String> {
    let us = 1e-3;
    let u = p.undisturbed.as_ref();
    vec![
        name.to_string(),
        format!("{:.0}", p.all.samples),
        pct(&p.disturbed_fraction),
        pct(&p.all.over_2us_fraction),
        fs(&p.all.p50_ns, us, 2),
        fs(&p.all.p99_ns, us, 2),
        fs(&p.all.p999_ns, us, 2),
        u.map_or("–".into(), |u| fs(&u.p50_ns, us, 2)),
        u.map_or("–".into(), |u| fs(&u.p99_ns, us, 2)),
        u.map_or("–".into(), |u| fs(&u.p999_ns, us, 2)),
    ]
}

const LAT_HEADER: [&str; 10] = [
    "backend",
    "samples/run",
    "disturbed",
    "> 2 µs",
    "p50 all",
    "p99 all",
    "p99.9 all",
    "p50 undist.",
    "p99 undist.",
    "p99.9 undist.",
];

/// The table, as printed by `elfen micro`.
pub fn render(r: &MicroReport) -> String {
    let mut o = String::new();
    header(&mut o, r);
    pauses(&mut o, r);
    latencies(&mut o, r);
    fast_path(&mut o, r);
    overhead(&mut o, r);
    stream(&mut o, r);
    targets(&mut o, r);
    o
}

/// How an overhead row's checks were made.
fn checks_label(implementation: &str) -> &'static str {
    match implementation {
        "c" => "C -finstrument-functions",
        "c-fentry" => "C -pg -mfentry",
        _ => "Rust BatchThread::check",
    }
}

fn header(o: &mut String, r: &MicroReport) {
    let s = &r.summary;
    let _ = writeln!(
        o,
        "elfen micro — {} run(s){}; request lane cpu {} ↔ batch lane cpu {} ({}); clock {} at {:.3} GHz; load average {:.2} before; other processes used {:.1} % of the CPU time during the run",
        s.runs,
        if r.params.quick {
            ", QUICK (not for quoting)"
        } else {
            ""
        },
        r.lanes.request_cpu,
        r.lanes.batch_cpu,
        r.lanes.pairing,
        r.clock.kind,
        r.clock.ticks_per_sec as f64 / 1e9,
        r.load_before[0],
        r.others_busy_fraction * 100.0,
    );
    let _ = writeln!(
        o,
        "Figures: median [min–max] {}.",
        if s.runs > 1 {
            "over runs (latency percentiles: of each run's percentile; A/B figures: of each run's median over its repetitions)"
        } else {
            "(A/B figures: over repetitions)"
        }
    );
}

fn pauses(o: &mut String, r: &MicroReport) {
    let s = &r.summary;
    let _ = writeln!(
        o,
        "\nHost pauses (clock gaps > {} µs seen from inside each lane, {:.1} s watched per run):",
        r.params.toggle.disturb_ns as f64 / 1000.0,
        r.params.pauses_ms as f64 / 1000.0
    );
    let rows: Vec<Vec<String>> = s
        .host_pauses
        .iter()
        .map(|l| {
            vec![
                format!("{} (cpu {})", l.lane, l.cpu),
                fs(&l.pauses_per_s, 1.0, 0),
                pct(&l.paused_fraction),
                fs(&l.pause_p50_ns, 1e-3, 1),
                fs(&l.pause_max_ns, 1e-3, 1),
            ]
        })
        .collect();
    table(
        o,
        &[
            "lane",
            "pauses/s",
            "time paused",
            "pause p50 µs",
            "pause max µs",
        ],
        &rows,
    );
}

fn latencies(o: &mut String, r: &MicroReport) {
    let s = &r.summary;
    let _ = writeln!(
        o,
        "\nStep-aside latency, µs: LC request_begin() → the LC sees the batch line's `napping` ≥ 1 ({} toggles/backend; 'undist.' leaves out samples with a clock gap > {} µs)",
        r.params.toggle.toggles,
        r.params.toggle.disturb_ns as f64 / 1000.0
    );
    let mut rows = Vec::new();
    let mut unavailable = Vec::new();
    for b in &s.backends {
        match &b.step_aside {
            Some(p) => rows.push(latency_rows(&b.backend, p)),
            None => unavailable.push(format!("{}: unavailable — {}", b.backend, b.reason)),
        }
    }
    table(o, &LAT_HEADER, &rows);
    let _ = writeln!(
        o,
        "\nWake latency, µs: LC request_end() (incl. its futex wake) → the batch thread runs batch code again"
    );
    let mut rows = Vec::new();
    for b in &s.backends {
        if let Some(p) = &b.wake {
            rows.push(latency_rows(&b.backend, p));
            let osf = b.os_wake_fraction.map(|x| x.median).unwrap_or(0.0);
            if (0.01..=0.99).contains(&osf) {
                if let Some(p) = &b.wake_from_spin {
                    rows.push(latency_rows(
                        &format!(
                            "  {} woken from spin ({:.0} %)",
                            b.backend,
                            (1.0 - osf) * 100.0
                        ),
                        p,
                    ));
                }
                if let Some(p) = &b.wake_from_os {
                    rows.push(latency_rows(
                        &format!("  {} woken from futex ({:.0} %)", b.backend, osf * 100.0),
                        p,
                    ));
                }
            }
        }
    }
    table(o, &LAT_HEADER, &rows);
    for u in &unavailable {
        let _ = writeln!(o, "{u}");
    }
}

fn fast_path(o: &mut String, r: &MicroReport) {
    let s = &r.summary;
    let _ = writeln!(
        o,
        "\nFast path, ns per check (tight loop with the check − the same loop without; request lane idle):"
    );
    let mut rows = vec![vec![
        "Rust BatchThread::check()".to_string(),
        fs(&s.fast_path_rust_ns_per_check, 1.0, 2),
    ]];
    rows.push(vec![
        "C elfen_check() (elfen.h)".to_string(),
        s.fast_path_c_ns_per_check
            .map(|x| fs(&x, 1.0, 2))
            .unwrap_or_else(|| {
                format!("unavailable: {}", s.c_unavailable.as_deref().unwrap_or("?"))
            }),
    ]);
    table(o, &["check", "ns/check"], &rows);
}

fn overhead(o: &mut String, r: &MicroReport) {
    let s = &r.summary;
    let _ = writeln!(
        o,
        "\nInstrumentation overhead (checked vs the same kernel without checks; request lane idle):"
    );
    let rows: Vec<Vec<String>> = s
        .overhead
        .iter()
        .map(|x| {
            vec![
                x.kernel.to_string(),
                checks_label(&x.implementation).to_string(),
                fs(&x.unchecked_units_per_s, 1e-6, 2),
                fs(&x.checked_units_per_s, 1e-6, 2),
                fs(&x.overhead_pct, 1.0, 2) + " %",
            ]
        })
        .collect();
    table(
        o,
        &[
            "kernel",
            "checks",
            "unchecked Munits/s",
            "checked Munits/s",
            "overhead",
        ],
        &rows,
    );
    if let Some(c) = &s.c_unavailable {
        let _ = writeln!(o, "C kernels: unavailable — {c}");
    }
}

fn stream(o: &mut String, r: &MicroReport) {
    let s = &r.summary;
    let _ = writeln!(
        o,
        "\nStream interference: a pointer chase on the request lane (huge pages where allowed) next to Loop (compute only: the baseline) or Stream on the batch lane:"
    );
    let rows: Vec<Vec<String>> = s
        .stream_sizes
        .iter()
        .map(|z| {
            vec![
                format!("{:.1} MB", z.chase_bytes as f64 / (1 << 20) as f64),
                fs(&z.baseline_ns_per_hop, 1.0, 1),
                format!("×{}", fs(&z.plain_slowdown, 1.0, 2)),
                format!("×{}", fs(&z.non_temporal_slowdown, 1.0, 2)),
            ]
        })
        .collect();
    table(
        o,
        &[
            "chase",
            "baseline ns/hop",
            "slowdown, plain stores",
            "slowdown, non-temporal stores",
        ],
        &rows,
    );
    let _ = writeln!(
        o,
        "largest slowdown over sizes: plain ×{}, non-temporal ×{} → {} (kernels' default: {}); geometric mean over sizes: plain ×{}, non-temporal ×{}",
        fs(&s.stream_plain_slowdown_max, 1.0, 3),
        fs(&s.stream_non_temporal_slowdown_max, 1.0, 3),
        match s.stream_worse {
            Some(m) => format!("worse: {m}"),
            None => format!(
                "neither is measurably worse (they differ by less than {:.0} %)",
                crate::interference::MEASURABLE * 100.0
            ),
        },
        s.stream_default,
        fs(&s.stream_plain_slowdown_geomean, 1.0, 3),
        fs(&s.stream_non_temporal_slowdown_geomean, 1.0, 3),
    );
}

fn targets(o: &mut String, r: &MicroReport) {
    let s = &r.summary;
    let _ = writeln!(
        o,
        "\nTargets (medians; latency targets also over undisturbed samples):"
    );
    let verdict = |m: Option<bool>| match m {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "–",
    };
    let rows: Vec<Vec<String>> = s
        .targets
        .iter()
        .map(|t| {
            let v = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.2} {}", t.unit));
            vec![
                t.figure.clone(),
                t.target.clone(),
                v(t.measured),
                verdict(t.met).into(),
                v(t.measured_undisturbed),
                verdict(t.met_undisturbed).into(),
            ]
        })
        .collect();
    table(
        o,
        &["figure", "target", "measured (all)", "", "undisturbed", ""],
        &rows,
    );
}
