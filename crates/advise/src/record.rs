//! The **record** of one `elfen advise` run: what was asked ([`Params`]),
//! the machine and what it offers ([`Offered`]), the LC as found
//! ([`LcInfo`]), every measured window ([`Window`]: raw counters, nothing
//! derived), one row per probe and per knob, and what the study made of
//! them. `--json PATH` writes it whole ([`AdviseResult`], schema
//! [`SCHEMA`]); `study` derives, `format` prints — neither measures.

use serde::{Deserialize, Serialize};

/// Schema tag of [`AdviseResult`]; bump on an incompatible change.
pub const SCHEMA: &str = "elfen-advise/1";

/// What the run was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// The LC service, as given (`pid 4242`, `command "redis-server"`,
    /// `cgroup /sys/fs/cgroup/...`).
    pub target: String,
    /// Measured window of the solo runs, each probe and each knob, s.
    pub window_s: f64,
    /// Settling time before each window (after a probe or a daemon
    /// starts), s.
    pub warmup_s: f64,
    /// How often a running probe or knob is checked against
    /// `max_slowdown`, ms.
    pub watch_ms: u64,
    /// A probe or knob that pushes the LC's service time or latency past
    /// this many times its solo value is stopped at once.
    pub max_slowdown: f64,
    /// A knob is within when its contention (and p99 ratio − 1, where the
    /// latency is known) is at most this.
    pub threshold: f64,
    /// Below this busy share of a lane the LC is taken as not under load.
    pub min_busy_pct: f64,
    /// The batch kernel the knobs run (`stream`, `matrix`, …).
    pub batch_kernel: String,
    /// The latency probe (`redis@127.0.0.1:6379`), if any.
    pub latency_probe: Option<String>,
    /// Probe requests per second.
    pub probe_rps: f64,
    /// The budget of the budget policies, µs.
    pub budget_us: u64,
    /// Where the budget came from.
    pub budget_source: String,
    /// The lane pairing asked for (`None`: elfen-topo's plan).
    pub pairs: Option<String>,
    /// The probes asked for.
    pub probes: Vec<Probe>,
    /// The knobs asked for.
    pub knobs: Vec<Knob>,
}

/// Whether the machine offers something, and why (not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Availability {
    /// Offered here.
    pub offered: bool,
    /// What was found (the reason when not offered).
    pub detail: String,
}

/// What this machine offers the profiler and the knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offered {
    /// Root (the daemon's knobs, real-time probe clients, BPF).
    pub root: bool,
    /// SMT: batch lanes are siblings of their request lane.
    pub smt: Availability,
    /// Hardware performance counters (LLC misses, IPC).
    pub counters: Availability,
    /// resctrl cache allocation (CAT).
    pub cat: Availability,
    /// resctrl memory bandwidth allocation (MBA).
    pub mba: Availability,
    /// resctrl memory bandwidth monitoring (MBM).
    pub mbm: Availability,
}

/// The LC service as found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LcInfo {
    /// Its processes at the start.
    pub pids: Vec<u32>,
    /// The command name of the first.
    pub comm: Option<String>,
    /// The CPU it ran on most while alone: its request lane.
    pub request_cpu: u32,
    /// That lane's batch lanes (the partner lanes).
    pub batch_cpus: Vec<u32>,
    /// The lane pairing (`0:1`) and where it came from.
    pub pairs: String,
    /// The kernel signal's source (BPF, or the poll fallback and why).
    pub signal: String,
}

/// A probe of one resource: a co-runner the LC's service time is
/// measured against (HIS's profiling run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    /// A compute hog (Matrix) at the LC's priority on the partner lane.
    HogPartner,
    /// The same at SCHED_IDLE.
    HogIdlePartner,
    /// A compute hog at the LC's priority on the LC's own lane.
    HogOwn,
    /// The same at SCHED_IDLE.
    HogIdleOwn,
    /// A memory streamer (Stream) at SCHED_IDLE on the partner lane: cache
    /// and memory bandwidth, not CPU time.
    StreamPartner,
}

impl Probe {
    /// Every probe, in the order they run (least harmful first).
    pub const ALL: [Probe; 5] = [
        Probe::HogIdlePartner,
        Probe::HogPartner,
        Probe::StreamPartner,
        Probe::HogIdleOwn,
        Probe::HogOwn,
    ];

    /// The name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Probe::HogPartner => "hog_partner",
            Probe::HogIdlePartner => "hog_idle_partner",
            Probe::HogOwn => "hog_own",
            Probe::HogIdleOwn => "hog_idle_own",
            Probe::StreamPartner => "stream_partner",
        }
    }

    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Probe::HogPartner => "compute hog (Matrix) at the LC's priority on the partner lane",
            Probe::HogIdlePartner => "compute hog (Matrix) at SCHED_IDLE on the partner lane",
            Probe::HogOwn => "compute hog (Matrix) at the LC's priority on the LC's lane",
            Probe::HogIdleOwn => "compute hog (Matrix) at SCHED_IDLE on the LC's lane",
            Probe::StreamPartner => "memory streamer (Stream) at SCHED_IDLE on the partner lane",
        }
    }

    /// The resource it loads.
    pub fn resource(self) -> Resource {
        match self {
            Probe::HogOwn | Probe::HogIdleOwn => Resource::CpuOwnLane,
            Probe::HogPartner | Probe::HogIdlePartner => Resource::CpuPartnerLane,
            Probe::StreamPartner => Resource::CacheMemory,
        }
    }
}

impl std::str::FromStr for Probe {
    type Err = String;
    fn from_str(s: &str) -> Result<Probe, String> {
        Probe::ALL
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown probe {s:?}: expected one of {}",
                    Probe::ALL.map(Probe::name).join(", ")
                )
            })
    }
}

/// A resource the LC may be sensitive to (HIS's contention types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// CPU time on the LC's own lane.
    CpuOwnLane,
    /// CPU time on the partner lane (an SMT core's pipeline on SMT
    /// machines; without SMT, whatever the LC runs there).
    CpuPartnerLane,
    /// The shared cache and memory bandwidth.
    CacheMemory,
}

impl Resource {
    /// In words.
    pub fn describe(self) -> &'static str {
        match self {
            Resource::CpuOwnLane => "CPU on its own lane",
            Resource::CpuPartnerLane => "CPU on the partner lane",
            Resource::CacheMemory => "cache and memory bandwidth",
        }
    }
}

/// An isolation knob: one way `elfen daemon` makes batch work give the
/// lanes back (a `[[batch]] mode`, with the policy for cooperative batch),
/// or the hardware's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// Mode `idle`, confined to the batch lanes: SCHED_IDLE / cpu.idle only.
    Idle,
    /// Mode `guard`: a SCHED_FIFO guard occupies the batch lane while the
    /// LC runs.
    Guard,
    /// Mode `blind`: PerfIso's blind isolation (B = 0).
    Blind,
    /// Mode `freeze`: the group's freezer while the LC runs.
    Freeze,
    /// Mode `auto`: the daemon starts at idle and escalates to guard when
    /// its own A/B (batch running vs stepped aside) measures contention.
    Auto,
    /// Mode `cooperative`, policy borrow idle: an instrumented kernel naps
    /// itself while the LC runs.
    BorrowIdle,
    /// Cooperative, fixed budget.
    FixedBudget,
    /// Cooperative, refresh budget.
    RefreshBudget,
}

impl Knob {
    /// Every knob, in the order they run.
    pub const ALL: [Knob; 8] = [
        Knob::Idle,
        Knob::Guard,
        Knob::Blind,
        Knob::Freeze,
        Knob::Auto,
        Knob::BorrowIdle,
        Knob::FixedBudget,
        Knob::RefreshBudget,
    ];

    /// The name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Knob::Idle => "idle",
            Knob::Guard => "guard",
            Knob::Blind => "blind",
            Knob::Freeze => "freeze",
            Knob::Auto => "auto",
            Knob::BorrowIdle => "borrow_idle",
            Knob::FixedBudget => "fixed_budget",
            Knob::RefreshBudget => "refresh_budget",
        }
    }

    /// What it is, in the terms of the daemon's configuration.
    pub fn describe(self) -> &'static str {
        match self {
            Knob::Idle => "mode idle, confined to the batch lanes",
            Knob::Guard => "mode guard (borrow idle)",
            Knob::Blind => "mode blind, buffer_cores = 0",
            Knob::Freeze => "mode freeze (borrow idle; kept where judged unfit)",
            Knob::Auto => "mode auto: idle, guard when contention passes 10 %",
            Knob::BorrowIdle => "mode cooperative, policy borrow_idle (instrumented kernel)",
            Knob::FixedBudget => "mode cooperative, policy fixed_budget (instrumented kernel)",
            Knob::RefreshBudget => "mode cooperative, policy refresh_budget (instrumented kernel)",
        }
    }

    /// Whether the batch runs instrumented (checks on the signal page).
    pub fn cooperative(self) -> bool {
        matches!(
            self,
            Knob::BorrowIdle | Knob::FixedBudget | Knob::RefreshBudget
        )
    }
}

impl std::str::FromStr for Knob {
    type Err = String;
    fn from_str(s: &str) -> Result<Knob, String> {
        Knob::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown knob {s:?}: expected one of {}",
                    Knob::ALL.map(Knob::name).join(", ")
                )
            })
    }
}

/// One measured window: raw counters over its wall time, nothing derived.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Window {
    /// Its length, ns.
    pub wall_ns: u64,
    /// On-CPU time of the LC's threads (`schedstat`), ns.
    pub lc_cpu_ns: u64,
    /// Time the LC's threads were runnable but waited for a CPU, ns.
    pub lc_wait_ns: u64,
    /// Times the LC's threads were switched in.
    pub lc_runs: u64,
    /// The kernel signal: LC busy time per CPU (index = CPU), ns.
    pub signal_busy_ns: Vec<u64>,
    /// The kernel signal: LC busy periods begun per CPU.
    pub signal_periods: Vec<u64>,
    /// The latency probe's requests in the window.
    pub latency: Option<LatencyWindow>,
    /// The batch work running in the window.
    pub batch: Option<BatchWindow>,
    /// The daemon running in the window.
    pub daemon: Option<DaemonWindow>,
    /// CPU time charged to every process of the machine (`/proc/stat`:
    /// user + nice + system, clock-tick resolution), ns.
    #[serde(default)]
    pub machine_busy_ns: u64,
    /// Time the host took from this machine's CPUs (steal), ns.
    #[serde(default)]
    pub steal_ns: u64,
    /// advise's own CPU time (its probe client, its readings), ns.
    #[serde(default)]
    pub advise_cpu_ns: u64,
}

/// The latency probe over a window (latency from each request's intended
/// send time; requests still unanswered at the window's end count with
/// the age they reached).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencyWindow {
    /// Latencies recorded.
    pub samples: u64,
    /// Requests answered with an error, or lost.
    pub errors: u64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Largest, µs.
    pub max_us: f64,
}

/// Batch work over a window.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BatchWindow {
    /// Work units of the batch kernel done.
    pub units: u64,
    /// On-CPU time of the batch process tree, ns.
    pub cpu_ns: u64,
}

/// The daemon over a window.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DaemonWindow {
    /// On-CPU time of all its threads (`schedstat`), ns.
    pub cpu_ns: u64,
    /// Of which its guards occupied their lanes (the protection itself),
    /// ns, from its metrics endpoint; `None` where not read.
    pub occupied_ns: Option<u64>,
    /// Per thread name, on-CPU ns.
    pub threads: Vec<(String, u64)>,
}

/// How a probe or knob ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Outcome {
    /// It ran its whole window.
    Measured,
    /// It pushed the LC past `max_slowdown` and was stopped.
    Stopped {
        /// After this long in its window, ms.
        after_ms: u64,
        /// What went past the limit.
        reason: String,
    },
    /// It did not run, and why (not offered here, or it failed).
    NotRun {
        /// The reason.
        reason: String,
    },
}

/// HIS's `res_cont = co-run / solo − 1`, per measure, against the solo
/// reference.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Contention {
    /// On-CPU time per unit of load (the LC's work per request at its
    /// steady offered load: how much slower it computes).
    pub service: f64,
    /// On-CPU plus run-queue wait per run (per busy period as the kernel
    /// switches it in: what a request waits and runs).
    pub response: f64,
    /// The probe's p99 latency, where known.
    pub p99: Option<f64>,
    /// The probe's median latency, where known.
    pub p50: Option<f64>,
}

/// One probe's row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRow {
    /// The probe.
    pub probe: Probe,
    /// How it ended.
    pub outcome: Outcome,
    /// What was measured (up to the stop, for a stopped probe).
    pub window: Option<Window>,
    /// Against the solo reference.
    pub contention: Option<Contention>,
    /// Readings of counters or monitors, where offered.
    pub readings: Vec<String>,
}

/// Whether a knob kept the LC within the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Contention (and p99 ratio − 1) at most the threshold.
    Within,
    /// Above it.
    Over,
    /// Stopped at the max slowdown.
    Stopped,
    /// Not run.
    NotRun,
}

impl Verdict {
    /// In the table.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Within => "within",
            Verdict::Over => "over",
            Verdict::Stopped => "STOPPED",
            Verdict::NotRun => "not run",
        }
    }
}

/// One knob's row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobRow {
    /// The knob.
    pub knob: Knob,
    /// How it ended.
    pub outcome: Outcome,
    /// What was measured.
    pub window: Option<Window>,
    /// Against the solo reference.
    pub contention: Option<Contention>,
    /// Batch work units per second relative to the reference (the same
    /// kernel at SCHED_IDLE on the partner lane, no daemon).
    pub progress: Option<f64>,
    /// The daemon's CPU, lanes' worth (all its threads).
    pub daemon_cpu_lanes: Option<f64>,
    /// Of it, besides its guards' occupation of the lanes (its own work).
    pub daemon_own_lanes: Option<f64>,
    /// Within the threshold?
    pub verdict: Verdict,
    /// The configuration the daemon ran (TOML).
    pub config: Option<String>,
    /// The daemon's pid (its groups are `elfen-daemon-<pid>`).
    pub daemon_pid: Option<u32>,
    /// The daemon's exit and the last lines it wrote.
    pub daemon_log: Vec<String>,
}

/// How sensitive the LC is to one resource: the worst of its probes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sensitivity {
    /// The resource.
    pub resource: Resource,
    /// The largest contention its probes measured (a stopped probe counts
    /// as at least `max_slowdown − 1`).
    pub contention: f64,
    /// The probe that measured it.
    pub probe: Probe,
    /// Whether that probe was stopped.
    pub stopped: bool,
}

/// The knob to use, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// The knob (`None`: none kept the LC within the threshold).
    pub knob: Option<Knob>,
    /// The reason, in words.
    pub reason: String,
    /// The resource the LC is most sensitive to.
    pub most_contentious: Option<Resource>,
    /// What the probes alone predicted (before the knobs ran).
    pub predicted: String,
}

/// The solo reference the contention is measured against: the mean of
/// the solo windows.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Reference {
    /// On-CPU time per second of wall time (its busy share of a lane).
    pub cpu_per_s: f64,
    /// On-CPU plus run-queue wait per run, µs.
    pub response_us: f64,
    /// The kernel signal's busy share, all CPUs.
    pub busy_share: f64,
    /// Busy time per busy period (the kernel signal), µs.
    pub busy_per_period_us: f64,
    /// Busy periods per second.
    pub periods_per_s: f64,
    /// Probe latency, median and p99, µs.
    pub p50_us: Option<f64>,
    /// The p99, µs.
    pub p99_us: Option<f64>,
    /// How much the solo windows differ in `cpu_per_s` (max / min − 1):
    /// a change of the load, or noise.
    pub drift: f64,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdviseResult {
    /// [`SCHEMA`].
    pub schema: String,
    /// When it started, Unix seconds.
    pub created_unix_s: u64,
    /// The command line.
    pub command: String,
    /// The machine.
    pub system: elfen_topo::SystemInfo,
    /// What was asked.
    pub params: Params,
    /// What the machine offers.
    pub offered: Offered,
    /// The LC as found.
    pub lc: Option<LcInfo>,
    /// The solo windows (before the probes, after them).
    pub solo: Vec<Window>,
    /// Their mean.
    pub reference: Option<Reference>,
    /// One row per probe.
    pub probes: Vec<ProbeRow>,
    /// One row per knob.
    pub knobs: Vec<KnobRow>,
    /// The reference run of the batch kernel (SCHED_IDLE on the partner
    /// lane, no daemon): work units per second.
    pub batch_reference_units_per_s: Option<f64>,
    /// Per resource, the worst probe.
    pub sensitivity: Vec<Sensitivity>,
    /// The knob to use.
    pub recommendation: Option<Recommendation>,
    /// What the run noticed.
    pub notes: Vec<String>,
    /// The whole run's wall time, s.
    pub wall_s: f64,
    /// Ended by Ctrl-C before its end.
    pub interrupted: bool,
}
