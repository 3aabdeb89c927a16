/*
 * libelfen_hook: hooks that check at every function entry of a program
 * rebuilt with one of two compiler flags (the Elfen paper's -pg checks):
 *
 *   gcc -O2 -finstrument-functions prog.c $(pkg-config --libs elfen-hook)
 *       every entry calls __cyg_profile_func_enter(fn, call_site), every
 *       exit __cyg_profile_func_exit (empty): portable C, GCC and Clang;
 *   gcc -O2 -pg -mfentry -c prog.c ... (link without -pg)
 *       (x86-64) every entry's first instruction calls __fentry__, with no
 *       arguments and no exit hook, before the prologue: the function keeps
 *       the code and registers of the uninstrumented build;
 *   clang -O2 -finstrument-function-entry-bare prog.c ...
 *       every entry calls __cyg_profile_func_enter_bare(), no exit hook.
 *
 * Linking this file also arms lazy attach (its constructor): each thread
 * attaches itself at its first check from ELFEN_PAGE / ELFEN_LANE /
 * ELFEN_NAP, or, without ELFEN_PAGE, disables its checks (one warning per
 * process on stderr). See bindings/c/README.md.
 *
 * Nothing here may be instrumented, or every check would recurse: the hooks
 * and the constructor carry no_instrument_function, and elfen_check() is an
 * always-inline, never-instrumented function of elfen.h. The slow path they
 * may call is Rust (never instrumented); while it runs, this thread's checks
 * are switched off, so instrumented code it reaches (an instrumented malloc,
 * say) cannot re-enter it.
 *
 * The hooks are `protected`: exported (an instrumented shared object may
 * rely on the executable's copy), but calls from the object that links this
 * archive bind to its own copy directly, not through a PLT entry. Each hook
 * starts a 64-byte line, so its few instructions never straddle two fetch
 * blocks.
 */
#include "elfen.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#endif

#define ELFEN_HOOK __attribute__((no_instrument_function, hot, aligned(64), visibility("protected")))

void elfen__arm_lazy_attach(void);

#if defined(__x86_64__) && defined(__linux__)
/* Bytes the __fentry__ slow path saves with XSAVE (x87, SSE, AVX, AVX-512
 * state: everything that may hold an argument), 0 for FXSAVE (no OSXSAVE). */
__attribute__((visibility("hidden"))) uint32_t elfen__fentry_xsave_bytes = 0;

/* The XSAVE components the slow path saves: x87, SSE, AVX, AVX-512 (not AMX,
 * whose state no argument lives in). */
#define ELFEN_XSAVE_MASK 0xE7u

__attribute__((no_instrument_function)) static void elfen_fentry_size_xsave(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return; /* no OSXSAVE: FXSAVE */
    uint32_t xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    uint32_t end = 576; /* legacy area + header */
    for (unsigned i = 2; i < 8; i++) {
        if (!((ELFEN_XSAVE_MASK & xcr0_lo) & (1u << i))) continue;
        __cpuid_count(0xD, i, a, b, c, d); /* a = size, b = offset (standard format) */
        if (b + a > end) end = b + a;
    }
    elfen__fentry_xsave_bytes = (end + 63u) & ~63u;
}
#endif

__attribute__((constructor(101), no_instrument_function)) static void elfen_hook_arm(void) {
#if defined(__x86_64__) && defined(__linux__)
    elfen_fentry_size_xsave();
#endif
    elfen__arm_lazy_attach();
}

ELFEN_HOOK void __cyg_profile_func_enter(void *fn, void *call_site) {
    (void)fn;
    (void)call_site;
    elfen_check();
}

/* Right after the enter hook, in its line: GCC always calls it. */
__attribute__((no_instrument_function, hot, visibility("protected"))) void __cyg_profile_func_exit(void *fn,
                                                                                              void *call_site) {
    (void)fn;
    (void)call_site;
}

ELFEN_HOOK void __cyg_profile_func_enter_bare(void) { elfen_check(); }

#if defined(__x86_64__) && defined(__linux__)
/*
 * __fentry__ (gcc -pg -mfentry): called as the first instruction of every
 * function, before its prologue, so every argument register is live and
 * must survive. The fast path is elfen_check() using only r11 (a scratch
 * register no argument uses) and rax (kept in the red zone, which is ours:
 * this is a leaf); the flags are not preserved across calls anyway.
 *
 *   movq  %rax, -8(%rsp)
 *   movq  elfen__tls@gottpoff(%rip), %r11   # initial-exec offset (a constant
 *                                           # once linked into an executable)
 *   movq  %fs:(%r11), %rax                  # elfen__tls.word
 *   movq  (%rax), %rax                      # the request lane's state
 *   cmpq  %fs:8(%r11), %rax                 # elfen__tls.expected
 *   movq  -8(%rsp), %rax
 *   jne   elfen__fentry_slow
 *   ret
 *
 * The slow path saves every register a caller may pass arguments or the
 * static chain in (rax, rcx, rdx, rsi, rdi, r8-r10), and the x87/SSE/AVX/
 * AVX-512 state with XSAVE (FXSAVE without OSXSAVE), on a 64-byte aligned
 * area of its stack, calls elfen_check_slow(), and restores them.
 */
__asm__(".text\n"
        ".p2align 6\n"
        ".globl __fentry__\n"
        ".protected __fentry__\n"
        ".type __fentry__, @function\n"
        "__fentry__:\n"
        ".cfi_startproc\n"
        "    movq %rax, -8(%rsp)\n"
        "    movq elfen__tls@gottpoff(%rip), %r11\n"
        "    movq %fs:(%r11), %rax\n"
        "    movq (%rax), %rax\n"
        "    cmpq %fs:8(%r11), %rax\n"
        "    movq -8(%rsp), %rax\n"
        "    jne elfen__fentry_slow\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size __fentry__, .-__fentry__\n"
        "\n"
        ".section .text.unlikely,\"ax\",@progbits\n"
        ".p2align 4\n"
        ".type elfen__fentry_slow, @function\n"
        "elfen__fentry_slow:\n"
        ".cfi_startproc\n"
        "    pushq %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "    movq %rsp, %rbp\n"
        ".cfi_def_cfa_register %rbp\n"
        "    pushq %rax\n"
        "    pushq %rcx\n"
        "    pushq %rdx\n"
        "    pushq %rsi\n"
        "    pushq %rdi\n"
        "    pushq %r8\n"
        "    pushq %r9\n"
        "    pushq %r10\n"
        "    movl elfen__fentry_xsave_bytes(%rip), %eax\n"
        "    testl %eax, %eax\n"
        "    jz 1f\n"
        "    subq %rax, %rsp\n"
        "    andq $-64, %rsp\n"
        "    xorl %eax, %eax\n" /* XRSTOR needs the header's reserved bytes zero */
        "    movq %rax, 512(%rsp)\n"
        "    movq %rax, 520(%rsp)\n"
        "    movq %rax, 528(%rsp)\n"
        "    movq %rax, 536(%rsp)\n"
        "    movq %rax, 544(%rsp)\n"
        "    movq %rax, 552(%rsp)\n"
        "    movq %rax, 560(%rsp)\n"
        "    movq %rax, 568(%rsp)\n"
        "    movl $0xE7, %eax\n"
        "    xorl %edx, %edx\n"
        "    xsave (%rsp)\n"
        "    call elfen_check_slow@PLT\n"
        "    movl $0xE7, %eax\n"
        "    xorl %edx, %edx\n"
        "    xrstor (%rsp)\n"
        "    jmp 2f\n"
        "1:  subq $512, %rsp\n"
        "    andq $-64, %rsp\n"
        "    fxsave (%rsp)\n"
        "    call elfen_check_slow@PLT\n"
        "    fxrstor (%rsp)\n"
        "2:  leaq -64(%rbp), %rsp\n"
        "    popq %r10\n"
        "    popq %r9\n"
        "    popq %r8\n"
        "    popq %rdi\n"
        "    popq %rsi\n"
        "    popq %rdx\n"
        "    popq %rcx\n"
        "    popq %rax\n"
        "    popq %rbp\n"
        ".cfi_def_cfa %rsp, 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size elfen__fentry_slow, .-elfen__fentry_slow\n"
        ".text\n");
#endif
