//! The batch side for the calling thread: `elfen_batch_attach/detach`, the
//! slow path behind `elfen.h`'s inline `elfen_check()`, and lazy attach for
//! programs instrumented with `-finstrument-functions`.
//!
//! Each thread's `elfen_runtime::BatchThread` lives in a Rust thread-local;
//! the fast path's `{word, expected}` pair lives in a C thread-local
//! ([`crate::tls`]). Attach points the pair at the request lane's `state`
//! and the thread's expected value; the slow path runs
//! `BatchThread::slow_path` and re-arms the pair from `watch_word()` and
//! `expected()`. While the slow path runs, the pair points at a static zero
//! word (checks off), so instrumented code the slow path reaches (an
//! instrumented allocator, say) cannot re-enter it.

use crate::env::{self, EnvConfig};
use crate::error::{EINVAL, ELANE, ESTATE, Error, guard, set_last_error};
use crate::page::path_arg;
use crate::runtime_error;
use crate::tls::{self, Kind};
use elfen_runtime::{BatchOptions, BatchStats, BatchThread, NapBackend};
use elfen_shm::{Access, Page, role};
use std::cell::RefCell;
use std::ffi::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The calling thread's attachment. Dropping it (thread exit) switches the
/// thread's checks off before the page can be unmapped.
struct Slot(Option<BatchThread>);

impl Drop for Slot {
    fn drop(&mut self) {
        if self.0.is_some() {
            tls::set_off();
        }
    }
}

thread_local! {
    static BATCH: RefCell<Slot> = const { RefCell::new(Slot(None)) };
}

/// Runs `f` on the calling thread's attachment, if any (`None` also while
/// the thread's storage is being torn down, or inside its own slow path).
pub fn with_current_thread<R>(f: impl FnOnce(&mut BatchThread) -> R) -> Option<R> {
    BATCH
        .try_with(|b| {
            b.try_borrow_mut()
                .ok()
                .and_then(|mut b| b.0.as_mut().map(f))
        })
        .ok()
        .flatten()
}

/// Whether the calling thread is attached as a batch thread.
pub fn is_attached() -> bool {
    with_current_thread(|_| ()).is_some()
}

/// Attaches the calling thread to batch lane `lane` of `page` (see
/// `BatchThread::attach`: validates the lane, pins unless `opts.pin` is
/// false, counts itself in `attached`) and arms its checks: `elfen_check()`
/// in C code this thread runs now watches the lane's request lane. The Rust
/// way to do what `elfen_batch_attach` does, e.g. before calling
/// instrumented C kernels.
pub fn attach_current_thread(page: Arc<Page>, lane: u32, opts: BatchOptions) -> Result<(), Error> {
    if let Some(d) = with_current_thread(|t| t.describe()) {
        return Err(Error::new(
            ESTATE,
            format!("this thread is already attached ({d}); detach it first"),
        ));
    }
    let thread = BatchThread::attach(page, lane, opts).map_err(runtime_error)?;
    let (word, expected) = (thread.watch_word(), thread.expected());
    let installed = BATCH
        .try_with(|b| match b.try_borrow_mut() {
            Ok(mut b) => {
                b.0 = Some(thread);
                true
            }
            Err(_) => false,
        })
        .unwrap_or(false);
    if !installed {
        return Err(Error::new(
            ESTATE,
            "this thread cannot attach now (its thread-local storage is being torn down)",
        ));
    }
    // SAFETY: `word` points into the page the BatchThread now held in this
    // thread's slot keeps mapped; detach and the slot's drop switch the
    // checks off before releasing it.
    unsafe { tls::watch(word, expected) };
    register_process_hooks();
    Ok(())
}

/// Attaches the page at `path` with batch access, then
/// [`attach_current_thread`].
pub fn open_current_thread(path: &Path, lane: u32, opts: BatchOptions) -> Result<(), Error> {
    let page = Page::attach(path, Access::Batch)?;
    attach_current_thread(Arc::new(page), lane, opts)
}

/// Detaches the calling thread (its checks do nothing afterwards); whether
/// it was attached.
pub fn detach_current_thread() -> bool {
    let t = BATCH
        .try_with(|b| b.try_borrow_mut().ok().and_then(|mut b| b.0.take()))
        .ok()
        .flatten();
    tls::set_off();
    t.is_some()
}

/// The slow path of the calling thread (what `elfen_check_slow` runs).
fn slow_path() {
    match tls::kind() {
        Kind::Off => {}
        Kind::Unattached => {
            if tls::lazy_attach_armed() {
                lazy_attach();
            }
        }
        Kind::Watching => run_slow_path(),
    }
}

fn run_slow_path() {
    tls::set_off();
    with_current_thread(|t| {
        t.slow_path();
        // SAFETY: as in attach: the word stays mapped while `t` lives.
        unsafe { tls::watch(t.watch_word(), t.expected()) };
    });
}

/// `elfen_check_slow`: called by `elfen_check()` when the watched word
/// differs from the expected value. Runs the policy and naps while it says
/// so; attaches lazily when the hook library armed it; never unwinds.
#[unsafe(no_mangle)]
pub extern "C" fn elfen_check_slow() {
    if catch_unwind(AssertUnwindSafe(slow_path)).is_err() {
        tls::set_off();
        set_last_error("internal error in the elfen slow path; this thread's checks are off");
    }
}

// ---- lazy attach (the hook) ------------------------------------------------

static WARNED: AtomicBool = AtomicBool::new(false);

/// Prints `msg` on stderr, once per process.
fn warn_once(msg: &str) {
    if !WARNED.swap(true, Ordering::AcqRel) {
        let line = format!("elfen: {msg}\n");
        // One write(2): whole lines even with many threads, no stdio lock.
        // SAFETY: writing a valid buffer to fd 2.
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    }
}

/// The message printed when an instrumented program runs without `ELFEN_PAGE`.
pub const NOT_SET_WARNING: &str = "this program checks at every function entry (built with \
    -finstrument-functions or -pg -mfentry, linked with libelfen_hook) but ELFEN_PAGE is not set, \
    so its checks \
    are off and it never steps aside for the LC service; set ELFEN_PAGE (and ELFEN_LANE, \
    ELFEN_NAP) to borrow only idle CPU, or ELFEN_QUIET=1 to silence this";

/// The first batch lane of `page`.
fn first_batch_lane(page: &Page) -> Result<u32, Error> {
    (0..page.lane_count())
        .find(|&l| page.read_controller(l).is_ok_and(|c| c.role == role::BATCH))
        .ok_or_else(|| {
            Error::new(
                ELANE,
                format!(
                    "signal page {} has no batch lane to attach to",
                    page.path().display()
                ),
            )
        })
}

/// Attaches the calling thread as `cfg` says.
pub fn attach_from_env(cfg: &EnvConfig) -> Result<(), Error> {
    let page = Page::attach(&cfg.page, Access::Batch)?;
    let lane = match cfg.lane {
        Some(l) => l,
        None => first_batch_lane(&page)?,
    };
    let opts = BatchOptions {
        pin: cfg.pin,
        nap: cfg.nap,
        ..BatchOptions::default()
    };
    attach_current_thread(Arc::new(page), lane, opts)
}

/// The first check of a thread that never attached, in a process whose hook
/// library armed lazy attach: attach from `ELFEN_*`, or switch this thread's
/// checks off (with one warning per process).
fn lazy_attach() {
    tls::set_off();
    let get = |k: &str| std::env::var_os(k);
    match env::read(get) {
        Ok(None) => {
            if !env::quiet(get) {
                warn_once(NOT_SET_WARNING);
            }
        }
        Err(e) => {
            set_last_error(&e.message);
            warn_once(&format!("{e}; this program's checks are off"));
        }
        Ok(Some(cfg)) => match attach_from_env(&cfg) {
            Ok(()) => run_slow_path(),
            Err(e) => {
                set_last_error(&e.message);
                warn_once(&format!(
                    "cannot attach from ELFEN_PAGE={}: {e}; this program's checks are off",
                    cfg.page.display()
                ));
            }
        },
    }
}

/// Arms (`on`) or disarms lazy attach for the threads that have not checked
/// yet. Linking `libelfen_hook.a` arms it; a program that attaches its
/// threads explicitly and links the hook only for its
/// `__cyg_profile_func_enter` disarms it, so its other threads' checks do
/// nothing and nothing is printed.
pub fn set_lazy_attach(on: bool) {
    if on {
        tls::arm_lazy_attach();
    } else {
        tls::disarm_lazy_attach();
    }
}

/// `elfen_set_lazy_attach`.
#[unsafe(no_mangle)]
pub extern "C" fn elfen_set_lazy_attach(on: c_int) {
    set_lazy_attach(on != 0);
}

// ---- process hooks: exit and fork -------------------------------------------

extern "C" fn detach_at_exit() {
    // The thread calling exit() (usually main) never runs its thread-local
    // destructors: detach it so `attached` is right after the process ends.
    detach_current_thread();
}

extern "C" fn forget_in_child() {
    // A forked child inherits the parent thread's attachment in memory but
    // was never counted: forget it without touching the batch line, and
    // start over as a thread that never attached.
    let _ = BATCH.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            if let Some(t) = b.0.take() {
                std::mem::forget(t);
            }
        }
    });
    tls::set_unattached();
}

fn register_process_hooks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering plain extern "C" functions of this library.
        unsafe {
            libc::atexit(detach_at_exit);
            libc::pthread_atfork(None, None, Some(forget_in_child));
        }
    });
}

// ---- the C entry points -----------------------------------------------------

/// `elfen_batch_options` (elfen.h), field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CBatchOptions {
    /// `ELFEN_NAP_PAGE` (-1) or an `ELFEN_NAP_*` id.
    pub nap: c_int,
    /// Nonzero: pin the thread to the lane's CPU until it detaches.
    pub pin: c_int,
    /// Longest single futex wait, µs (0 = the runtime's default, 10 ms).
    pub futex_timeout_us: u32,
    /// Zero.
    pub reserved: u32,
}

impl CBatchOptions {
    /// The runtime's options.
    pub fn to_options(self) -> Result<BatchOptions, Error> {
        let mut o = BatchOptions {
            pin: self.pin != 0,
            nap: env::nap_arg(self.nap)?,
            ..BatchOptions::default()
        };
        if self.futex_timeout_us != 0 {
            o.futex_timeout = Duration::from_micros(self.futex_timeout_us.into());
        }
        Ok(o)
    }
}

/// `elfen_batch_attach_ex`.
///
/// # Safety
/// `page_path` is a NUL-terminated string; `opts` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_batch_attach_ex(
    page_path: *const c_char,
    lane: u32,
    opts: *const CBatchOptions,
) -> c_int {
    guard(
        |c| c,
        || {
            let path = path_arg(page_path, "elfen_batch_attach")?;
            // SAFETY: per the function contract.
            let o = unsafe { opts.as_ref() }.copied().unwrap_or(CBatchOptions {
                nap: env::NAP_PAGE,
                pin: 1,
                futex_timeout_us: 0,
                reserved: 0,
            });
            open_current_thread(&path, lane, o.to_options()?)?;
            Ok(0)
        },
    )
}

/// `elfen_batch_attach`: attaches the calling thread, pinned, with nap
/// backend `nap`.
///
/// # Safety
/// `page_path` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_batch_attach(
    page_path: *const c_char,
    lane: u32,
    nap: c_int,
) -> c_int {
    let o = CBatchOptions {
        nap,
        pin: 1,
        futex_timeout_us: 0,
        reserved: 0,
    };
    // SAFETY: per the function contract.
    unsafe { elfen_batch_attach_ex(page_path, lane, &o) }
}

/// `elfen_batch_detach`.
#[unsafe(no_mangle)]
pub extern "C" fn elfen_batch_detach() -> c_int {
    guard(
        |c| c,
        || {
            if detach_current_thread() {
                Ok(0)
            } else {
                Err(Error::new(
                    ESTATE,
                    "elfen_batch_detach: this thread is not attached as a batch thread",
                ))
            }
        },
    )
}

/// `elfen_batch_attached`.
#[unsafe(no_mangle)]
pub extern "C" fn elfen_batch_attached() -> c_int {
    c_int::from(is_attached())
}

fn not_attached(what: &str) -> Error {
    Error::new(
        ESTATE,
        format!("{what}: this thread is not attached as a batch thread"),
    )
}

/// The `ELFEN_NAP_*` id of a backend.
pub fn nap_id(b: NapBackend) -> c_int {
    match b {
        NapBackend::Spin => 1,
        NapBackend::Futex => 2,
        NapBackend::Hybrid => 3,
        NapBackend::Umwait => 4,
        NapBackend::Mwaitx => 5,
    }
}

/// `elfen_batch_nap_backend`.
#[unsafe(no_mangle)]
pub extern "C" fn elfen_batch_nap_backend() -> c_int {
    guard(
        |c| c,
        || {
            with_current_thread(|t| nap_id(t.nap_backend()))
                .ok_or_else(|| not_attached("elfen_batch_nap_backend"))
        },
    )
}

/// `elfen_batch_describe`: snprintf-style.
///
/// # Safety
/// `buf` is NULL (with `len` 0) or `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_batch_describe(buf: *mut c_char, len: usize) -> c_int {
    guard(
        |c| c,
        || {
            let d = with_current_thread(|t| t.describe())
                .ok_or_else(|| not_attached("elfen_batch_describe"))?;
            if buf.is_null() && len != 0 {
                return Err(Error::new(EINVAL, "elfen_batch_describe: buf is NULL"));
            }
            if len > 0 {
                let n = d.len().min(len - 1);
                // SAFETY: n + 1 <= len bytes at buf (function contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(d.as_ptr(), buf.cast::<u8>(), n);
                    *buf.add(n) = 0;
                }
            }
            Ok(c_int::try_from(d.len()).unwrap_or(c_int::MAX))
        },
    )
}

/// `elfen_batch_stats` (elfen.h), field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CBatchStats {
    /// Checks that took the slow path.
    pub slow_checks: u64,
    /// Naps taken.
    pub naps: u64,
    /// Naps ended.
    pub wakes: u64,
    /// Time running batch code, ns.
    pub run_ns: u64,
    /// Of that, time co-running with a request, ns.
    pub corun_ns: u64,
    /// Time napping, ns.
    pub nap_ns: u64,
}

impl From<BatchStats> for CBatchStats {
    fn from(s: BatchStats) -> Self {
        CBatchStats {
            slow_checks: s.slow_checks,
            naps: s.naps,
            wakes: s.wakes,
            run_ns: s.run_ns,
            corun_ns: s.corun_ns,
            nap_ns: s.nap_ns,
        }
    }
}

/// `elfen_batch_stats_get`: the calling thread's own accounting.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_batch_stats_get(out: *mut CBatchStats) -> c_int {
    guard(
        |c| c,
        || {
            // SAFETY: per the function contract.
            let out = unsafe { out.as_mut() }
                .ok_or_else(|| Error::new(EINVAL, "elfen_batch_stats_get: out is NULL"))?;
            *out = with_current_thread(|t| t.stats())
                .ok_or_else(|| not_attached("elfen_batch_stats_get"))?
                .into();
            Ok(0)
        },
    )
}
