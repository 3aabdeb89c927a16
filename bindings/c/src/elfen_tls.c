/*
 * The one definition of the fast path's thread-local state, and the tiny
 * accessors through which libelfen's Rust slow path reads and re-arms it.
 * Compiled into libelfen by crates/capi/build.rs, so Rust and C share one
 * TLS object. Nothing here may be instrumented: every function carries
 * no_instrument_function, whatever CFLAGS say.
 */
#include "elfen.h"

#define ELFEN_INTERNAL __attribute__((no_instrument_function, visibility("default")))

/* The word a thread that never attached watches (with expected 0).
 * 0: its checks do nothing. The hook library's constructor arms it (1):
 * then each such thread's first check takes the slow path once, which
 * attaches it from ELFEN_PAGE/ELFEN_LANE or disables it. */
static volatile uint64_t elfen_unattached_word = 0;

/* The word of a detached or disabled thread: always 0, its checks do nothing. */
static const volatile uint64_t elfen_off_word = 0;

__thread struct elfen_check_tls elfen__tls __attribute__((tls_model("initial-exec"))) = {
    &elfen_unattached_word, 0};

/* Where the calling thread's checks point. */
enum { ELFEN_TLS_UNATTACHED = 0, ELFEN_TLS_OFF = 1, ELFEN_TLS_WATCHING = 2 };

ELFEN_INTERNAL int elfen__tls_kind(void) {
    if (elfen__tls.word == &elfen_unattached_word) return ELFEN_TLS_UNATTACHED;
    if (elfen__tls.word == &elfen_off_word) return ELFEN_TLS_OFF;
    return ELFEN_TLS_WATCHING;
}

/* Watch `word`; a value other than `expected` takes the slow path. */
ELFEN_INLINE void elfen_tls_store(const volatile uint64_t *word, uint64_t expected) {
    elfen__tls.word = word;
    elfen__tls.expected = expected;
    /* a signal handler on this thread that checks sees word and expected as
     * a pair only after both stores */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

ELFEN_INTERNAL void elfen__tls_watch(const volatile uint64_t *word, uint64_t expected) {
    elfen_tls_store(word, expected);
}

ELFEN_INTERNAL void elfen__tls_set_off(void) { elfen_tls_store(&elfen_off_word, 0); }

ELFEN_INTERNAL void elfen__tls_set_unattached(void) { elfen_tls_store(&elfen_unattached_word, 0); }

ELFEN_INTERNAL const volatile uint64_t *elfen__tls_word(void) { return elfen__tls.word; }

ELFEN_INTERNAL uint64_t elfen__tls_expected(void) { return elfen__tls.expected; }

/* Called by the hook library's constructor: unattached threads take the
 * slow path once, at their first check. */
ELFEN_INTERNAL void elfen__arm_lazy_attach(void) {
    __atomic_store_n(&elfen_unattached_word, 1, __ATOMIC_RELEASE);
}

/* elfen_set_lazy_attach(0): unattached threads' checks do nothing again. */
ELFEN_INTERNAL void elfen__disarm_lazy_attach(void) {
    __atomic_store_n(&elfen_unattached_word, 0, __ATOMIC_RELEASE);
}

ELFEN_INTERNAL int elfen__lazy_attach_armed(void) {
    return __atomic_load_n(&elfen_unattached_word, __ATOMIC_ACQUIRE) != 0;
}
