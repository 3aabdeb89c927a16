//! # elfen-isobench — the daemon's isolation beyond the CPU, measured
//!
//! A **lab** crate: harness, measurement or workload
//! (`docs/architecture.md`); no product crate depends on it.
//!
//! PerfIso isolates more than CPU: batch memory is limited and the lowest
//! priority batch job is killed when the machine runs short, batch disk
//! I/O is throttled, batch network traffic goes at low priority. The
//! daemon does these (`elfen_daemon::isolation`); `elfen isobench`
//! measures them, each configuration side by side in one run, medians and
//! spread over repetitions, one JSON result file per run:
//!
//! | benchmark | module |
//! |---|---|
//! | a ballooning batch job next to a serving LC: watermark → kill, the LC's p99 and major faults, what was killed, the kernel's OOM kills | [`memory`] |
//! | a fio latency probe as the LC next to fio batch jobs: alone, unlimited, under the daemon's I/O budget | [`io`] |
//! | LC requests next to an iperf3 upload in network namespaces: alone, normal, low priority | [`egress`] |
//! | the heartbeat fail-safe: daemon SIGKILLed → batch threads pause | [`failsafe`] |
//!
//! Shared: [`common`] (helpers, the in-process daemon, the harness's load
//! generator, the result file), [`fixtures`] (loop device, network
//! namespaces), [`helpers`] (the LC server and the daemon's helpers as
//! programs), [`cli`].
#![deny(missing_docs)]

pub mod cli;
pub mod common;
pub mod egress;
pub mod failsafe;
pub mod fixtures;
pub mod helpers;
pub mod io;
pub mod memory;
