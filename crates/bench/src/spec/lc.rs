//! The LC side of a spec: which service ([`LcSpec`]), what requests it is
//! sent ([`RequestsKind`], [`DemandSpec`]) and the built-in chase's knobs
//! ([`ChaseSpec`]).

use super::positive;
use crate::error::BenchError;
use elfen_load::demand::RequestsKind;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which LC service the harness drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceKind {
    /// The built-in pointer-chase service, in the harness's process.
    Builtin,
    /// A server started from `lc.command` that speaks the LC wire protocol
    /// (`docs/lc-protocol.md`).
    External,
    /// An unmodified key-value server speaking its own protocol (RESP or a
    /// text line protocol), described by `[lc.kv]` (Redis, memcached).
    Kv,
}

/// Who publishes the request lane's busy state on the signal page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LcSignal {
    /// The service, through the LC API (`request_begin` / `request_end`).
    Api,
    /// Nobody in the service: an unmodified service (its busy time is then
    /// counted from the responses' service times).
    None,
    /// The kernel: the service publishes nothing and the daemon's LC signal
    /// writer (BPF on `sched_switch`, or its /proc poll fallback) writes
    /// the request lane's LC line from which of the service's threads runs
    /// on it — an unmodified service, as `elfen daemon` protects it. The
    /// service runs in a process of its own (the built-in one as
    /// `elfen serve`).
    Bpf,
}

impl LcSignal {
    /// `api` or `none`.
    pub fn name(self) -> &'static str {
        match self {
            LcSignal::Api => "api",
            LcSignal::None => "none",
            LcSignal::Bpf => "bpf",
        }
    }

    /// What the service itself is told to do: `api` or `none` (with the
    /// kernel signal the service publishes nothing).
    pub fn service_mode(self) -> &'static str {
        match self {
            LcSignal::Api => "api",
            LcSignal::None | LcSignal::Bpf => "none",
        }
    }

    /// Whether the page's LC line is written (by the service or the
    /// kernel signal's writer).
    pub fn writes_lc_line(self) -> bool {
        self != LcSignal::None
    }
}

/// The LC service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LcSpec {
    /// Built-in or external.
    pub service: ServiceKind,
    /// External: the command line (split on whitespace; `{port}`, `{page}`,
    /// `{lane}`, `{cpu}`, `{side_cpus}`, `{lc_signal}` are substituted and
    /// also passed as `ELFEN_*` environment variables).
    pub command: Option<String>,
    /// Who publishes the request lane's state.
    pub signal: LcSignal,
    /// What the requests carry.
    pub requests: RequestsKind,
    /// Term queries: the tasks file (default: the shipped one).
    pub tasks_path: Option<PathBuf>,
    /// External: how long the service may take to answer its first ping, s.
    pub startup_timeout_s: f64,
    /// With `signal = "bpf"`: busy edges published at the LC thread's
    /// wake-up, before its switch-in (default true); false: at the switch-in.
    pub announce_wakeups: bool,
    /// `service = "kv"`: the key-value service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv: Option<super::KvSpec>,
}

impl Default for LcSpec {
    fn default() -> Self {
        LcSpec {
            service: ServiceKind::Builtin,
            command: None,
            signal: LcSignal::Api,
            requests: RequestsKind::Demand,
            tasks_path: None,
            startup_timeout_s: 60.0,
            announce_wakeups: true,
            kv: None,
        }
    }
}

impl LcSpec {
    /// `--lc lucene`: the Lucene search service (`bindings/java/lucene`)
    /// as an external process over an index of `copies` copies of the
    /// corpus, publishing through the LC API, sent the tasks file's term
    /// queries, with a start-up long enough for its index check and JIT
    /// warm-up ([`crate::lc::lucene`]); its acceptor and dispatchers at
    /// nice [`crate::lc::lucene::SIDE_NICE`] (not real-time: beside the
    /// JVM's own normal threads that stalls the JVM).
    pub fn lucene(copies: u32) -> LcSpec {
        LcSpec {
            service: ServiceKind::External,
            command: Some(crate::lc::lucene::command(copies)),
            signal: LcSignal::Api,
            requests: RequestsKind::TermQueries,
            tasks_path: None,
            startup_timeout_s: crate::lc::lucene::STARTUP_TIMEOUT_S,
            announce_wakeups: true,
            kv: None,
        }
    }

    /// `--lc redis`, `--lc memcached`: the unmodified key-value service
    /// `kv`, pinned to the request lane, sent a random key per request,
    /// its busy state from the kernel (`signal = "bpf"`: it publishes
    /// nothing).
    pub fn kv(kv: super::KvSpec) -> LcSpec {
        LcSpec {
            service: ServiceKind::Kv,
            command: None,
            signal: LcSignal::Bpf,
            requests: RequestsKind::Keys,
            tasks_path: None,
            startup_timeout_s: 60.0,
            announce_wakeups: true,
            kv: Some(kv),
        }
    }

    /// Whether the service is the Lucene one (a Java writer of the page).
    pub fn is_java(&self) -> bool {
        self.service == ServiceKind::External
            && self
                .command
                .as_deref()
                .is_some_and(crate::lc::lucene::is_lucene)
    }

    pub(super) fn validate(&self) -> Result<(), BenchError> {
        match (self.service, self.command.as_deref().map(str::trim)) {
            (ServiceKind::External, None | Some("")) => {
                return Err(BenchError::Config(
                    "lc.service = \"external\" needs lc.command (the server's command line)".into(),
                ));
            }
            (ServiceKind::Kv, Some(c)) if !c.is_empty() => {
                return Err(BenchError::Config(
                    "lc.command is given but lc.service is \"kv\", whose argv is lc.kv.command"
                        .into(),
                ));
            }
            (ServiceKind::Builtin, Some(c)) if !c.is_empty() => {
                return Err(BenchError::Config(
                    "lc.command is given but lc.service is \"builtin\": set lc.service = \"external\""
                        .into(),
                ));
            }
            _ => {}
        }
        if self.service == ServiceKind::Builtin && self.requests != RequestsKind::Demand {
            return Err(BenchError::Config(
                "the built-in service runs work requests: lc.requests must be \"demand\"".into(),
            ));
        }
        match (self.service, &self.kv) {
            (ServiceKind::Kv, None) => {
                return Err(BenchError::Config(
                    "lc.service = \"kv\" needs an [lc.kv] table (configs/bench/redis.toml shows \
                     one)"
                        .into(),
                ));
            }
            (ServiceKind::Kv, Some(kv)) => {
                kv.validate()?;
                if self.requests != RequestsKind::Keys {
                    return Err(BenchError::Config(
                        "a key-value service is sent keys: lc.requests must be \"keys\"".into(),
                    ));
                }
                if self.signal == LcSignal::Api {
                    return Err(BenchError::Config(format!(
                        "lc.signal = \"api\": {} is unmodified and publishes nothing; use \"bpf\" \
                         (the kernel's context switches) or \"none\"",
                        kv.name
                    )));
                }
            }
            (_, Some(_)) => {
                return Err(BenchError::Config(
                    "[lc.kv] is given but lc.service is not \"kv\"".into(),
                ));
            }
            (_, None) if self.requests == RequestsKind::Keys => {
                return Err(BenchError::Config(
                    "lc.requests = \"keys\" needs a key-value service (lc.service = \"kv\")".into(),
                ));
            }
            _ => {}
        }
        positive("lc.startup_timeout_s", self.startup_timeout_s)
    }
}

/// The built-in chase service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChaseSpec {
    /// Size of the pointer-chase working set each request walks, KiB. The
    /// default (4 MiB) is larger than a core's L2 on common servers and
    /// inside a share of the L3, so requests live in the LLC, where a
    /// memory-streaming co-runner can slow them.
    pub working_set_kib: u64,
    /// How long the start-up calibration of the chase rate runs, ms.
    pub calibrate_ms: u64,
}

impl Default for ChaseSpec {
    fn default() -> Self {
        ChaseSpec {
            working_set_kib: 4 * 1024,
            calibrate_ms: 300,
        }
    }
}

impl ChaseSpec {
    pub(super) fn validate(&self) -> Result<(), BenchError> {
        if self.working_set_kib < 64 {
            return Err(BenchError::Config(format!(
                "chase.working_set_kib must be at least 64, got {}",
                self.working_set_kib
            )));
        }
        if self.calibrate_ms == 0 {
            return Err(BenchError::Config(
                "chase.calibrate_ms must be at least 1".into(),
            ));
        }
        Ok(())
    }
}
