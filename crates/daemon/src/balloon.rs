//! `balloon-helper` (a hidden subcommand of `elfen daemon`, for the
//! memory tests and measurements): a batch program whose memory grows at a
//! fixed rate — anonymous memory allocated in chunks and every page
//! written, so it is really used — up to a ceiling, then held until the
//! process is killed. Each chunk is reported on stdout as
//! `allocated <MiB> at <CLOCK_MONOTONIC ns>` (unless `--quiet`).

use clap::Args;
use std::io::Write;
use std::time::{Duration, Instant};

/// Arguments of `balloon-helper`.
#[derive(Debug, Clone, Args)]
pub struct BalloonArgs {
    /// Growth, MiB per second.
    #[arg(long, default_value_t = 256)]
    pub rate_mib_s: u64,
    /// Stop growing at this size, MiB (then hold it).
    #[arg(long, default_value_t = 1024)]
    pub max_mib: u64,
    /// Allocation step, MiB.
    #[arg(long, default_value_t = 8)]
    pub chunk_mib: u64,
    /// Wait this long before growing, ms.
    #[arg(long, default_value_t = 0)]
    pub delay_ms: u64,
    /// Print nothing.
    #[arg(long)]
    pub quiet: bool,
}

/// Grows, then holds until killed.
pub fn balloon_helper(a: &BalloonArgs) -> anyhow::Result<()> {
    elfen_cmd::proc::kill_me_with_parent();
    anyhow::ensure!(
        a.rate_mib_s > 0 && a.chunk_mib > 0,
        "rate and chunk must be positive"
    );
    std::thread::sleep(Duration::from_millis(a.delay_ms));
    let chunk = (a.chunk_mib << 20) as usize;
    let step = Duration::from_secs_f64(a.chunk_mib as f64 / a.rate_mib_s as f64);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let t0 = Instant::now();
    let mut held: Vec<*mut u8> = Vec::new();
    let mut out = std::io::stdout();
    let mut mib = 0;
    while mib + a.chunk_mib <= a.max_mib {
        // SAFETY: a fresh private anonymous mapping, kept for the process's
        // life (it is held until the process is killed).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                chunk,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        anyhow::ensure!(
            p != libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let p = p.cast::<u8>();
        for off in (0..chunk).step_by(page) {
            // SAFETY: inside the mapping just made.
            unsafe { std::ptr::write_volatile(p.add(off), 1) };
        }
        held.push(p);
        mib += a.chunk_mib;
        if !a.quiet {
            let _ = writeln!(
                out,
                "allocated {mib} at {}",
                elfen_shm::clock::monotonic_ns()
            );
            let _ = out.flush();
        }
        let due = t0 + step * held.len() as u32;
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
