//! The LC service's **demand alone** as the paper's Figure 1 shows it:
//! the share of requests per 1 ms bucket of service time, for services
//! whose demand reaches milliseconds (Lucene over a large index), read off
//! the result file's demand distribution alone.
//!
//! The distribution is kept in log-spaced buckets (20 per decade); a bucket
//! that straddles a whole millisecond is split in proportion to its width
//! on each side (values assumed uniform inside it). Below 1 ms the shares
//! are exact: 1000 µs is a bucket edge. The sweep also records the exact
//! shares from the raw service times as a run note
//! (`sweep::calibrate::demand_notes`).

use super::plot::PlotResult;
use elfen_results::{Distribution, ResultFile};
use plotters::prelude::*;
use std::path::Path;

/// Share of requests per whole millisecond `[k, k+1)` ms, k = 0 …; empty
/// when the distribution is empty or not in µs.
pub fn ms_shares(d: &Distribution) -> Vec<f64> {
    let total = d.total() as f64;
    if total == 0.0 || d.unit != "us" || d.edges.len() != d.counts.len() + 1 {
        return Vec::new();
    }
    let mut out: Vec<f64> = Vec::new();
    for (i, &c) in d.counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let (lo, hi) = (d.edges[i] / 1e3, d.edges[i + 1] / 1e3);
        let width = hi - lo;
        let mut k = lo.floor();
        while k < hi {
            let part = if width > 0.0 {
                ((hi.min(k + 1.0) - lo.max(k)) / width).max(0.0)
            } else {
                1.0
            };
            // relative tolerance: a log edge at 1000 µs may sit a hair off
            if part > 1e-9 {
                let idx = k as usize;
                if out.len() <= idx {
                    out.resize(idx + 1, 0.0);
                }
                out[idx] += c as f64 * part / total;
            }
            k += 1.0;
        }
    }
    out
}

/// One line: the shares per 1 ms bucket down to the last non-zero one,
/// e.g. `[0,1) 94.0%, [1,2) 3.8%, …`; `None` when the whole demand is
/// under 1 ms (the line would say 100 % and nothing else).
pub fn ms_line(d: &Distribution) -> Option<String> {
    let s = ms_shares(d);
    if s.len() < 2 {
        return None;
    }
    Some(
        s.iter()
            .enumerate()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| format!("[{k},{}) {:.1}%", k + 1, v * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// What the report says of the demand: which service, mean and p99 alone,
/// and the shares per 1 ms bucket.
pub fn summary(f: &ResultFile) -> Option<String> {
    let r = f.run.as_ref()?;
    let mut s = format!(
        "demand alone (Figure 1): mean {:.0} us, p99 {:.0} us",
        r.lc.demand_alone_mean_us, r.lc.demand_alone_p99_us
    );
    if let Some(d) = &f.demand {
        if let Some(max) = d
            .counts
            .iter()
            .rposition(|&c| c > 0)
            .map(|i| d.edges[i + 1])
        {
            s.push_str(&format!(", max < {:.0} us", max));
        }
        if let Some(l) = ms_line(d) {
            s.push_str(&format!("; per 1 ms: {l}"));
        }
    }
    Some(s)
}

/// Figure 1 as the paper draws it: share of requests per 1 ms bucket
/// (linear axis). Drawn only when the demand reaches 1 ms; returns whether
/// it was.
pub fn ms_plot(path: &Path, d: &Distribution, service: &str) -> PlotResult<bool> {
    let s = ms_shares(d);
    if s.len() < 2 {
        return Ok(false);
    }
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let ymax = s.iter().copied().fold(0.0, f64::max) * 100.0 * 1.1;
    let title = format!("Demand alone per 1 ms bucket (Figure 1) — {service}");
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..s.len() as f64, 0.0..ymax.max(1.0))
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("service time alone (ms)")
        .y_desc("% of requests")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|x| e(&x))?;
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series(s.iter().enumerate().map(|(k, v)| {
            let k = k as f64;
            Rectangle::new(
                [(k + 0.05, 0.0), (k + 0.95, v * 100.0)],
                blue.mix(0.75).filled(),
            )
        }))
        .map_err(|x| e(&x))?;
    chart
        .draw_series(
            s.iter()
                .enumerate()
                .filter(|(_, v)| **v > 0.0)
                .map(|(k, v)| {
                    Text::new(
                        if *v < 1e-3 {
                            format!("{:.2}", v * 100.0)
                        } else {
                            format!("{:.1}", v * 100.0)
                        },
                        (k as f64 + 0.15, v * 100.0 + ymax * 0.02),
                        ("sans-serif", 12),
                    )
                }),
        )
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(values: &[f64]) -> Distribution {
        let mut d = Distribution::log_buckets("us", 1.0, 1e7, 20);
        for &v in values {
            d.record(v);
        }
        d
    }

    #[test]
    fn shares_per_millisecond_sum_to_one_and_land_in_their_bucket() {
        let mut v = vec![100.0; 90];
        v.extend([1500.0; 5]);
        v.extend([4200.0; 5]);
        let s = ms_shares(&dist(&v));
        assert!((s.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{s:?}");
        assert!((s[0] - 0.90).abs() < 1e-9, "{s:?}");
        // 1500 us sits in a log bucket inside [1, 2) ms
        assert!((s[1] - 0.05).abs() < 1e-9, "{s:?}");
        // 4200 us: its bucket [3981, 4467) straddles 4 ms
        assert!((s[3] + s[4] - 0.05).abs() < 1e-9, "{s:?}");
        assert!(s[4] > s[3]);
        let l = ms_line(&dist(&v)).unwrap();
        assert!(l.starts_with("[0,1) 90.0%, [1,2) 5.0%"), "{l}");
    }

    #[test]
    fn demand_under_a_millisecond_has_no_per_ms_line() {
        assert_eq!(ms_line(&dist(&[10.0, 200.0, 999.0])), None);
        assert!(ms_shares(&Distribution::log_buckets("us", 1.0, 10.0, 2)).is_empty());
    }
}
