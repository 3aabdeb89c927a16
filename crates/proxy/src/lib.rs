//! # elfen-proxy — local-node redundancy for an LC service
//!
//! A **product** crate: part of what an operator installs, runs or links
//! (`docs/architecture.md`); it depends on no lab crate.
//!
//! Tailor's proxy (thesis ch. 4): an **active** and a **backup** replica
//! of a latency-critical service on the same node, each on its own request
//! lane. When the active replica is paused — a stop-the-world collection,
//! a stopped process, a request running far beyond its demand — the proxy
//! knows it from the replica's **signal line** (the LC line it publishes
//! on the signal page: busy, running request, busy since) rather than from
//! a timeout alone, re-sends the requests in flight there to the backup,
//! returns the first answer to each client (the late duplicate is dropped
//! and counted), swaps the roles, and warms the paused replica while it is
//! the backup. A timeout hedge at a percentile (Envoy-style) is a mode of
//! the same proxy, so the two are measured by one code path.
//!
//! | piece | module |
//! |---|---|
//! | settings (TOML, defaults, unknown keys refused) | [`config`] |
//! | the pause control law, demand-derived bounds | [`detect`] |
//! | requests and answers, wire and HTTP/1.1 framing toward replicas | [`message`] |
//! | a connection to a replica | [`link`] |
//! | requests in flight, routing, hedges, first answer wins, swaps, warm-ups | [`engine`] |
//! | the BPF watch of a JVM replica's stop-the-world pauses (the profiler's) | [`jvm`] |
//! | the poller of the signal page that decides | [`monitor`] |
//! | replicas started from a command template | [`launch`] |
//! | client fronts: the wire protocol, HTTP/1.1 (hyper) | [`front_wire`], [`front_http`] |
//! | the assembled proxy | [`proxy`] |
//! | the record, the status line, Prometheus metrics | [`status`], [`metrics`] |
//! | a small LC service for tests and demonstrations, with injectable pauses | [`demo`] |
//! | `elfen proxy run / demo-service` | [`cli`] |
//!
//! `docs/proxy.md` says how to run it, what each signal means and what was
//! measured; `elfen proxy bench` (alone vs proxy vs timeout hedge, the
//! ladder) lives with the lab, in `elfen-proxybench`.
#![deny(missing_docs)]

pub mod cli;
pub mod config;
pub mod demo;
pub mod detect;
pub mod engine;
pub mod error;
pub mod front_http;
pub mod front_wire;
pub mod jvm;
pub mod launch;
pub mod link;
pub mod message;
pub mod metrics;
pub mod monitor;
pub mod proxy;
pub mod status;

pub use config::{HedgeMode, Protocol, ProxyConfig};
pub use error::{ProxyError, Result};
pub use proxy::Proxy;
pub use status::Summary;
