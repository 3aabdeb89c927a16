//! Compiles the C half of libelfen from `bindings/c/src/`:
//!
//! - `elfen_tls.c` (linked into this crate): the one definition of the fast
//!   path's initial-exec thread-local state and the accessors the Rust slow
//!   path uses. Including `elfen.h` also checks its layout `_Static_assert`s
//!   at every build.
//! - `elfen_hook.c` (built, not linked): `libelfen_hook.a` in `OUT_DIR`, for
//!   dependents that link instrumented C (`DEP_ELFEN_HOOK_LIB_DIR`).
//!
//! Both at `-O2` whatever the Cargo profile: a test or debug build must not
//! link an unoptimized hook (at `-O0` the enter hook is 20 instructions, at
//! `-O2` six), and `make -C bindings/c` builds the same code at `-O2`.
//!
//! The cdylib must export the C symbols too: rustc's version script lists
//! only Rust exports, so `exports.map` adds the C ones.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let cdir = manifest.join("../../bindings/c");
    let cdir = cdir.canonicalize().unwrap_or(cdir);
    let src = cdir.join("src");
    for f in ["elfen.h", "src/elfen_tls.c", "src/elfen_hook.c"] {
        println!("cargo::rerun-if-changed={}", cdir.join(f).display());
    }
    println!("cargo::rerun-if-changed=exports.map");

    let base = || {
        let mut b = cc::Build::new();
        b.include(&cdir)
            .opt_level(2)
            .std("c11")
            .warnings(true)
            .extra_warnings(true)
            .flag_if_supported("-fno-instrument-functions")
            .flag_if_supported("-fno-semantic-interposition");
        b
    };
    base().file(src.join("elfen_tls.c")).compile("elfen_tls");

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let hook_dir = out.join("hook");
    std::fs::create_dir_all(&hook_dir).expect("create OUT_DIR/hook");
    base()
        .file(src.join("elfen_hook.c"))
        .cargo_metadata(false)
        .out_dir(&hook_dir)
        .compile("elfen_hook");

    println!(
        "cargo::rustc-cdylib-link-arg=-Wl,--version-script={}",
        manifest.join("exports.map").display()
    );
    println!("cargo::metadata=include={}", cdir.display());
    println!("cargo::metadata=hook_lib_dir={}", hook_dir.display());
}
