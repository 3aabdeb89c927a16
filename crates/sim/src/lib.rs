//! the discrete-event simulator: SMT cores, chips and clusters under elfen's own policies (under construction).

pub mod cli;
