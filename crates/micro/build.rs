//! Compiles micro's C against libelfen's `elfen.h` (`DEP_ELFEN_INCLUDE`,
//! exported by `elfen-capi`):
//!
//! - `c/check_loop.c`: the C fast-path loops;
//! - `c/kernels.c`, three times: with `-finstrument-functions` (symbols
//!   `elfen_k_inst_*`: every function entry calls the elfen check hook
//!   `__cyg_profile_func_enter`), on x86-64 with `-pg -mfentry`
//!   (`elfen_k_fentry_*`: every function's first instruction calls the hook
//!   `__fentry__`), and without (`elfen_k_plain_*`). Same compiler, same
//!   optimization level
//!   (-O2 whatever the Cargo profile, so test and release builds run the
//!   same C code). Functions and loops are aligned to 64 bytes in both
//!   builds: the instrumented prologue shifts the code that follows it, and
//!   without the alignment the same loop ran up to ±40 % faster or slower
//!   depending on where the linker happened to put it (measured on Matrix),
//!   which would swamp the cost of the checks.
//!
//! The hook is libelfen's (`elfen-capi` builds `libelfen_hook.a` and exports
//! its directory as `DEP_ELFEN_HOOK_LIB_DIR`); it is linked after the
//! kernels, so it resolves their `__cyg_profile_func_enter/exit` and
//! `__fentry__`, and its
//! own references (`elfen_check_slow`, the fast path's thread-local state)
//! resolve in the `elfen-capi` rlib this crate links.

/// How a build of the C kernels checks.
enum Checks {
    None,
    InstrumentFunctions,
    Fentry,
}

fn kernels(prefix: &str, lib: &str, checks: Checks) {
    let mut b = cc::Build::new();
    b.file("c/kernels.c")
        .include("c")
        .define("ELFEN_K_PREFIX", prefix)
        .opt_level(2)
        .flag_if_supported("-std=gnu11")
        .flag_if_supported("-falign-functions=64")
        .flag_if_supported("-falign-loops=64")
        .warnings(true)
        .extra_warnings(true);
    match checks {
        Checks::None => {}
        Checks::InstrumentFunctions => {
            b.flag("-finstrument-functions");
        }
        // Compiled with -pg -mfentry, linked without -pg (no gmon start-up).
        Checks::Fentry => {
            b.flag("-pg").flag("-mfentry");
        }
    }
    b.compile(lib);
}

fn main() {
    for f in ["c/check_loop.c", "c/kernels.c", "c/kernels.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let include = std::env::var("DEP_ELFEN_INCLUDE")
        .expect("elfen-capi's build script exports DEP_ELFEN_INCLUDE (its `links = \"elfen\"`)");
    println!("cargo:rerun-if-changed={include}/elfen.h");
    cc::Build::new()
        .file("c/check_loop.c")
        .include(&include)
        .opt_level(2)
        .flag_if_supported("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .compile("elfen_micro_c");

    kernels(
        "elfen_k_inst_",
        "elfen_micro_kernels_inst",
        Checks::InstrumentFunctions,
    );
    kernels("elfen_k_plain_", "elfen_micro_kernels_plain", Checks::None);
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        kernels(
            "elfen_k_fentry_",
            "elfen_micro_kernels_fentry",
            Checks::Fentry,
        );
    }
    let hook_dir = std::env::var("DEP_ELFEN_HOOK_LIB_DIR").expect(
        "elfen-capi's build script exports DEP_ELFEN_HOOK_LIB_DIR (its `links = \"elfen\"`)",
    );
    println!("cargo:rustc-link-search=native={hook_dir}");
    println!("cargo:rustc-link-lib=static=elfen_hook");
}
