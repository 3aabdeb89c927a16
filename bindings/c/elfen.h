/*
 * elfen.h — the C ABI of the elfen co-location runtime (C11, usable from C++).
 *
 * Three parts:
 *
 *  1. The signal page layout, byte for byte (docs/protocol.md; the Rust
 *     source of truth is crates/shm/src/layout.rs). Every size and offset is
 *     checked at compile time below; a drift fails the build of every
 *     program that includes this header.
 *  2. The API of libelfen (crates/capi): create/open a page, the LC side
 *     (request begin/end), the batch side (attach the calling thread).
 *  3. The batch fast path, elfen_check(): `static inline`, one load of the
 *     watched word and one compare against a thread-local expected value;
 *     the out-of-line elfen_check_slow() runs the policy and naps.
 *
 * Errors: functions return NULL or a negative ELFEN_E* code and never abort;
 * elfen_last_error() says what went wrong (in the calling thread).
 *
 * Link: `pkg-config --cflags --libs elfen`. Unmodified programs rebuilt with
 * -finstrument-functions: `pkg-config --cflags --libs elfen-hook`
 * (bindings/c/README.md).
 */
#ifndef ELFEN_H
#define ELFEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(__GNUC__)
#error "elfen.h needs GCC or Clang (__thread, tls_model, __builtin_expect)"
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the elfen signal page is little-endian and is mapped in place"
#endif

/* ------------------------------------------------------------------------ */
/* Version and constants (crates/shm/src/layout.rs)                          */
/* ------------------------------------------------------------------------ */

/** The signal page layout version this header describes. Bump with
 *  `ABI_VERSION` in layout.rs on any change of offset, size or meaning. */
#define ELFEN_ABI_VERSION 2u

/** "ELFENSIG" read as a little-endian u64: the first 8 bytes of a page. */
#define ELFEN_MAGIC UINT64_C(0x4749534E45464C45)
/** "ELFENBAT" read as a little-endian u64: the first 8 bytes of a batch segment. */
#define ELFEN_BATCH_MAGIC UINT64_C(0x5441424E45464C45)

#define ELFEN_LINE_SIZE 64u         /**< every line is one 64-byte cache line */
#define ELFEN_HEADER_SIZE 128u      /**< page header: two lines */
#define ELFEN_LANE_STRIDE 128u      /**< page bytes per lane: LC line + controller line */
#define ELFEN_BATCH_HEADER_SIZE 64u /**< batch segment header: one line */
#define ELFEN_BATCH_STRIDE 64u      /**< batch segment bytes per lane: one batch line */
#define ELFEN_MAX_LANES 4096u       /**< most lanes one page may describe */
#define ELFEN_MAX_PARTNERS 6u       /**< entries of elfen_controller_line.partners */

/** Size of the page file for `lanes` lanes. */
#define ELFEN_PAGE_SIZE(lanes) (ELFEN_HEADER_SIZE + (size_t)(lanes) * ELFEN_LANE_STRIDE)
/** Size of the batch segment for `lanes` lanes. */
#define ELFEN_BATCH_SIZE(lanes) (ELFEN_BATCH_HEADER_SIZE + (size_t)(lanes) * ELFEN_BATCH_STRIDE)

/* elfen_header.clock: what the page's timestamps count */
#define ELFEN_CLOCK_TSC 1u          /**< rdtsc ticks at ticks_per_sec */
#define ELFEN_CLOCK_MONOTONIC_NS 2u /**< CLOCK_MONOTONIC nanoseconds */
#define ELFEN_CLOCK_AUTO 0u         /**< (elfen_page_options only) TSC where invariant, else CLOCK_MONOTONIC */

/* elfen_header.control bits (written by the controller; KILL wins when both are set) */
#define ELFEN_CONTROL_KILL UINT64_C(1)      /**< kill switch, "batch paused": batch threads must not run */
#define ELFEN_CONTROL_UNMANAGED UINT64_C(2) /**< kill switch, "batch runs unmanaged": without KILL, batch
                                                 threads never nap (policy unmanaged); ABI 1 extension */
#define ELFEN_CONTROL_KNOWN UINT64_C(3)     /**< every bit this version defines; others are 0 */

/* elfen_page_set_kill_mode() / elfen_page_kill_mode(): the kill switch's modes */
#define ELFEN_KILL_OFF 0       /**< neither bit: the lanes' policies decide */
#define ELFEN_KILL_PAUSED 1    /**< ELFEN_CONTROL_KILL */
#define ELFEN_KILL_UNMANAGED 2 /**< ELFEN_CONTROL_UNMANAGED without KILL */

/* elfen_page_batch_mode(): what batch threads' slow paths do, header line 1 considered */
#define ELFEN_BATCH_MANAGED 0   /**< the lane's policy decides */
#define ELFEN_BATCH_UNMANAGED 1 /**< never nap (kill switch, mode unmanaged) */
#define ELFEN_BATCH_KILLED 2    /**< paused: kill switch */
#define ELFEN_BATCH_STALE 3     /**< paused: heartbeat_stale_ns != 0 and the heartbeat older (fail-safe) */

/* elfen_controller_line.role */
#define ELFEN_ROLE_UNUSED 0u
#define ELFEN_ROLE_REQUEST 1u /**< LC requests run here */
#define ELFEN_ROLE_BATCH 2u   /**< batch threads run here, watching one request lane */

/* elfen_controller_line.nap, and the `nap` argument of elfen_batch_attach() */
#define ELFEN_NAP_PAGE (-1) /**< (argument only) whatever the lane's controller line says */
#define ELFEN_NAP_AUTO 0   /**< the best available: umwait/mwaitx where allowed, else hybrid */
#define ELFEN_NAP_SPIN 1   /**< pause loop: keeps the lane, touches no shared data */
#define ELFEN_NAP_FUTEX 2  /**< block in the OS: gives the lane away */
#define ELFEN_NAP_HYBRID 3 /**< spin up to hybrid_spin_ns, then futex */
#define ELFEN_NAP_UMWAIT 4 /**< Intel WAITPKG, where the CPU and OS allow it */
#define ELFEN_NAP_MWAITX 5 /**< AMD monitorx/mwaitx, where the CPU allows it */

/* elfen_controller_line.policy (elfen_policy::PolicyKind::id) */
#define ELFEN_POLICY_UNMANAGED 0u       /**< always run (naive co-run) */
#define ELFEN_POLICY_BORROW_IDLE 1u     /**< Figure 9a: run only while the request lane idles */
#define ELFEN_POLICY_FIXED_BUDGET 2u    /**< Figure 9b */
#define ELFEN_POLICY_REFRESH_BUDGET 3u  /**< Figure 9c */
#define ELFEN_POLICY_DYNAMIC_REFRESH 4u /**< Figure 9d */

/* ------------------------------------------------------------------------ */
/* Layout: one struct per 64-byte line, all fields little-endian unsigned.   */
/*                                                                           */
/* Fields that other processes write change under you: read them with        */
/* __atomic_load_n(&f, __ATOMIC_ACQUIRE) (or RELAXED), never cache them. The */
/* writer of each line is named; nobody else may store to it.                */
/* ------------------------------------------------------------------------ */

#define ELFEN_LINE_ALIGNED __attribute__((aligned(64)))

/** Page file, offset 0: the header (two lines). */
typedef struct ELFEN_LINE_ALIGNED elfen_header {
    /* ---- line 0: identity, written once by the creator before publication */
    uint64_t magic;          /**< ELFEN_MAGIC */
    uint32_t abi_version;    /**< ELFEN_ABI_VERSION */
    uint32_t line_size;      /**< 64 */
    uint64_t total_size;     /**< size of this file: ELFEN_PAGE_SIZE(lane_count) */
    uint32_t lane_count;     /**< lanes described, 1..=ELFEN_MAX_LANES */
    uint32_t clock;          /**< ELFEN_CLOCK_* */
    uint64_t ticks_per_sec;  /**< page clock rate */
    uint64_t instance;       /**< random id, repeated in the batch segment */
    uint32_t creator_pid;    /**< process that created the page */
    uint32_t batch_shmid;    /**< System V shm id of the batch segment (shmat it) */
    uint64_t created_unix_s; /**< creation time */
    /* ---- line 1: written by the controller */
    uint64_t heartbeat;          /**< page clock at the controller's last sign of life (0 = never) */
    uint64_t control;            /**< ELFEN_CONTROL_* bits */
    uint64_t heartbeat_stale_ns; /**< fail-safe: a heartbeat older than this pauses batch threads
                                      (0 = no check); set by a controller that beats */
    uint64_t reserved[5];        /**< 0 */
} elfen_header;

/** Page file, lane i at ELFEN_HEADER_SIZE + i * ELFEN_LANE_STRIDE: the LC
 *  line. Written only by the LC thread of lane i. */
typedef struct ELFEN_LINE_ALIGNED elfen_lc_line {
    uint64_t state;       /**< elfen_state_*: busy bit, begin seq, queue length; stored last (release) */
    uint64_t request_id;  /**< id passed to request begin (valid while busy) */
    uint64_t busy_since;  /**< page clock at the running request's begin */
    uint64_t busy_ticks;  /**< page-clock ticks spent in completed requests */
    uint64_t requests;    /**< completed requests */
    uint32_t lc_tid;      /**< thread id of the attached LC thread (0 = none) */
    uint32_t reserved0;   /**< 0 */
    uint64_t reserved[2]; /**< 0 */
} elfen_lc_line;

/** Page file, lane i at ELFEN_HEADER_SIZE + i * ELFEN_LANE_STRIDE + 64: the
 *  controller line. Written only by the controller, under the `config_seq`
 *  seqlock (odd while rewriting). */
typedef struct ELFEN_LINE_ALIGNED elfen_controller_line {
    uint32_t role;                         /**< ELFEN_ROLE_* */
    uint32_t cpu;                          /**< logical CPU of the lane */
    uint32_t policy;                       /**< ELFEN_POLICY_* */
    uint32_t nap;                          /**< ELFEN_NAP_* */
    uint64_t budget_ns;                    /**< co-running budget per period */
    uint32_t ref_ipc_milli;                /**< dynamic refresh: reference IPC x 1000 (0 = none) */
    uint32_t partner_count;                /**< valid entries of partners (<= 6) */
    uint32_t partners[ELFEN_MAX_PARTNERS]; /**< request lane: its batch lanes; batch lane: its request lane */
    uint32_t hybrid_spin_ns;               /**< hybrid nap: spin this long before blocking */
    uint32_t config_seq;                   /**< seqlock, odd while the controller rewrites */
} elfen_controller_line;

/** One lane of the page file: its LC line, then its controller line. */
typedef struct ELFEN_LINE_ALIGNED elfen_page_lane {
    elfen_lc_line lc;
    elfen_controller_line controller;
} elfen_page_lane;

/** Batch segment (the System V shared-memory segment header.batch_shmid
 *  names; fixed size), offset 0: its header. Written once by the creator. */
typedef struct ELFEN_LINE_ALIGNED elfen_batch_header {
    uint64_t magic;       /**< ELFEN_BATCH_MAGIC */
    uint32_t abi_version; /**< ELFEN_ABI_VERSION */
    uint32_t line_size;   /**< 64 */
    uint64_t total_size;  /**< size of the segment: ELFEN_BATCH_SIZE(lane_count) */
    uint32_t lane_count;  /**< equal to the page's */
    uint32_t reserved0;   /**< 0 */
    uint64_t instance;    /**< equal to the page's */
    uint64_t reserved[3]; /**< 0 */
} elfen_batch_header;

/** Batch segment, lane i at ELFEN_BATCH_HEADER_SIZE + i * ELFEN_BATCH_STRIDE:
 *  the batch line. Written by the batch threads of lane i with atomic
 *  read-modify-writes (several may share a lane). */
typedef struct ELFEN_LINE_ALIGNED elfen_batch_line {
    uint32_t attached;    /**< batch threads attached to this lane */
    uint32_t sleepers;    /**< batch threads blocked in futex on their request lane's state */
    uint32_t napping;     /**< batch threads napping (any backend) */
    uint32_t reserved0;   /**< 0 */
    uint64_t naps;        /**< naps taken */
    uint64_t wakes;       /**< naps ended */
    uint64_t run_ticks;   /**< page-clock ticks running batch code (summed over threads) */
    uint64_t corun_ticks; /**< of those, ticks while the request lane was busy */
    uint64_t last_change; /**< page clock at the last nap or wake */
    uint64_t slow_checks; /**< checks that took the slow path */
} elfen_batch_line;

/* ---- the layout is the contract: fail the build if it drifts ----------- */
#ifdef __cplusplus
#define ELFEN_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define ELFEN_ALIGNOF(T) alignof(T)
#else
#define ELFEN_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define ELFEN_ALIGNOF(T) _Alignof(T)
#endif
#define ELFEN_ASSERT_SIZE(T, n) \
    ELFEN_STATIC_ASSERT(sizeof(T) == (n) && ELFEN_ALIGNOF(T) == 64, #T " must be " #n " bytes, 64-aligned")
#define ELFEN_ASSERT_AT(T, f, off) \
    ELFEN_STATIC_ASSERT(offsetof(T, f) == (off), #T "." #f " must be at offset " #off)
#define ELFEN_ASSERT_FIELD(T, f, off, n) \
    ELFEN_ASSERT_AT(T, f, off);          \
    ELFEN_STATIC_ASSERT(sizeof(((T *)0)->f) == (n), #T "." #f " must be " #n " bytes")

ELFEN_ASSERT_SIZE(elfen_header, 128);
ELFEN_ASSERT_FIELD(elfen_header, magic, 0, 8);
ELFEN_ASSERT_FIELD(elfen_header, abi_version, 8, 4);
ELFEN_ASSERT_FIELD(elfen_header, line_size, 12, 4);
ELFEN_ASSERT_FIELD(elfen_header, total_size, 16, 8);
ELFEN_ASSERT_FIELD(elfen_header, lane_count, 24, 4);
ELFEN_ASSERT_FIELD(elfen_header, clock, 28, 4);
ELFEN_ASSERT_FIELD(elfen_header, ticks_per_sec, 32, 8);
ELFEN_ASSERT_FIELD(elfen_header, instance, 40, 8);
ELFEN_ASSERT_FIELD(elfen_header, creator_pid, 48, 4);
ELFEN_ASSERT_FIELD(elfen_header, batch_shmid, 52, 4);
ELFEN_ASSERT_FIELD(elfen_header, created_unix_s, 56, 8);
ELFEN_ASSERT_FIELD(elfen_header, heartbeat, 64, 8);
ELFEN_ASSERT_FIELD(elfen_header, control, 72, 8);
ELFEN_ASSERT_FIELD(elfen_header, heartbeat_stale_ns, 80, 8);
ELFEN_ASSERT_FIELD(elfen_header, reserved, 88, 40);

ELFEN_ASSERT_SIZE(elfen_lc_line, 64);
ELFEN_ASSERT_FIELD(elfen_lc_line, state, 0, 8);
ELFEN_ASSERT_FIELD(elfen_lc_line, request_id, 8, 8);
ELFEN_ASSERT_FIELD(elfen_lc_line, busy_since, 16, 8);
ELFEN_ASSERT_FIELD(elfen_lc_line, busy_ticks, 24, 8);
ELFEN_ASSERT_FIELD(elfen_lc_line, requests, 32, 8);
ELFEN_ASSERT_FIELD(elfen_lc_line, lc_tid, 40, 4);
ELFEN_ASSERT_FIELD(elfen_lc_line, reserved0, 44, 4);
ELFEN_ASSERT_FIELD(elfen_lc_line, reserved, 48, 16);

ELFEN_ASSERT_SIZE(elfen_controller_line, 64);
ELFEN_ASSERT_FIELD(elfen_controller_line, role, 0, 4);
ELFEN_ASSERT_FIELD(elfen_controller_line, cpu, 4, 4);
ELFEN_ASSERT_FIELD(elfen_controller_line, policy, 8, 4);
ELFEN_ASSERT_FIELD(elfen_controller_line, nap, 12, 4);
ELFEN_ASSERT_FIELD(elfen_controller_line, budget_ns, 16, 8);
ELFEN_ASSERT_FIELD(elfen_controller_line, ref_ipc_milli, 24, 4);
ELFEN_ASSERT_FIELD(elfen_controller_line, partner_count, 28, 4);
ELFEN_ASSERT_FIELD(elfen_controller_line, partners, 32, 24);
ELFEN_ASSERT_FIELD(elfen_controller_line, hybrid_spin_ns, 56, 4);
ELFEN_ASSERT_FIELD(elfen_controller_line, config_seq, 60, 4);

ELFEN_ASSERT_SIZE(elfen_page_lane, 128);
ELFEN_ASSERT_AT(elfen_page_lane, lc, 0);
ELFEN_ASSERT_AT(elfen_page_lane, controller, 64);

ELFEN_ASSERT_SIZE(elfen_batch_header, 64);
ELFEN_ASSERT_FIELD(elfen_batch_header, magic, 0, 8);
ELFEN_ASSERT_FIELD(elfen_batch_header, abi_version, 8, 4);
ELFEN_ASSERT_FIELD(elfen_batch_header, line_size, 12, 4);
ELFEN_ASSERT_FIELD(elfen_batch_header, total_size, 16, 8);
ELFEN_ASSERT_FIELD(elfen_batch_header, lane_count, 24, 4);
ELFEN_ASSERT_FIELD(elfen_batch_header, reserved0, 28, 4);
ELFEN_ASSERT_FIELD(elfen_batch_header, instance, 32, 8);
ELFEN_ASSERT_FIELD(elfen_batch_header, reserved, 40, 24);

ELFEN_ASSERT_SIZE(elfen_batch_line, 64);
ELFEN_ASSERT_FIELD(elfen_batch_line, attached, 0, 4);
ELFEN_ASSERT_FIELD(elfen_batch_line, sleepers, 4, 4);
ELFEN_ASSERT_FIELD(elfen_batch_line, napping, 8, 4);
ELFEN_ASSERT_FIELD(elfen_batch_line, reserved0, 12, 4);
ELFEN_ASSERT_FIELD(elfen_batch_line, naps, 16, 8);
ELFEN_ASSERT_FIELD(elfen_batch_line, wakes, 24, 8);
ELFEN_ASSERT_FIELD(elfen_batch_line, run_ticks, 32, 8);
ELFEN_ASSERT_FIELD(elfen_batch_line, corun_ticks, 40, 8);
ELFEN_ASSERT_FIELD(elfen_batch_line, last_change, 48, 8);
ELFEN_ASSERT_FIELD(elfen_batch_line, slow_checks, 56, 8);

ELFEN_STATIC_ASSERT(sizeof(elfen_header) == ELFEN_HEADER_SIZE, "header size");
ELFEN_STATIC_ASSERT(sizeof(elfen_page_lane) == ELFEN_LANE_STRIDE, "lane stride");
ELFEN_STATIC_ASSERT(sizeof(elfen_batch_header) == ELFEN_BATCH_HEADER_SIZE, "batch header size");
ELFEN_STATIC_ASSERT(sizeof(elfen_batch_line) == ELFEN_BATCH_STRIDE, "batch stride");

/* ------------------------------------------------------------------------ */
/* Helpers: find lines in a mapped page, and the state word's bits           */
/* ------------------------------------------------------------------------ */

/** Inline helpers are never instrumented by -finstrument-functions. */
#define ELFEN_INLINE static inline __attribute__((always_inline, no_instrument_function))

/** Lane `lane` of a page file mapped at `page` (no bounds check). */
ELFEN_INLINE elfen_page_lane *elfen_page_lane_at(void *page, uint32_t lane) {
    return (elfen_page_lane *)((char *)page + sizeof(elfen_header)) + lane;
}
/** Lane `lane`'s batch line in a batch segment attached at `batch` (no bounds check). */
ELFEN_INLINE elfen_batch_line *elfen_batch_line_at(void *batch, uint32_t lane) {
    return (elfen_batch_line *)((char *)batch + sizeof(elfen_batch_header)) + lane;
}

/* elfen_lc_line.state:
 *   bit  0      busy: a request is running on the request lane
 *   bits 1..31  begin sequence, +1 per request begin (wraps at 2^31)
 *   bits 32..63 queue length (saturates at ELFEN_STATE_MAX_QUEUE_LEN)
 * ELFEN_STATE_NEVER (all ones) is never stored. The low 32 bits change at
 * every begin and end: they are the futex word batch threads sleep on. */
#define ELFEN_STATE_BUSY UINT64_C(1)
#define ELFEN_STATE_SEQ_MASK UINT64_C(0x7FFFFFFF)
#define ELFEN_STATE_MAX_QUEUE_LEN UINT32_C(0xFFFFFFFE)
#define ELFEN_STATE_NEVER UINT64_MAX

/** Builds a state word (the queue length saturates at ELFEN_STATE_MAX_QUEUE_LEN). */
ELFEN_INLINE uint64_t elfen_state_pack(int busy, uint32_t seq, uint32_t queue_len) {
    uint64_t q = queue_len > ELFEN_STATE_MAX_QUEUE_LEN ? ELFEN_STATE_MAX_QUEUE_LEN : queue_len;
    return (busy ? ELFEN_STATE_BUSY : 0) | (((uint64_t)seq & ELFEN_STATE_SEQ_MASK) << 1) | (q << 32);
}
ELFEN_INLINE int elfen_state_busy(uint64_t s) { return (int)(s & ELFEN_STATE_BUSY); }
ELFEN_INLINE uint32_t elfen_state_seq(uint64_t s) { return (uint32_t)((s >> 1) & ELFEN_STATE_SEQ_MASK); }
ELFEN_INLINE uint32_t elfen_state_queue_len(uint64_t s) { return (uint32_t)(s >> 32); }
ELFEN_INLINE uint32_t elfen_state_futex_word(uint64_t s) { return (uint32_t)s; }

/* ------------------------------------------------------------------------ */
/* API (libelfen)                                                            */
/* ------------------------------------------------------------------------ */

/* Return codes: 0 on success, one of these on failure (see elfen_last_error()). */
#define ELFEN_OK 0
#define ELFEN_EINVAL (-1) /**< a bad argument: NULL, non-UTF-8 path, unknown nap backend */
#define ELFEN_EPAGE (-2)  /**< the page is missing, unreadable, or fails validation */
#define ELFEN_ELANE (-3)  /**< lane out of range, or the wrong role for this call */
#define ELFEN_ESTATE (-4) /**< wrong state: already attached, not attached, read-only */
#define ELFEN_EOS (-5)    /**< an OS call failed (pinning, futex, mmap) */
#define ELFEN_EINTERNAL (-6) /**< a bug in elfen (caught, not propagated) */

/** What the last failing elfen call on this thread said, naming the file and
 *  the mismatch ("" if none failed). Valid until this thread's next failing
 *  call; never NULL. */
const char *elfen_last_error(void);

/** The ABI version libelfen was built for (compare with ELFEN_ABI_VERSION). */
uint32_t elfen_abi_version(void);

/* ---- pages -------------------------------------------------------------- */

/** A created or opened signal page (its file mapped, its batch segment attached). */
typedef struct elfen_page elfen_page;

/** How to create a page. Start from ELFEN_PAGE_OPTIONS_INIT (or pass NULL
 *  for exactly that) and change what you need. */
typedef struct elfen_page_options {
    uint32_t policy;         /**< ELFEN_POLICY_* for every lane */
    uint32_t nap;            /**< ELFEN_NAP_* for every lane */
    uint64_t budget_ns;      /**< budget of the budget policies, ns */
    uint32_t hybrid_spin_ns; /**< hybrid nap spin bound, ns (0 = the default, 50 us) */
    uint32_t page_mode;      /**< file mode of the page (0 = 0644; group/other write is refused) */
    uint32_t batch_mode;     /**< permission bits of the batch segment (0 = 0644, or 0664 with a
                                  batch_gid) */
    uint32_t replace;        /**< nonzero: replace an existing page at the path */
    uint32_t clock;          /**< ELFEN_CLOCK_AUTO, ELFEN_CLOCK_TSC (fails without an invariant TSC)
                                  or ELFEN_CLOCK_MONOTONIC_NS (pages that writers without a TSC
                                  reader attach to, e.g. Java) */
    uint32_t batch_gid;      /**< group of the batch segment, whose members may attach batch
                                  threads (0 = none: only the creator's user writes batch lines) */
} elfen_page_options;

/** Borrow idle, automatic nap, no budget, page 0644 and batch segment 0644
 *  (no batch group), fail if the page exists, the machine's best clock. */
#define ELFEN_PAGE_OPTIONS_INIT {ELFEN_POLICY_BORROW_IDLE, ELFEN_NAP_AUTO, 0, 0, 0644, 0, 0, ELFEN_CLOCK_AUTO, 0}

/** Creates a page at `path` (a name without '/' lives in /dev/shm; tests use
 *  temporary paths) for request:batch CPU pairs given as `pairs`, e.g. "0:1"
 *  or "0:1+2,3:4" (lanes are laid out pair by pair, request lane first: "0:1"
 *  makes lane 0 = CPU 0 the request lane and lane 1 = CPU 1 its batch lane).
 *  `opts` may be NULL. The caller is the page's controller. Destroying the
 *  handle removes the page file unless elfen_page_persist() was called (the
 *  batch segment lives while some process has the page attached).
 *  Returns NULL on error. */
elfen_page *elfen_page_create(const char *path, const char *pairs, const elfen_page_options *opts);

/** Opens an existing page read-only (as an observer, like `elfen status`),
 *  validating the page file and its batch segment. Returns NULL on error. */
elfen_page *elfen_page_open(const char *path);

/** Unmaps the page (and detaches its batch segment); removes the page file
 *  if this handle created it and it was not persisted. NULL is ignored. */
void elfen_page_destroy(elfen_page *page);

/** Keeps the page file of a created page after elfen_page_destroy(). Its
 *  batch segment lives while some process has the page attached: a persisted
 *  page nobody holds any more is refused at open ("is gone"). */
int elfen_page_persist(elfen_page *page);

/** Lanes in the page (0 if `page` is NULL). */
uint32_t elfen_page_lane_count(const elfen_page *page);

/** The mapped header / lines, read-only (NULL if out of range). Read fields
 *  that others write with __atomic_load_n. */
const elfen_header *elfen_page_header(const elfen_page *page);
const elfen_lc_line *elfen_page_lc(const elfen_page *page, uint32_t lane);
const elfen_controller_line *elfen_page_controller(const elfen_page *page, uint32_t lane);
const elfen_batch_line *elfen_page_batch(const elfen_page *page, uint32_t lane);

/** The lane whose controller line names CPU `cpu`, or -1. */
int elfen_page_lane_of_cpu(const elfen_page *page, uint32_t cpu);

/* Header line 1 (docs/protocol.md, "Kill switch and heartbeat"). The setters
 * need a created page (controller; ELFEN_ESTATE on an opened one); batch
 * threads obey at their next slow path and while napping. */

/** Sets (on != 0) or clears ELFEN_CONTROL_KILL, leaving UNMANAGED as it is. */
int elfen_page_set_kill(elfen_page *page, int on);
/** Sets the kill switch's mode, both bits at once: ELFEN_KILL_OFF, _PAUSED or _UNMANAGED. */
int elfen_page_set_kill_mode(elfen_page *page, int mode);
/** The kill switch's mode (ELFEN_KILL_*; KILL wins over UNMANAGED), or a negative code. */
int elfen_page_kill_mode(const elfen_page *page);
/** Sets (on != 0) or clears ELFEN_CONTROL_UNMANAGED, leaving KILL as it is. */
int elfen_page_set_unmanaged(elfen_page *page, int on);
/** Records a sign of life of the controller: heartbeat = now. */
int elfen_page_beat(elfen_page *page);
/** Turns the heartbeat fail-safe on (stale_ns > 0, e.g. 10 x the beat
 *  interval; beats first) or off (0). */
int elfen_page_set_heartbeat_stale(elfen_page *page, uint64_t stale_ns);
/** 1 and *age_ns = ns since the last beat; 0 if the controller never beat;
 *  or a negative code. */
int elfen_page_heartbeat_age_ns(const elfen_page *page, uint64_t *age_ns);
/** 1 if the fail-safe is on and the heartbeat stale (batch threads pause), else 0. */
int elfen_page_heartbeat_stale(const elfen_page *page);
/** What batch threads' slow paths do now: ELFEN_BATCH_*, or a negative code. */
int elfen_page_batch_mode(const elfen_page *page);

/* ---- LC side: one handle per request lane, used by one thread ----------- */

/** An LC lane: the LC service's side of one request lane. */
typedef struct elfen_lc elfen_lc;

/** Attaches the calling LC thread to request lane `lane` of the page at
 *  `page_path` (page read-write, batch segment read-only). NULL on error. */
elfen_lc *elfen_lc_attach(const char *page_path, uint32_t lane);
/** A request starts: busy, id `id` (plain stores; no syscall). */
int elfen_lc_begin(elfen_lc *lc, uint64_t id);
/** The request ends: idle; wakes batch threads only if one sleeps in the OS. */
int elfen_lc_end(elfen_lc *lc);
/** elfen_lc_begin() that also publishes `queue_len`, the requests still
 *  waiting after this one was taken, in the same store of `state`. */
int elfen_lc_begin_q(elfen_lc *lc, uint64_t id, uint32_t queue_len);
/** elfen_lc_end() that also publishes `queue_len`, the requests waiting, in
 *  the same store of `state`: a batch thread never sees the lane idle with a
 *  stale queue length (the budget policies nap while it is non-zero). */
int elfen_lc_end_q(elfen_lc *lc, uint32_t queue_len);
/** Publishes the request queue length (budget policies read it) on its own:
 *  one store, it wakes nobody. */
int elfen_lc_set_queue_len(elfen_lc *lc, uint32_t queue_len);
/** Releases the handle. NULL is ignored. */
void elfen_lc_detach(elfen_lc *lc);

/* ---- batch side: the calling thread ------------------------------------- */

/** Attaches the calling thread as a batch thread of batch lane `lane` of the
 *  page at `page_path` (page read-only, batch segment read-write), pins it to
 *  the lane's CPU (restored at detach), and naps with backend `nap`
 *  (ELFEN_NAP_PAGE for the controller line's choice, or ELFEN_NAP_*). From
 *  now on elfen_check() in this thread watches the lane's request lane.
 *  Refuses a lane that is not a batch lane, and a thread already attached. */
int elfen_batch_attach(const char *page_path, uint32_t lane, int nap);

/** Options of elfen_batch_attach_ex(). */
typedef struct elfen_batch_options {
    int nap;                   /**< ELFEN_NAP_PAGE or ELFEN_NAP_* */
    int pin;                   /**< nonzero: pin to the lane's CPU until detach */
    uint32_t futex_timeout_us; /**< longest single futex wait (0 = 10 ms); bounds kill-switch latency */
    uint32_t reserved;         /**< 0 */
} elfen_batch_options;

/** The page's nap backend, pinned, default futex timeout. */
#define ELFEN_BATCH_OPTIONS_INIT {ELFEN_NAP_PAGE, 1, 0, 0}

/** elfen_batch_attach() with options (`opts` NULL = ELFEN_BATCH_OPTIONS_INIT). */
int elfen_batch_attach_ex(const char *page_path, uint32_t lane, const elfen_batch_options *opts);

/** Detaches the calling thread; its checks do nothing afterwards. */
int elfen_batch_detach(void);

/** 1 if the calling thread is attached as a batch thread, else 0. */
int elfen_batch_attached(void);

/** The nap backend the calling thread's attach chose (ELFEN_NAP_*), or a
 *  negative code if it is not attached. */
int elfen_batch_nap_backend(void);

/** Writes a one-line description of the calling thread's attachment (lane,
 *  request lane, policy, nap backend and why) into buf, snprintf-style;
 *  returns the length it needed, or a negative code. */
int elfen_batch_describe(char *buf, size_t len);

/** The calling thread's own accounting (the batch line has the lane's sums). */
typedef struct elfen_batch_stats {
    uint64_t slow_checks; /**< checks that took the slow path */
    uint64_t naps;        /**< naps taken */
    uint64_t wakes;       /**< naps ended */
    uint64_t run_ns;      /**< time running batch code */
    uint64_t corun_ns;    /**< of that, time co-running with a request (budget policies) */
    uint64_t nap_ns;      /**< time napping */
} elfen_batch_stats;

/** Fills `out` with the calling thread's accounting; negative if not attached. */
int elfen_batch_stats_get(elfen_batch_stats *out);

/** Lazy attach (armed by linking libelfen_hook): each thread that never
 *  attached attaches itself at its first check from ELFEN_PAGE / ELFEN_LANE /
 *  ELFEN_NAP / ELFEN_PIN, or switches its checks off with one warning per
 *  process (bindings/c/README.md). A program that attaches its threads
 *  explicitly and links the hook only for its instrumented code calls
 *  elfen_set_lazy_attach(0) first: its other threads' checks then do nothing
 *  and nothing is printed. Affects threads that have not checked yet. */
void elfen_set_lazy_attach(int on);

/** The slow path: runs the policy, naps if it says so, and re-arms the fast
 *  path. Called by elfen_check() on a mismatch; safe (and cheap) to call from
 *  any thread, attached or not. Never instrumented. */
void elfen_check_slow(void) __attribute__((cold, noinline));

/* ---- the fast path ------------------------------------------------------ */

/** Per-thread check state, defined once in libelfen (initial-exec TLS, so
 *  the fast path is one %fs-relative access). `word` points at the watched
 *  word (the request lane's `state`); a mismatch with `expected` takes the
 *  slow path. A thread that is not attached points `word` at a static whose
 *  value equals `expected`, so its checks do nothing. Internal: only
 *  libelfen writes it. */
struct elfen_check_tls {
    const volatile uint64_t *word;
    uint64_t expected;
};
extern __thread struct elfen_check_tls elfen__tls __attribute__((tls_model("initial-exec")));

/** The batch check (Elfen's fast path): one load of the watched word, one
 *  compare; the out-of-line slow path only on a change. No call, syscall or
 *  allocation otherwise. Put it in loops and at function entries of batch
 *  code; -finstrument-functions does that for you (libelfen_hook). */
ELFEN_INLINE void elfen_check(void) {
    if (__builtin_expect(*elfen__tls.word != elfen__tls.expected, 0)) elfen_check_slow();
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ELFEN_H */
