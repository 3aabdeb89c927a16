//! The helper programs the benchmarks start (`elfen isobench helper …`,
//! hidden): a small LC server speaking the harness's wire protocol
//! (`docs/lc-protocol.md`) on any address — so it can serve inside a
//! network namespace — whose requests read a working set that may be a
//! file's pages (evictable: what major faults measure), and the daemon's
//! helpers (its balloon, its LC helper, the daemon itself, run here so a
//! benchmark can SIGKILL it).

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use elfen_wire::{self as wire, Kind, RequestHeader, Response, Status};
use rand::Rng;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Instant;

/// `elfen isobench helper …`.
#[derive(Debug, Parser)]
#[command(name = "helper", no_binary_name = true)]
pub struct HelperCli {
    #[command(subcommand)]
    cmd: Helper,
}

/// The helpers.
#[derive(Debug, Subcommand)]
pub enum Helper {
    /// The LC server.
    LcServer(LcServerArgs),
    /// The daemon's balloon (memory growing at a fixed rate).
    Balloon(elfen_daemon::balloon::BalloonArgs),
    /// The daemon's synthetic LC service (busy in bursts).
    LcHelper(elfen_daemon::helpers::LcHelperArgs),
    /// The daemon itself (`elfen daemon --config FILE`).
    Daemon {
        /// The configuration.
        #[arg(long)]
        config: PathBuf,
    },
}

/// Arguments of the LC server.
#[derive(Debug, Clone, clap::Args)]
pub struct LcServerArgs {
    /// Address to listen on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// CPU of the threads that serve.
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Working set, MiB: each request reads `arg` random pages of it.
    #[arg(long, default_value_t = 64)]
    pub working_set_mib: u64,
    /// Back the working set by this file's pages (created if missing):
    /// clean page cache the kernel may evict, so a request can take a
    /// major fault; without it, anonymous memory.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Set the process's command name (the daemon finds the LC by it).
    #[arg(long)]
    pub name: Option<String>,
}

/// Runs helper `args`.
pub fn run(args: &[String]) -> Result<()> {
    let cli = HelperCli::try_parse_from(args).map_err(|e| anyhow::anyhow!("{e}"))?;
    match cli.cmd {
        Helper::LcServer(a) => lc_server(&a),
        Helper::Balloon(a) => elfen_daemon::balloon::balloon_helper(&a),
        Helper::LcHelper(a) => elfen_daemon::helpers::lc_helper(&a),
        Helper::Daemon { config } => elfen_daemon::cli::run(elfen_daemon::cli::DaemonArgs {
            config: Some(config),
            check: false,
            sub: None,
        }),
    }
}

/// The working set: a mapping read one byte per touched page.
struct WorkingSet {
    base: *const u8,
    pages: usize,
    page: usize,
}

// SAFETY: read-only after set-up; the mapping lives for the process.
unsafe impl Send for WorkingSet {}
unsafe impl Sync for WorkingSet {}

impl WorkingSet {
    fn new(mib: u64, file: Option<&PathBuf>) -> Result<WorkingSet> {
        let len = (mib.max(1) << 20) as usize;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let (fd, flags) = match file {
            Some(p) => {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(p)
                    .with_context(|| format!("opening {}", p.display()))?;
                if f.metadata()?.len() < len as u64 {
                    // real blocks, so the pages are the file's, not holes
                    let chunk = vec![7u8; 1 << 20];
                    let mut w = std::io::BufWriter::new(&f);
                    for _ in 0..(len >> 20) {
                        w.write_all(&chunk)?;
                    }
                    w.flush()?;
                }
                use std::os::fd::IntoRawFd;
                (f.into_raw_fd(), libc::MAP_SHARED)
            }
            None => (-1, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS),
        };
        // SAFETY: a fresh mapping of `len` bytes (of the file, or anonymous).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        anyhow::ensure!(
            p != libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let base = p.cast::<u8>();
        for off in (0..len).step_by(page) {
            // SAFETY: inside the mapping; every page present before serving.
            unsafe {
                let v = std::ptr::read_volatile(base.add(off));
                std::ptr::write_volatile(base.add(off), v.wrapping_add(1));
            }
        }
        Ok(WorkingSet {
            base,
            pages: len / page,
            page,
        })
    }

    /// Reads `n` random pages; returns a checksum.
    fn touch(&self, n: u64, rng: &mut impl Rng) -> u64 {
        let mut sum = 0u64;
        for _ in 0..n {
            let i = rng.random_range(0..self.pages);
            // SAFETY: i < pages: inside the mapping.
            sum = sum.wrapping_add(u64::from(unsafe {
                std::ptr::read_volatile(self.base.add(i * self.page))
            }));
        }
        sum
    }
}

fn serve(mut s: TcpStream, ws: &WorkingSet, cpu: Option<u32>) -> std::io::Result<()> {
    if let Some(c) = cpu {
        let _ = elfen_topo::pin_current_thread(c);
    }
    s.set_nodelay(true)?;
    let mut rng = rand::rng();
    let mut hdr = [0u8; wire::REQUEST_HEADER];
    let mut payload = Vec::new();
    loop {
        if let Err(e) = s.read_exact(&mut hdr) {
            return if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Ok(())
            } else {
                Err(e)
            };
        }
        let h = RequestHeader::decode(&hdr);
        if h.len > wire::MAX_PAYLOAD {
            let r = Response {
                id: h.id,
                service_ns: 0,
                queued_ns: 0,
                status: Status::BadRequest,
                result: 0,
            };
            s.write_all(&r.encode())?;
            return Ok(());
        }
        payload.resize(h.len as usize, 0);
        s.read_exact(&mut payload)?;
        let t0 = Instant::now();
        let result = match h.kind {
            Kind::Work => ws.touch(h.arg, &mut rng) as u32,
            _ => 0,
        };
        let r = Response {
            id: h.id,
            service_ns: t0.elapsed().as_nanos() as u64,
            queued_ns: 0,
            status: if matches!(h.kind, Kind::Work | Kind::Ping) {
                Status::Ok
            } else {
                Status::BadRequest
            },
            result,
        };
        s.write_all(&r.encode())?;
    }
}

/// The LC server: a thread per connection, pinned to `cpu`.
pub fn lc_server(a: &LcServerArgs) -> Result<()> {
    elfen_cmd::proc::kill_me_with_parent();
    if let Some(n) = &a.name {
        let c = std::ffi::CString::new(n.as_str())?;
        // SAFETY: PR_SET_NAME reads a NUL-terminated string (cut at 15 bytes).
        unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr(), 0, 0, 0) };
    }
    let ws: &'static WorkingSet = Box::leak(Box::new(WorkingSet::new(
        a.working_set_mib,
        a.file.as_ref(),
    )?));
    let l = TcpListener::bind(a.listen).with_context(|| format!("listening on {}", a.listen))?;
    for s in l.incoming() {
        let Ok(s) = s else { continue };
        let cpu = a.cpu;
        std::thread::spawn(move || {
            let _ = serve(s, ws, cpu);
        });
    }
    Ok(())
}
