//! `elfen trace`: record an LC service, study it, write the trace and the
//! report; `elfen trace report` studies a saved record again; `elfen trace
//! load` is an open-loop client that writes a spans file; `elfen trace
//! overhead` measures what tracing costs.

use crate::lcline::LcLineTap;
use crate::load::{LoadPlan, drive};
use crate::record::{Signal, TraceRecord};
use crate::recorder::{self, Options};
use crate::report::StudyParams;
use crate::spans::{self, ClientSpan};
use crate::target::{Target, TargetSpec};
use crate::{overhead, render, study};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use elfen_load::demand::{DemandSpec, RequestsKind};
use elfen_load::requests::{self, RequestSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The profiler's subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Request-level hazard profiler: what delayed an LC service's slow requests.
    #[command(long_about = TRACE_ABOUT, args_conflicts_with_subcommands = true)]
    Trace(TraceCommand),
}

const TRACE_ABOUT: &str = "\
Attaches to an LC service for a bounded time and records with BPF (tracepoints and software perf \
events, filtered in the kernel to the service's tasks and the lanes): context switches, wake-ups \
with their chains, page faults and their length, TCP data held back (Nagle) and the peer's delayed \
ACKs, JVM pauses and the JIT (from its threads' scheduling), and what else ran on the batch lanes. \
Request spans come from the signal page's LC line (--page) where the service publishes it, and/or \
from a client's spans file (--spans, e.g. written by `elfen trace load`). Writes the raw record \
and a Perfetto / Chrome trace (open it in ui.perfetto.dev) to --out, prints a report that \
attributes each request above --above-pct to its causes, and saves it typed with --json. Needs \
root (or CAP_BPF + CAP_PERFMON) and kernel BTF. Ctrl-C ends early and still writes.";

/// `elfen trace …`
#[derive(Debug, Args)]
pub struct TraceCommand {
    /// `report`, `load`, `overhead`; none: record.
    #[command(subcommand)]
    pub sub: Option<Sub>,
    /// Recording arguments.
    #[command(flatten)]
    pub record: RecordArgs,
}

/// `elfen trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Study a saved record again (other thresholds, a client's spans).
    Report(ReportArgs),
    /// An open-loop client over the LC wire protocol that writes a spans file.
    Load(LoadArgs),
    /// LC p50/p99 with vs without tracing, side by side, and the trace's volume.
    Overhead(OverheadArgs),
}

/// Which process to trace.
#[derive(Debug, Args, Clone, Default)]
pub struct TargetArgs {
    /// The service's process id.
    #[arg(long, value_name = "PID", group = "target")]
    pub pid: Option<u32>,
    /// The service's process name (exactly one process must have it).
    #[arg(long, value_name = "NAME", group = "target")]
    pub comm: Option<String>,
    /// Every process of this cgroup directory (v1 or v2), new ones included.
    #[arg(long, value_name = "DIR", group = "target")]
    pub cgroup: Option<PathBuf>,
    /// A systemd unit: the processes of its control group.
    #[arg(long, value_name = "UNIT", group = "target")]
    pub unit: Option<String>,
}

impl TargetArgs {
    fn spec(&self) -> anyhow::Result<TargetSpec> {
        Ok(match (&self.pid, &self.comm, &self.cgroup, &self.unit) {
            (Some(p), ..) => TargetSpec::Pid(*p),
            (_, Some(c), ..) => TargetSpec::Comm(c.clone()),
            (_, _, Some(d), _) => TargetSpec::Cgroup(d.clone()),
            (_, _, _, Some(u)) => TargetSpec::Unit(u.clone()),
            _ => bail!("name the service: --pid, --comm, --cgroup or --unit"),
        })
    }
}

/// How to study.
#[derive(Debug, Args, Clone)]
pub struct StudyArgs {
    /// Study the requests above this percentile of latency.
    #[arg(long, value_name = "PCT", default_value_t = 99.0)]
    pub above_pct: f64,
    /// Name a cause when it is at least this share of a request's latency…
    #[arg(long, value_name = "PCT", default_value_t = 10.0)]
    pub min_share_pct: f64,
    /// … and at least this long (µs).
    #[arg(long, value_name = "US", default_value_t = 50.0)]
    pub min_cause_us: f64,
    /// A client's spans file (JSON lines: id, intended_ns, sent_ns, received_ns).
    #[arg(long, value_name = "FILE")]
    pub spans: Option<PathBuf>,
    /// Slow requests listed in the text report.
    #[arg(long, value_name = "N", default_value_t = 15)]
    pub show: usize,
    /// Save the typed report (JSON) here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

impl StudyArgs {
    fn params(&self) -> anyhow::Result<StudyParams> {
        if !(self.above_pct > 0.0 && self.above_pct < 100.0) {
            bail!(
                "--above-pct must be between 0 and 100, not {}",
                self.above_pct
            );
        }
        if !(0.0..=100.0).contains(&self.min_share_pct) || self.min_cause_us < 0.0 {
            bail!("--min-share-pct must be 0..100 and --min-cause-us ≥ 0");
        }
        Ok(StudyParams {
            above_pct: self.above_pct,
            min_share_pct: self.min_share_pct,
            min_cause_ns: (self.min_cause_us * 1e3) as u64,
        })
    }
}

/// Arguments of `elfen trace` (recording).
#[derive(Debug, Args, Clone)]
pub struct RecordArgs {
    /// The service.
    #[command(flatten)]
    pub target: TargetArgs,
    /// The signal page whose LC line gives the request spans.
    #[arg(long, value_name = "PATH")]
    pub page: Option<PathBuf>,
    /// Its request lane (default: the one whose LC thread is the target's).
    #[arg(long, value_name = "N")]
    pub lane: Option<u32>,
    /// How long to record (Ctrl-C ends early).
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub duration_s: f64,
    /// Kernel signals (default all): sched, wakeups, faults, huge_faults, tcp_held, delayed_ack, exit.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub signals: Option<Vec<String>>,
    /// CPUs on which every context switch is recorded (default: all online).
    #[arg(long, value_name = "LIST")]
    pub lanes: Option<String>,
    /// The request lane's CPU, when no page says it.
    #[arg(long, value_name = "CPU")]
    pub request_cpu: Option<u32>,
    /// The batch lanes' CPUs, when no page says them.
    #[arg(long, value_name = "LIST")]
    pub batch_cpus: Option<String>,
    /// The LC thread, when no page names it.
    #[arg(long, value_name = "TID")]
    pub lc_tid: Option<u32>,
    /// Ring buffer, MiB (a power of two).
    #[arg(long, value_name = "MIB", default_value_t = 16)]
    pub ring_mib: u32,
    /// Record page faults at least this long (shorter ones are counted), µs.
    #[arg(long, value_name = "US", default_value_t = 0.0)]
    pub min_fault_us: f64,
    /// The LC line poller: 0 spins (SCHED_IDLE), else µs between reads.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub poll_us: u64,
    /// The poller's CPU (default: a batch lane).
    #[arg(long, value_name = "CPU")]
    pub poller_cpu: Option<u32>,
    /// Run the poller at this SCHED_FIFO priority (0: SCHED_IDLE, the
    /// default: it only takes idle time, and misses requests while its lane
    /// is busy); with --poll-us 50 or more, so it sleeps between reads.
    #[arg(long, value_name = "PRIO", default_value_t = 0)]
    pub poller_fifo: u8,
    /// Where the record (record.json) and the Perfetto trace (trace.json) go
    /// (default: `results/trace-<UTC time>`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// How to study.
    #[command(flatten)]
    pub study: StudyArgs,
}

/// Arguments of `elfen trace report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A record.json, or the directory holding it.
    pub record: PathBuf,
    /// Write the Perfetto trace again here.
    #[arg(long, value_name = "PATH")]
    pub perfetto: Option<PathBuf>,
    /// How to study.
    #[command(flatten)]
    pub study: StudyArgs,
}

/// The load's request set and placement.
#[derive(Debug, Args, Clone)]
pub struct LoadSetArgs {
    /// The service's address.
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<std::net::SocketAddr>,
    /// Requests per second (Poisson).
    #[arg(long, value_name = "RPS", default_value_t = 500.0)]
    pub rps: f64,
    /// term_queries (the tasks file's terms as payload: Lucene) or demand
    /// (work in ns as the argument: `elfen serve`).
    #[arg(long, value_name = "KIND", default_value = "term_queries")]
    pub requests: String,
    /// The tasks file (default: where the harness finds it).
    #[arg(long, value_name = "FILE")]
    pub tasks: Option<PathBuf>,
    /// CPUs of the client's threads (default: unpinned).
    #[arg(long, value_name = "LIST")]
    pub client_cpus: Option<String>,
    /// Seed of the arrivals and the shuffle.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// The client's threads at this SCHED_FIFO priority (0: SCHED_OTHER),
    /// as the harness's generator (10), so other work cannot make it late.
    #[arg(long, value_name = "PRIO", default_value_t = 10)]
    pub client_fifo: u8,
}

impl LoadSetArgs {
    fn set(&self) -> anyhow::Result<(Arc<RequestSet>, String)> {
        let kind = match self.requests.as_str() {
            "term_queries" => RequestsKind::TermQueries,
            "demand" => RequestsKind::Demand,
            o => bail!("--requests must be term_queries or demand, not {o}"),
        };
        let set = requests::build(
            kind,
            &DemandSpec::default(),
            self.tasks.as_deref(),
            self.seed,
        )
        .context("building the request set")?;
        let what = format!("{} ({} requests)", set.source, set.requests.len());
        Ok((Arc::new(set), what))
    }
    fn sched(&self) -> elfen_cmd::proc::SchedClass {
        match self.client_fifo {
            0 => elfen_cmd::proc::SchedClass::Other,
            p => elfen_cmd::proc::SchedClass::Fifo(p),
        }
    }
    fn cpus(&self) -> anyhow::Result<Vec<u32>> {
        self.client_cpus
            .as_deref()
            .map(|s| elfen_topo::parse_cpu_list(s).context("--client-cpus"))
            .transpose()
            .map(Option::unwrap_or_default)
    }
}

/// Arguments of `elfen trace load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The service and the requests.
    #[command(flatten)]
    pub set: LoadSetArgs,
    /// How long to send.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub duration_s: f64,
    /// Write the spans here (JSON lines).
    #[arg(long, value_name = "FILE")]
    pub spans_out: PathBuf,
    /// The first request id.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub id_base: u64,
}

/// Arguments of `elfen trace overhead`.
#[derive(Debug, Args)]
pub struct OverheadArgs {
    /// The service, when it runs already (with --addr).
    #[command(flatten)]
    pub target: TargetArgs,
    /// Start the service from this command line instead (placeholders
    /// {port} {page} {lane} {cpu} {side_cpus} {lc_signal}, as the harness's
    /// external LC service): on a page of its own, stopped at the end.
    #[arg(long, value_name = "CMD", conflicts_with_all = ["pid", "comm", "cgroup", "unit", "lucene"])]
    pub lc_command: Option<String>,
    /// Start the Lucene server (the harness's `--lc lucene` command).
    #[arg(long, conflicts_with_all = ["pid", "comm", "cgroup", "unit"])]
    pub lucene: bool,
    /// A started service's request lane CPU.
    #[arg(long, value_name = "CPU", default_value_t = 0)]
    pub cpu: u32,
    /// A started service's side (batch lane) CPUs.
    #[arg(long, value_name = "LIST", default_value = "1")]
    pub side_cpus: String,
    /// The service's address and the requests.
    #[command(flatten)]
    pub set: LoadSetArgs,
    /// The signal page (the LC line's poller is part of the cost).
    #[arg(long, value_name = "PATH")]
    pub page: Option<PathBuf>,
    /// Its request lane.
    #[arg(long, value_name = "N")]
    pub lane: Option<u32>,
    /// Each invocation's length.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub duration_s: f64,
    /// Repetitions (each an untraced and a traced invocation).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub reps: usize,
    /// Write the JSON result here (default: `results/trace-overhead-<unix time>.json`).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        let Command::Trace(t) = self;
        match t.sub {
            None => run_record(t.record),
            Some(Sub::Report(a)) => run_report(a),
            Some(Sub::Load(a)) => run_load(a),
            Some(Sub::Overhead(a)) => run_overhead(a),
        }
    }
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn cpu_list(s: &Option<String>, what: &str) -> anyhow::Result<Option<Vec<u32>>> {
    s.as_deref()
        .map(|v| elfen_topo::parse_cpu_list(v).with_context(|| what.to_string()))
        .transpose()
}

fn options(a: &RecordArgs) -> anyhow::Result<Options> {
    if a.poller_fifo > 0 && a.poll_us < 50 {
        bail!(
            "--poller-fifo needs --poll-us 50 or more: a real-time poller that spins would take its lane"
        );
    }
    let signals = match &a.signals {
        None => Signal::ALL.to_vec(),
        Some(v) => {
            let mut out = vec![Signal::Sched];
            for s in v {
                let x = Signal::parse(s).with_context(|| {
                    format!(
                        "--signals: unknown signal '{s}' (known: {})",
                        Signal::ALL.map(Signal::name).join(", ")
                    )
                })?;
                if !out.contains(&x) {
                    out.push(x);
                }
            }
            out
        }
    };
    Ok(Options {
        signals,
        lanes: cpu_list(&a.lanes, "--lanes")?,
        ring_mib: a.ring_mib,
        min_fault_ns: (a.min_fault_us * 1e3) as u64,
        poll_us: a.poll_us,
        poller_cpu: a.poller_cpu,
        poller_sched: match a.poller_fifo {
            0 => elfen_cmd::proc::SchedClass::Idle,
            p => elfen_cmd::proc::SchedClass::Fifo(p),
        },
        request_cpu: a.request_cpu,
        batch_cpus: cpu_list(&a.batch_cpus, "--batch-cpus")?,
        lc_tid: a.lc_tid,
        ..Options::default()
    })
}

/// Reads the spans file if given; a missing file is said, not fatal (the
/// client may not have written it).
fn client_spans(path: Option<&Path>) -> anyhow::Result<Vec<ClientSpan>> {
    match path {
        None => Ok(Vec::new()),
        Some(p) if !p.exists() => {
            eprintln!(
                "elfen trace: {} does not exist (yet): studied without a client's spans",
                p.display()
            );
            Ok(Vec::new())
        }
        Some(p) => Ok(spans::read(p)?),
    }
}

fn run_record(a: RecordArgs) -> anyhow::Result<()> {
    let params = a.study.params()?;
    if !(a.duration_s > 0.0 && a.duration_s.is_finite()) {
        bail!("--duration-s must be > 0");
    }
    let target = Target::resolve(a.target.spec()?)?;
    let tap = match &a.page {
        Some(p) => Some(LcLineTap::open(p, a.lane, &target.tgids)?),
        None => None,
    };
    let opts = options(&a)?;
    let stop = elfen_cmd::interrupt::install();
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "results/trace-{}",
            elfen_cmd::time::utc_stamp(elfen_cmd::time::now_unix_s())
        ))
    });
    let rec = recorder::Recorder::start(target, tap, &opts, None)?;
    for s in rec.signals() {
        if let Some(why) = &s.skipped {
            if why != "not asked for" {
                eprintln!(
                    "elfen trace: signal {} not recorded: {why}",
                    s.signal.name()
                );
            }
        }
    }
    eprintln!(
        "elfen trace: recording {} for {:.1} s (Ctrl-C ends early) …",
        rec.target().spec,
        a.duration_s
    );
    let record = rec.run_until(Duration::from_secs_f64(a.duration_s), stop, command_line())?;
    if let crate::record::EndReason::TargetExited { .. } = record.end {
        eprintln!(
            "elfen trace: the target exited while traced; the trace ends there and is written"
        );
    }
    let client = client_spans(a.study.spans.as_deref())?;
    finish(&record, &client, params, &a.study, &out, true)
}

/// Studies, renders and writes; `save_record`: also the raw record.
fn finish(
    record: &TraceRecord,
    client: &[ClientSpan],
    params: StudyParams,
    s: &StudyArgs,
    out: &Path,
    save_record: bool,
) -> anyhow::Result<()> {
    let report = study::study(record, client, params);
    if save_record {
        record.save(&out.join("record.json"))?;
    }
    let events = render::perfetto::events(record, client, &report);
    let trace = out.join("trace.json");
    render::perfetto::write(&trace, &events)?;
    print!("{}", render::text::text(&report, s.show));
    eprintln!(
        "elfen trace: {} kernel records, {} requests; wrote {}{} (open the trace in ui.perfetto.dev)",
        record.events.len(),
        report.requests,
        if save_record {
            format!("{} and ", out.join("record.json").display())
        } else {
            String::new()
        },
        trace.display()
    );
    if let Some(j) = &s.json {
        report.save(j)?;
        eprintln!("elfen trace: report saved to {}", j.display());
    }
    Ok(())
}

fn run_report(a: ReportArgs) -> anyhow::Result<()> {
    let params = a.study.params()?;
    let path = if a.record.is_dir() {
        a.record.join("record.json")
    } else {
        a.record.clone()
    };
    let record = TraceRecord::load(&path)?;
    let client = client_spans(a.study.spans.as_deref())?;
    let out = match &a.perfetto {
        Some(p) => p.parent().map(Path::to_path_buf).unwrap_or_default(),
        None => path.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    let report = study::study(&record, &client, params);
    print!("{}", render::text::text(&report, a.study.show));
    if let Some(p) = &a.perfetto {
        let events = render::perfetto::events(&record, &client, &report);
        render::perfetto::write(p, &events)?;
        eprintln!("elfen trace: wrote {}", p.display());
    }
    let _ = out;
    if let Some(j) = &a.study.json {
        report.save(j)?;
        eprintln!("elfen trace: report saved to {}", j.display());
    }
    Ok(())
}

fn run_load(a: LoadArgs) -> anyhow::Result<()> {
    let Some(addr) = a.set.addr else {
        bail!("elfen trace load needs --addr HOST:PORT");
    };
    let (set, what) = a.set.set()?;
    let plan = LoadPlan {
        rps: a.set.rps,
        duration: Duration::from_secs_f64(a.duration_s.max(0.001)),
        drain: Duration::from_secs(2),
        set,
        seed: a.set.seed,
        id_base: a.id_base,
        cpus: a.set.cpus()?,
        sched: a.set.sched(),
    };
    let stop = elfen_cmd::interrupt::install();
    eprintln!(
        "elfen trace load: {} rps for {:.1} s to {addr}, {what}",
        a.set.rps, a.duration_s
    );
    let r = drive(addr, &plan, stop)?;
    spans::write(&a.spans_out, &r.spans)?;
    let q = |x: f64| r.hist.value_at_quantile(x) as f64 / 1e3;
    println!(
        "{} requests, {} errors{}; latency from the intended send: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs; spans in {}",
        r.spans.len(),
        r.errors,
        if r.closed {
            " (the service closed the connection)"
        } else {
            ""
        },
        q(0.5),
        q(0.99),
        r.hist.max() as f64 / 1e3,
        a.spans_out.display()
    );
    Ok(())
}

fn run_overhead(a: OverheadArgs) -> anyhow::Result<()> {
    let stop = elfen_cmd::interrupt::install();
    let (set, what) = a.set.set()?;
    // a service to start, on a page of its own
    let command = match (&a.lc_command, a.lucene) {
        (Some(c), _) => Some(c.clone()),
        (None, true) => {
            let cmd = elfen_load::lucene::command(elfen_load::lucene::copies_setting()?);
            elfen_load::lucene::preflight(&cmd)?;
            Some(cmd)
        }
        (None, false) => None,
    };
    let mut started = None;
    let (target, addr, page) = match command {
        Some(cmd) => {
            let s = Started::start(&cmd, a.cpu, &a.side_cpus, stop)?;
            let t = Target::resolve(TargetSpec::Pid(s.service.pid()))?;
            let (addr, page) = (s.addr, s.page.clone());
            started = Some(s);
            (t, addr, Some(page))
        }
        None => {
            let Some(addr) = a.set.addr else {
                bail!(
                    "name a running service (--pid … with --addr) or start one (--lc-command, --lucene)"
                );
            };
            (Target::resolve(a.target.spec()?)?, addr, a.page.clone())
        }
    };
    let b = overhead::Bench {
        target,
        page: page.map(|p| (p, a.lane)),
        options: Options::default(),
        load: LoadPlan {
            rps: a.set.rps,
            duration: Duration::from_secs_f64(a.duration_s.max(0.1)),
            drain: Duration::from_secs(2),
            set,
            seed: a.set.seed,
            id_base: 0,
            cpus: match a.set.client_cpus {
                Some(_) => a.set.cpus()?,
                None if started.is_some() => elfen_topo::parse_cpu_list(&a.side_cpus)?,
                None => Vec::new(),
            },
            sched: a.set.sched(),
        },
        addr,
        reps: a.reps,
        command: command_line(),
        requests: what,
    };
    let report = overhead::run(&b, stop, |r| {
        eprintln!(
            "  rep {} {:<9} p50 {:>8.1} µs  p99 {:>9.1} µs  max {:>9.1} µs  {} requests{}",
            r.rep,
            if r.traced { "traced" } else { "untraced" },
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.requests,
            if r.traced {
                format!(
                    ", {} records, {:.1} MB",
                    r.records,
                    r.record_bytes as f64 / 1e6
                )
            } else {
                String::new()
            }
        )
    })?;
    drop(started);
    print!("{}", overhead::render(&report));
    let path = a.json.unwrap_or_else(|| {
        PathBuf::from(format!(
            "results/trace-overhead-{}.json",
            elfen_cmd::time::now_unix_s()
        ))
    });
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)
        .with_context(|| path.display().to_string())?;
    eprintln!("elfen trace overhead: saved {}", path.display());
    Ok(())
}

/// A service `elfen trace overhead` started, with its page; stopped and
/// removed on drop.
struct Started {
    service: elfen_wire::launch::External,
    page: PathBuf,
    addr: std::net::SocketAddr,
    _page: elfen_shm::Page,
}

impl Started {
    fn start(
        command: &str,
        cpu: u32,
        side: &str,
        stop: &std::sync::atomic::AtomicBool,
    ) -> anyhow::Result<Started> {
        let side_cpus = elfen_topo::parse_cpu_list(side).context("--side-cpus")?;
        let path = PathBuf::from(format!("/dev/shm/elfen-trace-{}", std::process::id()));
        let mut spec = elfen_shm::PageSpec::for_pairs(
            &[(cpu, side_cpus.clone())],
            elfen_shm::layout::policy::UNMANAGED,
            0,
        );
        // Java writers need the monotonic clock
        spec.clock = Some(elfen_shm::Clock::MONOTONIC);
        let page = elfen_shm::Page::create(&path, &spec)
            .with_context(|| format!("creating the signal page {}", path.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port")?
            .port();
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let launch = elfen_wire::launch::Launch {
            command: command.to_string(),
            vars: vec![
                ("port", port.to_string()),
                ("page", path.display().to_string()),
                ("lane", "0".into()),
                ("cpu", cpu.to_string()),
                ("side_cpus", elfen_topo::format_cpu_list(&side_cpus)),
                ("lc_signal", "api".into()),
            ],
            startup_timeout: Duration::from_secs(180),
        };
        eprintln!("elfen trace overhead: starting {command}");
        let service = match elfen_wire::launch::External::start(&launch, addr, stop) {
            Ok(s) => s,
            Err(e) => {
                drop(page);
                let _ = elfen_shm::Page::remove(&path);
                return Err(e.into());
            }
        };
        Ok(Started {
            service,
            page: path,
            addr,
            _page: page,
        })
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.service.terminate();
        let _ = elfen_shm::Page::remove(&self.page);
    }
}
