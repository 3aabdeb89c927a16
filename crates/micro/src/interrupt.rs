//! Ctrl-C and SIGTERM: the first signal asks every measuring loop to stop
//! (they poll [`interrupted`]), so the normal clean-up runs — page files
//! removed, threads unpinned. A second signal removes the registered files
//! at once from the handler (`unlink`/`rmdir` are async-signal-safe) and
//! exits with status 130.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::SeqCst};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Files (then one directory, last) to remove if a second signal arrives.
const SLOTS: usize = 4;
static CLEANUP: [AtomicPtr<libc::c_char>; SLOTS] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];
static CLEANUP_DIR: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn on_signal(_sig: libc::c_int) {
    if INTERRUPTED.swap(true, SeqCst) {
        for slot in &CLEANUP {
            let p = slot.load(SeqCst);
            if !p.is_null() {
                // SAFETY: a NUL-terminated path leaked by `register`.
                unsafe { libc::unlink(p) };
            }
        }
        let d = CLEANUP_DIR.load(SeqCst);
        if !d.is_null() {
            // SAFETY: as above.
            unsafe { libc::rmdir(d) };
        }
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
    let msg = b"\nelfen micro: interrupted; stopping and removing the signal page (again to quit at once)\n";
    // SAFETY: write(2) is async-signal-safe; msg is a valid buffer.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// Installs the SIGINT/SIGTERM handler (once per process).
pub fn install() {
    if INSTALLED.swap(true, SeqCst) {
        return;
    }
    // SAFETY: a zeroed sigaction with a valid handler and an empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Whether a stop was asked for.
#[inline]
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

fn leak(p: &Path) -> *mut libc::c_char {
    CString::new(p.as_os_str().as_bytes())
        .map(CString::into_raw)
        .unwrap_or(std::ptr::null_mut())
}

/// Registers `files` (at most four) and `dir` for removal by a second
/// signal; the returned guard unregisters them.
pub fn register(files: &[&Path], dir: &Path) -> CleanupGuard {
    for (slot, f) in CLEANUP.iter().zip(files) {
        let old = slot.swap(leak(f), SeqCst);
        free(old);
    }
    free(CLEANUP_DIR.swap(leak(dir), SeqCst));
    CleanupGuard(())
}

fn free(p: *mut libc::c_char) {
    if !p.is_null() {
        // SAFETY: produced by CString::into_raw in `leak`.
        drop(unsafe { CString::from_raw(p) });
    }
}

/// Unregisters the clean-up paths on drop (the files are gone by then).
#[derive(Debug)]
pub struct CleanupGuard(());

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        for slot in &CLEANUP {
            free(slot.swap(std::ptr::null_mut(), SeqCst));
        }
        free(CLEANUP_DIR.swap(std::ptr::null_mut(), SeqCst));
    }
}
