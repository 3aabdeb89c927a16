/*
 * The C API from C threads (linked against libelfen.so):
 *
 *  - a thread that never attached: elfen_check() and elfen_check_slow() do
 *    nothing;
 *  - an LC thread (pinned to CPU 0) and a batch thread (attached to batch
 *    lane 1, pinned to CPU 1 by the attach) looping on elfen_check(): for
 *    the spin, futex and hybrid nap backends, at every request begin the
 *    batch thread naps (batch line `napping`, `naps`) and its loop makes no
 *    progress, at every end it runs again (`wakes`, progress); the kill
 *    switch stops it while idle; detach restores its affinity and `attached`;
 *  - several batch threads share a lane; a thread attaches once;
 *  - bad input returns NULL / a negative code with a clear
 *    elfen_last_error() (per thread): missing page, copies with a wrong
 *    magic, version or size, lane out of range, batch on a request lane,
 *    LC on a batch lane, unknown nap backend, NULL arguments, read-only
 *    handle, bad pair spec, existing page.
 *
 * Pages live in a temporary directory removed at exit; no thread stays pinned.
 */
#include "harness.h"

#include <elfen.h>
#include <pthread.h>
#include <sched.h>

#define LOAD(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)

/* The option and stats structs as the Rust side lays them out
 * (crates/capi/tests/abi.rs asserts the same numbers). */
_Static_assert(sizeof(elfen_page_options) == 40 && offsetof(elfen_page_options, budget_ns) == 8 &&
                   offsetof(elfen_page_options, replace) == 28 && offsetof(elfen_page_options, clock) == 32 &&
                   offsetof(elfen_page_options, batch_gid) == 36,
               "elfen_page_options layout");
_Static_assert(sizeof(elfen_batch_options) == 16 && offsetof(elfen_batch_options, futex_timeout_us) == 8,
               "elfen_batch_options layout");
_Static_assert(sizeof(elfen_batch_stats) == 48 && offsetof(elfen_batch_stats, nap_ns) == 40,
               "elfen_batch_stats layout");

/* Waits up to `ms` milliseconds for `cond`; evaluates to whether it held. */
#define WAIT_UNTIL(cond, ms)                                                  \
    ({                                                                        \
        uint64_t deadline_ = t_now_ns() + (uint64_t)(ms) * 1000000u;          \
        int ok_ = 0;                                                          \
        while (!(ok_ = !!(cond)) && t_now_ns() < deadline_) sched_yield();    \
        ok_;                                                                  \
    })

static const char *dir;

/* The last error of this thread contains `needle`. */
static void expect_message(const char *what, const char *needle) {
    const char *e = elfen_last_error();
    CHECK(e && strstr(e, needle), "%s: elfen_last_error() = \"%s\" lacks \"%s\"", what, e ? e : "(null)",
          needle);
}

static void expect_error(const char *what, int rc, int code, const char *needle) {
    CHECK(rc == code, "%s: returned %d, want %d (%s)", what, rc, code, elfen_last_error());
    expect_message(what, needle);
}

static void expect_null(const char *what, const void *p, const char *needle) {
    CHECK(p == NULL, "%s: returned a handle, want NULL", what);
    expect_message(what, needle);
}

/* ---- a thread that never attached ------------------------------------- */
static void test_unattached(void) {
    CHECK(elfen_batch_attached() == 0, "main thread not attached");
    CHECK(*elfen__tls.word == elfen__tls.expected, "an unattached thread's word equals expected");
    for (int i = 0; i < 1000; i++) elfen_check();
    elfen_check_slow(); /* safe, does nothing */
    CHECK(elfen_batch_attached() == 0, "checks do not attach without the hook");
    CHECK(*elfen__tls.word == elfen__tls.expected, "still disarmed");
    CHECK(elfen_batch_nap_backend() == ELFEN_ESTATE, "nap backend of an unattached thread");
    char buf[8];
    CHECK(elfen_batch_describe(buf, sizeof buf) == ELFEN_ESTATE, "describe of an unattached thread");
    CHECK(elfen_abi_version() == ELFEN_ABI_VERSION, "library and header ABI");
}

/* ---- bad input ---------------------------------------------------------- */
static int write_file(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(b, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

/* Copies the page file `good` to `name` with `patch` applied to its bytes;
 * `len` overrides the length if nonzero. The copy names the same batch
 * segment, which lives while `good` is held. */
static const char *bad_copy(const char *good, const char *name, void (*patch)(unsigned char *),
                            size_t len, char *out, size_t outlen) {
    size_t n = 0;
    unsigned char *page = t_read_file(good, &n);
    REQUIRE(page, "cannot read %s", good);
    if (patch) patch(page);
    t_path(out, outlen, name);
    REQUIRE(!write_file(out, page, len ? len : n), "cannot write %s", out);
    free(page);
    return out;
}
static void patch_magic(unsigned char *p) { memcpy(p, "ELFENXXX", 8); }
static void patch_version(unsigned char *p) { ((elfen_header *)p)->abi_version = 1; }
static void patch_shmid(unsigned char *p) { ((elfen_header *)p)->batch_shmid = 0x7ffffff0u; }

static void test_bad_input(void) {
    char good[512], missing[512], bad[512];
    t_path(good, sizeof good, "good");
    t_path(missing, sizeof missing, "missing");
    elfen_page *page = elfen_page_create(good, "0:1", NULL);
    REQUIRE(page != NULL, "elfen_page_create(%s): %s", good, elfen_last_error());
    CHECK(elfen_page_lane_count(page) == 2, "two lanes");
    CHECK(elfen_page_lane_of_cpu(page, 1) == 1 && elfen_page_lane_of_cpu(page, 9) == -1, "lane of cpu");
    CHECK(elfen_page_lc(page, 2) == NULL && elfen_page_batch(page, 2) == NULL &&
              elfen_page_controller(page, 2) == NULL,
          "line accessors refuse lane 2");
    const elfen_header *h = elfen_page_header(page);
    CHECK(h && h->magic == ELFEN_MAGIC && h->lane_count == 2, "header through the handle");
    CHECK(elfen_page_controller(page, 0)->role == ELFEN_ROLE_REQUEST, "lane 0 role");
    CHECK(elfen_page_controller(page, 1)->policy == ELFEN_POLICY_BORROW_IDLE, "default policy");

    /* missing page: every entry point names the file */
    expect_null("open missing", elfen_page_open(missing), "does not exist");
    CHECK(strstr(elfen_last_error(), missing) != NULL, "message names %s: %s", missing, elfen_last_error());
    expect_null("lc attach missing", elfen_lc_attach(missing, 0), "does not exist");
    expect_error("batch attach missing", elfen_batch_attach(missing, 1, ELFEN_NAP_SPIN), ELFEN_EPAGE,
                 "does not exist");

    /* copies with a wrong magic, version, size */
    bad_copy(good, "badmagic", patch_magic, 0, bad, sizeof bad);
    expect_null("open wrong magic", elfen_page_open(bad), "magic");
    expect_error("batch attach wrong magic", elfen_batch_attach(bad, 1, ELFEN_NAP_SPIN), ELFEN_EPAGE,
                 "not an elfen signal page");
    expect_null("lc attach wrong magic", elfen_lc_attach(bad, 0), "magic");
    bad_copy(good, "badversion", patch_version, 0, bad, sizeof bad);
    expect_error("batch attach wrong version", elfen_batch_attach(bad, 1, ELFEN_NAP_SPIN), ELFEN_EPAGE,
                 "ABI version 1, this build speaks version 2");
    bad_copy(good, "gone", patch_shmid, 0, bad, sizeof bad);
    expect_null("open a page whose batch segment is gone", elfen_page_open(bad), "is gone");
    CHECK(strstr(elfen_last_error(), "shm id 2147483632") != NULL, "names the segment: %s",
          elfen_last_error());
    bad_copy(good, "short", NULL, 16, bad, sizeof bad);
    expect_null("open short page", elfen_page_open(bad), "shorter");

    /* lanes and roles */
    expect_error("batch lane out of range", elfen_batch_attach(good, 7, ELFEN_NAP_SPIN), ELFEN_ELANE,
                 "lane 7 is out of range");
    expect_error("batch on the request lane", elfen_batch_attach(good, 0, ELFEN_NAP_SPIN), ELFEN_ELANE,
                 "is a request lane");
    CHECK(strstr(elfen_last_error(), "its batch lane is 1") != NULL, "names the batch lane: %s",
          elfen_last_error());
    expect_null("lc on the batch lane", elfen_lc_attach(good, 1), "is a batch lane");
    expect_null("lc lane out of range", elfen_lc_attach(good, 5), "out of range");
    CHECK(elfen_batch_attached() == 0, "failed attaches leave the thread unattached");

    /* arguments */
    expect_error("unknown nap backend", elfen_batch_attach(good, 1, 42), ELFEN_EINVAL,
                 "unknown nap backend 42");
    expect_error("NULL page path", elfen_batch_attach(NULL, 1, ELFEN_NAP_SPIN), ELFEN_EINVAL, "NULL");
    expect_error("empty page path", elfen_batch_attach("", 1, ELFEN_NAP_SPIN), ELFEN_EINVAL, "empty");
    expect_error("begin on NULL", elfen_lc_begin(NULL, 1), ELFEN_EINVAL, "NULL");
    expect_error("end on NULL", elfen_lc_end(NULL), ELFEN_EINVAL, "NULL");
    expect_error("queue on NULL", elfen_lc_set_queue_len(NULL, 1), ELFEN_EINVAL, "NULL");
    expect_error("begin_q on NULL", elfen_lc_begin_q(NULL, 1, 2), ELFEN_EINVAL, "NULL");
    expect_error("end_q on NULL", elfen_lc_end_q(NULL, 2), ELFEN_EINVAL, "NULL");
    expect_error("stats NULL", elfen_batch_stats_get(NULL), ELFEN_EINVAL, "NULL");
    expect_error("detach unattached", elfen_batch_detach(), ELFEN_ESTATE, "not attached");
    elfen_lc_detach(NULL);
    elfen_page_destroy(NULL);
    expect_null("bad pairs", elfen_page_create(bad, "zero:one", NULL), "zero:one");
    expect_null("NULL pairs", elfen_page_create(bad, NULL, NULL), "NULL");
    expect_null("page exists", elfen_page_create(good, "0:1", NULL), "already exists");
    elfen_page_options o = ELFEN_PAGE_OPTIONS_INIT;
    o.nap = 9;
    expect_null("bad nap in options", elfen_page_create(bad, "0:1", &o), "nap backend 9");
    o = (elfen_page_options)ELFEN_PAGE_OPTIONS_INIT;
    o.policy = 7;
    expect_null("bad policy in options", elfen_page_create(bad, "0:1", &o), "unknown policy id 7");
    o = (elfen_page_options)ELFEN_PAGE_OPTIONS_INIT;
    o.clock = 3;
    expect_null("bad clock in options", elfen_page_create(bad, "0:1", &o), "unknown clock 3");
    o = (elfen_page_options)ELFEN_PAGE_OPTIONS_INIT;
    o.page_mode = 0666;
    expect_null("a page file others could write", elfen_page_create(bad, "0:1", &o), "page_mode 666");
    o = (elfen_page_options)ELFEN_PAGE_OPTIONS_INIT;
    o.policy = ELFEN_POLICY_FIXED_BUDGET;
    o.budget_ns = 500000;
    elfen_page *budget = elfen_page_create(t_path(bad, sizeof bad, "budgeted"), "0:1", &o);
    CHECK(budget && elfen_page_controller(budget, 1)->budget_ns == 500000 &&
              elfen_page_controller(budget, 1)->policy == ELFEN_POLICY_FIXED_BUDGET,
          "a fixed-budget page: %s", elfen_last_error());
    elfen_page_destroy(budget);

    /* read-only handles */
    elfen_page *ro = elfen_page_open(good);
    CHECK(ro != NULL, "open: %s", elfen_last_error());
    expect_error("kill switch through an observer", elfen_page_set_kill(ro, 1), ELFEN_ESTATE, "read-only");
    elfen_page_destroy(ro);

    /* an LC lane has one thread */
    elfen_lc *lc = elfen_lc_attach(good, 0);
    CHECK(lc != NULL, "lc attach: %s", elfen_last_error());
    expect_null("second LC on the lane", elfen_lc_attach(good, 0), "already has an LC thread");
    CHECK(elfen_lc_begin(lc, 77) == 0 && elfen_lc_set_queue_len(lc, 3) == 0, "begin, queue");
    uint64_t s = LOAD(((elfen_lc_line *)elfen_page_lc(page, 0))->state);
    CHECK(elfen_state_busy(s) && elfen_state_queue_len(s) == 3 && elfen_state_seq(s) == 1,
          "state after begin: 0x%" PRIx64, s);
    CHECK(elfen_page_lc(page, 0)->request_id == 77, "request id");
    CHECK(elfen_lc_end(lc) == 0, "end");
    s = LOAD(((elfen_lc_line *)elfen_page_lc(page, 0))->state);
    CHECK(!elfen_state_busy(s) && elfen_page_lc(page, 0)->requests == 1, "state after end");
    elfen_lc_detach(lc);
    CHECK(elfen_page_lc(page, 0)->lc_tid == 0, "detach clears lc_tid");

    elfen_page_destroy(page);
    CHECK(!t_exists(good), "destroying the creating handle removes the page");
}

/* The queue length travels with begin and end, in the same store of state. */
static void test_queue_with_begin_and_end(void) {
    char path[512];
    t_path(path, sizeof path, "queue");
    elfen_page *page = elfen_page_create(path, "0:1", NULL);
    REQUIRE(page != NULL, "create: %s", elfen_last_error());
    elfen_lc *lc = elfen_lc_attach(path, 0);
    REQUIRE(lc != NULL, "lc attach: %s", elfen_last_error());
    const elfen_lc_line *line = elfen_page_lc(page, 0);

    CHECK(elfen_lc_begin_q(lc, 41, 2) == 0, "begin_q: %s", elfen_last_error());
    uint64_t s = LOAD(line->state);
    CHECK(elfen_state_busy(s) && elfen_state_queue_len(s) == 2 && elfen_state_seq(s) == 1,
          "state after begin_q(41, 2): 0x%" PRIx64, s);
    CHECK(line->request_id == 41, "begin_q stores the request id");
    CHECK(elfen_lc_end_q(lc, 1) == 0, "end_q: %s", elfen_last_error());
    s = LOAD(line->state);
    CHECK(!elfen_state_busy(s) && elfen_state_queue_len(s) == 1 && elfen_state_seq(s) == 1,
          "state after end_q(1): idle with one waiting, 0x%" PRIx64, s);
    CHECK(line->requests == 1, "end_q counts the request");

    /* the plain calls keep the last published length; _q replaces it */
    CHECK(elfen_lc_begin(lc, 42) == 0, "begin");
    s = LOAD(line->state);
    CHECK(elfen_state_busy(s) && elfen_state_queue_len(s) == 1 && elfen_state_seq(s) == 2,
          "begin keeps the queue length: 0x%" PRIx64, s);
    CHECK(elfen_lc_end_q(lc, 0) == 0, "end_q(0)");
    s = LOAD(line->state);
    CHECK(!elfen_state_busy(s) && elfen_state_queue_len(s) == 0, "idle, queue empty: 0x%" PRIx64, s);
    CHECK(elfen_lc_begin_q(lc, 43, 0xFFFFFFFFu) == 0, "begin_q with the largest length");
    s = LOAD(line->state);
    CHECK(elfen_state_queue_len(s) == ELFEN_STATE_MAX_QUEUE_LEN, "the queue length saturates: 0x%" PRIx64, s);
    CHECK(elfen_lc_end_q(lc, 0) == 0 && line->requests == 3, "three requests");
    elfen_lc_detach(lc);
    elfen_page_destroy(page);
}

/* elfen_page_options.clock picks the page clock. */
static void test_page_clock(void) {
    char path[512];
    elfen_page_options o = ELFEN_PAGE_OPTIONS_INIT;
    CHECK(o.clock == ELFEN_CLOCK_AUTO && o.batch_gid == 0 && o.batch_mode == 0,
          "ELFEN_PAGE_OPTIONS_INIT: auto clock, no batch group");
    elfen_page *page = elfen_page_create(t_path(path, sizeof path, "clock-auto"), "0:1", &o);
    REQUIRE(page != NULL, "create (auto clock): %s", elfen_last_error());
    uint32_t detected = elfen_page_header(page)->clock;
    CHECK(detected == ELFEN_CLOCK_TSC || detected == ELFEN_CLOCK_MONOTONIC_NS, "auto clock %u", detected);
    elfen_page_destroy(page);

    o.clock = ELFEN_CLOCK_MONOTONIC_NS;
    page = elfen_page_create(t_path(path, sizeof path, "clock-mono"), "0:1", &o);
    REQUIRE(page != NULL, "create (monotonic clock): %s", elfen_last_error());
    CHECK(elfen_page_header(page)->clock == ELFEN_CLOCK_MONOTONIC_NS &&
              elfen_page_header(page)->ticks_per_sec == 1000000000u,
          "a CLOCK_MONOTONIC page: clock %u, %" PRIu64 " ticks/s", elfen_page_header(page)->clock,
          elfen_page_header(page)->ticks_per_sec);
    /* a batch thread attaches to it as to any page */
    elfen_batch_options b = ELFEN_BATCH_OPTIONS_INIT;
    b.pin = 0;
    b.nap = ELFEN_NAP_SPIN;
    CHECK(elfen_batch_attach_ex(path, 1, &b) == 0, "attach to a monotonic page: %s", elfen_last_error());
    elfen_check();
    CHECK(elfen_batch_detach() == 0, "detach");
    elfen_page_destroy(page);

    o.clock = ELFEN_CLOCK_TSC;
    page = elfen_page_create(t_path(path, sizeof path, "clock-tsc"), "0:1", &o);
    if (detected == ELFEN_CLOCK_TSC) {
        CHECK(page != NULL && elfen_page_header(page)->clock == ELFEN_CLOCK_TSC, "a TSC page: %s",
              elfen_last_error());
    } else {
        CHECK(page == NULL && strstr(elfen_last_error(), "invariant TSC"),
              "TSC refused without an invariant TSC: %s", elfen_last_error());
    }
    elfen_page_destroy(page);
}

/* last_error is per thread */
static void *fail_in_thread(void *arg) {
    (void)arg;
    elfen_page_open("/nonexistent/elfen-thread");
    return strstr(elfen_last_error(), "elfen-thread") ? (void *)1 : NULL;
}

static void test_last_error_per_thread(void) {
    elfen_page_open("/nonexistent/elfen-main");
    pthread_t t;
    void *ok = NULL;
    pthread_create(&t, NULL, fail_in_thread, NULL);
    pthread_join(t, &ok);
    CHECK(ok != NULL, "the other thread saw its own error");
    CHECK(strstr(elfen_last_error(), "elfen-main") != NULL, "main's error is untouched: %s",
          elfen_last_error());
}

/* ---- LC and batch threads ------------------------------------------------ */
struct scenario {
    const char *path;
    elfen_page *page; /* the creating (controller) handle */
    int nap;
    int toggles;
    volatile int stop;
    volatile int attached; /* 1 attached, -1 failed */
    unsigned long progress;
    char err[512];
    char desc[512];
    int pinned_to_1, restored, nap_id;
    elfen_batch_stats stats;
};

static int affinity_equal(const cpu_set_t *a, const cpu_set_t *b) { return CPU_EQUAL(a, b); }

static void *batch_thread(void *arg) {
    struct scenario *s = (struct scenario *)arg;
    cpu_set_t before, during, after;
    pthread_getaffinity_np(pthread_self(), sizeof before, &before);
    if (elfen_batch_attach(s->path, 1, s->nap) != 0) {
        snprintf(s->err, sizeof s->err, "%s", elfen_last_error());
        __atomic_store_n(&s->attached, -1, __ATOMIC_RELEASE);
        return NULL;
    }
    pthread_getaffinity_np(pthread_self(), sizeof during, &during);
    s->pinned_to_1 = CPU_COUNT(&during) == 1 && CPU_ISSET(1, &during);
    s->nap_id = elfen_batch_nap_backend();
    elfen_batch_describe(s->desc, sizeof s->desc);
    __atomic_store_n(&s->attached, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        elfen_check();
        __atomic_store_n(&s->progress, s->progress + 1, __ATOMIC_RELAXED);
    }
    elfen_batch_stats_get(&s->stats);
    elfen_batch_detach();
    pthread_getaffinity_np(pthread_self(), sizeof after, &after);
    s->restored = affinity_equal(&before, &after) && elfen_batch_attached() == 0;
    return NULL;
}

static unsigned long progress(struct scenario *s) { return __atomic_load_n(&s->progress, __ATOMIC_RELAXED); }

/* Progress does not move for `us` microseconds. */
static int frozen(struct scenario *s, unsigned us) {
    unsigned long p1 = progress(s);
    t_sleep_us(us);
    return progress(s) == p1;
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
    const char *nap = s->nap == ELFEN_NAP_SPIN ? "spin" : s->nap == ELFEN_NAP_FUTEX ? "futex" : "hybrid";

    REQUIRE(WAIT_UNTIL(LOAD(s->attached) != 0, 5000), "[%s] the batch thread did not attach", nap);
    REQUIRE(LOAD(s->attached) == 1, "[%s] batch attach failed: %s", nap, s->err);
    CHECK(LOAD(bl->attached) == 1, "[%s] batch line attached = %u", nap, LOAD(bl->attached));
    unsigned long p0 = progress(s);
    CHECK(WAIT_UNTIL(progress(s) > p0 + 1000, 2000), "[%s] runs while the request lane is idle", nap);

    for (int i = 0; i < s->toggles; i++) {
        uint64_t naps0 = LOAD(bl->naps);
        elfen_lc_begin(lc, (uint64_t)i + 1);
        /* `napping` is raised before `naps` is counted: wait for both */
        int napped = WAIT_UNTIL(LOAD(bl->napping) == 1 && LOAD(bl->naps) > naps0, 2000);
        CHECK(napped, "[%s] toggle %d: the batch thread did not nap within 2 s of request begin", nap, i);
        CHECK(LOAD(bl->naps) == naps0 + 1, "[%s] toggle %d: naps %" PRIu64 " -> %" PRIu64, nap, i, naps0,
              (uint64_t)LOAD(bl->naps));
        CHECK(frozen(s, 2000), "[%s] toggle %d: batch code ran while the request lane was busy", nap, i);
        elfen_lc_end(lc);
        unsigned long p1 = progress(s);
        CHECK(WAIT_UNTIL(LOAD(bl->napping) == 0 && progress(s) > p1 + 100, 2000),
              "[%s] toggle %d: the batch thread did not run again within 2 s of request end", nap, i);
        if (!napped) break;
    }
    CHECK(LOAD(bl->naps) >= (uint64_t)s->toggles && LOAD(bl->wakes) == LOAD(bl->naps),
          "[%s] naps %" PRIu64 " wakes %" PRIu64, nap, (uint64_t)LOAD(bl->naps), (uint64_t)LOAD(bl->wakes));
    CHECK(LOAD(bl->slow_checks) >= (uint64_t)s->toggles, "[%s] slow checks %" PRIu64, nap,
          (uint64_t)LOAD(bl->slow_checks));
    CHECK(LOAD(bl->run_ticks) > 0, "[%s] run ticks", nap);
    CHECK(LOAD(bl->sleepers) == 0, "[%s] no sleeper left", nap);

    /* the kill switch: obeyed at the next slow path, even while idle */
    CHECK(elfen_page_set_kill(s->page, 1) == 0, "[%s] set kill: %s", nap, elfen_last_error());
    elfen_lc_begin(lc, 1000);
    elfen_lc_end(lc);
    CHECK(WAIT_UNTIL(LOAD(bl->napping) == 1, 2000), "[%s] kill switch: the batch thread did not stop", nap);
    CHECK(frozen(s, 20000), "[%s] kill switch: batch code ran while killed", nap);
    CHECK(elfen_page_set_kill(s->page, 0) == 0, "[%s] clear kill", nap);
    unsigned long p2 = progress(s);
    CHECK(WAIT_UNTIL(LOAD(bl->napping) == 0 && progress(s) > p2, 2000),
          "[%s] kill switch cleared: the batch thread did not resume", nap);

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
    t_path(path, sizeof path, name);
    elfen_page_options o = ELFEN_PAGE_OPTIONS_INIT;
    o.hybrid_spin_ns = 20000;
    struct scenario s;
    memset(&s, 0, sizeof s);
    s.path = path;
    s.nap = nap;
    s.toggles = 10;
    s.page = elfen_page_create(path, "0:1", &o);
    REQUIRE(s.page != NULL, "create %s: %s", path, elfen_last_error());
    pthread_t b, l;
    pthread_create(&b, NULL, batch_thread, &s);
    pthread_create(&l, NULL, lc_thread, &s);
    pthread_join(l, NULL);
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
    pthread_join(b, NULL);
    const elfen_batch_line *bl = elfen_page_batch(s.page, 1);
    CHECK(s.pinned_to_1, "[%s] attach pinned the batch thread to CPU 1", name);
    CHECK(s.restored, "[%s] detach restored the batch thread's affinity", name);
    CHECK(s.nap_id == nap, "[%s] nap backend %d, asked for %d (%s)", name, s.nap_id, nap, s.desc);
    CHECK(strstr(s.desc, "batch lane 1") && strstr(s.desc, "request lane 0"), "[%s] describe: %s", name,
          s.desc);
    CHECK(s.stats.naps >= (uint64_t)s.toggles && s.stats.wakes == s.stats.naps && s.stats.run_ns > 0,
          "[%s] thread stats naps %" PRIu64 " wakes %" PRIu64, name, s.stats.naps, s.stats.wakes);
    CHECK(LOAD(bl->attached) == 0, "[%s] attached back to 0", name);
    CHECK(LOAD(elfen_page_lc(s.page, 0)->lc_tid) == 0, "[%s] LC detached", name);
    t_note("%s: %d toggles, %" PRIu64 " naps, %" PRIu64 " slow checks; %s", name, s.toggles,
           (uint64_t)LOAD(bl->naps), (uint64_t)LOAD(bl->slow_checks), s.desc);
    elfen_page_destroy(s.page);
}

/* ---- several batch threads on one lane; one attach per thread ------------ */
struct sharer {
    const char *path;
    pthread_barrier_t *attached, *checked;
    int rc, again, detach, detach_again;
};

static void *sharer_thread(void *arg) {
    struct sharer *s = (struct sharer *)arg;
    elfen_batch_options o = ELFEN_BATCH_OPTIONS_INIT;
    o.pin = 0;
    o.nap = ELFEN_NAP_FUTEX;
    s->rc = elfen_batch_attach_ex(s->path, 1, &o);
    s->again = elfen_batch_attach_ex(s->path, 1, &o);
    if (s->again != ELFEN_ESTATE || !strstr(elfen_last_error(), "already attached")) s->again = 1;
    for (int i = 0; i < 100; i++) elfen_check();
    pthread_barrier_wait(s->attached);
    pthread_barrier_wait(s->checked);
    s->detach = elfen_batch_detach();
    s->detach_again = elfen_batch_detach();
    return NULL;
}

static void test_shared_lane(void) {
    char path[512];
    t_path(path, sizeof path, "shared");
    elfen_page *page = elfen_page_create(path, "0:1", NULL);
    REQUIRE(page != NULL, "create: %s", elfen_last_error());
    enum { N = 3 };
    pthread_barrier_t a, c;
    pthread_barrier_init(&a, NULL, N + 1);
    pthread_barrier_init(&c, NULL, N + 1);
    struct sharer sh[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        sh[i] = (struct sharer){path, &a, &c, 0, 0, 0, 0};
        pthread_create(&t[i], NULL, sharer_thread, &sh[i]);
    }
    pthread_barrier_wait(&a);
    const elfen_batch_line *bl = elfen_page_batch(page, 1);
    CHECK(LOAD(bl->attached) == N, "%d threads share lane 1: attached = %u", N, LOAD(bl->attached));
    pthread_barrier_wait(&c);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CHECK(sh[i].rc == 0, "thread %d attach", i);
        CHECK(sh[i].again == ELFEN_ESTATE, "thread %d: a second attach is refused (already attached)", i);
        CHECK(sh[i].detach == 0 && sh[i].detach_again == ELFEN_ESTATE, "thread %d: detach once", i);
    }
    CHECK(LOAD(bl->attached) == 0, "all detached");
    CHECK(LOAD(bl->slow_checks) >= N, "each thread's first check ran the policy");
    pthread_barrier_destroy(&a);
    pthread_barrier_destroy(&c);
    elfen_page_destroy(page);
}

/* A thread that exits attached detaches itself (thread-local destructor). */
static void *exit_attached(void *arg) {
    elfen_batch_options o = ELFEN_BATCH_OPTIONS_INIT;
    o.pin = 0;
    *(int *)arg = elfen_batch_attach_ex(t_path((char[512]){0}, 512, "exiting"), 1, &o);
    elfen_check();
    return NULL;
}

static void test_thread_exit(void) {
    char path[512];
    t_path(path, sizeof path, "exiting");
    elfen_page *page = elfen_page_create(path, "0:1", NULL);
    REQUIRE(page != NULL, "create: %s", elfen_last_error());
    int rc = -99;
    pthread_t t;
    pthread_create(&t, NULL, exit_attached, &rc);
    pthread_join(t, NULL);
    CHECK(rc == 0, "attach in the exiting thread: %s", elfen_last_error());
    CHECK(LOAD(elfen_page_batch(page, 1)->attached) == 0, "a thread that exits attached is detached");
    elfen_page_destroy(page);
}

/* Lazy attach through the API (what linking the hook arms). */
static void *first_check(void *arg) {
    elfen_check();
    *(int *)arg = elfen_batch_attached();
    return NULL;
}

static int attached_after_first_check(void) {
    int attached = -1;
    pthread_t t;
    pthread_create(&t, NULL, first_check, &attached);
    pthread_join(t, NULL);
    return attached;
}

static void test_lazy_attach(void) {
    char path[512];
    t_path(path, sizeof path, "lazy");
    elfen_page *page = elfen_page_create(path, "0:1", NULL);
    REQUIRE(page != NULL, "create: %s", elfen_last_error());
    setenv("ELFEN_PAGE", path, 1);
    setenv("ELFEN_LANE", "1", 1);
    setenv("ELFEN_PIN", "0", 1);
    CHECK(attached_after_first_check() == 0, "not armed: a first check attaches nothing");
    elfen_set_lazy_attach(1);
    CHECK(attached_after_first_check() == 1, "armed: the first check attaches from ELFEN_PAGE: %s",
          elfen_last_error());
    CHECK(LOAD(elfen_page_batch(page, 1)->attached) == 0, "the exited thread detached");
    CHECK(LOAD(elfen_page_batch(page, 1)->slow_checks) >= 1, "and ran the policy");
    elfen_set_lazy_attach(0);
    CHECK(attached_after_first_check() == 0, "disarmed again");
    unsetenv("ELFEN_PAGE");
    unsetenv("ELFEN_LANE");
    unsetenv("ELFEN_PIN");
    elfen_page_destroy(page);
}

int main(void) {
    t_name = "api";
    dir = t_tmpdir();
    cpu_set_t before, after;
    sched_getaffinity(0, sizeof before, &before);
    test_unattached();
    test_bad_input();
    test_last_error_per_thread();
    test_queue_with_begin_and_end();
    test_page_clock();
    test_shared_lane();
    test_thread_exit();
    test_lazy_attach();
    if (have_cpus_0_and_1()) {
        test_threads(ELFEN_NAP_SPIN, "spin");
        test_threads(ELFEN_NAP_FUTEX, "futex");
        test_threads(ELFEN_NAP_HYBRID, "hybrid");
    } else {
        t_skip("the LC/batch thread tests", "cpus:2", "CPUs 0 and 1 are not both available");
    }
    sched_getaffinity(0, sizeof after, &after);
    CHECK(CPU_EQUAL(&before, &after), "the main thread's affinity is unchanged");
    t_finish();
}
