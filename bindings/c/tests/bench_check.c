/*
 * Figures, not a test (`make -C bindings/c bench`): the cost of the inline
 * fast path elfen_check() in a tight -O2 loop, and of one
 * __cyg_profile_func_enter + __cyg_profile_func_exit pair on an empty
 * instrumented function against the same function built without the flag.
 * The thread is attached to an idle request lane (the fast path's common
 * case: the word equals expected), then detached (checks off). Medians of
 * RUNS runs; numbers from a shared, noisy VM are a sanity check only.
 */
#define _GNU_SOURCE
#include <elfen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void empty_plain(void);
void empty_instrumented(void);

enum { RUNS = 9 };
static const unsigned long N = 200000000ul;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

/* The loops under test (noinline, so objdump shows them whole). */
__attribute__((noinline)) void loop_empty(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) __asm__ volatile("");
}
__attribute__((noinline)) void loop_check(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        elfen_check();
        __asm__ volatile("");
    }
}
__attribute__((noinline)) void loop_call(void (*f)(void), unsigned long n) {
    for (unsigned long i = 0; i < n; i++) f();
}

static double per_op(void (*run)(void)) {
    double v[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = now_ns();
        run();
        v[r] = (now_ns() - t0) / (double)N;
    }
    return median(v, RUNS);
}

static void run_empty(void) { loop_empty(N); }
static void run_check(void) { loop_check(N); }
static void run_plain(void) { loop_call(empty_plain, N); }
static void run_inst(void) { loop_call(empty_instrumented, N); }

static void measure(const char *state) {
    double e = per_op(run_empty), c = per_op(run_check), p = per_op(run_plain), i = per_op(run_inst);
    printf("%-28s loop %.3f ns | loop+elfen_check %.3f ns (check %.3f ns) | "
           "call empty %.3f ns | instrumented %.3f ns (enter+exit pair %.3f ns)\n",
           state, e, c, c - e, p, i, i - p);
}

int main(int argc, char **argv) {
    char path[256];
    snprintf(path, sizeof path, "%s/elfen-bench-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    setenv("ELFEN_QUIET", "1", 1);
    elfen_page *page = elfen_page_create(path, "0:1", NULL);
    if (!page) {
        fprintf(stderr, "bench: %s\n", elfen_last_error());
        return 1;
    }
    elfen_batch_options o = ELFEN_BATCH_OPTIONS_INIT;
    o.nap = ELFEN_NAP_SPIN;
    o.pin = argc > 1 && !strcmp(argv[1], "--no-pin") ? 0 : 1;
    if (elfen_batch_attach_ex(path, 1, &o) != 0) {
        fprintf(stderr, "bench: %s\n", elfen_last_error());
        elfen_page_destroy(page);
        return 1;
    }
    elfen_check(); /* the first check runs the policy; later ones match */
    printf("elfen bench: %lu iterations x %d runs, medians (ns per iteration)\n", N, RUNS);
    measure("attached, lane idle:");
    printf("  (slow checks during the runs: %llu)\n",
           (unsigned long long)__atomic_load_n(&elfen_page_batch(page, 1)->slow_checks, __ATOMIC_RELAXED));
    elfen_batch_detach();
    measure("detached (checks off):");
    elfen_page_destroy(page);
    return 0;
}
