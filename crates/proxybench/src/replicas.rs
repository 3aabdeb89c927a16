//! The bench's replicas: the service's command line (`lucene`, `{lucene}`,
//! `{copies}`, `{elfen}` expanded), the two replicas of one variant on a
//! page of their own, started and restarted as the variant says, and the
//! temporary directory they live in.

use crate::error::Result;
use crate::spec::{BenchSpec, Variant};
use anyhow::Context;
use elfen_proxy::ProxyError;
use elfen_proxy::config::Protocol;
use elfen_proxy::config::Side;
use elfen_proxy::launch::Spawned;
use elfen_shm::Page;
use elfen_wire::launch::Launch;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The command line of the service: `lucene` is `elfen bench --lc
/// lucene`'s; `{lucene}` the Lucene launcher, `{copies}` the copies that
/// command serves (`ELFEN_LUCENE_COPIES`, else 40), `{elfen}` this
/// executable. A Lucene command is checked before anything starts (jar,
/// corpus, index).
pub fn service_command(spec: &BenchSpec) -> anyhow::Result<String> {
    use elfen_bench::lc::lucene;
    let c = spec.service.command.trim();
    let c = if c == "lucene" {
        lucene::command(lucene::copies_setting()?)
    } else {
        let exe = std::env::current_exe().context("finding this executable")?;
        let mut c = c.replace("{elfen}", &exe.display().to_string());
        if c.contains("{lucene}") {
            c = c.replace("{lucene}", &lucene::launcher().display().to_string());
        }
        if c.contains("{copies}") {
            c = c.replace("{copies}", &lucene::copies_setting()?.to_string());
        }
        c
    };
    if elfen_bench::lc::lucene::is_lucene(&c) {
        elfen_bench::lc::lucene::preflight(&c)?;
    }
    Ok(c)
}

/// The request-lane CPUs of replicas A and B.
pub fn replica_cpus(spec: &BenchSpec) -> Result<[u32; 2]> {
    if let [a, b] = spec.service.cpus.as_slice() {
        return Ok([*a, *b]);
    }
    let all = elfen_topo::current_affinity()
        .map_err(|e| ProxyError::Config(format!("reading the CPU affinity: {e}")))?;
    match all.as_slice() {
        [a, b, ..] => Ok([*a, *b]),
        _ => Err(ProxyError::Config("two replicas need two CPUs; set service.cpus".into()).into()),
    }
}

/// The two replicas of one variant, started by the bench, and the page
/// they publish on.
pub struct Replicas {
    /// The page (one request lane per replica).
    pub page: Page,
    spawned: [Option<Spawned>; 2],
    /// Their addresses.
    pub addrs: [SocketAddr; 2],
    /// Their request-lane CPUs.
    pub cpus: [u32; 2],
    launches: Vec<Launch>,
    variant: Variant,
    protocol: Protocol,
    timeout: Duration,
}

impl Replicas {
    /// Starts `v`'s replicas (only A when `only_a`: B's port and lane stay
    /// reserved, unused) on a page in `dir`.
    pub fn start(
        spec: &BenchSpec,
        command: &str,
        v: &Variant,
        dir: &Path,
        only_a: bool,
        stop: &AtomicBool,
    ) -> Result<Replicas> {
        let cpus = replica_cpus(spec)?;
        let page = elfen_proxy::proxy::create_page(&dir.join(format!("page-{}", v.name)), cpus)?;
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
            let mut side: Vec<u32> = match spec.service.side {
                Side::Others => all.iter().copied().filter(|&c| c != cpu).collect(),
                Side::Own => Vec::new(),
            };
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
            cpus,
            launches,
            variant: v.clone(),
            protocol: spec.service.protocol,
            timeout: Duration::from_secs_f64(spec.service.startup_timeout_s),
        };
        me.restart_one(0, stop)?;
        if !only_a {
            me.restart_one(1, stop)?;
        }
        Ok(me)
    }

    /// Stops both replicas and starts them again.
    pub fn restart(&mut self, stop: &AtomicBool) -> Result<()> {
        for r in 0..2 {
            self.restart_one(r, stop)?;
        }
        Ok(())
    }

    /// Stops replica `r` (if running) and starts it again.
    pub fn restart_one(&mut self, r: usize, stop: &AtomicBool) -> Result<()> {
        if let Some(mut x) = self.spawned[r].take() {
            x.terminate();
        }
        self.spawned[r] = Some(Spawned::start(
            &self.launches[r],
            &self.variant.env,
            self.protocol,
            self.addrs[r],
            self.timeout,
            stop,
        )?);
        Ok(())
    }

    /// The process of replica `r`, if it runs.
    pub fn pid(&self, r: usize) -> Option<u32> {
        self.spawned[r].as_ref().map(Spawned::pid)
    }

    /// The CPUs other than replica `r`'s request lane (its side CPUs: where
    /// a client of it runs).
    pub fn side_cpus(&self, r: usize) -> Vec<u32> {
        let all = elfen_topo::current_affinity().unwrap_or_default();
        let side: Vec<u32> = all.into_iter().filter(|&c| c != self.cpus[r]).collect();
        if side.is_empty() {
            vec![self.cpus[r]]
        } else {
            side
        }
    }
}

/// A temporary directory under /dev/shm (the replicas' pages), removed at
/// the end, on error and on Ctrl-C.
pub fn tempfile_dir() -> anyhow::Result<TempDir> {
    let base = if Path::new("/dev/shm").is_dir() {
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
pub struct TempDir {
    path: PathBuf,
    _guard: elfen_cmd::interrupt::CleanupGuard,
}

impl TempDir {
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
