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
    /// Busy periods of fixed work instead of fixed time: this many steps
    /// of a pointer chase over `chase_kib` (so memory interference makes
    /// them longer; `busy_us` is then ignored).
    #[arg(long, default_value_t = 0)]
    pub chase_steps: u64,
    /// The pointer chase's working set, KiB.
    #[arg(long, default_value_t = 4096)]
    pub chase_kib: u64,
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
    /// Stream through this many MiB (memory-bound) instead of spinning
    /// in registers.
    #[arg(long, default_value_t = 0)]
    pub stream_mib: u64,
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
    let chase = (a.chase_steps > 0).then(|| Chase::new(a.chase_kib * 1024, &mut rng));
    let mut at = 0usize;
    while end.is_none_or(|e| Instant::now() < e) {
        if let Some(c) = &chase {
            at = c.walk(at, a.chase_steps);
        } else if a.busy_us > 0 {
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
    if a.stream_mib > 0 {
        let mut buf = vec![0u64; (a.stream_mib as usize * 1024 * 1024) / 8];
        let mut v = 0u64;
        loop {
            for x in buf.iter_mut() {
                *x = v;
            }
            v = black_box(v.wrapping_add(1));
        }
    }
    loop {
        spin_for(Duration::from_secs(1));
    }
}

/// A random cyclic pointer chase over a working set: each step one
/// dependent load, so its time is the memory's latency.
struct Chase {
    next: Vec<usize>,
}

impl Chase {
    /// A single cycle over `bytes` / 64 cache lines in random order.
    fn new(bytes: u64, rng: &mut impl Rng) -> Chase {
        let lines = (bytes / 64).max(2) as usize;
        let mut order: Vec<usize> = (0..lines).collect();
        for i in (1..lines).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        // one u64 slot per cache line (stride 8 words)
        let mut next = vec![0usize; lines * 8];
        for w in 0..lines {
            next[order[w] * 8] = order[(w + 1) % lines] * 8;
        }
        Chase { next }
    }

    /// `steps` dependent loads from slot `at`; returns where it ended.
    fn walk(&self, mut at: usize, steps: u64) -> usize {
        for _ in 0..steps {
            at = black_box(self.next[at]);
        }
        at
    }
}
