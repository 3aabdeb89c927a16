//! `elfen_page_*` for header line 1: the kill switch and its modes (paused /
//! unmanaged), the heartbeat and its fail-safe — the C face of
//! `elfen_shm::failsafe`. Writers need a created page (controller); the
//! readers work on any handle. Batch threads of the C library obey all of
//! it through the runtime's slow path.

use crate::error::{EINVAL, Error, guard};
use crate::page::{ElfenPage, handle};
use elfen_shm::{BatchMode, KillMode, ShmError};
use std::ffi::c_int;

/// `ELFEN_KILL_OFF`: batch threads follow their lane's policy.
pub const KILL_OFF: c_int = 0;
/// `ELFEN_KILL_PAUSED`: batch paused (`ELFEN_CONTROL_KILL`).
pub const KILL_PAUSED: c_int = 1;
/// `ELFEN_KILL_UNMANAGED`: batch runs unmanaged (`ELFEN_CONTROL_UNMANAGED`).
pub const KILL_UNMANAGED: c_int = 2;

/// `ELFEN_BATCH_MANAGED`: the policy decides.
pub const BATCH_MANAGED: c_int = 0;
/// `ELFEN_BATCH_UNMANAGED`: batch threads never nap.
pub const BATCH_UNMANAGED: c_int = 1;
/// `ELFEN_BATCH_KILLED`: paused by the kill switch.
pub const BATCH_KILLED: c_int = 2;
/// `ELFEN_BATCH_STALE`: paused by a stale heartbeat.
pub const BATCH_STALE: c_int = 3;

fn kill_code(m: KillMode) -> c_int {
    match m {
        KillMode::Off => KILL_OFF,
        KillMode::Paused => KILL_PAUSED,
        KillMode::Unmanaged => KILL_UNMANAGED,
    }
}

fn batch_code(m: BatchMode) -> c_int {
    match m {
        BatchMode::Managed => BATCH_MANAGED,
        BatchMode::Unmanaged => BATCH_UNMANAGED,
        BatchMode::Killed => BATCH_KILLED,
        BatchMode::Stale => BATCH_STALE,
    }
}

/// Runs `f` on the page behind `page` (EINVAL naming `what` for NULL);
/// returns `f`'s non-negative result or the error's code.
fn with_page(
    page: *const ElfenPage,
    what: &str,
    f: impl FnOnce(&elfen_shm::Page) -> Result<c_int, ShmError>,
) -> c_int {
    guard(
        |c| c,
        || {
            let p =
                handle(page).ok_or_else(|| Error::new(EINVAL, format!("{what}: page is NULL")))?;
            Ok(f(p.page())?)
        },
    )
}

/// `elfen_page_set_kill`: sets or clears `ELFEN_CONTROL_KILL` (controller only).
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_set_kill(page: *mut ElfenPage, on: c_int) -> c_int {
    with_page(page, "elfen_page_set_kill", |p| {
        p.set_kill(on != 0).map(|()| 0)
    })
}

/// `elfen_page_set_kill_mode`: sets both kill-switch bits to `mode`
/// (`ELFEN_KILL_*`; controller only).
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_set_kill_mode(page: *mut ElfenPage, mode: c_int) -> c_int {
    let m = match mode {
        KILL_OFF => KillMode::Off,
        KILL_PAUSED => KillMode::Paused,
        KILL_UNMANAGED => KillMode::Unmanaged,
        _ => {
            return guard(
                |c| c,
                || {
                    Err(Error::new(
                        EINVAL,
                        format!(
                            "elfen_page_set_kill_mode: unknown mode {mode} (ELFEN_KILL_OFF, _PAUSED or _UNMANAGED)"
                        ),
                    ))
                },
            );
        }
    };
    with_page(page, "elfen_page_set_kill_mode", |p| {
        p.set_control(m).map(|()| 0)
    })
}

/// `elfen_page_kill_mode`: the kill switch's mode (`ELFEN_KILL_*`).
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_kill_mode(page: *const ElfenPage) -> c_int {
    with_page(page, "elfen_page_kill_mode", |p| {
        Ok(kill_code(p.kill_mode()))
    })
}

/// `elfen_page_set_unmanaged`: sets or clears `ELFEN_CONTROL_UNMANAGED`
/// (controller only).
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_set_unmanaged(page: *mut ElfenPage, on: c_int) -> c_int {
    with_page(page, "elfen_page_set_unmanaged", |p| {
        p.set_unmanaged(on != 0).map(|()| 0)
    })
}

/// `elfen_page_beat`: heartbeat = now (controller only).
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_beat(page: *mut ElfenPage) -> c_int {
    with_page(page, "elfen_page_beat", |p| p.beat().map(|()| 0))
}

/// `elfen_page_set_heartbeat_stale`: the fail-safe's bound, ns (0 = off;
/// controller only; turning it on beats first).
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_set_heartbeat_stale(
    page: *mut ElfenPage,
    stale_ns: u64,
) -> c_int {
    with_page(page, "elfen_page_set_heartbeat_stale", |p| {
        p.set_heartbeat_stale(stale_ns).map(|()| 0)
    })
}

/// `elfen_page_heartbeat_age_ns`: 1 and `*age_ns` = the heartbeat's age,
/// or 0 if the controller never beat (`*age_ns` untouched).
///
/// # Safety
/// `page` is NULL or a live handle; `age_ns` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_heartbeat_age_ns(
    page: *const ElfenPage,
    age_ns: *mut u64,
) -> c_int {
    if age_ns.is_null() {
        return guard(
            |c| c,
            || {
                Err(Error::new(
                    EINVAL,
                    "elfen_page_heartbeat_age_ns: age_ns is NULL",
                ))
            },
        );
    }
    with_page(page, "elfen_page_heartbeat_age_ns", |p| {
        Ok(match p.heartbeat_age_ns() {
            Some(a) => {
                // SAFETY: non-NULL and writable per the function contract.
                unsafe { age_ns.write(a) };
                1
            }
            None => 0,
        })
    })
}

/// `elfen_page_heartbeat_stale`: 1 if the fail-safe is on and the
/// heartbeat stale, else 0.
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_heartbeat_stale(page: *const ElfenPage) -> c_int {
    with_page(page, "elfen_page_heartbeat_stale", |p| {
        Ok(c_int::from(p.heartbeat_stale()))
    })
}

/// `elfen_page_batch_mode`: what batch threads' slow paths do now
/// (`ELFEN_BATCH_*`).
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_batch_mode(page: *const ElfenPage) -> c_int {
    with_page(page, "elfen_page_batch_mode", |p| {
        Ok(batch_code(p.batch_mode()))
    })
}
