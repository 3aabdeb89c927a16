//! **Reports** from result files alone (no re-run): the side-by-side table
//! (terminal and Markdown) with ratios to LC alone, the check of the
//! issue's figures, and `report.md` with the PNG plots of [`crate::plot`].
//! Simulated result files (`source: simulated`, written by `elfen sim`) are
//! read the same way and drawn dashed next to measured ones.
//!
//! Ratios follow resctl-bench: `p99 / base` against LC alone at the same
//! load, and **latency impact** `max(p99 / base − 1, 0)`. `base` is LC
//! alone's median p99, so `p99 / base` is a **ratio of medians**. Files
//! measured with common random numbers (every configuration's invocation of
//! a round draws the same arrivals and requests, `spec.resolved.seeds`) also
//! get the **paired ratio**: the median over rounds of `p99 / LC alone's p99
//! in the same round`, with its min and max — the host's slow noise and the
//! draw cancel within a pair, so it is far less noisy.

use crate::error::Result;
use elfen_results::{Point, ResultFile, Source, Stat};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The configuration order of tables and plots (unknown names after).
pub const ORDER: [&str; 9] = [
    "lc_alone",
    "naive",
    "sched_idle",
    "cpuset",
    "cfs_quota",
    "borrow_idle",
    "fixed_budget",
    "refresh_budget",
    "dynamic_refresh",
];

fn order_key(c: &str) -> (usize, String) {
    (
        ORDER.iter().position(|o| *o == c).unwrap_or(ORDER.len()),
        c.to_string(),
    )
}

/// The SLO of a file, µs (from any point's summary).
pub fn slo_us(f: &ResultFile) -> Option<f64> {
    f.points.iter().find_map(|p| p.summary.slo_p99_us)
}

/// The batch kernels of a file, in first-seen order.
pub fn kernels(f: &ResultFile) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for p in &f.points {
        if let Some(b) = &p.batch {
            if !v.contains(b) {
                v.push(b.clone());
            }
        }
    }
    v
}

/// The configurations of a file, in [`ORDER`].
pub fn configs(f: &ResultFile) -> Vec<String> {
    let set: BTreeSet<(usize, String)> = f.points.iter().map(|p| order_key(&p.config)).collect();
    set.into_iter().map(|(_, c)| c).collect()
}

/// The loads of a file, ascending.
pub fn loads(f: &ResultFile) -> Vec<f64> {
    let mut v: Vec<f64> = f.points.iter().map(|p| p.rps_target).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The point of `config` (with `kernel`, or none for `lc_alone`) at `rps`.
pub fn point<'a>(
    f: &'a ResultFile,
    config: &str,
    kernel: Option<&str>,
    rps: f64,
) -> Option<&'a Point> {
    f.points.iter().find(|p| {
        p.config == config
            && p.rps_target == rps
            && (p.batch.as_deref() == kernel || (config == "lc_alone" && p.batch.is_none()))
    })
}

/// Whether the file was measured with common random numbers (the seed of an
/// invocation depends on load and round only), so that invocations of the
/// same round of two configurations pair up.
pub fn common_random_numbers(f: &ResultFile) -> bool {
    f.source == Source::Measured
        && f.spec
            .pointer("/resolved/seeds")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|s| s.starts_with("common random numbers"))
}

/// The round of an invocation (`extra.round`, 1-based).
fn round_of(r: &elfen_results::Rep) -> Option<u64> {
    r.extra.get("round").map(|x| x.round() as u64)
}

/// Paired p99 ratios of `p` to `base`: for every round both measured,
/// `p99 of p / p99 of base` in that round (rounds from `extra.round`; by
/// position for reps without it). Empty when no round pairs up or a base
/// p99 is not positive.
pub fn paired_p99_ratios(p: &Point, base: &Point) -> Vec<f64> {
    let by_round = p
        .reps
        .iter()
        .chain(&base.reps)
        .all(|r| round_of(r).is_some());
    let mut v = Vec::new();
    for (i, r) in p.reps.iter().enumerate() {
        let b = if by_round {
            base.reps.iter().find(|b| round_of(b) == round_of(r))
        } else {
            base.reps.get(i)
        };
        if let Some(b) = b.filter(|b| b.latency_us.p99 > 0.0) {
            v.push(r.latency_us.p99 / b.latency_us.p99);
        }
    }
    v
}

/// The paired ratio of `config` with `kernel` to LC alone at `rps` (median,
/// min, max over rounds), for files with common random numbers.
pub fn paired_ratio(f: &ResultFile, config: &str, kernel: &str, rps: f64) -> Option<Stat> {
    if !common_random_numbers(f) || config == "lc_alone" {
        return None;
    }
    let p = point(f, config, Some(kernel), rps)?;
    let base = point(f, "lc_alone", None, rps)?;
    Stat::of(&paired_p99_ratios(p, base))
}

fn med(p: &Point, group: &str, key: &str) -> f64 {
    let m = match group {
        "lat" => p.summary.latency_us.get(key),
        _ => p.summary.utilization.get(key),
    };
    m.map(|s| s.median).unwrap_or(f64::NAN)
}

/// One row of the side-by-side table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Load.
    pub rps: f64,
    /// Configuration.
    pub config: String,
    /// p50, p99, p99.9 latency, µs (medians over reps).
    pub p50_us: f64,
    /// p99.
    pub p99_us: f64,
    /// p99.9.
    pub p999_us: f64,
    /// Invocations (reps) measured.
    pub reps: usize,
    /// Ratio of medians: median p99 / LC alone's median p99 at this load.
    pub p99_ratio: Option<f64>,
    /// Paired ratio: median (min, max) over rounds of p99 / LC alone's p99
    /// in the same round (files with common random numbers only).
    pub paired: Option<Stat>,
    /// `max(p99 / base − 1, 0)`.
    pub impact: Option<f64>,
    /// Utilization: LC, batch, total.
    pub util: (f64, f64, f64),
    /// Batch progress relative to alone.
    pub progress: Option<f64>,
    /// Naps per second.
    pub naps_per_s: Option<f64>,
    /// SLO met.
    pub slo_met: Option<bool>,
}

/// The rows for `kernel`: per load, LC alone then each batch configuration.
pub fn rows(f: &ResultFile, kernel: &str) -> Vec<Row> {
    let mut out = Vec::new();
    for rps in loads(f) {
        let base = point(f, "lc_alone", None, rps).map(|p| med(p, "lat", "p99"));
        for c in configs(f) {
            let k = if c == "lc_alone" { None } else { Some(kernel) };
            let Some(p) = point(f, &c, k, rps) else {
                continue;
            };
            let p99 = med(p, "lat", "p99");
            let ratio = base.filter(|b| *b > 0.0).map(|b| p99 / b);
            out.push(Row {
                rps,
                config: c.clone(),
                p50_us: med(p, "lat", "p50"),
                p99_us: p99,
                p999_us: med(p, "lat", "p999"),
                reps: p.reps.len(),
                p99_ratio: ratio,
                paired: paired_ratio(f, &c, kernel, rps),
                impact: ratio.map(|r| (r - 1.0).max(0.0)),
                util: (
                    med(p, "util", "lc"),
                    med(p, "util", "batch"),
                    med(p, "util", "total"),
                ),
                progress: p.summary.batch_progress.map(|s| s.median),
                naps_per_s: p.summary.naps_per_s.map(|s| s.median),
                slo_met: p.summary.slo_met,
            });
        }
    }
    out
}

fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "-".into(),
    }
}

fn slo_word(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "ok",
        Some(false) => "MISS",
        None => "-",
    }
}

/// A paired ratio as `median (min-max)`.
fn paired_cell(p: Option<Stat>) -> String {
    match p {
        Some(s) => format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max),
        None => "-".into(),
    }
}

/// A row's cells, formatted: rps, config, n, p50, p99, p99.9 (ms), × base
/// (ratio of medians), paired ratio, impact, utilization LC / batch /
/// total, progress, naps/s, SLO.
fn cells(r: &Row) -> [String; 15] {
    [
        format!("{:.0}", r.rps),
        r.config.clone(),
        r.reps.to_string(),
        format!("{:.2}", r.p50_us / 1e3),
        format!("{:.2}", r.p99_us / 1e3),
        format!("{:.2}", r.p999_us / 1e3),
        opt(r.p99_ratio, 2),
        paired_cell(r.paired),
        r.impact
            .map(|i| format!("{:.0}%", i * 100.0))
            .unwrap_or("-".into()),
        format!("{:.2}", r.util.0),
        format!("{:.2}", r.util.1),
        format!("{:.2}", r.util.2),
        opt(r.progress, 2),
        opt(r.naps_per_s, 0),
        slo_word(r.slo_met).into(),
    ]
}

/// How noisy the machine was while the file was measured: CPU used by
/// other processes (`extra.foreign_util`, in lanes) and stolen by the host
/// (`extra.steal_util`) during the measured windows, median and max over
/// invocations; `None` if the file has no such figures.
pub fn noise(f: &ResultFile) -> Option<String> {
    let collect = |k: &str| -> Vec<f64> {
        let mut v: Vec<f64> = f
            .points
            .iter()
            .flat_map(|p| p.reps.iter().filter_map(|r| r.extra.get(k).copied()))
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (fo, st) = (collect("foreign_util"), collect("steal_util"));
    if fo.is_empty() {
        return None;
    }
    let m = |v: &[f64]| (v[v.len() / 2], v[v.len() - 1]);
    let ((fm, fx), (sm, sx)) = (m(&fo), m(&st));
    let noisy = fo.iter().filter(|&&x| x > 0.05).count();
    let retried: f64 = collect("disturbed_retries").iter().sum();
    let total: Vec<f64> = f
        .points
        .iter()
        .flat_map(|p| {
            p.reps.iter().map(|r| {
                r.extra.get("foreign_util").copied().unwrap_or(0.0)
                    + r.extra.get("steal_util").copied().unwrap_or(0.0)
            })
        })
        .collect();
    let limit = f
        .spec
        .get("disturbed_lanes")
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(0.2);
    let kept_disturbed = total.iter().filter(|&&x| x > limit).count();
    Some(format!(
        "machine noise during measured windows: other processes used {fm:.2} lanes median, {fx:.2} max \
         ({noisy} of {} invocations above 0.05); host steal {sm:.2} median, {sx:.2} max; \
         {retried:.0} disturbed invocations re-run, {kept_disturbed} kept although above {limit} lanes",
        fo.len()
    ))
}

/// Where a sweep's wall time went (`spec.resolved.wall_breakdown_s`), one
/// line; `None` for files without it.
pub fn wall_breakdown(f: &ResultFile) -> Option<String> {
    let wall = f.spec.pointer("/resolved/wall_s")?.as_f64()?;
    let parts = f.spec.pointer("/resolved/wall_breakdown_s")?.as_object()?;
    let get = |k: &str| parts.get(k).and_then(serde_json::Value::as_f64);
    let mut v = Vec::new();
    for (k, name) in [
        ("setup", "setup (calibration, demand alone)"),
        ("probe", "capacity probe"),
        ("batch_alone", "batch alone"),
        ("pre_sweep", "knee pre-sweep"),
        ("points", "points"),
        ("re_runs", "disturbed re-runs"),
        ("saving", "saving"),
        ("other", "other"),
    ] {
        if let Some(x) = get(k) {
            let mut s = format!("{name} {x:.1} s");
            if k == "points" {
                if let Some(b) = get("points_batch_start_stop") {
                    let _ = write!(s, " (of which batch start/settle/stop {b:.1} s)");
                }
            }
            v.push(s);
        }
    }
    Some(format!("wall time {wall:.0} s: {}", v.join(", ")))
}

/// The side-by-side table for the terminal: one block per kernel.
pub fn terminal_table(f: &ResultFile) -> String {
    let mut s = String::new();
    let slo = slo_us(f);
    let _ = writeln!(
        s,
        "SLO: p99 <= {}   latency in ms (medians over n invocations), from each request's intended send time;\n\
         x base = median p99 / LC alone's median p99 (ratio of medians); paired x = median (min-max) over rounds of\n\
         p99 / LC alone's p99 in the same round (same arrivals and requests: common random numbers);\n\
         utilization: sum over lanes of busy fraction (1 lane = 1.0); progress: batch work vs. the kernel alone",
        slo.map(|v| format!("{:.2} ms", v / 1e3))
            .unwrap_or("-".into())
    );
    let mut ks = kernels(f);
    if ks.is_empty() {
        ks.push(String::new());
    }
    if let Some(n) = noise(f) {
        let _ = writeln!(s, "{n}");
    }
    for k in ks {
        let _ = writeln!(
            s,
            "\n{}\n{:>7}  {:<16}{:>3}{:>7}{:>8}{:>8}{:>8}{:>19}{:>8}{:>7}{:>7}{:>7}{:>9}{:>9}{:>6}",
            if k.is_empty() {
                "LC alone".to_string()
            } else {
                format!("batch kernel: {k}")
            },
            "rps",
            "config",
            "n",
            "p50",
            "p99",
            "p99.9",
            "x base",
            "paired x",
            "impact",
            "lc",
            "batch",
            "total",
            "progress",
            "naps/s",
            "SLO"
        );
        let mut last = None;
        for r in rows(f, &k) {
            if last.is_some_and(|l| l != r.rps) {
                s.push('\n');
            }
            last = Some(r.rps);
            let c = cells(&r);
            let w = [7, 16, 3, 7, 8, 8, 8, 19, 8, 7, 7, 7, 9, 9, 6];
            let _ = write!(s, "{:>7}  {:<16}", c[0], c[1]);
            for (cell, width) in c.iter().zip(w).skip(2) {
                let _ = write!(s, "{cell:>width$}");
            }
            s.push('\n');
        }
    }
    s
}

/// The same table in Markdown.
pub fn markdown_table(f: &ResultFile, kernel: &str) -> String {
    let mut s = String::from(
        "| rps | config | n | p50 ms | p99 ms | p99.9 ms | p99 × base (ratio of medians) | paired p99 ratio, median (min–max) | latency impact | util LC | util batch | util total | progress | naps/s | SLO |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows(f, kernel) {
        let _ = writeln!(s, "| {} |", cells(&r).join(" | "));
    }
    s
}

/// One of the figures, judged from a result file.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// What is claimed.
    pub claim: String,
    /// Met (`None`: not enough data to judge).
    pub met: Option<bool>,
    /// The numbers behind the verdict.
    pub detail: String,
}

/// Judges the figures on a measured file.
pub fn figures(f: &ResultFile) -> Vec<Figure> {
    let mut out = Vec::new();
    let loads = loads(f);
    let lc_ok =
        |rps: f64| point(f, "lc_alone", None, rps).and_then(|p| p.summary.slo_met) == Some(true);
    // 1. borrow idle
    for k in kernels(f) {
        let mut verdict = None::<bool>;
        let mut detail = Vec::new();
        for &rps in loads.iter().filter(|&&r| lc_ok(r)) {
            let (Some(b), Some(base)) = (
                point(f, "borrow_idle", Some(&k), rps),
                point(f, "lc_alone", None, rps),
            ) else {
                continue;
            };
            let (p99, p99b) = (med(b, "lat", "p99"), med(base, "lat", "p99"));
            let allowed = (p99b * 1.05).max(p99b + 200.0);
            let util = med(b, "util", "total");
            let ok = p99 <= allowed && util >= 0.9;
            verdict = Some(verdict.unwrap_or(true) && ok);
            detail.push(format!(
                "{rps:.0} rps: p99 {:.2} ms vs {:.2} ms alone (allowed {:.2}), util {:.2}{}",
                p99 / 1e3,
                p99b / 1e3,
                allowed / 1e3,
                util,
                if ok { "" } else { " ✗" }
            ));
        }
        out.push(Figure {
            claim: format!(
                "borrow idle ({k}), ratio of medians: p99 within +5% or +0.2 ms of LC alone wherever LC alone meets the SLO, total utilization >= 0.9"
            ),
            met: verdict,
            detail: if detail.is_empty() {
                "no load where LC alone meets the SLO and borrow idle ran".into()
            } else {
                detail.join("; ")
            },
        });
        // The same claim judged by the paired ratio (common random numbers
        // only): the median over rounds of borrow idle's p99 / LC alone's
        // p99 in the same round must be <= max(1.05, 1 + 0.2 ms / LC
        // alone's median p99).
        if common_random_numbers(f) {
            let mut verdict = None::<bool>;
            let mut detail = Vec::new();
            for &rps in loads.iter().filter(|&&r| lc_ok(r)) {
                let (Some(b), Some(base), Some(pr)) = (
                    point(f, "borrow_idle", Some(&k), rps),
                    point(f, "lc_alone", None, rps),
                    paired_ratio(f, "borrow_idle", &k, rps),
                ) else {
                    continue;
                };
                let p99b = med(base, "lat", "p99");
                let allowed = 1.05f64.max(1.0 + 200.0 / p99b);
                let util = med(b, "util", "total");
                let ok = pr.median <= allowed && util >= 0.9;
                verdict = Some(verdict.unwrap_or(true) && ok);
                detail.push(format!(
                    "{rps:.0} rps: paired {:.2}x ({:.2}-{:.2}, {} rounds; allowed {:.2}x), util {:.2}{}",
                    pr.median,
                    pr.min,
                    pr.max,
                    paired_p99_ratios(b, base).len(),
                    allowed,
                    util,
                    if ok { "" } else { " ✗" }
                ));
            }
            out.push(Figure {
                claim: format!(
                    "borrow idle ({k}), paired: median over rounds of p99 / LC alone's p99 in the same round <= max(1.05, 1 + 0.2 ms / LC alone's p99) wherever LC alone meets the SLO, total utilization >= 0.9"
                ),
                met: verdict,
                detail: if detail.is_empty() {
                    "no load where LC alone meets the SLO and borrow idle ran".into()
                } else {
                    detail.join("; ")
                },
            });
        }
    }
    // 2. naive + stream degrades
    {
        let mut best = None::<(f64, f64, f64)>;
        for &rps in &loads {
            if let (Some(n), Some(base)) = (
                point(f, "naive", Some("stream"), rps),
                point(f, "lc_alone", None, rps),
            ) {
                let (a, b) = (med(n, "lat", "p99"), med(base, "lat", "p99"));
                if best.is_none_or(|x| a / b > x.1 / x.2) {
                    best = Some((rps, a, b));
                }
            }
        }
        out.push(Figure {
            claim:
                "naive co-run with stream visibly degrades p99 (>= +20% and +0.2 ms at some load)"
                    .into(),
            met: best.map(|(_, a, b)| a >= 1.2 * b && a >= b + 200.0),
            detail: best
                .map(|(r, a, b)| {
                    let paired = paired_ratio(f, "naive", "stream", r)
                        .map(|s| format!("; paired {:.2}x ({:.2}-{:.2})", s.median, s.min, s.max))
                        .unwrap_or_default();
                    format!(
                        "worst at {r:.0} rps: p99 {:.2} ms vs {:.2} ms alone ({:.2}x, ratio of medians{paired})",
                        a / 1e3,
                        b / 1e3,
                        a / b
                    )
                })
                .unwrap_or("no naive/stream points".into()),
        });
    }
    // 3. budget policies above borrow idle, under the SLO, where they have a
    //    budget (at and above the knee the headroom is 0 and they are borrow
    //    idle by construction)
    for c in ["fixed_budget", "refresh_budget", "dynamic_refresh"] {
        for k in kernels(f) {
            let mut verdict = None::<bool>;
            let mut detail = Vec::new();
            for &rps in loads.iter().filter(|&&r| lc_ok(r)) {
                let (Some(p), Some(b)) = (
                    point(f, c, Some(&k), rps),
                    point(f, "borrow_idle", Some(&k), rps),
                ) else {
                    continue;
                };
                let budget = p
                    .reps
                    .iter()
                    .filter_map(|r| r.extra.get("budget_us").copied())
                    .fold(0.0, f64::max);
                let (u, ub) = (med(p, "util", "total"), med(b, "util", "total"));
                let slo = p.summary.slo_met == Some(true);
                if budget <= 0.0 {
                    detail.push(format!(
                        "{rps:.0} rps: budget 0 (no headroom), util {u:.2} vs {ub:.2}, not judged"
                    ));
                    continue;
                }
                let ok = u > ub && slo;
                verdict = Some(verdict.unwrap_or(true) && ok);
                detail.push(format!(
                    "{rps:.0} rps (budget {:.2} ms): util {u:.2} vs {ub:.2}, p99 {:.2} ms {}",
                    budget / 1e3,
                    med(p, "lat", "p99") / 1e3,
                    if slo { "(SLO ok)" } else { "(SLO missed)" }
                ));
            }
            if !detail.is_empty() {
                out.push(Figure {
                    claim: format!(
                        "{c} ({k}): utilization above borrow idle while meeting the SLO, wherever LC alone meets it with headroom (budget > 0)"
                    ),
                    met: verdict,
                    detail: detail.join("; "),
                });
            }
        }
    }
    // 4. wall time, judged for the default sweep only
    if let Some(w) = f
        .spec
        .pointer("/resolved/wall_s")
        .and_then(serde_json::Value::as_f64)
    {
        let default = serde_json::to_value(crate::config::BenchSpec::default()).unwrap_or_default();
        let is_default = [
            "configs",
            "kernels",
            "rps",
            "rps_fractions",
            "duration_s",
            "warmup_s",
            "reps",
            "disturbed_retries",
        ]
        .iter()
        .all(|k| f.spec.get(k) == default.get(k));
        out.push(Figure {
            claim: "the default sweep fits in 5 minutes".into(),
            met: is_default.then_some(w <= 300.0),
            detail: if is_default {
                format!("{w:.0} s wall time")
            } else {
                format!("{w:.0} s wall time (not the default sweep: not judged)")
            },
        });
    }
    out
}

fn verdict(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "not judged",
    }
}

/// The figures as text lines.
pub fn figures_text(f: &ResultFile) -> String {
    let mut s = String::new();
    for fig in figures(f) {
        let _ = writeln!(
            s,
            "- [{}] {}\n    {}",
            verdict(fig.met),
            fig.claim,
            fig.detail
        );
    }
    s
}

/// A loaded result file and where it came from.
#[derive(Debug, Clone)]
pub struct Input {
    /// The file.
    pub path: PathBuf,
    /// Its contents.
    pub file: ResultFile,
}

/// Loads result files; a directory means every `*.json` in it.
pub fn load_inputs(paths: &[PathBuf]) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| crate::error::BenchError::io(format!("reading {}", p.display()), e))?
                .flatten()
                .map(|e| e.path())
                .filter(|q| q.extension().is_some_and(|e| e == "json"))
                .collect();
            files.sort();
            for f in files {
                out.push(Input {
                    file: ResultFile::load(&f)?,
                    path: f,
                });
            }
        } else {
            out.push(Input {
                file: ResultFile::load(p)?,
                path: p.clone(),
            });
        }
    }
    if out.is_empty() {
        return Err(crate::error::BenchError::Config(
            "no result files given (a directory must hold *.json result files)".into(),
        ));
    }
    Ok(out)
}

fn resolved_str(f: &ResultFile, key: &str) -> Option<String> {
    f.spec
        .pointer(&format!("/resolved/{key}"))
        .map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
}

/// Writes `report.md` and the PNG plots into `out_dir`; returns the path of
/// `report.md` and notes (e.g. plots skipped for want of a font).
pub fn write_report(inputs: &[Input], out_dir: &Path) -> Result<(PathBuf, Vec<String>)> {
    std::fs::create_dir_all(out_dir)
        .map_err(|e| crate::error::BenchError::io(format!("creating {}", out_dir.display()), e))?;
    let mut notes = Vec::new();
    let plots = match crate::plot::draw_all(inputs, out_dir) {
        Ok(p) => p,
        Err(e) => {
            notes.push(format!("plots skipped: {e}"));
            Vec::new()
        }
    };
    let mut md = String::from("# elfen co-location report\n\n");
    let _ = writeln!(
        md,
        "Generated by `elfen report` from result files alone; re-run it on the same files to \
         regenerate. Measured curves are solid, simulated ones dashed.\n"
    );
    md.push_str("## Inputs\n\n");
    for i in inputs {
        let f = &i.file;
        let _ = writeln!(
            md,
            "- `{}` — {}, {} points, created {} (unix s), command `{}`",
            i.path.display(),
            match f.source {
                Source::Measured => "measured",
                Source::Simulated => "simulated",
            },
            f.points.len(),
            f.created_unix_s,
            f.command
        );
    }
    md.push('\n');
    if !plots.is_empty() {
        md.push_str("## Plots\n\n");
        for (title, file) in &plots {
            let _ = writeln!(md, "### {title}\n\n![{title}]({file})\n");
        }
    }
    for i in inputs {
        let f = &i.file;
        let kind = match f.source {
            Source::Measured => "measured",
            Source::Simulated => "simulated",
        };
        let _ = writeln!(md, "## Results: `{}` ({kind})\n", i.path.display());
        let _ = writeln!(
            md,
            "SLO: p99 ≤ {} ({}).\n",
            slo_us(f)
                .map(|v| format!("{:.2} ms", v / 1e3))
                .unwrap_or("none".into()),
            resolved_str(f, "slo_source").unwrap_or("-".into())
        );
        for key in [
            "demand_source",
            "capacity_rps",
            "lanes",
            "batch_sched_class",
            "nap_backend",
            "utilization_method",
            "batch_alone_units_per_s",
            "budget_us_by_rps",
            "budget_source",
            "order",
            "seeds",
            "reps_planned",
            "notes",
            "load_before",
            "load_after",
            "wall_s",
        ] {
            if let Some(v) = resolved_str(f, key) {
                let _ = writeln!(md, "- **{key}**: {v}");
            }
        }
        if let Some(w) = wall_breakdown(f) {
            let _ = writeln!(md, "- **wall time breakdown**: {w}");
        }
        if let Some(n) = noise(f) {
            let _ = writeln!(md, "- **noise**: {n}");
        }
        md.push('\n');
        let mut ks = kernels(f);
        if ks.is_empty() {
            ks.push(String::new());
        }
        for k in ks {
            if !k.is_empty() {
                let _ = writeln!(md, "### Batch kernel `{k}`\n");
            }
            md.push_str(&markdown_table(f, &k));
            md.push('\n');
        }
        if f.source == Source::Measured {
            md.push_str("### The issue's figures\n\n");
            for fig in figures(f) {
                let _ = writeln!(
                    md,
                    "- **{}** — {}: {}",
                    verdict(fig.met),
                    fig.claim,
                    fig.detail
                );
            }
            md.push('\n');
        }
    }
    md.push_str(CONFIG_DEFINITIONS);
    let path = out_dir.join("report.md");
    std::fs::write(&path, md)
        .map_err(|e| crate::error::BenchError::io(format!("writing {}", path.display()), e))?;
    Ok((path, notes))
}

const CONFIG_DEFINITIONS: &str = "## Configurations\n\n\
Batch threads run at `SCHED_IDLE` in **every** configuration, so the LC worker, the load \
generator and the dispatcher (which share the batch lane on a 2-CPU machine) always preempt \
them; the harness's own share of the batch lane is therefore the same everywhere \
(`extra.harness_util` in the result file).\n\n\
| config | batch threads | scheduling | cgroup | checks |\n\
|---|---|---|---|---|\n\
| lc_alone | none | - | - | - |\n\
| naive | one per batch lane, pinned (sched_setaffinity) | SCHED_IDLE | - | no |\n\
| sched_idle | one per lane, request lanes included, pinned | SCHED_IDLE | - | no |\n\
| cpuset | one per batch lane, unpinned | SCHED_IDLE | cpuset = batch lanes | no |\n\
| cfs_quota | one per batch lane, pinned | SCHED_IDLE | cpu quota = cfs_quota_lanes × period | no |\n\
| borrow_idle | one per batch lane, pinned | SCHED_IDLE | - | every work unit (Figure 9a) |\n\
| fixed_budget | as borrow_idle | SCHED_IDLE | - | every unit (9b), budget = SLO headroom |\n\
| refresh_budget | as borrow_idle | SCHED_IDLE | - | every unit (9c) |\n\
| dynamic_refresh | as borrow_idle | SCHED_IDLE | - | every unit (9d); without counters = refresh budget |\n\n\
On a machine without SMT and one request/batch pair, `naive` and `cpuset` place batch work on \
the same lane: they differ in mechanism only (the thread's own affinity vs. a cgroup the \
process cannot leave). See `docs/harness.md`.\n";

#[cfg(test)]
mod tests {
    use super::*;
    use elfen_results::{Distribution, Percentiles, Rep, Summary, Utilization};
    use std::collections::BTreeMap;

    pub(crate) fn synthetic(source: Source) -> ResultFile {
        let mut f = ResultFile::new(
            source,
            "elfen bench --test".into(),
            {
                let mut spec = serde_json::to_value(crate::config::BenchSpec::default()).unwrap();
                spec["resolved"] = serde_json::json!({
                    "slo_source": "given",
                    "wall_s": 120.0,
                    "wall_breakdown_s": {"setup": 3.0, "points": 110.0,
                        "points_batch_start_stop": 9.0, "re_runs": 5.0, "other": 2.0},
                    "seeds": crate::sweep::SEEDS_NOTE,
                });
                spec
            },
            serde_json::json!({}),
        );
        let mut d = Distribution::log_buckets("us", 1.0, 1e5, 10);
        for x in [50.0, 80.0, 100.0, 2000.0] {
            d.record(x);
        }
        f.distributions.insert("demand".into(), d.clone());
        let mk = |config: &str, batch: Option<&str>, rps: f64, p99: f64, lc: f64, b: f64| {
            let rep = Rep {
                rps_achieved: rps,
                requests: 1000,
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
                    lc,
                    batch: b,
                    total: lc + b,
                },
                batch_units_per_s: batch.map(|_| 1e6),
                batch_progress: batch.map(|_| b),
                naps_per_s: batch.map(|_| 100.0),
                wakes_per_s: batch.map(|_| 100.0),
                histogram: None,
                extra: BTreeMap::new(),
            };
            let mut rep = rep;
            if config == "fixed_budget" {
                rep.extra.insert("budget_us".into(), 500.0);
            }
            let mut dists = BTreeMap::new();
            dists.insert("idle_periods".into(), d.clone());
            Point {
                config: config.into(),
                batch: batch.map(str::to_string),
                rps_target: rps,
                summary: Summary::of(std::slice::from_ref(&rep), Some(3000.0)),
                reps: vec![rep],
                distributions: dists,
            }
        };
        for (rps, base) in [(500.0, 1000.0), (1000.0, 2000.0)] {
            f.points
                .push(mk("lc_alone", None, rps, base, rps / 2000.0, 0.0));
            f.points.push(mk(
                "naive",
                Some("stream"),
                rps,
                base * 2.5,
                rps / 2000.0,
                0.9,
            ));
            f.points.push(mk(
                "borrow_idle",
                Some("stream"),
                rps,
                base * 1.02,
                rps / 2000.0,
                0.95 - rps / 2000.0,
            ));
            f.points.push(mk(
                "fixed_budget",
                Some("stream"),
                rps,
                base * 1.3,
                rps / 2000.0,
                1.2 - rps / 2000.0,
            ));
        }
        f
    }

    #[test]
    fn rows_have_ratios_to_lc_alone() {
        let f = synthetic(Source::Measured);
        let r = rows(&f, "stream");
        assert_eq!(r.len(), 8);
        let naive = r
            .iter()
            .find(|r| r.config == "naive" && r.rps == 500.0)
            .unwrap();
        assert!((naive.p99_ratio.unwrap() - 2.5).abs() < 1e-9);
        assert!((naive.impact.unwrap() - 1.5).abs() < 1e-9);
        let base = r.iter().find(|r| r.config == "lc_alone").unwrap();
        assert_eq!(base.impact, Some(0.0));
        let t = terminal_table(&f);
        assert!(t.contains("borrow_idle") && t.contains("3.00 ms"), "{t}");
        assert!(markdown_table(&f, "stream").contains("| 500 | naive |"));
    }

    /// A point of `config` whose reps have `p99s` (ms) in rounds 1, 2, ….
    fn rounds(config: &str, batch: Option<&str>, p99s: &[f64]) -> Point {
        let f = synthetic(Source::Measured);
        let mut p = f
            .points
            .iter()
            .find(|p| p.config == config && p.batch.as_deref() == batch)
            .unwrap()
            .clone();
        let one = p.reps[0].clone();
        p.reps = p99s
            .iter()
            .enumerate()
            .map(|(i, &ms)| {
                let mut r = one.clone();
                r.latency_us.p99 = ms * 1e3;
                r.extra.insert("round".into(), (i + 1) as f64);
                r
            })
            .collect();
        p.summary = Summary::of(&p.reps, Some(50_000.0));
        p.rps_target = 500.0;
        p
    }

    #[test]
    fn paired_ratios_pair_invocations_of_the_same_round() {
        let base = rounds("lc_alone", None, &[10.0, 11.0, 40.0]);
        let mut bi = rounds("borrow_idle", Some("stream"), &[30.0, 11.2, 41.0]);
        let r = paired_p99_ratios(&bi, &base);
        assert_eq!(r.len(), 3);
        assert!((r[0] - 3.0).abs() < 1e-9 && (r[2] - 41.0 / 40.0).abs() < 1e-9);
        // an interrupted point: rounds 1 and 3 only, out of order
        bi.reps.remove(1);
        bi.reps.reverse();
        let r = paired_p99_ratios(&bi, &base);
        assert_eq!(r.len(), 2);
        assert!((r[0] - 41.0 / 40.0).abs() < 1e-9 && (r[1] - 3.0).abs() < 1e-9);
    }

    #[test]
    fn both_verdicts_are_given_and_can_differ() {
        // Round 1 of borrow idle hit a noisy second, round 3 of LC alone
        // another: the ratio of medians (30 / 11 ms) fails, the paired
        // ratio (median of 3.0, 1.018, 1.025) passes.
        let mut f = synthetic(Source::Measured);
        f.points
            .retain(|p| p.rps_target != 500.0 || p.config == "naive");
        f.points.push(rounds("lc_alone", None, &[10.0, 11.0, 40.0]));
        f.points
            .push(rounds("borrow_idle", Some("stream"), &[30.0, 11.2, 41.0]));
        let figs = figures(&f);
        let of = |s: &str| figs.iter().find(|x| x.claim.starts_with(s)).unwrap();
        let medians = of("borrow idle (stream), ratio of medians");
        let paired = of("borrow idle (stream), paired");
        assert_eq!(medians.met, Some(false), "{}", medians.detail);
        assert_eq!(paired.met, Some(true), "{}", paired.detail);
        assert!(
            paired.detail.contains("(1.02-3.00, 3 rounds"),
            "{}",
            paired.detail
        );
        let table = rows(&f, "stream");
        let bi = table
            .iter()
            .find(|r| r.config == "borrow_idle" && r.rps == 500.0)
            .unwrap();
        assert_eq!(bi.reps, 3);
        assert!((bi.p99_ratio.unwrap() - 30.0 / 11.0).abs() < 1e-9);
        assert!((bi.paired.unwrap().median - 41.0 / 40.0).abs() < 1e-9);
        let t = terminal_table(&f);
        assert!(t.contains("(1.02-3.00)") && t.contains("paired x"), "{t}");
        // without common random numbers there is no paired figure or column
        f.spec["resolved"]["seeds"] = serde_json::json!("per configuration");
        assert!(figures(&f).iter().all(|x| !x.claim.contains("paired")));
        assert!(rows(&f, "stream").iter().all(|r| r.paired.is_none()));
    }

    #[test]
    fn figures_are_judged() {
        let f = synthetic(Source::Measured);
        let figs = figures(&f);
        let bi = figs
            .iter()
            .find(|x| x.claim.starts_with("borrow idle"))
            .unwrap();
        assert_eq!(bi.met, Some(true), "{}", bi.detail);
        let nv = figs.iter().find(|x| x.claim.starts_with("naive")).unwrap();
        assert_eq!(nv.met, Some(true));
        let fb = figs
            .iter()
            .find(|x| x.claim.starts_with("fixed_budget"))
            .unwrap();
        assert_eq!(fb.met, Some(true), "{}", fb.detail);
        let wall = figs.iter().find(|x| x.claim.contains("5 minutes")).unwrap();
        assert_eq!(wall.met, Some(true));
    }

    #[test]
    fn a_report_is_written_from_measured_and_simulated_files() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("measured.json");
        let s = dir.path().join("sim.json");
        synthetic(Source::Measured).save(&m).unwrap();
        synthetic(Source::Simulated).save(&s).unwrap();
        let inputs = load_inputs(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(inputs.len(), 2);
        let out = dir.path().join("report");
        let (md, notes) = write_report(&inputs, &out).unwrap();
        let text = std::fs::read_to_string(&md).unwrap();
        assert!(
            text.contains("(simulated)") && text.contains("(measured)"),
            "{text}"
        );
        assert!(text.contains("The issue's figures"));
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
    }
}
