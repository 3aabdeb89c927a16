//! The study on hand-built records: each cause named where it happened.

use super::*;
use crate::record::*;
use std::collections::BTreeMap;

const PID: u32 = 100;
const LC: u32 = 101;
const VM: u32 = 102;
const JIT: u32 = 103;
const DISP: u32 = 104;
const OTHER: u32 = 900; // another process
const CLIENT: u32 = 950;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;

struct B {
    rec: TraceRecord,
}

impl B {
    fn new() -> B {
        let mut threads = BTreeMap::new();
        for (tid, tgid, comm) in [
            (LC, PID, "elfen-lucene-wo"),
            (VM, PID, "VM Thread"),
            (JIT, PID, "C2 CompilerThre"),
            (DISP, PID, "elfen-lucene-di"),
            (OTHER, OTHER, "stream"),
            (CLIENT, CLIENT, "client"),
        ] {
            threads.insert(
                tid,
                ThreadInfo {
                    tgid,
                    comm: comm.into(),
                },
            );
        }
        B {
            rec: TraceRecord {
                schema: RECORD_SCHEMA.into(),
                created_unix_s: 0,
                command: "test".into(),
                kernel: "test".into(),
                target: TargetInfo {
                    spec: "pid 100".into(),
                    tgids: vec![PID],
                    cmdlines: vec![],
                    lc_tid: Some(LC),
                    request_cpu: Some(0),
                    batch_cpus: vec![1],
                    tracer_pid: 1,
                },
                cpus: 2,
                lanes: vec![0, 1],
                start_ns: 0,
                end_ns: 1_000 * MS,
                end: EndReason::Duration,
                signals: vec![],
                counts: EventCounts::default(),
                threads,
                events: vec![],
                span_source: SpanSource::Page {
                    page: "p".into(),
                    lane: 0,
                },
                spans: vec![],
                poller: None,
                notes: vec![],
            },
        }
    }
    fn sw(&mut self, t: u64, cpu: u32, prev: u32, prev_state: u32, next: u32) -> &mut B {
        self.rec.events.push(Event::Switch(Switch {
            t,
            cpu,
            prev,
            prev_state,
            next,
        }));
        self
    }
    fn span(&mut self, id: u64, b: u64, e: u64) -> &mut B {
        self.rec.spans.push(Span {
            id,
            begin_ns: b,
            end_ns: e,
            exact_end: true,
            queue_at_begin: 0,
        });
        self
    }
    fn ev(&mut self, e: Event) -> &mut B {
        self.rec.events.push(e);
        self
    }
    fn done(&mut self) -> TraceRecord {
        self.rec.events.sort_by_key(Event::time_ns);
        self.rec.clone()
    }
}

fn tcp(t: u64, kind: TcpKind, since: u64, tid: u32) -> Event {
    Event::Tcp(Tcp {
        t,
        cpu: 0,
        kind,
        sock: 0xabc,
        since_ns: since,
        tid,
        unsent: 16,
        in_flight: 16,
        nagle: true,
        cork: false,
        local: "127.0.0.1:1".into(),
        remote: "127.0.0.1:2".into(),
    })
}

/// Many quick requests (the bulk), then the records under test.
fn bulk(b: &mut B, n: u64) {
    for i in 0..n {
        let t = 10 * MS + i * MS;
        b.span(1000 + i, t, t + 20 * US);
    }
}

fn all(p: f64) -> StudyParams {
    StudyParams {
        above_pct: p,
        ..StudyParams::default()
    }
}

fn slow_one(r: &TraceReport, id: u64) -> &RequestReport {
    r.slow
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("request {id} not among the slow: {:?}", r.slow))
}

#[test]
fn a_response_held_by_nagle_is_named_with_the_delayed_ack() {
    let mut b = B::new();
    bulk(&mut b, 200);
    // request 1 runs 30 µs on CPU 0, its second write is held 40 ms
    b.sw(500 * MS, 0, 0, 0, LC)
        .span(1, 500 * MS, 500 * MS + 30 * US)
        .ev(Event::Tcp(Tcp {
            kind: TcpKind::DelayedAck,
            ..match tcp(500 * MS + 20 * US, TcpKind::DelayedAck, 0, CLIENT) {
                Event::Tcp(t) => t,
                _ => unreachable!(),
            }
        }))
        .ev(tcp(
            500 * MS + 25 * US,
            TcpKind::Held,
            500 * MS + 25 * US,
            LC,
        ))
        .ev(tcp(540 * MS, TcpKind::Released, 500 * MS + 25 * US, CLIENT))
        .sw(500 * MS + 40 * US, 0, LC, 1, 0);
    let rec = b.done();
    let r = study(&rec, &[], all(99.0));
    let s = slow_one(&r, 1);
    assert_eq!(r.slow[0].id, 1, "the slowest");
    assert_eq!(s.top, Some(CauseKind::TcpHeld));
    assert_eq!(s.top_hazard, Some(CauseKind::TcpHeld));
    let c = &s.causes[0];
    assert!(c.delayed_ack, "{c:?}");
    assert!(c.ns > 39 * MS && c.ns < 41 * MS, "{}", c.ns);
    assert!(c.text.contains("Nagle"), "{}", c.text);
    assert_eq!(r.count(CauseKind::TcpHeld).attributed, 1);
    assert_eq!(r.facts.tcp_holds, 1);
    assert_eq!(r.facts.delayed_acks, 1);
}

#[test]
fn a_pause_of_the_vm_thread_while_the_lc_thread_sleeps_is_a_jvm_pause() {
    let mut b = B::new();
    bulk(&mut b, 200);
    // request 2: runs 10 µs, sleeps 3 ms while the VM thread runs on CPU 1
    b.span(2, 600 * MS, 603 * MS + 20 * US)
        .sw(600 * MS, 0, 0, 0, LC)
        .sw(600 * MS + 10 * US, 0, LC, 1, 0)
        .sw(600 * MS + 20 * US, 1, 0, 0, VM)
        .sw(603 * MS, 1, VM, 1, 0)
        .ev(Event::Wakeup(Wakeup {
            t: 603 * MS,
            cpu: 1,
            wakee: LC,
            waker: VM,
            chain: vec![],
        }))
        .sw(603 * MS + 5 * US, 0, 0, 0, LC)
        .sw(603 * MS + 20 * US, 0, LC, 1, 0);
    let r = study(&b.done(), &[], all(99.0));
    let s = slow_one(&r, 2);
    assert_eq!(s.top, Some(CauseKind::JvmPause), "{:?}", s.causes);
    assert_eq!(s.top_hazard, Some(CauseKind::JvmPause));
    assert_eq!(r.facts.jvm_pauses, 1);
    assert!(r.facts.jvm_pause_ns >= 2 * MS);
}

#[test]
fn huge_page_faults_jit_preemption_wakeups_and_batch_are_each_named() {
    let mut b = B::new();
    bulk(&mut b, 300);
    let t = 700 * MS;
    b.span(3, t, t + 10 * MS)
        .sw(t, 0, 0, 0, LC)
        // a 4 ms huge-page fault
        .ev(Event::Fault(Fault {
            t: t + 100 * US,
            cpu: 0,
            tid: LC,
            dur_ns: 4 * MS,
            addr: 0x1000,
            major: false,
            huge: true,
        }))
        // preempted 2 ms by another process
        .sw(t + 5 * MS, 0, LC, 0, OTHER)
        .sw(t + 7 * MS, 0, OTHER, 1, LC)
        // asleep 2 ms, woken by the dispatcher, which the client woke
        .sw(t + 7 * MS + 500 * US, 0, LC, 1, 0)
        .ev(Event::Wakeup(Wakeup {
            t: t + 9 * MS + 400 * US,
            cpu: 1,
            wakee: LC,
            waker: DISP,
            chain: vec![CLIENT],
        }))
        .sw(t + 9 * MS + 500 * US, 0, 0, 0, LC)
        .sw(t + 10 * MS, 0, LC, 1, 0)
        // on CPU 1: the JIT 3 ms, then batch work 5 ms
        .sw(t, 1, 0, 0, JIT)
        .sw(t + 3 * MS, 1, JIT, 1, OTHER)
        .sw(t + 8 * MS, 1, OTHER, 1, 0);
    let r = study(&b.done(), &[], all(99.0));
    let s = slow_one(&r, 3);
    let get = |k: CauseKind| {
        s.causes
            .iter()
            .find(|c| c.kind == k)
            .unwrap_or_else(|| panic!("{k:?} missing: {:?}", s.causes))
    };
    let f = get(CauseKind::PageFaults);
    assert_eq!((f.ns, f.count, f.huge), (4 * MS, 1, 1));
    assert!(f.attributed);
    // preempted 2 ms, and runnable 0.1 ms from its wake-up to its run
    assert_eq!(get(CauseKind::Preemption).ns, 2 * MS + 100 * US);
    assert_eq!(get(CauseKind::Preemption).who[0].comm, "stream");
    let w = get(CauseKind::WakeupWait);
    assert_eq!(w.ns, 2 * MS - 100 * US);
    let chain: Vec<&str> = w.who.iter().map(|t| t.comm.as_str()).collect();
    assert_eq!(chain, vec!["elfen-lucene-di", "client"]);
    // the JIT ran 3 of its 10 ms beside it, no exchange with it: not cold
    assert!(s.causes.iter().all(|c| c.kind != CauseKind::JvmWarmup));
    let co = get(CauseKind::BatchCorun);
    assert_eq!(co.ns, 5 * MS);
    assert_eq!(co.who[0].comm, "stream");
    assert_eq!(s.top, Some(CauseKind::BatchCorun));
    assert_eq!(s.top_hazard, Some(CauseKind::PageFaults));
    // own work: on CPU 5 + 0.5 + 0.5 ms less the fault
    assert_eq!(get(CauseKind::Service).ns, 2 * MS);
}

#[test]
fn a_request_that_waits_for_the_jit_ran_cold_code() {
    let mut b = B::new();
    bulk(&mut b, 200);
    let t = 650 * MS;
    // 4 ms of own work, wakes the compiler (a compilation request), sleeps
    // 2 ms until the compiler wakes it, 1 ms more work
    b.span(7, t, t + 7 * MS)
        .sw(t, 0, 0, 0, LC)
        .ev(Event::Wakeup(Wakeup {
            t: t + MS,
            cpu: 0,
            wakee: JIT,
            waker: LC,
            chain: vec![],
        }))
        .sw(t + MS, 1, 0, 0, JIT)
        .sw(t + 4 * MS, 0, LC, 1, 0)
        .ev(Event::Wakeup(Wakeup {
            t: t + 6 * MS,
            cpu: 1,
            wakee: LC,
            waker: JIT,
            chain: vec![LC],
        }))
        .sw(t + 6 * MS, 1, JIT, 1, 0)
        .sw(t + 6 * MS, 0, 0, 0, LC)
        .sw(t + 7 * MS, 0, LC, 1, 0);
    let r = study(&b.done(), &[], all(99.0));
    let s = slow_one(&r, 7);
    assert_eq!(s.top, Some(CauseKind::JvmWarmup), "{:?}", s.causes);
    assert_eq!(s.top_hazard, Some(CauseKind::JvmWarmup));
    let c = &s.causes[0];
    assert_eq!(c.ns, 7 * MS, "own work 5 ms + 2 ms waiting for the JIT");
    assert_eq!(c.count, 2, "two exchanges with the compiler");
    assert!(
        s.causes
            .iter()
            .all(|c| c.kind != CauseKind::WakeupWait && c.kind != CauseKind::Service)
    );
}

#[test]
fn queueing_behind_a_paused_request_names_the_root() {
    let mut b = B::new();
    bulk(&mut b, 300);
    let t = 800 * MS;
    // request 4 is paused 5 ms by the VM thread; request 5 arrives during it
    b.span(4, t, t + 5 * MS)
        .sw(t, 0, 0, 0, LC)
        .sw(t + 10 * US, 0, LC, 1, 0)
        .sw(t + 10 * US, 1, 0, 0, VM)
        .sw(t + 5 * MS - 10 * US, 1, VM, 1, 0)
        .sw(t + 5 * MS - 5 * US, 0, 0, 0, LC)
        .span(5, t + 5 * MS + 5 * US, t + 5 * MS + 30 * US);
    let rec = b.done();
    let client: Vec<ClientSpan> = rec
        .spans
        .iter()
        .map(|s| ClientSpan {
            id: s.id,
            intended_ns: if s.id == 5 {
                t + MS
            } else {
                s.begin_ns - 10 * US
            },
            sent_ns: if s.id == 5 {
                t + MS
            } else {
                s.begin_ns - 10 * US
            },
            received_ns: Some(s.end_ns + 10 * US),
        })
        .collect();
    let r = study(&rec, &client, all(99.0));
    assert!(r.client_spans);
    let s = slow_one(&r, 5);
    assert_eq!(s.top, Some(CauseKind::Queueing), "{:?}", s.causes);
    assert_eq!(s.causes[0].behind, vec![4]);
    assert_eq!(s.root_hazard, Some(CauseKind::JvmPause));
    assert_eq!(r.count(CauseKind::JvmPause).hazard_top, 2, "{:?}", r.counts);
}

#[test]
fn a_queue_behind_a_queue_finds_the_root() {
    let mut b = B::new();
    bulk(&mut b, 300);
    let t = 800 * MS;
    // 4 paused 5 ms; 5 queues behind it and runs 100 µs; 6 queues behind 5
    // the longest (it arrived during 4's pause, 5 ran before it)
    b.span(4, t, t + 5 * MS)
        .sw(t, 0, 0, 0, LC)
        .sw(t + 10 * US, 0, LC, 1, 0)
        .sw(t + 10 * US, 1, 0, 0, VM)
        .sw(t + 5 * MS - 10 * US, 1, VM, 1, 0)
        .sw(t + 5 * MS - 5 * US, 0, 0, 0, LC)
        .span(5, t + 5 * MS, t + 8 * MS)
        .span(6, t + 8 * MS, t + 8 * MS + 20 * US);
    let rec = b.done();
    let client: Vec<ClientSpan> = rec
        .spans
        .iter()
        .map(|s| {
            let at = match s.id {
                5 => t + 100 * US,
                6 => t + 4 * MS + 900 * US,
                _ => s.begin_ns - 10 * US,
            };
            ClientSpan {
                id: s.id,
                intended_ns: at,
                sent_ns: at,
                received_ns: Some(s.end_ns + 10 * US),
            }
        })
        .collect();
    let r = study(&rec, &client, all(99.0));
    let s = slow_one(&r, 6);
    assert_eq!(s.causes[0].behind[0], 5, "{:?}", s.causes);
    assert_eq!(s.root_hazard, Some(CauseKind::JvmPause));
}

#[test]
fn a_request_the_poller_missed_still_queues_behind_the_paused_one() {
    let mut b = B::new();
    bulk(&mut b, 300);
    let t = 800 * MS;
    b.span(4, t, t + 5 * MS)
        .sw(t, 0, 0, 0, LC)
        .sw(t + 10 * US, 0, LC, 1, 0)
        .sw(t + 10 * US, 1, 0, 0, VM)
        .sw(t + 5 * MS - 10 * US, 1, VM, 1, 0)
        .sw(t + 5 * MS - 5 * US, 0, 0, 0, LC);
    let rec = b.done();
    let mut client: Vec<ClientSpan> = rec
        .spans
        .iter()
        .map(|s| ClientSpan {
            id: s.id,
            intended_ns: s.begin_ns - 10 * US,
            sent_ns: s.begin_ns - 10 * US,
            received_ns: Some(s.end_ns + 10 * US),
        })
        .collect();
    // request 5 is on the wire only: sent during 4's pause, answered after it
    client.push(ClientSpan {
        id: 5,
        intended_ns: t + MS,
        sent_ns: t + MS,
        received_ns: Some(t + 5 * MS + 40 * US),
    });
    let r = study(&rec, &client, all(99.0));
    assert_eq!(r.requests, 302);
    let s = slow_one(&r, 5);
    assert!(s.span.is_none());
    assert_eq!(s.top, Some(CauseKind::Queueing), "{:?}", s.causes);
    assert_eq!(s.causes[0].behind, vec![4]);
    assert_eq!(s.root_hazard, Some(CauseKind::JvmPause));
}

#[test]
fn small_causes_are_not_attributed_and_the_percentile_picks_the_slowest() {
    let mut b = B::new();
    bulk(&mut b, 99);
    // one request of 1 ms own work with a 5 µs fault: not a hazard
    let t = 900 * MS;
    b.span(6, t, t + MS)
        .sw(t, 0, 0, 0, LC)
        .ev(Event::Fault(Fault {
            t: t + 100 * US,
            cpu: 0,
            tid: LC,
            dur_ns: 5 * US,
            addr: 0,
            major: false,
            huge: false,
        }))
        .sw(t + MS, 0, LC, 1, 0);
    let r = study(&b.done(), &[], all(99.0));
    assert_eq!(r.requests, 100);
    assert_eq!(r.slow.len(), 1, "p99 of 100 is the slowest one");
    let s = &r.slow[0];
    assert_eq!(s.id, 6);
    assert_eq!(s.top, Some(CauseKind::Service));
    assert_eq!(s.top_hazard, None);
    assert!(
        !s.causes
            .iter()
            .find(|c| c.kind == CauseKind::PageFaults)
            .unwrap()
            .attributed
    );
    assert_eq!(r.latency.max_ns, MS);
}
