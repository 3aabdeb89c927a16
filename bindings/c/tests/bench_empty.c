/* An empty function, compiled twice by `make bench`: plain, and with
 * -finstrument-functions -DINSTRUMENTED (its entry and exit then call the
 * hook). The loop that calls it lives in bench_check.c, not instrumented. */
#ifdef INSTRUMENTED
#define EMPTY empty_instrumented
#else
#define EMPTY empty_plain
#endif

__attribute__((noinline)) void EMPTY(void) { __asm__ volatile("" ::: "memory"); }
