//! Compiles elfen's sched_ext scheduler, `src/bpf/lanes.bpf.c`, with clang
//! (`-target bpf`) and generates its libbpf-rs skeleton,
//! `$OUT_DIR/lanes.skel.rs`.
//!
//! The kernel's types come from the checked-in `src/bpf/vmlinux.h` (the 7.3
//! kernel's BTF, made by `scripts/scx-vmlinux.sh`), so the build machine's
//! own kernel needs no sched_ext. Debian 12's clang-14 compiles it; clang
//! on PATH, or `ELFEN_BPF_CLANG=/path/to/clang`. The libbpf headers
//! (`bpf/bpf_helpers.h`, …) come from the vendored libbpf-sys.

use std::path::PathBuf;
use std::process::Command;

const SRC: &str = "src/bpf/lanes.bpf.c";

fn main() {
    for f in ["lanes.bpf.c", "lanes.h", "scx.h", "vmlinux.h"] {
        println!("cargo:rerun-if-changed=src/bpf/{f}");
    }
    println!("cargo:rerun-if-env-changed=ELFEN_BPF_CLANG");
    let clang = std::env::var_os("ELFEN_BPF_CLANG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("clang"));
    match Command::new(&clang).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "elfen-scx needs clang to compile its BPF scheduler ({} not found or not working): \
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
        .obj(out.join("lanes.bpf.o"))
        .clang(&clang)
        .clang_args([
            // v3: 32-bit atomics and fetch-add (the stats counters)
            "-mcpu=v3".to_string(),
            // vmlinux.h of a 6.19+ kernel embeds named structs as anonymous
            // members (the kernel is built with -fms-extensions since 6.19)
            "-fms-extensions".to_string(),
            "-Wno-microsoft-anon-tag".to_string(),
            "-Wall".to_string(),
            "-Werror".to_string(),
            format!("-I{}", include.display()),
        ])
        .build_and_generate(out.join("lanes.skel.rs"))
        .unwrap_or_else(|e| panic!("building {SRC} and its skeleton: {e:#}"));
}
