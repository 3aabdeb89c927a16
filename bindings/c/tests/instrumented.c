/*
 * An "unmodified" batch program: it never mentions elfen. The tests build
 * it with -finstrument-functions and link it with libelfen_hook, so every
 * function entry below checks; the environment (ELFEN_PAGE, ELFEN_LANE,
 * ELFEN_NAP) decides whether those checks step aside for an LC service.
 *
 *   instrumented [CALLS [THREADS [STOPFILE]]]
 *
 * Each of THREADS threads calls work() CALLS times, or until STOPFILE exists
 * (looked for every 65536 calls); then it prints calls=<total calls>.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void work(unsigned long i) {
    sink += i;
    __asm__ volatile("" ::: "memory");
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
        work(i);
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
    printf("calls=%lu\n", total);
    return 0;
}
