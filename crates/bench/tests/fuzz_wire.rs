//! The LC wire protocol's decoding on the harness's side, fuzzed (bounded,
//! seeded: `elfen_cmd::fuzz`): an external service is untrusted input, so
//! whatever bytes it answers with — any ids, times, statuses, partial
//! frames, a close at any point — the generator counts them (an unknown or
//! repeated id, a failure status: errors) and never panics.

use elfen_bench::lc::Protocol;
use elfen_bench::lc::requests::{Request, RequestSet};
use elfen_bench::load::client::{GeneratorPlace, InvocationPlan, Responses, run_invocation};
use elfen_bench::spec::RequestsKind;
use elfen_cmd::proc::SchedClass;
use elfen_wire::{self as wire, Kind, RequestHeader, Response, Status};
use proptest::prelude::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Any 32 response bytes, or a response with fields near what a service
/// sends (ids in and around the plan, times up to the extremes).
fn response(requests: u64) -> impl Strategy<Value = [u8; wire::RESPONSE_BYTES]> {
    let near = (
        prop_oneof![0..requests + 3, any::<u64>()],
        prop_oneof![Just(0u64), 0..1_000_000u64, Just(u64::MAX), any::<u64>()],
        prop_oneof![Just(0u64), 0..1_000_000u64, Just(u64::MAX), any::<u64>()],
        prop_oneof![Just(0u32), 0..4u32, any::<u32>()],
        any::<u32>(),
    )
        .prop_map(|(id, service_ns, queued_ns, status, result)| {
            let status = match status {
                0 => Status::Ok,
                1 => Status::BadRequest,
                2 => Status::ServiceError,
                c => Status::Other(c),
            };
            Response {
                id,
                service_ns,
                queued_ns,
                status,
                result,
            }
            .encode()
        });
    prop_oneof![near, any::<[u8; wire::RESPONSE_BYTES]>()]
}

#[test]
fn fuzz_the_frames_round_trip() {
    let strategy = (
        any::<[u8; wire::REQUEST_HEADER]>(),
        any::<[u8; wire::RESPONSE_BYTES]>(),
    );
    elfen_cmd::fuzz::run("LC wire frames", 5000, strategy, |(req, resp)| {
        let h = RequestHeader::decode(&req);
        prop_assert_eq!(h.encode(), req);
        let kind_ok = match h.kind {
            Kind::Work | Kind::Ping => true,
            Kind::Unknown(c) => c > 1,
        };
        prop_assert!(kind_ok);
        let r = Response::decode(&resp);
        prop_assert_eq!(r.encode(), resp);
        Ok(())
    });
}

#[test]
fn fuzz_the_generators_response_accounting() {
    const N: u64 = 40;
    let t0 = 1_000_000_000u64;
    let offsets: Vec<u64> = (0..N).map(|i| i * 100_000).collect();
    let warmup_ns = 1_000_000;
    let strategy = proptest::collection::vec(
        (
            response(N),
            prop_oneof![t0..t0 + 10_000_000, 0..t0, any::<u64>()],
        ),
        0..3 * N as usize,
    );
    elfen_cmd::fuzz::run("LC wire responses", 2000, strategy, |answers| {
        let mut r = Responses::new(
            t0,
            offsets.clone(),
            warmup_ns,
            (t0 + warmup_ns, t0 + 4_000_000),
        );
        for (bytes, now) in &answers {
            r.on_response(&Response::decode(bytes), *now);
        }
        let (outcome, _, _) = r.finish(t0 + 50_000_000);
        let measured = offsets.iter().filter(|o| **o >= warmup_ns).count() as u64;
        prop_assert!(
            outcome.requests <= measured,
            "{} > {measured}",
            outcome.requests
        );
        // every measured request is recorded once, answered or not
        prop_assert_eq!(outcome.hist.len(), measured);
        Ok(())
    });
}

/// A request set of one work request.
fn one_request() -> Arc<RequestSet> {
    Arc::new(RequestSet {
        kind: RequestsKind::Demand,
        requests: vec![Request {
            arg: 1000,
            payload: Box::new([]),
        }],
        source: "fuzz".into(),
        note: None,
        keys: None,
    })
}

/// A service that reads whatever comes and answers `answer` (then closes),
/// once per connection.
fn fake_service(answers: std::sync::mpsc::Receiver<Vec<u8>>) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for (conn, answer) in l.incoming().zip(answers) {
            let Ok(mut c) = conn else { continue };
            let mut sink = c.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(sink.read(&mut buf), Ok(n) if n > 0) {}
            });
            let _ = c.write_all(&answer);
        }
    });
    addr
}

#[test]
fn fuzz_the_generator_against_a_garbling_service() {
    const N: usize = 8;
    let (tx, rx) = std::sync::mpsc::channel();
    let addr = fake_service(rx);
    let cpus = elfen_topo::current_affinity().unwrap();
    let place = GeneratorPlace {
        cpus,
        sched: SchedClass::Other,
    };
    let plan = InvocationPlan {
        offsets: (0..N as u64).map(|i| i * 200_000).collect(),
        picks: vec![0; N],
        set: one_request(),
        work_scale: 1.0,
        warmup_ns: 0,
        duration_ns: 2_000_000,
        drain_ns: 20_000_000,
    };
    // Whole responses, then a cut one, or raw bytes; the service closes after.
    let strategy = prop_oneof![
        (
            proptest::collection::vec(response(N as u64), 0..2 * N),
            0..wire::RESPONSE_BYTES
        )
            .prop_map(|(rs, cut)| {
                let mut b: Vec<u8> = rs.concat();
                b.truncate(b.len().saturating_sub(cut));
                b
            }),
        proptest::collection::vec(any::<u8>(), 0..600),
    ];
    let stop = AtomicBool::new(false);
    elfen_cmd::fuzz::run("LC wire over a socket", 80, strategy, |answer| {
        tx.send(answer).unwrap();
        match run_invocation(addr, &Protocol::Wire, &plan, &place, &stop, |_| {}) {
            Ok(r) => {
                prop_assert!(r.outcome.requests <= N as u64);
                prop_assert_eq!(r.outcome.hist.len(), N as u64);
            }
            // the service closed before everything was sent: a clear error
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        Ok(())
    });
    std::thread::sleep(Duration::from_millis(10));
}
