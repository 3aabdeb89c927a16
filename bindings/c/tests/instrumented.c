/*
 * An "unmodified" batch program: it never mentions elfen. The tests build
 * it with -finstrument-functions (and with -pg -mfentry, and with clang's
 * -finstrument-function-entry-bare) and link it with libelfen_hook, so every
 * function entry below checks; the environment (ELFEN_PAGE, ELFEN_LANE,
 * ELFEN_NAP) decides whether those checks step aside for an LC service.
 *
 *   instrumented [CALLS [THREADS [STOPFILE]]]
 *
 * Each of THREADS threads calls work() CALLS times, or until STOPFILE exists
 * (looked for every 65536 calls); then it prints calls=<total calls>.
 * work() takes six integer and eight double arguments (every argument
 * register) and returns what it was passed: a hook that naps at its entry
 * must hand them on intact, or the program prints "corrupt" and exits 3.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <stdatomic.h>

static volatile unsigned long sink;
static atomic_ulong corrupt;

__attribute__((noinline)) static double work(unsigned long i, unsigned long a, unsigned long b, unsigned long c,
                                             unsigned long d, unsigned long e, double x0, double x1, double x2,
                                             double x3, double x4, double x5, double x6, double x7) {
    sink += i;
    __asm__ volatile("" ::: "memory");
    if (a != i + 1 || b != i + 2 || c != i + 3 || d != i + 4 || e != i + 5) return -1.0;
    return x0 + 2 * x1 + 4 * x2 + 8 * x3 + 16 * x4 + 32 * x5 + 64 * x6 + 128 * x7;
}

struct job {
    unsigned long calls;
    const char *stopfile;
    unsigned long done;
};

static void *run(void *arg) {
    struct job *j = (struct job *)arg;
    unsigned long i;
    for (i = 0; i < j->calls; i++) {
        double x = (double)(i & 0xFF);
        /* 255 * x exactly: every double is a small integer */
        if (work(i, i + 1, i + 2, i + 3, i + 4, i + 5, x, x, x, x, x, x, x, x) != 255.0 * x)
            atomic_fetch_add(&corrupt, 1);
        if (j->stopfile && (i & 0xFFFF) == 0xFFFF && access(j->stopfile, F_OK) == 0) {
            i++;
            break;
        }
    }
    j->done = i;
    return NULL;
}

int main(int argc, char **argv) {
    unsigned long calls = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    const char *stopfile = argc > 3 ? argv[3] : NULL;
    if (threads < 1 || threads > 64) threads = 1;
    pthread_t tid[64];
    struct job jobs[64];
    for (int t = 0; t < threads; t++) {
        jobs[t].calls = calls;
        jobs[t].stopfile = stopfile;
        jobs[t].done = 0;
        if (pthread_create(&tid[t], NULL, run, &jobs[t]) != 0) {
            perror("pthread_create");
            return 2;
        }
    }
    unsigned long total = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        total += jobs[t].done;
    }
    if (atomic_load(&corrupt)) {
        printf("corrupt=%lu calls=%lu\n", (unsigned long)atomic_load(&corrupt), total);
        return 3;
    }
    printf("calls=%lu\n", total);
    return 0;
}
