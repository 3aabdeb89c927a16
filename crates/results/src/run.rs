//! What the harness resolved while it ran ([`Run`]): the values a user did
//! not give (capacity, loads, SLO, budgets), where things ran, what was
//! skipped and why, and where the wall time went. Typed, so reports and
//! the simulator's validation read fields, not JSON pointers.

use serde::{Deserialize, Serialize};

use crate::Config;

/// Everything a measured sweep resolved.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    /// The LC service and its demand.
    pub lc: LcInfo,
    /// Where the LC worker, the batch and the load generator ran.
    pub lanes: LanesInfo,
    /// The batch side.
    pub batch: BatchInfo,
    /// The offered loads of the main sweep, rps, ascending.
    pub rps: Vec<f64>,
    /// The SLO and where it came from.
    pub slo: SloInfo,
    /// The budget policies' budgets.
    pub budget: BudgetInfo,
    /// Invocations per point planned: every point runs this many rounds.
    pub reps_planned: u32,
    /// Rounds added where a verdict was still open after `reps_planned`
    /// ([`Rounds`]); `None` in files written before rounds were added.
    #[serde(default)]
    pub rounds: Option<Rounds>,
    /// Every configuration's invocation of a round sends the same arrivals
    /// and requests (common random numbers), so same-round ratios pair up.
    pub common_random_numbers: bool,
    /// How invocations were ordered and seeded, in words.
    pub order: String,
    /// The scheduling class of the load generator and the LC service's
    /// dispatcher threads, and why.
    pub generator_sched: String,
    /// Configurations asked for but not run, and why (e.g. cgroups need
    /// root).
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// Things the user should know (fallbacks taken, features missing).
    #[serde(default)]
    pub notes: Vec<String>,
    /// `/proc/loadavg` before the sweep.
    pub load_before: [f64; 3],
    /// `/proc/loadavg` after the sweep.
    pub load_after: Option<[f64; 3]>,
    /// Where the wall time went (once the sweep ends).
    pub wall: Option<Wall>,
    /// Stopped by Ctrl-C: the points hold the invocations finished before.
    pub interrupted: bool,
}

/// The LC service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LcInfo {
    /// Which service, in words (built-in chase, an external command, …).
    pub service: String,
    /// Who publishes the request lane's busy state on the signal page:
    /// `api` (the service, through the LC API) or `none`.
    pub signal: String,
    /// Where the requests come from, in words.
    pub requests: String,
    /// Requests in the request set.
    pub request_set_size: usize,
    /// Mean service time of the set run alone, back to back, µs.
    pub demand_alone_mean_us: f64,
    /// p99 of the same, µs.
    pub demand_alone_p99_us: f64,
    /// `1e6 / demand_alone_mean_us`.
    pub closed_loop_capacity_rps: f64,
    /// The load of the open-loop capacity probe, if one ran.
    pub open_loop_probe_rps: Option<f64>,
    /// Mean service time under that probe, µs.
    pub open_loop_service_mean_us: Option<f64>,
    /// The capacity the automatic loads are fractions of, rps.
    pub capacity_rps: f64,
    /// The built-in chase's calibration, when that service ran.
    pub chase: Option<ChaseInfo>,
}

/// The built-in pointer-chase service's calibration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChaseInfo {
    /// Working set, KiB.
    pub working_set_kib: u64,
    /// Steps per µs of a continuous, cache-hot chase (start-up calibration).
    pub steps_per_us_hot: f64,
    /// The correction applied so the set's mean service time alone is the
    /// nominal mean (requests after idle time run colder than the
    /// calibration).
    pub correction: f64,
}

/// Lanes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanesInfo {
    /// How lanes were paired, in words.
    pub pairing: String,
    /// The request lane's CPU.
    pub request_cpu: u32,
    /// Its batch lanes' CPUs.
    pub batch_cpus: Vec<u32>,
    /// The load generator's (and dispatcher's) CPUs.
    pub generator_cpus: Vec<u32>,
    /// Whether the batch lanes are SMT siblings of the request lane (one
    /// core): then a batch thread that steps aside frees the core's
    /// execution units; otherwise only the shared cache and memory
    /// bandwidth. `None` in files written before it was recorded.
    #[serde(default)]
    pub batch_shares_core: Option<bool>,
    /// The signal page.
    pub page: String,
}

/// The batch side.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchInfo {
    /// The nap backend of the Elfen configurations.
    pub nap: String,
    /// Work units per second of each batch program alone on one batch lane.
    pub alone_units_per_s: Vec<(String, f64)>,
    /// How batch utilization is counted, in words.
    pub utilization_method: String,
    /// Batch program details worth recording (e.g. the Stream store mode).
    #[serde(default)]
    pub details: Vec<String>,
}

/// The SLO.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloInfo {
    /// The p99 bound every point is judged against, µs.
    pub p99_us: Option<f64>,
    /// Where it came from, in words.
    pub source: String,
    /// The knee of LC alone's p99-vs-load curve in the main sweep, rps.
    pub knee_rps: Option<f64>,
    /// The LC-alone pre-sweep the budgets were derived from: per load,
    /// every invocation's p99, µs.
    #[serde(default)]
    pub presweep: Vec<PreSweepPoint>,
    /// The SLO the pre-sweep gave (the budgets' reference), µs.
    pub presweep_p99_us: Option<f64>,
}

/// One load of the LC-alone pre-sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreSweepPoint {
    /// Load, rps.
    pub rps: f64,
    /// Each invocation's p99, µs.
    pub p99_us: Vec<f64>,
}

/// The budget policies' budgets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetInfo {
    /// Where they came from, in words.
    pub source: String,
    /// Per load: (rps, budget µs).
    #[serde(default)]
    pub by_rps: Vec<(f64, f64)>,
}

/// Rounds added to the points whose verdict the first rounds left open:
/// the cap, and what was added at each load and why it stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rounds {
    /// Most rounds a point may run (the cap).
    pub max_reps: u32,
    /// Wall time the added rounds may take together, s (the other cap).
    pub budget_s: f64,
    /// Wall time they took, s.
    pub spent_s: f64,
    /// The knee (rps) that chose the loads judged when rounds were added:
    /// only loads up to it get more rounds.
    pub knee_rps: Option<f64>,
    /// Per load, ascending: the rounds added.
    #[serde(default)]
    pub by_rps: Vec<LoadRounds>,
    /// Why no more rounds were added.
    pub end: RoundsEnd,
}

/// The rounds added at one load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadRounds {
    /// Load, rps.
    pub rps: f64,
    /// Rounds run at this load in all (LC alone's count).
    pub rounds: u32,
    /// Every added round, in the order run: the series (`config · batch`)
    /// beside LC alone in it.
    #[serde(default)]
    pub added: Vec<AddedRound>,
}

/// One added round at a load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddedRound {
    /// The round's number (1-based).
    pub round: u32,
    /// The series run in it besides LC alone: those whose verdict was open.
    pub series: Vec<String>,
}

/// Why rounds stopped being added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundsEnd {
    /// Every judged verdict concluded (kept or HURT) — none was open.
    #[default]
    Concluded,
    /// The open verdicts reached `max_reps` rounds.
    RoundCap,
    /// The added rounds used their wall-time budget.
    TimeCap,
    /// Ctrl-C.
    Interrupted,
}

impl RoundsEnd {
    /// In words.
    pub fn words(self) -> &'static str {
        match self {
            RoundsEnd::Concluded => "every judged verdict concluded",
            RoundsEnd::RoundCap => "the open verdicts reached the round cap",
            RoundsEnd::TimeCap => "the added rounds' time budget was spent",
            RoundsEnd::Interrupted => "interrupted",
        }
    }
}

/// A configuration asked for but not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    /// Which.
    pub config: Config,
    /// Why, in words.
    pub reason: String,
}

/// Where a sweep's wall time went, s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wall {
    /// The whole sweep.
    pub total_s: f64,
    /// Pre-flight, service start-up and calibration, demand alone.
    pub setup_s: f64,
    /// The open-loop capacity probe.
    pub probe_s: f64,
    /// Batch programs alone.
    pub batch_alone_s: f64,
    /// The LC-alone pre-sweep.
    pub presweep_s: f64,
    /// The points (interleaved rounds).
    pub points_s: f64,
    /// Of `points_s`, starting, settling and stopping batch processes.
    pub points_batch_start_stop_s: f64,
    /// Re-runs of disturbed invocations.
    pub reruns_s: f64,
    /// Saving the result file.
    pub saving_s: f64,
    /// The rest.
    pub other_s: f64,
}
