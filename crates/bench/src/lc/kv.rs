//! An unmodified **key-value service** as the LC (`--lc redis`, `--lc
//! memcached`, any `[lc.kv]`): the server from its argv template, pinned to
//! the request lane before `exec` (every thread it starts stays there),
//! ready when it answers its ping, its key space filled and checked before
//! any load — timed, and said with the server's resident size next to the
//! last-level cache's. It publishes nothing: its busy state comes from
//! the kernel (`--lc-signal bpf`) or nobody.

use super::text::{self, TextProtocol};
use super::{LcService, Protocol};
use crate::error::{BenchError, Result};
use crate::spec::KvSpec;
use elfen_load::LoadError;
use elfen_wire::launch::{self as external, External, Spawn};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A running key-value service; stopped and reaped on drop.
pub struct KvService {
    ext: External,
    addr: SocketAddr,
    proto: Arc<TextProtocol>,
    notes: Vec<String>,
}

/// Pre-flight: the server's program is installed; the error names its
/// Debian package and the list that installs it.
pub fn preflight(kv: &KvSpec) -> Result<()> {
    let exe = &kv.command[0];
    let found = if exe.contains('/') {
        std::path::Path::new(exe).is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(exe).is_file()))
    };
    if found {
        Ok(())
    } else {
        Err(BenchError::Service(format!(
            "{}: {exe} is not installed: install the Debian package {} (scripts/deps/bench.apt \
             lists it)",
            kv.name, kv.package
        )))
    }
}

impl KvService {
    /// Starts `kv` on `port`, pinned to `cpu`, and fills its key space.
    /// Fails — naming the command and its stderr's tail, nothing left
    /// running — if it cannot start, never answers, or the key space is not
    /// there after filling.
    pub fn start(
        kv: &KvSpec,
        port: u16,
        cpu: u32,
        startup_timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<KvService> {
        preflight(kv)?;
        let proto = Arc::new(TextProtocol::new(kv).map_err(BenchError::Config)?);
        let vars: Vec<(&'static str, String)> =
            vec![("port", port.to_string()), ("cpu", cpu.to_string())];
        let argv = kv
            .command
            .iter()
            .map(|a| external::fill(a, &vars, "lc.kv.command").map_err(BenchError::from))
            .collect::<Result<Vec<_>>>()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let p = Arc::clone(&proto);
        let ready = move |a: SocketAddr| text::ping(a, &p);
        let ext = External::spawn(
            Spawn {
                argv,
                vars: &vars,
                pin_cpu: Some(cpu),
                ready: &ready,
                startup_timeout,
            },
            addr,
            stop,
        )?;
        let (how, took) = text::populate(addr, &proto).map_err(|e| match e {
            LoadError::Service(m) => {
                BenchError::Service(format!("{m}; its stderr ends with:\n{}", ext.stderr_tail()))
            }
            e => e.into(),
        })?;
        let llc = elfen_topo::SystemInfo::collect().l3_bytes;
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let note = format!(
            "{}: filled {} keys of {} B with {how} in {:.2} s; the server holds {} (last-level \
             cache {}): requests for random keys miss the cache as a large store's do",
            kv.name,
            kv.keys,
            kv.value_bytes,
            took.as_secs_f64(),
            elfen_cmd::proc::rss_bytes(ext.pid())
                .map_or("? MiB".into(), |b| format!("{:.0} MiB", mib(b))),
            llc.map_or("not known".into(), |b| format!("{:.0} MiB", mib(b)))
        );
        Ok(KvService {
            ext,
            addr,
            proto,
            notes: vec![note],
        })
    }
}

impl LcService for KvService {
    fn describe(&self) -> String {
        format!(
            "{} (unmodified, {} keys): {}",
            self.proto.name,
            self.proto.keys,
            self.ext.command()
        )
    }
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn child_pid(&self) -> Option<u32> {
        Some(self.ext.pid())
    }
    fn worker_tids(&self) -> Vec<u32> {
        Vec::new()
    }
    fn check(&mut self) -> Result<()> {
        Ok(self.ext.check_alive()?)
    }
    fn protocol(&self) -> Protocol {
        Protocol::Text(Arc::clone(&self.proto))
    }
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
}
