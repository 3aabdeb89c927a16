//! Ctrl-C (SIGINT) and SIGTERM, the same in every elfen command.
//!
//! The **first** signal sets a flag ([`flag`], [`interrupted`]) that every
//! measuring loop polls, so the command stops its load, keeps what it
//! measured and cleans up on its normal path (child processes killed by
//! pid, cgroups and signal pages removed, threads unpinned). A **second**
//! signal removes the files and directories registered with [`register`]
//! from the handler itself (`unlink` and `rmdir` are async-signal-safe) and
//! exits with status 130 at once.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::SeqCst};

static STOP: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Paths removed by a second signal: files first (`unlink`), then
/// directories (`rmdir`, in registration order).
const SLOTS: usize = 8;
static FILES: [AtomicPtr<libc::c_char>; SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
static DIRS: [AtomicPtr<libc::c_char>; SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];

extern "C" fn on_signal(_sig: libc::c_int) {
    if STOP.swap(true, SeqCst) {
        for slot in FILES.iter() {
            let p = slot.load(SeqCst);
            if !p.is_null() {
                // SAFETY: a NUL-terminated path leaked by `register`.
                unsafe { libc::unlink(p) };
            }
        }
        for slot in DIRS.iter() {
            let p = slot.load(SeqCst);
            if !p.is_null() {
                // SAFETY: as above.
                unsafe { libc::rmdir(p) };
            }
        }
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
    let msg = b"\nelfen: interrupted; stopping cleanly and keeping what was measured (again to quit at once)\n";
    // SAFETY: write(2) is async-signal-safe; msg is a valid buffer.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// Installs the SIGINT/SIGTERM handler (once per process; later calls do
/// nothing) and returns the flag.
pub fn install() -> &'static AtomicBool {
    if !INSTALLED.swap(true, SeqCst) {
        // SAFETY: a zeroed sigaction with a handler that only touches
        // atomics and async-signal-safe calls, and an empty mask. No
        // SA_RESTART: blocking calls return EINTR and the loops re-check.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
            libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        }
    }
    &STOP
}

/// The flag: set once a signal arrived.
pub fn flag() -> &'static AtomicBool {
    &STOP
}

/// Whether a stop was asked for.
#[inline]
pub fn interrupted() -> bool {
    STOP.load(std::sync::atomic::Ordering::Relaxed)
}

fn leak(p: &Path) -> *mut libc::c_char {
    CString::new(p.as_os_str().as_bytes())
        .map(CString::into_raw)
        .unwrap_or(std::ptr::null_mut())
}

fn free(p: *mut libc::c_char) {
    if !p.is_null() {
        // SAFETY: produced by CString::into_raw in `leak`.
        drop(unsafe { CString::from_raw(p) });
    }
}

/// Registers `files` and `dirs` (at most eight of each; more are ignored)
/// for removal by a second signal, in free slots; the returned guard
/// unregisters them (the normal clean-up has removed them by then).
pub fn register(files: &[&Path], dirs: &[&Path]) -> CleanupGuard {
    let mut taken = Vec::new();
    for (table, paths, is_dir) in [(&FILES, files, false), (&DIRS, dirs, true)] {
        for p in paths {
            let raw = leak(p);
            if let Some(i) = table.iter().position(|s| {
                s.compare_exchange(std::ptr::null_mut(), raw, SeqCst, SeqCst)
                    .is_ok()
            }) {
                taken.push((is_dir, i));
            } else {
                free(raw);
            }
        }
    }
    CleanupGuard { taken }
}

/// Unregisters its paths on drop.
#[derive(Debug)]
pub struct CleanupGuard {
    taken: Vec<(bool, usize)>,
}

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        for &(is_dir, i) in &self.taken {
            let table = if is_dir { &DIRS } else { &FILES };
            free(table[i].swap(std::ptr::null_mut(), SeqCst));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_takes_and_frees_slots() {
        let g = register(
            &[Path::new("/tmp/elfen-test-a")],
            &[Path::new("/tmp/elfen-test-d")],
        );
        assert_eq!(g.taken.len(), 2);
        let used = |t: &[AtomicPtr<libc::c_char>; SLOTS]| {
            t.iter().filter(|s| !s.load(SeqCst).is_null()).count()
        };
        let (f, d) = (used(&FILES), used(&DIRS));
        assert!(f >= 1 && d >= 1);
        drop(g);
        assert_eq!(used(&FILES), f - 1);
        assert_eq!(used(&DIRS), d - 1);
        assert!(!interrupted());
    }
}
