//! The daemon's configuration fuzzed (bounded, seeded: `elfen_cmd::fuzz`):
//! the example configurations mutated as text, and configurations generated
//! field by field, go through `Config::parse` and `Config::check` — each
//! returns a value or an error naming a field, never panics.

// Sections are built from their defaults field by field, so that a field
// added later keeps its default here.
#![allow(clippy::field_reassign_with_default)]

use elfen_daemon::config::{
    BatchSection, BlindSection, Config, FreezeSection, FreezerChoice, GuardSection, IdleMethod,
    LcSection, MetricsSection, Mode, PageSection, PolicySection, SignalSection,
};
use elfen_policy::PolicyKind;
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How far the cases got: refused by the parser, refused by the check,
/// accepted — so a run shows it reached `check` both ways.
#[derive(Default)]
struct Reached {
    parse_err: AtomicU64,
    check_err: AtomicU64,
    ok: AtomicU64,
}

impl Reached {
    fn report(&self, target: &str) {
        let (p, c, o) = (
            self.parse_err.load(Relaxed),
            self.check_err.load(Relaxed),
            self.ok.load(Relaxed),
        );
        println!("{target}: {p} refused by the parser, {c} by the check, {o} accepted");
        assert!(
            p + c > 0 && c > 0 && o > 0,
            "{target}: the cases did not reach every outcome"
        );
    }
}

/// The example configurations (every one parses and checks).
fn examples() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/daemon");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    v.sort();
    assert!(v.len() >= 5, "the examples in {}", dir.display());
    v
}

/// Parses and checks `text`: whatever it is, an error names where.
fn parse_and_check(text: &str, reached: &Reached) -> Result<(), TestCaseError> {
    match Config::parse(text) {
        Ok(c) => match c.check() {
            Ok(()) => {
                reached.ok.fetch_add(1, Relaxed);
            }
            Err(e) => {
                reached.check_err.fetch_add(1, Relaxed);
                prop_assert!(!e.field.is_empty(), "an error without a field: {e}");
            }
        },
        Err(e) => {
            reached.parse_err.fetch_add(1, Relaxed);
            prop_assert!(!e.field.is_empty(), "an error without a field: {e}");
        }
    }
    Ok(())
}

/// Values that break parsers and range checks.
const NASTY: &[&str] = &[
    "0",
    "-1",
    "1e309",
    "nan",
    "inf",
    "9223372036854775807",
    "18446744073709551616",
    "99999999999999999999999",
    "\"\"",
    "\"/\"",
    "\"é\\u0000\"",
    "true",
    "[]",
    "[1, \"x\"]",
    "{ a = 1 }",
    "\"0:1,0:1\"",
    "\"999999:1\"",
    "\"0:\"",
    "\"256\"",
    "\"[::1]:0\"",
    "1979-05-27T07:32:00Z",
];

/// One edit of a configuration's text.
#[derive(Debug, Clone)]
enum Edit {
    /// Replace the value of line `n` (after its `=`) with `NASTY[v]`.
    Value(usize, usize),
    /// Remove line `n`.
    DropLine(usize),
    /// Repeat line `n`.
    DupLine(usize),
    /// Replace, insert or remove one byte.
    Byte(usize, u8, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 0..NASTY.len()).prop_map(|(n, v)| Edit::Value(n, v)),
        any::<usize>().prop_map(Edit::DropLine),
        any::<usize>().prop_map(Edit::DupLine),
        (any::<usize>(), any::<u8>(), 0u8..3).prop_map(|(i, b, op)| Edit::Byte(i, b, op)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut bytes_edits = Vec::new();
    for e in edits {
        let n = lines.len().max(1);
        match *e {
            Edit::Value(i, v) => {
                if let Some(l) = lines.get_mut(i % n) {
                    if let Some((k, _)) = l.split_once('=') {
                        *l = format!("{k}= {}", NASTY[v]);
                    }
                }
            }
            Edit::DropLine(i) if !lines.is_empty() => {
                lines.remove(i % n);
            }
            Edit::DupLine(i) if !lines.is_empty() => {
                let l = lines[i % n].clone();
                lines.insert(i % n, l);
            }
            Edit::Byte(..) => bytes_edits.push(e.clone()),
            _ => {}
        }
    }
    let mut b = lines.join("\n").into_bytes();
    for e in bytes_edits {
        if let Edit::Byte(i, byte, op) = e {
            let at = i % (b.len() + 1);
            match op {
                0 if at < b.len() => b[at] = byte,
                1 => b.insert(at, byte),
                _ if at < b.len() => {
                    b.remove(at);
                }
                _ => {}
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

#[test]
fn fuzz_config_text_mutations() {
    let ex = examples();
    for t in &ex {
        Config::parse(t).unwrap().check().unwrap();
    }
    let n = ex.len();
    let strategy = (0..n, proptest::collection::vec(edit(), 1..6));
    let reached = Reached::default();
    elfen_cmd::fuzz::run("daemon config text", 3000, strategy, |(i, edits)| {
        parse_and_check(&apply(&ex[i], &edits), &reached)
    });
    reached.report("daemon config text");
}

/// A u64 a TOML integer can hold: mostly small and edge values.
fn int() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1u64),
        0u64..5000,
        Just(i64::MAX as u64),
        0..=i64::MAX as u64,
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z0-9_/.:-]{0,12}", any::<String>(),]
}

fn path() -> impl Strategy<Value = PathBuf> {
    prop_oneof![
        Just(PathBuf::from("/dev/shm/elfen")),
        Just(PathBuf::from("/")),
        "[a-z/.]{0,12}".prop_map(PathBuf::from),
    ]
}

fn policy() -> impl Strategy<Value = PolicySection> {
    (
        proptest::sample::select(PolicyKind::ALL.to_vec()),
        int(),
        proptest::option::of(int()),
        proptest::option::of(prop_oneof![Just(f64::INFINITY), Just(-1.0), -10.0..10.0f64]),
        prop_oneof![
            proptest::sample::select(vec!["auto", "spin", "futex", "hybrid", "umwait", "mwaitx"])
                .prop_map(String::from),
            text(),
        ],
    )
        .prop_map(|(kind, budget_us, slo_us, ref_ipc, nap)| {
            let mut x = PolicySection::default();
            x.kind = kind;
            x.budget_us = budget_us;
            x.slo_us = slo_us;
            x.ref_ipc = ref_ipc;
            x.nap = nap;
            x
        })
}

fn lc() -> impl Strategy<Value = LcSection> {
    (
        proptest::option::of(prop_oneof![Just(0u32), any::<u32>()]),
        proptest::option::of(path()),
        proptest::option::of(text()),
        int(),
        int(),
        int(),
    )
        .prop_map(
            |(pid, cgroup, comm, liveness_ms, rescan_ms, lost_rescan_ms)| {
                let mut x = LcSection::default();
                x.pid = pid;
                x.cgroup = cgroup;
                x.comm = comm;
                x.liveness_ms = liveness_ms;
                x.rescan_ms = rescan_ms;
                x.lost_rescan_ms = lost_rescan_ms;
                x
            },
        )
}

fn signal() -> impl Strategy<Value = SignalSection> {
    (
        any::<bool>(),
        int(),
        proptest::option::of(any::<u8>()),
        proptest::option::of(proptest::collection::vec(any::<u32>(), 0..4)),
        any::<bool>(),
    )
        .prop_map(
            |(fallback, poll_interval_us, priority, cpus, announce_wakeups)| {
                let mut x = SignalSection::default();
                x.fallback = fallback;
                x.poll_interval_us = poll_interval_us;
                x.priority = priority;
                x.cpus = cpus;
                x.announce_wakeups = announce_wakeups;
                x
            },
        )
}

fn batch() -> impl Strategy<Value = BatchSection> {
    let mode = proptest::sample::select(vec![
        Mode::Cooperative,
        Mode::Guard,
        Mode::Freeze,
        Mode::Idle,
        Mode::Blind,
    ]);
    let idle = proptest::sample::select(vec![
        IdleMethod::Auto,
        IdleMethod::CpuIdle,
        IdleMethod::SchedIdle,
    ]);
    (
        prop_oneof!["[a-z_-]{0,6}", text()],
        mode,
        proptest::option::of(prop_oneof!["[a-z/.]{0,10}", text()]),
        proptest::option::of(proptest::collection::vec(text(), 0..3)),
        proptest::option::of(any::<bool>()),
        idle,
    )
        .prop_map(|(name, mode, cgroup, command, confine, idle_method)| {
            let mut x = BatchSection::default();
            x.name = name;
            x.mode = mode;
            x.cgroup = cgroup;
            x.command = command;
            x.confine = confine;
            x.idle_method = idle_method;
            x
        })
}

fn config() -> impl Strategy<Value = Config> {
    let top = (
        path(),
        path(),
        proptest::option::of(prop_oneof!["[0-9:,+ ]{0,10}", text()]),
        proptest::sample::select(vec![
            FreezerChoice::Auto,
            FreezerChoice::V1,
            FreezerChoice::V2,
        ]),
        int(),
    );
    let threads = (
        any::<u8>(),
        int(),
        int(),
        any::<u32>(),
        int(),
        int(),
        prop_oneof![Just("127.0.0.1:0".to_string()), text()],
    );
    (
        top,
        policy(),
        lc(),
        signal(),
        threads,
        proptest::collection::vec(batch(), 0..4),
    )
        .prop_map(
            |(
                (page, state_file, pairs, freezer, heartbeat_ms),
                policy,
                lc,
                signal,
                (
                    guard_priority,
                    recheck_us,
                    timeout_ms,
                    buffer_cores,
                    grow_hold_us,
                    poll_us,
                    listen,
                ),
                batch,
            )| Config {
                page: PageSection {
                    path: page,
                    ..PageSection::default()
                },
                state_file,
                pairs,
                freezer,
                heartbeat_ms,
                policy,
                lc,
                signal,
                guard: {
                    let mut x = GuardSection::default();
                    x.priority = guard_priority;
                    x.recheck_us = recheck_us;
                    x
                },
                freeze: {
                    let mut x = FreezeSection::default();
                    x.timeout_ms = timeout_ms;
                    x
                },
                blind: {
                    let mut x = BlindSection::default();
                    x.buffer_cores = buffer_cores;
                    x.grow_hold_us = grow_hold_us;
                    x.poll_us = poll_us;
                    x
                },
                metrics: {
                    let mut x = MetricsSection::default();
                    x.listen = listen;
                    x
                },
                batch,
                ..Config::default()
            },
        )
}

/// `base` with each section (and top-level field) replaced by `r`'s where
/// `take` says so: mostly valid configurations with a few fields anywhere
/// in their range.
fn mix(base: &Config, r: Config, take: &[bool]) -> Config {
    let mut c = base.clone();
    let t = |i: usize| take.get(i).copied().unwrap_or(false);
    if t(0) {
        c.page = r.page;
    }
    if t(1) {
        c.state_file = r.state_file;
    }
    if t(2) {
        c.pairs = r.pairs;
    }
    if t(3) {
        c.freezer = r.freezer;
    }
    if t(4) {
        c.heartbeat_ms = r.heartbeat_ms;
    }
    if t(5) {
        c.policy = r.policy;
    }
    if t(6) {
        c.lc = r.lc;
    }
    if t(7) {
        c.signal = r.signal;
    }
    if t(8) {
        c.guard = r.guard;
    }
    if t(9) {
        c.freeze = r.freeze;
    }
    if t(10) {
        c.blind = r.blind;
    }
    if t(11) {
        c.metrics = r.metrics;
    }
    if t(12) {
        c.batch = r.batch;
    }
    c
}

#[test]
fn fuzz_config_generated() {
    let bases: Vec<Config> = examples()
        .iter()
        .map(|t| Config::parse(t).unwrap())
        .collect();
    let strategy = (
        0..bases.len(),
        config(),
        proptest::collection::vec(proptest::bool::weighted(0.12), 13),
    )
        .prop_map(move |(i, r, take)| mix(&bases[i], r, &take));
    let reached = Reached::default();
    elfen_cmd::fuzz::run("daemon config generated", 3000, strategy, |c| {
        // checked as built, and as written to TOML and read back
        if let Err(e) = c.check() {
            prop_assert!(!e.field.is_empty(), "an error without a field: {e}");
        }
        let Ok(text) = toml::to_string(&c) else {
            return Ok(());
        };
        let back = Config::parse(&text);
        prop_assert!(back.is_ok(), "{text}\n{:?}", back.err());
        let back = back.unwrap();
        if c.policy.ref_ipc.is_none_or(|x| !x.is_nan()) {
            prop_assert_eq!(&back, &c);
        }
        parse_and_check(&text, &reached)
    });
    reached.report("daemon config generated");
}
