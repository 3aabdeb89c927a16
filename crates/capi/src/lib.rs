//! # elfen-capi — libelfen, the C ABI of elfen
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! Builds `libelfen.so` and `libelfen.a` (and an rlib for Rust users of the
//! same state) behind `bindings/c/elfen.h`:
//!
//! - pages: [`page`] (`elfen_page_create/open/destroy`, read-only views of
//!   the lines), for C LC services that are their own controller and for
//!   tests; [`failsafe`] (header line 1: the kill switch and its modes, the
//!   heartbeat and its fail-safe);
//! - the LC side: [`lc`] (`elfen_lc_attach/begin/end/begin_q/end_q/set_queue_len/detach`)
//!   over `elfen_runtime::LcLane`;
//! - the batch side: [`batch`] (`elfen_batch_attach/detach`,
//!   `elfen_check_slow`) over `elfen_runtime::BatchThread`, for the calling
//!   thread;
//! - errors: [`error`] (`elfen_last_error`, negative `ELFEN_E*` codes); no
//!   call aborts or unwinds into C.
//!
//! ## The fast path and its thread-local state
//!
//! `elfen_check()` is `static inline` in `elfen.h`: it loads the word the
//! thread watches and compares it with the value the thread last acted on,
//! both kept in an initial-exec `__thread` struct defined once in C
//! (`bindings/c/src/elfen_tls.c`, compiled in by `build.rs`). Only a mismatch
//! calls `elfen_check_slow()` (Rust), which runs the runtime's slow path
//! (policy, nap) and re-arms the struct through [`tls`]: watched word =
//! `BatchThread::watch_word()`, expected = `BatchThread::expected()`.
//!
//! ## The hook
//!
//! `bindings/c/src/elfen_hook.c` (`libelfen_hook.a`) defines
//! `__cyg_profile_func_enter` (and the empty `__cyg_profile_func_exit`),
//! clang's `__cyg_profile_func_enter_bare` and, on x86-64, `__fentry__`
//! (`-pg -mfentry`, in assembly: it must preserve every argument register)
//! as `elfen_check()`, so a C/C++ program rebuilt with one of those flags
//! checks at every function entry; linking it arms lazy attach: each thread
//! attaches itself at its first check from the `ELFEN_*` environment
//! variables ([`env`](mod@env)).
#![deny(missing_docs)]

pub mod batch;
pub mod env;
pub mod error;
pub mod failsafe;
pub mod lc;
pub mod page;
pub mod tls;

pub use batch::{
    attach_current_thread, detach_current_thread, is_attached, open_current_thread,
    set_lazy_attach, with_current_thread,
};
pub use error::{Error, last_error};
pub use page::{ElfenPage, PageOptions, page_spec};

use elfen_runtime::RuntimeError;

/// The C code and message of a runtime error (its `Display` names the page
/// file, the lane and the mismatch).
pub fn runtime_error(e: RuntimeError) -> Error {
    use RuntimeError as R;
    let code = match &e {
        R::Shm(s) => error::shm_code(s),
        R::BatchOnRequestLane { .. } | R::LcOnBatchLane { .. } | R::BadLane { .. } => error::ELANE,
        R::ReadOnly { .. } | R::LaneTaken { .. } => error::ESTATE,
        R::NapUnavailable { .. } => error::EINVAL,
        R::Pin { .. } => error::EOS,
        _ => error::EPAGE,
    };
    Error::new(code, e.to_string())
}
