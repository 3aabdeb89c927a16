//! The simulator's integration tests, one binary (ripgrep style):
//! engine correctness against closed forms and policy invariants, configs
//! and bad input, validation against a synthetic measured file.

mod config;
mod engine;
mod validate;
