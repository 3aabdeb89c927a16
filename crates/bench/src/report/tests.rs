use super::*;
use elfen_results::{
    Distribution, MeasuredRep, Percentiles, Point, Rep, Run, SloInfo, Summary, Utilization, Wall,
};

/// A measured file: LC alone, naive (2.5x) and borrow idle (1.02x) with
/// Stream at two loads, three rounds each; the knee is the second load.
pub(crate) fn synthetic(source: Source) -> ResultFile {
    let mut f = ResultFile::new(
        source,
        "elfen bench --test".into(),
        serde_json::to_value(crate::spec::BenchSpec::default()).unwrap(),
        serde_json::json!({}),
    );
    f.run = Some(Run {
        common_random_numbers: true,
        slo: SloInfo {
            p99_us: Some(3000.0),
            source: "given".into(),
            ..SloInfo::default()
        },
        wall: Some(Wall {
            total_s: 120.0,
            points_s: 110.0,
            ..Wall::default()
        }),
        ..Run::default()
    });
    let mut d = Distribution::log_buckets("us", 1.0, 1e5, 10);
    for x in [50.0, 80.0, 100.0, 2000.0] {
        d.record(x);
    }
    f.demand = Some(d.clone());
    let mk = |config: Config, batch: Option<&str>, rps: f64, p99: f64, lc: f64, b: f64| {
        let reps: Vec<Rep> = (1..=3)
            .map(|round| Rep {
                round: Some(round),
                rps_achieved: rps,
                requests: 1000,
                errors: 0,
                latency_us: Percentiles {
                    p50: p99 / 4.0,
                    p95: p99 / 2.0,
                    p99: p99 * (1.0 + 0.01 * f64::from(round)),
                    p999: p99 * 1.5,
                    max: p99 * 2.0,
                    mean: p99 / 3.0,
                },
                utilization: Utilization {
                    lc,
                    batch: b,
                    total: lc + b,
                },
                batch_units_per_s: batch.map(|_| 1e6),
                batch_progress: batch.map(|_| b),
                naps_per_s: batch.map(|_| 100.0),
                wakes_per_s: batch.map(|_| 100.0),
                budget_us: (config == Config::FixedBudget).then_some(500.0),
                histogram: None,
                measured: Some(MeasuredRep {
                    foreign_util: 0.01,
                    ..MeasuredRep::default()
                }),
                simulated: None,
            })
            .collect();
        Point {
            config,
            label: None,
            batch: batch.map(str::to_string),
            rps_target: rps,
            summary: Summary::of(&reps, Some(3000.0)),
            reps,
            idle_periods: Some(d.clone()),
            service: None,
        }
    };
    for (rps, base) in [(500.0, 1000.0), (1000.0, 1100.0), (1500.0, 9000.0)] {
        let lc = rps / 2000.0;
        f.points.push(mk(Config::LcAlone, None, rps, base, lc, 0.0));
        f.points
            .push(mk(Config::Naive, Some("stream"), rps, base * 2.5, lc, 0.9));
        f.points.push(mk(
            Config::BorrowIdle,
            Some("stream"),
            rps,
            base * 1.02,
            lc,
            0.95 - lc,
        ));
        f.points.push(mk(
            Config::FixedBudget,
            Some("stream"),
            rps,
            base * 1.3,
            lc,
            1.2 - lc,
        ));
    }
    f
}

#[test]
fn the_terminal_report_gives_verdicts_and_targets() {
    let f = synthetic(Source::Measured);
    let t = terminal_report(&f);
    assert!(t.contains("SLO: p99 <= 3.00 ms"), "{t}");
    assert!(t.contains("kept p99   borrow_idle · stream"), "{t}");
    assert!(t.contains("HURT p99   naive · stream"), "{t}");
    // the rule the words follow is stated with the run's limit
    assert!(
        t.contains("rule: per load") && t.contains("inconclusive if it straddles 1.10x"),
        "{t}"
    );
    assert!(t.contains("knee (1000 rps)"), "{t}");
    assert!(t.contains("[met] borrow_idle · stream"), "{t}");
    assert!(!t.contains("issue"), "user-facing output speaks of targets");
    let figs = verdicts::targets(&f);
    let fb = figs
        .iter()
        .find(|x| x.claim.starts_with("fixed_budget"))
        .unwrap();
    assert_eq!(fb.met, Some(true), "{}", fb.detail);
    let wall = figs.iter().find(|x| x.claim.contains("8 minutes")).unwrap();
    assert_eq!(wall.met, Some(true));
}

#[test]
fn a_report_is_written_from_measured_and_simulated_files() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("measured.json");
    let s = dir.path().join("sim.json");
    synthetic(Source::Measured).save(&m).unwrap();
    let mut sim = synthetic(Source::Simulated);
    sim.run = None;
    sim.save(&s).unwrap();
    let inputs = load_inputs(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(inputs.len(), 2);
    let out = report_dir_for(&m);
    assert_eq!(out, dir.path().join("measured-report"));
    let (md, notes) = write_report(&inputs, &out).unwrap();
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.contains("(simulated)") && text.contains("(measured)"),
        "{text}"
    );
    assert!(text.contains("### Targets") && text.contains("### Verdicts"));
    if notes.is_empty() {
        for png in ["latency_stream.png", "utilization_stream.png", "demand.png"] {
            let p = out.join(png);
            let bytes = std::fs::read(&p).unwrap_or_else(|_| panic!("{}", p.display()));
            assert_eq!(&bytes[1..4], b"PNG");
            assert!(text.contains(png));
        }
    } else {
        eprintln!("plots skipped: {notes:?}");
    }
    let e = load_inputs(&[dir.path().join("nope.json")]).unwrap_err();
    assert!(e.to_string().contains("nope.json"));
    assert_eq!(report_dir_for(Path::new("x.json")), Path::new("./x-report"));
}

/// A measured file at one load (its own knee) with Stream: LC alone,
/// naive (3x), borrow idle (about 1.0x, progress 0.7) and SCHED_IDLE with
/// the paired ratios `idle_ratios` (one per round) and progress
/// `idle_progress`; `shares_core` as recorded for the lanes.
pub(crate) fn conclusion_file(
    idle_ratios: &[f64],
    idle_progress: f64,
    shares_core: Option<bool>,
) -> ResultFile {
    let mut f = ResultFile::new(
        Source::Measured,
        "elfen bench --test".into(),
        serde_json::to_value(crate::spec::BenchSpec::default()).unwrap(),
        serde_json::json!({}),
    );
    let mut run = Run {
        common_random_numbers: true,
        ..Run::default()
    };
    run.lanes.batch_shares_core = shares_core;
    f.run = Some(run);
    let n = idle_ratios.len();
    let base = 1000.0;
    let mk = |config: Config, batch: Option<&str>, ratios: &[f64], progress: f64| {
        let reps: Vec<Rep> = ratios
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut rep = elfen_results_rep(i as u32 + 1, base * r);
                rep.batch_progress = batch.map(|_| progress);
                rep.utilization.batch = if batch.is_some() { progress } else { 0.0 };
                rep.utilization.total = rep.utilization.lc + rep.utilization.batch;
                rep
            })
            .collect();
        Point {
            config,
            label: None,
            batch: batch.map(str::to_string),
            rps_target: 500.0,
            summary: Summary::of(&reps, None),
            reps,
            idle_periods: None,
            service: None,
        }
    };
    let borrow: Vec<f64> = (0..n).map(|i| 0.98 + 0.01 * (i % 3) as f64).collect();
    f.points = vec![
        mk(Config::LcAlone, None, &vec![1.0; n], 0.0),
        mk(Config::Naive, Some("stream"), &vec![3.0; n], 0.9),
        mk(
            Config::SchedIdle,
            Some("stream"),
            idle_ratios,
            idle_progress,
        ),
        mk(Config::BorrowIdle, Some("stream"), &borrow, 0.7),
    ];
    f
}

fn elfen_results_rep(round: u32, p99: f64) -> Rep {
    Rep {
        round: Some(round),
        rps_achieved: 500.0,
        requests: 500,
        errors: 0,
        latency_us: Percentiles {
            p50: p99 / 4.0,
            p95: p99 / 2.0,
            p99,
            p999: p99 * 1.5,
            max: p99 * 2.0,
            mean: p99 / 3.0,
        },
        utilization: Utilization {
            lc: 0.25,
            batch: 0.0,
            total: 0.25,
        },
        batch_units_per_s: None,
        batch_progress: None,
        naps_per_s: None,
        wakes_per_s: None,
        budget_us: None,
        histogram: None,
        measured: None,
        simulated: None,
    }
}
