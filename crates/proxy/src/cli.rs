//! `elfen proxy run` and `elfen proxy demo-service` (`elfen proxy bench`
//! is the measurement crate's, `elfen-proxybench`).

use crate::config::{HedgeMode, Protocol, ProxyConfig};
use crate::proxy::Proxy;
use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `elfen proxy run` and `elfen proxy demo-service`: the proxy's own
/// subcommands. `elfen proxy` itself, with `bench` beside these, is
/// assembled by the measurement crate (`elfen-proxybench`), so the proxy
/// carries no measurement code.
// Parsed once per process: the size difference between variants is moot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Run the proxy until Ctrl-C (or --duration-s); print a status line
    /// every --status-s and the record at the end (--json PATH saves it).
    Run(RunArgs),
    /// A small LC service for tests and demonstrations (wire or HTTP/1.1)
    /// that publishes on a signal page and can be told to pause.
    DemoService(crate::demo::DemoArgs),
}

/// Arguments of `elfen proxy run`; each option overrides the same key of
/// `--config`.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// TOML file with the proxy's settings (see configs/proxy/); unknown
    /// keys are errors.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where clients connect (host:port; port 0 picks one and prints it).
    #[arg(long)]
    pub listen: Option<String>,
    /// `wire` (elfen's LC protocol) or `http` (HTTP/1.1).
    #[arg(long)]
    pub protocol: Option<String>,
    /// `signal` (re-send on a pause seen on the signal line, swap roles),
    /// `timeout` (hedge after a percentile of recent latency) or `none`.
    #[arg(long)]
    pub hedge: Option<String>,
    /// The timeout hedge's percentile (e.g. 95).
    #[arg(long)]
    pub hedge_pct: Option<f64>,
    /// Command template that starts a replica ({port} {cpu} {side_cpus}
    /// {page} {lane} {lc_signal} substituted), e.g.
    /// "target/release/elfen serve --port {port} --cpu {cpu} --page {page} --lane {lane}".
    #[arg(long, value_name = "COMMAND")]
    pub replica_command: Option<String>,
    /// Request-lane CPUs of the two started replicas (e.g. `0,1`).
    #[arg(long, value_name = "LIST")]
    pub replica_cpus: Option<String>,
    /// Environment of started replicas, KEY=VALUE (repeatable).
    #[arg(long = "replica-env", value_name = "KEY=VALUE")]
    pub replica_env: Vec<String>,
    /// A replica already running, host:port (twice: active, then backup).
    #[arg(long = "replica", value_name = "ADDR")]
    pub replicas: Vec<String>,
    /// The signal page the replicas publish on (running replicas), or
    /// where to create it (started replicas).
    #[arg(long)]
    pub page: Option<PathBuf>,
    /// The lanes of running replicas in --page (e.g. `0,1`).
    #[arg(long, value_name = "LIST")]
    pub lanes: Option<String>,
    /// Pause bound: this many times a request's demand.
    #[arg(long)]
    pub pause_factor: Option<f64>,
    /// The smallest pause bound, ms.
    #[arg(long)]
    pub pause_floor_ms: Option<f64>,
    /// A running request whose thread is off the CPU this long is paused,
    /// ms (0: off).
    #[arg(long)]
    pub offcpu_ms: Option<f64>,
    /// A replica whose JVM's world has been stopped this long (a
    /// collection, a safepoint: its VM Thread or GC threads running, seen
    /// by BPF) is paused, ms (0: off; needs root and BTF).
    #[arg(long)]
    pub jvm_pause_ms: Option<f64>,
    /// How often the signal page is read, µs.
    #[arg(long)]
    pub poll_us: Option<u64>,
    /// Warm-up requests after a pause or restart (0: none).
    #[arg(long)]
    pub warm_requests: Option<u32>,
    /// Their rate, per second.
    #[arg(long)]
    pub warm_rps: Option<f64>,
    /// HTTP methods that may be sent to both replicas (default GET,HEAD).
    #[arg(long, value_name = "LIST")]
    pub idempotent_methods: Option<String>,
    /// SCHED_FIFO priority of the proxy's threads (0: normal).
    #[arg(long)]
    pub fifo_priority: Option<u8>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Stop after this many seconds (0: at Ctrl-C).
    #[arg(long, default_value_t = 0.0)]
    pub duration_s: f64,
    /// A status line every this many seconds (0: none).
    #[arg(long, default_value_t = 5.0)]
    pub status_s: f64,
    /// Save the record at exit here (JSON).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

fn cpu_pair(what: &str, s: &str) -> anyhow::Result<Vec<u32>> {
    let v = elfen_topo::parse_cpu_list(s).with_context(|| format!("{what} {s:?}"))?;
    anyhow::ensure!(v.len() == 2, "{what} {s:?}: two values, one per replica");
    Ok(v)
}

impl RunArgs {
    /// The configuration these arguments describe.
    pub fn config(&self) -> anyhow::Result<ProxyConfig> {
        let mut c = match &self.config {
            Some(p) => ProxyConfig::load(p)?,
            None => ProxyConfig::default(),
        };
        if let Some(v) = &self.listen {
            c.listen = v.clone();
        }
        if let Some(v) = &self.protocol {
            c.protocol = Protocol::parse(v)?;
        }
        if let Some(v) = &self.hedge {
            c.hedge = HedgeMode::parse(v)?;
        }
        if let Some(v) = self.hedge_pct {
            c.timeout.pct = v;
        }
        if let Some(v) = &self.replica_command {
            c.replicas.command = Some(v.clone());
        }
        if let Some(v) = &self.replica_cpus {
            c.replicas.cpus = cpu_pair("--replica-cpus", v)?;
        }
        for kv in &self.replica_env {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--replica-env {kv:?}: expected KEY=VALUE"))?;
            c.replicas.env.insert(k.into(), v.into());
        }
        if !self.replicas.is_empty() {
            c.replicas.addrs = self.replicas.clone();
        }
        if let Some(v) = &self.page {
            c.replicas.page = Some(v.clone());
        }
        if let Some(v) = &self.lanes {
            c.replicas.lanes = cpu_pair("--lanes", v)?;
        }
        if let Some(v) = self.pause_factor {
            c.pause.factor = v;
        }
        if let Some(v) = self.pause_floor_ms {
            c.pause.floor_ms = v;
        }
        if let Some(v) = self.offcpu_ms {
            c.pause.offcpu_ms = v;
        }
        if let Some(v) = self.jvm_pause_ms {
            c.pause.jvm_pause_ms = v;
        }
        if let Some(v) = self.poll_us {
            c.pause.poll_us = v;
        }
        if let Some(v) = self.warm_requests {
            c.warm.requests = v;
        }
        if let Some(v) = self.warm_rps {
            c.warm.rps = v;
        }
        if let Some(v) = &self.idempotent_methods {
            c.idempotent.http_methods = v.split(',').map(|m| m.trim().to_string()).collect();
        }
        if let Some(v) = self.fifo_priority {
            c.fifo_priority = v;
        }
        if let Some(v) = &self.metrics {
            c.metrics = Some(v.clone());
        }
        c.validate()?;
        Ok(c)
    }
}

fn run(a: RunArgs) -> anyhow::Result<()> {
    let stop = elfen_cmd::interrupt::install();
    let cfg = a.config()?;
    let proxy = Proxy::start(cfg.clone(), stop)?;
    let s = proxy.summary();
    eprintln!(
        "elfen proxy: listening on {} ({}, hedge {}); replicas {}{}",
        proxy.addr(),
        cfg.protocol.name(),
        cfg.hedge.name(),
        s.replicas
            .iter()
            .map(|r| format!(
                "{} {}{}{}",
                r.name,
                r.addr,
                r.pid.map(|p| format!(" pid {p}")).unwrap_or_default(),
                r.cpu.map(|c| format!(" cpu {c}")).unwrap_or_default()
            ))
            .collect::<Vec<_>>()
            .join(", "),
        proxy
            .metrics_addr()
            .map(|m| format!("; metrics http://{m}/metrics"))
            .unwrap_or_default()
    );
    if cfg.hedge == HedgeMode::Signal {
        let jvm = proxy.jvm();
        eprintln!(
            "elfen proxy: jvm_pause signal (BPF watch of each JVM): A {}; B {}",
            jvm.describe(0),
            jvm.describe(1)
        );
    }
    if proxy.page().is_none() {
        eprintln!(
            "elfen proxy: no signal page: a pause is known from a timeout alone (give --page where the replicas publish)"
        );
    }
    let t0 = Instant::now();
    let mut next_status = a.status_s;
    while !stop.load(Ordering::Relaxed) {
        let el = t0.elapsed().as_secs_f64();
        if a.duration_s > 0.0 && el >= a.duration_s {
            break;
        }
        if a.status_s > 0.0 && el >= next_status {
            eprintln!("elfen proxy: {}", proxy.summary().line());
            next_status += a.status_s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = proxy.stop();
    println!("elfen proxy: {:.1} s: {}", s.duration_s, s.line());
    if let Some(p) = &a.json {
        elfen_results::save_json(&s, p).with_context(|| format!("writing {}", p.display()))?;
        println!("elfen proxy: record written to {}", p.display());
    }
    Ok(())
}

impl Sub {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Sub::Run(a) => run(a),
            Sub::DemoService(a) => crate::demo::run(a),
        }
    }
}
