//! In mode idle the kernel does the protecting, and the daemon takes no
//! wake-up per LC busy edge: the BPF program counts the busy periods, and
//! the writer takes the counts on its tick. What shows the LC's busy
//! periods still shows them — the request lane's LC line (completed
//! requests, `elfen status`), the metric `elfen_lc_busy_periods_total` —
//! and the LC is not reported unseen.
//!
//! Behaviour, not speed: counts with wide margins.

use crate::coalesce::{metrics_addr, sample};
use crate::common::*;
use crate::live::{lc_bursts, scrape, setup, spinner_batch};
use elfen_cmd::proc::thread_schedstat;
use std::sync::atomic::Ordering::Acquire;
use std::time::{Duration, Instant};

#[test]
fn in_idle_mode_the_writer_takes_no_wake_up_per_busy_edge() {
    let test = "in_idle_mode_the_writer_takes_no_wake_up_per_busy_edge";
    let Some(()) = live_ok(test) else {
        return;
    };
    let _one = serial();
    let s = setup("oe", "", &spinner_batch("spin", "idle"));
    let d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", patient(Duration::from_secs(10)));
    let addr = metrics_addr(&d);
    // short busy periods, often: busy 100 µs, idle 100–300 µs
    let lc = lc_bursts(&s.lc_name, 0, None, 200, 100, (100, 300));
    d.wait_for("LC service found", patient(Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(500));
    let me = d.pid();
    let writer = d.threads_named("elfen-lc-writer");
    assert_eq!(writer.len(), 1, "{}", d.output());
    let page = elfen_shm::Page::attach(&s.page, elfen_shm::Access::Observer).unwrap();
    let line = page.lc(0).unwrap();
    let periods_metric = |m: &str| sample(m, "elfen_lc_busy_periods_total").unwrap_or(0.0);
    let read = || {
        (
            Instant::now(),
            thread_schedstat(me, writer[0]).map_or(0, |s| s.runs),
            line.requests.load(Acquire),
            periods_metric(&scrape(&addr)),
            thread_schedstat(lc.pid(), lc.pid()).map_or(0, |s| s.on_cpu_ns),
        )
    };
    let a = read();
    std::thread::sleep(Duration::from_millis(1500));
    let b = read();
    let metrics = scrape(&addr);
    let win = (b.0 - a.0).as_nanos() as f64;
    let (wakeups, requests, periods) = (b.1 - a.1, b.2 - a.2, b.3 - a.3);
    let lc_share = (b.4 - a.4) as f64 / win;
    let diag = format!(
        "window {:.0} ms: the LC ran {:.0} %; {requests} requests on its LC line, {periods} busy \
         periods in the metrics, {wakeups} wake-ups of the writer",
        win / 1e6,
        lc_share * 100.0
    );
    println!("{diag}");
    assert!(
        requests >= 200,
        "the kernel's busy periods reach the LC line (else nothing is judged): {diag}"
    );
    assert!(
        periods >= 200.0,
        "and the metric of the busy periods: {diag}"
    );
    assert!(
        wakeups * 10 <= requests,
        "the writer wakes on its tick, not per busy edge: {diag}"
    );
    assert_eq!(
        sample(&metrics, "elfen_lc_unseen"),
        Some(0.0),
        "the LC is seen on its request lane: {diag}"
    );
    assert_eq!(
        sample(&metrics, "elfen_writer_off_edges"),
        Some(1.0),
        "the writer says it is off the edges: {diag}"
    );
    drop(lc);
    let mut d = d;
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(10))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
}
