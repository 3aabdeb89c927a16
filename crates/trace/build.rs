//! Compiles `src/bpf/trace.bpf.c` with clang (`-target bpf`, CO-RE) and
//! generates its libbpf-rs skeleton into `$OUT_DIR/trace.skel.rs`, the way
//! crates/bpf builds its program (and with its `core.h`, the shared kernel
//! types, on the include path).
//!
//! Needs clang on PATH (or `ELFEN_BPF_CLANG=/path/to/clang`); the libbpf
//! headers come from the vendored libbpf-sys.

use std::path::PathBuf;
use std::process::Command;

const SRC: &str = "src/bpf/trace.bpf.c";

fn main() {
    for f in ["trace.bpf.c", "elfen_trace.h", "trace_core.h"] {
        println!("cargo:rerun-if-changed=src/bpf/{f}");
    }
    println!("cargo:rerun-if-changed=../bpf/src/bpf/core.h");
    println!("cargo:rerun-if-env-changed=ELFEN_BPF_CLANG");
    let clang = std::env::var_os("ELFEN_BPF_CLANG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("clang"));
    match Command::new(&clang).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "elfen-trace needs clang to compile its BPF program ({} not found or not working): \
             install the packages in scripts/deps/bpf.apt (scripts/setup.sh --deps), \
             or point ELFEN_BPF_CLANG at a clang that supports -target bpf",
            clang.display()
        ),
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let own = manifest.join("src/bpf");
    let shared = manifest.join("../bpf/src/bpf");
    libbpf_cargo::SkeletonBuilder::new()
        .source(manifest.join(SRC))
        .obj(out.join("trace.bpf.o"))
        .clang(&clang)
        .clang_args([
            "-mcpu=v3".to_string(),
            "-Wall".to_string(),
            "-Werror".to_string(),
            format!("-I{}", own.display()),
            format!("-I{}", shared.display()),
        ])
        .build_and_generate(out.join("trace.skel.rs"))
        .unwrap_or_else(|e| panic!("building {SRC} and its skeleton: {e:#}"));
}
