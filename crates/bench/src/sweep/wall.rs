//! Where a sweep's wall time goes ([`elfen_results::Wall`]), charged part
//! by part as the sweep runs.

use elfen_results::Wall;
use std::time::Instant;

/// A part of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Pre-flight, service start-up, demand alone.
    Setup,
    /// The open-loop capacity probe.
    Probe,
    /// Batch programs alone.
    BatchAlone,
    /// The LC-alone pre-sweep.
    PreSweep,
    /// The interleaved rounds.
    Points,
    /// Re-runs of disturbed invocations.
    Reruns,
    /// Saving the result file.
    Saving,
}

/// The wall-time account of a running sweep.
#[derive(Debug)]
pub struct WallClock {
    started: Instant,
    wall: Wall,
    /// Re-runs' wall time, every phase (against `rerun_budget_s`).
    pub rerun_s: f64,
}

impl WallClock {
    /// Starts the clock.
    pub fn start() -> WallClock {
        WallClock {
            started: Instant::now(),
            wall: Wall::default(),
            rerun_s: 0.0,
        }
    }

    /// Charges the time since `since` to `part`.
    pub fn charge(&mut self, part: Part, since: Instant) {
        let s = since.elapsed().as_secs_f64();
        let w = &mut self.wall;
        *match part {
            Part::Setup => &mut w.setup_s,
            Part::Probe => &mut w.probe_s,
            Part::BatchAlone => &mut w.batch_alone_s,
            Part::PreSweep => &mut w.presweep_s,
            Part::Points => &mut w.points_s,
            Part::Reruns => &mut w.reruns_s,
            Part::Saving => &mut w.saving_s,
        } += s;
    }

    /// Of the points' time, `s` seconds went to starting and stopping batch
    /// processes.
    pub fn batch_start_stop(&mut self, s: f64) {
        self.wall.points_batch_start_stop_s += s;
    }

    /// The account so far, with the rest as `other_s`.
    pub fn now(&self) -> Wall {
        let mut w = self.wall;
        w.total_s = self.started.elapsed().as_secs_f64();
        let known = w.setup_s
            + w.probe_s
            + w.batch_alone_s
            + w.presweep_s
            + w.points_s
            + w.reruns_s
            + w.saving_s;
        w.other_s = (w.total_s - known).max(0.0);
        w
    }
}
