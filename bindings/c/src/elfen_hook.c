/*
 * libelfen_hook: -finstrument-functions hooks that check at every function
 * entry of a program rebuilt with that flag (the Elfen paper's -pg checks).
 *
 *   gcc -O2 -finstrument-functions prog.c $(pkg-config --libs elfen-hook)
 *
 * Linking this file also arms lazy attach (its constructor): each thread
 * attaches itself at its first check from ELFEN_PAGE / ELFEN_LANE /
 * ELFEN_NAP, or, without ELFEN_PAGE, disables its checks (one warning per
 * process on stderr). See bindings/c/README.md.
 *
 * Nothing here may be instrumented, or every check would recurse: both
 * hooks and the constructor carry no_instrument_function, and elfen_check()
 * is an always-inline, never-instrumented function of elfen.h. The slow
 * path it may call is Rust (never instrumented); while it runs, this
 * thread's checks are switched off, so instrumented code it reaches (an
 * instrumented malloc, say) cannot re-enter it.
 */
#include "elfen.h"

void elfen__arm_lazy_attach(void);

__attribute__((constructor(101), no_instrument_function)) static void elfen_hook_arm(void) {
    elfen__arm_lazy_attach();
}

__attribute__((no_instrument_function, hot)) void __cyg_profile_func_enter(void *fn, void *call_site) {
    (void)fn;
    (void)call_site;
    elfen_check();
}

__attribute__((no_instrument_function, hot)) void __cyg_profile_func_exit(void *fn, void *call_site) {
    (void)fn;
    (void)call_site;
}
