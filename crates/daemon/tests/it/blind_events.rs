//! Blind isolation that wakes on events, and counts the daemon's own CPUs
//! as idle: with one buffer core on two CPUs the batch is frozen while the
//! LC runs and gets a CPU back while it is idle (before, the CPU running
//! the controller itself never counted as idle, and batch stayed frozen for
//! good); its steps are taken on the writer's busy edges.

use crate::common::*;
use crate::live::{daemon_spinner, lc_bursts, setup, spinner_batch};
use elfen_cmd::proc::thread_schedstat;
use std::time::{Duration, Instant};

#[test]
fn blind_with_one_buffer_core_on_two_cpus_gives_batch_cpus_back() {
    let test = "blind_with_one_buffer_core_on_two_cpus_gives_batch_cpus_back";
    let Some(()) = live_ok(test) else {
        return;
    };
    let _one = serial();
    let s = setup(
        "bb",
        "[blind]\nbuffer_cores = 1\ngrow_hold_us = 2000\n",
        &spinner_batch("bl", "blind"),
    );
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let (_, spinner) = daemon_spinner(&d, "bl");
    // busy 2 ms, idle 20–40 ms, SCHED_FIFO on cpu 0 (this thread stays on
    // cpu 1: it never preempts the LC)
    let _pin = elfen_topo::PinGuard::new(1).unwrap();
    let lc = lc_bursts(&s.lc_name, 0, Some(10), 0, 2_000, (20_000, 40_000));
    d.wait_for("LC service found", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    let cpu = || thread_schedstat(spinner, spinner).map_or(0, |s| s.on_cpu_ns);
    let (t0, c0) = (Instant::now(), cpu());
    std::thread::sleep(Duration::from_millis(2000));
    let share = (cpu() - c0) as f64 / t0.elapsed().as_nanos() as f64;
    println!("the batch spinner ran {:.0} % of a CPU", share * 100.0);
    assert!(
        share > 0.1,
        "batch gets a CPU back while the LC is idle ({:.1} % of a CPU):\n{}",
        share * 100.0,
        d.output()
    );
    drop(lc);
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(10))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
    let out = d.output();
    let line = out
        .lines()
        .find(|l| l.contains("blind isolation") && l.contains("cpuset changes"))
        .unwrap_or_else(|| panic!("{out}"));
    println!("{line}");
    let woken: u64 = line
        .split(" steps on busy edges")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(woken > 0, "steps taken on the writer's busy edges: {line}");
    assert!(line.contains("freezes"), "{line}");
}
