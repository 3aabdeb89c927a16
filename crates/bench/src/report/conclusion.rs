//! The run's **conclusion in words**, from its own figures
//! (`elfen_results::study::conclusion`): per batch program, which
//! configurations kept the LC's p99 and at what utilization and batch
//! progress, plain `SCHED_IDLE` beside them, and what the machine could not
//! show. Every sentence is chosen by a figure of the file; nothing is said
//! that the file does not hold.

use super::verdicts::tolerance;
use elfen_results::ResultFile;
use elfen_results::study::conclusion::{
    BatchConclusion, Range, Showing, Versus, conclusion as study_conclusion,
};
use elfen_results::study::{self, Verdict};
use std::fmt::Write as _;

/// `lo-hi` to two decimals, or one figure where both print alike.
fn range(r: Option<Range>, unit: &str) -> String {
    match r {
        Some(r) => {
            let (lo, hi) = (format!("{:.2}", r.lo), format!("{:.2}", r.hi));
            if lo == hi {
                format!("{lo}{unit}")
            } else {
                format!("{lo}-{hi}{unit}")
            }
        }
        None => "-".into(),
    }
}

fn loads(r: Option<Range>) -> String {
    match r {
        Some(r) if r.lo == r.hi => format!("{:.0} rps", r.lo),
        Some(r) => format!("{:.0}-{:.0} rps", r.lo, r.hi),
        None => "no judged load".into(),
    }
}

/// `name (utilization …, progress …)` for a configuration that kept p99.
fn kept_words(s: &Showing) -> String {
    format!(
        "{} (total utilization {}, batch progress {})",
        s.key.config,
        range(s.util, ""),
        range(s.progress, "")
    )
}

fn names(v: &[&Showing]) -> String {
    v.iter()
        .map(|s| s.key.config.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The verdict sentence of one batch program.
fn verdict_words(b: &BatchConclusion) -> String {
    let of = |v: Verdict| -> Vec<&Showing> {
        b.showings
            .iter()
            .filter(|s| s.verdict == v && s.key.config != elfen_results::Config::SchedIdle)
            .collect()
    };
    let (kept, hurt) = (of(Verdict::Kept), of(Verdict::Hurt));
    let open: Vec<&Showing> = b
        .showings
        .iter()
        .filter(|s| {
            matches!(s.verdict, Verdict::Inconclusive | Verdict::NotJudged)
                && s.key.config != elfen_results::Config::SchedIdle
        })
        .collect();
    let at = b.showings.first().map(|s| loads(s.rps)).unwrap_or_default();
    let mut parts = Vec::new();
    if !kept.is_empty() {
        parts.push(format!(
            "p99 kept by {}",
            kept.iter()
                .map(|s| kept_words(s))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !hurt.is_empty() {
        parts.push(format!(
            "HURT by {}",
            hurt.iter()
                .map(|s| format!(
                    "{} (p99 up to {:.2}x LC alone's)",
                    s.key.config,
                    s.ratio.map_or(f64::NAN, |r| r.hi)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !open.is_empty() {
        parts.push(format!(
            "still open for {} (the interval straddles the limit after at most {} rounds)",
            names(&open),
            open.iter().map(|s| s.rounds).max().unwrap_or(0)
        ));
    }
    if parts.is_empty() {
        parts.push("no configuration judged".into());
    }
    format!("{} at {at}: {}.", b.batch, parts.join("; "))
}

/// `SCHED_IDLE`'s own line and how the configurations that step aside
/// compare with it.
fn idle_words(b: &BatchConclusion) -> Vec<String> {
    let Some(idle) = &b.sched_idle else {
        return vec![
            "Plain SCHED_IDLE did not run beside them: no comparison (add sched_idle to \
             --configs)."
                .into(),
        ];
    };
    let verdict = match idle.verdict {
        Verdict::Kept => "kept p99".to_string(),
        Verdict::Hurt => format!(
            "HURT p99 (up to {:.2}x LC alone's)",
            idle.ratio.map_or(f64::NAN, |r| r.hi)
        ),
        Verdict::Inconclusive | Verdict::NotJudged => "left its verdict open".to_string(),
    };
    let mut out = vec![format!(
        "Plain SCHED_IDLE {verdict}, at total utilization {} and batch progress {}.",
        range(idle.util, ""),
        range(idle.progress, "")
    )];
    let with = |v: Versus| -> Vec<&Showing> {
        b.versus
            .iter()
            .filter(|(_, w)| *w == v)
            .filter_map(|(k, _)| b.showings.iter().find(|s| s.key == *k))
            .collect()
    };
    let mid = |s: &Showing| s.progress_mid.map_or("-".into(), |p| format!("{p:.2}"));
    let idle_mid = mid(idle);
    let group = with(Versus::IdleAsGoodMoreProgress);
    if !group.is_empty() {
        out.push(format!(
            "SCHED_IDLE alone does as well here: it kept p99 like {} and made more batch progress \
             ({idle_mid} vs {}).",
            names(&group),
            group.iter().map(|s| mid(s)).collect::<Vec<_>>().join(", ")
        ));
    }
    let group = with(Versus::BothKeptThisMoreProgress);
    if !group.is_empty() {
        out.push(format!(
            "{} kept p99 like SCHED_IDLE and made more batch progress ({} vs {idle_mid}).",
            names(&group),
            group.iter().map(|s| mid(s)).collect::<Vec<_>>().join(", ")
        ));
    }
    let group = with(Versus::OnlyThisKept);
    if !group.is_empty() {
        out.push(format!(
            "{} kept p99 where SCHED_IDLE did not: stepping aside is what protected the LC here.",
            names(&group)
        ));
    }
    let group = with(Versus::OnlyIdleKept);
    if !group.is_empty() {
        out.push(format!(
            "SCHED_IDLE kept p99 where {} did not.",
            names(&group)
        ));
    }
    let group = with(Versus::NeitherKept);
    if !group.is_empty() {
        out.push(format!(
            "Neither SCHED_IDLE nor {} kept p99.",
            names(&group)
        ));
    }
    out
}

/// What the machine could not show, and where that is shown instead.
fn machine_words(shares_core: Option<bool>) -> String {
    match shares_core {
        Some(false) => "This machine cannot show Elfen's main case: its batch lane is another \
                        core, not an SMT sibling of the request lane (no SMT here), so a batch \
                        thread that steps aside frees only the shared cache and memory \
                        bandwidth, never the core's execution units. `elfen sim repro` shows \
                        that case (the paper's results beside the simulator's)."
            .into(),
        Some(true) => "The batch lanes are SMT siblings of the request lane: stepping aside \
                       frees the core's execution units as well as its caches."
            .into(),
        None => "The file does not say whether the batch lanes share the request lane's core; \
                 `elfen sim repro` shows the SMT case (the paper's results beside the \
                 simulator's)."
            .into(),
    }
}

/// Other processes' CPU (lanes, median over the measured windows) above
/// which the conclusion says the machine was busy with other work.
pub const BUSY_MACHINE_LANES: f64 = 0.25;

/// A sentence when other processes used the machine enough to be part of
/// what was measured.
fn busy_words(f: &ResultFile) -> Option<String> {
    let n = study::noise(f, f64::INFINITY)?;
    (n.foreign.median > BUSY_MACHINE_LANES).then(|| {
        format!(
            "Other processes used {:.2} lanes of this machine (median over the measured windows; \
             up to {:.2}): these figures are co-location on a busy machine, and LC alone was \
             slowed by that work as well.",
            n.foreign.median, n.foreign.max
        )
    })
}

/// The conclusion of `f` in words, one paragraph per batch program, then
/// the machine's limits; empty when nothing with batch work was judged.
pub fn conclusion_text(f: &ResultFile) -> String {
    let c = study_conclusion(f, tolerance(f));
    if c.batches.iter().all(|b| b.showings.is_empty()) {
        return String::new();
    }
    let mut s = String::from("Conclusion (this run's figures, loads up to LC alone's knee):\n");
    for b in c.batches.iter().filter(|b| !b.showings.is_empty()) {
        let _ = writeln!(s, "- {}", verdict_words(b));
        for l in idle_words(b) {
            let _ = writeln!(s, "  {l}");
        }
    }
    if let Some(b) = busy_words(f) {
        let _ = writeln!(s, "{b}");
    }
    let _ = writeln!(s, "{}", machine_words(c.batch_shares_core));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::conclusion_file;

    #[test]
    fn a_range_that_prints_as_one_figure_is_one() {
        let r = |lo, hi| range(Some(Range { lo, hi }), "");
        assert_eq!(r(0.966, 0.974), "0.97");
        assert_eq!(r(0.95, 0.96), "0.95-0.96");
        assert_eq!(range(None, ""), "-");
    }

    #[test]
    fn the_words_follow_the_figures() {
        // SCHED_IDLE kept p99 and made more progress than borrow idle
        let f = conclusion_file(&[1.02, 0.98, 1.01, 1.03, 0.99], 1.6, Some(false));
        let t = conclusion_text(&f);
        assert!(t.contains("p99 kept by borrow_idle"), "{t}");
        assert!(t.contains("Plain SCHED_IDLE kept p99"), "{t}");
        assert!(
            t.contains("SCHED_IDLE alone does as well here")
                && t.contains("more batch progress (1.60 vs 0.70)"),
            "{t}"
        );
        assert!(t.contains("HURT by naive"), "{t}");
        assert!(
            t.contains("cannot show") && t.contains("elfen sim repro"),
            "{t}"
        );
        assert!(!t.contains("where SCHED_IDLE did not"), "{t}");

        // SCHED_IDLE hurt p99: borrow idle's stepping aside protected the LC
        let f = conclusion_file(&[1.5, 1.4, 1.6, 1.45, 1.7], 1.6, Some(false));
        let t = conclusion_text(&f);
        assert!(t.contains("Plain SCHED_IDLE HURT p99 (up to 1.5"), "{t}");
        assert!(
            t.contains("borrow_idle kept p99 where SCHED_IDLE did not"),
            "{t}"
        );
        assert!(!t.contains("does as well"), "{t}");

        // both kept, borrow idle made more progress
        let f = conclusion_file(&[1.0, 0.95, 1.02, 0.97, 1.01], 0.5, Some(true));
        let t = conclusion_text(&f);
        assert!(
            t.contains(
                "borrow_idle kept p99 like SCHED_IDLE and made more batch progress (0.70 vs 0.50)"
            ),
            "{t}"
        );
        assert!(
            t.contains("SMT siblings") && !t.contains("cannot show"),
            "{t}"
        );

        // SCHED_IDLE straddles the limit: no comparison is claimed
        let f = conclusion_file(&[0.9, 1.3, 1.05], 1.6, None);
        let t = conclusion_text(&f);
        assert!(t.contains("SCHED_IDLE left its verdict open"), "{t}");
        assert!(
            !t.contains("does as well") && !t.contains("where SCHED_IDLE did not"),
            "{t}"
        );
    }
}
