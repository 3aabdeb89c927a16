/* elfen batch kernels in C (the Elfen paper's Loop, Matrix and Flush, plus
 * Stream), built twice by build.rs:
 *
 *   ELFEN_K_PREFIX=elfen_k_inst_   with -finstrument-functions: every function
 *                                  entry calls __cyg_profile_func_enter (the
 *                                  elfen check hook), as the paper's -pg did;
 *   ELFEN_K_PREFIX=elfen_k_plain_  without: the same code, no checks.
 *
 * One work unit = one call of a noinline unit function, so an instrumented
 * build checks once per unit, at the unit's entry:
 *   loop    one call of an empty function
 *   matrix  one 5x5 double multiply c = a x b
 *   flush   one zeroing of the 32 KB buffer
 *   stream  one 4 KB chunk of stores into the 64 MB buffer (next chunk each
 *           unit, wrapping; every byte of pass p is written with (p+1) & 0xff)
 */
#include "kernels.h"

#include <string.h>

#ifndef ELFEN_K_PREFIX
#error "build.rs defines ELFEN_K_PREFIX"
#endif
#define ELFEN_K_CAT2(a, b) a##b
#define ELFEN_K_CAT(a, b) ELFEN_K_CAT2(a, b)
#define K(name) ELFEN_K_CAT(ELFEN_K_PREFIX, name)

/* noipa (GCC >= 8) also stops GCC from proving a unit side-effect free and
 * deleting or hoisting the call; clang has no noipa, noinline + the asm
 * barriers below do the same there. */
#if defined(__clang__)
#define UNIT __attribute__((noinline, used))
#else
#define UNIT __attribute__((noinline, noipa, used))
#endif
/* Helpers that must not add checks of their own: -finstrument-functions also
 * instruments inlined functions, so anything inlined into a loop is marked. */
#define QUIET static inline __attribute__((always_inline, no_instrument_function))

/* Non-temporal stores through inline asm rather than <emmintrin.h>: the
 * intrinsics are inline functions, which -finstrument-functions would
 * instrument (one extra hook call per store). */
#if defined(__x86_64__)
typedef long long elfen_k_v2di __attribute__((vector_size(16)));
QUIET void K(stream_nt_chunk)(uint8_t *p, uint8_t v) {
    elfen_k_v2di x;
    uint64_t w = 0x0101010101010101ULL * v;
    x[0] = (long long)w;
    x[1] = (long long)w;
    for (size_t i = 0; i < ELFEN_K_STREAM_CHUNK_BYTES; i += 64) {
        __asm__ volatile("movntdq %1, %0" : "=m"(*(elfen_k_v2di *)(p + i)) : "x"(x));
        __asm__ volatile("movntdq %1, %0" : "=m"(*(elfen_k_v2di *)(p + i + 16)) : "x"(x));
        __asm__ volatile("movntdq %1, %0" : "=m"(*(elfen_k_v2di *)(p + i + 32)) : "x"(x));
        __asm__ volatile("movntdq %1, %0" : "=m"(*(elfen_k_v2di *)(p + i + 48)) : "x"(x));
    }
    __asm__ volatile("sfence" ::: "memory");
}
#define ELFEN_K_HAVE_NT 1
#endif

UNIT void K(loop_unit)(void) {
    __asm__ volatile("" ::: "memory");
}

UNIT void K(matrix_unit)(const double *restrict a, const double *restrict b,
                         double *restrict c) {
    for (int i = 0; i < ELFEN_K_MATRIX_N; i++) {
        for (int j = 0; j < ELFEN_K_MATRIX_N; j++) {
            double s = 0.0;
            for (int k = 0; k < ELFEN_K_MATRIX_N; k++)
                s += a[i * ELFEN_K_MATRIX_N + k] * b[k * ELFEN_K_MATRIX_N + j];
            c[i * ELFEN_K_MATRIX_N + j] = s;
        }
    }
}

UNIT void K(flush_unit)(uint8_t *buf) {
    memset(buf, 0, ELFEN_K_FLUSH_BYTES);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

UNIT void K(stream_unit)(struct elfen_k_state *s) {
    uint8_t *p = s->stream_buf + s->stream_off;
    uint8_t v = (uint8_t)(s->stream_pass + 1);
#if defined(ELFEN_K_HAVE_NT)
    if (s->stream_nt)
        K(stream_nt_chunk)(p, v);
    else
#endif
    {
        memset(p, v, ELFEN_K_STREAM_CHUNK_BYTES);
        __asm__ volatile("" : : "r"(p) : "memory");
    }
    s->stream_off += ELFEN_K_STREAM_CHUNK_BYTES;
    if (s->stream_off >= s->stream_len) {
        s->stream_off = 0;
        s->stream_pass++;
    }
}

/* sizeof(struct elfen_k_state), for the Rust side's layout check. */
size_t K(state_size)(void) { return sizeof(struct elfen_k_state); }

/* Runs `units` work units of kernel `kind`. The switch is hoisted out of the
 * loop so the loop body is the unit call alone. */
void K(run)(int kind, struct elfen_k_state *s, uint64_t units) {
    switch (kind) {
    case ELFEN_K_LOOP:
        for (uint64_t i = 0; i < units; i++)
            K(loop_unit)();
        break;
    case ELFEN_K_MATRIX:
        for (uint64_t i = 0; i < units; i++)
            K(matrix_unit)(s->a, s->b, s->c);
        break;
    case ELFEN_K_FLUSH:
        for (uint64_t i = 0; i < units; i++)
            K(flush_unit)(s->flush_buf);
        break;
    default:
        for (uint64_t i = 0; i < units; i++)
            K(stream_unit)(s);
        break;
    }
}

/* Runs units until *stop is non-zero (read every `every` units), storing
 * start + the units run so far to *units_out every `every` units. No
 * allocation, no system call. Returns the units run. (In the instrumented
 * build the call of run itself checks too: one extra check per `every`
 * units.) */
uint64_t K(run_until)(int kind, struct elfen_k_state *s, const uint8_t *stop,
                      uint64_t *units_out, uint64_t every, uint64_t start) {
    uint64_t n = 0;
    if (every == 0)
        every = 1;
    while (!__atomic_load_n(stop, __ATOMIC_RELAXED)) {
        K(run)(kind, s, every);
        n += every;
        __atomic_store_n(units_out, start + n, __ATOMIC_RELAXED);
    }
    return n;
}
