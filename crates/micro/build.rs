//! Compiles `c/check_loop.c` (the C fast-path loops) against libelfen's
//! `elfen.h` (`DEP_ELFEN_INCLUDE`, exported by `elfen-capi`).

fn main() {
    println!("cargo:rerun-if-changed=c/check_loop.c");
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
}
