//! elfen-runtime's integration tests (one binary).
//!
//! | module | proves |
//! |---|---|
//! | `borrow_idle` | with real threads and every nap backend, borrow idle never runs batch code on a request lane busy for longer than the step-aside bound |
//! | `budget` | fixed / refresh / dynamic refresh never co-run longer than the budget per request; fixed co-runs only within one budget after an idle period, refresh beyond it |
//! | `deadline` | a spin deadline ends a spinning nap (and the kill switch's) on a lane that stays busy, and the slow path with it; the fast path then waits for a change |
//! | `futex` | the futex nap loses no wakeup over thousands of rapid toggles |
//! | `kill` | the kill switch stops batch code at the next slow path and resumes after clear |
//! | `failsafe` | mode unmanaged runs batch code on a busy lane (KILL still pauses, clearing restores the policy); a stale heartbeat pauses batch code on an idle lane until a beat; without the fail-safe an old heartbeat changes nothing |
//! | `bad_input` | every bad page, lane, role, access, policy, backend and CPU is a clear error that leaves the thread and the page as they were |
//! | `attack` | a hostile user (nobody) cannot write, shrink, remove or re-permission the page file or the batch segment; garbling every byte of the batch segment while the LC serves does not stop it |
//! | `lc` | the LC line's words, counters, lane claiming and cleanup; controller reconfiguration |
//!
//! Threaded tests pin to the first two CPUs this process may use and run
//! one at a time (`common::serial`). Pages live in temporary directories and
//! are removed on drop, even when a test panics.

mod attack;
mod bad_input;
mod borrow_idle;
mod budget;
mod common;
mod deadline;
mod failsafe;
mod futex;
mod kill;
mod lc;
