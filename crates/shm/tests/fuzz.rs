//! Page validation fuzzed: a fixed number of seeded cases (proptest, no
//! persistence, the same cases every run) mutate the bytes of a good page
//! file and of its batch segment — single bytes, whole fields set to edge
//! values, lengths cut or grown — and attach the result as every role.
//! Each attach returns a page or an error with a message, never a panic;
//! an accepted page is read as `elfen status` reads it (every line, the
//! kill switch, the heartbeat, busy time), again without a panic — which
//! debug builds also raise on an arithmetic overflow.
//!
//! The cases run and the time taken are printed.

use elfen_shm::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::sync::atomic::Ordering::Relaxed;

/// Cases per run (fixed, so the test's cost is too).
const CASES: u32 = 2000;
/// The seed: the same cases every run.
const SEED: [u8; 32] = *b"elfen signal page validation 01!";

const SHMID_OFFSET: usize = std::mem::offset_of!(Header, batch_shmid);

/// One change to the bytes.
#[derive(Debug, Clone)]
enum Mutation {
    /// Set byte `at` (modulo the length) of the page or the batch bytes.
    Byte { batch: bool, at: usize, value: u8 },
    /// Write an edge value over the 4 or 8 bytes at 4-aligned `at`.
    Word {
        batch: bool,
        at: usize,
        wide: bool,
        edge: u8,
    },
    /// Cut the bytes to `len` (modulo the length, at least 1).
    Cut { batch: bool, len: usize },
    /// Grow the bytes by `by` bytes of `fill`.
    Grow { batch: bool, by: usize, fill: u8 },
}

fn edge(e: u8, wide: bool) -> u64 {
    let max = if wide { u64::MAX } else { u32::MAX.into() };
    match e % 10 {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => max,
        4 => max - 1,
        5 => max / 2 + 1,
        6 => 64,
        7 => 4096,
        8 => 4097,
        _ => 1_000_000_000,
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<bool>(), 0usize..512, any::<u8>())
            .prop_map(|(batch, at, value)| Mutation::Byte { batch, at, value }),
        4 => (any::<bool>(), 0usize..128, any::<bool>(), any::<u8>())
            .prop_map(|(batch, at, wide, edge)| Mutation::Word { batch, at, wide, edge }),
        1 => (any::<bool>(), 0usize..512).prop_map(|(batch, len)| Mutation::Cut { batch, len }),
        1 => (any::<bool>(), 1usize..256, any::<u8>())
            .prop_map(|(batch, by, fill)| Mutation::Grow { batch, by, fill }),
    ]
}

fn apply(m: &Mutation, page: &mut Vec<u8>, batch: &mut Vec<u8>) {
    let in_batch = match *m {
        Mutation::Byte { batch, .. }
        | Mutation::Word { batch, .. }
        | Mutation::Cut { batch, .. }
        | Mutation::Grow { batch, .. } => batch,
    };
    let v = if in_batch { batch } else { page };
    match *m {
        Mutation::Byte { at, value, .. } => {
            if !v.is_empty() {
                let i = at % v.len();
                v[i] = value;
            }
        }
        Mutation::Word {
            at, wide, edge: e, ..
        } => {
            let n = if wide { 8 } else { 4 };
            let at = at * 4;
            if at + n <= v.len() {
                v[at..at + n].copy_from_slice(&edge(e, wide).to_le_bytes()[..n]);
            }
        }
        Mutation::Cut { len, .. } => {
            let len = (len % v.len().max(1)).max(1);
            v.truncate(len);
        }
        Mutation::Grow { by, fill, .. } => v.extend(std::iter::repeat_n(fill, by)),
    }
}

/// Everything `elfen status` reads of an accepted page.
fn read_all(page: &Page) {
    let h = page.header();
    let _ = (page.kill_mode(), page.batch_mode(), page.heartbeat_stale());
    let _ = (page.heartbeat_age_ns(), page.heartbeat_stale_ns());
    let _ = h.created_unix_s.load(Relaxed);
    let clock = page.clock();
    for lane in 0..page.lane_count() {
        let lc = page.lc(lane).unwrap();
        let b = page.batch(lane).unwrap();
        let c = page.controller(lane).unwrap();
        let s = lc.state.load(Relaxed);
        let _ = (state::busy(s), state::seq(s), state::queue_len(s));
        let _ = page.lc_busy_ns(lane).unwrap();
        let _ = clock.ticks_to_ns(lc.busy_ticks.load(Relaxed));
        let _ = clock.ticks_to_ns(b.run_ticks.load(Relaxed));
        let _ = clock.ticks_to_ns(b.corun_ticks.load(Relaxed));
        let _ = clock.now().saturating_sub(lc.busy_since.load(Relaxed));
        let _ = (b.sleepers.load(Relaxed), b.naps.load(Relaxed));
        // a controller line left mid-rewrite is read (and refused) elsewhere:
        // waiting out its 100 ms here would only slow the cases down
        if c.config_seq.load(Relaxed) % 2 == 0 {
            if let Ok(cfg) = page.read_controller(lane) {
                let _ = cfg.partners();
            }
        }
        let _ = page.lane_of_cpu(lane);
    }
}

#[test]
fn page_validation_never_panics_on_mutated_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let good = Page::create(
        dir.path().join("good"),
        &PageSpec::for_pairs(&[(0, vec![1]), (2, vec![3])], 1, 0),
    )
    .unwrap();
    let good_page = std::fs::read(good.path()).unwrap();
    let good_batch = Segment::attach(good.batch_shmid(), false)
        .unwrap()
        .read_bytes();
    let target = dir.path().join("case");
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &SEED),
    );
    let (accepted, refused) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let t0 = std::time::Instant::now();
    runner
        .run(&proptest::collection::vec(mutation(), 1..6), |muts| {
            let (mut page, mut batch) = (good_page.clone(), good_batch.clone());
            for m in &muts {
                apply(m, &mut page, &mut batch);
            }
            // the batch bytes go into a segment of their (mutated) size;
            // unless a mutation hit the page's segment id, the page names it
            let seg = Segment::create(batch.len(), 0o644, None).unwrap();
            seg.write_bytes(0, &batch);
            let id_hit = page.len() >= SHMID_OFFSET + 4
                && good_page.get(SHMID_OFFSET..SHMID_OFFSET + 4)
                    != page.get(SHMID_OFFSET..SHMID_OFFSET + 4);
            if page.len() >= SHMID_OFFSET + 4 && !id_hit {
                page[SHMID_OFFSET..SHMID_OFFSET + 4]
                    .copy_from_slice(&(seg.id() as u32).to_le_bytes());
            }
            std::fs::write(&target, &page).unwrap();
            // an id a mutation chose may name anyone's segment: only read it
            let roles: &[Access] = if id_hit {
                &[Access::Observer]
            } else {
                &[
                    Access::Observer,
                    Access::Lc,
                    Access::Batch,
                    Access::Controller,
                ]
            };
            for &a in roles {
                match Page::attach(&target, a) {
                    Ok(p) => {
                        accepted.set(accepted.get() + 1);
                        read_all(&p);
                    }
                    Err(e) => {
                        refused.set(refused.get() + 1);
                        let msg = e.to_string();
                        prop_assert!(!msg.is_empty());
                        prop_assert!(
                            msg.contains(&target.display().to_string()),
                            "the error names the page: {}",
                            msg
                        );
                    }
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let (accepted, refused) = (accepted.get(), refused.get());
    drop(good);
    println!(
        "page validation fuzz: {CASES} cases (seeded) in {:.2} s: {accepted} attaches accepted, \
         {refused} refused with an error naming the page, no panic",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        accepted > 0 && refused > 0,
        "the mutations reach both outcomes"
    );
}
