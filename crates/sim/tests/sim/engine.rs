//! Engine correctness: closed forms (M/M/1, M/M/c) and the invariants the
//! policies promise. Small request counts so the suite stays fast; no speed
//! assertions.

use elfen_policy::blind::BlindIsolation;
use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_results::Rep;
use elfen_sim::arrivals::Arrivals;
use elfen_sim::batch::Interference;
use elfen_sim::demand::{Demand, DemandSpec};
use elfen_sim::engine::{Mode, RunOutput, RunSpec, ServerModel, Timing, run};
use elfen_sim::sweep::PointSpec;
use std::path::Path;

const ZERO: Timing = Timing {
    nap_ns: 0,
    wake_ns: 0,
    os_preempt_ns: 0,
    blind_react_ns: 0,
};
const NANONAP: Timing = Timing {
    nap_ns: 1640,
    wake_ns: 720,
    os_preempt_ns: 6000,
    blind_react_ns: 25_000,
};
const CORE: ServerModel = ServerModel {
    worker_cores: 1,
    smt_ways: 2,
};

fn inter(s: f64) -> Interference {
    Interference {
        lc_slowdown: s,
        corun_rate: 0.5,
    }
}

fn exp_demand(mean_us: f64) -> Demand {
    DemandSpec::Exponential { mean_us }
        .resolve(Path::new("."))
        .unwrap()
}

fn lucene() -> Demand {
    DemandSpec::Lucene.resolve(Path::new(".")).unwrap()
}

fn raw(
    server: ServerModel,
    mode: Mode,
    i: Interference,
    t: Timing,
    rps: f64,
    d: &Demand,
    n: u64,
) -> RunOutput {
    let a = Arrivals::at_rps(None, rps);
    run(&RunSpec {
        server,
        mode,
        interference: i,
        timing: t,
        arrivals: &a,
        demand: d,
        requests: n,
        warmup_requests: n / 10,
        arrival_seed: 11,
        demand_seed: 12,
        record_idle: false,
    })
}

/// One repetition of a point; `Case::new` fills in one core, one leaf,
/// nanonap timing and 20 000 requests.
#[derive(Clone, Copy)]
struct Case<'a> {
    server: ServerModel,
    leaves: u32,
    mode: Mode,
    slowdown: f64,
    rps: f64,
    demand: &'a Demand,
    requests: u64,
}

impl<'a> Case<'a> {
    fn new(mode: Mode, slowdown: f64, rps: f64, demand: &'a Demand) -> Self {
        Case {
            server: CORE,
            leaves: 1,
            mode,
            slowdown,
            rps,
            demand,
            requests: 20_000,
        }
    }

    fn rep(self) -> Rep {
        PointSpec {
            server: self.server,
            leaves: self.leaves,
            mode: self.mode,
            interference: inter(self.slowdown),
            timing: NANONAP,
            rps: self.rps,
            trace: None,
            demand: self.demand,
            requests: self.requests,
            warmup_requests: self.requests / 10,
            seed: 5,
            record_idle: false,
        }
        .run_rep(0)
        .rep
    }
}

/// LC alone, zero mechanism latencies, 100 000 requests, seeds from `seed`.
fn alone_run(server: ServerModel, rps: f64, d: &Demand, seed: u64) -> RunOutput {
    let a = Arrivals::at_rps(None, rps);
    run(&RunSpec {
        server,
        mode: Mode::Alone,
        interference: inter(1.0),
        timing: ZERO,
        arrivals: &a,
        demand: d,
        requests: 100_000,
        warmup_requests: 5_000,
        arrival_seed: seed,
        demand_seed: seed + 1000,
        record_idle: false,
    })
}

fn elfen(k: PolicyKind) -> Mode {
    Mode::Elfen(PolicyConfig::simple(k))
}

fn close(x: f64, want: f64, rel: f64, what: &str) {
    assert!(
        ((x - want) / want).abs() <= rel,
        "{what}: {x} vs {want} (±{}%)",
        rel * 100.0
    );
}

#[test]
fn mm1_matches_the_closed_form() {
    // mu = 1000/s (1 ms mean), lambda = 500/s: mean sojourn 1/(mu - lambda)
    // = 2 ms, sojourn ~ Exp(mu - lambda) so p99 = ln(100) * 2 ms, rho = 0.5.
    let d = exp_demand(1000.0);
    let mut total = 0.0;
    let mut p99 = 0.0;
    let mut u = 0.0;
    let seeds = 4;
    for s in 0..seeds {
        let out = alone_run(CORE, 500.0, &d, 100 + s);
        let mut lat = out.latencies_ns.clone();
        let p = elfen_sim::stats::percentiles_us(&mut lat);
        total += p.mean;
        p99 += p.p99;
        u += elfen_sim::stats::utilization(&out).lc;
    }
    let n = seeds as f64;
    close(total / n, 2000.0, 0.04, "mean latency (us)");
    close(p99 / n, 2000.0 * 100f64.ln(), 0.06, "p99 latency (us)");
    close(u / n, 0.5, 0.02, "utilization");
}

#[test]
fn mmc_shared_queue_matches_erlang_c() {
    // c = 4 workers, mu = 1000/s each, lambda = 3000/s (rho = 0.75).
    // Mean wait W_q = C(c, a) / (c mu - lambda), a = lambda / mu.
    let (c, mu, lambda) = (4u32, 1000.0f64, 3000.0f64);
    let a = lambda / mu;
    let fact = |k: u32| (1..=k).map(f64::from).product::<f64>();
    let rho = a / f64::from(c);
    let top = a.powi(c as i32) / fact(c) / (1.0 - rho);
    let bottom: f64 = (0..c).map(|k| a.powi(k as i32) / fact(k)).sum::<f64>() + top;
    let erlang_c = top / bottom;
    let want_us = (erlang_c / (f64::from(c) * mu - lambda) + 1.0 / mu) * 1e6;
    let d = exp_demand(1000.0);
    let chip = ServerModel {
        worker_cores: c,
        smt_ways: 2,
    };
    let mut mean = 0.0;
    for s in 0..3 {
        let out = alone_run(chip, lambda, &d, 300 + s);
        let mut lat = out.latencies_ns.clone();
        mean += elfen_sim::stats::percentiles_us(&mut lat).mean / 3.0;
        close(
            elfen_sim::stats::utilization(&out).lc,
            rho,
            0.03,
            "per-core utilization",
        );
    }
    close(mean, want_us, 0.05, "M/M/4 mean sojourn (us)");
}

#[test]
fn borrow_idle_with_zero_latencies_is_mutual_exclusion() {
    let d = lucene();
    for rps in [20.0, 80.0, 130.0] {
        let o = raw(
            CORE,
            elfen(PolicyKind::BorrowIdle),
            inter(1.7),
            ZERO,
            rps,
            &d,
            20_000,
        );
        assert_eq!(
            o.batch_corun_lane_ns, 0,
            "batch never runs while a request runs"
        );
        assert_eq!(o.corun_max_ns, 0);
        let u = elfen_sim::stats::utilization(&o);
        assert!(
            u.total <= 1.0 + 1e-9,
            "lc + batch <= 1 per pair, got {}",
            u.total
        );
        close(u.total, 1.0, 1e-6, "borrow idle keeps the pair busy");
        // Latencies equal LC alone's on the same random streams.
        let alone = raw(CORE, Mode::Alone, inter(1.7), ZERO, rps, &d, 20_000);
        assert_eq!(o.latencies_ns, alone.latencies_ns);
    }
}

#[test]
fn borrow_idle_corun_is_bounded_by_the_step_aside_latency() {
    let d = lucene();
    let o = raw(
        CORE,
        elfen(PolicyKind::BorrowIdle),
        inter(1.7),
        NANONAP,
        100.0,
        &d,
        20_000,
    );
    assert!(o.corun_max_ns <= NANONAP.nap_ns, "{} > nap", o.corun_max_ns);
    assert!(o.naps > 0 && o.wakes > 0);
    let u = elfen_sim::stats::utilization(&o);
    assert!(u.total <= 1.0 + 1e-3, "{}", u.total);
}

#[test]
fn budget_policies_corun_at_most_the_budget_per_request() {
    let d = lucene();
    let budget = 3_000_000; // 3 ms: shorter than many requests, so it binds
    for kind in [PolicyKind::FixedBudget, PolicyKind::RefreshBudget] {
        for t in [ZERO, NANONAP] {
            let o = raw(
                CORE,
                Mode::Elfen(PolicyConfig::budget(kind, budget)),
                inter(1.7),
                t,
                90.0,
                &d,
                20_000,
            );
            assert!(
                o.corun_max_ns <= budget + t.nap_ns,
                "{kind}: co-run {} > budget {budget} + nap {}",
                o.corun_max_ns,
                t.nap_ns
            );
            assert!(o.corun_max_ns > budget / 2, "{kind}: the budget is used");
            assert!(o.batch_corun_lane_ns > 0);
        }
    }
    // Dynamic refresh scales the budget by ref/(ref - ref/s) = s/(s-1),
    // clamped to max_budget_ratio.
    let mut cfg = PolicyConfig::budget(PolicyKind::DynamicRefresh, budget);
    cfg.ref_ipc = Some(1.0);
    cfg.max_budget_ratio = 4.0;
    let o = raw(
        CORE,
        Mode::Elfen(cfg),
        inter(1.7),
        NANONAP,
        90.0,
        &d,
        20_000,
    );
    let scaled = (budget as f64 * 1.7 / 0.7) as u64;
    assert!(
        o.corun_max_ns <= scaled + NANONAP.nap_ns,
        "{} > {scaled}",
        o.corun_max_ns
    );
    assert!(
        o.corun_max_ns > budget,
        "dynamic refresh co-runs longer than the base budget"
    );
}

#[test]
fn budget_policies_raise_utilization_above_borrow_idle() {
    let d = lucene();
    let bi = Case::new(elfen(PolicyKind::BorrowIdle), 1.7, 60.0, &d).rep();
    let fb = Case::new(
        Mode::Elfen(PolicyConfig::budget(PolicyKind::FixedBudget, 20_000_000)),
        1.7,
        60.0,
        &d,
    )
    .rep();
    assert!(fb.utilization.total > bi.utilization.total + 0.1);
    assert!(fb.latency_us.p99 >= bi.latency_us.p99);
}

#[test]
fn naive_corun_moves_p99_right() {
    let d = lucene();
    let naive = elfen(PolicyKind::Unmanaged);
    let alone = Case::new(Mode::Alone, 1.0, 80.0, &d).rep();
    let same = Case::new(naive, 1.0, 80.0, &d).rep();
    assert_eq!(same.latency_us, alone.latency_us, "slowdown 1: no effect");
    let slow = Case::new(naive, 1.5, 80.0, &d).rep();
    assert!(
        slow.latency_us.p99 > 1.5 * alone.latency_us.p99,
        "{} vs {}",
        slow.latency_us.p99,
        alone.latency_us.p99
    );
    close(
        slow.utilization.batch,
        1.0,
        1e-6,
        "naive batch lane always busy",
    );
    // Progress: batch co-running at rate 0.5 while the request lane is busy.
    let lc = slow.utilization.lc;
    close(
        slow.batch_progress.unwrap(),
        1.0 - 0.5 * lc,
        1e-6,
        "batch progress",
    );
}

#[test]
fn sched_idle_fills_every_lane_and_delays_requests() {
    let d = exp_demand(1000.0);
    let alone = Case::new(Mode::Alone, 1.0, 100.0, &d).rep();
    let os = Case::new(Mode::SchedIdle, 1.0, 100.0, &d).rep();
    close(os.utilization.total, 2.0, 1e-6, "both lanes always busy");
    // At 10% load nearly every request finds the lane idle: + 6 µs each.
    let delta = os.latency_us.mean - alone.latency_us.mean;
    assert!(
        delta > 5.0 && delta < 7.0,
        "mean latency grows by ~the preemption delay, got {delta}"
    );
}

#[test]
fn static_partition_and_blind_isolation_never_corun() {
    let d = lucene();
    let chip = ServerModel {
        worker_cores: 7,
        smt_ways: 2,
    };
    let st = raw(
        chip,
        Mode::StaticPartition { batch_cores: 2 },
        inter(1.7),
        NANONAP,
        400.0,
        &d,
        20_000,
    );
    assert_eq!(st.batch_corun_lane_ns, 0);
    close(
        elfen_sim::stats::utilization(&st).batch,
        4.0 / 7.0,
        1e-9,
        "2 cores x 2 lanes / 7",
    );
    let law = BlindIsolation { buffer_cores: 2 };
    let bl = raw(
        chip,
        Mode::Blind(law),
        inter(1.7),
        NANONAP,
        400.0,
        &d,
        20_000,
    );
    assert_eq!(bl.batch_corun_lane_ns, 0);
    let u = elfen_sim::stats::utilization(&bl);
    assert!(
        u.batch <= 2.0 * 5.0 / 7.0 + 1e-9,
        "at most total - B cores: {}",
        u.batch
    );
    // Steady state S = total - busy - B with busy = 400 RPS x 5.83 ms = 2.33
    // cores: 2 lanes x 2.67 / 7 = 0.76 lanes per core.
    close(
        u.batch,
        2.0 * (7.0 - 400.0 * 5.83e-3 - 2.0) / 7.0,
        0.1,
        "blind isolation's fixed point",
    );
    // Blind isolation leaves B cores for bursts: latency close to LC alone.
    let alone = raw(chip, Mode::Alone, inter(1.7), NANONAP, 400.0, &d, 20_000);
    let (mut a, mut b) = (alone.latencies_ns.clone(), bl.latencies_ns.clone());
    let (pa, pb) = (
        elfen_sim::stats::percentiles_us(&mut a),
        elfen_sim::stats::percentiles_us(&mut b),
    );
    assert!(
        pb.p99 >= pa.p99 && pb.p99 < pa.p99 * 1.05,
        "{} vs {}",
        pb.p99,
        pa.p99
    );
}

#[test]
fn fanout_end_to_end_tail_is_at_least_the_leaf_tail() {
    let d = lucene();
    let one = Case {
        requests: 10_000,
        ..Case::new(Mode::Alone, 1.0, 80.0, &d)
    }
    .rep();
    let k8 = Case {
        leaves: 8,
        requests: 10_000,
        ..Case::new(Mode::Alone, 1.0, 80.0, &d)
    }
    .rep();
    let fan = k8.simulated.unwrap().fanout.unwrap();
    let leaf_max = fan.leaf_p99_us_max;
    assert!(
        k8.latency_us.p99 >= leaf_max,
        "{} < {leaf_max}",
        k8.latency_us.p99
    );
    assert!(
        k8.latency_us.p50 > one.latency_us.p50 * 2.0,
        "the median moves into the leaves' tail"
    );
    close(
        k8.utilization.lc,
        one.utilization.lc,
        0.03,
        "per-core utilization of the cluster",
    );
    assert_eq!(fan.leaves, 8);
}

#[test]
fn runs_are_deterministic_and_common_across_configs() {
    let d = lucene();
    let a = Case {
        requests: 5_000,
        ..Case::new(elfen(PolicyKind::RefreshBudget), 1.7, 90.0, &d)
    }
    .rep();
    let b = Case {
        requests: 5_000,
        ..Case::new(elfen(PolicyKind::RefreshBudget), 1.7, 90.0, &d)
    }
    .rep();
    assert_eq!(a, b);
}

#[test]
fn smt_off_alone_and_sched_idle_work_on_one_lane() {
    let d = exp_demand(500.0);
    let one_lane = ServerModel {
        worker_cores: 1,
        smt_ways: 1,
    };
    let os = Case {
        server: one_lane,
        requests: 5_000,
        ..Case::new(Mode::SchedIdle, 1.0, 200.0, &d)
    }
    .rep();
    close(os.utilization.total, 1.0, 1e-6, "one lane, always busy");
    let alone = Case {
        server: one_lane,
        requests: 5_000,
        ..Case::new(Mode::Alone, 1.0, 200.0, &d)
    }
    .rep();
    close(alone.utilization.total, 0.1, 0.1, "lambda / mu");
    assert_eq!(alone.batch_progress, None);
}

#[test]
fn idle_periods_match_poisson_gaps() {
    // M/M/1 at lambda = 500/s: an idle period lasts until the next arrival,
    // Exp(lambda), mean 2 ms. The share of idle *time* in periods <= x is
    // 1 - e^(-lambda x) (1 + lambda x); x = 10^3.3 us is a bucket edge.
    let d = exp_demand(1000.0);
    let run = PointSpec {
        server: CORE,
        leaves: 1,
        mode: Mode::Alone,
        interference: inter(1.0),
        timing: ZERO,
        rps: 500.0,
        trace: None,
        demand: &d,
        requests: 50_000,
        warmup_requests: 1000,
        seed: 3,
        record_idle: true,
    }
    .run_rep(0);
    let idle = run.idle.expect("recorded");
    let x_us = 10f64.powf(3.3);
    let lx = 500.0 * x_us / 1e6;
    let want = 1.0 - (-lx).exp() * (1.0 + lx);
    let got = elfen_results::study::share_below(&idle, x_us).unwrap();
    assert!((got - want).abs() < 0.015, "{got} vs {want}");
    // One idle period per request that found the lane idle (1 - rho of them).
    let n = idle.total() as f64;
    close(n, 0.5 * 50_000.0, 0.03, "idle periods");
}
