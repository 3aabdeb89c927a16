//! Guard mode's cost follows the work, not the request rate: with a hold
//! longer than the LC's idle gaps, the daemon stays on the batch lane
//! through a burst of short busy periods — it still occupies the lane while
//! the LC is busy (the batch spinner hardly runs), and it takes fewer
//! wake-ups than there are busy periods (without the hold: two per busy
//! period, the writer's at the busy and at the idle edge). The daemon's
//! CPU is reported split: its own work, the occupation, the hold.
//!
//! Behaviour, not speed: shares and counts with wide margins.

use crate::common::*;
use crate::live::{daemon_spinner, lc_bursts, scrape, setup, spinner_batch};
use elfen_cmd::proc::thread_schedstat;
use std::sync::atomic::Ordering::Acquire;
use std::time::{Duration, Instant};

/// The address of a running daemon's metrics endpoint.
pub(crate) fn metrics_addr(d: &DaemonProc) -> String {
    let line = d.wait_for("metrics at http://", Duration::from_secs(5));
    line.split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("an address in the line")
        .to_string()
}

/// The value of the sample `name` (with its labels, as exposed) in `text`.
pub(crate) fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l[name.len()..].trim().parse().ok())
}

#[test]
fn the_coalescing_guard_occupies_while_the_lc_is_busy_and_wakes_less_than_once_per_busy_period() {
    let test = "the_coalescing_guard_occupies_while_the_lc_is_busy_and_wakes_less_than_once_per_busy_period";
    let Some(()) = live_ok(test) else {
        return;
    };
    let _one = serial();
    // a hold of 2 ms, longer than every gap of the LC below
    let s = setup(
        "co",
        "[guard]\nhold_us = 2000\n",
        &spinner_batch("spin", "guard"),
    );
    let d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let hold_line = d.wait_for("guard hold:", Duration::from_secs(5));
    let (_, spinner) = daemon_spinner(&d, "spin");
    let addr = metrics_addr(&d);
    // bursts of short busy periods: busy 100 µs, idle 100–300 µs
    let lc = lc_bursts(&s.lc_name, 0, None, 200, 100, (100, 300));
    d.wait_for("LC service found", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(500));
    let me = d.pid();
    let writer = d.threads_named("elfen-lc-writer");
    let guards = d.threads_named("elfen-guard-1");
    assert_eq!((writer.len(), guards.len()), (1, 1), "{}", d.output());
    let page = elfen_shm::Page::attach(&s.page, elfen_shm::Access::Observer).unwrap();
    let line = page.lc(0).unwrap();
    let runs = |t: u32| thread_schedstat(me, t).map_or(0, |s| s.runs);
    let cpu = |p: u32, t: u32| thread_schedstat(p, t).map_or(0, |s| s.on_cpu_ns);
    let read = || {
        (
            Instant::now(),
            runs(writer[0]) + runs(guards[0]),
            line.requests.load(Acquire),
            cpu(spinner, spinner),
            cpu(lc.pid(), lc.pid()),
        )
    };
    let a = read();
    std::thread::sleep(Duration::from_millis(1500));
    let b = read();
    let metrics = scrape(&addr);
    let win = (b.0 - a.0).as_nanos() as f64;
    let (wakeups, periods) = (b.1 - a.1, b.2 - a.2);
    let (spin_share, lc_share) = ((b.3 - a.3) as f64 / win, (b.4 - a.4) as f64 / win);
    let held = sample(&metrics, "elfen_daemon_cpu_seconds_total{part=\"held\"}");
    let occupied = sample(
        &metrics,
        "elfen_daemon_cpu_seconds_total{part=\"occupied\"}",
    );
    let own = sample(&metrics, "elfen_daemon_cpu_seconds_total{part=\"own\"}");
    let diag = format!(
        "{hold_line}; window {:.0} ms: {periods} busy periods, {wakeups} wake-ups of the writer \
         and the guard; LC ran {:.0} %, the spinner {:.0} %; daemon CPU so far: own {own:?} s, \
         occupied {occupied:?} s, held {held:?} s",
        win / 1e6,
        lc_share * 100.0,
        spin_share * 100.0
    );
    println!("{diag}");
    assert!(
        periods >= 200,
        "the LC ran its bursts (else nothing is judged): {diag}"
    );
    assert!(
        wakeups <= periods,
        "at most one wake-up per busy period (one per burst is the aim): {diag}"
    );
    assert!(
        spin_share < 0.5,
        "the lane is held while the LC is busy and through its short gaps: {diag}"
    );
    assert_eq!(
        sample(&metrics, "elfen_guard_hold_seconds"),
        Some(0.002),
        "the hold is reported: {diag}"
    );
    assert!(
        held.is_some_and(|h| h > 0.0) && occupied.is_some_and(|o| o > 0.0),
        "occupation and hold counted apart: {diag}"
    );
    drop(lc);
    let mut d = d;
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(10))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
    let out = d.output();
    let hold = out
        .lines()
        .find(|l| l.contains("writer's hold of its batch lane"))
        .unwrap_or_else(|| panic!("the stop reports the writer's hold:\n{out}"));
    println!("{hold}");
    assert!(!hold.contains(" 0 busy periods caught"), "{hold}");
}
