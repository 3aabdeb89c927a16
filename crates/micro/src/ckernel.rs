//! The C batch kernels (`c/kernels.c`), built by `build.rs` with
//! `-finstrument-functions` (every unit's entry calls libelfen's check hook
//! `__cyg_profile_func_enter`), on x86-64 with `-pg -mfentry` (every unit's
//! first instruction calls libelfen's `__fentry__`), and without. They run over an
//! `elfen_kernels::Kernel`'s inputs and buffers ([`Kernel::c_state`]), so
//! the C and Rust kernels share one definition of a kernel's state.

use elfen_kernels::{Kernel, KernelConfig, KernelError, KernelKind, Matrix5};
use serde::{Deserialize, Serialize};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64};

mod ffi {
    use std::ffi::c_void;
    unsafe extern "C" {
        pub(super) fn elfen_k_plain_state_size() -> usize;
        pub(super) fn elfen_k_inst_run(kind: i32, s: *mut c_void, units: u64);
        pub(super) fn elfen_k_inst_run_until(
            kind: i32,
            s: *mut c_void,
            stop: *const u8,
            units_out: *mut u64,
            every: u64,
            start: u64,
        ) -> u64;
        pub(super) fn elfen_k_plain_run(kind: i32, s: *mut c_void, units: u64);
        pub(super) fn elfen_k_plain_run_until(
            kind: i32,
            s: *mut c_void,
            stop: *const u8,
            units_out: *mut u64,
            every: u64,
            start: u64,
        ) -> u64;
    }
    #[cfg(target_arch = "x86_64")]
    unsafe extern "C" {
        pub(super) fn elfen_k_fentry_run(kind: i32, s: *mut c_void, units: u64);
        pub(super) fn elfen_k_fentry_run_until(
            kind: i32,
            s: *mut c_void,
            stop: *const u8,
            units_out: *mut u64,
            every: u64,
            start: u64,
        ) -> u64;
    }
}

type RunFn = unsafe extern "C" fn(i32, *mut c_void, u64);
type RunUntilFn = unsafe extern "C" fn(i32, *mut c_void, *const u8, *mut u64, u64, u64) -> u64;

/// `sizeof(struct elfen_k_state)` as `c/kernels.h` declares it (must equal
/// [`elfen_kernels::C_STATE_BYTES`]; a test checks).
pub fn c_state_size() -> usize {
    // SAFETY: returns a constant.
    unsafe { ffi::elfen_k_plain_state_size() }
}

/// Which build of the C kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CBuild {
    /// Compiled with `-finstrument-functions`: each unit (a non-inlined
    /// call) enters the check hook first, as the paper's `-pg` checks did.
    Instrumented,
    /// Compiled with `-pg -mfentry` (x86-64): each unit's first instruction
    /// calls the check hook `__fentry__`, with no arguments and no exit hook.
    Fentry,
    /// The same source compiled without the flag: no checks.
    Plain,
}

impl CBuild {
    /// `instrumented`, `fentry` or `plain`.
    pub fn name(self) -> &'static str {
        match self {
            CBuild::Instrumented => "instrumented",
            CBuild::Fentry => "fentry",
            CBuild::Plain => "plain",
        }
    }

    /// Whether this build exists here (`Fentry`: on x86-64 only).
    pub fn available(self) -> bool {
        self != CBuild::Fentry || cfg!(target_arch = "x86_64")
    }

    /// The build's entry points.
    ///
    /// # Panics
    /// For a build that is not [`CBuild::available`].
    fn entry_points(self) -> (RunFn, RunUntilFn) {
        match self {
            CBuild::Instrumented => (ffi::elfen_k_inst_run, ffi::elfen_k_inst_run_until),
            CBuild::Plain => (ffi::elfen_k_plain_run, ffi::elfen_k_plain_run_until),
            #[cfg(target_arch = "x86_64")]
            CBuild::Fentry => (ffi::elfen_k_fentry_run, ffi::elfen_k_fentry_run_until),
            #[cfg(not(target_arch = "x86_64"))]
            CBuild::Fentry => panic!("the -pg -mfentry build exists on x86-64 only"),
        }
    }
}

/// A C batch kernel of one build, with its own buffers and unit count.
///
/// The instrumented build's checks act on the calling thread: with a batch
/// thread attached on it (through `libelfen`) they nap while the request lane
/// is busy; with none attached they cost a hook call and return.
#[derive(Debug)]
pub struct CKernel {
    build: CBuild,
    inner: Kernel,
    units: u64,
}

impl CKernel {
    /// A C kernel of `kind` and `build` with the default configuration
    /// (buffers allocated and pre-faulted now).
    ///
    /// # Panics
    /// If the allocation fails, like `Vec`.
    pub fn new(kind: KernelKind, build: CBuild) -> CKernel {
        match CKernel::with_config(kind, build, KernelConfig::default()) {
            Ok(k) => k,
            Err(e) => panic!("elfen-micro: {e}"),
        }
    }

    /// A C kernel with `config` (a [`KernelError::BadConfig`] too for a build
    /// that is not [`CBuild::available`]).
    pub fn with_config(
        kind: KernelKind,
        build: CBuild,
        config: KernelConfig,
    ) -> Result<CKernel, KernelError> {
        if !build.available() {
            return Err(KernelError::BadConfig(format!(
                "the {} build of the C kernels exists on x86-64 only",
                build.name()
            )));
        }
        Ok(CKernel {
            build,
            inner: Kernel::with_config(kind, config)?,
            units: 0,
        })
    }

    /// Which kernel.
    pub fn kind(&self) -> KernelKind {
        self.inner.kind()
    }

    /// Which build.
    pub fn build(&self) -> CBuild {
        self.build
    }

    /// Work units run so far.
    pub fn units(&self) -> u64 {
        self.units
    }

    fn state(&mut self) -> (i32, *mut c_void) {
        (self.inner.kind().c_id(), self.inner.c_state())
    }

    /// Runs `units` work units (each one non-inlined C call; in the
    /// instrumented build each starts with the check hook).
    pub fn run_units(&mut self, units: u64) {
        let (kind, s) = self.state();
        let (run, _) = self.build.entry_points();
        // SAFETY: `s` is the kernel's live state in the layout c/kernels.h
        // declares (Kernel::c_state; sizes checked by a test), and the C code
        // touches only what c_state's contract allows.
        unsafe { run(kind, s, units) }
        self.units += units;
    }

    /// Runs units until `stop` is set, reading it every
    /// `publish_every_units` units and then storing the total unit count
    /// to `units_out` (relaxed). No allocation, no system call in the loop
    /// (beyond what the check hook does). Returns the units run by this call.
    pub fn run_until(
        &mut self,
        stop: &AtomicBool,
        units_out: &AtomicU64,
        publish_every_units: u64,
    ) -> u64 {
        let (kind, s) = self.state();
        let stop = stop.as_ptr() as *const u8;
        let out = units_out.as_ptr();
        let every = publish_every_units.max(1);
        let start = self.units;
        let (_, run_until) = self.build.entry_points();
        // SAFETY: as in run_units; `stop` (a bool, one byte) and `units_out`
        // outlive the call and the C code accesses them only atomically.
        let n = unsafe { run_until(kind, s, stop, out, every, start) };
        self.units += n;
        n
    }

    /// Sets Matrix's inputs `a` and `b` (each unit computes `a × b`).
    pub fn set_matrix_inputs(&mut self, a: &Matrix5, b: &Matrix5) {
        self.inner.set_matrix_inputs(a, b);
    }

    /// Matrix's last product (zeros before the first unit).
    pub fn matrix_product(&self) -> Matrix5 {
        self.inner.matrix_product()
    }

    /// Flush's buffer (empty for other kinds).
    pub fn flush_buffer(&self) -> &[u8] {
        self.inner.flush_buffer()
    }

    /// Flush's buffer, writable (tests dirty it to see it zeroed).
    pub fn flush_buffer_mut(&mut self) -> &mut [u8] {
        self.inner.flush_buffer_mut()
    }

    /// Stream's buffer (empty for other kinds); after pass `p` (0-based)
    /// every byte equals `(p + 1) mod 256`.
    pub fn stream_buffer(&self) -> &[u8] {
        self.inner.stream_buffer()
    }

    /// Completed passes of Stream over its buffer.
    pub fn stream_passes(&self) -> u64 {
        self.inner.stream_passes()
    }
}
