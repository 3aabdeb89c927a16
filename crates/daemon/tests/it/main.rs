//! One integration-test binary: configuration checks (`config`), and the
//! daemon for real as a child process (`live`: root + BPF, or skipped with
//! the reason printed), the idle mode's yielding as a whole (`idle`), a
//! hostile local user against the running daemon (`page_attack`), and the
//! measurement's wake-up reference (`measure`); the modes' protection:
//! guard coalescing (`coalesce`), a mode judged against the service
//! (`fit`), `auto` (`auto`), event-driven blind isolation (`blind_events`);
//! real-time threads bounded beside a saturated LC (`rt_bound`).

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
mod page_attack;
mod rt_bound;
mod trust;
