//! `elfen-kernels`: the batch kernels (Loop, Matrix, Flush, Stream) that
//! `elfen advise`'s probes and the harness run.
//!
//! A **product** crate: part of what an operator runs (`elfen advise`
//! starts them; `docs/architecture.md`); it depends on no lab crate.
//!
//! Four kernels (the Elfen paper's §4 "Batch Workloads" plus Stream), each
//! counting **work units** so progress can be measured:
//!
//! | kind | unit |
//! |---|---|
//! | `loop` | one call of an empty function |
//! | `matrix` | one 5×5 `f64` multiply `c = a × b` |
//! | `flush` | one zeroing of a 32 KB buffer |
//! | `stream` | one 4 KB chunk of stores into a 64 MB buffer |
//!
//! In Rust, with explicit checks ([`Kernel`]): every unit starts with
//! [`Check::check`]. [`NoCheck`] is the unchecked baseline; the runtime's
//! batch thread is the real check. [`Kernel::c_state`] hands a kernel's
//! inputs and buffers to a C implementation of the same kernels (`elfen
//! micro` builds one with and without `-finstrument-functions`).
//!
//! ```
//! use elfen_kernels::{Kernel, KernelKind, NoCheck};
//! use std::sync::atomic::{AtomicBool, AtomicU64};
//!
//! let kind: KernelKind = "matrix".parse().unwrap();
//! let mut k = Kernel::new(kind);
//! k.run_units(1000, &mut NoCheck);
//! assert_eq!(k.units(), 1000);
//!
//! // The harness's loop: run until told to stop, publishing progress.
//! let stop = AtomicBool::new(true); // (already set: returns at once)
//! let units = AtomicU64::new(0);
//! k.run_until(&mut NoCheck, &stop, &units, 1024);
//! ```
#![deny(missing_docs)]

mod buf;
mod check;
mod error;
mod kernel;
mod kind;

pub use check::{Check, CountCheck, FnCheck, NoCheck};
pub use error::KernelError;
pub use kernel::{
    C_STATE_BYTES, FLUSH_BYTES, Kernel, KernelConfig, MATRIX_N, Matrix5, STREAM_BYTES,
    STREAM_CHUNK_BYTES, matrix_multiply,
};
pub use kind::{KERNEL_NAMES, KernelKind, STREAM_MODE_NAMES, StreamMode};
