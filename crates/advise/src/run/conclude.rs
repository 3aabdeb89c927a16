//! The **conclusion** of a run: the study applied to the recorded rows.

use super::{Options, reference_probe};
use crate::record::{AdviseResult, Knob, Recommendation};
use crate::study;

/// Other load above this many lanes in a window is said in the notes.
const DISTURBED_LANES: f64 = 0.25;

/// The study of the recorded rows: contention against the final
/// reference, progress, daemon CPU, verdicts, sensitivity and the
/// recommendation.
pub(super) fn conclude(result: &mut AdviseResult, mut notes: Vec<String>, o: &Options) {
    let reference = study::reference(&result.solo);
    for row in &mut result.probes {
        row.contention = row
            .window
            .as_ref()
            .filter(|w| w.wall_ns > 0)
            .map(|w| study::contention(w, &reference));
    }
    let ref_units = result.batch_reference_units_per_s;
    let ref_lanes = result
        .probes
        .iter()
        .find(|p| Some(p.probe) == reference_probe(o.batch_kernel))
        .and_then(|p| p.window.as_ref())
        .and_then(|w| Some(w.batch.as_ref()?.cpu_ns as f64 / w.wall_ns.max(1) as f64))
        .unwrap_or(1.0);
    for row in &mut result.knobs {
        let Some(w) = row.window.as_ref().filter(|w| w.wall_ns > 0) else {
            row.verdict = study::verdict(&row.outcome, None, o.threshold);
            continue;
        };
        let wall = w.wall_ns as f64;
        row.contention = Some(study::contention(w, &reference));
        row.progress = match (ref_units, &w.batch) {
            (Some(u), Some(b)) if u > 0.0 => Some(b.units as f64 * 1e9 / wall / u),
            _ => None,
        };
        if let Some(d) = &w.daemon {
            row.daemon_cpu_lanes = Some(d.cpu_ns as f64 / wall);
            row.daemon_own_lanes =
                Some(d.cpu_ns.saturating_sub(d.occupied_ns.unwrap_or(0)) as f64 / wall);
            if d.occupied_ns.is_none() && row.knob == Knob::Guard {
                notes.push(
                    "the guard's occupation could not be read from the daemon's metrics: its \
                     daemon CPU counts it as the daemon's own"
                        .into(),
                );
            }
        }
        row.verdict = study::verdict(&row.outcome, row.contention.as_ref(), o.threshold);
    }
    let windows = result
        .solo
        .iter()
        .chain(result.probes.iter().filter_map(|p| p.window.as_ref()))
        .chain(result.knobs.iter().filter_map(|k| k.window.as_ref()));
    let other = windows.map(study::other_lanes).fold(0.0, f64::max);
    if other > DISTURBED_LANES {
        notes.push(format!(
            "other processes and the host took up to {other:.2} lanes during a window (a load \
             generator running here counts among them): where that reaches the LC's lane, the \
             figures show it, not the probe or knob"
        ));
    }
    if ref_units.is_none() && !result.knobs.is_empty() {
        notes.push(
            "no batch reference was measured: batch progress is not known, and no knob is \
             recommended"
                .into(),
        );
    }
    result.sensitivity = study::sensitivity(&result.probes, o.max_slowdown);
    let predicted = study::predicted(&result.probes, o.threshold, o.max_slowdown);
    let (knob, reason) = if result.knobs.is_empty() {
        (None, "no knob was asked for (--knobs)".to_string())
    } else {
        study::recommend(&result.knobs, o.threshold, ref_lanes)
    };
    let most = result.sensitivity.first().map(|s| s.resource);
    let reason = match result.sensitivity.first() {
        Some(s) => format!(
            "the LC is most sensitive to {} ({} under {}{}); {reason}",
            s.resource.describe(),
            study::pct(s.contention),
            s.probe.name(),
            if s.stopped {
                ", stopped at the max slowdown"
            } else {
                ""
            }
        ),
        None => reason,
    };
    result.recommendation = Some(Recommendation {
        knob,
        reason,
        most_contentious: most,
        predicted,
    });
    result.reference = Some(reference);
    result.notes = notes;
}
