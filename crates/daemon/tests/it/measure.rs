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
    // only if the ringing thread hardly ran (a matter of speed: reported
    // only under emulation).
    assert!(c.wakes <= 310, "{c:?}");
    assert_timing(c.wakes >= 30, format!("at least 30 wake-ups: {c:?}"));
    // Each wake-up runs a few syscalls: charged something, far below 1 ms.
    assert!(c.charged_ns_per_wake > 100.0, "{c:?}");
    assert_timing(
        c.charged_ns_per_wake < 1e6,
        format!("charged below 1 ms per wake-up: {c:?}"),
    );
}
