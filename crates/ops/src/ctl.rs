//! The kill switch (`elfen ctl off` / `elfen ctl on`): stops all borrowing
//! on a page at once, and lets it resume.
//!
//! `off` sets the page's control word to one of the kill switch's modes
//! (PerfIso's two): **paused** (`KILL`: batch threads must not run batch
//! code; they nap until the switch clears — guards hold their lanes,
//! freezers freeze) or **unmanaged** (`UNMANAGED`: borrowing off, batch
//! threads run without napping, as if no elfen were there — guards stand
//! aside, freezers thaw). Batch threads obey at their next slow path. The
//! bits live in the page, so the switch works while the process that
//! controls the page hangs or is gone; writing them needs write access to
//! the page file (its owner or root). `on` clears both.

use elfen_shm::{Access, KillMode, Page, ShmError};
use std::path::Path;

/// Sets the kill switch of the page at `path` to `mode` (`KillMode::Off`
/// is `elfen ctl on`); returns the mode it was in.
pub fn set(path: &Path, mode: KillMode) -> Result<KillMode, ShmError> {
    let page = Page::attach(path, Access::Controller)?;
    let was = page.kill_mode();
    page.set_control(mode)?;
    Ok(was)
}
