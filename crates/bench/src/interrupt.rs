//! Ctrl-C (SIGINT) and SIGTERM: set a flag the sweep polls, so it stops the
//! load, keeps the points it finished and cleans up (batch process killed
//! by pid, cgroups and signal page removed, pinning restored) on its way
//! out. A third signal gives up on cleaning and terminates at once.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    if COUNT.fetch_add(1, Ordering::SeqCst) >= 2 {
        // SAFETY: signal(2) and raise(3) are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
}

/// Installs the handlers (idempotent) and returns the flag.
pub fn install() -> &'static AtomicBool {
    // SAFETY: installing a handler that only touches atomics (and, on the
    // third signal, async-signal-safe calls).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        // no SA_RESTART: blocking calls return EINTR and the loops re-check
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
    &STOP
}

/// The flag (set once a signal arrived).
pub fn flag() -> &'static AtomicBool {
    &STOP
}
