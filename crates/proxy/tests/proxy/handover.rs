//! Hand-overs: a replica paused inside a request, by a JVM-like
//! stop-the-world pause seen by BPF, or by SIGSTOP, and the swap back.

use crate::common::*;
use crate::support::{wait_for, wire_load};
use elfen_proxy::Proxy;
use elfen_proxy::config::{HedgeMode, Protocol, ProxyConfig};
use elfen_proxy::detect::Signal;
use elfen_proxy::engine::Health;
use elfen_proxy::jvm::WatchState;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A stall inside a request of the active replica — off the CPU (as at a
/// safepoint) and on it (a request running long): the proxy sees it on the
/// replica's LC line, re-sends its requests in flight to the other, swaps,
/// and every client request is answered once, while the stalled replica is
/// still paused; its late answer is counted as work done twice once the
/// stall ends, and it is taken back and warmed.
pub fn a_paused_replica_hands_over_to_the_backup() {
    for (how, stall, signal) in [
        ("sleep", "", Signal::OffCpu),
        ("spin", "--stall-spin", Signal::BusyTooLong),
    ] {
        let args = format!("--stall-on-usr1 --stall-ms 3000 {stall}");
        let f = fronted(Protocol::Wire, HedgeMode::Signal, &args, &args);
        let e = f.proxy.engine().clone();
        // a busy machine may pause a replica on its own too: stall whichever
        // is active at request 40
        let pids = [f.replicas[0].pid(), f.replicas[1].pid()];
        let stalled = std::sync::atomic::AtomicUsize::new(usize::MAX);
        let got = wire_load(
            f.proxy.addr(),
            200,
            Duration::from_millis(1),
            |_| (50_000, Vec::new()),
            Duration::from_secs(20),
            |i| {
                if i == 40 {
                    let a = e.active();
                    stalled.store(a, Ordering::Relaxed);
                    elfen_cmd::proc::signal_pid(pids[a], libc::SIGUSR1);
                }
            },
        );
        let x = stalled.load(Ordering::Relaxed);
        let name = ["A", "B"][x];
        got.assert_each_answered_once_ok();
        let s = f.proxy.summary();
        assert!(
            matches!(e.health(x), Health::Paused { .. }),
            "{how}: every request was answered while {name} was still paused: {}",
            s.line()
        );
        assert!(s.swaps >= 1, "{how}: {}", s.line());
        assert_eq!(e.active(), 1 - x, "{how}: {}", s.line());
        assert!(
            s.hedges_total >= 1 && s.hedge_wins >= 1,
            "{how}: {}",
            s.line()
        );
        assert!(
            s.replicas[x].pauses.get(signal) >= 1,
            "{how}: {:?}",
            s.replicas[x].pauses
        );
        assert_eq!((s.failed, s.requests, s.answered), (0, 200, 200), "{how}");
        // the stall ends: the late answer is dropped and counted, the replica comes back
        wait_for("the late answer", Duration::from_secs(20), || {
            e.replicas[x].counters.late_answers.load(Ordering::Relaxed) >= 1
        });
        wait_for(
            "the stalled replica back and warmed",
            Duration::from_secs(20),
            || e.health(x) == Health::Up && e.warm_left(x) == 0,
        );
        let s = f.proxy.summary();
        assert!(
            s.duplicate_work >= 1 && s.duplicate_work_ms > 0.0,
            "{how}: {}",
            s.line()
        );
        assert!(s.replicas[x].warmups >= 1, "{how}: {}", s.line());
        let m = scrape(f.proxy.metrics_addr().unwrap());
        assert!(metric(&m, "elfen_proxy_swaps_total") >= 1.0);
        assert!(
            metric(
                &m,
                &format!(
                    "elfen_proxy_pauses_total{{replica=\"{name}\",signal=\"{}\"}}",
                    signal.name()
                )
            ) >= 1.0
        );
        assert!(
            metric(
                &m,
                &format!("elfen_proxy_duplicate_work_total{{replica=\"{name}\"}}")
            ) >= 1.0
        );
        let active = ["A", "B"][1 - x];
        assert_eq!(
            metric(
                &m,
                &format!(
                    "elfen_proxy_replica_state{{replica=\"{active}\",role=\"active\",state=\"up\"}}"
                )
            ),
            1.0
        );
        drop(f);
    }
}

/// Why BPF cannot be used here, if it cannot.
fn no_bpf() -> Option<String> {
    elfen_bpf::check_privileges()
        .and_then(|()| elfen_bpf::check_btf())
        .err()
        .map(|e| e.to_string())
}

/// A stop-the-world pause of the active replica — the demo's `VM Thread`
/// spinning on the worker's CPU while the worker waits, as a JVM's
/// collection looks to the scheduler — is seen by the proxy's BPF watch of
/// the JVM: with every other signal's bound far above the stall (off-CPU
/// off, demand bounds 10 s), the proxy hands over on `jvm_pause` alone;
/// every request is answered once while the stalled replica is still
/// paused, the watch counts the pause, the replica is taken back after it
/// without a warm-up (a collection leaves a JVM warm). With the signal off,
/// the same stall is waited out: nothing is re-sent.
pub fn a_jvm_pause_seen_by_bpf_hands_over() {
    if let Some(why) = no_bpf() {
        elfen_cmd::skip::skip_test(
            "a_jvm_pause_seen_by_bpf_hands_over",
            elfen_cmd::skip::Need::Bpf,
            why,
        );
        return;
    }
    let args = "--stall-on-usr1 --stall-ms 3000 --stall-stw";
    let only_jvm = |jvm_pause_ms: f64| {
        move |c: &mut ProxyConfig| {
            c.pause.offcpu_ms = 0.0;
            c.pause.floor_ms = 10_000.0;
            c.pause.jvm_pause_ms = jvm_pause_ms;
        }
    };
    // a busy machine may preempt the VM thread: 5 ms is still far below the stall
    let f = fronted_with(Protocol::Wire, HedgeMode::Signal, args, args, only_jvm(5.0));
    let e = f.proxy.engine().clone();
    for r in 0..2 {
        assert_eq!(
            f.proxy.jvm().state(r).0,
            WatchState::On,
            "replica {r}: {}",
            f.proxy.jvm().describe(r)
        );
    }
    let pids = [f.replicas[0].pid(), f.replicas[1].pid()];
    let stalled = std::sync::atomic::AtomicUsize::new(usize::MAX);
    // stall whichever replica is active at request 40
    let got = wire_load(
        f.proxy.addr(),
        200,
        Duration::from_millis(1),
        |_| (50_000, Vec::new()),
        Duration::from_secs(20),
        |i| {
            if i == 40 {
                let a = e.active();
                stalled.store(a, Ordering::Relaxed);
                elfen_cmd::proc::signal_pid(pids[a], libc::SIGUSR1);
            }
        },
    );
    let x = stalled.load(Ordering::Relaxed);
    let name = ["A", "B"][x];
    got.assert_each_answered_once_ok();
    let s = f.proxy.summary();
    assert!(
        matches!(
            e.health(x),
            Health::Paused {
                signal: Signal::JvmPause,
                ..
            }
        ),
        "every request was answered while {name}'s world was still stopped: {}",
        s.line()
    );
    assert!(s.swaps >= 1 && e.active() == 1 - x, "{}", s.line());
    assert!(
        s.hedges.signal.jvm_pause >= 1 && s.hedge_wins >= 1,
        "{:?}: {}",
        s.hedges,
        s.line()
    );
    assert_eq!(
        s.hedges_total, s.hedges.signal.jvm_pause,
        "no other signal fired: {:?}",
        s.hedges
    );
    assert!(
        s.replicas[x].pauses.jvm_pause >= 1,
        "{:?}",
        s.replicas[x].pauses
    );
    assert_eq!((s.failed, s.requests, s.answered), (0, 200, 200));
    // the stall ends: the pause is counted, the replica back, not warmed
    wait_for("the stalled replica back", Duration::from_secs(20), || {
        e.health(x) == Health::Up
            && e.replicas[x].counters.late_answers.load(Ordering::Relaxed) >= 1
    });
    let s = f.proxy.summary();
    let rx = &s.replicas[x];
    assert!(
        rx.jvm_pauses >= 1 && rx.jvm_pause_longest_ms >= 1000.0,
        "the watch saw the 3 s pause: {} pauses, longest {:.1} ms",
        rx.jvm_pauses,
        rx.jvm_pause_longest_ms
    );
    assert_eq!(rx.warmups, 0, "no warm-up after a JVM pause: {}", s.line());
    assert!(s.line().contains("JVM watch: A on"), "{}", s.line());
    let m = scrape(f.proxy.metrics_addr().unwrap());
    assert_eq!(
        metric(
            &m,
            &format!("elfen_proxy_jvm_watch{{replica=\"{name}\",state=\"on\"}}")
        ),
        1.0
    );
    assert!(metric(&m, "elfen_proxy_hedges_total{reason=\"jvm_pause\"}") >= 1.0);
    assert!(
        metric(
            &m,
            &format!("elfen_proxy_jvm_pauses_total{{replica=\"{name}\"}}")
        ) >= 1.0
    );
    drop(f);

    // the same stall with the signal off: waited out, nothing re-sent
    let f = fronted_with(Protocol::Wire, HedgeMode::Signal, args, args, only_jvm(0.0));
    let e = f.proxy.engine().clone();
    assert_eq!(f.proxy.jvm().state(0).0, WatchState::Disabled);
    let pids = [f.replicas[0].pid(), f.replicas[1].pid()];
    let got = wire_load(
        f.proxy.addr(),
        200,
        Duration::from_millis(1),
        |_| (50_000, Vec::new()),
        Duration::from_secs(20),
        |i| {
            if i == 40 {
                elfen_cmd::proc::signal_pid(pids[e.active()], libc::SIGUSR1);
            }
        },
    );
    got.assert_each_answered_once_ok();
    let s = f.proxy.summary();
    assert_eq!((s.hedges_total, s.swaps), (0, 0), "{}", s.line());
    assert!(!s.line().contains("JVM watch"), "{}", s.line());
}

/// The proxy starts both replicas from a template; the active one is
/// stopped with SIGSTOP under load: every request is answered once, it is
/// taken as paused, roles swap; after SIGCONT it is back and warmed; at the
/// end the replicas and the page are gone.
pub fn a_stopped_replica_hands_over_and_is_warmed() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page");
    let mut cfg = ProxyConfig::default();
    cfg.replicas.command = Some(format!(
        "{} demo-service --port {{port}} --cpu {{cpu}} --page {{page}} --lane {{lane}}",
        exe()
    ));
    cfg.replicas.page = Some(page.clone());
    cfg.warm.requests = 10;
    slack(&mut cfg);
    let proxy = Proxy::start(cfg, &AtomicBool::new(false)).unwrap();
    let e = proxy.engine().clone();
    let pids = [proxy.replica_pid(0).unwrap(), proxy.replica_pid(1).unwrap()];
    assert!(page.exists());
    // a busy machine may pause a replica on its own too: stop whichever is
    // active at request 100
    let stopped = std::sync::atomic::AtomicUsize::new(usize::MAX);
    let got = wire_load(
        proxy.addr(),
        300,
        Duration::from_millis(1),
        |_| (30_000, Vec::new()),
        Duration::from_secs(20),
        |i| {
            if i == 100 {
                let a = e.active();
                stopped.store(a, Ordering::Relaxed);
                elfen_cmd::proc::signal_pid(pids[a], libc::SIGSTOP);
            }
        },
    );
    let x = stopped.load(Ordering::Relaxed);
    got.assert_each_answered_once_ok();
    let s = proxy.summary();
    assert!(s.swaps >= 1, "{}", s.line());
    assert!(matches!(e.health(x), Health::Paused { .. }), "{}", s.line());
    assert_eq!(e.active(), 1 - x, "{}", s.line());
    let p = &s.replicas[x].pauses;
    assert!(p.stopped + p.off_cpu + p.no_progress >= 1, "{p:?}");
    elfen_cmd::proc::signal_pid(pids[x], libc::SIGCONT);
    // new work keeps flowing to the other, the stopped one is warmed with
    // recent requests (at least one round of warm-ups; another if, catching
    // up on its backlog after SIGCONT, it was taken as paused again)
    wait_for(
        "the stopped replica back and warmed",
        Duration::from_secs(20),
        || e.health(x) == Health::Up && e.warm_left(x) == 0,
    );
    let warmed = e.replicas[x].counters.warmups.load(Ordering::Relaxed);
    assert!(
        warmed >= 10,
        "{warmed} warm-ups: {}",
        proxy.summary().line()
    );
    let got = wire_load(
        proxy.addr(),
        50,
        Duration::from_millis(1),
        |_| (30_000, Vec::new()),
        Duration::from_secs(20),
        |_| {},
    );
    got.assert_each_answered_once_ok();
    let s = proxy.stop();
    assert_eq!(s.failed, 0, "{}", s.line());
    for pid in pids {
        assert!(!elfen_shm::pid_alive(pid), "replica {pid} left running");
    }
    assert!(!page.exists(), "the page the proxy created is removed");
}
