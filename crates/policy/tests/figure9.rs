//! Walks every transition of the Elfen paper's Figure 9 (a–d), then checks
//! the budget invariants over long random traces.

use elfen_policy::{
    Decision, LaneStatus, Observation, Policy, PolicyConfig, PolicyKind, PolicyState, transition,
};

const B: u64 = 1_000; // budget (ns) used throughout

fn st(status: LaneStatus, start_ns: u64, last_request: u64) -> PolicyState {
    PolicyState {
        status,
        start_ns,
        last_request,
    }
}

fn idle(q: u32, now: u64) -> Observation {
    Observation {
        queue_len: q,
        ..Observation::idle(now)
    }
}

fn busy(req: u64, q: u32, now: u64) -> Observation {
    Observation::busy(req, q, now)
}

/// (name, policy, state before, observation, expected decision, expected state after)
type Row = (
    &'static str,
    PolicyKind,
    PolicyState,
    Observation,
    Decision,
    PolicyState,
);

#[rustfmt::skip]
fn rows() -> Vec<Row> {
    use Decision::{Nap, Run};
    use LaneStatus::{CoRunning, NewPeriod, Normal};
    use PolicyKind::*;
    let n = st(Normal, 0, 0);
    vec![
        // ---- 9a borrow idle: run iff the request lane is idle; no state.
        ("9a idle", BorrowIdle, n, idle(0, 5), Run, n),
        ("9a idle, queue", BorrowIdle, n, idle(3, 5), Run, n),
        ("9a busy", BorrowIdle, n, busy(1, 0, 5), Nap, n),
        ("9a busy, queue", BorrowIdle, n, busy(1, 2, 5), Nap, n),
        // ---- unmanaged (baseline): always run.
        ("naive busy", Unmanaged, n, busy(1, 9, 5), Run, n),
        ("naive idle", Unmanaged, n, idle(0, 5), Run, n),
        // ---- 9b fixed budget.
        // line 8-9: idle && queue_len == 0 -> NEW_PERIOD (from every status)
        ("9b NORMAL idle q=0", FixedBudget, n, idle(0, 7), Run, st(NewPeriod, 0, 0)),
        ("9b NEW_PERIOD idle q=0", FixedBudget, st(NewPeriod, 0, 0), idle(0, 7), Run, st(NewPeriod, 0, 0)),
        ("9b CO_RUNNING idle q=0", FixedBudget, st(CoRunning, 3, 0), idle(0, 7), Run, st(NewPeriod, 3, 0)),
        // idle with a queue: neither branch of the check, keep running, no change
        ("9b NORMAL idle q>0", FixedBudget, n, idle(2, 7), Run, n),
        ("9b NEW_PERIOD idle q>0", FixedBudget, st(NewPeriod, 0, 0), idle(2, 7), Run, st(NewPeriod, 0, 0)),
        ("9b CO_RUNNING idle q>0", FixedBudget, st(CoRunning, 3, 0), idle(2, 7), Run, st(CoRunning, 3, 0)),
        // line 15-16: NORMAL + busy -> nanonap
        ("9b NORMAL busy", FixedBudget, n, busy(1, 0, 7), Nap, n),
        // line 18-20: NEW_PERIOD + busy -> CO_RUNNING, start = now
        ("9b NEW_PERIOD busy", FixedBudget, st(NewPeriod, 0, 0), busy(1, 0, 70), Run, st(CoRunning, 70, 0)),
        // line 22-25: CO_RUNNING + busy -> expire when now - start >= budget
        ("9b CO_RUNNING in budget", FixedBudget, st(CoRunning, 70, 0), busy(1, 0, 70 + B - 1), Run, st(CoRunning, 70, 0)),
        ("9b CO_RUNNING expired", FixedBudget, st(CoRunning, 70, 0), busy(1, 0, 70 + B), Nap, st(Normal, 70, 0)),
        // fixed budget never refreshes on a new request
        ("9b CO_RUNNING new request", FixedBudget, st(CoRunning, 70, 0), busy(2, 0, 70 + B), Nap, st(Normal, 70, 0)),
        // ---- 9c refresh budget.
        ("9c NEW_PERIOD busy remembers request", RefreshBudget, st(NewPeriod, 0, 0), busy(5, 0, 70), Run, st(CoRunning, 70, 5)),
        ("9c same request, in budget", RefreshBudget, st(CoRunning, 70, 5), busy(5, 0, 100), Run, st(CoRunning, 70, 5)),
        ("9c same request, expired", RefreshBudget, st(CoRunning, 70, 5), busy(5, 0, 70 + B), Nap, st(Normal, 70, 5)),
        // line 13-16: new request && queue empty -> refresh start and last_request
        ("9c new request q=0 refreshes", RefreshBudget, st(CoRunning, 70, 5), busy(6, 0, 70 + B), Run, st(CoRunning, 70 + B, 6)),
        // new request but requests queued behind it: no refresh
        ("9c new request q>0 no refresh", RefreshBudget, st(CoRunning, 70, 5), busy(6, 1, 70 + B), Nap, st(Normal, 70, 5)),
        ("9c new request q>0 in budget", RefreshBudget, st(CoRunning, 70, 5), busy(6, 1, 80), Run, st(CoRunning, 70, 5)),
        ("9c NORMAL busy", RefreshBudget, st(Normal, 70, 5), busy(6, 0, 9_000), Nap, st(Normal, 70, 5)),
        ("9c idle q=0", RefreshBudget, st(Normal, 70, 5), idle(0, 9_000), Run, st(NewPeriod, 70, 5)),
        // ---- 9d dynamic refresh: no reference IPC -> behaves as refresh budget
        ("9d no counters, expired", DynamicRefresh, st(CoRunning, 70, 5), busy(5, 0, 70 + B), Nap, st(Normal, 70, 5)),
        ("9d new request q=0 refreshes", DynamicRefresh, st(CoRunning, 70, 5), busy(6, 0, 70 + B), Run, st(CoRunning, 70 + B, 6)),
        ("9d NEW_PERIOD busy", DynamicRefresh, st(NewPeriod, 0, 0), busy(5, 0, 70), Run, st(CoRunning, 70, 5)),
    ]
}

#[test]
fn every_transition_of_figure_9() {
    for (name, kind, before, obs, want_d, want_s) in rows() {
        let cfg = PolicyConfig::budget(kind, B);
        let (d, after) = transition(&cfg, before, &obs);
        assert_eq!(
            (d, after),
            (want_d, want_s),
            "{name}: {kind} from {before:?} on {obs:?}"
        );
    }
}

#[test]
fn dynamic_refresh_scales_the_budget_with_lc_ipc() {
    let cfg = PolicyConfig {
        ref_ipc: Some(2.0),
        ..PolicyConfig::budget(PolicyKind::DynamicRefresh, B)
    };
    let co = st(LaneStatus::CoRunning, 0, 5);
    let at = |now, ipc| Observation {
        lc_ipc: Some(ipc),
        ..busy(5, 0, now)
    };
    // LC IPC 1.0 of a reference 2.0: ratio 2, budget 2B.
    assert_eq!(transition(&cfg, co, &at(2 * B - 1, 1.0)).0, Decision::Run);
    assert_eq!(transition(&cfg, co, &at(2 * B, 1.0)).0, Decision::Nap);
    // LC barely running (IPC 0): ratio 1, budget B.
    assert_eq!(transition(&cfg, co, &at(B, 0.0)).0, Decision::Nap);
    // No sample this check: unscaled.
    let no_sample = busy(5, 0, B);
    assert_eq!(transition(&cfg, co, &no_sample).0, Decision::Nap);
}

#[test]
fn policy_object_walks_a_request_sequence() {
    // idle -> request 1 (co-run on the budget) -> expiry -> request 1 ends with
    // an empty queue -> request 2 co-runs again.
    let mut p = Policy::new(PolicyConfig::budget(PolicyKind::FixedBudget, B)).unwrap();
    assert_eq!(
        p.step(&busy(1, 0, 0)),
        Decision::Nap,
        "starts NORMAL: no budget before an idle period"
    );
    assert!(!p.time_sensitive());
    assert_eq!(p.step(&idle(0, 10)), Decision::Run);
    assert_eq!(p.state().status, LaneStatus::NewPeriod);
    assert_eq!(p.step(&busy(2, 0, 20)), Decision::Run);
    assert!(
        p.time_sensitive(),
        "co-running: expiry depends on time alone"
    );
    assert_eq!(p.step(&busy(2, 0, 20 + B / 2)), Decision::Run);
    assert_eq!(p.step(&busy(2, 0, 20 + B)), Decision::Nap);
    assert!(!p.time_sensitive());
    assert_eq!(p.step(&busy(2, 0, 30 + B)), Decision::Nap);
    assert_eq!(p.step(&idle(0, 40 + B)), Decision::Run);
    assert_eq!(p.step(&busy(3, 0, 50 + B)), Decision::Run);
    p.reconfigure(PolicyConfig::simple(PolicyKind::BorrowIdle))
        .unwrap();
    assert_eq!(p.state(), PolicyState::default());
    assert_eq!(p.step(&busy(3, 0, 60 + B)), Decision::Nap);
}

/// A small deterministic generator so the traces are the same on every run.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Over random traces of checks, a budget policy only ever runs while the
/// request lane is busy within `budget` of the start of its current period,
/// and fixed budget spends at most one budget per idle period.
#[test]
fn budget_policies_never_co_run_past_the_budget() {
    for kind in [
        PolicyKind::FixedBudget,
        PolicyKind::RefreshBudget,
        PolicyKind::DynamicRefresh,
    ] {
        let cfg = PolicyConfig::budget(kind, B);
        let mut rng = Lcg(0xE1F3 + kind.id() as u64);
        let mut p = Policy::new(cfg).unwrap();
        let (mut now, mut req, mut busy_now, mut q) = (0u64, 0u64, false, 0u32);
        // Co-run time granted per idle period (fixed budget's invariant).
        let mut corun_this_period = 0u64;
        let mut last_run_busy_at: Option<u64> = None;
        let mut runs_while_busy = 0u32;
        for _ in 0..200_000 {
            let dt = 1 + rng.next() % 200;
            now += dt;
            match rng.next() % 50 {
                0 => {
                    busy_now = !busy_now;
                    if busy_now {
                        req += 1;
                    }
                }
                1 => q = (rng.next() % 3) as u32,
                2 if busy_now => req += 1, // next request starts without an idle gap
                _ => {}
            }
            let obs = Observation {
                lc_busy: busy_now,
                queue_len: q,
                running_request: req,
                now_ns: now,
                lc_ipc: None,
            };
            let before = p.state();
            let d = p.step(&obs);
            if !busy_now && q == 0 {
                corun_this_period = 0;
                last_run_busy_at = None;
            }
            if d == Decision::Run && busy_now {
                runs_while_busy += 1;
                let s = p.state();
                assert_eq!(
                    s.status,
                    LaneStatus::CoRunning,
                    "{kind}: ran while busy outside CO_RUNNING"
                );
                assert!(
                    now - s.start_ns < B,
                    "{kind}: co-ran {} ns into a {B} ns budget",
                    now - s.start_ns
                );
                if kind == PolicyKind::FixedBudget {
                    if let Some(prev) = last_run_busy_at {
                        corun_this_period += now - prev;
                    }
                    assert!(
                        corun_this_period < B,
                        "{kind}: {corun_this_period} ns of co-run in one period"
                    );
                }
                last_run_busy_at = Some(now);
            } else if busy_now {
                last_run_busy_at = None;
                assert_eq!(d, Decision::Nap);
                assert!(
                    before.status != LaneStatus::NewPeriod,
                    "{kind}: a new period must start co-running"
                );
            }
        }
        assert!(
            runs_while_busy > 1_000,
            "{kind}: the trace never co-ran ({runs_while_busy})"
        );
    }
}
