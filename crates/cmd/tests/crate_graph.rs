//! The product apart from the lab: no product crate (what an operator runs
//! or links: the signal page, the runtime, the daemon, the proxy, the
//! operator's diagnostics, …) depends on a lab crate (the harness, the
//! simulator, the micro-benchmarks, the isolation benchmarks, the batch
//! kernels, the proxy's bench) through its normal dependencies, directly
//! or transitively. Read from `cargo metadata` (the workspace's own
//! `Cargo.toml` files, no registry), so the check is the build's own graph.
//!
//! Every workspace crate is named in one of the two lists (a new crate
//! fails the test until it is placed), and the few product → lab edges
//! not yet removed are listed in [`NOT_YET_REMOVED`]: the test fails on any
//! other edge, naming the path, and on a listed edge that is gone (so the
//! list only shrinks).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// What an operator installs, runs or links.
const PRODUCT: &[&str] = &[
    "elfen-shm",
    "elfen-topo",
    "elfen-policy",
    "elfen-runtime",
    "elfen-capi",
    "elfen-cmd",
    "elfen-results",
    "elfen-cgroup",
    "elfen-bpf",
    "elfen-scx",
    "elfen-ops",
    "elfen-daemon",
    "elfen-wire",
    "elfen-load",
    "elfen-kernels",
    "elfen-proxy",
    "elfen-trace",
    "elfen-advise",
];

/// Harness and measurement crates. (The batch kernels, `elfen-kernels`,
/// are the workloads the operator's `elfen advise` runs as well as the
/// harness's: a product crate.)
const LAB: &[&str] = &[
    "elfen-bench",
    "elfen-sim",
    "elfen-micro",
    "elfen-isobench",
    "elfen-proxybench",
];

/// The binary that carries both (`elfen daemon` and `elfen bench`).
const BOTH: &[&str] = &["elfen"];

/// Product → lab edges still there, each to be removed the way the wire
/// protocol, the proxy's bench and the load kit were; `(from, to, what it
/// uses)`. Empty: the list only shrinks, and a new edge fails the test.
const NOT_YET_REMOVED: &[(&str, &str, &str)] = &[];

/// Each workspace crate and its workspace crates among its normal
/// dependencies.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .args(["--manifest-path", manifest])
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} metadata: {e}"));
    assert!(
        out.status.success(),
        "{cargo} metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                // kind null: a normal dependency (not dev, not build)
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().expect("name").to_string())
                .filter(|d| names.contains(d))
                .collect();
            (p["name"].as_str().expect("name").to_string(), deps)
        })
        .collect()
}

/// The lab crates `from` reaches without crossing a listed edge, each
/// with the path that reaches it.
fn lab_reached(
    g: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    skip: &BTreeSet<(String, String)>,
) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![from.to_string()]];
    while let Some(path) = stack.pop() {
        let at = path.last().expect("a path is never empty").clone();
        if !seen.insert(at.clone()) {
            continue;
        }
        for d in &g[&at] {
            if skip.contains(&(at.clone(), d.clone())) {
                continue;
            }
            let mut p = path.clone();
            p.push(d.clone());
            if LAB.contains(&d.as_str()) {
                found.push(p);
            } else {
                stack.push(p);
            }
        }
    }
    found
}

#[test]
fn every_crate_is_product_or_lab() {
    let g = graph();
    let placed: BTreeSet<&str> = PRODUCT.iter().chain(LAB).chain(BOTH).copied().collect();
    let unplaced: Vec<&String> = g.keys().filter(|n| !placed.contains(n.as_str())).collect();
    assert!(
        unplaced.is_empty(),
        "crates named in neither PRODUCT nor LAB of {}: {unplaced:?}",
        file!()
    );
    let gone: Vec<&&str> = placed.iter().filter(|n| !g.contains_key(**n)).collect();
    assert!(gone.is_empty(), "listed but not in the workspace: {gone:?}");
}

#[test]
fn no_product_crate_depends_on_the_lab() {
    let g = graph();
    let mut skip = BTreeSet::new();
    let mut stale = Vec::new();
    for (from, to, _) in NOT_YET_REMOVED {
        if !g.get(*from).is_some_and(|d| d.contains(*to)) {
            stale.push(format!("{from} -> {to}"));
        }
        skip.insert((from.to_string(), to.to_string()));
    }
    assert!(
        stale.is_empty(),
        "edges listed in NOT_YET_REMOVED that are gone (remove them from the list): {stale:?}"
    );
    let mut bad = Vec::new();
    for p in PRODUCT {
        assert!(g.contains_key(*p), "{p} is not in the workspace");
        for path in lab_reached(&g, p, &skip) {
            bad.push(path.join(" -> "));
        }
    }
    assert!(
        bad.is_empty(),
        "product crates depend on lab crates (normal dependencies):\n  {}",
        bad.join("\n  ")
    );
}

/// The check itself finds an edge: with nothing skipped, the edges still
/// listed are reported, each through its own path.
#[test]
fn the_check_reports_a_known_edge() {
    let g = graph();
    for (from, to, _) in NOT_YET_REMOVED {
        let paths = lab_reached(&g, from, &BTreeSet::new());
        assert!(
            paths
                .iter()
                .any(|p| p.len() == 2 && p[0] == *from && p[1] == *to),
            "{from} -> {to} not reported: {paths:?}"
        );
    }
    // and a fabricated one, so the check is not vacuous once the list is empty
    let mut g2 = g.clone();
    g2.get_mut("elfen-shm")
        .expect("elfen-shm")
        .insert("elfen-sim".into());
    let paths = lab_reached(&g2, "elfen-ops", &BTreeSet::new());
    assert!(
        paths
            .iter()
            .any(|p| p[0] == "elfen-ops" && p.join(" -> ").ends_with("elfen-shm -> elfen-sim")),
        "a transitive edge through elfen-shm not reported: {paths:?}"
    );
}

/// `docs/architecture.md`'s crate table: `(crate, side, dependencies)` per
/// row of the section "Crates: one job each, product or lab".
fn architecture_table() -> Vec<(String, String, BTreeSet<String>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Crates: one job each"))
        .unwrap_or_else(|| panic!("{path}: no section \"Crates: one job each, product or lab\""));
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "{path}: a row of four cells: {l}");
            // "`cli` (`elfen`)": the package's name is the one in parentheses
            let names: Vec<&str> = cells[0].split('`').skip(1).step_by(2).collect();
            let name = match names.as_slice() {
                [dir] => format!("elfen-{dir}"),
                [_, package] => package.to_string(),
                _ => panic!("{path}: cannot read the crate of {l}"),
            };
            let deps = cells[3]
                .split(',')
                .map(|d| d.trim().trim_matches('*'))
                .filter(|d| !d.is_empty() && *d != "—")
                .map(|d| format!("elfen-{d}"))
                .collect();
            (name, cells[1].to_string(), deps)
        })
        .collect()
}

#[test]
fn the_architecture_table_is_the_cargo_graph() {
    let g = graph();
    let rows = architecture_table();
    let mut seen = BTreeSet::new();
    for (name, side, deps) in &rows {
        let want = match name.as_str() {
            n if PRODUCT.contains(&n) => "product",
            n if LAB.contains(&n) => "lab",
            n if BOTH.contains(&n) => "both",
            n => panic!("docs/architecture.md names {n}, not a workspace crate"),
        };
        assert_eq!(side, want, "docs/architecture.md: the side of {name}");
        assert_eq!(
            deps, &g[name],
            "docs/architecture.md: the dependencies of {name} (Cargo.toml has them on the right)"
        );
        seen.insert(name.clone());
    }
    let missing: Vec<&String> = g.keys().filter(|n| !seen.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's crate table leaves out {missing:?}"
    );
}
