//! Pinning threads to lanes with `sched_setaffinity`.
//!
//! All calls act on the *calling thread* only (`pid` 0 means "this thread" for the
//! affinity syscalls), never on the whole process. Masks are sized dynamically, so
//! machines with more than 1024 CPUs (beyond a fixed `cpu_set_t`) work too.

use std::marker::PhantomData;

use crate::cpulist::{MAX_CPU_ID, format_cpu_list};
use crate::error::{Result, TopoError};

/// The kernel's mask word: affinity masks are arrays of `unsigned long`.
type Word = libc::c_ulong;
const WORD_BITS: usize = Word::BITS as usize;

/// Builds a mask just large enough for the highest CPU in `cpus`.
fn mask_of(cpus: &[u32]) -> Result<Vec<Word>> {
    let max = cpus.iter().copied().max().unwrap_or(0);
    if max > MAX_CPU_ID {
        return Err(TopoError::CpuOutOfRange {
            cpu: max,
            limit: MAX_CPU_ID + 1,
        });
    }
    let mut mask = vec![0 as Word; max as usize / WORD_BITS + 1];
    for &cpu in cpus {
        mask[cpu as usize / WORD_BITS] |= 1 << (cpu as usize % WORD_BITS);
    }
    Ok(mask)
}

/// The CPU ids set in `mask`, ascending.
fn cpus_of(mask: &[Word]) -> Vec<u32> {
    let mut cpus = Vec::new();
    for (w, &word) in mask.iter().enumerate() {
        for bit in 0..WORD_BITS {
            if word & (1 << bit) != 0 {
                cpus.push((w * WORD_BITS + bit) as u32);
            }
        }
    }
    cpus
}

/// Restricts the calling thread to the given CPUs.
///
/// Fails if `cpus` is empty, names a CPU above [`MAX_CPU_ID`], or contains no CPU
/// that is online and allowed by the thread's cpuset.
pub fn set_current_affinity(cpus: &[u32]) -> Result<()> {
    let affinity_err = |source: std::io::Error| TopoError::Affinity {
        call: "sched_setaffinity",
        cpus: format_cpu_list(cpus),
        source,
    };
    if cpus.is_empty() {
        return Err(affinity_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty cpu set",
        )));
    }
    let mask = mask_of(cpus)?;
    // SAFETY: the pointer and byte length describe `mask`, which lives across the
    // call; the kernel only reads `cpusetsize` bytes. `cpu_set_t` is itself an array
    // of `unsigned long`, so the cast matches the layout the kernel expects.
    let rc = unsafe {
        libc::sched_setaffinity(
            0,
            std::mem::size_of_val(mask.as_slice()),
            mask.as_ptr().cast::<libc::cpu_set_t>(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let source = if e.raw_os_error() == Some(libc::EINVAL) {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{e}: no cpu in the set is online and allowed by this thread's cpuset"),
            )
        } else {
            e
        };
        return Err(affinity_err(source));
    }
    Ok(())
}

/// Pins the calling thread to one lane. Prefer [`PinGuard`], which undoes it.
pub fn pin_current_thread(cpu: u32) -> Result<()> {
    set_current_affinity(&[cpu])
}

/// The CPUs the calling thread may run on, ascending.
pub fn current_affinity() -> Result<Vec<u32>> {
    // Start at the classic 1024-CPU `cpu_set_t` and grow while the kernel says the
    // buffer is smaller than its `nr_cpu_ids` (EINVAL).
    let mut words = 1024 / WORD_BITS;
    loop {
        let mut mask = vec![0 as Word; words];
        // SAFETY: the kernel writes at most `cpusetsize` bytes into `mask`, which is
        // exactly that large and a whole number of `unsigned long`s.
        let rc = unsafe {
            libc::sched_getaffinity(
                0,
                std::mem::size_of_val(mask.as_slice()),
                mask.as_mut_ptr().cast::<libc::cpu_set_t>(),
            )
        };
        if rc == 0 {
            return Ok(cpus_of(&mask));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) || words * WORD_BITS > MAX_CPU_ID as usize {
            return Err(TopoError::Affinity {
                call: "sched_getaffinity",
                cpus: String::new(),
                source: e,
            });
        }
        words *= 2;
    }
}

/// Pins the calling thread for as long as it lives, then restores the affinity the
/// thread had before.
///
/// Tests and benchmarks use it so no thread stays pinned by accident. It is neither
/// `Send` nor `Sync`: affinity belongs to a thread, and restoring it from another
/// thread would change the wrong one.
///
/// ```no_run
/// # fn main() -> Result<(), elfen_topo::TopoError> {
/// let _pin = elfen_topo::PinGuard::new(0)?;
/// // ... run on lane 0 ...
/// # Ok(()) }
/// // dropped: back to the previous mask
/// ```
#[derive(Debug)]
pub struct PinGuard {
    previous: Vec<u32>,
    _not_send: PhantomData<*const ()>,
}

impl PinGuard {
    /// Pins the calling thread to `cpu`.
    pub fn new(cpu: u32) -> Result<PinGuard> {
        PinGuard::with_cpus(&[cpu])
    }

    /// Restricts the calling thread to `cpus` (e.g. all batch lanes of a pair).
    pub fn with_cpus(cpus: &[u32]) -> Result<PinGuard> {
        let previous = current_affinity()?;
        set_current_affinity(cpus)?;
        Ok(PinGuard {
            previous,
            _not_send: PhantomData,
        })
    }

    /// The affinity that will be restored on drop.
    pub fn previous(&self) -> &[u32] {
        &self.previous
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        // Cannot report from drop. The kernel intersects the mask with the current
        // cpuset, so this only fails if every previously allowed CPU went away, and
        // then there is nothing better to restore.
        let _ = set_current_affinity(&self.previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_round_trip_beyond_1024() {
        let cpus = vec![0, 1, 63, 64, 1023, 1024, 4095];
        let mask = mask_of(&cpus).unwrap();
        assert_eq!(mask.len(), 4096 / WORD_BITS);
        assert_eq!(cpus_of(&mask), cpus);
    }

    #[test]
    fn rejects_out_of_range_and_empty() {
        let e = set_current_affinity(&[MAX_CPU_ID + 1]).unwrap_err();
        assert!(matches!(e, TopoError::CpuOutOfRange { .. }), "{e}");
        let e = set_current_affinity(&[]).unwrap_err().to_string();
        assert!(e.contains("empty cpu set"), "{e}");
    }
}
