//! `elfen isobench egress`: network egress, inside two network namespaces
//! made for the run (never outside this machine). The server side `a`
//! holds the LC service (`helper lc-server`) and the batch sender
//! (`iperf3 -c`, started by the daemon in its batch group); the client
//! side `b` the harness's open-loop load and `iperf3 -s`. `a`'s end of the
//! link is a token bucket (`rate_mbit`) over `pfifo_fast` (the default
//! qdisc: three bands served in order), so the link is the bottleneck and
//! packets queue there. Per run, side by side
//! (order rotating):
//!
//! - **alone**: LC requests only;
//! - **normal**: with the iperf3 upload at normal priority;
//! - **low**: with the upload in a batch group with `egress = "low"`: the
//!   daemon's BPF program gives its packets priority 1, which
//!   `pfifo_fast` queues in its last band, behind the LC's responses.
//!
//! Measured: the LC's request latency (from intended send times, the
//! harness's generator in namespace `b`), and the packets the daemon's
//! program marked (its counter).

use crate::common::*;
use crate::fixtures::NetPair;
use anyhow::{Context, Result};
use elfen_results::Stat;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// Repetitions of the three configurations.
    pub runs: usize,
    /// The LC load.
    pub load: Load,
    /// The link's rate, Mbit/s.
    pub rate_mbit: u32,
    /// The LC's CPU.
    pub lc_cpu: u32,
    /// The generator's CPUs.
    pub generator_cpus: Vec<u32>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            runs: 3,
            load: Load {
                rps: 500.0,
                work: 1,
                warmup_ms: 2000,
                window_ms: 10_000,
            },
            rate_mbit: 50,
            lc_cpu: 0,
            generator_cpus: vec![1],
        }
    }
}

/// One configuration's run.
#[derive(Debug, Clone, Serialize)]
pub struct Rep {
    /// `alone`, `normal` or `low`.
    pub config: &'static str,
    /// The run.
    pub run: usize,
    /// The LC's latency.
    pub load: LoadResult,
    /// Packets the daemon's egress program marked (low only).
    pub marked_packets: u64,
}

/// Per configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigSummary {
    /// The configuration.
    pub config: &'static str,
    /// p50, µs.
    pub p50_us: Stat,
    /// p99, µs.
    pub p99_us: Stat,
    /// p99.9, µs.
    pub p999_us: Stat,
    /// Requests lost or failed, summed.
    pub errors: u64,
    /// Packets marked low priority.
    pub marked_packets: Stat,
}

/// The summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Per configuration.
    pub configs: Vec<ConfigSummary>,
}

const CONFIGS: [&str; 3] = ["alone", "normal", "low"];

fn one(
    p: &Params,
    helpers: &Helpers,
    run: usize,
    config: &'static str,
    net: &NetPair,
    dir: &std::path::Path,
    stop: &AtomicBool,
) -> Result<Rep> {
    let port = 7000
        + (run as u16 % 100) * 3
        + CONFIGS.iter().position(|c| *c == config).unwrap_or(0) as u16;
    let addr: SocketAddr = format!("{}:{port}", net.ip_a).parse()?;
    let lc = ChildGuard::new(
        NetPair::exec(
            &net.a,
            &helpers.argv(&[
                "lc-server".into(),
                format!("--listen={addr}"),
                format!("--cpu={}", p.lc_cpu),
                "--working-set-mib=1".into(),
            ]),
        )
        .stdin(std::process::Stdio::null())
        .spawn()
        .context("starting the LC server in its namespace")?,
    );
    let iperf_port = port + 1000;
    let server = ChildGuard::new(
        NetPair::exec(
            &net.b,
            &[
                "iperf3",
                "-s",
                "-p",
                &iperf_port.to_string(),
                "--logfile",
                "/dev/null",
            ]
            .map(String::from),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting iperf3 -s (scripts/deps/isolation.apt)")?,
    );
    let batch = if config == "alone" {
        "command = [\"sleep\", \"3600\"]\n".to_string()
    } else {
        let argv = [
            "ip",
            "netns",
            "exec",
            &net.a,
            "iperf3",
            "-c",
            &net.ip_b.to_string(),
            "-p",
            &iperf_port.to_string(),
            "-t",
            "3600",
            "--logfile",
            "/dev/null",
        ]
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
        format!(
            "command = [{argv}]\n{}",
            if config == "low" {
                "egress = \"low\"\n"
            } else {
                ""
            }
        )
    };
    let text = format!(
        "page = \"/dev/shm/elfen-isobench-{}-egress\"\nstate_file = \"{}\"\npairs = \"0:1\"\nundelegated = \"root\"\n\
         [metrics]\nlisten = \"\"\n[memory]\nmin_available = 0\npressure = \"off\"\n\
         [lc]\npid = {}\n[[batch]]\nname = \"upload\"\nmode = \"cooperative\"\n{batch}",
        std::process::id(),
        dir.join("state.json").display(),
        lc.pid()
    );
    // the LC answers from namespace a; the load comes from namespace b
    let b = net.b.clone();
    let ready = std::thread::scope(|s| {
        s.spawn(|| {
            NetPair::enter(&b)?;
            wait_listening(addr, Duration::from_secs(60))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
    });
    ready?;
    let d = InProcessDaemon::start(&text, true)?;
    let load = std::thread::scope(|s| {
        s.spawn(|| {
            NetPair::enter(&b)?;
            run_load(addr, &p.load, &p.generator_cpus, stop)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the load thread panicked"))?
    });
    let report = d.stop()?;
    let marked_packets = report
        .isolation
        .iter()
        .find_map(|l| l.strip_prefix("egress: "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    drop(server);
    drop(lc);
    Ok(Rep {
        config,
        run,
        load: load?,
        marked_packets,
    })
}

/// Runs the benchmark.
pub fn measure(p: &Params, helpers: &Helpers, stop: &AtomicBool) -> Result<Vec<Rep>> {
    need_root()?;
    let dir = crate::memory::tempfile_dir("egress")?;
    let net = NetPair::new("iso", p.rate_mbit)?;
    let mut reps = Vec::new();
    for run in 0..p.runs {
        for k in 0..CONFIGS.len() {
            anyhow::ensure!(!stop.load(Ordering::Relaxed), "interrupted");
            let config = CONFIGS[(k + run) % CONFIGS.len()];
            let r = one(p, helpers, run, config, &net, dir.path(), stop)?;
            eprintln!(
                "run {run} {config:<6}: LC p50 {:.0} µs, p99 {:.0} µs, {} errors; {} packets marked",
                r.load.latency_us.p50, r.load.latency_us.p99, r.load.errors, r.marked_packets
            );
            reps.push(r);
        }
    }
    Ok(reps)
}

/// The summary.
pub fn summary(reps: &[Rep]) -> Summary {
    Summary {
        configs: CONFIGS
            .iter()
            .map(|&c| {
                let r: Vec<&Rep> = reps.iter().filter(|r| r.config == c).collect();
                let f = |g: &dyn Fn(&Rep) -> f64| stat(&r.iter().map(|x| g(x)).collect::<Vec<_>>());
                ConfigSummary {
                    config: c,
                    p50_us: f(&|x| x.load.latency_us.p50),
                    p99_us: f(&|x| x.load.latency_us.p99),
                    p999_us: f(&|x| x.load.latency_us.p999),
                    errors: r.iter().map(|x| x.load.errors).sum(),
                    marked_packets: f(&|x| x.marked_packets as f64),
                }
            })
            .collect(),
    }
}

/// The table.
pub fn render(s: &Summary) -> String {
    let mut o = String::from(
        "config   LC p50 µs              LC p99 µs              LC p99.9 µs            errors  packets marked low\n",
    );
    for c in &s.configs {
        o += &format!(
            "{:<8} {:<22} {:<22} {:<22} {:>6}  {}\n",
            c.config,
            fmt_stat(&c.p50_us, 0),
            fmt_stat(&c.p99_us, 0),
            fmt_stat(&c.p999_us, 0),
            c.errors,
            fmt_stat(&c.marked_packets, 0)
        );
    }
    o
}

/// The result file.
pub fn report(p: &Params, reps: Vec<Rep>, load_before: [f64; 3]) -> Report<Params, Rep, Summary> {
    Report {
        schema: SCHEMA,
        bench: "egress",
        created_unix_s: elfen_cmd::time::now_unix_s(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        system: elfen_topo::SystemInfo::collect(),
        load_before,
        load_after: elfen_cmd::proc::loadavg(),
        params: p.clone(),
        summary: summary(&reps),
        runs: reps,
    }
}
