//! elfen's micro-benchmarks: step-aside and wake latency per nap backend, check cost, instrumentation overhead (under construction).

pub mod cli;
