/* elfen batch kernels in C: the state shared by both builds.
 *
 * kernels.c is compiled twice by build.rs: once with -finstrument-functions
 * (ELFEN_K_PREFIX = elfen_k_inst_) and once without (elfen_k_plain_). Both
 * builds include this header. The state is elfen-kernels' own (`CState` in
 * crates/kernels/src/kernel.rs, #[repr(C)], handed out by
 * `Kernel::c_state()`); this struct mirrors it field for field, and
 * src/ckernel.rs's test compares the sizes.
 */
#ifndef ELFEN_KERNELS_H
#define ELFEN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Kernel ids (= `KernelKind::id()` in Rust). */
#define ELFEN_K_LOOP 0
#define ELFEN_K_MATRIX 1
#define ELFEN_K_FLUSH 2
#define ELFEN_K_STREAM 3

/* Matrix side. */
#define ELFEN_K_MATRIX_N 5
/* Flush buffer: one L1D's worth (the paper's 32 KB). */
#define ELFEN_K_FLUSH_BYTES 32768
/* Stream: bytes written per work unit. */
#define ELFEN_K_STREAM_CHUNK_BYTES 4096

/* Everything a kernel touches; buffers are owned by the Rust side. */
struct elfen_k_state {
    double a[ELFEN_K_MATRIX_N * ELFEN_K_MATRIX_N];
    double b[ELFEN_K_MATRIX_N * ELFEN_K_MATRIX_N];
    double c[ELFEN_K_MATRIX_N * ELFEN_K_MATRIX_N];
    uint8_t *flush_buf;      /* ELFEN_K_FLUSH_BYTES, 64-byte aligned */
    uint8_t *stream_buf;     /* stream_len bytes, 64-byte aligned */
    uint64_t stream_len;     /* a multiple of ELFEN_K_STREAM_CHUNK_BYTES */
    uint64_t stream_off;     /* next chunk to write */
    uint64_t stream_pass;    /* completed passes over stream_buf */
    uint32_t stream_nt;      /* 1: non-temporal stores, 0: plain stores */
    uint32_t reserved;
};

_Static_assert(offsetof(struct elfen_k_state, flush_buf) == 600, "elfen_k_state.flush_buf");
_Static_assert(offsetof(struct elfen_k_state, stream_nt) == 640, "elfen_k_state.stream_nt");
_Static_assert(sizeof(struct elfen_k_state) == 648, "elfen_k_state size (elfen_kernels::C_STATE_BYTES)");

#endif
