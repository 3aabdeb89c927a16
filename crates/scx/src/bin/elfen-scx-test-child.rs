//! The child processes of this crate's live tests (`tests/live`), not a
//! tool. One argument chooses the role:
//!
//! - `lc:CPU:BUSY_MS:IDLE_MS` spins BUSY_MS and sleeps IDLE_MS, pinned to CPU;
//! - `batch:CPU,CPU` spins, allowed on those CPUs;
//! - `loader:LC_PID:BATCH_PID:A:B` loads the scheduler (LC and batch those
//!   processes, CPUs A and B paired), prints `LOADED` and waits.
//!
//! Every role ends by itself after ten minutes (the tests kill it earlier).

use elfen_scx::{Lc, Options, Siblings};
use std::time::{Duration, Instant};

/// How long a child lives at most.
const LIFETIME: Duration = Duration::from_secs(600);

fn spin_until(end: Instant) {
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("elfen-scx-test-child: {msg}");
    std::process::exit(2);
}

fn num<T: std::str::FromStr>(s: &str) -> T {
    s.parse()
        .unwrap_or_else(|_| fail(&format!("not a number: {s:?}")))
}

fn main() {
    let spec = std::env::args().nth(1).unwrap_or_default();
    let f: Vec<&str> = spec.split(':').collect();
    let end = Instant::now() + LIFETIME;
    match f[..] {
        ["lc", cpu, busy, idle] => {
            if let Err(e) = elfen_topo::pin_current_thread(num(cpu)) {
                fail(&format!("cannot pin to cpu {cpu}: {e}"));
            }
            let busy = Duration::from_millis(num(busy));
            let idle = Duration::from_millis(num(idle));
            while Instant::now() < end {
                spin_until(Instant::now() + busy);
                std::thread::sleep(idle);
            }
        }
        ["batch", cpus] => {
            let cpus: Vec<u32> = cpus.split(',').map(num).collect();
            if let Err(e) = elfen_topo::set_current_affinity(&cpus) {
                fail(&format!("cannot allow cpus {cpus:?}: {e}"));
            }
            spin_until(end);
        }
        ["loader", lc, batch, a, b] => {
            let opts = Options {
                siblings: Siblings::Pairs(vec![(num(a), num(b))]),
                ..Options::new(Lc::Pids(vec![num(lc)]), vec![num(batch)])
            };
            match elfen_scx::load(&opts) {
                Ok(sched) => {
                    println!("LOADED");
                    std::thread::sleep(LIFETIME);
                    drop(sched);
                }
                Err(e) => {
                    println!("LOAD-ERROR {e}");
                    std::process::exit(1);
                }
            }
        }
        _ => fail(&format!(
            "usage: elfen-scx-test-child lc:CPU:BUSY_MS:IDLE_MS | batch:CPU,CPU | loader:LC_PID:BATCH_PID:A:B (not {spec:?})"
        )),
    }
}
