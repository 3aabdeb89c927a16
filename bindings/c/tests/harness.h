/*
 * A tiny test harness for the C tests: CHECK macros that print what failed
 * and keep going, a temporary directory removed at exit (also on a fatal
 * signal), and small helpers. Header-only; each test is one program.
 */
#ifndef ELFEN_TEST_HARNESS_H
#define ELFEN_TEST_HARNESS_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define T_UNUSED __attribute__((unused))

static int t_failures;
static int t_checks;
static const char *t_name = "test";

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        t_checks++;                                                             \
        if (!(cond)) {                                                          \
            t_failures++;                                                       \
            fprintf(stderr, "%s: FAIL %s:%d: %s: ", t_name, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

#define CHECK_EQ_U64(a, b, ...)                                                          \
    do {                                                                                 \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                 \
        t_checks++;                                                                      \
        if (a_ != b_) {                                                                  \
            t_failures++;                                                                \
            fprintf(stderr, "%s: FAIL %s:%d: %s == %s: %" PRIu64 " != %" PRIu64 ": ", t_name, \
                    __FILE__, __LINE__, #a, #b, a_, b_);                                 \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
        }                                                                                \
    } while (0)

/* A failure that makes going on pointless. */
#define REQUIRE(cond, ...)                                                      \
    do {                                                                        \
        CHECK(cond, __VA_ARGS__);                                               \
        if (!(cond)) t_finish();                                                \
    } while (0)

T_UNUSED static void t_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", t_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* A part of the test that cannot run here: prints it and appends one line
 * to the test log named by $ELFEN_TEST_LOG (elfen_cmd::skip's format:
 * skip, suite, test, need, reason — tab-separated), so that the test script
 * lists it and fails when this machine offers `need` (a token such as
 * "cpus:2", "root", "program:clang"). */
T_UNUSED static void t_skip(const char *what, const char *need, const char *reason) {
    fprintf(stderr, "%s: skipped %s: %s (needs %s)\n", t_name, what, reason, need);
    const char *log = getenv("ELFEN_TEST_LOG");
    if (!log || !*log) return;
    FILE *f = fopen(log, "a");
    if (!f) {
        fprintf(stderr, "%s: cannot append to the test log %s: %s\n", t_name, log, strerror(errno));
        return;
    }
    char line[1024];
    int n = snprintf(line, sizeof line, "skip\tc/%s\t%s\t%s\t%s\n", t_name, what, need, reason);
    if (n > 0) fwrite(line, 1, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1, f);
    fclose(f);
}

/* ---- a temporary directory, removed at exit and on fatal signals ------- */
static char t_dir[256];

T_UNUSED static void t_rm_dir(void) {
    if (!t_dir[0]) return;
    DIR *d = opendir(t_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", t_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(t_dir);
    t_dir[0] = 0;
}

T_UNUSED static void t_on_signal(int sig) {
    t_rm_dir();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Makes a fresh temporary directory (never /dev/shm) and returns it. */
T_UNUSED static const char *t_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(t_dir, sizeof t_dir, "%s/elfen-ctest-XXXXXX", base);
    if (!mkdtemp(t_dir)) {
        fprintf(stderr, "%s: cannot create a temporary directory under %s: %s\n", t_name, base,
                strerror(errno));
        exit(2);
    }
    atexit(t_rm_dir);
    int sigs[] = {SIGINT, SIGTERM, SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], t_on_signal);
    return t_dir;
}

/* A path inside the temporary directory. */
T_UNUSED static const char *t_path(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", t_dir, name);
    return buf;
}

T_UNUSED static int t_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

T_UNUSED static uint64_t t_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

T_UNUSED static void t_sleep_us(unsigned us) {
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Reads a whole file into a malloc'd buffer; NULL if it cannot. */
T_UNUSED static unsigned char *t_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *b = (unsigned char *)malloc(cap + 1);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            unsigned char *nb = (unsigned char *)realloc(b, cap * 2 + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = n;
    }
    return b;
}

/* Prints the summary and exits non-zero on any failure. */
T_UNUSED static void t_finish(void) {
    if (t_failures)
        fprintf(stderr, "%s: %d of %d checks FAILED\n", t_name, t_failures, t_checks);
    else
        fprintf(stderr, "%s: all %d checks passed\n", t_name, t_checks);
    exit(t_failures ? 1 : 0);
}

#endif
