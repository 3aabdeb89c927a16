//! PNG plots with `plotters` (bitmap backend; text through `ab_glyph`, a
//! pure-Rust rasterizer, from a TrueType font on disk: DejaVu Sans from the
//! Debian package `fonts-dejavu-core`, listed in `scripts/deps/bench.apt`,
//! or `$ELFEN_FONT`). Measured series are solid, simulated ones dashed.
//! Log axes are drawn by plotting `log10` of the values with labels
//! formatted back.

use crate::report::Input;
use elfen_results::study::{self, SeriesKey};
use elfen_results::{Config, Distribution, Point, Source};
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// Where fonts are looked for, in order (after `$ELFEN_FONT`).
pub const FONT_CANDIDATES: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// A plot, or why it could not be drawn.
pub(crate) type PlotResult<T> = std::result::Result<T, String>;

fn register_font() -> PlotResult<()> {
    static DONE: OnceLock<PlotResult<()>> = OnceLock::new();
    DONE.get_or_init(|| {
        let mut candidates: Vec<String> = Vec::new();
        if let Ok(f) = std::env::var("ELFEN_FONT") {
            candidates.push(f);
        }
        candidates.extend(FONT_CANDIDATES.iter().map(|s| s.to_string()));
        for c in &candidates {
            if let Ok(bytes) = std::fs::read(c) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no TrueType font found (looked at $ELFEN_FONT and {}); install the Debian package \
             fonts-dejavu-core (scripts/deps/bench.apt)",
            FONT_CANDIDATES.join(", ")
        ))
    })
    .clone()
}

fn color_of(config: &str) -> RGBColor {
    match config {
        "lc_alone" => RGBColor(0, 0, 0),
        "naive" => RGBColor(214, 39, 40),
        "sched_idle" => RGBColor(255, 127, 14),
        "cpuset" => RGBColor(140, 86, 75),
        "cfs_quota" => RGBColor(148, 103, 189),
        "borrow_idle" => RGBColor(31, 119, 180),
        "fixed_budget" => RGBColor(44, 160, 44),
        "refresh_budget" => RGBColor(23, 190, 207),
        "dynamic_refresh" => RGBColor(227, 119, 194),
        "p50" => RGBColor(44, 160, 44),
        "p95" => RGBColor(31, 119, 180),
        "p99" => RGBColor(214, 39, 40),
        _ => {
            let h = config
                .bytes()
                .fold(7u32, |a, b| a.wrapping_mul(31).wrapping_add(b.into()));
            RGBColor((h % 200) as u8, (h / 7 % 200) as u8, (h / 49 % 200) as u8)
        }
    }
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Colour.
    pub color: RGBColor,
    /// Dashed (simulated).
    pub dashed: bool,
    /// Points `(x, y)`.
    pub points: Vec<(f64, f64)>,
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A chart's axes.
struct Axes<'a> {
    title: &'a str,
    x: &'a str,
    y: &'a str,
    log_x: bool,
    log_y: bool,
}

fn tr(v: f64, log: bool) -> f64 {
    if log { v.max(1e-9).log10() } else { v }
}

fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    axes: &Axes,
    series: &[Series],
    hline: Option<(f64, String)>,
) -> PlotResult<()>
where
    DB::ErrorType: 'static,
{
    let pts = series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts.chain(hline.iter().map(|h| (f64::NAN, h.0))) {
        if x.is_finite() {
            x0 = x0.min(tr(x, axes.log_x));
            x1 = x1.max(tr(x, axes.log_x));
        }
        if y.is_finite() && (!axes.log_y || y > 0.0) {
            y0 = y0.min(tr(y, axes.log_y));
            y1 = y1.max(tr(y, axes.log_y));
        }
    }
    if x0 > x1 || y0 > y1 {
        return Ok(());
    }
    let padx = ((x1 - x0) * 0.05).max(if axes.log_x { 0.05 } else { 1e-6 });
    let pady = ((y1 - y0) * 0.08).max(if axes.log_y { 0.05 } else { 1e-3 });
    let (x0, x1) = (x0 - padx, x1 + padx);
    let (y0, y1) = if axes.log_y {
        (y0 - pady, y1 + pady)
    } else {
        ((y0 - pady).min(0.0), y1 + pady)
    };
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(axes.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|x| e(&x))?;
    let (lx, ly) = (axes.log_x, axes.log_y);
    let xf = move |v: &f64| fmt_num(if lx { 10f64.powf(*v) } else { *v });
    let yf = move |v: &f64| fmt_num(if ly { 10f64.powf(*v) } else { *v });
    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|x| e(&x))?;
    for s in series {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!ly || p.1 > 0.0))
            .map(|&(x, y)| (tr(x, lx), tr(y, ly)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let style = s.color.stroke_width(2);
        let c = s.color;
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))
                .map_err(|x| e(&x))?
                .label(&s.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(1))
                });
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(|x| e(&x))?
                .label(&s.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(|x| e(&x))?;
    }
    if let Some((v, label)) = hline {
        let y = tr(v, ly);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x0, y), (x1, y)],
                4,
                4,
                RGBColor(120, 120, 120).stroke_width(1),
            ))
            .map_err(|x| e(&x))?
            .label(label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RGBColor(120, 120, 120)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|x| e(&x))?;
    Ok(())
}

fn save_lines(
    path: &Path,
    axes: &Axes,
    series: &[Series],
    hline: Option<(f64, String)>,
) -> PlotResult<()> {
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| x.to_string())?;
    draw_lines(&root, axes, series, hline)?;
    root.present().map_err(|x| x.to_string())
}

fn tag(i: &Input, many: bool) -> String {
    let src = match i.file.source {
        Source::Measured => "",
        Source::Simulated => " (sim)",
    };
    if many {
        let stem = i
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        format!("{src} [{stem}]")
    } else {
        src.to_string()
    }
}

fn series_for(
    inputs: &[Input],
    kernel: Option<&str>,
    metric: &dyn Fn(&Point) -> Option<f64>,
    with_lc_alone: bool,
) -> Vec<Series> {
    let count = |src: Source| inputs.iter().filter(|i| i.file.source == src).count();
    let many = count(Source::Measured) > 1 || count(Source::Simulated) > 1;
    let mut out: Vec<(SeriesKey, Series)> = Vec::new();
    for i in inputs {
        let f = &i.file;
        for key in study::series_keys(f) {
            let wanted = if key.config == Config::LcAlone {
                with_lc_alone
            } else {
                kernel.is_some() && key.batch.as_deref() == kernel
            };
            if !wanted {
                continue;
            }
            let points: Vec<(f64, f64)> = study::series(f, &key)
                .into_iter()
                .filter_map(|p| metric(p).map(|v| (p.rps_target, v)))
                .collect();
            if points.is_empty() {
                continue;
            }
            let name = key
                .label
                .clone()
                .unwrap_or_else(|| key.config.name().to_string());
            out.push((
                key.clone(),
                Series {
                    label: format!("{name}{}", tag(i, many)),
                    color: color_of(key.config.name()),
                    dashed: f.source == Source::Simulated,
                    points,
                },
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, s)| s).collect()
}

/// A number read off a point.
type Metric = fn(&Point) -> f64;

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// Draws every plot into `out_dir`; returns `(title, file name)` pairs.
pub fn draw_all(inputs: &[Input], out_dir: &Path) -> PlotResult<Vec<(String, String)>> {
    register_font()?;
    let mut out = Vec::new();
    let first = inputs
        .iter()
        .find(|i| i.file.source == Source::Measured)
        .or(inputs.first())
        .map(|i| &i.file);
    // Figure 1: demand, log buckets, and per 1 ms bucket when it reaches 1 ms.
    if let Some(f) = inputs.iter().map(|i| &i.file).find(|f| f.demand.is_some()) {
        let d = f.demand.as_ref().expect("found with a demand");
        let service = service_name(f);
        let name = "demand.png";
        demand_plot(&out_dir.join(name), d)?;
        out.push((
            format!("Figure 1 — LC request demand, measured alone ({service})"),
            name.to_string(),
        ));
        let name = "demand_ms.png";
        if super::demand::ms_plot(&out_dir.join(name), d, &service)? {
            out.push((
                format!("Figure 1 — share of requests per 1 ms of demand alone ({service})"),
                name.to_string(),
            ));
        }
    }
    out.push(lc_alone_plot(inputs, first, out_dir)?);
    let mut ks: Vec<String> = Vec::new();
    for i in inputs {
        for k in study::batches(&i.file) {
            if !ks.contains(&k) {
                ks.push(k);
            }
        }
    }
    for k in &ks {
        out.extend(batch_plots(inputs, first, out_dir, k)?);
    }
    if let Some(f) = first {
        out.extend(idle_plot(f, out_dir)?);
    }
    Ok(out)
}

/// Figure 2: LC alone's latency percentiles and utilization vs load.
fn lc_alone_plot(
    inputs: &[Input],
    first: Option<&elfen_results::ResultFile>,
    out_dir: &Path,
) -> PlotResult<(String, String)> {
    let name = "lc_alone.png";
    let path = out_dir.join(name);
    let root = BitMapBackend::new(&path, (960, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| x.to_string())?;
    let (top, bottom) = root.split_vertically(560);
    let mut lat = Vec::new();
    let mut util = Vec::new();
    for i in inputs {
        let f = &i.file;
        let sim = f.source == Source::Simulated;
        let alone = study::config_series(f, Config::LcAlone, None);
        let pick: [(&str, Metric); 3] = [
            ("p50", |p| p.summary.latency_us.p50.median),
            ("p95", |p| p.summary.latency_us.p95.median),
            ("p99", |p| p.summary.latency_us.p99.median),
        ];
        for (key, get) in pick {
            let pts: Vec<(f64, f64)> = alone
                .iter()
                .filter_map(|p| finite(get(p)).map(|v| (p.rps_target, v / 1e3)))
                .collect();
            if !pts.is_empty() {
                lat.push(Series {
                    label: format!("{key}{}", if sim { " (sim)" } else { "" }),
                    color: color_of(key),
                    dashed: sim,
                    points: pts,
                });
            }
        }
        let pts: Vec<(f64, f64)> = alone
            .iter()
            .filter_map(|p| finite(p.summary.utilization.lc.median).map(|v| (p.rps_target, v)))
            .collect();
        if !pts.is_empty() {
            util.push(Series {
                label: format!("utilization{}", if sim { " (sim)" } else { "" }),
                color: color_of("lc_alone"),
                dashed: sim,
                points: pts,
            });
        }
    }
    let slo = first
        .and_then(study::slo_us)
        .map(|v| (v / 1e3, "SLO".to_string()));
    // the knee: a vertical line through the latencies drawn
    if let Some(k) = first.and_then(study::knee_rps) {
        let ys = lat.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let (lo, hi) = ys.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
        if lo <= hi {
            lat.push(Series {
                label: format!("knee {k:.0} rps"),
                color: RGBColor(120, 120, 120),
                dashed: true,
                points: vec![(k, lo), (k, hi)],
            });
        }
    }
    let title = format!(
        "LC alone: latency percentiles vs load (Figure 2){}",
        first
            .map(|f| format!(" — {}", service_name(f)))
            .unwrap_or_default()
    );
    draw_lines(
        &top,
        &Axes {
            title: &title,
            x: "requests per second",
            y: "latency (ms, log)",
            log_x: false,
            log_y: true,
        },
        &lat,
        slo,
    )?;
    draw_lines(
        &bottom,
        &Axes {
            title: "LC alone: utilization (1 lane = 1.0)",
            x: "requests per second",
            y: "utilization",
            log_x: false,
            log_y: false,
        },
        &util,
        None,
    )?;
    root.present().map_err(|x| x.to_string())?;
    Ok((
        "Figure 2 — LC alone: latency percentiles and utilization vs load".into(),
        name.into(),
    ))
}

/// The LC service of a result file, short: `built-in`, `Lucene`, or the
/// external command's program name.
pub fn service_name(f: &elfen_results::ResultFile) -> String {
    let Some(r) = &f.run else {
        return "simulated".into();
    };
    let s = &r.lc.service;
    if let Some(cmd) = s.strip_prefix("external: ") {
        let exe = cmd.split_whitespace().next().unwrap_or(cmd);
        let name = Path::new(exe)
            .file_name()
            .map_or(exe.to_string(), |n| n.to_string_lossy().to_string());
        return if name == "elfen-lucene" {
            "Lucene (elfen-lucene)".into()
        } else {
            name
        };
    }
    if s.starts_with("built-in") {
        "built-in chase".into()
    } else {
        s.clone()
    }
}

/// Figures 10/11 and 12 for batch program `k`: p99, utilization and batch
/// progress vs load.
fn batch_plots(
    inputs: &[Input],
    first: Option<&elfen_results::ResultFile>,
    out_dir: &Path,
    k: &str,
) -> PlotResult<Vec<(String, String)>> {
    let mut out = Vec::new();
    let slo = first
        .and_then(study::slo_us)
        .map(|v| (v / 1e3, "SLO".to_string()));
    let s = series_for(
        inputs,
        Some(k),
        &|p| finite(p.summary.latency_us.p99.median).map(|v| v / 1e3),
        true,
    );
    let name = format!("latency_{k}.png");
    save_lines(
        &out_dir.join(&name),
        &Axes {
            title: &format!("p99 latency vs load, batch = {k} (Figures 10, 11)"),
            x: "requests per second",
            y: "p99 latency (ms, log)",
            log_x: false,
            log_y: true,
        },
        &s,
        slo,
    )?;
    out.push((format!("p99 latency vs load — {k}"), name));

    let s = series_for(
        inputs,
        Some(k),
        &|p| finite(p.summary.utilization.total.median),
        true,
    );
    let name = format!("utilization_{k}.png");
    save_lines(
        &out_dir.join(&name),
        &Axes {
            title: &format!("total utilization (LC + batch) vs load, batch = {k}"),
            x: "requests per second",
            y: "utilization (1 lane = 1.0)",
            log_x: false,
            log_y: false,
        },
        &s,
        None,
    )?;
    out.push((
        format!("Utilization vs load — {k} (Figures 10, 11 bottom)"),
        name,
    ));

    let s = series_for(
        inputs,
        Some(k),
        &|p| p.summary.batch_progress.map(|s| s.median),
        false,
    );
    if !s.is_empty() {
        let name = format!("progress_{k}.png");
        save_lines(
            &out_dir.join(&name),
            &Axes {
                title: &format!("batch progress vs load, {k} (relative to {k} alone; Figure 12)"),
                x: "requests per second",
                y: "work rate / alone",
                log_x: false,
                log_y: false,
            },
            &s,
            None,
        )?;
        out.push((format!("Batch progress vs load — {k} (Figure 12)"), name));
    }
    Ok(out)
}

/// Figure 5: the request lane's idle periods with LC alone, per load.
fn idle_plot(
    f: &elfen_results::ResultFile,
    out_dir: &Path,
) -> PlotResult<Option<(String, String)>> {
    let mut s = Vec::new();
    let alone = study::config_series(f, Config::LcAlone, None);
    let n = alone.len();
    for (j, p) in alone.into_iter().enumerate() {
        let r = p.rps_target;
        let Some(d) = p.idle_periods.as_ref() else {
            continue;
        };
        let pts = cumulative_time(d);
        if pts.is_empty() {
            continue;
        }
        // dark blue (low load) to orange (high load)
        let t = if n > 1 {
            j as f64 / (n - 1) as f64
        } else {
            0.0
        };
        let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
        s.push(Series {
            label: format!("{r:.0} rps"),
            color: RGBColor(mix(20.0, 230.0), mix(40.0, 120.0), mix(140.0, 20.0)),
            dashed: false,
            points: pts,
        });
    }
    if !s.is_empty() {
        let name = "idle_periods.png";
        save_lines(
            &out_dir.join(name),
            &Axes {
                title: "request-lane idle periods, LC alone: cumulative fraction of idle time (Figure 5)",
                x: "idle period length (µs, log)",
                y: "fraction of idle time in periods <= x",
                log_x: true,
                log_y: false,
            },
            &s,
            None,
        )?;
        return Ok(Some((
            "Figure 5 — request-lane idle periods (LC alone)".into(),
            name.into(),
        )));
    }
    Ok(None)
}

/// `(upper bucket edge, cumulative fraction of the summed values)`: the
/// fraction of all idle *time* spent in periods up to each length.
pub fn cumulative_time(d: &Distribution) -> Vec<(f64, f64)> {
    let total: f64 = d.sums.iter().sum();
    if total <= 0.0 || d.sums.len() != d.counts.len() {
        return Vec::new();
    }
    let mut acc = 0.0;
    let mut out = Vec::new();
    for (i, s) in d.sums.iter().enumerate() {
        acc += s;
        if d.counts[i] > 0 || (acc > 0.0 && acc < total) {
            out.push((d.edges[i + 1], acc / total));
        }
    }
    out
}

fn demand_plot(path: &Path, d: &Distribution) -> PlotResult<()> {
    let total = d.total() as f64;
    if total == 0.0 {
        return Ok(());
    }
    let first = d.counts.iter().position(|&c| c > 0).unwrap_or(0);
    let last = d.counts.iter().rposition(|&c| c > 0).unwrap_or(0);
    let x0 = d.edges[first].max(1e-3).log10();
    let x1 = d.edges[last + 1].log10();
    let ymax = d
        .counts
        .iter()
        .map(|&c| c as f64 / total)
        .fold(0.0, f64::max)
        * 1.1;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "LC request demand alone (Figure 1): fraction per bucket and CDF",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .right_y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..ymax)
        .map_err(|x| e(&x))?
        .set_secondary_coord(x0..x1, 0.0..1.0);
    chart
        .configure_mesh()
        .x_desc("service time alone (µs, log)")
        .y_desc("fraction of requests")
        .x_label_formatter(&|v| fmt_num(10f64.powf(*v)))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|x| e(&x))?;
    chart
        .configure_secondary_axes()
        .y_desc("cumulative fraction")
        .draw()
        .map_err(|x| e(&x))?;
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series((first..=last).map(|i| {
            let (a, b) = (d.edges[i].max(1e-3).log10(), d.edges[i + 1].log10());
            Rectangle::new(
                [(a, 0.0), (b, d.counts[i] as f64 / total)],
                blue.mix(0.7).filled(),
            )
        }))
        .map_err(|x| e(&x))?;
    let mut acc = 0.0;
    let cdf: Vec<(f64, f64)> = (first..=last)
        .map(|i| {
            acc += d.counts[i] as f64 / total;
            (d.edges[i + 1].log10(), acc)
        })
        .collect();
    chart
        .draw_secondary_series(LineSeries::new(cdf, RGBColor(214, 39, 40).stroke_width(2)))
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_idle_time() {
        let mut d = Distribution::log_buckets("us", 1.0, 1000.0, 1);
        d.record(5.0);
        d.record(500.0);
        let c = cumulative_time(&d);
        assert_eq!(c.len(), 3);
        assert!((c[0].1 - 5.0 / 505.0).abs() < 1e-9);
        assert!((c.last().unwrap().1 - 1.0).abs() < 1e-9);
        assert!(cumulative_time(&Distribution::log_buckets("us", 1.0, 10.0, 1)).is_empty());
    }

    #[test]
    fn log_labels_format() {
        assert_eq!(fmt_num(1234.0), "1234");
        assert_eq!(fmt_num(0.5), "0.500");
        assert_eq!(fmt_num(12.0), "12.0");
    }
}
