/*
 * Header line 1 from C (linked against libelfen.so): the kill switch's
 * modes and the heartbeat fail-safe.
 *
 *  - the page calls: elfen_page_set_kill_mode / _kill_mode / _set_unmanaged
 *    / _set_kill set and read ELFEN_CONTROL_KILL and ELFEN_CONTROL_UNMANAGED
 *    (KILL wins); elfen_page_beat / _set_heartbeat_stale /
 *    _heartbeat_age_ns / _heartbeat_stale / _batch_mode; read-only handles,
 *    NULLs and unknown modes are clear errors;
 *  - with threads (LC on CPU 0, a batch thread on lane 1 = CPU 1 looping on
 *    the inline elfen_check()), for the spin and futex naps:
 *    mode unmanaged runs batch code on a busy request lane, KILL still
 *    pauses it, clearing UNMANAGED restores borrow idle; a controller that
 *    turned the fail-safe on and fell silent pauses the batch thread on an
 *    idle lane (at its next slow path) until it beats again; with the
 *    fail-safe off, an old heartbeat changes nothing.
 *
 * Pages live in a temporary directory removed at exit.
 */
#include "harness.h"

#include <elfen.h>
#include <pthread.h>
#include <sched.h>

#define LOAD(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)

/* Waits up to `ms` milliseconds for `cond`; evaluates to whether it held. */
#define WAIT_UNTIL(cond, ms)                                                  \
    ({                                                                        \
        uint64_t deadline_ = t_now_ns() + (uint64_t)(ms) * 1000000u;          \
        int ok_ = 0;                                                          \
        while (!(ok_ = !!(cond)) && t_now_ns() < deadline_) sched_yield();    \
        ok_;                                                                  \
    })

static const char *dir;

static void expect_error(const char *what, int rc, int code, const char *needle) {
    const char *e = elfen_last_error();
    CHECK(rc == code, "%s: returned %d, want %d (%s)", what, rc, code, e);
    CHECK(e && strstr(e, needle), "%s: elfen_last_error() = \"%s\" lacks \"%s\"", what, e, needle);
}

/* ---- the page calls ------------------------------------------------------ */
static void test_page_calls(void) {
    char path[512];
    elfen_page *page = elfen_page_create(t_path(path, sizeof path, "calls"), "0:1", NULL);
    REQUIRE(page != NULL, "create: %s", elfen_last_error());
    const elfen_header *h = elfen_page_header(page);
    CHECK(elfen_page_kill_mode(page) == ELFEN_KILL_OFF && h->control == 0, "a new page: off");
    CHECK(elfen_page_batch_mode(page) == ELFEN_BATCH_MANAGED, "a new page: managed");

    CHECK(elfen_page_set_kill_mode(page, ELFEN_KILL_UNMANAGED) == 0, "unmanaged: %s", elfen_last_error());
    CHECK_EQ_U64(LOAD(h->control), ELFEN_CONTROL_UNMANAGED, "control word, unmanaged");
    CHECK(elfen_page_kill_mode(page) == ELFEN_KILL_UNMANAGED, "mode unmanaged");
    CHECK(elfen_page_batch_mode(page) == ELFEN_BATCH_UNMANAGED, "batch unmanaged");
    CHECK(elfen_page_set_kill(page, 1) == 0, "kill");
    CHECK_EQ_U64(LOAD(h->control), ELFEN_CONTROL_KILL | ELFEN_CONTROL_UNMANAGED, "set_kill keeps UNMANAGED");
    CHECK(elfen_page_kill_mode(page) == ELFEN_KILL_PAUSED, "KILL wins");
    CHECK(elfen_page_batch_mode(page) == ELFEN_BATCH_KILLED, "batch killed");
    CHECK(elfen_page_set_kill_mode(page, ELFEN_KILL_PAUSED) == 0, "paused");
    CHECK_EQ_U64(LOAD(h->control), ELFEN_CONTROL_KILL, "mode paused clears UNMANAGED");
    CHECK(elfen_page_set_unmanaged(page, 1) == 0 && elfen_page_set_kill_mode(page, ELFEN_KILL_OFF) == 0, "off");
    CHECK_EQ_U64(LOAD(h->control), 0, "mode off clears both");
    CHECK((ELFEN_CONTROL_KNOWN & ~(ELFEN_CONTROL_KILL | ELFEN_CONTROL_UNMANAGED)) == 0, "known bits");

    uint64_t age = 12345;
    CHECK(elfen_page_heartbeat_age_ns(page, &age) == 0 && age == 12345, "never beat: 0, age untouched");
    CHECK(elfen_page_heartbeat_stale(page) == 0, "fail-safe off: not stale");
    CHECK(elfen_page_set_heartbeat_stale(page, 30000000u) == 0, "stale 30 ms: %s", elfen_last_error());
    CHECK_EQ_U64(LOAD(h->heartbeat_stale_ns), 30000000u, "heartbeat_stale_ns at offset 80");
    CHECK(LOAD(h->heartbeat) != 0, "turning the fail-safe on beats");
    CHECK(elfen_page_heartbeat_age_ns(page, &age) == 1 && age < 30000000u, "fresh: age %" PRIu64, age);
    CHECK(elfen_page_heartbeat_stale(page) == 0 && elfen_page_batch_mode(page) == ELFEN_BATCH_MANAGED,
          "fresh: managed");
    /* the controller falls silent; 10 ms more than the age checked: the page
       clock (TSC, calibrated) and the sleep's CLOCK_MONOTONIC may disagree */
    t_sleep_us(70000);
    CHECK(elfen_page_heartbeat_age_ns(page, &age) == 1 && age >= 60000000u, "silent: age %" PRIu64, age);
    CHECK(elfen_page_heartbeat_stale(page) == 1, "silent for twice the bound: stale");
    CHECK(elfen_page_batch_mode(page) == ELFEN_BATCH_STALE, "batch paused by the fail-safe");
    CHECK(elfen_page_set_kill_mode(page, ELFEN_KILL_UNMANAGED) == 0 &&
              elfen_page_batch_mode(page) == ELFEN_BATCH_STALE,
          "the fail-safe wins over unmanaged");
    CHECK(elfen_page_beat(page) == 0 && elfen_page_heartbeat_stale(page) == 0, "a beat: fresh");
    CHECK(elfen_page_batch_mode(page) == ELFEN_BATCH_UNMANAGED, "fresh again: unmanaged");
    CHECK(elfen_page_set_heartbeat_stale(page, 0) == 0 && LOAD(h->heartbeat_stale_ns) == 0, "fail-safe off");

    /* errors */
    expect_error("unknown mode", elfen_page_set_kill_mode(page, 3), ELFEN_EINVAL, "unknown mode 3");
    expect_error("NULL page", elfen_page_kill_mode(NULL), ELFEN_EINVAL, "NULL");
    expect_error("NULL page beat", elfen_page_beat(NULL), ELFEN_EINVAL, "NULL");
    expect_error("NULL age", elfen_page_heartbeat_age_ns(page, NULL), ELFEN_EINVAL, "age_ns is NULL");
    elfen_page *ro = elfen_page_open(path);
    REQUIRE(ro != NULL, "open: %s", elfen_last_error());
    CHECK(elfen_page_kill_mode(ro) == ELFEN_KILL_UNMANAGED, "an observer reads the mode");
    expect_error("mode through an observer", elfen_page_set_kill_mode(ro, ELFEN_KILL_OFF), ELFEN_ESTATE,
                 "read-only");
    expect_error("unmanaged through an observer", elfen_page_set_unmanaged(ro, 0), ELFEN_ESTATE, "read-only");
    expect_error("beat through an observer", elfen_page_beat(ro), ELFEN_ESTATE, "read-only");
    expect_error("stale through an observer", elfen_page_set_heartbeat_stale(ro, 1), ELFEN_ESTATE,
                 "heartbeat_stale_ns");
    elfen_page_destroy(ro);
    elfen_page_destroy(page);
}

/* ---- LC and batch threads ------------------------------------------------ */
struct scenario {
    const char *path;
    const char *nap_name;
    elfen_page *page; /* the creating (controller) handle */
    int nap;
    volatile int stop;
    volatile int attached; /* 1 attached, -1 failed */
    unsigned long progress;
    char err[512];
};

static void *batch_thread(void *arg) {
    struct scenario *s = (struct scenario *)arg;
    if (elfen_batch_attach(s->path, 1, s->nap) != 0) {
        snprintf(s->err, sizeof s->err, "%s", elfen_last_error());
        __atomic_store_n(&s->attached, -1, __ATOMIC_RELEASE);
        return NULL;
    }
    __atomic_store_n(&s->attached, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        elfen_check();
        __atomic_store_n(&s->progress, s->progress + 1, __ATOMIC_RELAXED);
    }
    elfen_batch_detach();
    return NULL;
}

static unsigned long progress(struct scenario *s) { return __atomic_load_n(&s->progress, __ATOMIC_RELAXED); }

/* Progress does not move for `us` microseconds. */
static int frozen(struct scenario *s, unsigned us) {
    unsigned long p1 = progress(s);
    t_sleep_us(us);
    return progress(s) == p1;
}

/* Progress moves within 2 s, the controller beating meanwhile if `beat`. */
static int resumes(struct scenario *s, int beat) {
    unsigned long p = progress(s);
    return WAIT_UNTIL((beat ? elfen_page_beat(s->page) : 0, progress(s) > p + 100), 2000);
}

/* The batch thread is in a nap begun after `naps0` naps. */
static int napping_since(const elfen_batch_line *bl, uint64_t naps0) {
    return LOAD(bl->napping) == 1 && LOAD(bl->naps) > naps0;
}

static void unmanaged_steps(struct scenario *s, elfen_lc *lc, const elfen_batch_line *bl) {
    const char *nap = s->nap_name;
    uint64_t n = LOAD(bl->naps);
    elfen_lc_begin(lc, 1);
    CHECK(WAIT_UNTIL(napping_since(bl, n), 2000), "[%s] borrow idle: no nap on the busy lane", nap);
    CHECK(frozen(s, 10000), "[%s] batch code ran on a busy lane under borrow idle", nap);
    CHECK(elfen_page_set_kill_mode(s->page, ELFEN_KILL_UNMANAGED) == 0, "[%s] unmanaged", nap);
    CHECK(resumes(s, 0), "[%s] unmanaged: batch code did not run on the busy lane", nap);
    CHECK(resumes(s, 0) && LOAD(bl->napping) == 0, "[%s] unmanaged batch code stopped", nap);

    CHECK(elfen_page_set_kill(s->page, 1) == 0, "[%s] kill", nap);
    n = LOAD(bl->naps);
    elfen_lc_end(lc);
    CHECK(WAIT_UNTIL(napping_since(bl, n), 2000), "[%s] KILL over UNMANAGED: no nap", nap);
    CHECK(frozen(s, 20000), "[%s] batch code ran with KILL and UNMANAGED set", nap);
    CHECK(elfen_page_set_kill(s->page, 0) == 0 && resumes(s, 0), "[%s] KILL cleared: no resume", nap);

    CHECK(elfen_page_set_kill_mode(s->page, ELFEN_KILL_OFF) == 0, "[%s] off", nap);
    n = LOAD(bl->naps);
    elfen_lc_begin(lc, 2);
    CHECK(WAIT_UNTIL(napping_since(bl, n), 2000), "[%s] policy restored: no nap on the busy lane", nap);
    CHECK(frozen(s, 10000), "[%s] batch code ran on a busy lane after unmanaged was cleared", nap);
    elfen_lc_end(lc);
    CHECK(resumes(s, 0), "[%s] no run on the idle lane", nap);
}

static void stale_steps(struct scenario *s, elfen_lc *lc, const elfen_batch_line *bl) {
    const char *nap = s->nap_name;
    /* the controller turns the fail-safe on (20 ms) and falls silent */
    CHECK(elfen_page_set_heartbeat_stale(s->page, 20000000u) == 0, "[%s] stale on", nap);
    t_sleep_us(50000);
    CHECK(elfen_page_heartbeat_stale(s->page) == 1, "[%s] silent: stale", nap);
    /* a running thread on an idle lane notices at its next slow path */
    uint64_t n = LOAD(bl->naps);
    elfen_lc_begin(lc, 3);
    elfen_lc_end(lc);
    CHECK(WAIT_UNTIL(napping_since(bl, n), 2000), "[%s] stale heartbeat: no nap", nap);
    CHECK(frozen(s, 30000), "[%s] batch code ran on an idle lane with a stale heartbeat", nap);
    CHECK(resumes(s, 1), "[%s] the controller beats again: no resume", nap);

    /* the fail-safe off: an old heartbeat changes nothing */
    CHECK(elfen_page_set_heartbeat_stale(s->page, 0) == 0, "[%s] stale off", nap);
    t_sleep_us(30000);
    elfen_lc_begin(lc, 4);
    elfen_lc_end(lc);
    CHECK(resumes(s, 0), "[%s] fail-safe off: batch code stopped after a request", nap);
    CHECK(LOAD(bl->napping) == 0, "[%s] fail-safe off: napping", nap);
}

static void *lc_thread(void *arg) {
    struct scenario *s = (struct scenario *)arg;
    cpu_set_t cpu0;
    CPU_ZERO(&cpu0);
    CPU_SET(0, &cpu0);
    CHECK(pthread_setaffinity_np(pthread_self(), sizeof cpu0, &cpu0) == 0, "pin the LC thread to CPU 0");
    elfen_lc *lc = elfen_lc_attach(s->path, 0);
    REQUIRE(lc != NULL, "elfen_lc_attach: %s", elfen_last_error());
    const elfen_batch_line *bl = elfen_page_batch(s->page, 1);
    REQUIRE(WAIT_UNTIL(LOAD(s->attached) != 0, 5000), "[%s] the batch thread did not attach", s->nap_name);
    REQUIRE(LOAD(s->attached) == 1, "[%s] batch attach failed: %s", s->nap_name, s->err);
    CHECK(resumes(s, 0), "[%s] runs while the request lane is idle", s->nap_name);
    unmanaged_steps(s, lc, bl);
    stale_steps(s, lc, bl);
    /* leave nothing that could hold the batch thread */
    elfen_page_set_kill_mode(s->page, ELFEN_KILL_OFF);
    elfen_page_set_heartbeat_stale(s->page, 0);
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    elfen_lc_detach(lc);
    return NULL;
}

static int have_cpus_0_and_1(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return CPU_ISSET(0, &set) && CPU_ISSET(1, &set);
}

static void test_threads(int nap, const char *name) {
    char path[512];
    struct scenario s;
    memset(&s, 0, sizeof s);
    s.path = t_path(path, sizeof path, name);
    s.nap = nap;
    s.nap_name = name;
    s.page = elfen_page_create(path, "0:1", NULL);
    REQUIRE(s.page != NULL, "create %s: %s", path, elfen_last_error());
    pthread_t b, l;
    pthread_create(&b, NULL, batch_thread, &s);
    pthread_create(&l, NULL, lc_thread, &s);
    pthread_join(l, NULL);
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
    pthread_join(b, NULL);
    const elfen_batch_line *bl = elfen_page_batch(s.page, 1);
    CHECK(LOAD(bl->attached) == 0 && LOAD(bl->napping) == 0 && LOAD(bl->sleepers) == 0,
          "[%s] nothing left attached, napping or sleeping", name);
    t_note("%s: unmanaged ran on a busy lane, KILL paused it, a stale heartbeat paused it until a beat", name);
    elfen_page_destroy(s.page);
}

int main(void) {
    t_name = "failsafe";
    dir = t_tmpdir();
    (void)dir;
    test_page_calls();
    if (have_cpus_0_and_1()) {
        test_threads(ELFEN_NAP_SPIN, "spin");
        test_threads(ELFEN_NAP_FUTEX, "futex");
    } else {
        t_skip("the LC/batch thread tests", "cpus:2", "CPUs 0 and 1 are not both available");
    }
    t_finish();
}
