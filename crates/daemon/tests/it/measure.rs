//! `elfen daemon measure`'s reference: the machine's charge per wake-up.

use crate::common::*;
use std::time::Duration;

#[test]
fn the_wake_up_charge_counts_the_reference_threads_wake_ups() {
    let Some(()) = live_ok("the_wake_up_charge_counts_the_reference_threads_wake_ups") else {
        return;
    };
    let _one = serial();
    let c = elfen_daemon::measure::wake_charge(0, 1, 51, Duration::from_millis(300)).unwrap();
    println!(
        "{} wake-ups, charged {:.1} µs each",
        c.wakes,
        c.charged_ns_per_wake / 1000.0
    );
    // Rung every millisecond for 300 ms: at most ~300 wake-ups (rings that
    // meet a sleeper not yet back asleep merge into one), and many fewer
    // only if the ringing thread hardly ran (a matter of speed: the bound
    // is divided by the slack under emulation).
    assert!(c.wakes <= 310, "{c:?}");
    assert_timing(
        c.wakes as f64,
        Bound::AtLeast(30.0),
        format_args!("wake-ups in 300 ms rung every ms ({c:?})"),
    );
    // Each wake-up runs a few syscalls: charged something, far below 1 ms.
    assert!(c.charged_ns_per_wake > 100.0, "{c:?}");
    assert_timing(
        c.charged_ns_per_wake,
        Bound::AtMost(1e6),
        format_args!("ns charged per wake-up ({c:?})"),
    );
}

/// `elfen daemon measure`'s blind phases: one run compares blind isolation
/// woken at the writer's busy edges with blind isolation polling the
/// slots; both time the reaction (LC switch-in → its CPU taken from batch)
/// and the report says which steps were woken and which polled.
#[test]
fn the_blind_phases_time_the_reaction_woken_at_edges_and_polled() {
    let test = "the_blind_phases_time_the_reaction_woken_at_edges_and_polled";
    let Some(()) = live_ok(test) else {
        return;
    };
    let _one = serial();
    let p = elfen_daemon::measure::Params {
        runs: 1,
        window_ms: 1500,
        warmup_ms: 200,
        pairs: Some("0:1".into()),
        no_freeze: true,
        helper: vec![BIN.into()],
        ..Default::default()
    };
    let (runs, _) = elfen_daemon::measure::measure(&p).expect("measured");
    let r = &runs[0];
    let (e, q) = (
        r.blind_events.as_ref().expect("the event-driven phase ran"),
        r.blind_polled.as_ref().expect("the polled phase ran"),
    );
    let summary = elfen_daemon::measure::summarize(&runs);
    println!(
        "woken at edges: reaction {:?}, {} woken / {} polled steps; polling: reaction {:?}, \
         {} woken / {} polled steps",
        e.reaction, e.blind_woken, e.blind_polled, q.reaction, q.blind_woken, q.blind_polled
    );
    assert!(e.lc_periods > 0 && q.lc_periods > 0, "the LC ran: {r:?}");
    assert!(e.reaction.samples > 0, "CPUs taken from batch timed: {e:?}");
    assert!(q.reaction.samples > 0, "CPUs taken from batch timed: {q:?}");
    assert!(e.blind_woken > 0, "steps on the writer's busy edges: {e:?}");
    assert_eq!(q.blind_woken, 0, "polling only: {q:?}");
    assert!(q.blind_polled > 0, "{q:?}");
    let (se, sq) = (
        summary.blind_events.expect("summarized"),
        summary.blind_polled.expect("summarized"),
    );
    assert!(se.reaction_p99_ns.is_some() && sq.reaction_p99_ns.is_some());
}
