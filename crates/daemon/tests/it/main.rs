//! One integration-test binary: configuration checks (`config`), and the
//! daemon for real as a child process (`live`: root + BPF, or skipped with
//! the reason printed), and the measurement's wake-up reference (`measure`).

mod common;
mod config;
mod live;
mod measure;
mod metrics_doc;
mod trust;
