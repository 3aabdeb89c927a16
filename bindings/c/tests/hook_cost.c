/*
 * Figures, not a test (`make -C bindings/c hook-cost`): runs UNITS work
 * units of one batch kernel (crates/micro/c/kernels.c) in one build on a
 * thread attached to an idle request lane, so that
 * `valgrind --tool=callgrind --toggle-collect=elfen_k_<BUILD>_run` counts
 * the instructions of exactly those units: the instrumented builds' count
 * minus the plain build's, per unit, is what one hook call costs (the
 * caller's share and the hook's), independent of how busy the machine is.
 *
 *   hook_cost BUILD KIND UNITS     BUILD: plain, inst, fentry, inst_so,
 *                                  cplain, cbare; KIND: 0 loop .. 3 stream
 *
 * Builds (Makefile): plain = gcc; inst = gcc -finstrument-functions;
 * fentry = gcc -pg -mfentry; inst_so = gcc -finstrument-functions in a
 * shared object that links libelfen_hook.a itself; cplain = clang; cbare =
 * clang -finstrument-function-entry-bare. A build not compiled in (no
 * clang, not x86-64) is refused with exit status 2.
 */
#define _GNU_SOURCE
#include <elfen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"

typedef void (*run_fn)(int kind, struct elfen_k_state *s, uint64_t units);

#define DECLARE(p) void elfen_k_##p##_run(int kind, struct elfen_k_state *s, uint64_t units);
DECLARE(plain)
DECLARE(inst)
DECLARE(inst_so)
#ifdef HAVE_FENTRY
DECLARE(fentry)
#endif
#ifdef HAVE_CLANG
DECLARE(cplain)
DECLARE(cbare)
#endif

static run_fn lookup(const char *build) {
    if (!strcmp(build, "plain")) return elfen_k_plain_run;
    if (!strcmp(build, "inst")) return elfen_k_inst_run;
    if (!strcmp(build, "inst_so")) return elfen_k_inst_so_run;
#ifdef HAVE_FENTRY
    if (!strcmp(build, "fentry")) return elfen_k_fentry_run;
#endif
#ifdef HAVE_CLANG
    if (!strcmp(build, "cplain")) return elfen_k_cplain_run;
    if (!strcmp(build, "cbare")) return elfen_k_cbare_run;
#endif
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: hook_cost BUILD KIND UNITS\n");
        return 2;
    }
    run_fn run = lookup(argv[1]);
    if (!run) {
        fprintf(stderr, "hook_cost: build %s is not compiled in\n", argv[1]);
        return 2;
    }
    int kind = atoi(argv[2]);
    uint64_t units = strtoull(argv[3], NULL, 10);

    char path[256];
    snprintf(path, sizeof path, "%s/elfen-hook-cost-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    setenv("ELFEN_QUIET", "1", 1);
    elfen_page *page = elfen_page_create(path, "0:1", NULL);
    if (!page) {
        fprintf(stderr, "hook_cost: %s\n", elfen_last_error());
        return 1;
    }
    elfen_batch_options o = ELFEN_BATCH_OPTIONS_INIT;
    o.nap = ELFEN_NAP_SPIN;
    o.pin = 0;
    if (elfen_batch_attach_ex(path, 1, &o) != 0) {
        fprintf(stderr, "hook_cost: %s\n", elfen_last_error());
        elfen_page_destroy(page);
        return 1;
    }
    elfen_check(); /* the first check runs the policy; the measured ones match */

    static struct elfen_k_state s;
    s.flush_buf = aligned_alloc(4096, ELFEN_K_FLUSH_BYTES);
    s.stream_len = 1u << 20;
    s.stream_buf = aligned_alloc(4096, s.stream_len);
    memset(s.flush_buf, 0, ELFEN_K_FLUSH_BYTES);
    memset(s.stream_buf, 0, s.stream_len);
    run(kind, &s, units);

    uint64_t slow = __atomic_load_n(&elfen_page_batch(page, 1)->slow_checks, __ATOMIC_RELAXED);
    elfen_batch_detach();
    elfen_page_destroy(page);
    free(s.flush_buf);
    free(s.stream_buf);
    printf("slow_checks=%llu\n", (unsigned long long)slow);
    return 0;
}
