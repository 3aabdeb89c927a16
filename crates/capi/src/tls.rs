//! The fast path's thread-local state lives in C (`bindings/c/src/elfen_tls.c`,
//! an initial-exec `__thread` struct the inline `elfen_check()` reads); the
//! Rust slow path reads and re-arms it only through these accessors.

use std::sync::atomic::AtomicU64;

unsafe extern "C" {
    fn elfen__tls_kind() -> i32;
    fn elfen__tls_watch(word: *const u64, expected: u64);
    fn elfen__tls_set_off();
    fn elfen__tls_set_unattached();
    fn elfen__tls_word() -> *const u64;
    fn elfen__tls_expected() -> u64;
    fn elfen__arm_lazy_attach();
    fn elfen__disarm_lazy_attach();
    fn elfen__lazy_attach_armed() -> i32;
}

/// Where the calling thread's checks point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Never attached: checks do nothing, unless lazy attach is armed (the
    /// hook library is linked), when the first check takes the slow path.
    Unattached,
    /// Detached or disabled: checks do nothing.
    Off,
    /// Attached: checks watch a request lane's `state`.
    Watching,
}

/// The calling thread's check state.
pub fn kind() -> Kind {
    // SAFETY: reads this thread's TLS.
    match unsafe { elfen__tls_kind() } {
        0 => Kind::Unattached,
        1 => Kind::Off,
        _ => Kind::Watching,
    }
}

/// Makes the calling thread's checks compare `*word` with `expected`.
///
/// # Safety
/// `word` must stay mapped until the thread's checks are pointed
/// elsewhere ([`set_off`], [`set_unattached`] or another `watch`).
pub unsafe fn watch(word: *const AtomicU64, expected: u64) {
    // SAFETY: per the function contract.
    unsafe { elfen__tls_watch(word.cast(), expected) }
}

/// Switches the calling thread's checks off (detached, disabled, or inside
/// the slow path, so instrumented code it reaches cannot re-enter it).
pub fn set_off() {
    // SAFETY: writes this thread's TLS to a static word.
    unsafe { elfen__tls_set_off() }
}

/// Returns the calling thread to its never-attached state.
pub fn set_unattached() {
    // SAFETY: as above.
    unsafe { elfen__tls_set_unattached() }
}

/// The word and expected value the calling thread's checks compare.
pub fn current() -> (*const u64, u64) {
    // SAFETY: reads this thread's TLS.
    unsafe { (elfen__tls_word(), elfen__tls_expected()) }
}

/// Arms lazy attach (what linking the hook library does at load).
pub fn arm_lazy_attach() {
    // SAFETY: an atomic store to a static.
    unsafe { elfen__arm_lazy_attach() }
}

/// Disarms lazy attach: threads that never attached check nothing again.
pub fn disarm_lazy_attach() {
    // SAFETY: an atomic store to a static.
    unsafe { elfen__disarm_lazy_attach() }
}

/// Whether lazy attach is armed in this process.
pub fn lazy_attach_armed() -> bool {
    // SAFETY: an atomic load of a static.
    unsafe { elfen__lazy_attach_armed() != 0 }
}

/// The fast path, as `elfen.h` inlines it (through the accessors, so not
/// as fast): whether a check would take the slow path now.
pub fn would_take_slow_path() -> bool {
    let (word, expected) = current();
    // SAFETY: the TLS word always points at a live word (a static, or a
    // mapped state word that outlives the attachment).
    unsafe { std::ptr::read_volatile(word) != expected }
}
