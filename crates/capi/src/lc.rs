//! `elfen_lc_*`: the LC side, one handle per request lane, over
//! `elfen_runtime::LcLane`. Each call is a few plain stores on the lane's LC
//! line (a futex wake at request end only when a batch thread sleeps in
//! the OS).

use crate::error::{EINVAL, Error, guard};
use crate::page::path_arg;
use crate::runtime_error;
use elfen_runtime::LcLane;
use std::ffi::{c_char, c_int};

/// `elfen_lc`: an attached request lane.
pub struct ElfenLc {
    lane: LcLane,
}

impl ElfenLc {
    /// The runtime's LC lane.
    pub fn lane(&mut self) -> &mut LcLane {
        &mut self.lane
    }
}

/// `elfen_lc_attach`: attaches the calling thread as the LC thread of
/// request lane `lane` of the page at `page_path`.
///
/// # Safety
/// `page_path` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_lc_attach(page_path: *const c_char, lane: u32) -> *mut ElfenLc {
    guard(
        |_| std::ptr::null_mut(),
        || {
            let path = path_arg(page_path, "elfen_lc_attach")?;
            let lane = LcLane::open(&path, lane).map_err(runtime_error)?;
            Ok(Box::into_raw(Box::new(ElfenLc { lane })))
        },
    )
}

fn with_lc(lc: *mut ElfenLc, what: &str, f: impl FnOnce(&mut LcLane)) -> c_int {
    // SAFETY: NULL or a live handle used by one thread at a time (elfen.h).
    match unsafe { lc.as_mut() } {
        Some(h) => {
            f(&mut h.lane);
            0
        }
        None => guard(
            |c| c,
            || {
                Err(Error::new(
                    EINVAL,
                    format!("{what}: the elfen_lc handle is NULL"),
                ))
            },
        ),
    }
}

/// `elfen_lc_begin`: a request starts (busy, id `id`).
///
/// # Safety
/// `lc` is NULL or a live handle, used by one thread at a time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_lc_begin(lc: *mut ElfenLc, id: u64) -> c_int {
    with_lc(lc, "elfen_lc_begin", |l| l.request_begin(id))
}

/// `elfen_lc_end`: the running request ends (idle).
///
/// # Safety
/// `lc` is NULL or a live handle, used by one thread at a time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_lc_end(lc: *mut ElfenLc) -> c_int {
    with_lc(lc, "elfen_lc_end", |l| l.request_end())
}

/// `elfen_lc_begin_q`: a request starts (busy, id `id`) and `queue_len`
/// requests still wait behind it, published in the same store of `state`.
///
/// # Safety
/// `lc` is NULL or a live handle, used by one thread at a time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_lc_begin_q(lc: *mut ElfenLc, id: u64, queue_len: u32) -> c_int {
    with_lc(lc, "elfen_lc_begin_q", |l| {
        l.request_begin_with_queue(id, queue_len)
    })
}

/// `elfen_lc_end_q`: the running request ends (idle) with `queue_len`
/// requests waiting, published in the same store of `state`.
///
/// # Safety
/// `lc` is NULL or a live handle, used by one thread at a time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_lc_end_q(lc: *mut ElfenLc, queue_len: u32) -> c_int {
    with_lc(lc, "elfen_lc_end_q", |l| {
        l.request_end_with_queue(queue_len)
    })
}

/// `elfen_lc_set_queue_len`: publishes the queue length.
///
/// # Safety
/// `lc` is NULL or a live handle, used by one thread at a time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_lc_set_queue_len(lc: *mut ElfenLc, queue_len: u32) -> c_int {
    with_lc(lc, "elfen_lc_set_queue_len", |l| l.set_queue_len(queue_len))
}

/// `elfen_lc_detach`: releases the handle (ends an open request).
///
/// # Safety
/// `lc` is NULL or a live handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_lc_detach(lc: *mut ElfenLc) {
    if !lc.is_null() {
        guard(
            |_| (),
            || {
                // SAFETY: per the function contract.
                drop(unsafe { Box::from_raw(lc) });
                Ok(())
            },
        );
    }
}
