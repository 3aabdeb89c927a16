//! The proxy end to end: replicas of `elfen proxy demo-service` (this test
//! binary plays it when started with `demo-service …`), paused on purpose
//! (a stall inside a request, SIGSTOP, a replica that never answers or
//! closes its connections), clients on the wire protocol and HTTP/1.1.
//! Behaviour is asserted — every request answered exactly once, hedges,
//! swaps, work done twice counted, errors counted — with generous
//! deadlines: this runs on small, busy machines.
//!
//! The tests: hand-overs (`handover`), faults served around or refused
//! (`faults`), hedging (`hedging`); their shared fixture is `common`.

mod common;
mod faults;
mod handover;
mod hedging;
#[path = "../support/mod.rs"]
mod support;

use clap::Parser;
use std::time::Instant;

#[derive(Parser)]
struct Demo {
    #[command(flatten)]
    a: elfen_proxy::demo::DemoArgs,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("demo-service") {
        let d = Demo::parse_from(args[1..].iter());
        std::process::exit(match elfen_proxy::demo::run(d.a) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("demo-service: {e:#}");
                1
            }
        });
    }
    // The replicas pin their workers to the lanes: one lane user at a time.
    let _lanes = elfen_cmd::LaneLock::acquire().expect("the lane lock");
    let tests: [(&str, fn()); 9] = [
        (
            "a_paused_replica_hands_over_to_the_backup",
            handover::a_paused_replica_hands_over_to_the_backup,
        ),
        (
            "a_jvm_pause_seen_by_bpf_hands_over",
            handover::a_jvm_pause_seen_by_bpf_hands_over,
        ),
        (
            "a_stopped_replica_hands_over_and_is_warmed",
            handover::a_stopped_replica_hands_over_and_is_warmed,
        ),
        (
            "a_replica_closing_connections_is_counted_and_served_around",
            faults::a_replica_closing_connections_is_counted_and_served_around,
        ),
        (
            "a_replica_that_never_answers_is_paused_and_served_around",
            faults::a_replica_that_never_answers_is_paused_and_served_around,
        ),
        (
            "a_malformed_request_errs_for_that_client_only",
            faults::a_malformed_request_errs_for_that_client_only,
        ),
        (
            "http_is_proxied_hedged_only_when_idempotent",
            hedging::http_is_proxied_hedged_only_when_idempotent,
        ),
        (
            "the_timeout_hedge_sends_late_requests_to_the_backup",
            hedging::the_timeout_hedge_sends_late_requests_to_the_backup,
        ),
        (
            "bad_replica_commands_fail_cleanly",
            faults::bad_replica_commands_fail_cleanly,
        ),
    ];
    let only: Vec<String> = args[1..]
        .iter()
        .filter(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in tests {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let t0 = Instant::now();
        match std::panic::catch_unwind(f) {
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok ({:.1} s)", t0.elapsed().as_secs_f64());
            }
            Err(_) => {
                failed += 1;
                println!("test {name} ... FAILED");
            }
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
