//! Helper programs for the measurements and the tests (hidden
//! subcommands `lc-helper` and `spin-helper` of `elfen daemon`): a
//! synthetic LC service that is busy in bursts on one CPU, and an
//! unmodified batch spinner. Both die with their parent.

use clap::Args;
use elfen_cmd::proc::{SchedClass, kill_me_with_parent, set_sched};
use rand::Rng;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Arguments of `lc-helper`.
#[derive(Debug, Clone, Args)]
pub struct LcHelperArgs {
    /// Run on this CPU.
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Run at SCHED_FIFO with this priority (a solid busy period).
    #[arg(long)]
    pub fifo: Option<u8>,
    /// Set the process's command name.
    #[arg(long)]
    pub name: Option<String>,
    /// Busy period length, µs (0: never busy, only sleep).
    #[arg(long, default_value_t = 0)]
    pub busy_us: u64,
    /// Shortest idle period, µs.
    #[arg(long, default_value_t = 1000)]
    pub idle_min_us: u64,
    /// Longest idle period, µs (uniform between min and max).
    #[arg(long, default_value_t = 1000)]
    pub idle_max_us: u64,
    /// Stop after this long, ms (0: until killed).
    #[arg(long, default_value_t = 0)]
    pub duration_ms: u64,
    /// Wait this long before the first burst, ms.
    #[arg(long, default_value_t = 0)]
    pub delay_ms: u64,
}

/// Arguments of `spin-helper`.
#[derive(Debug, Clone, Args)]
pub struct SpinHelperArgs {
    /// Run on this CPU.
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Run SCHED_IDLE.
    #[arg(long)]
    pub idle: bool,
}

fn prepare(cpu: Option<u32>, name: Option<&str>) -> anyhow::Result<()> {
    kill_me_with_parent();
    if let Some(c) = cpu {
        elfen_topo::pin_current_thread(c)?;
    }
    if let Some(n) = name {
        let c = std::ffi::CString::new(n)?;
        // SAFETY: PR_SET_NAME reads a NUL-terminated string (cut at 15 bytes).
        unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr(), 0, 0, 0) };
    }
    Ok(())
}

fn spin_for(d: Duration) {
    let t0 = Instant::now();
    let mut x = 0u64;
    while t0.elapsed() < d {
        for _ in 0..64 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// The synthetic LC service: busy `busy_us`, then idle for a random time
/// in `[idle_min_us, idle_max_us]` (a sleep: the CPU switches away), again.
pub fn lc_helper(a: &LcHelperArgs) -> anyhow::Result<()> {
    prepare(a.cpu, a.name.as_deref())?;
    if let Some(p) = a.fifo {
        set_sched(0, SchedClass::Fifo(p))?;
    }
    elfen_cmd::proc::set_timer_slack_ns(1000);
    std::thread::sleep(Duration::from_millis(a.delay_ms));
    let end = (a.duration_ms > 0).then(|| Instant::now() + Duration::from_millis(a.duration_ms));
    let mut rng = rand::rng();
    let (lo, hi) = (a.idle_min_us, a.idle_max_us.max(a.idle_min_us));
    while end.is_none_or(|e| Instant::now() < e) {
        if a.busy_us > 0 {
            spin_for(Duration::from_micros(a.busy_us));
        }
        std::thread::sleep(Duration::from_micros(rng.random_range(lo..=hi)));
    }
    Ok(())
}

/// The unmodified batch program: spins until killed.
pub fn spin_helper(a: &SpinHelperArgs) -> anyhow::Result<()> {
    prepare(a.cpu, None)?;
    if a.idle {
        set_sched(0, SchedClass::Idle)?;
    }
    loop {
        spin_for(Duration::from_secs(1));
    }
}
