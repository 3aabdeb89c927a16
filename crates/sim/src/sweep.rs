//! Running an [`Experiment`]: every configuration × load × repetition, in
//! parallel over `std` threads (one run per task, no shared state but the
//! task counter), into a [`ResultFile`] with one [`Point`] per configuration
//! × load and one [`Rep`] per repetition.

use crate::arrivals::{Arrivals, Trace};
use crate::batch::Interference;
use crate::config::{Budget, Config, ConfigKind, Experiment};
use crate::demand::Demand;
use crate::engine::{Mode, RunSpec, ServerModel, Timing};
use crate::error::SimError;
use crate::fanout::{merge_counts, run_fanout, stream_seed};
use crate::stats::rep_of;
use elfen_results::{Distribution, FanoutRep, Point, Rep, ResultFile, Source, Summary};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// No interference (used where no batch runs).
pub const NO_INTERFERENCE: Interference = Interference {
    lc_slowdown: 1.0,
    corun_rate: 1.0,
};

/// How to run a sweep.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Worker threads (>= 1).
    pub threads: usize,
    /// Print a progress line to stderr about once a second.
    pub progress: bool,
    /// Save the result file here after points finish (atomically, at most
    /// every 2 s, and at the end).
    pub save: Option<PathBuf>,
    /// The command line, stored in the result file.
    pub command: String,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            threads: default_threads(),
            progress: false,
            save: None,
            command: String::new(),
        }
    }
}

/// The machine's parallelism (1 if unknown).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Calls `f(i, &items[i])` for every item on `threads` scoped threads and
/// hands each result to `done` on the calling thread as it arrives.
pub fn par_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(usize, &T) -> R + Sync,
    mut done: impl FnMut(usize, R),
) {
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            let tx = tx.clone();
            let (next, f) = (&next, &f);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= items.len() {
                        break;
                    }
                    if tx.send((i, f(i, &items[i]))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            done(i, r);
        }
    });
}

/// One simulated repetition of a point: its rep and idle-period histogram.
#[derive(Debug, Clone)]
pub struct RepRun {
    /// The rep.
    pub rep: Rep,
    /// Idle periods (when recorded).
    pub idle: Option<Distribution>,
}

/// The knobs of one point (everything but the repetition).
#[derive(Debug, Clone)]
pub struct PointSpec<'a> {
    /// Hardware of one server.
    pub server: ServerModel,
    /// Fan-out width (1 = one server).
    pub leaves: u32,
    /// Sharing mode with its policy.
    pub mode: Mode,
    /// Batch interference.
    pub interference: Interference,
    /// Latencies.
    pub timing: Timing,
    /// Offered load.
    pub rps: f64,
    /// Trace, if arrivals come from one.
    pub trace: Option<&'a Trace>,
    /// Demand.
    pub demand: &'a Demand,
    /// Measured requests.
    pub requests: u64,
    /// Warm-up requests.
    pub warmup_requests: u64,
    /// Base seed.
    pub seed: u64,
    /// Record idle periods.
    pub record_idle: bool,
}

impl PointSpec<'_> {
    /// Simulates repetition `rep` (seeds depend on `(seed, rep)` only, so
    /// every configuration and load sees the same random streams).
    pub fn run_rep(&self, rep: u32) -> RepRun {
        let arrivals = Arrivals::at_rps(self.trace, self.rps);
        let r = u64::from(rep);
        let spec = RunSpec {
            server: self.server,
            mode: self.mode,
            interference: self.interference,
            timing: self.timing,
            arrivals: &arrivals,
            demand: self.demand,
            requests: self.requests,
            warmup_requests: self.warmup_requests,
            arrival_seed: stream_seed(self.seed, 2 * r),
            demand_seed: stream_seed(self.seed, 2 * r + 1),
            record_idle: self.record_idle,
        };
        let f = run_fanout(&spec, self.leaves);
        let round = rep + 1;
        let mut rep = rep_of(&f.merged, f.end_to_end, self.interference.corun_rate);
        // Repetition i of every configuration draws the same streams: a
        // round, as in the harness.
        rep.round = Some(round);
        let sim = rep.simulated.as_mut().expect("simulated reps");
        if self.leaves > 1 {
            let n = f.leaf.len() as f64;
            let p99s: Vec<f64> = f.leaf.iter().map(|p| p.p99).collect();
            sim.fanout = Some(FanoutRep {
                leaves: self.leaves,
                leaf_p50_us_mean: f.leaf.iter().map(|p| p.p50).sum::<f64>() / n,
                leaf_p99_us_mean: p99s.iter().sum::<f64>() / n,
                leaf_p99_us_max: p99s.iter().copied().fold(f64::MIN, f64::max),
            });
        }
        if self.mode != Mode::Alone {
            sim.batch_lc_slowdown = Some(self.interference.lc_slowdown);
            sim.batch_corun_rate = Some(self.interference.corun_rate);
        }
        if let Mode::Elfen(p) = self.mode {
            if p.kind.uses_budget() {
                rep.budget_us = Some(p.budget_ns as f64 / 1e3);
            }
        }
        RepRun {
            rep,
            idle: f.merged.idle_us,
        }
    }
}

/// A point to run: which configuration (or a hidden LC-alone reference) at which load.
#[derive(Debug, Clone)]
struct Job {
    /// Index into `Experiment::configs`; `None` = hidden LC alone for budgets.
    config: Option<usize>,
    load: usize,
    mode: Mode,
}

impl Experiment {
    fn point_spec(&self, mode: Mode, cfg: Option<&Config>, load: usize) -> PointSpec<'_> {
        PointSpec {
            server: self.topology.server,
            leaves: self.topology.leaves,
            mode,
            interference: cfg
                .and_then(|c| c.batch.as_ref())
                .map_or(NO_INTERFERENCE, |b| b.1),
            timing: self.timing,
            rps: self.loads[load],
            trace: self.trace.as_ref(),
            demand: &self.demand,
            requests: self.requests,
            warmup_requests: self.warmup_requests,
            seed: self.seed,
            record_idle: self.record_idle,
        }
    }

    /// The mode of configuration `c`, with `budget_ns` for `FromSlo` budgets.
    pub fn mode_of(c: &Config, budget_ns: Option<u64>) -> Mode {
        match c.kind {
            ConfigKind::LcAlone => Mode::Alone,
            ConfigKind::StaticPartition => Mode::StaticPartition {
                batch_cores: c.batch_cores,
            },
            ConfigKind::SchedIdle => Mode::SchedIdle,
            ConfigKind::BlindIsolation => Mode::Blind(c.blind.expect("checked")),
            _ => {
                let mut p = c.policy.expect("policy kinds carry a policy");
                if let Some(b) = budget_ns {
                    p.budget_ns = b;
                }
                Mode::Elfen(p)
            }
        }
    }

    /// Runs the whole experiment.
    pub fn run(&self, opts: &RunOptions) -> Result<ResultFile, SimError> {
        let mut file = ResultFile::new(
            Source::Simulated,
            opts.command.clone(),
            serde_json::to_value(&self.spec).unwrap_or_default(),
            self.system_json(),
        );
        let total_runs = self.configs.len() * self.loads.len() * self.reps as usize;
        let mut progress = Progress::new(opts.progress, total_runs);
        let needs_ref = self.configs.iter().any(|c| c.budget == Budget::FromSlo);
        let alone_cfg = self
            .configs
            .iter()
            .position(|c| c.kind == ConfigKind::LcAlone);
        // Phase 1: everything whose budget does not depend on LC alone's p99
        // (plus hidden LC-alone points when needed and not asked for).
        let mut jobs1 = Vec::new();
        for (ci, c) in self.configs.iter().enumerate() {
            if c.budget != Budget::FromSlo {
                for li in 0..self.loads.len() {
                    jobs1.push(Job {
                        config: Some(ci),
                        load: li,
                        mode: Self::mode_of(c, None),
                    });
                }
            }
        }
        if needs_ref && alone_cfg.is_none() {
            for li in 0..self.loads.len() {
                jobs1.push(Job {
                    config: None,
                    load: li,
                    mode: Mode::Alone,
                });
            }
        }
        let mut alone_p99 = vec![f64::NAN; self.loads.len()];
        let done1 = self.run_jobs(&jobs1, opts, &mut file, &mut progress)?;
        for (job, point) in jobs1.iter().zip(&done1) {
            if job.config.is_none() || job.config == alone_cfg {
                alone_p99[job.load] = point.summary.latency_us.p99.median;
            }
        }
        // Phase 2: budgets from the SLO headroom at each load.
        let slo_ns = self.slo_p99_us.unwrap_or(0.0) * 1e3;
        let mut jobs2 = Vec::new();
        for (ci, c) in self.configs.iter().enumerate() {
            if c.budget == Budget::FromSlo {
                for (li, p99) in alone_p99.iter().enumerate() {
                    let budget = (slo_ns - p99 * 1e3).max(0.0).round() as u64;
                    jobs2.push(Job {
                        config: Some(ci),
                        load: li,
                        mode: Self::mode_of(c, Some(budget)),
                    });
                }
            }
        }
        self.run_jobs(&jobs2, opts, &mut file, &mut progress)?;
        let order = |p: &Point| {
            let ci = self
                .configs
                .iter()
                .position(|c| c.name == p.series_name())
                .unwrap_or(usize::MAX);
            (ci, p.rps_target)
        };
        file.points.sort_by(|a, b| {
            order(a)
                .0
                .cmp(&order(b).0)
                .then(a.rps_target.total_cmp(&b.rps_target))
        });
        if let Some(path) = &opts.save {
            file.save(path)?;
        }
        progress.finish();
        Ok(file)
    }

    /// Runs `jobs` (all repetitions in parallel), adds the visible points to
    /// `file` and returns every job's point in job order.
    fn run_jobs(
        &self,
        jobs: &[Job],
        opts: &RunOptions,
        file: &mut ResultFile,
        progress: &mut Progress,
    ) -> Result<Vec<Point>, SimError> {
        let reps = self.reps as usize;
        let tasks: Vec<(usize, u32)> = (0..jobs.len())
            .flat_map(|j| (0..self.reps).map(move |r| (j, r)))
            .collect();
        let mut got: Vec<Vec<Option<RepRun>>> = vec![vec![None; reps]; jobs.len()];
        let mut left = vec![reps; jobs.len()];
        let mut points: Vec<Option<Point>> = vec![None; jobs.len()];
        let mut last_save = Instant::now();
        let mut save_err = None;
        par_map(
            &tasks,
            opts.threads,
            |_, &(j, r)| {
                let job = &jobs[j];
                let cfg = job.config.map(|c| &self.configs[c]);
                self.point_spec(job.mode, cfg, job.load).run_rep(r)
            },
            |i, run| {
                let (j, r) = tasks[i];
                got[j][r as usize] = Some(run);
                left[j] -= 1;
                if !job_is_hidden(&jobs[j]) {
                    progress.tick();
                }
                if left[j] == 0 {
                    let p = self.point_of(
                        &jobs[j],
                        got[j].iter_mut().map(|x| x.take().expect("all reps in")),
                    );
                    if !job_is_hidden(&jobs[j]) {
                        file.points.push(p.clone());
                        if let Some(path) = &opts.save {
                            if last_save.elapsed() > Duration::from_secs(2) {
                                if let Err(e) = file.save(path) {
                                    save_err.get_or_insert(e);
                                }
                                last_save = Instant::now();
                            }
                        }
                    }
                    points[j] = Some(p);
                }
            },
        );
        if let Some(e) = save_err {
            return Err(e.into());
        }
        Ok(points
            .into_iter()
            .map(|p| p.expect("every job finished"))
            .collect())
    }

    fn point_of(&self, job: &Job, runs: impl Iterator<Item = RepRun>) -> Point {
        let cfg = job.config.map(|c| &self.configs[c]);
        let mut reps = Vec::new();
        let mut idle: Option<Distribution> = None;
        for r in runs {
            reps.push(r.rep);
            match (&mut idle, r.idle) {
                (None, Some(d)) => idle = Some(d),
                (Some(a), Some(b)) => merge_counts(a, &b),
                _ => {}
            }
        }
        let config = cfg.map_or(ConfigKind::LcAlone, |c| c.kind);
        Point {
            config,
            label: cfg.map(|c| c.name.clone()).filter(|n| n != config.name()),
            batch: cfg.and_then(|c| c.batch.as_ref().map(|b| b.0.clone())),
            rps_target: self.loads[job.load],
            summary: Summary::of(&reps, self.slo_p99_us),
            reps,
            idle_periods: idle,
            service: None,
        }
    }

    /// The model parameters, stored as the result file's `system`.
    pub fn system_json(&self) -> serde_json::Value {
        let t = &self.topology;
        let kinds: BTreeMap<&str, serde_json::Value> = self
            .configs
            .iter()
            .filter_map(|c| c.batch.as_ref())
            .map(|(n, i)| {
                (
                    n.as_str(),
                    serde_json::json!({"lc_slowdown": i.lc_slowdown, "corun_rate": i.corun_rate}),
                )
            })
            .collect();
        serde_json::json!({
            "simulator": format!("elfen-sim {}", env!("CARGO_PKG_VERSION")),
            "topology": format!("{:?}", t.kind).to_lowercase(),
            "cores_per_server": t.cores,
            "dispatcher_cores": t.dispatcher_cores,
            "worker_cores": t.server.worker_cores,
            "smt_ways": t.server.smt_ways,
            "leaves": t.leaves,
            "utilization_divisor_cores": t.server.worker_cores * t.leaves,
            "utilization_note": "sum over lanes of busy fraction divided by the worker cores (one fully busy lane = 1.0; dispatcher cores not counted)",
            "demand_mean_us": self.demand.mean_ns() / 1e3,
            "timing_ns": {
                "nap": self.timing.nap_ns,
                "wake": self.timing.wake_ns,
                "os_preempt": self.timing.os_preempt_ns,
                "blind_react": self.timing.blind_react_ns,
            },
            "batch_kinds": kinds,
        })
    }
}

fn job_is_hidden(j: &Job) -> bool {
    j.config.is_none()
}

/// A throttled progress line on stderr.
struct Progress {
    on: bool,
    total: usize,
    done: usize,
    start: Instant,
    last: Instant,
}

impl Progress {
    fn new(on: bool, total: usize) -> Progress {
        let now = Instant::now();
        Progress {
            on,
            total,
            done: 0,
            start: now,
            last: now,
        }
    }

    fn tick(&mut self) {
        self.done += 1;
        if self.on && self.last.elapsed() >= Duration::from_secs(1) {
            self.last = Instant::now();
            eprintln!(
                "elfen sim: {}/{} runs done, {:.1} s",
                self.done,
                self.total,
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    fn finish(&self) {
        if self.on {
            eprintln!(
                "elfen sim: {}/{} runs done in {:.1} s",
                self.done,
                self.total,
                self.start.elapsed().as_secs_f64()
            );
        }
    }
}
