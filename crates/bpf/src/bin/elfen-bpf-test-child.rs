//! The child process of this crate's signal source tests
//! (`tests/sources.rs`), not a tool:
//!
//! - `elfen-bpf-test-child CPU`: pinned to CPU, alternates ~2 ms of
//!   spinning with ~2 ms of sleep, for at most 30 s (the watched LC);
//! - `elfen-bpf-test-child probe`: prints `PROBE loadable=… reason=…`, what
//!   [`elfen_bpf::probe`] says for this process (run as an unprivileged
//!   user by the tests).

use std::time::{Duration, Instant};

fn main() {
    let arg = std::env::args().nth(1).unwrap_or_default();
    if arg == "probe" {
        let p = elfen_bpf::probe();
        println!(
            "PROBE loadable={} reason={:?}",
            p.loadable(),
            p.reason().map(|e| e.to_string())
        );
        return;
    }
    let Ok(cpu) = arg.parse::<u32>() else {
        eprintln!("usage: elfen-bpf-test-child CPU | probe (not {arg:?})");
        std::process::exit(2);
    };
    if let Err(e) = elfen_topo::pin_current_thread(cpu) {
        eprintln!("elfen-bpf-test-child: cannot pin to cpu {cpu}: {e}");
        std::process::exit(1);
    }
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
