//! **Reports** from result files alone (no re-run): the side-by-side
//! tables ([`table`]), the verdicts and targets ([`verdicts`]), and
//! `report.md` with the PNG plots ([`plot`]). Everything here reads
//! `elfen_results::study`; nothing here measures. Simulated result files
//! (written by `elfen sim`) are read the same way and drawn dashed next to
//! measured ones.

pub mod conclusion;
pub mod demand;
pub mod plot;
pub mod table;
pub mod verdicts;

use crate::error::{BenchError, Result};
use elfen_results::{Config, ResultFile, Source, study};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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
                .map_err(|e| BenchError::io(format!("reading {}", p.display()), e))?
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
        return Err(BenchError::Config(
            "no result files given (a directory must hold *.json result files)".into(),
        ));
    }
    Ok(out)
}

/// The report directory of a result file: `<dir>/<stem>-report/` beside it
/// (`results/<time>/bench.json` → `results/<time>/bench-report/`).
pub fn report_dir_for(json: &Path) -> PathBuf {
    let stem = json
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "result".into());
    json.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(format!("{stem}-report"))
}

fn slo_line(f: &ResultFile) -> String {
    let src = f
        .run
        .as_ref()
        .map(|r| r.slo.source.clone())
        .unwrap_or_default();
    match study::slo_us(f) {
        Some(s) => format!("SLO: p99 <= {:.2} ms ({src})", s / 1e3),
        None => "SLO: none".into(),
    }
}

/// What `elfen bench` and `elfen report` print: [`terminal_body`], then
/// the conclusion in words.
pub fn terminal_report(f: &ResultFile) -> String {
    let mut s = terminal_body(f);
    let c = conclusion::conclusion_text(f);
    if !c.is_empty() {
        let _ = write!(s, "\n{c}");
    }
    s
}

/// SLO, legend, noise, skipped configurations, one table per batch
/// program, verdicts and (for measured files) targets.
pub fn terminal_body(f: &ResultFile) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}\n{}", slo_line(f), table::LEGEND);
    if let Some(n) = verdicts::noise_line(f) {
        let _ = writeln!(s, "{n}");
    }
    if let Some(r) = &f.run {
        let _ = writeln!(
            s,
            "LC service: {} (signal: {}); requests: {}",
            r.lc.service, r.lc.signal, r.lc.requests
        );
        if let Some(d) = demand::summary(f) {
            let _ = writeln!(s, "{d}");
        }
        for k in &r.skipped {
            let _ = writeln!(s, "skipped {}: {}", k.config, k.reason);
        }
        let _ = writeln!(s, "load generator: {}", r.generator_sched);
    }
    let mut batches: Vec<Option<String>> = study::batches(f).into_iter().map(Some).collect();
    if batches.is_empty() {
        batches.push(None);
    }
    for b in &batches {
        let _ = writeln!(
            s,
            "\n{}\n{}",
            b.as_ref()
                .map_or("LC alone".into(), |b| format!("batch: {b}")),
            table::table(f, b.as_deref()).render()
        );
    }
    let lines = verdicts::protection_lines(f);
    if !lines.is_empty() {
        let _ = writeln!(
            s,
            "Verdicts: p99 against LC alone's by the paired ratio, at loads up to LC alone's knee{}:\n  {}",
            study::knee_rps(f)
                .map(|k| format!(" ({k:.0} rps)"))
                .unwrap_or_default(),
            verdicts::rule_line(f)
        );
        if let Some(r) = verdicts::rounds_line(f) {
            let _ = writeln!(s, "  {r}");
        }
        for l in lines {
            let _ = writeln!(s, "  {l}");
        }
    }
    if f.source == Source::Measured {
        let t = verdicts::targets_text(f);
        if !t.is_empty() {
            let _ = writeln!(s, "\nTargets:\n{t}");
        }
        if let Some(w) = verdicts::wall_line(f) {
            let _ = writeln!(s, "{w}");
        }
    }
    s
}

/// Writes `report.md` and the PNG plots into `out_dir`; returns the path of
/// `report.md` and notes (e.g. plots skipped for want of a font).
pub fn write_report(inputs: &[Input], out_dir: &Path) -> Result<(PathBuf, Vec<String>)> {
    std::fs::create_dir_all(out_dir)
        .map_err(|e| BenchError::io(format!("creating {}", out_dir.display()), e))?;
    let mut notes = Vec::new();
    let plots = match plot::draw_all(inputs, out_dir) {
        Ok(p) => p,
        Err(e) => {
            notes.push(format!("plots skipped: {e}"));
            Vec::new()
        }
    };
    let mut md = String::from("# elfen co-location report\n\n");
    md.push_str(
        "Generated by `elfen report` from result files alone; re-run it on the same files to \
         regenerate. Measured curves are solid, simulated ones dashed.\n\n## Inputs\n\n",
    );
    for i in inputs {
        let f = &i.file;
        let _ = writeln!(
            md,
            "- `{}` — {}, {} points, created {} (unix s), command `{}`",
            i.path.display(),
            f.source.name(),
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
        results_section(&mut md, i);
    }
    md.push_str(&config_definitions());
    let path = out_dir.join("report.md");
    std::fs::write(&path, md)
        .map_err(|e| BenchError::io(format!("writing {}", path.display()), e))?;
    Ok((path, notes))
}

fn results_section(md: &mut String, i: &Input) {
    let f = &i.file;
    let _ = writeln!(
        md,
        "## Results: `{}` ({})\n\n{}.\n",
        i.path.display(),
        f.source.name(),
        slo_line(f)
    );
    if let Some(r) = &f.run {
        let items: [(&str, String); 10] = [
            (
                "LC service",
                format!("{} (signal: {})", r.lc.service, r.lc.signal),
            ),
            ("requests", r.lc.requests.clone()),
            (
                "demand alone",
                format!(
                    "mean {:.0} us, p99 {:.0} us; capacity {:.0} rps{}",
                    r.lc.demand_alone_mean_us,
                    r.lc.demand_alone_p99_us,
                    r.lc.capacity_rps,
                    f.demand
                        .as_ref()
                        .and_then(demand::ms_line)
                        .map(|l| format!("; share per 1 ms bucket: {l}"))
                        .unwrap_or_default()
                ),
            ),
            (
                "lanes",
                format!(
                    "{}: request cpu {}, batch cpus {:?}, generator cpus {:?}",
                    r.lanes.pairing,
                    r.lanes.request_cpu,
                    r.lanes.batch_cpus,
                    r.lanes.generator_cpus
                ),
            ),
            ("load generator", r.generator_sched.clone()),
            ("batch nap", r.batch.nap.clone()),
            (
                "batch alone (units/s)",
                format!("{:?}", r.batch.alone_units_per_s),
            ),
            (
                "budgets",
                format!("{} {:?}", r.budget.source, r.budget.by_rps),
            ),
            ("order and seeds", r.order.clone()),
            ("utilization", r.batch.utilization_method.clone()),
        ];
        for (k, v) in items {
            let _ = writeln!(md, "- **{k}**: {v}");
        }
        for s in &r.skipped {
            let _ = writeln!(md, "- **skipped {}**: {}", s.config, s.reason);
        }
        for n in &r.notes {
            let _ = writeln!(md, "- **note**: {n}");
        }
    }
    if let Some(w) = verdicts::wall_line(f) {
        let _ = writeln!(md, "- **wall time**: {w}");
    }
    if let Some(n) = verdicts::noise_line(f) {
        let _ = writeln!(md, "- **noise**: {n}");
    }
    md.push('\n');
    let mut batches: Vec<Option<String>> = study::batches(f).into_iter().map(Some).collect();
    if batches.is_empty() {
        batches.push(None);
    }
    for b in &batches {
        if let Some(b) = b {
            let _ = writeln!(md, "### Batch `{b}`\n");
        }
        md.push_str(&table::table(f, b.as_deref()).markdown());
        md.push('\n');
    }
    let lines = verdicts::protection_lines(f);
    if !lines.is_empty() {
        md.push_str("### Verdicts (p99 vs LC alone, paired ratio, loads up to the knee)\n\n");
        let _ = writeln!(md, "{}\n", verdicts::rule_line(f));
        if let Some(r) = verdicts::rounds_line(f) {
            let _ = writeln!(md, "{r}\n");
        }
        for l in lines {
            let _ = writeln!(md, "- {l}");
        }
        md.push('\n');
    }
    if f.source == Source::Measured {
        md.push_str("### Targets\n\n");
        for t in verdicts::targets(f) {
            let _ = writeln!(
                md,
                "- **{}** — {}: {}",
                verdicts::word(t.met),
                t.claim,
                t.detail
            );
        }
        md.push('\n');
    }
    let c = conclusion::conclusion_text(f);
    if !c.is_empty() {
        let _ = writeln!(md, "### Conclusion\n\n{c}");
    }
}

/// The configurations, defined, for the report's end.
fn config_definitions() -> String {
    let mut s = String::from("## Configurations\n\n| config | what runs |\n|---|---|\n");
    for c in Config::ALL {
        let _ = writeln!(s, "| {} | {} |", c.name(), c.definition());
    }
    s.push_str(
        "\nIn the harness (`docs/harness.md`): naive, sched_idle and cfs_quota run one batch \
         thread per lane, request lane included, pinned; cpuset runs one unpinned thread per \
         batch lane in a cpuset cgroup; the Elfen configurations run one thread per batch lane, \
         attached to it, checking at every work unit. Batch threads run SCHED_OTHER except in \
         sched_idle. The load generator and the built-in service's dispatcher run at real-time \
         priority where permitted (see the run's load-generator line).\n",
    );
    s
}

#[cfg(test)]
mod tests;
