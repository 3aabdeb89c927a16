//! `elfen proxy bench`: an LC service driven by the harness's open-loop
//! generator (`elfen_bench::load`: Poisson arrivals, latency from the
//! intended send time) in several **ways** side by side — straight to
//! replica A (`alone`), through the proxy forwarding only (`forward`),
//! with local-node redundancy (`proxy`), with a timeout hedge at a
//! percentile (`hedge`) — in interleaved rounds whose ways share arrivals
//! and request order, for each **variant** of the service (a hazard
//! switched on). It prints client-observed p50/p99/max per way (median and
//! min–max over rounds), the latency each way adds to `alone` in the same
//! round, the hedge rate, the work done twice and the backup's busy time,
//! and saves everything as JSON.
//!
//! It lives here, beside the proxy, and uses `elfen-bench` as a library
//! (the generator's arrivals, sender and accounting; request sets; the
//! Lucene command and pre-flight) rather than
//! adding an `elfen bench` configuration, so the harness's files are left
//! as they are. Presets: `configs/proxy/bench-overhead.toml` (the proxy's
//! added latency, the default) and `configs/proxy/bench-lucene.toml`
//! (Lucene alone, behind the proxy, behind a timeout hedge, hazards off and
//! on).

pub mod load;
pub mod record;
pub mod spec;

use crate::config::Protocol;
use crate::error::{ProxyError, Result};
use crate::launch::Spawned;
use crate::proxy::Proxy;
use anyhow::Context;
use clap::Args;
use elfen_bench::lc::external::Launch;
use elfen_bench::lc::requests::{self, RequestSet};
use elfen_bench::load::{percentiles_us, poisson_offsets};
use elfen_cmd::proc::SchedClass;
use elfen_shm::Page;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use record::{BenchRecord, InvocationRecord, SCHEMA};
use spec::{BenchSpec, Restart, Variant, Way};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Arguments of `elfen proxy bench`; options override the file's keys.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// TOML file (configs/proxy/bench-*.toml); default: the added-latency
    /// preset (the built-in service as two `elfen serve` replicas).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write the JSON here (default: `results/proxy-bench-<UTC time>.json`).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Rounds (invocations of each way).
    #[arg(long)]
    pub invocations: Option<usize>,
    /// Measured window of an invocation, s.
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Requests per second.
    #[arg(long)]
    pub rps: Option<f64>,
    /// Ways, comma-separated: alone, forward, proxy, hedge (alone always
    /// runs).
    #[arg(long, value_name = "LIST")]
    pub ways: Option<String>,
    /// Only these variants of the file, comma-separated.
    #[arg(long, value_name = "LIST")]
    pub variants: Option<String>,
}

/// The ways of `spec` in the order they are reported: `alone` first.
pub(crate) fn ways_of(spec: &BenchSpec) -> Vec<Way> {
    let mut w = vec![Way::Alone];
    for &x in &spec.ways {
        if !w.contains(&x) {
            w.push(x);
        }
    }
    w
}

/// The two replicas of one variant, started by the bench, and the page
/// they publish on.
struct Replicas {
    page: Page,
    spawned: [Option<Spawned>; 2],
    addrs: [SocketAddr; 2],
    launches: Vec<Launch>,
    variant: Variant,
    protocol: Protocol,
    timeout: Duration,
}

impl Replicas {
    fn start(
        spec: &BenchSpec,
        command: &str,
        v: &Variant,
        dir: &std::path::Path,
        stop: &AtomicBool,
    ) -> Result<Replicas> {
        let cpus = match spec.service.cpus.as_slice() {
            [a, b] => [*a, *b],
            _ => {
                let all = elfen_topo::current_affinity()
                    .map_err(|e| ProxyError::Config(format!("reading the CPU affinity: {e}")))?;
                match all.as_slice() {
                    [a, b, ..] => [*a, *b],
                    _ => {
                        return Err(ProxyError::Config(
                            "two replicas need two CPUs; set service.cpus".into(),
                        ));
                    }
                }
            }
        };
        let page = crate::proxy::create_page(&dir.join(format!("page-{}", v.name)), cpus)?;
        let all = elfen_topo::current_affinity().unwrap_or_default();
        let mut launches = Vec::new();
        let mut addrs = Vec::new();
        for (r, &cpu) in cpus.iter().enumerate() {
            let l = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|e| ProxyError::io("finding a free port", e))?;
            let port = l
                .local_addr()
                .map_err(|e| ProxyError::io("finding a free port", e))?
                .port();
            drop(l);
            let mut side: Vec<u32> = all.iter().copied().filter(|&c| c != cpu).collect();
            if side.is_empty() {
                side.push(cpu);
            }
            launches.push(Launch {
                command: format!("{command} {}", v.args),
                vars: vec![
                    ("port", port.to_string()),
                    ("page", page.path().display().to_string()),
                    ("lane", r.to_string()),
                    ("cpu", cpu.to_string()),
                    ("side_cpus", elfen_topo::format_cpu_list(&side)),
                    ("lc_signal", "api".into()),
                ],
                startup_timeout: Duration::from_secs_f64(spec.service.startup_timeout_s),
            });
            addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
        }
        let mut me = Replicas {
            page,
            spawned: [None, None],
            addrs: [addrs[0], addrs[1]],
            launches,
            variant: v.clone(),
            protocol: spec.service.protocol,
            timeout: Duration::from_secs_f64(spec.service.startup_timeout_s),
        };
        me.restart(stop)?;
        Ok(me)
    }

    /// Stops both replicas (if running) and starts them again.
    fn restart(&mut self, stop: &AtomicBool) -> Result<()> {
        for s in self.spawned.iter_mut() {
            if let Some(mut x) = s.take() {
                x.terminate();
            }
        }
        for r in 0..2 {
            self.spawned[r] = Some(Spawned::start(
                &self.launches[r],
                &self.variant.env,
                self.protocol,
                self.addrs[r],
                self.timeout,
                stop,
            )?);
        }
        Ok(())
    }
}

/// The command line of the service: `lucene` expands to the Lucene
/// server's (pre-flight checked), `{elfen}` to this executable.
fn service_command(spec: &BenchSpec) -> anyhow::Result<String> {
    let c = spec.service.command.trim();
    let c = if c == "lucene" {
        elfen_bench::lc::lucene::command(elfen_bench::lc::lucene::copies_setting()?, 10)
    } else {
        let exe = std::env::current_exe().context("finding this executable")?;
        c.replace("{elfen}", &exe.display().to_string())
    };
    if elfen_bench::lc::lucene::is_lucene(&c) {
        elfen_bench::lc::lucene::preflight(&c)?;
    }
    Ok(c)
}

/// Runs the bench.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    let stop = elfen_cmd::interrupt::install();
    let mut spec = match &a.config {
        Some(p) => BenchSpec::load(p)?,
        None => BenchSpec::default(),
    };
    if let Some(n) = a.invocations {
        spec.load.invocations = n;
    }
    if let Some(d) = a.duration_s {
        spec.load.duration_s = d;
    }
    if let Some(r) = a.rps {
        spec.load.rps = r;
    }
    if let Some(w) = &a.ways {
        spec.ways = w
            .split(',')
            .map(|x| match x.trim() {
                "alone" => Ok(Way::Alone),
                "proxy" => Ok(Way::Proxy),
                "hedge" => Ok(Way::Hedge),
                "forward" => Ok(Way::Forward),
                o => Err(anyhow::anyhow!(
                    "--ways: {o:?} is not alone, forward, proxy or hedge"
                )),
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(v) = &a.variants {
        let want: Vec<&str> = v.split(',').map(str::trim).collect();
        for w in &want {
            anyhow::ensure!(
                spec.variants.iter().any(|x| x.name == *w),
                "--variants: no variant {w:?} (the file has {})",
                spec.variants
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        spec.variants.retain(|x| want.contains(&x.name.as_str()));
    }
    spec.validate()?;
    let command = service_command(&spec)?;
    let set = Arc::new(requests::build(
        spec.service.requests,
        &spec.service.demand,
        spec.service.tasks_path.as_deref(),
        spec.load.seed,
    )?);
    if let Some(n) = &set.note {
        eprintln!("elfen proxy bench: note: {n}");
    }
    let started = elfen_cmd::time::now_unix_s();
    let json = a.json.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "results/proxy-bench-{}.json",
            elfen_cmd::time::utc_stamp(started)
        ))
    });
    let loadavg_before = elfen_cmd::proc::loadavg();
    let ways = ways_of(&spec);
    eprintln!(
        "elfen proxy bench: {} at {} rps, {} × {} s (+{} s warm-up) per way; ways {}; variants {}; load average {:.2}",
        set.source,
        spec.load.rps,
        spec.load.invocations,
        spec.load.duration_s,
        spec.load.warmup_s,
        ways.iter().map(|w| w.name()).collect::<Vec<_>>().join(", "),
        spec.variants
            .iter()
            .map(|v| v.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        loadavg_before[0]
    );
    // the replicas and the generator pin threads to the lanes: one lane user at a time
    let _lanes = elfen_cmd::LaneLock::acquire().context("taking the lane lock")?;
    let dir = tempfile_dir()?;
    let place = load::Place {
        cpus: elfen_topo::current_affinity().unwrap_or_default(),
        sched: if elfen_cmd::proc::is_root() {
            SchedClass::Fifo(10)
        } else {
            SchedClass::Other
        },
    };
    let mut inv = Vec::new();
    let mut interrupted = false;
    'variants: for v in &spec.variants {
        let mut reps = Replicas::start(&spec, &command, v, dir.path(), stop)
            .with_context(|| format!("variant {}: starting the replicas", v.name))?;
        for round in 0..spec.load.invocations {
            let mut rng = SmallRng::seed_from_u64(spec.load.seed.wrapping_add(round as u64));
            let span_ns = ((spec.load.warmup_s + spec.load.duration_s) * 1e9) as u64;
            let offsets = poisson_offsets(spec.load.rps, span_ns, &mut rng);
            let picks = set.sequence(offsets.len(), &mut rng);
            let n = ways.len();
            for k in 0..n {
                let way = ways[(k + round) % n];
                if stop.load(Ordering::Relaxed) {
                    interrupted = true;
                    break 'variants;
                }
                if v.restart == Restart::Invocation {
                    reps.restart(stop)?;
                }
                match one(&spec, &reps, way, &set, &offsets, &picks, &place, stop) {
                    Ok(mut r) => {
                        r.variant = v.name.clone();
                        r.round = round;
                        eprintln!(
                            "  [{}] round {}/{} {:<8} p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  {} errors{}",
                            v.name,
                            round + 1,
                            spec.load.invocations,
                            way.name(),
                            r.latency_us.p50 / 1e3,
                            r.latency_us.p99 / 1e3,
                            r.latency_us.max / 1e3,
                            r.errors,
                            r.proxy
                                .as_ref()
                                .map(|s| format!(
                                    ", {} hedged, {} swaps, {} served twice",
                                    s.hedges_total, s.swaps, s.duplicate_work
                                ))
                                .unwrap_or_default()
                        );
                        inv.push(r);
                    }
                    Err(ProxyError::Interrupted)
                    | Err(ProxyError::Bench(elfen_bench::BenchError::Interrupted)) => {
                        interrupted = true;
                        break 'variants;
                    }
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("variant {}, way {}", v.name, way.name()));
                    }
                }
            }
        }
    }
    let summary = record::summarize(&spec, &inv);
    println!("{}", record::table(&summary));
    let rec = BenchRecord {
        schema: SCHEMA.into(),
        spec,
        started_unix_s: started,
        loadavg: [loadavg_before, elfen_cmd::proc::loadavg()],
        interrupted,
        invocations: inv,
        summary,
    };
    elfen_results::save_json(&rec, &json).with_context(|| format!("writing {}", json.display()))?;
    println!(
        "elfen proxy bench: written to {}{}",
        json.display(),
        if interrupted {
            " (interrupted: the rounds done)"
        } else {
            ""
        }
    );
    Ok(())
}

/// A temporary directory under /dev/shm (the replicas' page), removed at
/// the end, on error and on Ctrl-C.
fn tempfile_dir() -> anyhow::Result<TempDir> {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let path = PathBuf::from(format!("{base}/elfen-proxy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    let guard = elfen_cmd::interrupt::register(&[], &[path.as_path()]);
    Ok(TempDir {
        path,
        _guard: guard,
    })
}

/// A directory removed on drop.
struct TempDir {
    path: PathBuf,
    _guard: elfen_cmd::interrupt::CleanupGuard,
}

impl TempDir {
    fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One invocation of `way`.
#[allow(clippy::too_many_arguments)]
fn one(
    spec: &BenchSpec,
    reps: &Replicas,
    way: Way,
    set: &Arc<RequestSet>,
    offsets: &[u64],
    picks: &[u32],
    place: &load::Place,
    stop: &AtomicBool,
) -> Result<InvocationRecord> {
    let proxy = match way.mode() {
        Some(mode) => {
            let mut c = spec.proxy.clone();
            c.hedge = mode;
            c.protocol = spec.service.protocol;
            c.listen = "127.0.0.1:0".into();
            c.metrics = None;
            c.replicas.command = None;
            c.replicas.addrs = reps.addrs.iter().map(ToString::to_string).collect();
            c.replicas.page = Some(reps.page.path().to_path_buf());
            c.replicas.lanes = vec![0, 1];
            Some(Proxy::start(c, stop)?)
        }
        None => None,
    };
    let addr = proxy.as_ref().map_or(reps.addrs[0], Proxy::addr);
    let busy0 = reps.page.lc_busy_ns(1).ok();
    let warmup_ns = (spec.load.warmup_s * 1e9) as u64;
    let drain_ns = (spec.load.drain_s * 1e9) as u64;
    let plan = load::Plan {
        offsets,
        requests: picks
            .iter()
            .map(|&k| {
                let k = k as usize;
                (set.arg(k, 1.0), &set.requests[k].payload[..])
            })
            .collect(),
        warmup_ns,
        drain_ns,
    };
    let (outcome, sent) = load::invocation(spec.service.protocol, addr, &plan, place, stop)
        .map_err(|e| ProxyError::io(format!("the load on {addr}"), e))?;
    if stop.load(Ordering::Relaxed) {
        return Err(ProxyError::Interrupted);
    }
    let busy1 = reps.page.lc_busy_ns(1).ok();
    Ok(InvocationRecord {
        variant: String::new(),
        way,
        round: 0,
        latency_us: percentiles_us(&outcome.hist),
        requests: outcome.requests,
        errors: outcome.errors,
        sent,
        proxy: proxy.map(Proxy::stop),
        backup_busy_ms: busy0
            .zip(busy1)
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1e6),
    })
}
