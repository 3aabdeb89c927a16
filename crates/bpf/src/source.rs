//! [`Source`]: the one type a daemon holds, BPF when it loads, the coarse
//! poll fallback otherwise, with the same methods either way.

use crate::contract::{LcEvent, SlotSnapshot};
use crate::error::BpfError;
use crate::poll::PollSource;
use crate::sched::SchedSource;
use crate::slots::SlotReader;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// How to open a signal source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// CPUs that emit LC busy/idle transition events (default: all). Every
    /// CPU's slot is kept either way.
    pub watched_cpus: Option<Vec<u32>>,
    /// Poll fallback: scan interval in µs (default 1000, at least 100).
    pub poll_interval_us: u64,
    /// [`Source::open`]: use the poll fallback when BPF cannot load
    /// (default true); false makes that an error.
    pub fallback: bool,
    /// BPF: announce each busy edge at the LC task's wake-up (a WAKE event
    /// before its switch-in; default true), so a reader can act before the
    /// LC runs. The interrupts that wake the reader then come before the
    /// LC's switch-in instead of after it.
    pub announce_wakeups: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            watched_cpus: None,
            poll_interval_us: 1000,
            fallback: true,
            announce_wakeups: true,
        }
    }
}

/// A signal source: the BPF program, or the coarse /proc poll fallback.
#[derive(Debug)]
pub enum Source {
    /// The BPF program on `sched_switch` (sub-microsecond visibility).
    Bpf(Box<SchedSource>),
    /// The /proc poll fallback (detection within about one scan interval),
    /// with the reason BPF could not be used.
    Poll(PollSource, String),
}

macro_rules! both {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Source::Bpf($s) => $e,
            Source::Poll($s, _) => $e,
        }
    };
}

impl Source {
    /// Opens the BPF source; if it cannot load and `opts.fallback` is set,
    /// the poll fallback instead (the reason is kept for [`Source::describe`]).
    pub fn open(opts: &Options) -> Result<Source, BpfError> {
        match SchedSource::open(opts) {
            Ok(s) => Ok(Source::Bpf(Box::new(s))),
            Err(e) if opts.fallback => Source::open_poll(opts, e.to_string()),
            Err(e) => Err(e),
        }
    }

    /// Opens the poll fallback directly; `why` is reported by [`Source::describe`].
    pub fn open_poll(opts: &Options, why: String) -> Result<Source, BpfError> {
        let p = PollSource::open(
            Duration::from_micros(opts.poll_interval_us),
            opts.watched_cpus.as_deref(),
        )?;
        Ok(Source::Poll(p, why))
    }

    /// Whether this is the BPF source.
    pub fn is_bpf(&self) -> bool {
        matches!(self, Source::Bpf(_))
    }

    /// Number of possible CPUs (slots).
    pub fn cpus(&self) -> u32 {
        both!(self, s => s.cpus())
    }

    /// A reader of the per-CPU slots for any thread.
    pub fn slots(&self) -> &SlotReader {
        both!(self, s => s.slots())
    }

    /// Whether an LC task runs on `cpu` now (one load).
    #[inline]
    pub fn lc_busy(&self, cpu: u32) -> bool {
        self.slots().lc_busy(cpu)
    }

    /// A consistent copy of `cpu`'s slot.
    pub fn snapshot(&self, cpu: u32) -> Result<SlotSnapshot, BpfError> {
        self.slots().snapshot(cpu)
    }

    /// Watches process `tgid` (all its threads are LC).
    pub fn watch_tgid(&mut self, tgid: u32) -> Result<(), BpfError> {
        both!(self, s => s.watch_tgid(tgid))
    }

    /// Stops watching `tgid`; returns whether it was watched.
    pub fn unwatch_tgid(&mut self, tgid: u32) -> Result<bool, BpfError> {
        both!(self, s => s.unwatch_tgid(tgid))
    }

    /// Watches a cgroup v2 by id (BPF only: the poll fallback needs the
    /// directory, see [`Source::watch_cgroup_path`]).
    pub fn watch_cgroup_id(&mut self, id: u64) -> Result<(), BpfError> {
        match self {
            Source::Bpf(s) => s.watch_cgroup_id(id),
            Source::Poll(..) => Err(BpfError::Unsupported(
                "watch a cgroup by id (it reads cgroup.procs: use watch_cgroup_path)",
            )),
        }
    }

    /// Watches the cgroup v2 at `dir` and every group below it; returns
    /// its id.
    pub fn watch_cgroup_path(&mut self, dir: &Path) -> Result<u64, BpfError> {
        both!(self, s => s.watch_cgroup_path(dir))
    }

    /// Stops watching the subtree at `dir` (watched as `id`; the directory
    /// may be gone); returns whether it was watched.
    pub fn unwatch_cgroup(&mut self, dir: &Path, id: u64) -> Result<bool, BpfError> {
        match self {
            Source::Bpf(s) => s.unwatch_cgroup_id(id),
            Source::Poll(p, _) => Ok(p.unwatch_cgroup_path(dir)),
        }
    }

    /// Makes exactly `cpus` emit transition events.
    pub fn set_watched_cpus(&mut self, cpus: &[u32]) -> Result<(), BpfError> {
        both!(self, s => s.set_watched_cpus(cpus))
    }

    /// Calls `f` for every LC transition event queued or arriving within
    /// `timeout` (sleeping, not spinning); returns how many.
    pub fn wait_events(
        &mut self,
        timeout: Duration,
        f: impl FnMut(LcEvent),
    ) -> Result<usize, BpfError> {
        both!(self, s => s.wait_events(timeout, f))
    }

    /// Calls `f` for every LC transition event available now, without
    /// waiting; returns how many.
    pub fn consume_events(&mut self, f: impl FnMut(LcEvent)) -> Result<usize, BpfError> {
        match self {
            Source::Bpf(s) => s.consume_events(f),
            Source::Poll(s, _) => s.wait_events(Duration::ZERO, f),
        }
    }

    /// BPF: whether the reader consumes in a loop without sleeping (events
    /// are then sent without waking it; see `SchedSource::set_reader_polling`).
    /// The poll fallback wakes nobody: nothing to do.
    pub fn set_reader_polling(&mut self, on: bool) {
        if let Source::Bpf(s) = self {
            s.set_reader_polling(on);
        }
    }

    /// BPF: the threads whose switches are no transitions (the reader and
    /// the threads it wakes; see `SchedSource::set_quiet_tids`). The poll
    /// fallback reads /proc and is woken by nobody: nothing to do.
    pub fn set_quiet_tids(&mut self, tids: &[u32]) -> Result<(), BpfError> {
        match self {
            Source::Bpf(s) => s.set_quiet_tids(tids),
            Source::Poll(..) => Ok(()),
        }
    }

    /// One line for run-time reports: which source, how it works, and for
    /// the fallback why BPF was not used.
    pub fn describe(&self) -> String {
        match self {
            Source::Bpf(s) => s.describe(),
            Source::Poll(p, why) => format!("{} — BPF not used: {why}", p.describe()),
        }
    }
}
