//! The Rust kernels, with a [`Check`] at the start of every work unit.

use crate::buf::AlignedBuf;
use crate::check::Check;
use crate::error::KernelError;
use crate::kind::{KernelKind, StreamMode};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Side of the Matrix kernel's square matrices.
pub const MATRIX_N: usize = 5;
/// Bytes zeroed by one Flush unit (the paper's 32 KB, one L1D's worth).
pub const FLUSH_BYTES: usize = 32 * 1024;
/// Default size of the Stream kernel's buffer (64 MB: 32× a vCPU's L2).
pub const STREAM_BYTES: usize = 64 << 20;
/// Bytes stored by one Stream unit.
pub const STREAM_CHUNK_BYTES: usize = 4096;

/// Size of the state [`Kernel::c_state`] points at (`sizeof(struct
/// elfen_k_state)` in C: three 5×5 `f64` matrices, two buffer pointers,
/// Stream's length, offset and pass count, its store mode and a reserved
/// `u32`).
pub const C_STATE_BYTES: usize = std::mem::size_of::<CState>();

/// A 5×5 matrix, row-major.
pub type Matrix5 = [[f64; MATRIX_N]; MATRIX_N];

/// How a kernel is built. [`Default`] is what [`Kernel::new`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KernelConfig {
    /// How Stream stores ([`StreamMode::DEFAULT`]).
    pub stream_mode: StreamMode,
    /// Size of Stream's buffer in bytes: a non-zero multiple of
    /// [`STREAM_CHUNK_BYTES`] ([`STREAM_BYTES`]).
    pub stream_bytes: usize,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            stream_mode: StreamMode::DEFAULT,
            stream_bytes: STREAM_BYTES,
        }
    }
}

impl KernelConfig {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), KernelError> {
        if self.stream_bytes == 0 || self.stream_bytes % STREAM_CHUNK_BYTES != 0 {
            return Err(KernelError::BadConfig(format!(
                "stream_bytes must be a non-zero multiple of {STREAM_CHUNK_BYTES}, got {}",
                self.stream_bytes
            )));
        }
        Ok(())
    }
}

/// The state every kernel touches, laid out for C implementations of the
/// kernels too ([`Kernel::c_state`]; `struct elfen_k_state` in
/// `crates/micro/c/kernels.h` mirrors it field for field).
#[repr(C)]
pub(crate) struct CState {
    pub(crate) a: [f64; MATRIX_N * MATRIX_N],
    pub(crate) b: [f64; MATRIX_N * MATRIX_N],
    pub(crate) c: [f64; MATRIX_N * MATRIX_N],
    pub(crate) flush_buf: *mut u8,
    pub(crate) stream_buf: *mut u8,
    pub(crate) stream_len: u64,
    pub(crate) stream_off: u64,
    pub(crate) stream_pass: u64,
    pub(crate) stream_nt: u32,
    pub(crate) reserved: u32,
}

/// [`CState`] plus the buffers its pointers point into.
pub(crate) struct State {
    pub(crate) c: CState,
    pub(crate) flush: AlignedBuf,
    pub(crate) stream: AlignedBuf,
}

// SAFETY: the raw pointers in `c` point into `flush` and `stream`, which the
// state owns; moving the state between threads moves the ownership.
unsafe impl Send for State {}

/// The default Matrix inputs: small integers, so products are exact.
fn default_inputs() -> (Matrix5, Matrix5) {
    let mut a = [[0.0; MATRIX_N]; MATRIX_N];
    let mut b = [[0.0; MATRIX_N]; MATRIX_N];
    for i in 0..MATRIX_N {
        for j in 0..MATRIX_N {
            a[i][j] = ((i * MATRIX_N + j) % 7) as f64 + 1.0;
            b[i][j] = ((i + 2 * j) % 5) as f64 - 2.0;
        }
    }
    (a, b)
}

fn flat(m: &Matrix5) -> [f64; MATRIX_N * MATRIX_N] {
    let mut f = [0.0; MATRIX_N * MATRIX_N];
    for (i, row) in m.iter().enumerate() {
        f[i * MATRIX_N..(i + 1) * MATRIX_N].copy_from_slice(row);
    }
    f
}

fn unflat(f: &[f64; MATRIX_N * MATRIX_N]) -> Matrix5 {
    let mut m = [[0.0; MATRIX_N]; MATRIX_N];
    for (i, row) in m.iter_mut().enumerate() {
        row.copy_from_slice(&f[i * MATRIX_N..(i + 1) * MATRIX_N]);
    }
    m
}

impl State {
    /// Allocates (and pre-faults) only the buffers `kind` uses.
    pub(crate) fn new(kind: KernelKind, config: &KernelConfig) -> Result<State, KernelError> {
        config.validate()?;
        let flush = if kind == KernelKind::Flush {
            AlignedBuf::new(FLUSH_BYTES)?
        } else {
            AlignedBuf::empty()
        };
        let stream = if kind == KernelKind::Stream {
            AlignedBuf::new(config.stream_bytes)?
        } else {
            AlignedBuf::empty()
        };
        let (a, b) = default_inputs();
        Ok(State {
            c: CState {
                a: flat(&a),
                b: flat(&b),
                c: [0.0; MATRIX_N * MATRIX_N],
                flush_buf: flush.as_ptr(),
                stream_buf: stream.as_ptr(),
                stream_len: stream.len() as u64,
                stream_off: 0,
                stream_pass: 0,
                stream_nt: u32::from(config.stream_mode == StreamMode::NonTemporal),
                reserved: 0,
            },
            flush,
            stream,
        })
    }

    pub(crate) fn set_matrix_inputs(&mut self, a: &Matrix5, b: &Matrix5) {
        self.c.a = flat(a);
        self.c.b = flat(b);
    }

    pub(crate) fn matrix_product(&self) -> Matrix5 {
        unflat(&self.c.c)
    }

    pub(crate) fn flush_buffer(&self) -> &[u8] {
        self.flush.as_slice()
    }

    pub(crate) fn flush_buffer_mut(&mut self) -> &mut [u8] {
        self.flush.as_mut_slice()
    }

    pub(crate) fn stream_buffer(&self) -> &[u8] {
        self.stream.as_slice()
    }
}

// ---- the unit bodies: never inlined, so a unit is a real call ----

#[inline(never)]
fn loop_unit() {
    black_box(());
}

#[inline(never)]
fn matrix_unit(
    a: &[f64; MATRIX_N * MATRIX_N],
    b: &[f64; MATRIX_N * MATRIX_N],
    c: &mut [f64; MATRIX_N * MATRIX_N],
) {
    for i in 0..MATRIX_N {
        for j in 0..MATRIX_N {
            let mut s = 0.0;
            for k in 0..MATRIX_N {
                s += a[i * MATRIX_N + k] * b[k * MATRIX_N + j];
            }
            c[i * MATRIX_N + j] = s;
        }
    }
}

#[inline(never)]
fn flush_unit(buf: &mut [u8]) {
    buf.fill(0);
    black_box(buf);
}

#[inline(never)]
fn stream_unit(c: &mut CState, buf: &mut [u8]) {
    let off = c.stream_off as usize;
    let v = (c.stream_pass.wrapping_add(1)) as u8;
    let chunk = &mut buf[off..off + STREAM_CHUNK_BYTES];
    if c.stream_nt != 0 {
        stream_nt(chunk, v);
    } else {
        chunk.fill(v);
        black_box(chunk);
    }
    c.stream_off += STREAM_CHUNK_BYTES as u64;
    if c.stream_off >= c.stream_len {
        c.stream_off = 0;
        c.stream_pass += 1;
    }
}

/// Non-temporal stores of `v` over `chunk` (64-byte aligned, a multiple of 64
/// bytes), then a store fence so the unit's stores are globally visible.
#[inline(always)]
fn stream_nt(chunk: &mut [u8], v: u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__m128i, _mm_set1_epi8, _mm_sfence, _mm_stream_si128};
        debug_assert!(chunk.as_ptr() as usize % 64 == 0 && chunk.len() % 64 == 0);
        // SAFETY: SSE2 is part of x86-64; every 16-byte store lies inside
        // `chunk`, which is 16-byte aligned (the buffer is page-aligned and
        // chunks are multiples of 4 KB).
        unsafe {
            let x = _mm_set1_epi8(v as i8);
            let p = chunk.as_mut_ptr() as *mut __m128i;
            for i in 0..chunk.len() / 16 {
                _mm_stream_si128(p.add(i), x);
            }
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        chunk.fill(v);
        black_box(chunk);
    }
}

/// A Rust batch kernel: its buffers (allocated and pre-faulted once, at
/// construction) and its unit count.
///
/// Every unit starts with `check.check()`, like the prologue check the
/// paper's compiler inserts; the unit body itself is a non-inlined call.
pub struct Kernel {
    kind: KernelKind,
    config: KernelConfig,
    st: State,
    units: u64,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("kind", &self.kind)
            .field("config", &self.config)
            .field("units", &self.units)
            .finish()
    }
}

impl Kernel {
    /// A kernel of `kind` with the default [`KernelConfig`]. Allocates its
    /// buffers (32 KB for Flush, 64 MB for Stream) and maps every page now.
    ///
    /// # Panics
    /// If the allocation fails, like `Vec`.
    pub fn new(kind: KernelKind) -> Kernel {
        match Kernel::with_config(kind, KernelConfig::default()) {
            Ok(k) => k,
            Err(e) => panic!("elfen-kernels: {e}"),
        }
    }

    /// A kernel of `kind` with `config`.
    pub fn with_config(kind: KernelKind, config: KernelConfig) -> Result<Kernel, KernelError> {
        Ok(Kernel {
            kind,
            config,
            st: State::new(kind, &config)?,
            units: 0,
        })
    }

    /// Which kernel.
    pub fn kind(&self) -> KernelKind {
        self.kind
    }

    /// Its configuration.
    pub fn config(&self) -> &KernelConfig {
        &self.config
    }

    /// Work units run so far.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Runs one work unit: `check.check()`, then the unit.
    #[inline]
    pub fn run_unit<C: Check + ?Sized>(&mut self, check: &mut C) {
        self.run_units(1, check);
    }

    /// Runs `units` work units, each starting with `check.check()`. The
    /// dispatch on the kind is outside the loop: the loop body is the check
    /// and the unit call.
    #[inline]
    pub fn run_units<C: Check + ?Sized>(&mut self, units: u64, check: &mut C) {
        let st = &mut self.st;
        match self.kind {
            KernelKind::Loop => {
                for _ in 0..units {
                    check.check();
                    loop_unit();
                }
            }
            KernelKind::Matrix => {
                for _ in 0..units {
                    check.check();
                    matrix_unit(black_box(&st.c.a), black_box(&st.c.b), &mut st.c.c);
                }
            }
            KernelKind::Flush => {
                let buf = st.flush.as_mut_slice();
                for _ in 0..units {
                    check.check();
                    flush_unit(buf);
                }
            }
            KernelKind::Stream => {
                let buf = st.stream.as_mut_slice();
                for _ in 0..units {
                    check.check();
                    stream_unit(&mut st.c, buf);
                }
            }
        }
        self.units += units;
    }

    /// Runs units until `stop` is set, reading it every
    /// `publish_every_units` units and then storing the kernel's total unit
    /// count ([`Kernel::units`]) to `units_out` (relaxed). No allocation and
    /// no system call in the loop. Returns the units run by this call.
    ///
    /// `publish_every_units` trades stop latency against overhead: 1,024 is
    /// ~1 µs of Loop, ~0.1 ms of Matrix and ~1 ms of Flush or Stream here.
    pub fn run_until<C: Check + ?Sized>(
        &mut self,
        check: &mut C,
        stop: &AtomicBool,
        units_out: &AtomicU64,
        publish_every_units: u64,
    ) -> u64 {
        let every = publish_every_units.max(1);
        let start = self.units;
        while !stop.load(Relaxed) {
            self.run_units(every, check);
            units_out.store(self.units, Relaxed);
        }
        self.units - start
    }

    /// Sets Matrix's inputs `a` and `b` (each unit computes `a × b`).
    pub fn set_matrix_inputs(&mut self, a: &Matrix5, b: &Matrix5) {
        self.st.set_matrix_inputs(a, b);
    }

    /// Matrix's last product (zeros before the first unit).
    pub fn matrix_product(&self) -> Matrix5 {
        self.st.matrix_product()
    }

    /// Flush's buffer (empty for other kinds).
    pub fn flush_buffer(&self) -> &[u8] {
        self.st.flush_buffer()
    }

    /// Flush's buffer, writable (tests dirty it to see it zeroed).
    pub fn flush_buffer_mut(&mut self) -> &mut [u8] {
        self.st.flush_buffer_mut()
    }

    /// Stream's buffer (empty for other kinds). After pass `p` (0-based)
    /// is complete every byte equals `(p + 1) mod 256`.
    pub fn stream_buffer(&self) -> &[u8] {
        self.st.stream_buffer()
    }

    /// Completed passes of Stream over its buffer.
    pub fn stream_passes(&self) -> u64 {
        self.st.c.stream_pass
    }

    /// The kernel's state in its C layout ([`C_STATE_BYTES`] bytes:
    /// `double a[25], b[25], c[25]; uint8_t *flush_buf, *stream_buf;
    /// uint64_t stream_len, stream_off, stream_pass; uint32_t stream_nt,
    /// reserved;`), for a C implementation of the same kernel to run over
    /// this kernel's inputs and buffers (`elfen micro`'s C kernels do).
    ///
    /// The pointer is valid until the kernel is moved or dropped. C code may
    /// write Matrix's product `c`, the bytes of the two buffers (their
    /// lengths: [`FLUSH_BYTES`] and `stream_len`), `stream_off` (a multiple
    /// of [`STREAM_CHUNK_BYTES`] below `stream_len`) and `stream_pass`;
    /// nothing else. Units it runs are not counted in [`Kernel::units`].
    pub fn c_state(&mut self) -> *mut std::ffi::c_void {
        (&mut self.st.c as *mut CState).cast()
    }
}

/// `a × b`, computed plainly (the reference the tests compare with).
pub fn matrix_multiply(a: &Matrix5, b: &Matrix5) -> Matrix5 {
    let mut c = [[0.0; MATRIX_N]; MATRIX_N];
    for i in 0..MATRIX_N {
        for j in 0..MATRIX_N {
            c[i][j] = (0..MATRIX_N).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    c
}
