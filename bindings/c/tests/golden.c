/*
 * Golden vectors, from C: testdata/signal/v2-2lanes.{page,batch}.bin and the
 * JSON listing every field.
 *
 *  1. read:  every field of the JSON is found through the C structs of
 *            elfen.h (member address - base == JSON offset == the offsetof
 *            sum, sizeof member == JSON size, value read through the member
 *            == JSON value), and every named struct member is in the JSON;
 *  2. write: a zeroed page file and batch segment image written from the JSON values
 *            through the struct members equal the .bin files byte for byte;
 *  3. the header's constants and state helpers agree with the vectors.
 *
 * Usage: golden TESTDATA_DIR (the directory holding v2-2lanes.json).
 */
#include "harness.h"
#include "json.h"

#include <elfen.h>

enum { PAGE = 0, BATCH = 1 };
static const char *file_name[] = {"page", "batch"};

typedef struct {
    char name[64];
    int file;
    void *addr;     /* the member, inside the buffer */
    size_t offset;  /* its offset by offsetof arithmetic */
    size_t size;    /* sizeof the member */
    int seen;       /* listed in the JSON */
} field;

typedef struct {
    field f[256];
    size_t n;
    unsigned char *base[2];
} table;

static void add(table *t, int file, const char *name, void *addr, size_t offset, size_t size) {
    REQUIRE(t->n < sizeof t->f / sizeof t->f[0], "field table full");
    field *f = &t->f[t->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->file = file;
    f->addr = addr;
    f->offset = offset;
    f->size = size;
    f->seen = 0;
}

/* Every named (non-reserved) member of the layout, for `lanes` lanes of the
 * page file at base[PAGE] and batch segment bytes at base[BATCH]. */
static void build(table *t, uint32_t lanes) {
    char n[64];
    elfen_header *h = (elfen_header *)t->base[PAGE];
    elfen_batch_header *bh = (elfen_batch_header *)t->base[BATCH];
#define HDR(m) add(t, PAGE, "header." #m, &h->m, offsetof(elfen_header, m), sizeof h->m)
    HDR(magic); HDR(abi_version); HDR(line_size); HDR(total_size); HDR(lane_count);
    HDR(clock); HDR(ticks_per_sec); HDR(instance); HDR(creator_pid); HDR(batch_shmid);
    HDR(created_unix_s); HDR(heartbeat); HDR(control); HDR(heartbeat_stale_ns);
#define BHDR(m) add(t, BATCH, "batch_header." #m, &bh->m, offsetof(elfen_batch_header, m), sizeof bh->m)
    BHDR(magic); BHDR(abi_version); BHDR(line_size); BHDR(total_size); BHDR(lane_count);
    BHDR(instance);
    for (uint32_t i = 0; i < lanes; i++) {
        elfen_page_lane *l = elfen_page_lane_at(t->base[PAGE], i);
        elfen_batch_line *b = elfen_batch_line_at(t->base[BATCH], i);
        size_t lane_off = ELFEN_HEADER_SIZE + (size_t)i * ELFEN_LANE_STRIDE;
        size_t batch_off = ELFEN_BATCH_HEADER_SIZE + (size_t)i * ELFEN_BATCH_STRIDE;
#define LC(m)                                                                               \
    snprintf(n, sizeof n, "lane%u.lc." #m, i);                                              \
    add(t, PAGE, n, &l->lc.m, lane_off + offsetof(elfen_page_lane, lc) + offsetof(elfen_lc_line, m), \
        sizeof l->lc.m)
        LC(state); LC(request_id); LC(busy_since); LC(busy_ticks); LC(requests); LC(lc_tid);
#define CTL(m)                                                                              \
    snprintf(n, sizeof n, "lane%u.controller." #m, i);                                      \
    add(t, PAGE, n, &l->controller.m,                                                       \
        lane_off + offsetof(elfen_page_lane, controller) + offsetof(elfen_controller_line, m), \
        sizeof l->controller.m)
        CTL(role); CTL(cpu); CTL(policy); CTL(nap); CTL(budget_ns); CTL(ref_ipc_milli);
        CTL(partner_count); CTL(hybrid_spin_ns); CTL(config_seq);
        for (unsigned p = 0; p < ELFEN_MAX_PARTNERS; p++) {
            snprintf(n, sizeof n, "lane%u.controller.partners[%u]", i, p);
            add(t, PAGE, n, &l->controller.partners[p],
                lane_off + offsetof(elfen_page_lane, controller) +
                    offsetof(elfen_controller_line, partners) + p * sizeof(uint32_t),
                sizeof l->controller.partners[p]);
        }
#define BL(m)                                                                                \
    snprintf(n, sizeof n, "lane%u.batch." #m, i);                                            \
    add(t, BATCH, n, &b->m, batch_off + offsetof(elfen_batch_line, m), sizeof b->m)
        BL(attached); BL(sleepers); BL(napping); BL(naps); BL(wakes); BL(run_ticks);
        BL(corun_ticks); BL(last_change); BL(slow_checks);
    }
}

static field *lookup(table *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->f[i].name, name)) return &t->f[i];
    return NULL;
}

/* Reads / writes a member through its typed lvalue. */
static uint64_t member_get(const field *f) {
    return f->size == 4 ? *(uint32_t *)f->addr : *(uint64_t *)f->addr;
}
static void member_set(const field *f, uint64_t v) {
    if (f->size == 4)
        *(uint32_t *)f->addr = (uint32_t)v;
    else
        *(uint64_t *)f->addr = v;
}

static unsigned char *zeroed(size_t len) {
    unsigned char *b = (unsigned char *)aligned_alloc(64, (len + 63) / 64 * 64);
    REQUIRE(b != NULL, "out of memory");
    memset(b, 0, len);
    return b;
}

/* The JSON's size fields, checked as numbers. */
static uint64_t json_num(const jval *root, const char *key) {
    uint64_t v = 0;
    CHECK(j_u64(j_text(root, key), &v) == 0, "the JSON has no unsigned number %s", key);
    return v;
}

static void compare_bytes(const char *what, const unsigned char *want, const unsigned char *got,
                          size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (want[i] != got[i]) {
            CHECK(0, "%s written through the C structs differs from the .bin at byte %zu "
                     "(want 0x%02x, wrote 0x%02x)", what, i, want[i], got[i]);
            return;
        }
    }
    CHECK(1, "%s", what);
}

int main(int argc, char **argv) {
    t_name = "golden";
    REQUIRE(argc == 2, "usage: golden TESTDATA_DIR");
    const char *dir = argv[1];
    char path[1024];
    size_t jlen = 0;
    snprintf(path, sizeof path, "%s/v2-2lanes.json", dir);
    char *text = (char *)t_read_file(path, &jlen);
    REQUIRE(text != NULL, "cannot read %s", path);
    const char *err = NULL;
    jval *root = j_parse(text, &err);
    REQUIRE(root && root->kind == J_OBJ, "%s: %s", path, err ? err : "not an object");

    /* ---- the files and their sizes */
    uint64_t page_size = json_num(root, "page_size"), batch_size = json_num(root, "batch_size");
    CHECK_EQ_U64(json_num(root, "abi_version"), ELFEN_ABI_VERSION, "JSON abi_version vs ELFEN_ABI_VERSION");
    const char *pf = j_text(root, "page_file"), *bf = j_text(root, "batch_file");
    REQUIRE(pf && bf, "the JSON names no page_file/batch_file");
    unsigned char *bin[2];
    size_t bin_len[2];
    snprintf(path, sizeof path, "%s/%s", dir, pf);
    bin[PAGE] = t_read_file(path, &bin_len[PAGE]);
    REQUIRE(bin[PAGE] != NULL, "cannot read %s", path);
    snprintf(path, sizeof path, "%s/%s", dir, bf);
    bin[BATCH] = t_read_file(path, &bin_len[BATCH]);
    REQUIRE(bin[BATCH] != NULL, "cannot read %s", path);
    CHECK_EQ_U64(bin_len[PAGE], page_size, "page .bin length vs JSON page_size");
    CHECK_EQ_U64(bin_len[BATCH], batch_size, "batch .bin length vs JSON batch_size");

    /* the .bin read in place through the structs (copied to aligned memory) */
    unsigned char *page = zeroed(bin_len[PAGE]), *batch = zeroed(bin_len[BATCH]);
    memcpy(page, bin[PAGE], bin_len[PAGE]);
    memcpy(batch, bin[BATCH], bin_len[BATCH]);
    const elfen_header *h = (const elfen_header *)page;
    const elfen_batch_header *bh = (const elfen_batch_header *)batch;
    REQUIRE(bin_len[PAGE] >= sizeof *h && bin_len[BATCH] >= sizeof *bh, "files shorter than headers");
    uint32_t lanes = h->lane_count;
    REQUIRE(lanes >= 1 && lanes <= 64, "lane_count %u", lanes);
    CHECK_EQ_U64(ELFEN_PAGE_SIZE(lanes), page_size, "ELFEN_PAGE_SIZE(lane_count)");
    CHECK_EQ_U64(ELFEN_BATCH_SIZE(lanes), batch_size, "ELFEN_BATCH_SIZE(lane_count)");
    CHECK_EQ_U64(h->magic, ELFEN_MAGIC, "header.magic vs ELFEN_MAGIC");
    CHECK(!memcmp(page, "ELFENSIG", 8), "the page starts with ELFENSIG");
    CHECK_EQ_U64(bh->magic, ELFEN_BATCH_MAGIC, "batch_header.magic vs ELFEN_BATCH_MAGIC");
    CHECK(!memcmp(batch, "ELFENBAT", 8), "the batch segment starts with ELFENBAT");
    CHECK_EQ_U64(h->abi_version, ELFEN_ABI_VERSION, "header.abi_version");
    CHECK_EQ_U64(h->line_size, ELFEN_LINE_SIZE, "header.line_size");
    CHECK_EQ_U64(h->total_size, page_size, "header.total_size");
    CHECK_EQ_U64(bh->total_size, batch_size, "batch_header.total_size");
    CHECK_EQ_U64(bh->instance, h->instance, "instance equal in both files");

    /* ---- 1. read every JSON field through the structs */
    table rd = {.n = 0};
    rd.base[PAGE] = page;
    rd.base[BATCH] = batch;
    build(&rd, lanes);
    jval *fields = j_get(root, "fields");
    REQUIRE(fields && fields->kind == J_ARR && fields->n > 0, "the JSON has no fields array");
    for (size_t i = 0; i < fields->n; i++) {
        const jval *o = fields->items[i];
        const char *name = j_text(o, "name"), *file = j_text(o, "file");
        uint64_t off = 0, size = 0, value = 0;
        int ok = name && file && !j_u64(j_text(o, "offset"), &off) &&
                 !j_u64(j_text(o, "size"), &size) && !j_u64(j_text(o, "value"), &value);
        CHECK(ok, "fields[%zu] lacks name/file/offset/size/value", i);
        if (!ok) continue;
        field *f = lookup(&rd, name);
        CHECK(f != NULL, "JSON field %s has no member in elfen.h", name);
        if (!f) continue;
        f->seen++;
        CHECK(!strcmp(file, file_name[f->file]), "%s: JSON file %s, elfen.h puts it in the %s file",
              name, file, file_name[f->file]);
        size_t addr_off = (size_t)((unsigned char *)f->addr - rd.base[f->file]);
        CHECK_EQ_U64(addr_off, off, "%s: member address - base vs JSON offset", name);
        CHECK_EQ_U64(f->offset, off, "%s: offsetof arithmetic vs JSON offset", name);
        CHECK_EQ_U64(f->size, size, "%s: sizeof member vs JSON size", name);
        CHECK_EQ_U64(member_get(f), value, "%s: value read through the member vs JSON value", name);
    }
    for (size_t i = 0; i < rd.n; i++)
        CHECK(rd.f[i].seen == 1, "member %s is listed %d times in the JSON (want once)", rd.f[i].name,
              rd.f[i].seen);

    /* ---- 2. write a page from the JSON values through the structs */
    table wr = {.n = 0};
    wr.base[PAGE] = zeroed(page_size);
    wr.base[BATCH] = zeroed(batch_size);
    build(&wr, lanes);
    for (size_t i = 0; i < fields->n; i++) {
        const jval *o = fields->items[i];
        uint64_t value = 0;
        field *f = lookup(&wr, j_text(o, "name") ? j_text(o, "name") : "");
        if (f && !j_u64(j_text(o, "value"), &value)) member_set(f, value);
    }
    compare_bytes("page", bin[PAGE], wr.base[PAGE], page_size);
    compare_bytes("batch segment", bin[BATCH], wr.base[BATCH], batch_size);

    /* ---- 3. helpers and constants against the vector's values */
    const elfen_page_lane *l0 = elfen_page_lane_at(page, 0), *l1 = elfen_page_lane_at(page, 1);
    uint64_t s = l0->lc.state;
    CHECK(elfen_state_busy(s), "lane0 state 0x%" PRIx64 " is busy", s);
    CHECK_EQ_U64(elfen_state_pack(elfen_state_busy(s), elfen_state_seq(s), elfen_state_queue_len(s)), s,
                 "elfen_state_pack round-trips lane0's state");
    CHECK_EQ_U64(elfen_state_futex_word(s), (uint32_t)s, "futex word is the low half");
    CHECK_EQ_U64(elfen_state_pack(1, 0x7FFFFFFFu, UINT32_MAX) != ELFEN_STATE_NEVER, 1,
                 "a packed state is never ELFEN_STATE_NEVER");
    CHECK_EQ_U64(elfen_state_queue_len(elfen_state_pack(0, 0, UINT32_MAX)), ELFEN_STATE_MAX_QUEUE_LEN,
                 "queue length saturates");
    CHECK_EQ_U64(elfen_state_seq(elfen_state_pack(0, 0x80000001u, 0)), 1, "sequence wraps at 2^31");
    CHECK_EQ_U64(l0->controller.role, ELFEN_ROLE_REQUEST, "lane0 is the request lane");
    CHECK_EQ_U64(l1->controller.role, ELFEN_ROLE_BATCH, "lane1 is a batch lane");
    CHECK_EQ_U64(l1->controller.partners[0], 0, "lane1 watches lane 0");
    CHECK_EQ_U64(l1->controller.nap, ELFEN_NAP_HYBRID, "lane1 naps hybrid");
    CHECK_EQ_U64(l1->controller.policy, ELFEN_POLICY_FIXED_BUDGET, "lane1 policy");
    CHECK_EQ_U64(h->clock, ELFEN_CLOCK_MONOTONIC_NS, "clock");
    CHECK_EQ_U64(h->control, ELFEN_CONTROL_KILL | ELFEN_CONTROL_UNMANAGED,
                 "kill switch in mode paused over unmanaged in the vector");
    CHECK_EQ_U64(h->control & ~ELFEN_CONTROL_KNOWN, 0, "no unknown control bits");
    CHECK_EQ_U64(offsetof(elfen_header, heartbeat_stale_ns), 80, "heartbeat_stale_ns at offset 80");
    CHECK_EQ_U64(h->heartbeat_stale_ns, 50000000u, "the vector's fail-safe bound, 50 ms");
    CHECK_EQ_U64(elfen_batch_line_at(batch, 1)->naps, 17, "lane1 naps");

    t_note("%zu JSON fields checked through %zu struct members; page %" PRIu64 " B, batch %" PRIu64 " B",
           fields->n, rd.n, page_size, batch_size);
    j_free(root);
    free(text);
    free(bin[PAGE]);
    free(bin[BATCH]);
    free(page);
    free(batch);
    free(wr.base[PAGE]);
    free(wr.base[BATCH]);
    t_finish();
}
