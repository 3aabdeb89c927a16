//! elfen's experiment harness: built-in LC service, open-loop load generator, configurations side by side, reports (under construction).

pub mod cli;
