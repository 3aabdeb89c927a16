//! **LC IPC** for dynamic refresh (Figure 9d): instructions per cycle of the
//! request lane, read from hardware counters by the batch thread.
//!
//! At attach, a batch thread whose policy is dynamic refresh opens a
//! `perf_event_open` group {cycles, instructions} counting everything that
//! runs on the *request lane's CPU* (pid −1, cpu N; needs
//! `perf_event_paranoid` ≤ 0 or CAP_PERFMON). Its slow path samples the group
//! with one `read()` at most every [`SAMPLE_EVERY_NS`] (50 µs) and passes
//! the IPC since the previous sample to the policy.
//!
//! Cost: one `read()` syscall on a perf fd (≈1–2 µs on bare metal, more in a
//! VM) per 50 µs of co-running, i.e. a few percent of a co-running batch
//! thread, and nothing at all while it runs alone or naps (the slow path only
//! runs then at request begin/end).
//!
//! Where the machine has no hardware counters (many virtual machines:
//! `perf_event_open` says ENOENT) the open fails, the thread reports
//! "no hardware counters: dynamic refresh behaves as refresh budget", and
//! passes `lc_ipc: None`, which `elfen-policy` treats exactly so.

use elfen_shm::Clock;
use elfen_topo::perf;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Minimum spacing of two counter reads.
pub const SAMPLE_EVERY_NS: u64 = 50_000;

/// Opens one hardware counter on `cpu` (all tasks), in `group` if given.
fn open_counter(config: u64, cpu: u32, group: Option<&OwnedFd>) -> std::io::Result<OwnedFd> {
    perf::open_hw(
        config,
        -1,
        cpu as libc::c_int,
        group.map(|g| g.as_fd()),
        perf::FORMAT_GROUP,
        perf::EXCLUDE_HV,
    )
}

/// The request lane's counters and the last IPC computed from them.
#[derive(Debug)]
pub(crate) struct IpcSampler {
    leader: OwnedFd,
    _instructions: OwnedFd,
    every_ticks: u64,
    last_at: u64,
    last_cycles: u64,
    last_instructions: u64,
    ipc: Option<f64>,
}

impl IpcSampler {
    /// Opens the counters of `cpu`, or says why not (the text the thread
    /// reports at attach).
    pub(crate) fn open(cpu: u32, clock: Clock) -> Result<IpcSampler, String> {
        let f = crate::nap::machine_features();
        if !f.perf_hw_counters {
            return Err(format!(
                "no hardware counters: dynamic refresh behaves as refresh budget (perf_event_open: {})",
                f.perf_hw_counters_reason
                    .as_deref()
                    .unwrap_or("unavailable")
            ));
        }
        let fail = |e: std::io::Error| {
            format!(
                "no hardware counters: dynamic refresh behaves as refresh budget \
                 (perf_event_open of cpu {cpu}'s cycles/instructions: {e}; counting another \
                 cpu needs perf_event_paranoid <= 0 or CAP_PERFMON)"
            )
        };
        let leader = open_counter(perf::HW_CPU_CYCLES, cpu, None).map_err(fail)?;
        let instructions = open_counter(perf::HW_INSTRUCTIONS, cpu, Some(&leader)).map_err(fail)?;
        let mut s = IpcSampler {
            leader,
            _instructions: instructions,
            every_ticks: clock.ns_to_ticks(SAMPLE_EVERY_NS),
            last_at: clock.now(),
            last_cycles: 0,
            last_instructions: 0,
            ipc: None,
        };
        let (c, i) = s
            .read()
            .ok_or_else(|| fail(std::io::Error::last_os_error()))?;
        (s.last_cycles, s.last_instructions) = (c, i);
        Ok(s)
    }

    /// `(cycles, instructions)` so far.
    fn read(&self) -> Option<(u64, u64)> {
        // PERF_FORMAT_GROUP: { nr, values[nr] }.
        let mut buf = [0u64; 3];
        // SAFETY: reading at most size_of(buf) bytes into buf from our fd.
        let n = unsafe {
            libc::read(
                self.leader.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                std::mem::size_of_val(&buf),
            )
        };
        (n == std::mem::size_of_val(&buf) as isize && buf[0] == 2).then_some((buf[1], buf[2]))
    }

    /// The request lane's IPC over the last sample window, re-sampled if the
    /// last read is older than [`SAMPLE_EVERY_NS`]. No allocation.
    pub(crate) fn sample(&mut self, now: u64) -> Option<f64> {
        if now.wrapping_sub(self.last_at) < self.every_ticks {
            return self.ipc;
        }
        if let Some((c, i)) = self.read() {
            let (dc, di) = (
                c.wrapping_sub(self.last_cycles),
                i.wrapping_sub(self.last_instructions),
            );
            if dc > 0 {
                self.ipc = Some(di as f64 / dc as f64);
            }
            (self.last_cycles, self.last_instructions, self.last_at) = (c, i, now);
        }
        self.ipc
    }
}
