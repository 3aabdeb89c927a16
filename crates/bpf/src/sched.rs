//! [`SchedSource`]: the BPF program on `tp_btf/sched_switch`, its maps, its
//! mmapped per-CPU slots and its transition-event ring buffer.

use crate::contract::{
    LcEvent, MAX_CGROUPS, MAX_QUIET_TIDS, MAX_TGIDS, RawEvent, SLOT_SIZE, WATCH_ON,
};
use crate::error::BpfError;
use crate::probe::{LogCapture, check_btf, check_privileges};
use crate::skel::{SchedSkel, SchedSkelBuilder};
use crate::slots::{Backing, SlotReader};
use crate::{Options, proc};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};
use std::collections::{BTreeSet, VecDeque};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The loaded, attached program and what user space holds of it.
struct Loaded {
    /// Declared first: dropped (ring unmapped) before the skeleton.
    ring: RingBuffer<'static>,
    skel: SchedSkel<'static>,
}

/// The BPF signal source: who runs on every CPU, learned at each context
/// switch, and LC busy/idle transitions of the watched CPUs.
///
/// `Send` (hand it to the daemon's thread), not `Sync`: the ring buffer has
/// one consumer. Readers on other threads take a [`SlotReader`]
/// ([`SchedSource::slots`]). Dropping it detaches the program and closes
/// every BPF object it created; nothing is pinned, so nothing outlives the
/// process (a `SlotReader` clone keeps only the slots' memory mapped).
pub struct SchedSource {
    loaded: ManuallyDrop<Loaded>,
    /// The skeleton's object storage (`Box::into_raw`), freed after `loaded`.
    storage: *mut MaybeUninit<OpenObject>,
    slots: SlotReader,
    queue: Arc<Mutex<VecDeque<LcEvent>>>,
    tgids: BTreeSet<u32>,
    cgroups: BTreeSet<u64>,
    watched_cpus: Vec<u32>,
    quiet: BTreeSet<u32>,
}

// SAFETY: `storage` is owned by this value alone (only the skeleton inside
// `loaded` refers to it); the skeleton and ring buffer are Send.
unsafe impl Send for SchedSource {}

impl std::fmt::Debug for SchedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedSource")
            .field("cpus", &self.slots.cpus())
            .field("tgids", &self.tgids)
            .field("cgroups", &self.cgroups)
            .field("watched_cpus", &self.watched_cpus)
            .finish()
    }
}

fn load_err(stage: &'static str, log: &LogCapture) -> impl FnOnce(libbpf_rs::Error) -> BpfError {
    let log_tail = log.tail();
    move |source| BpfError::Load {
        stage,
        source,
        log_tail,
    }
}

fn map_err(map: &'static str, op: String) -> impl FnOnce(libbpf_rs::Error) -> BpfError {
    move |source| BpfError::Map { map, op, source }
}

/// Opens, sizes and loads the skeleton into `storage`, then attaches it.
fn load(
    storage: &'static mut MaybeUninit<OpenObject>,
    cpus: u32,
) -> Result<SchedSkel<'static>, BpfError> {
    let log = LogCapture::start();
    let mut open = SchedSkelBuilder::default()
        .open(storage)
        .map_err(|e| load_err("open", &log)(e))?;
    open.maps
        .cpu_slots
        .set_max_entries(cpus)
        .map_err(|e| load_err("open", &log)(e))?;
    open.maps
        .watch_cpus
        .set_max_entries(cpus)
        .map_err(|e| load_err("open", &log)(e))?;
    open.maps
        .announced
        .set_max_entries(cpus)
        .map_err(|e| load_err("open", &log)(e))?;
    let mut skel = open.load().map_err(|e| load_err("load", &log)(e))?;
    skel.attach().map_err(|e| load_err("attach", &log)(e))?;
    Ok(skel)
}

/// Maps the `cpu_slots` array read-only.
fn map_slots(skel: &SchedSkel<'_>, cpus: u32) -> Result<SlotReader, BpfError> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let len = (cpus as usize * SLOT_SIZE).div_ceil(page) * page;
    let fd = skel.maps.cpu_slots.as_fd().as_raw_fd();
    // SAFETY: a fresh shared read-only mapping of a BPF_F_MMAPABLE array fd.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(BpfError::Mmap(std::io::Error::last_os_error()));
    }
    Ok(SlotReader::new(Backing::Mmap { ptr, len }, cpus))
}

impl SchedSource {
    /// Loads the program, attaches it to `tp_btf/sched_switch`, maps the
    /// per-CPU slots and sets up the event ring buffer. Every CPU in
    /// `opts.watched_cpus` (default: all) emits transition events.
    ///
    /// Fails with [`BpfError::NotPrivileged`], [`BpfError::NoBtf`] or
    /// [`BpfError::Load`] (stage and the tail of libbpf's log, which holds
    /// the verifier's complaint) when BPF cannot be used here.
    pub fn open(opts: &Options) -> Result<SchedSource, BpfError> {
        check_privileges()?;
        check_btf()?;
        let cpus = proc::possible_cpus()?;
        let storage: *mut MaybeUninit<OpenObject> = Box::into_raw(Box::new(MaybeUninit::uninit()));
        // SAFETY: storage is a fresh heap allocation that only the skeleton
        // refers to and that lives until SchedSource's Drop frees it (after
        // the skeleton is gone), so treating the borrow as 'static is sound.
        let skel = match load(unsafe { &mut *storage }, cpus) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: the skeleton (and anything written to storage) is
                // dropped; nothing refers to storage any more.
                drop(unsafe { Box::from_raw(storage) });
                return Err(e);
            }
        };
        let queue: Arc<Mutex<VecDeque<LcEvent>>> = Arc::default();
        let built = (|| {
            let slots = map_slots(&skel, cpus)?;
            let q = Arc::clone(&queue);
            let mut rb = RingBufferBuilder::new();
            rb.add(&skel.maps.events, move |data: &[u8]| {
                if let Some(raw) = RawEvent::from_bytes(data) {
                    q.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_back(raw.into());
                }
                0
            })
            .map_err(map_err("events", "ring buffer setup".into()))?;
            let ring = rb
                .build()
                .map_err(map_err("events", "ring buffer setup".into()))?;
            Ok::<_, BpfError>((slots, ring))
        })();
        let (slots, ring) = match built {
            Ok(v) => v,
            Err(e) => {
                drop(skel);
                // SAFETY: as above.
                drop(unsafe { Box::from_raw(storage) });
                return Err(e);
            }
        };
        let mut me = SchedSource {
            loaded: ManuallyDrop::new(Loaded { ring, skel }),
            storage,
            slots,
            queue,
            tgids: BTreeSet::new(),
            cgroups: BTreeSet::new(),
            watched_cpus: Vec::new(),
            quiet: BTreeSet::new(),
        };
        if let Some(bss) = me.loaded.skel.maps.bss_data.as_deref_mut() {
            // SAFETY: a valid, aligned field of the mmapped .bss map; the BPF
            // program only reads it.
            unsafe {
                std::ptr::write_volatile(
                    &mut bss.announce_wakeups,
                    u32::from(opts.announce_wakeups),
                )
            };
        }
        let all: Vec<u32> = (0..cpus).collect();
        me.set_watched_cpus(opts.watched_cpus.as_deref().unwrap_or(&all))?;
        Ok(me)
    }

    fn skel(&self) -> &SchedSkel<'static> {
        &self.loaded.skel
    }

    /// Number of possible CPUs (slots).
    pub fn cpus(&self) -> u32 {
        self.slots.cpus()
    }

    /// A reader of the per-CPU slots for any thread (cheap to clone).
    pub fn slots(&self) -> &SlotReader {
        &self.slots
    }

    /// A consistent copy of `cpu`'s slot.
    pub fn snapshot(&self, cpu: u32) -> Result<crate::SlotSnapshot, BpfError> {
        self.slots.snapshot(cpu)
    }

    /// Whether an LC task runs on `cpu` now (one load).
    #[inline]
    pub fn lc_busy(&self, cpu: u32) -> bool {
        self.slots.lc_busy(cpu)
    }

    /// Treats every thread of process `tgid` as LC from its next context
    /// switch on. Fails on pid 0, a pid that does not exist or names a
    /// thread rather than a process, or a full watch map.
    pub fn watch_tgid(&mut self, tgid: u32) -> Result<(), BpfError> {
        proc::check_process(tgid)?;
        if !self.tgids.contains(&tgid) && self.tgids.len() >= MAX_TGIDS as usize {
            return Err(BpfError::TooMany {
                what: "processes",
                limit: MAX_TGIDS,
            });
        }
        self.skel()
            .maps
            .watch_tgids
            .update(&tgid.to_ne_bytes(), &WATCH_ON.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("watch_tgids", format!("insert {tgid}")))?;
        self.tgids.insert(tgid);
        Ok(())
    }

    /// Stops treating process `tgid` as LC (from each CPU's next switch on).
    /// Returns whether it was watched.
    pub fn unwatch_tgid(&mut self, tgid: u32) -> Result<bool, BpfError> {
        if !self.tgids.remove(&tgid) {
            return Ok(false);
        }
        self.skel()
            .maps
            .watch_tgids
            .delete(&tgid.to_ne_bytes())
            .map_err(map_err("watch_tgids", format!("delete {tgid}")))?;
        Ok(true)
    }

    /// Treats every task in the cgroup v2 with this id **or in any group
    /// below it** as LC (the id is the cgroup directory's inode number; see
    /// [`proc::cgroup_id`]). The program checks a task's cgroup and its
    /// ancestors, up to [`crate::contract::MAX_CGROUP_DEPTH`] levels, and caches the answer
    /// per cgroup until the watched set changes.
    pub fn watch_cgroup_id(&mut self, id: u64) -> Result<(), BpfError> {
        if id == 0 {
            return Err(BpfError::CgroupZero);
        }
        if !self.cgroups.contains(&id) && self.cgroups.len() >= MAX_CGROUPS as usize {
            return Err(BpfError::TooMany {
                what: "cgroups",
                limit: MAX_CGROUPS,
            });
        }
        self.skel()
            .maps
            .watch_cgroups
            .update(&id.to_ne_bytes(), &WATCH_ON.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("watch_cgroups", format!("insert {id}")))?;
        self.cgroups.insert(id);
        self.publish_cgroup_count();
        Ok(())
    }

    /// Stops watching the cgroup with this id; returns whether it was watched.
    pub fn unwatch_cgroup_id(&mut self, id: u64) -> Result<bool, BpfError> {
        if !self.cgroups.remove(&id) {
            return Ok(false);
        }
        self.skel()
            .maps
            .watch_cgroups
            .delete(&id.to_ne_bytes())
            .map_err(map_err("watch_cgroups", format!("delete {id}")))?;
        self.publish_cgroup_count();
        Ok(true)
    }

    /// [`SchedSource::watch_cgroup_id`] of a cgroup v2 directory.
    pub fn watch_cgroup_path(&mut self, dir: &Path) -> Result<u64, BpfError> {
        let id = proc::cgroup_id(dir)?;
        self.watch_cgroup_id(id)?;
        Ok(id)
    }

    /// Tells the program how many cgroups are watched (it skips the
    /// cgroup lookup while there are none) and that the watched set changed
    /// (a new `watch_gen`: its cached per-cgroup verdicts are decided again).
    fn publish_cgroup_count(&mut self) {
        let n = self.cgroups.len() as u32;
        if let Some(bss) = self.loaded.skel.maps.bss_data.as_deref_mut() {
            // SAFETY: valid, aligned fields of the mmapped .bss map; the BPF
            // program only reads them. The generation is written after the
            // map change it announces (volatile writes stay in order).
            unsafe {
                let next = std::ptr::read_volatile(&bss.watch_gen).wrapping_add(1);
                std::ptr::write_volatile(&mut bss.nr_watched_cgroups, n);
                std::ptr::write_volatile(&mut bss.watch_gen, next);
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The cgroup ids watched (subtree roots).
    pub fn watched_cgroups(&self) -> impl Iterator<Item = u64> + '_ {
        self.cgroups.iter().copied()
    }

    /// Makes exactly `cpus` emit transition events (the slots of every CPU
    /// are kept either way). A CPU's `WATCHED` flag follows at its next switch.
    pub fn set_watched_cpus(&mut self, cpus: &[u32]) -> Result<(), BpfError> {
        let count = self.cpus();
        if let Some(&cpu) = cpus.iter().find(|&&c| c >= count) {
            return Err(BpfError::CpuOutOfRange { cpu, count });
        }
        for cpu in 0..count {
            let v: u32 = if cpus.contains(&cpu) { WATCH_ON } else { 0 };
            self.skel()
                .maps
                .watch_cpus
                .update(&cpu.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("watch_cpus", format!("set cpu {cpu} to {v}")))?;
        }
        let mut v = cpus.to_vec();
        v.sort_unstable();
        v.dedup();
        self.watched_cpus = v;
        Ok(())
    }

    /// The CPUs that emit transition events.
    pub fn watched_cpus(&self) -> &[u32] {
        &self.watched_cpus
    }

    /// The processes watched.
    pub fn watched_tgids(&self) -> impl Iterator<Item = u32> + '_ {
        self.tgids.iter().copied()
    }

    /// Calls `f` for every transition event already queued or arriving
    /// within `timeout` (the thread sleeps in epoll on the ring buffer; the
    /// program wakes it at each event). Returns how many were delivered.
    pub fn wait_events(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(LcEvent),
    ) -> Result<usize, BpfError> {
        let mut n = self.drain(&mut f);
        if n == 0 {
            self.loaded
                .ring
                .poll(timeout)
                .map_err(map_err("events", "poll".into()))?;
            n = self.drain(&mut f);
        }
        Ok(n)
    }

    /// Tells the program whether the reader consumes without sleeping
    /// ([`SchedSource::consume_events`] in a loop): events are then sent
    /// without waking it. Clear it, then consume once more, before sleeping
    /// in [`SchedSource::wait_events`] (events sent meanwhile are seen by
    /// its first look; later ones wake it again).
    pub fn set_reader_polling(&mut self, on: bool) {
        if let Some(bss) = self.loaded.skel.maps.bss_data.as_deref_mut() {
            // SAFETY: a valid, aligned field of the mmapped .bss map; the BPF
            // program only reads it.
            unsafe { std::ptr::write_volatile(&mut bss.reader_polling, u32::from(on)) };
        }
    }

    /// Makes the switches of threads `tids` no transitions (the reader and
    /// the threads it wakes, which run on the CPUs it watches): a CPU one of
    /// them runs on keeps the LC state it had. Without it, such a thread
    /// woken on a watched CPU where an LC task runs would make that task's
    /// preemption an idle edge and its return a busy edge that wakes it
    /// again, and so on for as long as the LC task is runnable there. The
    /// set replaces the previous one; at most
    /// [`crate::contract::MAX_QUIET_TIDS`] threads.
    pub fn set_quiet_tids(&mut self, tids: &[u32]) -> Result<(), BpfError> {
        let want: BTreeSet<u32> = tids.iter().copied().filter(|&t| t != 0).collect();
        if want.len() > MAX_QUIET_TIDS as usize {
            return Err(BpfError::TooMany {
                what: "quiet threads",
                limit: MAX_QUIET_TIDS,
            });
        }
        for &t in self.quiet.difference(&want) {
            // a thread gone from the set: its entry goes (an error here
            // leaves it in the map, which only keeps it quiet)
            let _ = self.skel().maps.quiet_tids.delete(&t.to_ne_bytes());
        }
        for &t in want.difference(&self.quiet) {
            self.skel()
                .maps
                .quiet_tids
                .update(&t.to_ne_bytes(), &WATCH_ON.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("quiet_tids", format!("insert {t}")))?;
        }
        self.quiet = want;
        Ok(())
    }

    /// Delivers the events available now, without waiting.
    pub fn consume_events(&mut self, mut f: impl FnMut(LcEvent)) -> Result<usize, BpfError> {
        self.loaded
            .ring
            .consume()
            .map_err(map_err("events", "consume".into()))?;
        Ok(self.drain(&mut f))
    }

    fn drain(&self, f: &mut impl FnMut(LcEvent)) -> usize {
        let batch: Vec<LcEvent> = self
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        let n = batch.len();
        batch.into_iter().for_each(f);
        n
    }

    /// The ring buffer's epoll file descriptor: readable when events wait
    /// (for a daemon that multiplexes it with other fds; then call
    /// [`SchedSource::consume_events`]).
    pub fn event_fd(&self) -> RawFd {
        self.loaded.ring.epoll_fd()
    }

    /// The kernel's id of the loaded program (to check from outside that
    /// it is gone after drop: see [`program_exists`]).
    pub fn program_id(&self) -> u32 {
        let fd = self.skel().progs.elfen_sched_switch.as_fd().as_raw_fd();
        obj_id(fd)
    }

    /// A one-line description for run-time reports.
    pub fn describe(&self) -> String {
        format!(
            "bpf: tp_btf/sched_switch (program id {}), {} CPUs in mmapped slots, \
             events on {} watched CPUs via ring buffer; watching {} processes, {} cgroups",
            self.program_id(),
            self.cpus(),
            self.watched_cpus.len(),
            self.tgids.len(),
            self.cgroups.len()
        )
    }
}

/// The id of a BPF object (program, map or link) from its fd (0 if unknown).
fn obj_id(fd: RawFd) -> u32 {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is a writable bpf_prog_info of `len` bytes.
    let r = unsafe {
        libbpf_rs::libbpf_sys::bpf_obj_get_info_by_fd(fd, (&raw mut info).cast(), &mut len)
    };
    if r == 0 { info.id } else { 0 }
}

/// Whether a BPF program with this id is still loaded in the kernel
/// (needs the same privileges as loading). Programs are freed shortly
/// (an RCU grace period) after their last reference goes.
pub fn program_exists(id: u32) -> bool {
    // SAFETY: plain syscall wrapper.
    let fd = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd >= 0 {
        // SAFETY: fd was just returned to us.
        unsafe { libc::close(fd) };
        true
    } else {
        false
    }
}

impl Drop for SchedSource {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here; the ring buffer first, then the
        // skeleton (links detached, programs and maps closed), then the
        // storage the skeleton borrowed.
        unsafe {
            ManuallyDrop::drop(&mut self.loaded);
            drop(Box::from_raw(self.storage));
        }
    }
}
