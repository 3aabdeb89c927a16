//! `elfen serve`: the built-in pointer-chase LC service as a process of its
//! own, speaking the LC wire protocol — so the harness can drive it as an
//! external service (`lc.service = "external"`) and compare with the
//! in-process run, and so a user can see what an external service must do.
//! Every option also comes from the `ELFEN_*` variable the harness sets.

use crate::lc::builtin::{self, ServiceConfig};
use crate::spec::LcSignal;
use anyhow::Context;
use clap::Args;
use elfen_cmd::proc::SchedClass;
use elfen_shm::{Access, Page};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Arguments of `elfen serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TCP port on 127.0.0.1.
    #[arg(long, env = "ELFEN_PORT")]
    pub port: u16,
    /// The request lane's CPU (the worker is pinned there).
    #[arg(long, env = "ELFEN_CPU")]
    pub cpu: u32,
    /// CPUs of the acceptor and dispatcher threads (e.g. `1` or `1-3`;
    /// default: every CPU but the request lane's).
    #[arg(long, env = "ELFEN_SIDE_CPUS")]
    pub side_cpus: Option<String>,
    /// The signal page to publish on (with `--signal api`).
    #[arg(long, env = "ELFEN_PAGE")]
    pub page: Option<PathBuf>,
    /// The request lane's index in the page.
    #[arg(long, env = "ELFEN_LANE", default_value_t = 0)]
    pub lane: u32,
    /// `api`: publish busy/idle and the queue length through the LC API;
    /// `none`: publish nothing (an unmodified service).
    #[arg(long, env = "ELFEN_LC_SIGNAL", default_value = "api")]
    pub signal: String,
    /// Pointer-chase working set, KiB.
    #[arg(long, default_value_t = 4096)]
    pub working_set_kib: u64,
    /// Start-up calibration of the chase, ms.
    #[arg(long, default_value_t = 300)]
    pub calibrate_ms: u64,
    /// Real-time (SCHED_FIFO) priority of the acceptor and dispatchers (0 =
    /// normal; needs root).
    #[arg(long, default_value_t = 0)]
    pub side_fifo_priority: u8,
}

/// Runs the service until SIGINT or SIGTERM.
pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let signal = match a.signal.as_str() {
        "api" => LcSignal::Api,
        "none" => LcSignal::None,
        other => anyhow::bail!("--signal {other:?}: expected api or none"),
    };
    let side_cpus = match &a.side_cpus {
        Some(s) => elfen_topo::parse_cpu_list(s).with_context(|| format!("--side-cpus {s:?}"))?,
        None => {
            let all = elfen_topo::current_affinity().context("reading the CPU affinity")?;
            let others: Vec<u32> = all.iter().copied().filter(|&c| c != a.cpu).collect();
            if others.is_empty() { all } else { others }
        }
    };
    let page =
        match (signal, &a.page) {
            (LcSignal::Api, Some(p)) => Some((
                Arc::new(Page::attach(p, Access::Lc).with_context(|| {
                    format!("attaching the signal page {} as the LC", p.display())
                })?),
                a.lane,
            )),
            (LcSignal::Api, None) => {
                anyhow::bail!("--signal api needs --page (or ELFEN_PAGE): the page to publish on")
            }
            (LcSignal::None | LcSignal::Bpf, _) => None,
        };
    let stop = elfen_cmd::interrupt::install();
    let svc = builtin::Service::start(
        builtin::bind(a.port)?,
        ServiceConfig {
            request_cpu: a.cpu,
            side_cpus,
            side_sched: match a.side_fifo_priority {
                0 => SchedClass::Other,
                p => SchedClass::Fifo(p),
            },
            working_set_bytes: (a.working_set_kib * 1024) as usize,
            calibrate_ms: a.calibrate_ms,
            page,
            trace: None,
        },
    )?;
    eprintln!(
        "elfen serve: listening on {} (worker on cpu {}, {:.1} chase steps/us, signal {})",
        svc.addr(),
        a.cpu,
        svc.steps_per_us(),
        signal.name()
    );
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    svc.stop();
    Ok(())
}
