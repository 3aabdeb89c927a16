/* Built with nothing but `pkg-config --cflags --libs elfen` (and statically
 * with --variable=static_libs): creates a page under the directory given,
 * attaches both sides, and checks once. */
#define _GNU_SOURCE
#include <elfen.h>
#include <stdio.h>

int main(int argc, char **argv) {
    char path[512];
    snprintf(path, sizeof path, "%s/pc-page", argc > 1 ? argv[1] : "/tmp");
    if (elfen_abi_version() != ELFEN_ABI_VERSION) {
        fprintf(stderr, "pc_prog: library ABI %u, header %u\n", elfen_abi_version(), ELFEN_ABI_VERSION);
        return 1;
    }
    elfen_page *page = elfen_page_create(path, "0:1", NULL);
    if (!page) {
        fprintf(stderr, "pc_prog: %s\n", elfen_last_error());
        return 1;
    }
    elfen_batch_options o = ELFEN_BATCH_OPTIONS_INIT;
    o.pin = 0;
    int rc = elfen_batch_attach_ex(path, 1, &o);
    elfen_check();
    elfen_check();
    const elfen_batch_line *bl = elfen_page_batch(page, 1);
    int ok = rc == 0 && bl && bl->attached == 1 && bl->slow_checks >= 1;
    if (!ok) fprintf(stderr, "pc_prog: attach %d (%s)\n", rc, elfen_last_error());
    elfen_batch_detach();
    elfen_page_destroy(page);
    printf("pc_prog: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
