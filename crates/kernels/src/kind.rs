//! Which kernel, and how Stream writes.

use crate::error::KernelError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The four batch kernels. Names (serde, [`FromStr`], [`fmt::Display`]):
/// `loop`, `matrix`, `flush`, `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelKind {
    /// An empty function call (the paper's Loop: IPC ≈ 1, front end only).
    /// Unit: one call.
    Loop,
    /// A 5×5 `f64` matrix multiply (the paper's Matrix: high IPC, front end
    /// and functional units). Unit: one multiply `c = a × b`.
    Matrix,
    /// Zeroing a 32 KB buffer (the paper's Flush: flushes the L1D).
    /// Unit: one zeroing of the whole buffer.
    Flush,
    /// Stream stores over a 64 MB buffer (beyond L2, so it competes for the
    /// shared L3 and memory bandwidth — the co-runner that hurts an LC
    /// service on machines without SMT). Unit: one 4 KB chunk of stores.
    Stream,
}

/// The valid kernel names, for messages.
pub const KERNEL_NAMES: &str = "loop, matrix, flush, stream";

impl KernelKind {
    /// Every kind, in a fixed order.
    pub const ALL: [KernelKind; 4] = [
        KernelKind::Loop,
        KernelKind::Matrix,
        KernelKind::Flush,
        KernelKind::Stream,
    ];

    /// The name (`loop`, ...).
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Loop => "loop",
            KernelKind::Matrix => "matrix",
            KernelKind::Flush => "flush",
            KernelKind::Stream => "stream",
        }
    }

    /// What one work unit is.
    pub fn unit(self) -> &'static str {
        match self {
            KernelKind::Loop => "one call of an empty function",
            KernelKind::Matrix => "one 5x5 f64 matrix multiply",
            KernelKind::Flush => "one zeroing of a 32 KB buffer",
            KernelKind::Stream => "one 4 KB chunk of stores into a 64 MB buffer",
        }
    }

    /// The kernel's id in C implementations of the kernels (`ELFEN_K_LOOP`
    /// ... in `crates/micro/c/kernels.h`, which run over
    /// [`crate::Kernel::c_state`]).
    pub fn c_id(self) -> i32 {
        match self {
            KernelKind::Loop => 0,
            KernelKind::Matrix => 1,
            KernelKind::Flush => 2,
            KernelKind::Stream => 3,
        }
    }
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KernelKind {
    type Err = KernelError;
    /// Parses a name, ignoring ASCII case and surrounding blanks.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        KernelKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| KernelError::UnknownKind {
                given: s.to_string(),
                expected: KERNEL_NAMES,
            })
    }
}

/// How the Stream kernel stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// Ordinary stores (`memset`): every line is read for ownership into the
    /// cache hierarchy, filling L2 and L3 with the stream.
    Plain,
    /// Non-temporal stores (`movntdq` + `sfence` per unit): write-combining
    /// straight to memory, bypassing the caches.
    NonTemporal,
}

/// The valid stream mode names, for messages.
pub const STREAM_MODE_NAMES: &str = "plain, non_temporal";

impl StreamMode {
    /// The default: plain stores, the mode that hurt a co-running pointer
    /// chase more on the development VMs. Measured with `elfen micro`
    /// (figure *stream interference*, numbers in `docs/micro.md`): a 3, 4, 6
    /// and 8 MB chase on the other vCPU next to each mode, against a
    /// compute-only co-runner, over seven invocations. The two modes are
    /// close and the VM is noisy, but the verdict (the larger of each mode's
    /// largest slowdown over the sizes, by ≥ 5 %) named plain stores in 5
    /// invocations, non-temporal stores in 1, neither in 1; and plain stores
    /// slowed the 8 MB chase more in 6 of 7 (×0.99–1.20 against ×0.98–1.13).
    /// A plain store brings its line into the cache hierarchy and writes it
    /// back dirty, evicting the chase from the shared L3, which non-temporal
    /// stores bypass. `elfen micro` re-measures it on every run.
    pub const DEFAULT: StreamMode = StreamMode::Plain;

    /// Both modes.
    pub const ALL: [StreamMode; 2] = [StreamMode::Plain, StreamMode::NonTemporal];

    /// The name (`plain`, `non_temporal`).
    pub fn name(self) -> &'static str {
        match self {
            StreamMode::Plain => "plain",
            StreamMode::NonTemporal => "non_temporal",
        }
    }
}

impl Default for StreamMode {
    fn default() -> Self {
        StreamMode::DEFAULT
    }
}

impl fmt::Display for StreamMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StreamMode {
    type Err = KernelError;
    /// Parses `plain` or `non_temporal` (also `nt`, `non-temporal`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "plain" => Ok(StreamMode::Plain),
            "non_temporal" | "non-temporal" | "nt" => Ok(StreamMode::NonTemporal),
            _ => Err(KernelError::UnknownStreamMode {
                given: s.to_string(),
                expected: STREAM_MODE_NAMES,
            }),
        }
    }
}
