//! The text view of `elfen status`: a header block and one row per lane,
//! with rates when two snapshots are known.

use crate::status::{PageStatus, Rates};
use std::fmt::Write;

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Renders a snapshot (and the rates since the previous one, if any).
pub fn text(s: &PageStatus, rates: Option<&Rates>) -> String {
    let mut o = String::new();
    let beat = match s.heartbeat_age_ms {
        Some(a) => format!(" — heartbeat {a:.0} ms ago"),
        None => String::new(),
    };
    let _ = writeln!(
        o,
        "page {} (abi {}, {} clock)",
        s.path.display(),
        s.abi_version,
        s.clock
    );
    let _ = writeln!(
        o,
        "controller: {}{beat}; creator pid {} {}",
        s.controller.word(),
        s.creator_pid,
        if s.creator_alive { "alive" } else { "gone" }
    );
    let _ = writeln!(
        o,
        "kill switch: {}; batch threads: {}{}",
        if s.killed {
            format!("SET ({})", s.kill_mode)
        } else {
            "clear".to_string()
        },
        s.batch_mode,
        match s.heartbeat_stale_ms {
            Some(ms) => format!(" (they pause if the heartbeat is older than {ms:.0} ms)"),
            None => String::new(),
        }
    );
    daemon_health(&mut o, s);
    let mut rows: Vec<Vec<String>> = vec![
        [
            "lane", "cpu", "role", "policy", "budget", "LC", "queue", "requests", "LC tid",
            "batch", "napping", "naps", "run ms",
        ]
        .iter()
        .map(|h| h.to_string())
        .collect(),
    ];
    if rates.is_some() {
        for h in ["LC busy", "req/s", "batch run", "naps/s"] {
            rows[0].push(h.to_string());
        }
    }
    for l in &s.lanes {
        let lc = if l.role != "request" {
            "-".to_string()
        } else if l.lc.busy {
            format!("busy {:.0} µs", l.lc.busy_for_us)
        } else {
            "idle".to_string()
        };
        let tid = match (l.lc.lc_tid, l.lc.lc_tid_alive) {
            (0, _) => "-".to_string(),
            (t, true) => t.to_string(),
            (t, false) => format!("{t} (gone)"),
        };
        let mut row = vec![
            l.lane.to_string(),
            l.cpu.to_string(),
            l.role.to_string(),
            l.policy.to_string(),
            format!("{:.0} µs", l.budget_us),
            lc,
            l.lc.queue_len.to_string(),
            l.lc.requests.to_string(),
            tid,
            l.batch.attached.to_string(),
            l.batch.napping.to_string(),
            l.batch.naps.to_string(),
            format!("{:.1}", l.batch.run_ms),
        ];
        if let Some(r) = rates.and_then(|r| r.lanes.iter().find(|x| x.lane == l.lane)) {
            row.push(pct(r.lc_busy_frac));
            row.push(format!("{:.0}", r.requests_per_s));
            row.push(pct(r.batch_run_frac));
            row.push(format!("{:.0}", r.naps_per_s));
        }
        rows.push(row);
    }
    table(&mut o, &rows);
    o
}

/// The daemon's batch groups and failed knob writes, when the page is a
/// daemon's.
fn daemon_health(o: &mut String, s: &PageStatus) {
    if let Some(n) = &s.daemon_note {
        let _ = writeln!(o, "daemon health: {n}");
    }
    let Some(h) = &s.daemon else { return };
    if let Some(a) = &h.about {
        let _ = writeln!(o, "daemon pid {}: LC {}", h.pid, a.lc);
        if !a.lc_groups.is_empty() {
            let _ = writeln!(o, "  watched in {}", a.lc_groups.join(", "));
        }
        let _ = writeln!(o, "  signal: {}", a.source);
        let _ = writeln!(o, "  policy: {}", a.policy);
        let _ = writeln!(o, "  host: {}", a.host);
        let _ = writeln!(o, "  {}", a.placement);
    }
    if let Some(u) = &h.lc_unseen {
        let _ = writeln!(o, "WARNING: LC UNSEEN: {u}");
    }
    let _ = writeln!(
        o,
        "batch groups of daemon pid {}{}:",
        h.pid,
        if s.creator_alive {
            ""
        } else {
            " (gone: as it last said)"
        }
    );
    let mut rows = Vec::new();
    for g in &h.groups {
        let mut what = g.state.word().to_string();
        if let Some(r) = &g.reason {
            what += &format!(" — {r}");
        }
        if !g.failures.is_empty() {
            let f: Vec<String> = g
                .failures
                .iter()
                .map(|f| format!("{} {}", f.knob.name(), f.count))
                .collect();
            what += &format!("; failed writes: {}", f.join(", "));
            if let Some(last) = g.failures.last().map(|f| &f.last_error) {
                what += &format!(" (last: {last})");
            }
        }
        let mode = match &g.protection {
            Some(p) if p.active != g.mode => format!("{} ({})", g.mode, p.active),
            _ => g.mode.clone(),
        };
        if let Some(n) = &g.named {
            what += &format!("; {n}");
        }
        if let Some(w) = &g.owner {
            what += &format!("; owned by {w}");
        }
        rows.push(vec![format!("  {}", g.name), mode, g.path.clone(), what]);
    }
    left_table(o, &rows);
    for g in &h.groups {
        let Some(p) = &g.protection else { continue };
        let mut parts = Vec::new();
        if let Some(f) = &p.fit {
            parts.push(f.clone());
        }
        if let Some(c) = p.contention_pct {
            parts.push(format!("contention {c:+.1} %"));
        }
        if let Some(h) = p.hold_us {
            parts.push(format!("hold {h:.0} µs"));
        }
        if let Some(s) = &p.scheduler {
            parts.push(s.clone());
        }
        if p.switches > 0 {
            parts.push(format!(
                "{} switches; last: {}",
                p.switches,
                p.last_switch.as_deref().unwrap_or("-")
            ));
        }
        if !parts.is_empty() {
            let _ = writeln!(o, "  {}: {}", g.name, parts.join("; "));
        }
    }
    if h.lc_ignored > 0 {
        let _ = writeln!(
            o,
            "LC: {} processes named like the LC service but of another user ignored",
            h.lc_ignored
        );
    }
}

/// Columns sized to their content, all left-aligned.
fn left_table(o: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|v| v.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| format!("{v:<w$}", w = width[c]))
            .collect();
        let _ = writeln!(o, "{}", line.join("  ").trim_end());
    }
}

/// Columns sized to their content, first column left-aligned.
fn table(o: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|v| v.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, v) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let pad = width[c].saturating_sub(v.chars().count());
            if c == 0 {
                line.push_str(v);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(v);
            }
        }
        let _ = writeln!(o, "{}", line.trim_end());
    }
}
