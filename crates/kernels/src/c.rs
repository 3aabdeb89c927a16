//! The C kernels (`c/kernels.c`), built twice: with `-finstrument-functions`
//! (every function entry calls the elfen check hook
//! `__cyg_profile_func_enter`) and without. Safe wrappers over both.

use crate::error::KernelError;
use crate::kernel::{KernelConfig, State};
use crate::kind::KernelKind;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64};

mod ffi {
    use crate::kernel::CState;
    unsafe extern "C" {
        pub(super) fn elfen_k_inst_run(kind: i32, s: *mut CState, units: u64);
        pub(super) fn elfen_k_inst_run_until(
            kind: i32,
            s: *mut CState,
            stop: *const u8,
            units_out: *mut u64,
            every: u64,
            start: u64,
        ) -> u64;
        pub(super) fn elfen_k_plain_run(kind: i32, s: *mut CState, units: u64);
        pub(super) fn elfen_k_plain_run_until(
            kind: i32,
            s: *mut CState,
            stop: *const u8,
            units_out: *mut u64,
            every: u64,
            start: u64,
        ) -> u64;
    }
}

/// Which build of the C kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CBuild {
    /// Compiled with `-finstrument-functions`: each unit (a non-inlined
    /// call) enters the check hook first, as the paper's `-pg` checks did.
    Instrumented,
    /// The same source compiled without the flag: no checks.
    Plain,
}

impl CBuild {
    /// `instrumented` or `plain`.
    pub fn name(self) -> &'static str {
        match self {
            CBuild::Instrumented => "instrumented",
            CBuild::Plain => "plain",
        }
    }
}

/// A C batch kernel of one build, with its own buffers and unit count.
///
/// The instrumented build's checks act on the calling thread: with a batch
/// thread attached on it (through `libelfen`) they nap while the request lane
/// is busy; with none attached they cost a hook call and return.
pub struct CKernel {
    kind: KernelKind,
    build: CBuild,
    config: KernelConfig,
    st: State,
    units: u64,
}

impl std::fmt::Debug for CKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CKernel")
            .field("kind", &self.kind)
            .field("build", &self.build)
            .field("config", &self.config)
            .field("units", &self.units)
            .finish()
    }
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
            Err(e) => panic!("elfen-kernels: {e}"),
        }
    }

    /// A C kernel with `config`.
    pub fn with_config(
        kind: KernelKind,
        build: CBuild,
        config: KernelConfig,
    ) -> Result<CKernel, KernelError> {
        Ok(CKernel {
            kind,
            build,
            config,
            st: State::new(kind, &config)?,
            units: 0,
        })
    }

    /// Which kernel.
    pub fn kind(&self) -> KernelKind {
        self.kind
    }

    /// Which build.
    pub fn build(&self) -> CBuild {
        self.build
    }

    /// Work units run so far.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Runs `units` work units (each one non-inlined C call; in the
    /// instrumented build each starts with the check hook).
    pub fn run_units(&mut self, units: u64) {
        let s: *mut _ = &mut self.st.c;
        // SAFETY: `s` points to this kernel's state, whose buffer pointers
        // are live and sized as the C code expects (State::new); the C code
        // touches only the buffers of `kind`, which State::new allocated.
        unsafe {
            match self.build {
                CBuild::Instrumented => ffi::elfen_k_inst_run(self.kind.c_id(), s, units),
                CBuild::Plain => ffi::elfen_k_plain_run(self.kind.c_id(), s, units),
            }
        }
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
        let s: *mut _ = &mut self.st.c;
        let stop = stop.as_ptr() as *const u8;
        let out = units_out.as_ptr();
        let every = publish_every_units.max(1);
        // SAFETY: as in run_units; `stop` (a bool, one byte) and `units_out`
        // outlive the call and the C code accesses them only atomically.
        let n = unsafe {
            match self.build {
                CBuild::Instrumented => {
                    ffi::elfen_k_inst_run_until(self.kind.c_id(), s, stop, out, every, self.units)
                }
                CBuild::Plain => {
                    ffi::elfen_k_plain_run_until(self.kind.c_id(), s, stop, out, every, self.units)
                }
            }
        };
        self.units += n;
        n
    }

    crate::kernel::state_accessors!();
}
