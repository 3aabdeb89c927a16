//! `elfen isobench io`: disk I/O. The LC service is a `fio` latency probe
//! (small random reads, direct I/O, at a low fixed rate — an LC reading
//! from disk); the batch work is two `fio` jobs (sequential, a third reads
//! and two thirds writes, 1 MiB blocks, direct, queue depth 16 — PerfIso's
//! disk bully) in two batch groups of weights 2 and 1. All on a loop device
//! over a file of the root disk (direct I/O to the file), made for the run.
//! Per run, three configurations side by side (order rotating):
//!
//! - **alone**: the probe only;
//! - **batch**: the probe and the batch jobs, no limits;
//! - **limited**: the same, under the daemon's `[io]` budget (read and
//!   write bandwidth shared by weight, deficit-weighted round robin).
//!
//! Measured: the probe's completion latency percentiles (fio's own), and
//! what each batch group moved (its cgroup counters).

use crate::common::*;
use crate::fixtures::LoopDevice;
use anyhow::{Context, Result};
use elfen_results::Stat;
use serde::Serialize;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// Parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// Repetitions of the three configurations.
    pub runs: usize,
    /// The probe's reads per second.
    pub probe_iops: u32,
    /// The probe's block size, KiB.
    pub probe_bs_kib: u32,
    /// Measured window, s (after a 2 s warm-up).
    pub window_s: u64,
    /// The batch budget (configuration `limited`), read MiB/s.
    pub budget_read_mib_s: u64,
    /// Write MiB/s.
    pub budget_write_mib_s: u64,
    /// The loop device's size, MiB.
    pub device_mib: u64,
    /// The probe's CPU.
    pub lc_cpu: u32,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            runs: 3,
            probe_iops: 200,
            probe_bs_kib: 4,
            window_s: 10,
            budget_read_mib_s: 16,
            budget_write_mib_s: 32,
            device_mib: 2048,
            lc_cpu: 0,
        }
    }
}

/// One configuration's run.
#[derive(Debug, Clone, Serialize)]
pub struct Rep {
    /// `alone`, `batch` or `limited`.
    pub config: &'static str,
    /// The run.
    pub run: usize,
    /// Probe completion latency p50, µs.
    pub p50_us: f64,
    /// p99, µs.
    pub p99_us: f64,
    /// p99.9, µs.
    pub p999_us: f64,
    /// Probe reads completed.
    pub probe_ios: u64,
    /// Per batch group: (name, MiB/s read, MiB/s written) over the window.
    pub batch_mib_s: Vec<(String, f64, f64)>,
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
    /// Batch throughput, read + write, MiB/s, all groups.
    pub batch_mib_s: Stat,
}

/// The summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Per configuration.
    pub configs: Vec<ConfigSummary>,
}

const CONFIGS: [&str; 3] = ["alone", "batch", "limited"];

fn fio_probe(p: &Params, dev: &str) -> Command {
    let mut c = Command::new("fio");
    c.args([
        "--name=lc",
        &format!("--filename={dev}"),
        "--rw=randread",
        &format!("--bs={}k", p.probe_bs_kib),
        "--direct=1",
        "--ioengine=psync",
        &format!("--rate_iops={}", p.probe_iops),
        "--rate_process=poisson",
        "--time_based",
        "--ramp_time=2",
        &format!("--runtime={}", p.window_s),
        "--size=50%",
        &format!("--cpus_allowed={}", p.lc_cpu),
        "--output-format=json",
    ])
    .stdin(Stdio::null())
    .stderr(Stdio::null());
    c
}

/// `fio` JSON → (p50, p99, p99.9 µs, ios).
fn parse_probe(json: &str) -> Result<(f64, f64, f64, u64)> {
    let v: serde_json::Value = serde_json::from_str(json).context("fio's JSON")?;
    let r = &v["jobs"][0]["read"];
    let pct = |k: &str| {
        r["clat_ns"]["percentile"][k]
            .as_f64()
            .map(|ns| ns / 1e3)
            .with_context(|| format!("no clat percentile {k} in fio's output"))
    };
    Ok((
        pct("50.000000")?,
        pct("99.000000")?,
        pct("99.900000")?,
        r["total_ios"].as_u64().unwrap_or(0),
    ))
}

fn batch_argv(dev: &str, p: &Params) -> Vec<String> {
    [
        "fio",
        "--name=batch",
        &format!("--filename={dev}"),
        "--rw=rw",
        "--rwmixread=33",
        "--bs=1M",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--offset=50%",
        "--size=50%",
        "--time_based",
        &format!("--runtime={}", p.window_s + 60),
        "--output=/dev/null",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn read_group(name: &str, numbers: &str) -> (u64, u64) {
    let d = std::path::Path::new("/sys/fs/cgroup/blkio")
        .join(format!("elfen-daemon-{}/{name}", std::process::id()));
    let text =
        std::fs::read_to_string(d.join("blkio.throttle.io_service_bytes")).unwrap_or_default();
    let get = |op: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{numbers} {op} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (get("Read"), get("Write"))
}

fn one(
    p: &Params,
    run: usize,
    config: &'static str,
    disk: &LoopDevice,
    dir: &std::path::Path,
) -> Result<Rep> {
    let dev = disk.dev.display().to_string();
    let toml = |a: &[String]| {
        a.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let groups: Vec<(&str, u32)> = if config == "alone" {
        vec![]
    } else {
        vec![("batch-a", 200), ("batch-b", 100)]
    };
    let mut batch = String::new();
    for (name, w) in &groups {
        batch += &format!(
            "[[batch]]\nname = \"{name}\"\nmode = \"cooperative\"\nio_weight = {w}\ncommand = [{}]\n",
            toml(&batch_argv(&dev, p))
        );
    }
    if groups.is_empty() {
        batch +=
            "[[batch]]\nname = \"idle\"\nmode = \"cooperative\"\ncommand = [\"sleep\", \"3600\"]\n";
    }
    let budget = if config == "limited" {
        format!(
            "[io]\ndevice = \"{dev}\"\nread_bps = \"{}M\"\nwrite_bps = \"{}M\"\nperiod_ms = 200\n",
            p.budget_read_mib_s, p.budget_write_mib_s
        )
    } else {
        String::new()
    };
    let lc = ChildGuard::new(Command::new("sleep").arg("3600").spawn()?);
    let config_text = format!(
        "page = \"/dev/shm/elfen-isobench-{}-io\"\nstate_file = \"{}\"\npairs = \"0:1\"\nundelegated = \"root\"\n\
         [metrics]\nlisten = \"\"\n[memory]\nmin_available = 0\npressure = \"off\"\n{budget}\
         [lc]\npid = {}\n{batch}",
        std::process::id(),
        dir.join("state.json").display(),
        lc.pid()
    );
    let d = InProcessDaemon::start(&config_text, true)?;
    // the probe's ramp (2 s) is the batch's warm-up; counters from its end
    let probe = fio_probe(p, &dev)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting fio (scripts/deps/isolation.apt)")?;
    std::thread::sleep(std::time::Duration::from_secs(2));
    let before: Vec<(u64, u64)> = groups
        .iter()
        .map(|(n, _)| read_group(n, &disk.numbers))
        .collect();
    let t0 = std::time::Instant::now();
    let out = probe.wait_with_output()?;
    let secs = t0.elapsed().as_secs_f64();
    let after: Vec<(u64, u64)> = groups
        .iter()
        .map(|(n, _)| read_group(n, &disk.numbers))
        .collect();
    d.stop()?;
    drop(lc);
    anyhow::ensure!(out.status.success(), "fio (the probe) failed");
    let (p50_us, p99_us, p999_us, probe_ios) = parse_probe(&String::from_utf8_lossy(&out.stdout))?;
    let mib = |b: u64| b as f64 / f64::from(1 << 20) / secs;
    Ok(Rep {
        config,
        run,
        p50_us,
        p99_us,
        p999_us,
        probe_ios,
        batch_mib_s: groups
            .iter()
            .zip(before.iter().zip(&after))
            .map(|((n, _), (b, a))| (n.to_string(), mib(a.0 - b.0), mib(a.1 - b.1)))
            .collect(),
    })
}

/// Runs the benchmark.
pub fn measure(p: &Params, stop: &AtomicBool) -> Result<Vec<Rep>> {
    need_root()?;
    let dir = crate::memory::tempfile_dir("io")?;
    let disk = LoopDevice::new(dir.path(), p.device_mib)?;
    let mut reps = Vec::new();
    for run in 0..p.runs {
        for k in 0..CONFIGS.len() {
            anyhow::ensure!(!stop.load(Ordering::Relaxed), "interrupted");
            let config = CONFIGS[(k + run) % CONFIGS.len()];
            let r = one(p, run, config, &disk, dir.path())?;
            eprintln!(
                "run {run} {config:<8}: probe p50 {:.0} µs, p99 {:.0} µs; batch {}",
                r.p50_us,
                r.p99_us,
                r.batch_mib_s
                    .iter()
                    .map(|(n, rd, wr)| format!("{n} {rd:.1}+{wr:.1} MiB/s"))
                    .collect::<Vec<_>>()
                    .join(", ")
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
                    p50_us: f(&|x| x.p50_us),
                    p99_us: f(&|x| x.p99_us),
                    p999_us: f(&|x| x.p999_us),
                    batch_mib_s: f(&|x| x.batch_mib_s.iter().fold(0.0, |a, b| a + b.1 + b.2)),
                }
            })
            .collect(),
    }
}

/// The table.
pub fn render(s: &Summary) -> String {
    let mut o = String::from(
        "config    probe p50 µs           probe p99 µs           probe p99.9 µs         batch MiB/s\n",
    );
    for c in &s.configs {
        o += &format!(
            "{:<9} {:<22} {:<22} {:<22} {}\n",
            c.config,
            fmt_stat(&c.p50_us, 0),
            fmt_stat(&c.p99_us, 0),
            fmt_stat(&c.p999_us, 0),
            fmt_stat(&c.batch_mib_s, 1)
        );
    }
    o
}

/// The result file.
pub fn report(p: &Params, reps: Vec<Rep>, load_before: [f64; 3]) -> Report<Params, Rep, Summary> {
    Report {
        schema: SCHEMA,
        bench: "io",
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
