//! [`SlotReader`]: a cheap, cloneable, thread-safe view of the per-CPU
//! slots, whichever source writes them (the BPF program into its mmapped
//! array map, or the poll fallback's scanner thread into heap memory).

use crate::contract::{CpuSlot, SlotSnapshot};
use crate::error::BpfError;
use std::sync::Arc;

/// The memory behind the slots.
pub(crate) enum Backing {
    /// A read-only shared mapping of the BPF array map (`munmap` on drop).
    /// While it exists the kernel keeps the map's memory, even after the
    /// program and its other file descriptors are gone.
    Mmap {
        /// Start of the mapping.
        ptr: *mut libc::c_void,
        /// Length of the mapping.
        len: usize,
    },
    /// Slots written by a user-space thread (the poll fallback).
    Heap(Box<[CpuSlot]>),
}

// SAFETY: the mapping is only read through atomics; Heap slots are atomics.
unsafe impl Send for Backing {}
// SAFETY: as above.
unsafe impl Sync for Backing {}

impl Drop for Backing {
    fn drop(&mut self) {
        if let Backing::Mmap { ptr, len } = *self {
            // SAFETY: ptr/len came from a successful mmap and are unmapped once.
            unsafe { libc::munmap(ptr, len) };
        }
    }
}

/// Read access to every CPU's [`CpuSlot`]. Clone it into the threads that
/// poll (it keeps the memory alive); reads are plain loads from shared
/// memory, no system call.
#[derive(Clone)]
pub struct SlotReader {
    backing: Arc<Backing>,
    base: *const CpuSlot,
    count: u32,
}

// SAFETY: `base` points into `backing`, which the Arc keeps alive; slots are
// read only through atomics.
unsafe impl Send for SlotReader {}
// SAFETY: as above.
unsafe impl Sync for SlotReader {}

impl std::fmt::Debug for SlotReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match *self.backing {
            Backing::Mmap { .. } => "mmap",
            Backing::Heap(_) => "heap",
        };
        f.debug_struct("SlotReader")
            .field("backing", &kind)
            .field("cpus", &self.count)
            .finish()
    }
}

impl SlotReader {
    pub(crate) fn new(backing: Backing, count: u32) -> SlotReader {
        let base = match &backing {
            Backing::Mmap { ptr, .. } => ptr.cast_const().cast::<CpuSlot>(),
            Backing::Heap(b) => b.as_ptr(),
        };
        SlotReader {
            backing: Arc::new(backing),
            base,
            count,
        }
    }

    /// Number of slots (the machine's possible CPUs).
    pub fn cpus(&self) -> u32 {
        self.count
    }

    /// The slot of `cpu`, or `None` past the last possible CPU.
    #[inline]
    pub fn slot(&self, cpu: u32) -> Option<&CpuSlot> {
        if cpu < self.count {
            // SAFETY: cpu < count slots live at base for as long as self.
            Some(unsafe { &*self.base.add(cpu as usize) })
        } else {
            None
        }
    }

    /// Whether an LC task runs on `cpu` now: one load of the slot's flags
    /// (false for a CPU out of range).
    #[inline]
    pub fn lc_busy(&self, cpu: u32) -> bool {
        self.slot(cpu).is_some_and(CpuSlot::lc)
    }

    /// A consistent copy of `cpu`'s slot (seqlock read).
    pub fn snapshot(&self, cpu: u32) -> Result<SlotSnapshot, BpfError> {
        let slot = self.slot(cpu).ok_or(BpfError::CpuOutOfRange {
            cpu,
            count: self.count,
        })?;
        slot.read(cpu).ok_or(BpfError::Torn { cpu })
    }
}
