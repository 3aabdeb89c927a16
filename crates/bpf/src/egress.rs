//! [`EgressProgram`]: batch traffic at low priority — the cgroup-skb
//! egress program of `src/bpf/egress.bpf.c`, attached to batch groups'
//! cgroup2 directories.
//!
//! Each packet a socket of an attached group sends gets `skb->priority`
//! (and, if asked, a firewall mark) before the device's queueing
//! discipline sees it, so a priority qdisc (`pfifo_fast`, `prio`,
//! `mqprio`; `htb`/`hfsc` with an `fw` filter on the mark) queues it
//! behind the LC's traffic. A socket belongs to the cgroup its creator was
//! in when it was created: a process moved into the group later keeps
//! sending its old sockets' packets at their old priority.
//!
//! Attachments are BPF links held by this value (no pinning): they end
//! when it is dropped or the process dies, so a killed daemon leaves no
//! program behind. Several programs may be attached to one group (links
//! are multi-attach): another tool's programs keep running.

use crate::error::BpfError;
use crate::probe::{LogCapture, check_privileges};
use crate::skel::egress::{EgressSkel, EgressSkelBuilder};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// What marked packets get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressMarking {
    /// `skb->priority` (TC_PRIO_FILLER = 1: the last band of `pfifo_fast`
    /// and of a default `prio`).
    pub priority: u32,
    /// Firewall mark to set; 0 leaves it alone.
    pub mark: u32,
}

impl Default for EgressMarking {
    fn default() -> Self {
        EgressMarking {
            priority: 1,
            mark: 0,
        }
    }
}

/// The loaded program and the groups it is attached to.
pub struct EgressProgram {
    skel: ManuallyDrop<EgressSkel<'static>>,
    /// The skeleton's object storage (`Box::into_raw`), freed after `skel`.
    storage: *mut MaybeUninit<OpenObject>,
    links: Vec<(PathBuf, Link)>,
    marking: EgressMarking,
}

// SAFETY: `storage` is owned by this value alone (only the skeleton refers
// to it); the skeleton and the links are Send.
unsafe impl Send for EgressProgram {}

impl std::fmt::Debug for EgressProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProgram")
            .field("marking", &self.marking)
            .field(
                "groups",
                &self.links.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn load(
    storage: &'static mut MaybeUninit<OpenObject>,
    m: EgressMarking,
) -> Result<EgressSkel<'static>, BpfError> {
    let log = LogCapture::start();
    let err = |stage: &'static str, log: &LogCapture| {
        let log_tail = log.tail();
        move |source| BpfError::Load {
            stage,
            source,
            log_tail,
        }
    };
    let mut open = EgressSkelBuilder::default()
        .open(storage)
        .map_err(|e| err("open", &log)(e))?;
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.egress_priority = m.priority;
        ro.egress_mark = m.mark;
    }
    open.load().map_err(|e| err("load", &log)(e))
}

impl EgressProgram {
    /// Loads the program (not attached anywhere yet). Fails with
    /// [`BpfError::NotPrivileged`] or [`BpfError::Load`] (with the
    /// verifier's log) where cgroup BPF cannot be used.
    pub fn load(marking: EgressMarking) -> Result<EgressProgram, BpfError> {
        check_privileges()?;
        let storage: *mut MaybeUninit<OpenObject> = Box::into_raw(Box::new(MaybeUninit::uninit()));
        // SAFETY: storage is a fresh heap allocation that only the skeleton
        // refers to and that lives until Drop frees it (after the skeleton
        // is gone), so treating the borrow as 'static is sound.
        match load(unsafe { &mut *storage }, marking) {
            Ok(skel) => Ok(EgressProgram {
                skel: ManuallyDrop::new(skel),
                storage,
                links: Vec::new(),
                marking,
            }),
            Err(e) => {
                // SAFETY: nothing refers to storage any more.
                drop(unsafe { Box::from_raw(storage) });
                Err(e)
            }
        }
    }

    /// Attaches the program to the cgroup2 directory `dir` (a group of the
    /// unified hierarchy: `/sys/fs/cgroup/<group>` on v2,
    /// `/sys/fs/cgroup/unified/<group>` on a hybrid layout).
    pub fn attach(&mut self, dir: &Path) -> Result<(), BpfError> {
        let f = std::fs::File::open(dir).map_err(|source| BpfError::Cgroup {
            path: dir.to_path_buf(),
            source,
        })?;
        let log = LogCapture::start();
        let link = self
            .skel
            .progs
            .elfen_egress
            .attach_cgroup(f.as_raw_fd())
            .map_err(|e| BpfError::Cgroup {
                path: dir.to_path_buf(),
                source: std::io::Error::other(format!(
                    "attaching the egress program: {e} ({})",
                    log.tail().join("; ")
                )),
            })?;
        self.links.push((dir.to_path_buf(), link));
        Ok(())
    }

    /// Detaches the program from `dir`; false if it was not attached there.
    pub fn detach(&mut self, dir: &Path) -> bool {
        let n = self.links.len();
        self.links.retain(|(p, _)| p != dir);
        self.links.len() != n
    }

    /// The groups it is attached to.
    pub fn groups(&self) -> impl Iterator<Item = &Path> {
        self.links.iter().map(|(p, _)| p.as_path())
    }

    /// What marked packets get.
    pub fn marking(&self) -> EgressMarking {
        self.marking
    }

    /// Packets marked so far (every attached group).
    pub fn packets(&self) -> u64 {
        self.skel.maps.bss_data.as_deref().map_or(0, |b| {
            // SAFETY: an aligned u64 of the mmapped .bss the program
            // increments atomically; a volatile read sees its latest value.
            unsafe { std::ptr::read_volatile(&b.packets) }
        })
    }
}

impl Drop for EgressProgram {
    fn drop(&mut self) {
        self.links.clear();
        // SAFETY: dropped exactly once, here: the skeleton (program and
        // maps closed), then the storage it borrowed.
        unsafe {
            ManuallyDrop::drop(&mut self.skel);
            drop(Box::from_raw(self.storage));
        }
    }
}

/// Whether the egress program loads here (privileges and the verifier):
/// `Ok` or the reason. Loads and unloads it; attaches nothing.
pub fn probe() -> Result<(), BpfError> {
    EgressProgram::load(EgressMarking::default()).map(drop)
}
