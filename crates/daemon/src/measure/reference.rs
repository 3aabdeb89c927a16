//! The machine's charge for a cross-CPU wake-up, the reference beside the
//! daemon's overhead.
//!
//! A thread that does nothing but sleep on a [`Bell`] at SCHED_FIFO on the
//! batch lane is rung from the request lane 1,000 times a second; the
//! kernel's account of its CPU time (`schedstat`, the same account the
//! daemon's overhead is measured with) divided by its wake-ups is what one
//! wake-up of a daemon thread costs the batch lane on this machine before
//! the daemon runs any code of its own. In a VM each wake-up takes
//! interrupts between vCPUs, each a VM exit, which the kernel charges to the
//! thread it wakes.

use crate::bell::Bell;
use anyhow::Context;
use elfen_cmd::proc::{SchedClass, gettid, set_sched, thread_schedstat};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::{Duration, Instant};

/// What a wake-up costs here.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct WakeCharge {
    /// Wake-ups counted (switches in of the reference thread).
    pub wakes: u64,
    /// The kernel's account of the thread's CPU per wake-up, ns.
    pub charged_ns_per_wake: f64,
}

/// Rings a SCHED_FIFO `priority` thread on `batch_cpu` from `request_cpu`
/// every millisecond for `window`; returns what each wake-up was charged.
pub fn wake_charge(
    request_cpu: u32,
    batch_cpu: u32,
    priority: u8,
    window: Duration,
) -> anyhow::Result<WakeCharge> {
    let bell = Arc::new(Bell::new().context("creating an eventfd")?);
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU32::new(0));
    let (b2, s2, t2) = (Arc::clone(&bell), Arc::clone(&stop), Arc::clone(&tid));
    let sleeper = std::thread::Builder::new()
        .name("elfen-wake-ref".into())
        .spawn(move || -> anyhow::Result<()> {
            elfen_topo::pin_current_thread(batch_cpu)?;
            set_sched(0, SchedClass::Fifo(priority)).context("SCHED_FIFO")?;
            t2.store(gettid(), Relaxed);
            while !s2.load(Relaxed) {
                b2.wait(Duration::from_secs(1));
            }
            Ok(())
        })
        .context("starting the reference thread")?;
    let result = (|| {
        let t0 = Instant::now();
        while tid.load(Relaxed) == 0 {
            anyhow::ensure!(
                !sleeper.is_finished() && t0.elapsed() < Duration::from_secs(5),
                "the reference thread did not start"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let (me, tid) = (std::process::id(), tid.load(Relaxed));
        let _pin = elfen_topo::PinGuard::new(request_cpu)?;
        std::thread::sleep(Duration::from_millis(5));
        let read = || thread_schedstat(me, tid);
        let a = read().context("reading the reference thread's schedstat")?;
        let end = Instant::now() + window;
        while Instant::now() < end {
            bell.ring();
            std::thread::sleep(Duration::from_millis(1));
        }
        let b = read().context("reading the reference thread's schedstat")?;
        let wakes = b.runs.saturating_sub(a.runs).max(1);
        Ok(WakeCharge {
            wakes,
            charged_ns_per_wake: b.on_cpu_ns.saturating_sub(a.on_cpu_ns) as f64 / wakes as f64,
        })
    })();
    stop.store(true, Relaxed);
    bell.ring();
    match (result, sleeper.join()) {
        (Ok(r), Ok(Ok(()))) => Ok(r),
        // its own error says more than "did not start"
        (_, Ok(Err(e))) => Err(e.context("the reference thread")),
        (Err(e), _) => Err(e),
        (Ok(_), Err(_)) => anyhow::bail!("the reference thread panicked"),
    }
}
