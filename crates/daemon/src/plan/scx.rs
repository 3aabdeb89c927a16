//! Mode scx against the machine: the kernel must offer sched_ext with no
//! other scheduler loaded (else `[scx] unavailable` decides: refuse, or run
//! `[scx] fallback`), and the batch group must hold no LC process (the
//! scheduler would take it out of the fair class).

use super::{GroupPlan, err};
use crate::config::{BatchSection, Config, Mode, Unavailable};
use crate::error::ConfigError;
use crate::lc::LcTarget;
use elfen_cgroup::Hierarchy;
use std::path::Path;

/// Why sched_ext cannot run elfen's scheduler here (the kernel's state in
/// `sysfs_dir`, laid out as `/sys/kernel/sched_ext`), or `None`.
pub(crate) fn unavailable_at(sysfs_dir: &Path) -> Option<String> {
    match elfen_scx::kernel::kernel_state_at(sysfs_dir) {
        Err(e) => Some(e.to_string()),
        Ok(st) => elfen_scx::kernel::check_idle(&st)
            .err()
            .map(|e| format!("{e}: never two schedulers fighting")),
    }
}

/// The batch section to plan: `b` itself, or — mode scx where sched_ext
/// is `unavailable` and `[scx] unavailable = "fallback"` — `b` in the
/// fallback mode (said in `notes`). Refused (the key named) otherwise.
pub(super) fn mode_here(
    i: usize,
    b: &BatchSection,
    config: &Config,
    unavailable: Option<String>,
    notes: &mut Vec<String>,
) -> Result<Option<BatchSection>, ConfigError> {
    let (Mode::Scx, Some(why)) = (b.mode, unavailable) else {
        return Ok(None);
    };
    let fallback = config.scx.fallback;
    match config.scx.unavailable {
        Unavailable::Refuse => Err(err(
            format!("batch[{i}].mode"),
            format!(
                "scx: {why}; set [scx] unavailable = \"fallback\" to run [scx] fallback \
                 ({fallback}) here instead"
            ),
        )),
        Unavailable::Fallback => {
            notes.push(format!(
                "batch {}: scx cannot run here ({why}): {fallback} runs instead ([scx] \
                 unavailable = \"fallback\", [scx] fallback = \"{fallback}\")",
                b.name
            ));
            Ok(Some(BatchSection {
                mode: fallback,
                ..b.clone()
            }))
        }
    }
}

/// The LC's processes running now, as far as the plan knows them: by pid
/// or by name (an LC named by its groups is in groups of its own).
fn lc_pids_now(lc: &LcTarget) -> Vec<u32> {
    match lc {
        LcTarget::Pid(p) => vec![*p],
        LcTarget::Comm(name) => crate::lc::find_by_name(name),
        LcTarget::Groups(_) => Vec::new(),
    }
}

/// A group in mode scx that holds LC processes is refused, naming them.
pub(super) fn check_group(
    i: usize,
    g: &GroupPlan,
    lc: &LcTarget,
    h: &Hierarchy,
) -> Result<(), ConfigError> {
    if g.mode != Mode::Scx {
        return Ok(());
    }
    let lc = lc_pids_now(lc);
    if lc.is_empty() {
        return Ok(());
    }
    let procs: Vec<u32> = g
        .controllers
        .iter()
        .filter_map(|&c| h.group_dir(c, &g.path).ok())
        .find_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default();
    refuse_lc_in_batch(i, &g.path.to_string(), &lc, &procs)
}

/// Refused when `procs` (the group at `path`) holds any of `lc`, naming them.
pub(crate) fn refuse_lc_in_batch(
    i: usize,
    path: &str,
    lc: &[u32],
    procs: &[u32],
) -> Result<(), ConfigError> {
    let both: Vec<String> = procs
        .iter()
        .filter(|p| lc.contains(p))
        .map(|p| format!("pid {p} ({})", comm(*p)))
        .collect();
    if both.is_empty() {
        return Ok(());
    }
    Err(err(
        format!("batch[{i}]"),
        format!(
            "its group {path} holds LC process(es) {}: mode scx would put them in the batch's \
             sched_ext class, behind every fair task; move them out of the group or choose \
             another batch group",
            both.join(", ")
        ),
    ))
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scx_batch() -> BatchSection {
        BatchSection {
            name: "jobs".into(),
            mode: Mode::Scx,
            cgroup: Some("batch".into()),
            ..BatchSection::default()
        }
    }

    #[test]
    fn a_kernel_without_sched_ext_is_named_and_the_fallback_key_too() {
        let dir = tempfile::tempdir().unwrap();
        let why = unavailable_at(&dir.path().join("sched_ext")).expect("no state file");
        assert!(why.contains("has no sched_ext"), "{why}");
        assert!(why.contains(&elfen_scx::kernel::kernel_release()), "{why}");
        let e = mode_here(
            0,
            &scx_batch(),
            &Config::default(),
            Some(why),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert_eq!(e.field, "batch[0].mode");
        assert!(e.reason.contains("[scx] unavailable = \"fallback\""), "{e}");
        assert!(e.reason.contains("(idle)"), "{e}");
    }

    #[test]
    fn another_loaded_scheduler_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("root")).unwrap();
        std::fs::write(dir.path().join("state"), "enabled\n").unwrap();
        std::fs::write(dir.path().join("root/ops"), "layered\n").unwrap();
        let why = unavailable_at(dir.path()).expect("loaded");
        assert!(why.contains("layered"), "{why}");
        let e = mode_here(
            1,
            &scx_batch(),
            &Config::default(),
            Some(why),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(e.reason.contains("layered"), "{e}");
        // nothing loaded: available
        std::fs::write(dir.path().join("state"), "disabled\n").unwrap();
        std::fs::remove_file(dir.path().join("root/ops")).unwrap();
        assert_eq!(unavailable_at(dir.path()), None);
    }

    #[test]
    fn the_fallback_is_applied_and_said_when_configured() {
        let mut c = Config::default();
        c.scx.unavailable = Unavailable::Fallback;
        c.scx.fallback = Mode::Guard;
        let mut notes = Vec::new();
        let b = mode_here(
            0,
            &scx_batch(),
            &c,
            Some("kernel x has no sched_ext".into()),
            &mut notes,
        )
        .unwrap()
        .expect("replaced");
        assert_eq!(b.mode, Mode::Guard);
        assert_eq!(b.cgroup.as_deref(), Some("batch"));
        assert!(notes[0].contains("guard runs instead"), "{notes:?}");
        // other modes, or sched_ext available: unchanged
        let idle = BatchSection {
            mode: Mode::Idle,
            ..scx_batch()
        };
        assert_eq!(
            mode_here(0, &idle, &c, Some("x".into()), &mut notes),
            Ok(None)
        );
        assert_eq!(mode_here(0, &scx_batch(), &c, None, &mut notes), Ok(None));
    }

    #[test]
    fn a_batch_group_holding_the_lc_is_refused_naming_it() {
        let me = std::process::id();
        let e = refuse_lc_in_batch(2, "batch/jobs", &[me, 1], &[7, me]).unwrap_err();
        assert_eq!(e.field, "batch[2]");
        assert!(e.reason.contains(&format!("pid {me} (")), "{e}");
        assert!(!e.reason.contains("pid 7"), "{e}");
        assert_eq!(refuse_lc_in_batch(2, "batch/jobs", &[1], &[7, me]), Ok(()));
    }
}
