//! [`load`] → [`Scheduler`]: elfen's sched_ext scheduler loaded, its LC set
//! and its batch in the ext class; [`Scheduler::unload`] undoes it.
//!
//! The scheduler is a struct_ops link and a `tp_btf/sched_switch` link held
//! by this process (no pinning): when the process dies, the kernel unloads
//! the scheduler and every task it scheduled returns to the fair class.

use crate::contract::{self, ExitInfo, Stats};
use crate::error::ScxError;
use crate::kernel::{self, KernelState, SCHED_EXT};
use crate::skel::{LanesSkel, LanesSkelBuilder, OpenLanesSkel};
use elfen_bpf::LogCapture;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::path::{Path, PathBuf};

/// Which tasks are the LC service's: batch never runs on their SMT sibling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lc {
    /// These processes (every thread of each).
    Pids(Vec<u32>),
    /// Every task in this cgroup v2 directory or below it.
    Cgroup(PathBuf),
}

/// How CPUs pair up: batch never runs on a CPU whose partner runs LC.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Siblings {
    /// The SMT siblings of the running machine (`thread_siblings_list`).
    #[default]
    Smt,
    /// Explicit pairs (each CPU partners the other), e.g. on a machine
    /// without SMT where lanes are paired by configuration.
    Pairs(Vec<(u32, u32)>),
}

/// What [`load`] sets up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The LC service.
    pub lc: Lc,
    /// Processes put in the ext class at load (more with [`Scheduler::add_batch`]).
    pub batch_pids: Vec<u32>,
    /// The pairing of CPUs.
    pub siblings: Siblings,
    /// A batch task's slice when nothing takes its CPU earlier (ns).
    pub slice_ns: u64,
}

impl Options {
    /// The LC and the batch, SMT siblings, the default slice.
    pub fn new(lc: Lc, batch_pids: Vec<u32>) -> Options {
        Options {
            lc,
            batch_pids,
            siblings: Siblings::Smt,
            slice_ns: contract::SLICE_NS,
        }
    }
}

/// The scheduler as seen now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// sched_ext's state in the kernel.
    pub kernel: KernelState,
    /// Whether the kernel runs this scheduler (state `enabled`, ops ours).
    pub running: bool,
    /// Why the kernel unloaded it, once it did.
    pub exit: Option<ExitInfo>,
    /// The counters, summed over CPUs.
    pub stats: Stats,
    /// Processes put in the ext class.
    pub batch_pids: Vec<u32>,
}

/// What [`Scheduler::unload`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unloaded {
    /// Threads given their policy from before back.
    pub restored: usize,
    /// Threads that could not be (gone, or an error, named).
    pub not_restored: Vec<String>,
    /// The counters at the end.
    pub stats: Stats,
    /// Why the kernel had unloaded it already, if it had.
    pub exit: Option<ExitInfo>,
}

/// A batch process: its threads and their policies from before.
#[derive(Debug, Clone)]
struct Batch {
    pid: u32,
    threads: Vec<(u32, i32)>,
}

/// The loaded scheduler. Dropping it unloads it (as [`Scheduler::unload`]
/// does, without the report).
pub struct Scheduler {
    skel: ManuallyDrop<LanesSkel<'static>>,
    /// The skeleton's object storage (`Box::into_raw`), freed after `skel`.
    storage: *mut MaybeUninit<OpenObject>,
    links: Vec<Link>,
    batch: Vec<Batch>,
    lc_tgids: u32,
    lc_cgroups: u32,
}

// SAFETY: `storage` is owned by this value alone (only the skeleton refers
// to it); the skeleton and the links are Send.
unsafe impl Send for Scheduler {}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("batch", &self.batch_pids())
            .field("lc_tgids", &self.lc_tgids)
            .field("lc_cgroups", &self.lc_cgroups)
            .finish()
    }
}

/// `sibling_of[cpu]` for `nr_cpus` possible CPU ids (-1: none).
pub fn sibling_table(siblings: &Siblings, nr_cpus: u32) -> Result<Vec<i32>, ScxError> {
    let mut table = vec![-1i32; nr_cpus as usize];
    let pairs: Vec<(u32, u32)> = match siblings {
        Siblings::Pairs(p) => p.clone(),
        Siblings::Smt => {
            let topo = elfen_topo::Topology::detect()?;
            let mut p = Vec::new();
            for lane in &topo.lanes {
                // the first other thread of its core (SMT2; with more
                // threads per core the others are not covered)
                if let Some(&s) = lane.siblings.iter().find(|&&s| s != lane.cpu)
                    && lane.cpu < s
                {
                    p.push((lane.cpu, s));
                }
            }
            p
        }
    };
    for (a, b) in pairs {
        if a == b || a >= nr_cpus || b >= nr_cpus {
            return Err(ScxError::Pairing(format!(
                "{a}:{b} (CPUs 0-{} possible, a CPU is not its own partner)",
                nr_cpus.saturating_sub(1)
            )));
        }
        for c in [a, b] {
            if table[c as usize] >= 0 {
                return Err(ScxError::Pairing(format!("CPU {c} is in two pairs")));
            }
        }
        table[a as usize] = b as i32;
        table[b as usize] = a as i32;
    }
    Ok(table)
}

/// A load error at `stage` carrying the tail of the libbpf log `log`
/// captured (the verifier's words when it refused).
pub(crate) fn load_error(
    stage: &'static str,
    log: &LogCapture,
) -> impl FnOnce(libbpf_rs::Error) -> ScxError {
    let log_tail = log.tail();
    move |source| ScxError::Load {
        stage,
        source,
        log_tail,
    }
}

/// The scheduler's object opened in `storage`, its constants set: the
/// CPU count, the sibling table and, when given, the slice (else the
/// object's default).
pub(crate) fn open_configured<'o>(
    storage: &'o mut MaybeUninit<OpenObject>,
    log: &LogCapture,
    nr_cpus: u32,
    siblings: &[i32],
    slice_ns: Option<u64>,
) -> Result<OpenLanesSkel<'o>, ScxError> {
    let mut open = LanesSkelBuilder::default()
        .open(storage)
        .map_err(|e| load_error("open", log)(e))?;
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.nr_cpus = nr_cpus;
        for (slot, s) in ro.sibling_of.iter_mut().zip(siblings) {
            *slot = *s;
        }
        if let Some(ns) = slice_ns {
            ro.slice_ns = ns;
        }
    }
    Ok(open)
}

fn open_and_load(
    storage: &'static mut MaybeUninit<OpenObject>,
    nr_cpus: u32,
    siblings: &[i32],
    slice_ns: u64,
) -> Result<LanesSkel<'static>, ScxError> {
    let log = LogCapture::start();
    let open = open_configured(storage, &log, nr_cpus, siblings, Some(slice_ns))?;
    open.load().map_err(|e| load_error("load", &log)(e))
}

/// Loads the scheduler: checks that this kernel has sched_ext and that no
/// other scheduler is loaded, loads the BPF object (the verifier's log in
/// the error if it refuses), enters the LC, attaches the scheduler and its
/// `sched_switch` program, then puts the batch processes in the ext class.
pub fn load(opts: &Options) -> Result<Scheduler, ScxError> {
    kernel::check_idle(&kernel::kernel_state()?)?;
    elfen_bpf::check_privileges()?;
    elfen_bpf::check_btf()?;
    let nr_cpus = elfen_bpf::proc::possible_cpus()?;
    if nr_cpus > contract::MAX_CPUS {
        return Err(ScxError::TooManyCpus {
            count: nr_cpus,
            max: contract::MAX_CPUS,
        });
    }
    let siblings = sibling_table(&opts.siblings, nr_cpus)?;
    let storage: *mut MaybeUninit<OpenObject> = Box::into_raw(Box::new(MaybeUninit::uninit()));
    // SAFETY: storage is a fresh heap allocation that only the skeleton
    // refers to and that lives until the Scheduler frees it (after the
    // skeleton is gone), so treating the borrow as 'static is sound.
    let skel = match open_and_load(unsafe { &mut *storage }, nr_cpus, &siblings, opts.slice_ns) {
        Ok(s) => s,
        Err(e) => {
            // SAFETY: nothing refers to storage any more.
            drop(unsafe { Box::from_raw(storage) });
            return Err(e);
        }
    };
    let mut s = Scheduler {
        skel: ManuallyDrop::new(skel),
        storage,
        links: Vec::new(),
        batch: Vec::new(),
        lc_tgids: 0,
        lc_cgroups: 0,
    };
    match &opts.lc {
        Lc::Pids(pids) => {
            for &p in pids {
                s.add_lc_pid(p)?;
            }
        }
        Lc::Cgroup(dir) => {
            s.add_lc_cgroup(dir)?;
        }
    }
    s.attach()?;
    for &p in &opts.batch_pids {
        s.add_batch(p)?;
    }
    Ok(s)
}

impl Scheduler {
    fn attach(&mut self) -> Result<(), ScxError> {
        let log = LogCapture::start();
        let ops = self
            .skel
            .maps
            .elfen_lanes
            .attach_struct_ops()
            .map_err(|source| ScxError::Load {
                stage: "attach struct_ops",
                source,
                log_tail: log.tail(),
            })?;
        self.links.push(ops);
        let switch = self
            .skel
            .progs
            .elfen_lanes_switch
            .attach()
            .map_err(|source| ScxError::Load {
                stage: "attach sched_switch",
                source,
                log_tail: log.tail(),
            })?;
        self.links.push(switch);
        Ok(())
    }

    /// Marks a process as LC (all its threads, present and future).
    pub fn add_lc_pid(&mut self, pid: u32) -> Result<(), ScxError> {
        elfen_bpf::proc::check_process(pid)?;
        if self.lc_tgids >= contract::MAX_LC {
            return Err(ScxError::TooMany {
                what: "LC processes",
                limit: contract::MAX_LC,
            });
        }
        self.skel
            .maps
            .lc_tgids
            .update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY)
            .map_err(|source| ScxError::Map {
                map: "lc_tgids",
                op: format!("add {pid}"),
                source,
            })?;
        self.lc_tgids += 1;
        Ok(())
    }

    /// Marks every task in a cgroup v2 directory (or below it) as LC.
    pub fn add_lc_cgroup(&mut self, dir: &Path) -> Result<u64, ScxError> {
        let id = elfen_bpf::proc::cgroup_id(dir)?;
        if self.lc_cgroups >= contract::MAX_LC {
            return Err(ScxError::TooMany {
                what: "LC cgroups",
                limit: contract::MAX_LC,
            });
        }
        self.skel
            .maps
            .lc_cgroups
            .update(&id.to_ne_bytes(), &[1u8], MapFlags::ANY)
            .map_err(|source| ScxError::Map {
                map: "lc_cgroups",
                op: format!("add {} (id {id})", dir.display()),
                source,
            })?;
        self.lc_cgroups += 1;
        Ok(id)
    }

    /// Puts every thread of process `pid` in the ext class (`SCHED_EXT`):
    /// from now on this scheduler runs it, and its children and new
    /// threads inherit the class. Returns the threads moved. A thread that
    /// ends meanwhile is skipped; any other failure is an error (the
    /// threads moved before it stay moved and are restored at unload).
    pub fn add_batch(&mut self, pid: u32) -> Result<usize, ScxError> {
        let tids = kernel::threads(pid)?;
        let mut batch = Batch {
            pid,
            threads: Vec::new(),
        };
        let mut result = Ok(());
        for tid in tids {
            let before = match kernel::policy(tid) {
                Ok(p) => p,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(source) => {
                    result = Err(ScxError::SetPolicy {
                        pid,
                        tid,
                        policy: "read",
                        source,
                    });
                    break;
                }
            };
            match kernel::set_policy(tid, SCHED_EXT) {
                Ok(()) => batch.threads.push((tid, before)),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(source) => {
                    result = Err(ScxError::SetPolicy {
                        pid,
                        tid,
                        policy: "SCHED_EXT",
                        source,
                    });
                    break;
                }
            }
        }
        let n = batch.threads.len();
        if n > 0 {
            self.batch.push(batch);
        }
        result.map(|()| n)
    }

    /// Processes put in the ext class.
    pub fn batch_pids(&self) -> Vec<u32> {
        self.batch.iter().map(|b| b.pid).collect()
    }

    /// The counters, summed over CPUs.
    pub fn stats(&self) -> Result<Stats, ScxError> {
        let per_cpu = self
            .skel
            .maps
            .stats
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| ScxError::Map {
                map: "stats",
                op: "read".into(),
                source,
            })?
            .unwrap_or_default();
        let mut sum = Stats::default();
        for bytes in per_cpu {
            let mut v = [0u64; contract::NR_STATS];
            for (i, c) in bytes.chunks_exact(8).take(contract::NR_STATS).enumerate() {
                v[i] = u64::from_ne_bytes(c.try_into().expect("8 bytes"));
            }
            sum.add(&Stats::from_counters(&v));
        }
        Ok(sum)
    }

    /// Why the kernel unloaded the scheduler, once it did (`ops.exit`'s record).
    pub fn exit_info(&self) -> Option<ExitInfo> {
        let bss = self.skel.maps.bss_data.as_deref()?;
        let e = &bss.exit_info;
        // SAFETY: a plain read of the mmapped .bss; ops.exit writes `kind` last.
        let kind = unsafe { std::ptr::read_volatile(&e.kind) };
        if kind == 0 {
            return None;
        }
        Some(ExitInfo {
            kind,
            exit_cpu: e.exit_cpu,
            exit_code: e.exit_code,
            reason: contract::c_string(&e.reason),
            msg: contract::c_string(&e.msg),
        })
    }

    /// The scheduler as the kernel and its counters show it now.
    pub fn state(&self) -> Result<State, ScxError> {
        let kernel = kernel::kernel_state()?;
        let exit = self.exit_info();
        let running = exit.is_none()
            && kernel.state == "enabled"
            && kernel.ops.as_deref() == Some(contract::OPS_NAME);
        Ok(State {
            kernel,
            running,
            exit,
            stats: self.stats()?,
            batch_pids: self.batch_pids(),
        })
    }

    /// `Ok` while the kernel runs the scheduler; [`ScxError::Unloaded`] with
    /// the kernel's reason once it unloaded it (an error in it, its
    /// watchdog, SysRq-S).
    pub fn check(&self) -> Result<(), ScxError> {
        match self.exit_info() {
            Some(e) => Err(ScxError::Unloaded(e)),
            None => Ok(()),
        }
    }

    /// Detaches the scheduler (the kernel moves its tasks back to the fair
    /// class) and gives the batch threads their policy from before.
    pub fn unload(mut self) -> Unloaded {
        let stats = self.stats().unwrap_or_default();
        self.links.clear();
        let exit = self.exit_info().filter(|e| e.kind != 64);
        let (restored, not_restored) = self.restore_batch();
        Unloaded {
            restored,
            not_restored,
            stats,
            exit,
        }
    }

    fn restore_batch(&mut self) -> (usize, Vec<String>) {
        let mut restored = 0;
        let mut failed = Vec::new();
        for b in self.batch.drain(..) {
            for (tid, before) in b.threads {
                // only threads still in the ext class (not moved since)
                match kernel::policy(tid) {
                    Ok(SCHED_EXT) => match kernel::set_policy(tid, before) {
                        Ok(()) => restored += 1,
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => failed.push(format!(
                            "thread {tid} of {}: {} back: {e}",
                            b.pid,
                            kernel::policy_name(before)
                        )),
                    },
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => failed.push(format!("thread {tid} of {}: {e}", b.pid)),
                }
            }
        }
        (restored, failed)
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.links.clear();
        let _ = self.restore_batch();
        // SAFETY: the skeleton is dropped once, here, before its storage.
        unsafe { ManuallyDrop::drop(&mut self.skel) };
        // SAFETY: nothing refers to storage any more.
        drop(unsafe { Box::from_raw(self.storage) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_pairs_fill_both_ways() {
        let t = sibling_table(&Siblings::Pairs(vec![(0, 1), (2, 3)]), 5).unwrap();
        assert_eq!(t, vec![1, 0, 3, 2, -1]);
    }

    #[test]
    fn bad_pairs_are_refused_with_the_reason() {
        let e = sibling_table(&Siblings::Pairs(vec![(0, 0)]), 4).unwrap_err();
        assert!(e.to_string().contains("not its own partner"), "{e}");
        let e = sibling_table(&Siblings::Pairs(vec![(0, 1), (1, 2)]), 4).unwrap_err();
        assert!(e.to_string().contains("CPU 1 is in two pairs"), "{e}");
        let e = sibling_table(&Siblings::Pairs(vec![(0, 9)]), 4).unwrap_err();
        assert!(e.to_string().contains("CPUs 0-3 possible"), "{e}");
    }

    #[test]
    fn smt_pairs_follow_the_topology() {
        let topo = elfen_topo::Topology::detect().unwrap();
        let n = elfen_bpf::proc::possible_cpus().unwrap();
        let t = sibling_table(&Siblings::Smt, n).unwrap();
        for lane in &topo.lanes {
            let s = t[lane.cpu as usize];
            if lane.siblings.len() > 1 {
                assert!(lane.siblings.contains(&(s as u32)) && s as u32 != lane.cpu);
                assert_eq!(t[s as usize], lane.cpu as i32);
            } else {
                assert_eq!(s, -1, "cpu {} has no sibling", lane.cpu);
            }
        }
    }
}
