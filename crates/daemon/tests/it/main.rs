//! One integration-test binary: configuration checks (`config`), and the
//! daemon for real as a child process (`live`: root + BPF, or skipped with
//! the reason printed), the idle mode's yielding as a whole (`idle`), a
//! hostile local user against the running daemon (`page_attack`), and the
//! measurement's wake-up reference (`measure`); the modes' protection:
//! guard coalescing (`coalesce`), a mode judged against the service
//! (`fit`), `auto` (`auto`), event-driven blind isolation (`blind_events`),
//! idle mode off the busy edges (`off_edges`);
//! real-time threads bounded beside a saturated LC (`rt_bound`); mode scx
//! on a sched_ext kernel (`scx_live`, the trixie guest).

mod auto;
mod blind_events;
mod coalesce;
mod common;
mod config;
mod fit;
mod hosts;
mod idle;
mod iso_config;
mod iso_egress;
mod iso_io;
mod iso_memory;
mod live;
mod measure;
mod metrics_doc;
mod names_live;
mod off_edges;
mod page_attack;
mod rt_bound;
mod scx_live;
/// The scx crate's independent `sched_switch` tracer, shared.
#[allow(dead_code)]
#[path = "../../../scx/tests/live/tracer.rs"]
mod scx_tracer;
mod trust;
