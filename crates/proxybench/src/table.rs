//! The bench's record as markdown, written beside its JSON: with a ladder,
//! **the thesis's table, ours** — client-observed p99 and max at each step
//! (every hazard on, each fixed in turn as the profiler ranked them, the
//! kept ones behind the proxy and a timeout hedge), the proxy's added
//! latency, hedge rate and the backup's extra work, `elfen trace`'s
//! overhead and trace volume — then every (variant, way).

use crate::ladder::LadderRecord;
use crate::record::{BenchRecord, WaySummary};
use crate::spec::Way;
use elfen_results::Stat;
use std::fmt::Write;

fn ms(s: &Stat) -> String {
    if s.median.is_nan() {
        return "–".into();
    }
    format!(
        "{:.2} ({:.2}–{:.2})",
        s.median / 1e3,
        s.min / 1e3,
        s.max / 1e3
    )
}

fn added(p50: &Option<Stat>, p99: &Option<Stat>) -> String {
    match (p50, p99) {
        (Some(a), Some(b)) => format!(
            "{:+.0} ({:+.0}…{:+.0}) / {:+.0} ({:+.0}…{:+.0})",
            a.median, a.min, a.max, b.median, b.min, b.max
        ),
        _ => "–".into(),
    }
}

fn opt(s: &Option<Stat>, scale: f64, digits: usize) -> String {
    s.as_ref()
        .map_or("–".into(), |s| format!("{:.*}", digits, s.median * scale))
}

/// The backup's extra work of one (variant, way): requests served twice
/// (their service time) and warm-ups, replica B's busy time.
fn extra(s: &WaySummary) -> String {
    if s.way == Way::Alone {
        return "–".into();
    }
    format!(
        "{} twice ({} ms), {} warm-ups; B busy {} ms",
        opt(&s.duplicate_work, 1.0, 0),
        opt(&s.duplicate_work_ms, 1.0, 1),
        opt(&s.warmups, 1.0, 0),
        opt(&s.backup_busy_ms, 1.0, 1)
    )
}

/// The markdown of `r`.
pub fn markdown(r: &BenchRecord) -> String {
    let mut m = String::new();
    let sp = &r.spec;
    let _ = writeln!(m, "# elfen proxy bench\n");
    let _ = writeln!(
        m,
        "Service `{}` ({}), {} rps open loop (Poisson), {} invocation(s) of {} s per way (+{} s warm-up), \
         ways interleaved per round; load average {:.2} before, {:.2} after{}. Client-observed latency \
         from the intended send time; median (min–max) over invocations.\n",
        sp.service.command,
        serde_json::to_string(&sp.service.requests)
            .unwrap_or_default()
            .trim_matches('"'),
        sp.load.rps,
        sp.load.invocations,
        sp.load.duration_s,
        sp.load.warmup_s,
        r.loadavg[0][0],
        r.loadavg[1][0],
        if r.interrupted {
            "; interrupted (the rounds done)"
        } else {
            ""
        }
    );
    if let Some(l) = &r.ladder {
        ladder_steps(&mut m, r, l);
        let _ = writeln!(m);
        ladder_traces(&mut m, l);
        trace_overhead(&mut m, l);
        let _ = writeln!(m);
    }
    variants_table(&mut m, r);
    m
}

/// The thesis's table: each step of the ladder, its hazards and ways, and
/// what was fixed next (and why).
fn ladder_steps(m: &mut String, r: &BenchRecord, l: &LadderRecord) {
    let _ = writeln!(m, "## The thesis's table, ours\n");
    let _ = writeln!(
        m,
        "| step | hazards on | way | p99 ms | max ms | hedged % | added p50 / p99 µs vs alone | backup's extra work | fixed next |"
    );
    let _ = writeln!(m, "|---|---|---|---|---|---|---|---|---|");
    for st in &l.steps {
        let rows: Vec<&WaySummary> = r
            .summary
            .iter()
            .filter(|s| s.variant == st.variant)
            .collect();
        let fixed = match (&st.fixed_next, &st.chosen_by) {
            (Some(f), Some(by)) => {
                let why = st
                    .ranking
                    .iter()
                    .find(|x| &x.hazard == f && (x.hazard_top > 0 || x.attributed > 0))
                    .map(|x| {
                        format!(
                            ": the top hazard of {} slow requests, named in {}",
                            x.hazard_top, x.attributed
                        )
                    })
                    .unwrap_or_default();
                format!("{f} ({by}{why})")
            }
            _ => "– (kept: hidden by redundancy)".into(),
        };
        let on = if st.hazards.is_empty() {
            "none".into()
        } else {
            st.hazards.join(", ")
        };
        if rows.is_empty() {
            let _ = writeln!(m, "| {} | {on} | (not run) | | | | | | {fixed} |", st.step);
        }
        for (i, s) in rows.iter().enumerate() {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                if i == 0 {
                    st.step.to_string()
                } else {
                    String::new()
                },
                if i == 0 { on.as_str() } else { "" },
                s.way.name(),
                ms(&s.p99_us),
                ms(&s.max_us),
                opt(&s.hedge_rate, 100.0, 2),
                added(&s.added_p50_us, &s.added_p99_us),
                extra(s),
                if i == 0 { fixed.as_str() } else { "" },
            );
        }
    }
}

/// A line per traced step: what the trace saw and how it ranked hazards.
fn ladder_traces(m: &mut String, l: &LadderRecord) {
    for st in &l.steps {
        if let Some(t) = &st.trace {
            let ranks: Vec<String> = st
                .ranking
                .iter()
                .map(|x| {
                    format!(
                        "{} {}/{} ({:.1} ms)",
                        x.hazard, x.hazard_top, x.attributed, x.total_ms
                    )
                })
                .collect();
            let _ = writeln!(
                m,
                "- step {} traced ({:.1} s, {} requests, {} above p{}, p99 {:.2} ms, max {:.2} ms, \
                 {} kernel records, {} lost): `{}`; ranked above p{} (`{}`), hazards as \
                 top-hazard/named-in counts: {}",
                st.step,
                t.duration_s,
                t.requests,
                t.studied,
                l.spec.trace.above_pct,
                t.p99_ms,
                t.max_ms,
                t.records,
                t.lost,
                t.report,
                t.ranked_at_pct,
                t.ranking_report,
                ranks.join(", ")
            );
        }
    }
}

/// `elfen trace`'s overhead and trace volume, or that it was not measured.
fn trace_overhead(m: &mut String, l: &LadderRecord) {
    match &l.overhead {
        Some(o) => {
            let s = &o.summary;
            let _ = writeln!(
                m,
                "\n`elfen trace` overhead (the service with its hazards off, {} rps, {} × {:.0} s \
                 untraced and traced, alternating): p99 {:.1} µs untraced ({:.1}–{:.1}), {:.1} µs traced \
                 ({:.1}–{:.1}); traced/untraced p99 {:.2} ({:.2}–{:.2}); trace volume {:.0} kernel records/s, \
                 {:.1} KB/s of raw record.",
                o.params.rps,
                o.params.reps,
                o.params.duration_s,
                s.off_p99_us.median,
                s.off_p99_us.min,
                s.off_p99_us.max,
                s.on_p99_us.median,
                s.on_p99_us.min,
                s.on_p99_us.max,
                s.p99_ratio.median,
                s.p99_ratio.min,
                s.p99_ratio.max,
                s.records_per_s.median,
                s.bytes_per_s.median / 1e3
            );
        }
        None => {
            let _ = writeln!(m, "\n`elfen trace` overhead: not measured.");
        }
    }
}

/// Every (variant, way): latency percentiles, added latency, hedges, swaps,
/// the backup's extra work and errors.
fn variants_table(m: &mut String, r: &BenchRecord) {
    let sp = &r.spec;
    let _ = writeln!(m, "## Every variant and way\n");
    let _ = writeln!(
        m,
        "| variant | service args | way | p50 ms | p99 ms | p99.9 ms | max ms | added p50 / p99 µs vs alone | hedged % | swaps | backup's extra work | errors |"
    );
    let _ = writeln!(m, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for s in &r.summary {
        let args = sp
            .variants
            .iter()
            .find(|v| v.name == s.variant)
            .map(|v| v.args.clone())
            .unwrap_or_default();
        let _ = writeln!(
            m,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.variant,
            args,
            s.way.name(),
            ms(&s.p50_us),
            ms(&s.p99_us),
            ms(&s.p999_us),
            ms(&s.max_us),
            added(&s.added_p50_us, &s.added_p99_us),
            opt(&s.hedge_rate, 100.0, 2),
            opt(&s.swaps, 1.0, 0),
            extra(s),
            s.errors
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ladder::{HazardRank, LadderRecord, LadderStep, step_variant};
    use crate::record::tests::inv;
    use crate::record::{SCHEMA, summarize};
    use crate::spec::{BenchSpec, LadderSpec};
    use elfen_trace::report::CauseKind;

    fn step(k: usize, on: &[&str], fixed: Option<&str>) -> LadderStep {
        LadderStep {
            step: k,
            variant: format!("step{k}"),
            hazards: on.iter().map(|s| s.to_string()).collect(),
            fixed_next: fixed.map(String::from),
            chosen_by: fixed.map(|_| "profiler".into()),
            ranking: fixed
                .map(|f| HazardRank {
                    hazard: f.into(),
                    cause: CauseKind::PageFaults,
                    hazard_top: 3,
                    attributed: 5,
                    total_ms: 12.5,
                    removable: true,
                })
                .into_iter()
                .collect(),
            trace: None,
        }
    }

    #[test]
    fn the_ladder_table_has_a_row_per_step_and_way_and_says_what_was_not_run() {
        let l = LadderSpec::default();
        let mut spec = BenchSpec::default();
        let s0 = ["untouched-heap", "small-heap"].map(String::from);
        spec.variants.insert(0, step_variant(0, &s0, &[Way::Alone]));
        spec.variants
            .insert(1, step_variant(1, &s0[1..], &[Way::Alone, Way::Proxy]));
        let invocations = vec![
            inv("step0", Way::Alone, 0, 1000.0),
            inv("default", Way::Alone, 0, 100.0),
        ];
        let summary = summarize(&spec, &invocations);
        let r = BenchRecord {
            schema: SCHEMA.into(),
            spec,
            started_unix_s: 0,
            loadavg: [[1.0; 3], [2.0; 3]],
            interrupted: true,
            invocations,
            summary,
            ladder: Some(LadderRecord {
                spec: l,
                steps: vec![
                    step(0, &["untouched-heap", "small-heap"], Some("untouched-heap")),
                    step(1, &["small-heap"], None),
                ],
                overhead: None,
            }),
        };
        let m = markdown(&r);
        assert!(m.contains("## The thesis's table, ours"), "{m}");
        // step 0 ran alone: p99 2 ms, max 10 ms; what the profiler said of
        // the hazard fixed next
        assert!(
            m.contains(
                "| 0 | untouched-heap, small-heap | alone | 2.00 (2.00–2.00) | 10.00 (10.00–10.00) |"
            ),
            "{m}"
        );
        assert!(
            m.contains("untouched-heap (profiler: the top hazard of 3 slow requests, named in 5)"),
            "{m}"
        );
        // step 1 was cut short before it ran; the kept hazard is said
        assert!(
            m.contains("| 1 | small-heap | (not run) | | | | | | – (kept: hidden by redundancy) |"),
            "{m}"
        );
        assert!(m.contains("overhead: not measured"), "{m}");
        assert!(m.contains("interrupted (the rounds done)"), "{m}");
        // every (variant, way) run is in the second table
        assert!(
            m.contains("| step0 | `--hazards untouched-heap,small-heap` | alone |"),
            "{m}"
        );
        assert!(m.contains("| default | `` | alone |"), "{m}");
        // the record reads back as written
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<BenchRecord>(&json).unwrap(), r);
        // a hazard the profiler did not name is not given its zero counts
        let mut r = r;
        let st = &mut r.ladder.as_mut().unwrap().steps[0];
        st.chosen_by = Some("profiler: none named".into());
        st.ranking[0].hazard_top = 0;
        st.ranking[0].attributed = 0;
        let m = markdown(&r);
        assert!(
            m.contains("| untouched-heap (profiler: none named) |"),
            "{m}"
        );
    }
}
