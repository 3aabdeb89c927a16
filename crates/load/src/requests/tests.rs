use super::*;
use crate::demand::LUCENE_LOG_SIGMA;

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * q).round() as usize]
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn lucene_demands_follow_term_frequency_and_bad_lines_name_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.tasks");
    std::fs::write(
        &p,
        "HighTerm: ref # freq=3000\nMedTerm: x # freq=100\nLowTerm: y # freq=20\nOrHighHigh: a b\n",
    )
    .unwrap();
    let spec = |path: &std::path::Path| DemandSpec::Lucene {
        mean_us: 100.0,
        tasks_path: Some(path.to_path_buf()),
    };
    let set = build(RequestsKind::Demand, &spec(&p), None, 1).unwrap();
    let d = set.nominal_us().unwrap();
    assert_eq!(d.len(), 3);
    assert!((mean(&d) - 100.0).abs() < 1e-2);
    assert!((d[0] / d[2] - 150.0).abs() < 1e-2);
    std::fs::write(&p, "HighTerm: ref # freq=3000\nLowTerm: y # freq=zero\n").unwrap();
    let e = build(RequestsKind::Demand, &spec(&p), None, 1).unwrap_err();
    assert!(e.to_string().contains("t.tasks:2"), "{e}");
    let e = build(
        RequestsKind::Demand,
        &spec(&dir.path().join("missing")),
        None,
        1,
    )
    .unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn query_sets_carry_the_terms_and_count_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.tasks");
    std::fs::write(
        &p,
        "HighTerm: ref # freq=3000\nMedTerm: # freq=3\nLowTerm: y # freq=20\n",
    )
    .unwrap();
    let set = build(
        RequestsKind::TermQueries,
        &DemandSpec::default(),
        Some(&p),
        1,
    )
    .unwrap();
    assert_eq!(set.requests.len(), 2);
    assert_eq!(&*set.requests[1].payload, b"y");
    assert_eq!(set.arg(1, 3.0), 1, "query indices are never scaled");
    assert!(set.nominal_us().is_none());
    assert!(
        set.note.as_deref().unwrap().contains("line 2"),
        "{:?}",
        set.note
    );
}

#[test]
fn the_real_lucene_set_is_heavy_tailed() {
    // The tasks file ships with the repository: this fails if it is missing.
    let set = build(RequestsKind::Demand, &DemandSpec::default(), None, 1).unwrap();
    let d = set.nominal_us().unwrap();
    assert_eq!(d.len(), 1237);
    let (p50, p99, max) = (quantile(&d, 0.5), quantile(&d, 0.99), quantile(&d, 1.0));
    let min = quantile(&d, 0.0);
    assert!(p50 < mean(&d), "most requests are short");
    assert!(p99 > 5.0 * p50 && max > 10.0 * p50, "a few are far longer");
    assert!(max / min > 50.0 && max / min < 200.0);
    // the lognormal fit's sigma is the term set's
    let l: Vec<f64> = d.iter().map(|x| x.ln()).collect();
    let m = mean(&l);
    let sigma = (l.iter().map(|x| (x - m).powi(2)).sum::<f64>() / l.len() as f64).sqrt();
    assert!((sigma - LUCENE_LOG_SIGMA).abs() < 0.01, "{sigma}");
}

#[test]
fn parametric_shapes() {
    let b = |d: DemandSpec, seed| {
        build(RequestsKind::Demand, &d, None, seed)
            .unwrap()
            .nominal_us()
            .unwrap()
    };
    let ln = b(
        DemandSpec::Lognormal {
            mean_us: 200.0,
            sigma: 1.2,
            set_size: 20_000,
        },
        7,
    );
    assert!((mean(&ln) - 200.0).abs() < 0.01);
    // median / mean = exp(-sigma^2 / 2) = 0.487
    let ratio = quantile(&ln, 0.5) / 200.0;
    assert!((ratio - 0.487).abs() < 0.05, "{ratio}");
    let bi = b(
        DemandSpec::Bimodal {
            short_us: 100.0,
            long_us: 5000.0,
            long_fraction: 0.02,
            set_size: 1000,
        },
        1,
    );
    assert_eq!(bi.iter().filter(|&&x| x == 5000.0).count(), 20);
    let ex = b(
        DemandSpec::Exponential {
            mean_us: 50.0,
            set_size: 20_000,
        },
        3,
    );
    let m = mean(&ex);
    let cv = (ex.iter().map(|x| (x - m).powi(2)).sum::<f64>() / ex.len() as f64).sqrt() / m;
    assert!((cv - 1.0).abs() < 0.05, "exponential cv {cv}");
    assert_eq!(b(DemandSpec::Constant { us: 7.0 }, 1), vec![7.0]);
}

#[test]
fn sequences_are_shuffled_passes() {
    let set = work_set((1..=10).map(f64::from).collect(), String::new());
    let mut rng = SmallRng::seed_from_u64(1);
    let s = set.sequence(25, &mut rng);
    assert_eq!(s.len(), 25);
    for pass in s.chunks(10).take(2) {
        let mut p = pass.to_vec();
        p.sort();
        assert_eq!(
            p,
            (0..10).collect::<Vec<u32>>(),
            "each full pass is a permutation"
        );
    }
    assert_ne!(&s[..10], &(0..10).collect::<Vec<u32>>()[..], "shuffled");
    let mut rng2 = SmallRng::seed_from_u64(1);
    assert_eq!(set.sequence(25, &mut rng2), s, "same seed, same sequence");
    assert_eq!(set.arg(2, 2.0), 6000, "work is scaled");
}

#[test]
fn a_key_sets_picks_are_keys_anywhere_in_its_key_space() {
    let set = keys("kv", 10_000, 100, 7);
    assert_eq!(set.requests.len(), 100, "the demand-alone sample");
    let mut rng = SmallRng::seed_from_u64(3);
    let picks = set.sequence(2_000, &mut rng);
    let beyond = picks
        .iter()
        .filter(|&&k| k as usize >= set.requests.len())
        .count();
    assert!(beyond > 0, "the load draws from the whole key space");
    for &k in &picks {
        assert!(u64::from(k) < 10_000);
        assert_eq!(
            set.arg(k as usize, 2.0),
            u64::from(k),
            "a key is sent as is"
        );
        assert!(set.payload(k as usize).is_empty());
    }
}
