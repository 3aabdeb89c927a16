//! The side-by-side **table**, for the terminal and for Markdown: one row
//! per (load, configuration) with latency, ratios to LC alone, utilization,
//! batch progress and the SLO verdict. Columns size to their content.

use elfen_results::study::{self, Row};
use elfen_results::{ResultFile, Stat};
use std::fmt::Write as _;

/// A table of text cells; the first `left` columns are left-aligned, the
/// others right-aligned.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells (as many as headers); an empty row is a blank line.
    pub rows: Vec<Vec<String>>,
    /// Left-aligned leading columns.
    pub left: usize,
}

impl Table {
    /// Column widths: the widest cell or header of each column.
    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        w
    }

    /// Fixed-width text: two spaces between columns.
    pub fn render(&self) -> String {
        let w = self.widths();
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = w[i].saturating_sub(c.chars().count());
                if i < self.left {
                    s.push_str(c);
                    if i + 1 < cells.len() {
                        s.push_str(&" ".repeat(pad));
                    }
                } else {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
            }
            s
        };
        let mut out = line(&self.headers);
        out.push('\n');
        for r in &self.rows {
            if !r.is_empty() {
                out.push_str(&line(r));
            }
            out.push('\n');
        }
        out
    }

    /// A Markdown table (blank rows left out).
    pub fn markdown(&self) -> String {
        let mut s = format!("| {} |\n|", self.headers.join(" | "));
        for i in 0..self.headers.len() {
            s.push_str(if i < self.left { "---|" } else { "---:|" });
        }
        s.push('\n');
        for r in self.rows.iter().filter(|r| !r.is_empty()) {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "-".into(),
    }
}

fn ms(us: f64) -> String {
    opt(Some(us / 1e3), 2)
}

/// A paired ratio as `median (min-max)`.
pub fn paired_cell(p: Option<Stat>) -> String {
    match p {
        Some(s) => format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max),
        None => "-".into(),
    }
}

fn slo_word(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "ok",
        Some(false) => "MISS",
        None => "-",
    }
}

const HEADERS: [&str; 17] = [
    "rps", "config", "n", "p50", "p99", "p99.9", "x base", "paired x", "impact", "lc", "batch",
    "total", "progress", "daemon", "naps/s", "errors", "SLO",
];

fn cells(r: &Row) -> Vec<String> {
    let p = r.point;
    let s = &p.summary;
    vec![
        format!("{:.0}", p.rps_target),
        p.series_name().to_string(),
        p.reps.len().to_string(),
        ms(s.latency_us.p50.median),
        ms(s.latency_us.p99.median),
        ms(s.latency_us.p999.median),
        opt(r.ratio_of_medians, 2),
        paired_cell(r.paired),
        r.impact()
            .map(|i| format!("{:.0}%", i * 100.0))
            .unwrap_or("-".into()),
        opt(Some(s.utilization.lc.median), 2),
        opt(Some(s.utilization.batch.median), 2),
        opt(Some(s.utilization.total.median), 2),
        opt(s.batch_progress.map(|x| x.median), 2),
        // the daemon's own work (and the lane time it held through idle
        // gaps), where one of its modes ran (the kernel signal's writer
        // runs beside every configuration that uses it)
        match (
            s.daemon_own_util.or(s.daemon_util),
            s.daemon_held_util.filter(|h| h.median > 0.0),
        ) {
            (Some(o), Some(h)) if p.config.is_daemon_mode() => {
                format!("{:.2}+{:.2}h", o.median, h.median)
            }
            (Some(o), None) if p.config.is_daemon_mode() => format!("{:.2}", o.median),
            _ => "-".into(),
        },
        opt(s.naps_per_s.map(|x| x.median), 0),
        s.errors.to_string(),
        slo_word(s.slo_met).into(),
    ]
}

/// The table for one batch program (`None`: LC alone only), a blank row
/// between loads.
pub fn table(f: &ResultFile, batch: Option<&str>) -> Table {
    let mut t = Table {
        headers: HEADERS.iter().map(|h| h.to_string()).collect(),
        rows: Vec::new(),
        left: 2,
    };
    let mut last = None;
    for r in study::rows(f, batch) {
        if last.is_some_and(|l| l != r.point.rps_target) {
            t.rows.push(Vec::new());
        }
        last = Some(r.point.rps_target);
        t.rows.push(cells(&r));
    }
    t
}

/// The explanation printed above the tables.
pub const LEGEND: &str = "latency in ms (medians over n invocations), from each request's intended send time;\n\
x base = median p99 / LC alone's median p99 (ratio of medians); paired x = median (min-max) over rounds of\n\
p99 / LC alone's p99 in the same round (same arrivals and requests: common random numbers); impact = paired x - 1;\n\
utilization: sum over lanes of busy fraction (1 lane = 1.0); progress: batch work vs the same batch alone;\n\
daemon: the daemon's own work in its modes (writer, guards, freezer, blind isolation, auto: their CPU less their\n\
spinning on a batch lane), lanes' worth; +Nh: lane time held through the LC's idle gaps (batch did not get it);\n\
the occupation while the LC is busy (the protection itself) is in neither";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_size_to_their_content() {
        let t = Table {
            headers: vec!["a".into(), "value".into()],
            rows: vec![
                vec!["long-name".into(), "17.05".into()],
                vec![],
                vec!["x".into(), "31104.15".into()],
            ],
            left: 1,
        };
        let r = t.render();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "a             value");
        assert_eq!(lines[1], "long-name     17.05");
        assert_eq!(lines[2], "");
        assert_eq!(lines[3], "x          31104.15");
        // wide neighbours never run into each other
        assert!(lines.iter().all(|l| !l.contains("17.0531104")));
        assert!(t.markdown().contains("| long-name | 17.05 |"));
        assert!(t.markdown().contains("|---|---:|"));
    }
}
