//! `elfen load`: the harness's open-loop generator on its own — an LC
//! service driven at a rate for a duration, for profiling it from another
//! shell (`elfen advise`) or watching it (`elfen status`). It starts the
//! service the way `elfen bench` does (Redis / memcached unmodified,
//! pinned to the request lane and filled with their key space; the
//! built-in service as `elfen serve`, its worker on the request lane), or
//! drives one already running (`--addr`); says the service's pid, drives
//! it, prints the latency percentiles (from intended send times) and
//! stops what it started.

use crate::lc::kv::KvService;
use crate::lc::text::TextProtocol;
use crate::lc::{LcService, Protocol, requests};
use crate::load::client::{GeneratorPlace, InvocationPlan, run_invocation};
use crate::load::{percentiles_us, poisson_offsets};
use crate::spec::{DemandSpec, KvSpec, RequestsKind};
use anyhow::{Context, bail};
use clap::Args;
use elfen_cmd::proc::SchedClass;
use elfen_wire::launch::{External, Launch};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `elfen load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The LC service: `redis` or `memcached` (Debian's server, unmodified,
    /// 1.26 M keys of 256 B, GETs of random keys), `builtin` (the built-in
    /// pointer-chase service as `elfen serve`, the paper's request
    /// demands), or `wire` (a service at --addr speaking docs/lc-protocol.md).
    #[arg(long, value_name = "KIND", default_value = "builtin")]
    pub lc: String,
    /// Drive the service already listening here instead of starting one.
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<SocketAddr>,
    /// Port of the service it starts on 127.0.0.1 (0: any free one).
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    pub port: u16,
    /// Requests per second (Poisson arrivals).
    #[arg(long, value_name = "RPS")]
    pub rps: f64,
    /// How long to drive it, s.
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub duration: f64,
    /// Lane pairing request:batch (the service runs on the first pair's
    /// request lane, the generator beside it).
    #[arg(long, value_name = "SPEC")]
    pub pairs: Option<String>,
    /// Write the pid of the service it starts here.
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// SCHED_FIFO priority of the generator's threads (and of the built-in
    /// service's acceptor and dispatchers), 0 = SCHED_OTHER; needs root.
    /// The default is above `elfen daemon`'s guard and writer (50, 51): a
    /// guard occupying the batch lane does not delay this client, as it
    /// would not delay one on another machine.
    #[arg(long, value_name = "PRIO", default_value_t = 60)]
    pub fifo_priority: u8,
    /// Seed of the arrival times and keys.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

/// What is driven, and what to stop at the end.
struct Target {
    addr: SocketAddr,
    protocol: Protocol,
    set: requests::RequestSet,
    /// The service it started (stopped on drop).
    started: Option<Box<dyn LcService>>,
    what: String,
}

fn start(
    a: &LoadArgs,
    request_cpu: u32,
    side: &[u32],
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Target> {
    let timeout = Duration::from_secs(60);
    let port = if a.port == 0 {
        crate::lc::builtin::bind(0)?.local_addr()?.port()
    } else {
        a.port
    };
    match a.lc.as_str() {
        kind @ ("redis" | "memcached") => {
            let kv = if kind == "redis" {
                KvSpec::redis()
            } else {
                KvSpec::memcached()
            };
            let set = requests::keys(&kv.name, kv.keys, 1, a.seed);
            let what = format!("{} with {} keys", kv.name, kv.keys);
            match a.addr {
                Some(addr) => Ok(Target {
                    addr,
                    protocol: Protocol::Text(Arc::new(
                        TextProtocol::new(&kv).map_err(|e| anyhow::anyhow!("{e}"))?,
                    )),
                    set,
                    started: None,
                    what,
                }),
                None => {
                    let svc = KvService::start(&kv, port, request_cpu, timeout, stop)?;
                    for n in svc.notes() {
                        println!("{n}");
                    }
                    Ok(Target {
                        addr: svc.addr(),
                        protocol: svc.protocol(),
                        set,
                        started: Some(Box::new(svc)),
                        what,
                    })
                }
            }
        }
        kind @ ("builtin" | "wire") => {
            let set = requests::build(RequestsKind::Demand, &DemandSpec::default(), None, a.seed)?;
            let what = format!("{kind}: {}", set.source);
            match (a.addr, kind) {
                (Some(addr), _) => Ok(Target {
                    addr,
                    protocol: Protocol::Wire,
                    set,
                    started: None,
                    what,
                }),
                (None, "wire") => bail!("--lc wire drives a service at --addr; none was given"),
                (None, _) => {
                    let exe = std::env::current_exe().context("locating the elfen executable")?;
                    let fifo = if elfen_cmd::proc::is_root() {
                        a.fifo_priority
                    } else {
                        0
                    };
                    let launch = Launch {
                        command: format!(
                            "{} serve --port {{port}} --cpu {{cpu}} --side-cpus {{side_cpus}} \
                             --signal none --side-fifo-priority {fifo}",
                            exe.display()
                        ),
                        vars: vec![
                            ("port", port.to_string()),
                            ("cpu", request_cpu.to_string()),
                            ("side_cpus", elfen_topo::format_cpu_list(side)),
                        ],
                        startup_timeout: timeout,
                    };
                    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
                    let ext = External::start(&launch, addr, stop)?;
                    Ok(Target {
                        addr,
                        protocol: Protocol::Wire,
                        set,
                        started: Some(Box::new(Started(ext, addr))),
                        what,
                    })
                }
            }
        }
        other => bail!("--lc {other:?}: expected redis, memcached, builtin or wire"),
    }
}

/// `elfen serve` started here.
struct Started(External, SocketAddr);

impl LcService for Started {
    fn describe(&self) -> String {
        format!("external: {}", self.0.command())
    }
    fn addr(&self) -> SocketAddr {
        self.1
    }
    fn child_pid(&self) -> Option<u32> {
        Some(self.0.pid())
    }
    fn worker_tids(&self) -> Vec<u32> {
        Vec::new()
    }
}

/// Runs `elfen load`.
pub fn run(a: LoadArgs) -> anyhow::Result<()> {
    if !(a.rps.is_finite() && a.rps > 0.0) {
        bail!("--rps {}: must be > 0", a.rps);
    }
    if !(a.duration.is_finite() && a.duration > 0.0 && a.duration <= 86_400.0) {
        bail!("--duration {}: must be in (0, 86400] s", a.duration);
    }
    match (a.lc.as_str(), a.addr) {
        ("redis" | "memcached" | "builtin", _) | ("wire", Some(_)) => {}
        ("wire", None) => bail!("--lc wire drives a service at --addr; none was given"),
        (other, _) => bail!("--lc {other:?}: expected redis, memcached, builtin or wire"),
    }
    let topo = elfen_topo::Topology::detect()?;
    let plan = elfen_topo::plan_pairs(&topo, a.pairs.as_deref())?;
    let Some(pair) = plan.first().cloned() else {
        bail!(
            "no request/batch lane pair on this machine ({})",
            plan.describe()
        );
    };
    let paired: Vec<u32> = std::iter::once(pair.request)
        .chain(pair.batch.iter().copied())
        .collect();
    let spare: Vec<u32> = topo
        .cpus()
        .into_iter()
        .filter(|c| !paired.contains(c))
        .collect();
    let side = if spare.is_empty() {
        pair.batch.clone()
    } else {
        spare
    };
    let stop = elfen_cmd::interrupt::install();
    let t = start(&a, pair.request, &side, stop)?;
    let pid = t.started.as_ref().and_then(|s| s.child_pid());
    if let (Some(path), Some(pid)) = (&a.pid_file, pid) {
        std::fs::write(path, format!("{pid}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let place = GeneratorPlace {
        cpus: side.clone(),
        sched: if elfen_cmd::proc::is_root() && a.fifo_priority > 0 {
            SchedClass::Fifo(a.fifo_priority.min(99))
        } else {
            SchedClass::Other
        },
    };
    println!(
        "LC service {}{}, listening on {}; request lane cpu {}; driving it at {} requests/s \
         for {} s from cpu {} ({})",
        t.what,
        pid.map_or(String::new(), |p| format!(", pid {p}")),
        t.addr,
        pair.request,
        a.rps,
        a.duration,
        elfen_topo::format_cpu_list(&side),
        place.sched.name()
    );
    let _ = std::io::stdout().flush();
    let mut rng = SmallRng::seed_from_u64(a.seed);
    let duration_ns = (a.duration * 1e9) as u64;
    let offsets = poisson_offsets(a.rps, duration_ns, &mut rng);
    let picks = t.set.sequence(offsets.len(), &mut rng);
    let plan = InvocationPlan {
        offsets,
        picks,
        set: Arc::new(t.set.clone()),
        work_scale: 1.0,
        warmup_ns: 0,
        duration_ns,
        drain_ns: 1_000_000_000,
    };
    let r = run_invocation(t.addr, &t.protocol, &plan, &place, stop, |_| {});
    drop(t);
    if let (Some(path), Some(_)) = (&a.pid_file, pid) {
        let _ = std::fs::remove_file(path);
    }
    let r = r?;
    let p = percentiles_us(&r.outcome.hist);
    println!(
        "sent {} requests ({:.0}/s); latency from intended send times: p50 {:.0} µs, p99 {:.0} \
         µs, p99.9 {:.0} µs, max {:.0} µs; {} errors{}",
        r.sent,
        r.rps_achieved,
        p.p50,
        p.p99,
        p.p999,
        p.max,
        r.outcome.errors,
        if r.connection_closed {
            "; the service closed the connection"
        } else {
            ""
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(rps: f64, duration: f64, lc: &str) -> LoadArgs {
        LoadArgs {
            lc: lc.into(),
            addr: None,
            port: 0,
            rps,
            duration,
            pairs: None,
            pid_file: None,
            fifo_priority: 60,
            seed: 1,
        }
    }

    #[test]
    fn bad_input_is_refused_before_anything_starts() {
        let e = format!("{:#}", run(args(0.0, 10.0, "builtin")).unwrap_err());
        assert!(e.contains("--rps"), "{e}");
        let e = format!("{:#}", run(args(100.0, -1.0, "builtin")).unwrap_err());
        assert!(e.contains("--duration"), "{e}");
        let e = format!("{:#}", run(args(100.0, 1.0, "postgres")).unwrap_err());
        assert!(e.contains("postgres") && e.contains("redis"), "{e}");
        let e = format!("{:#}", run(args(100.0, 1.0, "wire")).unwrap_err());
        assert!(e.contains("--addr"), "{e}");
    }
}
