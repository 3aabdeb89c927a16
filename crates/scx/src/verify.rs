//! [`verify_programs`]: which of the scheduler's programs this kernel's
//! verifier accepts, each loaded alone (nothing attached), so that a
//! refusal names its program and carries its own log — libbpf stops a
//! whole-object load at the first program refused.

use crate::contract;
use crate::error::ScxError;
use crate::kernel;
use crate::scheduler::{Siblings, load_error, open_configured, sibling_table};
use elfen_bpf::LogCapture;
use libbpf_rs::OpenObject;
use libbpf_rs::skel::OpenSkel;
use std::mem::MaybeUninit;

/// The scheduler's programs: its `sched_ext_ops` callbacks, then the
/// `sched_switch` program.
pub const PROGRAMS: [&str; 8] = [
    "select_cpu",
    "enqueue",
    "dispatch",
    "running",
    "stopping",
    "init",
    "exit",
    "sched_switch",
];

/// One program and what the verifier said of it.
#[derive(Debug)]
pub struct ProgramCheck {
    /// A name of [`PROGRAMS`].
    pub program: &'static str,
    /// `Ok`, or the load error with the verifier's log.
    pub result: Result<(), ScxError>,
}

/// Loads the object with only `program` in it (the other callbacks left
/// out of the struct_ops map, or the map left out for `sched_switch`).
fn load_only(
    storage: &mut MaybeUninit<OpenObject>,
    program: &str,
    nr_cpus: u32,
    siblings: &[i32],
) -> Result<(), ScxError> {
    let log = LogCapture::start();
    let mut open = open_configured(storage, &log, nr_cpus, siblings, None)?;
    let ops = open.struct_ops.elfen_lanes_mut();
    let keep = |name: &str| name == program;
    let none = std::ptr::null_mut();
    if !keep("select_cpu") {
        ops.select_cpu = none;
    }
    if !keep("enqueue") {
        ops.enqueue = none;
    }
    if !keep("dispatch") {
        ops.dispatch = none;
    }
    if !keep("running") {
        ops.running = none;
    }
    if !keep("stopping") {
        ops.stopping = none;
    }
    if !keep("init") {
        ops.init = none;
    }
    if !keep("exit") {
        ops.exit = none;
    }
    if keep("sched_switch") {
        open.maps
            .elfen_lanes
            .set_autocreate(false)
            .map_err(|e| load_error("open", &log)(e))?;
    } else {
        open.progs.elfen_lanes_switch.set_autoload(false);
    }
    let loaded = open.load().map_err(|e| load_error("load", &log)(e))?;
    drop(loaded);
    Ok(())
}

/// Loads each program of [`PROGRAMS`] alone and says what the verifier
/// said. Fails before trying where the kernel has no sched_ext or the
/// process may not load BPF.
pub fn verify_programs() -> Result<Vec<ProgramCheck>, ScxError> {
    kernel::kernel_state()?;
    elfen_bpf::check_privileges()?;
    elfen_bpf::check_btf()?;
    let nr_cpus = elfen_bpf::proc::possible_cpus()?;
    if nr_cpus > contract::MAX_CPUS {
        return Err(ScxError::TooManyCpus {
            count: nr_cpus,
            max: contract::MAX_CPUS,
        });
    }
    let siblings = sibling_table(&Siblings::Smt, nr_cpus)?;
    let mut out = Vec::new();
    for program in PROGRAMS {
        let mut storage = Box::new(MaybeUninit::<OpenObject>::uninit());
        let result = load_only(&mut storage, program, nr_cpus, &siblings);
        out.push(ProgramCheck { program, result });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every callback the object sets is named in PROGRAMS (and so checked).
    #[test]
    fn every_callback_is_listed() {
        let src = include_str!("bpf/lanes.bpf.c");
        let ops = &src[src
            .find("struct sched_ext_ops elfen_lanes = {")
            .expect("the ops")..];
        let ops = &ops[..ops.find("};").unwrap()];
        let set: Vec<&str> = ops
            .lines()
            .filter_map(|l| l.trim().strip_prefix('.')?.split_once(" = (void *)"))
            .map(|(field, _)| field)
            .collect();
        assert_eq!(set, PROGRAMS[..PROGRAMS.len() - 1]);
        assert!(src.contains("SEC(\"tp_btf/sched_switch\")"));
    }
}
