//! No elfen thread holds a batch lane at real-time priority past its bound
//! (`crates/daemon/src/rt.rs`), whatever the LC does: a saturated LC with a
//! normal process of its own on the batch lane, in every mode that runs a
//! real-time thread there.

use crate::common::*;
use crate::live::{cpu_ns, lc_bursts, lc_busy_now, setup, spinner_batch};
use std::time::{Duration, Instant};

/// A saturated LC — always busy on the request lane — with a normal
/// (SCHED_OTHER) process of its own always runnable on the batch lane, as a
/// JVM's VM thread, JIT or collector beside its worker: in guard, freeze
/// and blind modes that process keeps getting the batch lane's CPU. No
/// elfen thread holds the lane at real-time priority past its bound
/// (`[guard] spin_max_us`, 10 ms per busy period); the kernel's real-time
/// throttling alone would let it through ~50 ms of every second, in one
/// piece. Blind isolation watches every CPU, so the writer's events include
/// the side process's switches on the CPU the writer runs on.
#[test]
fn a_saturated_lc_leaves_its_normal_threads_on_the_batch_lane_running() {
    let Some(()) = live_ok("a_saturated_lc_leaves_its_normal_threads_on_the_batch_lane_running")
    else {
        return;
    };
    let _one = serial();
    for mode in ["guard", "freeze", "blind"] {
        saturated_lc(mode);
    }
}

fn saturated_lc(mode: &str) {
    let s = setup("t", "", &spinner_batch("sat", mode));
    let k = u64::from(slack());
    // the LC on cpu 0 at SCHED_FIFO (other tenants of the machine do not
    // preempt it: its line says busy all along), busy 800 ms at a time with
    // 1 ms gaps (a longer burst the kernel's real-time throttling would
    // cut), and the same service's normal process always runnable on cpu 1
    // (both found by their name)
    let hour_us = 3_600_000_000;
    let side = lc_bursts(&s.lc_name, 1, None, 0, hour_us, (1_000, 1_000));
    let lc = lc_bursts(&s.lc_name, 0, Some(10), 0, 800_000, (1_000, 1_000));
    // what the side process gets of cpu 1 without the daemon, the machine's
    // other tenants as they are now
    let share = |d: Duration| {
        let a = (Instant::now(), cpu_ns(side.pid(), side.pid()));
        std::thread::sleep(d);
        (cpu_ns(side.pid(), side.pid()) - a.1) as f64 / a.0.elapsed().as_nanos() as f64
    };
    let alone = share(Duration::from_millis(1000 * k));
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", patient(Duration::from_secs(10)));
    let found = d.wait_for("LC service found", patient(Duration::from_secs(5)));
    assert!(
        found.contains(&side.pid().to_string()) && found.contains(&lc.pid().to_string()),
        "{mode}: both processes are the LC service: {found}"
    );
    let page = elfen_shm::Page::attach(&s.page, elfen_shm::Access::Observer).unwrap();
    let line = page.lc(0).unwrap();
    assert!(
        wait_until(patient(Duration::from_secs(3)), || lc_busy_now(line)),
        "{mode}: the LC line says busy"
    );
    // the side process's share of cpu 1 in consecutive windows of 200 ms
    // (× slack), after the first busy edge's occupation has begun
    std::thread::sleep(Duration::from_millis(200 * k));
    let win = Duration::from_millis(200 * k);
    let t0 = Instant::now();
    let busy0 = page.lc_busy_ns(0).unwrap();
    let lc0 = cpu_ns(lc.pid(), lc.pid());
    let mut last = (t0, cpu_ns(side.pid(), side.pid()));
    let mut shares = Vec::new();
    for _ in 0..10 {
        std::thread::sleep(win);
        let now = (Instant::now(), cpu_ns(side.pid(), side.pid()));
        shares.push((now.1 - last.1) as f64 / (now.0 - last.0).as_nanos() as f64);
        last = now;
    }
    // the LC's own share of cpu 0 (what "saturated" means), and the line's
    // busy share (the daemon's account of it, shown beside)
    let elapsed = t0.elapsed().as_nanos() as f64;
    let on_cpu = (cpu_ns(lc.pid(), lc.pid()) - lc0) as f64 / elapsed;
    let busy = page.lc_busy_ns(0).unwrap().saturating_sub(busy0) as f64 / elapsed;
    let mean = shares.iter().sum::<f64>() / shares.len() as f64;
    let diag = format!(
        "{mode}: the side process's share of cpu 1 per {} ms: {}; mean {:.0} % ({:.0} % \
         without the daemon); the LC ran {:.0} % of the time, its line said busy {:.0} %",
        win.as_millis(),
        shares
            .iter()
            .map(|x| format!("{:.0} %", x * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
        mean * 100.0,
        alone * 100.0,
        on_cpu * 100.0,
        busy * 100.0
    );
    println!("{diag}");
    assert!(
        on_cpu >= 0.8,
        "the LC was busy nearly all the time (else the check says nothing): {diag}"
    );
    // CPU in every window (a real-time spin held to the kernel's
    // throttling leaves ~950 ms without any), and a fair part of what it
    // gets without the daemon (there it would be ~5 % of the CPU)
    assert!(
        shares.iter().all(|&x| x > 0.0),
        "a window without CPU for the LC's normal process: {diag}"
    );
    assert!(
        mean >= alone / 4.0,
        "the LC's normal process got little of cpu 1: {diag}"
    );
    drop(page);
    let status = d
        .stop_with(libc::SIGTERM, patient(Duration::from_secs(10)))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
    let out = d.output();
    assert!(
        out.contains("real-time spin bound:"),
        "said at start: {out}"
    );
    if mode == "guard" {
        // the guard's occupation was cut by the bound, and said so
        let cuts: u64 = out
            .lines()
            .find_map(|l| {
                let rest = l.split("occupied (").nth(1)?;
                rest.split_whitespace().next()?.parse().ok()
            })
            .unwrap_or(0);
        assert!(cuts >= 1, "the guard's spin was ended by the bound: {out}");
    }
    drop((lc, side));
}
