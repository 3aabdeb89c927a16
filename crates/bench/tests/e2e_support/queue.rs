//! The budget policies through the built-in service. The worker publishes
//! the queue length at every begin and end (`request_begin_with_queue`,
//! `request_end_with_queue`). A burst's first request begins on an empty
//! queue and the other four arrive while it runs, so:
//!
//! 1. every idle state between two requests of a burst must carry a queue
//!    length > 0 — an observer spinning on the request lane's `state`
//!    records the states it sees (it may miss a short idle gap, never
//!    invent one; pairs where it missed a begin are not judged);
//! 2. a fixed-budget batch thread co-runs with the burst's first request
//!    only: one budget per burst. If the idle state after the first
//!    request carried its begin's queue length (0) instead of the requests
//!    waiting then (4), the thread could take a fresh budget (NEW_PERIOD,
//!    Figure 9b) for the second request too.

use elfen_bench::lc::builtin::{self, Service, ServiceConfig};
use elfen_bench::lc::wire::{self, Kind, Response};
use elfen_cmd::proc::SchedClass;
use elfen_runtime::{BatchOptions, BatchStats, BatchThread, NapChoice};
use elfen_shm::{Page, PageSpec, state};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const BUDGET_NS: u64 = 300_000;
const BURSTS: u64 = 8;
const PER_BURST: u64 = 5;
const REQUEST_NS: u64 = 2_000_000;

/// Sends `BURSTS` bursts from the batch lane at real-time priority: one
/// request, a quarter of its service time later the other four.
fn drive(addr: SocketAddr, bat: u32, fifo: SchedClass) {
    let _pin = elfen_topo::PinGuard::new(bat).unwrap();
    elfen_cmd::proc::set_sched(0, fifo).unwrap();
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    for b in 0..BURSTS {
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.write_all(&wire::request_bytes(b * 10, REQUEST_NS, b"", Kind::Work))
            .unwrap();
        std::thread::sleep(std::time::Duration::from_nanos(REQUEST_NS / 4));
        let mut rest = Vec::new();
        for i in 1..PER_BURST {
            rest.extend(wire::request_bytes(b * 10 + i, REQUEST_NS, b"", Kind::Work));
        }
        c.write_all(&rest).unwrap();
        for _ in 0..PER_BURST {
            let mut r = [0u8; wire::RESPONSE_BYTES];
            c.read_exact(&mut r).unwrap();
            assert_eq!(Response::decode(&r).status, wire::Status::Ok);
        }
    }
    elfen_cmd::proc::set_sched(0, SchedClass::Other).unwrap();
}

pub fn budget_is_spent_once_per_burst() {
    let cpus = elfen_topo::current_affinity().unwrap();
    if cpus.len() < 2 {
        println!("  skipped: needs two CPUs (request lane and batch lane)");
        return;
    }
    let (req, bat) = (cpus[0], cpus[1]);
    // The dispatcher and the client share the batch lane with a spinning
    // thread: at real-time priority arrivals reach the queue when sent, not
    // when the spinner's timeslice ends.
    let fifo = SchedClass::Fifo(10);
    if std::thread::spawn(move || elfen_cmd::proc::set_sched(0, fifo))
        .join()
        .unwrap()
        .is_err()
    {
        println!("  skipped: needs real-time priority (root) to time arrivals");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = PageSpec::for_pairs(
        &[(req, vec![bat])],
        elfen_policy::PolicyKind::FixedBudget.id(),
        BUDGET_NS,
    );
    let page = Arc::new(Page::create(dir.path().join("page"), &spec).unwrap());
    let svc = Service::start(
        builtin::bind(0).unwrap(),
        ServiceConfig {
            request_cpu: req,
            side_cpus: vec![bat],
            side_sched: fifo,
            working_set_bytes: 256 * 1024,
            calibrate_ms: 20,
            page: Some((page.clone(), 0)),
            trace: None,
        },
    )
    .unwrap();
    let stop = AtomicBool::new(false);

    // 1. what the request lane's state word says between requests
    let seen = std::thread::scope(|s| {
        let obs = s.spawn(|| {
            let _pin = elfen_topo::PinGuard::new(bat).unwrap();
            let word = &page.lc(0).unwrap().state;
            let mut seen = vec![word.load(Ordering::Acquire)];
            while !stop.load(Ordering::Relaxed) {
                let w = word.load(Ordering::Acquire);
                if w != *seen.last().unwrap() {
                    seen.push(w);
                }
            }
            seen
        });
        drive(svc.addr(), bat, fifo);
        stop.store(true, Ordering::Relaxed);
        obs.join().unwrap()
    });
    // An idle state followed by a begin of the same burst (begin sequence
    // not a burst's first) must say requests are waiting.
    let mut between = 0;
    for w in seen.windows(2) {
        let (idle, next) = (w[0], w[1]);
        // only an idle state and the begin right after it: an observer
        // kept off its CPU (a loaded machine) misses whole requests, and the
        // idle state it saw last may then be another burst's
        if state::busy(idle) || !state::busy(next) || state::seq(next) != state::seq(idle) + 1 {
            continue;
        }
        let first_of_burst = (state::seq(next) - 1) % PER_BURST as u32 == 0;
        if !first_of_burst {
            between += 1;
            assert!(
                state::queue_len(idle) > 0,
                "the lane went idle with queue length 0 while requests waited: \
                 {idle:#x} then {next:#x}"
            );
        }
    }
    println!(
        "  {between} idle states seen between requests of a burst, every one with requests waiting"
    );

    // 2. a fixed-budget batch thread co-runs once per burst
    stop.store(false, Ordering::Relaxed);
    let stats: BatchStats = std::thread::scope(|s| {
        let batch = s.spawn(|| {
            let mut bt = BatchThread::attach(
                page.clone(),
                1,
                BatchOptions::default().pin(true).nap(NapChoice::Spin),
            )
            .unwrap();
            let mut x = 1u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                std::hint::black_box(x);
                bt.check();
            }
            bt.stats()
        });
        drive(svc.addr(), bat, fifo);
        stop.store(true, Ordering::Relaxed);
        batch.join().unwrap()
    });
    svc.stop();
    let per_burst = stats.corun_ns as f64 / BURSTS as f64;
    println!(
        "  fixed budget {} us: co-ran {:.0} us per burst of {PER_BURST} requests ({} naps)",
        BUDGET_NS / 1000,
        per_burst / 1e3,
        stats.naps
    );
    assert!(
        stats.corun_ns >= BUDGET_NS,
        "the budget was never used: {stats:?}"
    );
    assert!(
        per_burst <= 1.5 * BUDGET_NS as f64,
        "co-ran {per_burst:.0} ns per burst: more than one budget per burst ({stats:?})"
    );
}
