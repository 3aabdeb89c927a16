// elfen.h under C++: the layout static_asserts, extern "C" linkage, the
// inline fast path and the state helpers compile and link.
#include <elfen.h>

#include <cstdio>
#include <cstring>

static_assert(sizeof(elfen_page_lane) == ELFEN_LANE_STRIDE, "lane stride");
static_assert(offsetof(elfen_batch_line, slow_checks) == 56, "slow_checks");
static_assert(alignof(elfen_lc_line) == 64, "lines are cache-line aligned");

int main() {
    elfen_check();  // never attached: does nothing
    uint64_t s = elfen_state_pack(1, 5, 3);
    bool ok = s == UINT64_C(12884901899) && elfen_state_busy(s) && elfen_state_seq(s) == 5 &&
              elfen_state_queue_len(s) == 3 && elfen_abi_version() == ELFEN_ABI_VERSION &&
              elfen_batch_attached() == 0 && std::strcmp(elfen_last_error(), "") == 0;
    elfen_page *p = elfen_page_open("/nonexistent/elfen-cxx");
    ok = ok && p == nullptr && std::strstr(elfen_last_error(), "does not exist") != nullptr;
    std::printf("cxx: %s\n", ok ? "all checks passed" : "FAILED");
    return ok ? 0 : 1;
}
