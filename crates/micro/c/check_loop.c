/* The C half of `elfen micro`'s fast-path figure: the same two loops as the
 * Rust ones in src/fastpath.rs, with elfen.h's static inline elfen_check().
 * The empty asm only keeps the loop counter alive (no memory clobber), so
 * the compiler may keep the thread-local pointer in a register, as it would
 * in any loop of real batch code. */
#include "elfen.h"

__attribute__((noinline)) void elfen_micro_loop_check(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        elfen_check();
        __asm__ volatile("" : : "r"(i));
    }
}

__attribute__((noinline)) void elfen_micro_loop_empty(uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        __asm__ volatile("" : : "r"(i));
}
