//! **LC services** the harness drives, behind one interface
//! ([`LcService`]), all over one wire protocol ([`elfen_wire`],
//! `docs/lc-protocol.md`):
//!
//! - [`builtin`]: the pointer-chase service in the harness's own process
//!   (the default), or in its own process as `elfen serve` ([`serve`]);
//! - external ([`elfen_wire::launch`]): any server started from a command line — `elfen serve`,
//!   the Lucene search server ([`lucene`]: `--lc lucene`), or one of yours;
//! - [`kv`]: an unmodified key-value server in its own protocol ([`text`]:
//!   RESP or text lines) — Redis, memcached, any `[lc.kv]`.
//!
//! What the harness learns from a service is the same for all: its
//! responses (status; service and queueing times where the protocol
//! carries them), the request lane's busy time from the signal page's LC
//! line (when the service or the kernel signal publishes it), and which
//! process and threads are its own.

pub mod builtin;
pub mod chase;
pub mod kv;
pub mod serve;

/// What the requests carry, the text protocols and the Lucene service's
/// settings live with the load kit (`elfen-load`), which the operator's
/// commands share.
pub use elfen_load::conn::Protocol;
pub use elfen_load::{lucene, requests, tasks, text};

use crate::error::{BenchError, Result};
use crate::spec::{BenchSpec, LcSignal, ServiceKind};
use elfen_cmd::proc::SchedClass;
use elfen_results::Distribution;
use elfen_shm::Page;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// What the harness needs of an LC service.
pub trait LcService: Send {
    /// What it is, in words, for the run record.
    fn describe(&self) -> String;
    /// Where the load generator connects.
    fn addr(&self) -> SocketAddr;
    /// The service's own process, when it is not the harness's (its CPU
    /// time is then neither "foreign" nor the harness's).
    fn child_pid(&self) -> Option<u32>;
    /// Threads of the harness's own process that serve requests (the
    /// built-in worker): kept out of the harness's CPU share.
    fn worker_tids(&self) -> Vec<u32>;
    /// Starts recording the request lane's idle periods, where the service
    /// can.
    fn start_idle_recording(&self) {}
    /// Stops recording and returns the idle periods (µs), where recorded.
    fn stop_idle_recording(&self) -> Option<Distribution> {
        None
    }
    /// Ok while the service runs; an error naming it once it has died.
    fn check(&mut self) -> Result<()> {
        Ok(())
    }
    /// The built-in chase's calibration (steps per µs, cache-hot).
    fn chase_steps_per_us(&self) -> Option<f64> {
        None
    }
    /// The protocol it speaks.
    fn protocol(&self) -> Protocol {
        Protocol::Wire
    }
    /// What its start found that the run should say (e.g. how its data
    /// was loaded).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Where a service runs.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The request lane's CPU.
    pub request_cpu: u32,
    /// The CPUs of its side threads (acceptor, dispatchers).
    pub side_cpus: Vec<u32>,
    /// Their scheduling class (built-in service).
    pub side_sched: SchedClass,
    /// The signal page and the request lane's index in it.
    pub page: Arc<Page>,
    /// The request lane's index.
    pub lane: u32,
    /// The `elfen` executable (for `elfen serve`).
    pub elfen_exe: std::path::PathBuf,
}

/// The port to use: the one asked for, or a free one.
fn pick_port(port: u16) -> Result<u16> {
    if port != 0 {
        return Ok(port);
    }
    let l = builtin::bind(0)?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| BenchError::io("finding a free port", e))
}

/// A service about to start: checks that can fail before any load (the
/// port), done in pre-flight.
#[derive(Debug)]
pub enum Prepared {
    /// The built-in service's listening socket.
    Builtin(TcpListener),
    /// The port an external service will listen on.
    External(u16),
}

/// Pre-flight: binds the built-in service's port (a taken port fails
/// here), or checks an external service's port is free.
pub fn prepare(spec: &BenchSpec) -> Result<Prepared> {
    match spec.lc.service {
        ServiceKind::Builtin if spec.lc.signal != LcSignal::Bpf => {
            Ok(Prepared::Builtin(builtin::bind(spec.port)?))
        }
        ServiceKind::Builtin | ServiceKind::External | ServiceKind::Kv => {
            let port = pick_port(spec.port)?;
            drop(builtin::bind(port)?);
            Ok(Prepared::External(port))
        }
    }
}

/// The built-in service in the harness's process.
struct InProcess(builtin::Service);

impl LcService for InProcess {
    fn describe(&self) -> String {
        "built-in pointer-chase service (in the harness's process)".into()
    }
    fn addr(&self) -> SocketAddr {
        self.0.addr()
    }
    fn child_pid(&self) -> Option<u32> {
        None
    }
    fn worker_tids(&self) -> Vec<u32> {
        vec![self.0.worker_tid()]
    }
    fn start_idle_recording(&self) {
        self.0.idle().start();
    }
    fn stop_idle_recording(&self) -> Option<Distribution> {
        Some(self.0.idle().stop())
    }
    fn chase_steps_per_us(&self) -> Option<f64> {
        Some(self.0.steps_per_us())
    }
}

struct Spawned(elfen_wire::launch::External, SocketAddr);

impl LcService for Spawned {
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
    fn check(&mut self) -> Result<()> {
        Ok(self.0.check_alive()?)
    }
}

/// The built-in service as its own process (`elfen serve` of this
/// executable), for the kernel signal, which must tell the service's
/// threads from the harness's.
fn builtin_serve_command(exe: &std::path::Path, spec: &BenchSpec) -> String {
    format!(
        "{} serve --port {{port}} --cpu {{cpu}} --side-cpus {{side_cpus}} --page {{page}} \
         --lane {{lane}} --signal {{lc_signal}} --side-fifo-priority 10 --working-set-kib {} \
         --calibrate-ms {}",
        exe.display(),
        spec.chase.working_set_kib,
        spec.chase.calibrate_ms
    )
}

/// Starts the service `prepared` for, at `at`.
pub fn start(
    spec: &BenchSpec,
    prepared: Prepared,
    at: &Placement,
    stop: &AtomicBool,
) -> Result<Box<dyn LcService>> {
    match prepared {
        Prepared::Builtin(listener) => {
            let svc = builtin::Service::start(
                listener,
                builtin::ServiceConfig {
                    request_cpu: at.request_cpu,
                    side_cpus: at.side_cpus.clone(),
                    side_sched: at.side_sched,
                    working_set_bytes: (spec.chase.working_set_kib * 1024) as usize,
                    calibrate_ms: spec.chase.calibrate_ms,
                    page: (spec.lc.signal == LcSignal::Api).then(|| (at.page.clone(), at.lane)),
                    trace: None,
                },
            )?;
            Ok(Box::new(InProcess(svc)))
        }
        Prepared::External(port) if spec.lc.service == ServiceKind::Kv => {
            let kv = spec.lc.kv.as_ref().expect("validated: kv has its table");
            Ok(Box::new(kv::KvService::start(
                kv,
                port,
                at.request_cpu,
                Duration::from_secs_f64(spec.lc.startup_timeout_s),
                stop,
            )?))
        }
        Prepared::External(port) => {
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let command = match (&spec.lc.command, spec.lc.service) {
                (Some(c), ServiceKind::External) => c.clone(),
                // the built-in service with the kernel signal: in its own process
                _ => builtin_serve_command(&at.elfen_exe, spec),
            };
            let launch = elfen_wire::launch::Launch {
                command,
                vars: vec![
                    ("port", port.to_string()),
                    ("page", at.page.path().display().to_string()),
                    ("lane", at.lane.to_string()),
                    ("cpu", at.request_cpu.to_string()),
                    ("side_cpus", elfen_topo::format_cpu_list(&at.side_cpus)),
                    ("lc_signal", spec.lc.signal.service_mode().to_string()),
                ],
                startup_timeout: Duration::from_secs_f64(spec.lc.startup_timeout_s),
            };
            let ext = elfen_wire::launch::External::start(&launch, addr, stop)?;
            Ok(Box::new(Spawned(ext, addr)))
        }
    }
}
