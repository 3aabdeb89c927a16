//! A tiny loop of checks, to read the fast path's machine code:
//!
//! ```sh
//! cargo build --release -p elfen-runtime --example check_asm
//! objdump -d --no-show-raw-insn -C target/release/examples/check_asm | grep -A25 'check_asm::checks>:'
//! ```
//!
//! Run, it attaches to a temporary page (request cpu = first allowed CPU,
//! batch cpu = the second, or the same on a one-CPU machine) and times a
//! million checks on an idle request lane.

use elfen_runtime::{BatchOptions, BatchThread};
use elfen_shm::{Page, PageSpec};
use std::sync::Arc;

/// `n` checks and a counter of "work".
#[inline(never)]
pub fn checks(b: &mut BatchThread, n: u64) -> u64 {
    let mut work = 0u64;
    for i in 0..n {
        b.check();
        work = work.wrapping_add(std::hint::black_box(i));
    }
    work
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("elfen-check-asm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cpus = elfen_topo::current_affinity()?;
    let (req, bat) = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
    let spec = PageSpec::for_pairs(&[(req, vec![bat])], 1, 0);
    let page = Arc::new(Page::create(dir.join("sig"), &spec)?);
    let mut b = BatchThread::attach(page.clone(), 1, BatchOptions::default())?;
    println!("{}", b.describe());
    let n = 100_000_000;
    let t = std::time::Instant::now();
    let w = checks(&mut b, n);
    let dt = t.elapsed();
    println!(
        "{n} checks in {dt:?}: {:.2} ns/check (work {w}), {:?}",
        dt.as_nanos() as f64 / n as f64,
        b.stats()
    );
    drop(b);
    drop(page);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
