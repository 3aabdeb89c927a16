//! Measures the executor's operations on the real cgroup hierarchy and
//! prints medians; `--json PATH` also saves the report.
//!
//! ```text
//! cargo run --release -p elfen-cgroup --example cgroup_latency -- [--root /sys/fs/cgroup] [--reps 50] [--json out.json]
//! ```
//!
//! Needs root. Creates `elfen-measure-<pid>` groups and a busy child held
//! to 20 % of a CPU; both are removed when it ends.

use elfen_cgroup::measure::{Stats, measure_latency};
use std::path::PathBuf;

fn main() {
    let mut root = elfen_cgroup::default_root();
    let mut reps = 50usize;
    let mut json: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("{name} needs a value");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--root" => root = PathBuf::from(val("--root")),
            "--reps" => {
                reps = val("--reps").parse().unwrap_or_else(|_| {
                    eprintln!("--reps: expected a number");
                    std::process::exit(2)
                })
            }
            "--json" => json = Some(PathBuf::from(val("--json"))),
            "-h" | "--help" => {
                println!("cgroup_latency [--root PATH] [--reps N] [--json PATH]");
                return;
            }
            other => {
                eprintln!("unknown argument {other:?} (try --help)");
                std::process::exit(2);
            }
        }
    }
    let report = match measure_latency(&root, reps.max(1)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cgroup_latency: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "cgroup latency on {} ({} layout), {} reps; median / p90 / min / max in µs",
        report.root.display(),
        report.layout,
        report.reps
    );
    let row = |name: &str, s: &Option<Stats>| match s {
        Some(s) => println!(
            "  {name:<24} {:>9.1} {:>9.1} {:>9.1} {:>9.1}  (n={})",
            s.median_us, s.p90_us, s.min_us, s.max_us, s.n
        ),
        None => println!("  {name:<24} {:>9}", "-"),
    };
    row("freeze v1 (to FROZEN)", &report.freeze_v1);
    row("thaw v1 (write)", &report.thaw_v1);
    row("freeze v2 (to frozen 1)", &report.freeze_v2);
    row("thaw v2 (write)", &report.thaw_v2);
    row("cpuset shrink", &report.cpuset_shrink);
    row("cpuset widen", &report.cpuset_widen);
    row("cfs quota write", &report.cfs_quota_write);
    if report.freeze_timeouts > 0 {
        println!("  freezes timed out (1 s): {}", report.freeze_timeouts);
    }
    for n in &report.notes {
        println!("  note: {n}");
    }
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&report).expect("report serialises");
        if let Err(e) = std::fs::write(&p, text + "\n") {
            eprintln!("cgroup_latency: {}: {e}", p.display());
            std::process::exit(1);
        }
        println!("saved {}", p.display());
    }
}
