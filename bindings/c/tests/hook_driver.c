/*
 * The -finstrument-functions hook, end to end. For each program given (the
 * unmodified tests/instrumented.c, built with the flag and linked with
 * libelfen_hook, statically and against libelfen.so), this driver is the LC
 * service of a temporary page and runs the program as a child:
 *
 *  A. ELFEN_PAGE/ELFEN_LANE set, request lane busy from the start: the
 *     child's first check attaches it and naps (batch line `napping`,
 *     `naps`); it cannot finish while busy; after request end it runs to
 *     completion, with every call made, no warning, `attached` back to 0;
 *  B. the same with the lane idle at start and a request begun mid-run:
 *     both worker threads step aside (`napping` = 2), resume at the end;
 *  C. without ELFEN_PAGE (3 threads): runs normally, exactly one warning;
 *  D. ELFEN_QUIET=1: no warning;  E. a missing page, F. a request lane:
 *     runs normally, one warning naming the problem.
 *
 * Usage: hook_driver PROGRAM...
 */
#include "harness.h"

#include <elfen.h>
#include <signal.h>
#include <spawn.h>
#include <fcntl.h>
#include <sys/wait.h>

#define LOAD(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#define WAIT_UNTIL(cond, ms)                                                  \
    ({                                                                        \
        uint64_t deadline_ = t_now_ns() + (uint64_t)(ms) * 1000000u;          \
        int ok_ = 0;                                                          \
        while (!(ok_ = !!(cond)) && t_now_ns() < deadline_) t_sleep_us(200); \
        ok_;                                                                  \
    })

extern char **environ;
static pid_t child = -1;

static void kill_child(void) {
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        child = -1;
    }
}

/* Starts `argv` with the environment minus ELFEN_* plus `extra` (NULL-ended
 * "K=V" strings), stdout and stderr to files. */
static pid_t spawn(char *const argv[], const char *const extra[], const char *out, const char *err) {
    char *envp[512];
    size_t n = 0;
    for (char **e = environ; *e && n < 500; e++)
        if (strncmp(*e, "ELFEN_", 6) != 0) envp[n++] = *e;
    for (const char *const *x = extra; x && *x && n < 510; x++) envp[n++] = (char *)*x;
    envp[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0, "posix_spawn %s: %s", argv[0], strerror(rc));
    child = pid;
    return pid;
}

/* Whether the child is still running. */
static int running(void) {
    int st;
    return child > 0 && waitpid(child, &st, WNOHANG) == 0;
}

/* Waits up to `ms` for the child; its exit status, or -1 (killed after a
 * timeout, or died by a signal). */
static int reap(unsigned ms) {
    uint64_t deadline = t_now_ns() + (uint64_t)ms * 1000000u;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(child, &st, WNOHANG);
        if (r == child) break;
        if (t_now_ns() > deadline) {
            kill_child();
            return -1;
        }
        t_sleep_us(500);
    }
    child = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path) {
    size_t n = 0;
    char *s = (char *)t_read_file(path, &n);
    return s ? s : strdup("");
}

static int count_lines(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

struct run {
    const char *prog;
    char out[512], err[512], page[512], stop[512];
    char env_page[600], env_nap[64];
    const char *env[4]; /* ELFEN_PAGE, ELFEN_LANE=1, ELFEN_NAP */
    elfen_page *handle;
    elfen_lc *lc;
    const elfen_batch_line *bl;
};

static int prog_index; /* distinct files per program */

static void paths(struct run *r, const char *tag) {
    char n[96];
    snprintf(n, sizeof n, "%d-%s.out", prog_index, tag);
    t_path(r->out, sizeof r->out, n);
    snprintf(n, sizeof n, "%d-%s.err", prog_index, tag);
    t_path(r->err, sizeof r->err, n);
    snprintf(n, sizeof n, "%d-%s.page", prog_index, tag);
    t_path(r->page, sizeof r->page, n);
    snprintf(n, sizeof n, "%d-%s.stop", prog_index, tag);
    t_path(r->stop, sizeof r->stop, n);
}

/* A page with the driver as its LC (lane 0), the child's environment. */
static void setup(struct run *r, const char *prog, const char *phase, const char *nap) {
    char tag[64];
    memset(r, 0, sizeof *r);
    r->prog = prog;
    snprintf(tag, sizeof tag, "%s-%s", phase, nap);
    paths(r, tag);
    r->handle = elfen_page_create(r->page, "0:1", NULL);
    REQUIRE(r->handle != NULL, "create: %s", elfen_last_error());
    r->lc = elfen_lc_attach(r->page, 0);
    REQUIRE(r->lc != NULL, "lc attach: %s", elfen_last_error());
    r->bl = elfen_page_batch(r->handle, 1);
    snprintf(r->env_page, sizeof r->env_page, "ELFEN_PAGE=%s", r->page);
    snprintf(r->env_nap, sizeof r->env_nap, "ELFEN_NAP=%s", nap);
    r->env[0] = r->env_page;
    r->env[1] = "ELFEN_LANE=1";
    r->env[2] = r->env_nap;
    r->env[3] = NULL;
}

static void teardown(struct run *r) {
    elfen_lc_detach(r->lc);
    elfen_page_destroy(r->handle);
}

/* A: busy from the start. */
static void busy_at_start(const char *prog, const char *nap) {
    struct run r;
    setup(&r, prog, "A", nap);
    const elfen_batch_line *bl = r.bl;
    elfen_lc_begin(r.lc, 1);
    char *argv[] = {(char *)prog, "200000", "2", NULL};
    spawn(argv, r.env, r.out, r.err);
    CHECK(WAIT_UNTIL(LOAD(bl->napping) >= 1 && LOAD(bl->naps) >= 1, 5000),
          "[A %s %s] the instrumented child did not nap while the request lane was busy "
          "(attached %u, naps %" PRIu64 ")",
          nap, prog, LOAD(bl->attached), (uint64_t)LOAD(bl->naps));
    t_sleep_us(50000);
    CHECK(running(), "[A %s %s] the child finished while the request lane was busy", nap, prog);
    CHECK(LOAD(bl->napping) >= 1, "[A %s %s] still napping after 50 ms of busy", nap, prog);
    elfen_lc_end(r.lc);
    int st = reap(30000);
    char *out = slurp(r.out), *err = slurp(r.err);
    CHECK(st == 0, "[A %s %s] exit status %d; stderr: %s", nap, prog, st, err);
    CHECK(!strcmp(out, "calls=400000\n"), "[A %s %s] stdout \"%s\"", nap, prog, out);
    CHECK(err[0] == 0, "[A %s %s] no warning expected, stderr: %s", nap, prog, err);
    CHECK(LOAD(bl->naps) >= 1 && LOAD(bl->wakes) == LOAD(bl->naps),
          "[A %s %s] naps %" PRIu64 " wakes %" PRIu64, nap, prog, (uint64_t)LOAD(bl->naps),
          (uint64_t)LOAD(bl->wakes));
    CHECK(LOAD(bl->slow_checks) >= 1, "[A %s %s] slow checks", nap, prog);
    CHECK(LOAD(bl->attached) == 0 && LOAD(bl->napping) == 0 && LOAD(bl->sleepers) == 0,
          "[A %s %s] after exit: attached %u napping %u sleepers %u", nap, prog, LOAD(bl->attached),
          LOAD(bl->napping), LOAD(bl->sleepers));
    t_note("A %s %s: naps %" PRIu64 ", slow checks %" PRIu64, nap, prog, (uint64_t)LOAD(bl->naps),
           (uint64_t)LOAD(bl->slow_checks));
    free(out);
    free(err);
    teardown(&r);
}

/* B: a request begins mid-run. */
static void busy_mid_run(const char *prog, const char *nap) {
    struct run r;
    setup(&r, prog, "B", nap);
    const elfen_batch_line *bl = r.bl;
    char *argv[] = {(char *)prog, "100000000000", "2", r.stop, NULL};
    spawn(argv, r.env, r.out, r.err);
    /* main and both workers attach at their first function entry */
    CHECK(WAIT_UNTIL(LOAD(bl->attached) == 3, 5000), "[B %s %s] attached %u, want 3 (main + 2 threads)",
          nap, prog, LOAD(bl->attached));
    t_sleep_us(10000);
    CHECK(LOAD(bl->napping) == 0, "[B %s %s] napping while idle", nap, prog);
    uint64_t naps0 = LOAD(bl->naps);
    elfen_lc_begin(r.lc, 2);
    CHECK(WAIT_UNTIL(LOAD(bl->napping) == 2, 5000),
          "[B %s %s] both workers should step aside mid-run: napping %u", nap, prog, LOAD(bl->napping));
    t_sleep_us(20000);
    CHECK(LOAD(bl->napping) == 2 && running(), "[B %s %s] stays napping while busy", nap, prog);
    elfen_lc_end(r.lc);
    CHECK(WAIT_UNTIL(LOAD(bl->napping) == 0, 5000), "[B %s %s] did not resume", nap, prog);
    CHECK(LOAD(bl->naps) >= naps0 + 2, "[B %s %s] naps %" PRIu64 " -> %" PRIu64, nap, prog, naps0,
          (uint64_t)LOAD(bl->naps));
    FILE *f = fopen(r.stop, "w");
    if (f) fclose(f);
    int st = reap(30000);
    char *out = slurp(r.out), *err = slurp(r.err);
    unsigned long calls = 0;
    CHECK(st == 0 && sscanf(out, "calls=%lu", &calls) == 1 && calls > 0,
          "[B %s %s] exit %d, stdout \"%s\", stderr \"%s\"", nap, prog, st, out, err);
    CHECK(LOAD(bl->attached) == 0, "[B %s %s] attached %u after exit", nap, prog, LOAD(bl->attached));
    free(out);
    free(err);
    teardown(&r);
}

/* C-F: runs normally; `want` warnings containing each needle. */
static void runs_normally(const char *prog, const char *tag, const char *const env[], int want,
                          const char *needle, const char *needle2) {
    struct run r;
    memset(&r, 0, sizeof r);
    r.prog = prog;
    paths(&r, tag);
    char *argv[] = {(char *)prog, "100000", "3", NULL};
    spawn(argv, env, r.out, r.err);
    int st = reap(30000);
    char *out = slurp(r.out), *err = slurp(r.err);
    CHECK(st == 0, "[%s %s] exit status %d, stderr %s", tag, prog, st, err);
    CHECK(!strcmp(out, "calls=300000\n"), "[%s %s] stdout \"%s\"", tag, prog, out);
    int lines = count_lines(err, "\n");
    CHECK(lines == want, "[%s %s] %d stderr lines, want %d: \"%s\"", tag, prog, lines, want, err);
    CHECK(want == 0 || count_lines(err, "elfen: ") == 1, "[%s %s] one warning: \"%s\"", tag, prog, err);
    if (needle) CHECK(strstr(err, needle) != NULL, "[%s %s] warning lacks \"%s\": \"%s\"", tag, prog, needle, err);
    if (needle2) CHECK(strstr(err, needle2) != NULL, "[%s %s] warning lacks \"%s\": \"%s\"", tag, prog, needle2, err);
    if (want && !strcmp(tag, "C") && prog_index == 1) t_note("warning without ELFEN_PAGE: %.*s", (int)strcspn(err, "\n"), err);
    free(out);
    free(err);
}

static void without_page(const char *prog) {
    runs_normally(prog, "C", NULL, 1, "ELFEN_PAGE is not set", "checks are off");
    const char *quiet[] = {"ELFEN_QUIET=1", NULL};
    runs_normally(prog, "D", quiet, 0, NULL, NULL);
    char missing[600], p[512];
    snprintf(missing, sizeof missing, "ELFEN_PAGE=%s", t_path(p, sizeof p, "no-such-page"));
    const char *bad[] = {missing, "ELFEN_LANE=1", NULL};
    runs_normally(prog, "E", bad, 1, "does not exist", "no-such-page");
    char good[512], envp[600], name[32];
    snprintf(name, sizeof name, "%d-F.page", prog_index);
    t_path(good, sizeof good, name);
    elfen_page *page = elfen_page_create(good, "0:1", NULL);
    REQUIRE(page != NULL, "create: %s", elfen_last_error());
    snprintf(envp, sizeof envp, "ELFEN_PAGE=%s", good);
    const char *req[] = {envp, "ELFEN_LANE=0", NULL};
    runs_normally(prog, "F", req, 1, "is a request lane", NULL);
    CHECK(LOAD(elfen_page_batch(page, 1)->attached) == 0, "[F] nobody attached");
    elfen_page_destroy(page);
}

int main(int argc, char **argv) {
    t_name = "hook";
    REQUIRE(argc >= 2, "usage: hook_driver PROGRAM...");
    t_tmpdir();
    atexit(kill_child);
    for (int i = 1; i < argc; i++) {
        prog_index = i;
        busy_at_start(argv[i], "spin");
        busy_at_start(argv[i], "futex");
        busy_mid_run(argv[i], "hybrid");
        without_page(argv[i]);
    }
    t_finish();
}
