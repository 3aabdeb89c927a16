//! The metrics the docs promise are the metrics the daemon serves: the
//! metric tables of `docs/daemon.md` (the daemon's own) and
//! `docs/operations.md` (a page's) against the encoder's output of the
//! daemon's registry — every documented metric present with its labels and
//! type, nothing undocumented. The live test in `trust` checks a running
//! daemon's endpoint with the same [`problems`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A documented metric: its labels and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Documented {
    labels: BTreeSet<String>,
    kind: String,
    file: &'static str,
    /// Its description says when it is absent (a metric of a feature that
    /// may be off, a value not read yet).
    may_be_absent: bool,
}

/// The metric tables of the two docs: rows whose first cell names
/// `elfen_…` metrics in backticks, `name{label,label}`.
pub fn documented() -> BTreeMap<String, Documented> {
    let mut out = BTreeMap::new();
    for file in ["docs/daemon.md", "docs/operations.md"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} documents the metrics: {e}", path.display()));
        let mut rows = 0;
        for line in text.lines().filter(|l| l.starts_with("| `elfen_")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (first, kind) = (cells[1], cells[2].to_string());
            for tok in first.split('`').skip(1).step_by(2) {
                let (name, labels) = match tok.split_once('{') {
                    Some((n, l)) => (
                        n,
                        l.trim_end_matches('}')
                            .split(',')
                            .map(|s| s.trim().to_string())
                            .collect(),
                    ),
                    None => (tok, BTreeSet::new()),
                };
                let d = Documented {
                    labels,
                    kind: kind.clone(),
                    file,
                    may_be_absent: cells.get(3).is_some_and(|c| c.contains("absent")),
                };
                if let Some(was) = out.insert(name.to_string(), d) {
                    panic!("{name} is documented twice ({} and {file})", was.file);
                }
                rows += 1;
            }
        }
        assert!(rows > 0, "{file} has a metrics table");
    }
    out
}

/// Sample names of an exposition text, each with the label-name sets of
/// its samples and the family's type.
fn scraped(text: &str) -> BTreeMap<String, (BTreeSet<BTreeSet<String>>, String)> {
    let mut types = BTreeMap::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut w = rest.split_whitespace();
            if let (Some(n), Some(t)) = (w.next(), w.next()) {
                types.insert(n.to_string(), t.to_string());
            }
        }
    }
    let mut out: BTreeMap<String, (BTreeSet<BTreeSet<String>>, String)> = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (name, labels) = match l.split_once('{') {
            Some((n, rest)) => {
                let inner = rest.rsplit_once('}').map_or("", |(i, _)| i);
                let keys = inner
                    .split("\",")
                    .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
                    .collect();
                (n.to_string(), keys)
            }
            None => (
                l.split_whitespace().next().unwrap_or("").to_string(),
                BTreeSet::new(),
            ),
        };
        let family = name.strip_suffix("_total").unwrap_or(&name);
        let kind = types.get(family).cloned().unwrap_or_default();
        let e = out.entry(name).or_insert_with(|| (BTreeSet::new(), kind));
        e.0.insert(labels);
    }
    out
}

/// What differs between the docs and `text` (empty: they agree). A
/// running daemon's scrape (`strict` false) may lack the metrics whose
/// description says when they are absent; an encoding of a full snapshot
/// (`strict`) may not.
pub fn problems(text: &str, strict: bool) -> Vec<String> {
    let docs = documented();
    let got = scraped(text);
    let mut out = Vec::new();
    for (name, d) in &docs {
        match got.get(name) {
            None if d.may_be_absent && !strict => {}
            None => out.push(format!("{name} is documented in {} but not served", d.file)),
            Some((label_sets, kind)) => {
                for ls in label_sets {
                    if ls != &d.labels {
                        out.push(format!(
                            "{name} is served with labels {ls:?}, documented {:?} ({})",
                            d.labels, d.file
                        ));
                    }
                }
                if kind != &d.kind {
                    out.push(format!(
                        "{name} is served as a {kind}, documented as a {} ({})",
                        d.kind, d.file
                    ));
                }
            }
        }
    }
    for name in got.keys() {
        if !docs.contains_key(name) {
            out.push(format!("{name} is served but documented nowhere"));
        }
    }
    out
}

#[test]
fn every_documented_metric_is_served_and_nothing_else() {
    use elfen_daemon::config::Mode;
    use elfen_daemon::metrics::{GuardCounts, KnobCount, Snapshot};
    use elfen_daemon::protection::fit::FitState;
    use elfen_ops::health::{DaemonKnob, GroupState};
    let dir = tempfile::tempdir().unwrap();
    let spec = elfen_shm::PageSpec::for_pairs(&[(0, vec![1])], 1, 0);
    let page = Arc::new(elfen_shm::Page::create(dir.path().join("page"), &spec).unwrap());
    page.beat().unwrap();
    // what a running daemon with a guard, a freeze and an scx group holds,
    let snap = Snapshot {
        guards: vec![GuardCounts {
            lane: 1,
            cpu: 1,
            occupations: 1,
            occupied_ns: 1,
        }],
        knob_failures: vec![KnobCount {
            group: "frz".into(),
            knob: DaemonKnob::Freeze,
            failures: 0,
        }],
        groups: vec![("frz".into(), GroupState::Ok)],
        modes: vec![
            elfen_daemon::metrics::ModeState {
                group: "frz".into(),
                rungs: vec![Mode::Idle, Mode::Freeze],
                active: Mode::Idle,
                switches: 1,
                fits: Some((Mode::Freeze, FitState::Unfit)),
                contention: None,
                scheduler: None,
            },
            elfen_daemon::metrics::ModeState {
                group: "kern".into(),
                rungs: vec![Mode::Scx, Mode::Idle],
                active: Mode::Scx,
                switches: 0,
                fits: Some((Mode::Scx, FitState::Fits)),
                contention: None,
                scheduler: Some(elfen_daemon::protection::SchedulerView {
                    running: true,
                    ..Default::default()
                }),
            },
        ],
        // and memory, I/O and egress isolation with a watermark, a kill
        // and a low-priority group
        isolation: elfen_daemon::isolation::IsolationCounts {
            kills: vec![("frz".into(), 1, 2)],
            available_bytes: Some(1 << 30),
            pressure_events: 0,
            io_budget_changes: 0,
            egress_packets: Some(0),
        },
        ..Snapshot::default()
    };
    let registry = elfen_daemon::metrics::registry(page, 1000.0, Arc::new(Mutex::new(snap)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let p = problems(&text, true);
    assert!(p.is_empty(), "{}\n\nserved:\n{text}", p.join("\n"));
    println!(
        "{} documented metrics, all served with their labels and types",
        documented().len()
    );
    // the check itself finds a metric gone, one undocumented, a wrong label
    let without: String = text
        .lines()
        .filter(|l| !l.starts_with("elfen_cpuset_changes_total"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        problems(&without, true)
            .iter()
            .any(|p| p.contains("elfen_cpuset_changes_total is documented"))
    );
    let extra = format!("{text}elfen_made_up_total 1\n");
    assert!(
        problems(&extra, true)
            .iter()
            .any(|p| p.contains("elfen_made_up_total is served but documented nowhere"))
    );
    let relabelled = text.replace("knob=\"freeze\"", "lever=\"freeze\"");
    assert!(
        problems(&relabelled, true)
            .iter()
            .any(|p| p.contains("elfen_knob_failures_total is served with labels"))
    );
}
