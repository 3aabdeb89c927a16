//! Compiles the BPF programs with clang (`-target bpf`) and generates their
//! libbpf-rs skeletons: `src/bpf/sched.bpf.c` (CO-RE) into
//! `$OUT_DIR/sched.skel.rs`, `src/bpf/egress.bpf.c` into
//! `$OUT_DIR/egress.skel.rs`.
//!
//! Needs clang on PATH (or `ELFEN_BPF_CLANG=/path/to/clang`); the libbpf
//! headers (`bpf/bpf_helpers.h`, …) come from the vendored libbpf-sys.

use std::path::PathBuf;
use std::process::Command;

const SRC: &str = "src/bpf/sched.bpf.c";
const EGRESS: &str = "src/bpf/egress.bpf.c";

fn main() {
    for f in [
        "sched.bpf.c",
        "elfen_bpf.h",
        "core.h",
        "egress.bpf.c",
        "egress.h",
    ] {
        println!("cargo:rerun-if-changed=src/bpf/{f}");
    }
    println!("cargo:rerun-if-env-changed=ELFEN_BPF_CLANG");
    let clang = std::env::var_os("ELFEN_BPF_CLANG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("clang"));
    match Command::new(&clang).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "elfen-bpf needs clang to compile its BPF program ({} not found or not working): \
             install the packages in scripts/deps/bpf.apt (scripts/setup.sh --deps), \
             or point ELFEN_BPF_CLANG at a clang that supports -target bpf",
            clang.display()
        ),
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let include = manifest.join("src/bpf");
    libbpf_cargo::SkeletonBuilder::new()
        .source(manifest.join(SRC))
        .obj(out.join("sched.bpf.o"))
        .clang(&clang)
        // v3: 32-bit atomics with fetch (the slot seqlock); kernels >= 5.12.
        .clang_args([
            "-mcpu=v3".to_string(),
            "-Wall".to_string(),
            "-Werror".to_string(),
            format!("-I{}", include.display()),
        ])
        .build_and_generate(out.join("sched.skel.rs"))
        .unwrap_or_else(|e| panic!("building {SRC} and its skeleton: {e:#}"));
    libbpf_cargo::SkeletonBuilder::new()
        .source(manifest.join(EGRESS))
        .obj(out.join("egress.bpf.o"))
        .clang(&clang)
        .clang_args([
            "-Wall".to_string(),
            "-Werror".to_string(),
            format!("-I{}", include.display()),
        ])
        .build_and_generate(out.join("egress.skel.rs"))
        .unwrap_or_else(|e| panic!("building {EGRESS} and its skeleton: {e:#}"));
}
