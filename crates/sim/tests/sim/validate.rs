//! `elfen sim validate` against a synthetic "measured" file: points generated
//! with a known model (exponential demand, co-run slowdown 1.3), stored with a
//! histogram of the demand as the harness will store it, plus configurations
//! the model does not cover.

use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_results::{
    Config, Distribution, LatencyBreakdown, MeasuredRep, Point, ResultFile, Source, Summary,
};
use elfen_sim::batch::Interference;
use elfen_sim::demand::DemandSpec;
use elfen_sim::engine::{Mode, ServerModel, Timing};
use elfen_sim::sweep::PointSpec;
use elfen_sim::validate::{DemandSource, ValidateOptions, validate};
use rand::SeedableRng;
use std::path::Path;

const SLO_US: f64 = 8000.0;
const REQUESTS: u64 = 20_000;

fn synthetic_measured() -> ResultFile {
    let demand = DemandSpec::Exponential { mean_us: 1000.0 }
        .resolve(Path::new("."))
        .unwrap();
    let mut hist = Distribution::log_buckets("us", 1.0, 1e5, 40);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
    for _ in 0..200_000 {
        hist.record(demand.sample_ns(&mut rng) as f64 / 1e3);
    }
    let mut f = ResultFile::new(
        Source::Measured,
        "elfen bench (synthetic)".into(),
        serde_json::json!({}),
        serde_json::json!({}),
    );
    f.demand = Some(hist);
    let stream = Interference {
        lc_slowdown: 1.3,
        corun_rate: 0.9,
    };
    let timing = Timing {
        nap_ns: 1000,
        wake_ns: 13_000,
        os_preempt_ns: 6000,
        blind_react_ns: 0,
    };
    let configs: [(Config, Option<&str>, Mode); 5] = [
        (Config::LcAlone, None, Mode::Alone),
        (
            Config::Cpuset,
            Some("stream"),
            Mode::Elfen(PolicyConfig::simple(PolicyKind::Unmanaged)),
        ),
        (
            Config::BorrowIdle,
            Some("stream"),
            Mode::Elfen(PolicyConfig::simple(PolicyKind::BorrowIdle)),
        ),
        (Config::SchedIdle, Some("stream"), Mode::SchedIdle),
        // Something the validation does not model: must be skipped, not fail.
        (
            Config::CfsQuota,
            Some("stream"),
            Mode::Elfen(PolicyConfig::simple(PolicyKind::Unmanaged)),
        ),
    ];
    for (name, batch, mode) in configs {
        for rps in [150.0, 300.0, 450.0, 700.0] {
            let reps: Vec<_> = (0..3)
                .map(|r| {
                    PointSpec {
                        server: ServerModel {
                            worker_cores: 1,
                            smt_ways: 2,
                        },
                        leaves: 1,
                        mode,
                        interference: if batch.is_some() {
                            stream
                        } else {
                            elfen_sim::sweep::NO_INTERFERENCE
                        },
                        timing,
                        rps,
                        trace: None,
                        demand: &demand,
                        requests: REQUESTS,
                        warmup_requests: 2000,
                        seed: 1000,
                        record_idle: false,
                    }
                    .run_rep(r)
                    .rep
                })
                .collect();
            f.points.push(Point {
                config: name,
                label: None,
                batch: batch.map(str::to_string),
                rps_target: rps,
                summary: Summary::of(&reps, Some(SLO_US)),
                reps,
                idle_periods: None,
                service: None,
            });
        }
    }
    f
}

fn opts() -> ValidateOptions {
    ValidateOptions {
        requests: Some(REQUESTS),
        reps: 3,
        threads: 2,
        ..ValidateOptions::default()
    }
}

#[test]
fn validation_of_a_consistent_file_is_within_tolerance_below_the_knee() {
    let measured = synthetic_measured();
    let (report, simulated) = validate(&measured, &opts()).unwrap();
    // M/M/1: p99 = ln(100) / (mu - lambda): 5.4 ms at 150, 6.6 at 300, 8.4 at 450 RPS.
    assert_eq!(report.knee_rps, Some(300.0));
    let (s, why) = &report.slowdown["stream"];
    assert!((s - 1.3).abs() < 0.08, "fitted slowdown {s} ({why})");
    assert!(
        report.skipped.iter().any(|n| n.starts_with("cfs_quota")),
        "{:?}",
        report.skipped
    );
    assert_eq!(report.rows.len(), 16, "4 modelled configurations x 4 loads");
    assert_eq!(simulated.points.len(), 16);
    assert_eq!(report.below_knee_points, 8);
    assert_eq!(
        report.all_within_tolerance_below_knee,
        Some(true),
        "{}",
        report.to_text()
    );
    let text = report.to_text();
    assert!(
        text.contains("all below-knee points within 15% (p99 and LC utilization): yes"),
        "{text}"
    );
    // Serializes (the --json output).
    serde_json::to_string(&report).unwrap();
}

#[test]
fn a_point_off_the_model_is_flagged_not_hidden() {
    let mut measured = synthetic_measured();
    let p = measured
        .points
        .iter_mut()
        .find(|p| p.config == Config::BorrowIdle && p.rps_target == 150.0)
        .unwrap();
    p.summary.latency_us.p99.median *= 1.5;
    let (report, _) = validate(&measured, &opts()).unwrap();
    assert_eq!(report.all_within_tolerance_below_knee, Some(false));
    let bad: Vec<_> = report
        .rows
        .iter()
        .filter(|r| !r.within_tolerance && r.below_knee)
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!((bad[0].config.as_str(), bad[0].rps), ("borrow_idle", 150.0));
    assert!(bad[0].p99_err_pct < -25.0);
}

#[test]
fn validation_needs_a_demand_distribution() {
    let mut measured = synthetic_measured();
    measured.demand = None;
    let e = validate(&measured, &opts()).unwrap_err().to_string();
    assert!(e.contains("no demand"), "{e}");
    let mut measured = synthetic_measured();
    measured
        .demand
        .as_mut()
        .unwrap()
        .counts
        .iter_mut()
        .for_each(|c| *c = 0);
    let e = validate(&measured, &opts()).unwrap_err().to_string();
    assert!(e.contains("empty"), "{e}");
    let e = validate(
        &synthetic_measured(),
        &ValidateOptions {
            slowdown: Some(0.5),
            ..opts()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--slowdown must be a finite number >= 1, got 0.5"),
        "{e}"
    );
}

#[test]
fn the_slowdown_comes_from_measured_service_times_when_present() {
    let mut measured = synthetic_measured();
    for p in &mut measured.points {
        let service = match p.config {
            Config::LcAlone => 1000.0,
            Config::Cpuset => 1250.0,
            _ => continue,
        };
        for r in &mut p.reps {
            r.measured = Some(MeasuredRep {
                breakdown: Some(LatencyBreakdown {
                    service_p50_us: service,
                    ..LatencyBreakdown::default()
                }),
                ..MeasuredRep::default()
            });
        }
    }
    let (report, _) = validate(&measured, &opts()).unwrap();
    let (s, why) = &report.slowdown["stream"];
    assert_eq!(*s, 1.25);
    assert!(
        why.contains("service p50") && why.contains("4 loads"),
        "{why}"
    );
}

/// The synthetic file with per-point service times as the harness records
/// them: the model's demand, times 1.3 where the batch lane always co-runs
/// (cpuset, sched_idle), as is where it never does.
fn with_service(mut f: ResultFile) -> ResultFile {
    let demand = f.demand.clone().unwrap();
    for p in &mut f.points {
        let mut d = demand.clone();
        if matches!(p.config, Config::Cpuset | Config::SchedIdle) {
            d.edges.iter_mut().for_each(|e| *e *= 1.3);
            d.sums.iter_mut().for_each(|x| *x *= 1.3);
        }
        p.service = Some(d);
    }
    f
}

#[test]
fn service_mode_is_the_default_with_recorded_service_times_and_agrees() {
    let measured = with_service(synthetic_measured());
    let (report, simulated) = validate(&measured, &opts()).unwrap();
    assert_eq!(report.demand_source, DemandSource::Service);
    assert_eq!(simulated.points.len(), report.rows.len());
    assert_eq!(report.knee_rps, Some(300.0));
    assert!(report.below_knee_points >= 6, "{}", report.to_text());
    assert_eq!(
        report.all_within_tolerance_below_knee,
        Some(true),
        "{}",
        report.to_text()
    );
    // Service mode takes no slowdown: the recorded times include it.
    let e = validate(
        &measured,
        &ValidateOptions {
            slowdown: Some(1.2),
            ..opts()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--slowdown") && e.contains("demand only"), "{e}");
    // Demand mode can still be asked for on the same file.
    let (report, _) = validate(
        &measured,
        &ValidateOptions {
            demand: Some(DemandSource::Demand),
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(report.demand_source, DemandSource::Demand);
}

#[test]
fn service_mode_without_recorded_service_times_is_a_clear_error() {
    let e = validate(
        &synthetic_measured(),
        &ValidateOptions {
            demand: Some(DemandSource::Service),
            ..opts()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--demand service") && e.contains("service"),
        "{e}"
    );
}
