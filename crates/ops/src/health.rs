//! What `elfen daemon` says of its own health, for `elfen status`: the
//! state of each batch group it drives (ok, degraded, lost) and every
//! failed knob write, counted per group and knob.
//!
//! The page carries the LC and batch lines only, so the daemon publishes
//! this record beside its page: `<page>.health.json` ([`health_path`]),
//! written atomically (a fresh temporary file renamed over it) whenever it
//! changes, removed at a clean stop. [`DaemonHealth::read`] trusts the
//! file only if it is a plain file of root or of the page's owner and
//! names the page's creator as its writer; anything else is reported
//! (never silently shown as the daemon's).
//!
//! The same counts are the daemon's metrics `elfen_knob_failures_total`,
//! `elfen_batch_group_lost` and `elfen_batch_group_degraded`.

use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The record's format (`schema`).
pub const HEALTH_SCHEMA: &str = "elfen-daemon-health/3";

/// A knob the daemon writes while it runs, whose failures it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DaemonKnob {
    /// A freeze request (freeze mode, blind isolation at zero CPUs).
    Freeze,
    /// A thaw.
    Thaw,
    /// A cpuset write (blind isolation).
    Cpuset,
    /// The group's `cpu.idle`.
    CpuIdle,
    /// SCHED_IDLE on a thread of the group.
    SchedIdle,
    /// A process moved into the group.
    Move,
}

impl DaemonKnob {
    /// Every knob, in label order.
    pub const ALL: [DaemonKnob; 6] = [
        DaemonKnob::Freeze,
        DaemonKnob::Thaw,
        DaemonKnob::Cpuset,
        DaemonKnob::CpuIdle,
        DaemonKnob::SchedIdle,
        DaemonKnob::Move,
    ];

    /// Its name in metrics labels and the record.
    pub fn name(self) -> &'static str {
        match self {
            DaemonKnob::Freeze => "freeze",
            DaemonKnob::Thaw => "thaw",
            DaemonKnob::Cpuset => "cpuset",
            DaemonKnob::CpuIdle => "cpu_idle",
            DaemonKnob::SchedIdle => "sched_idle",
            DaemonKnob::Move => "move",
        }
    }
}

/// How a batch group fares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GroupState {
    /// Every knob write succeeds.
    #[default]
    Ok,
    /// A knob write fails; the group is protected less (the reason says
    /// how, and what the daemon does instead).
    Degraded,
    /// Its cgroup is gone (removed under the daemon): its processes are no
    /// longer contained.
    Lost,
    /// A unit, container or pod it follows runs nothing now (its cgroup is
    /// gone with it); its knobs are applied again when it is back.
    Waiting,
}

impl GroupState {
    /// One word for tables.
    pub fn word(self) -> &'static str {
        match self {
            GroupState::Ok => "ok",
            GroupState::Degraded => "DEGRADED",
            GroupState::Lost => "LOST",
            GroupState::Waiting => "waiting",
        }
    }
}

/// Failures of one knob of one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnobFailures {
    /// The knob.
    pub knob: DaemonKnob,
    /// Writes that failed (after their retries).
    pub count: u64,
    /// The last error.
    pub last_error: String,
}

/// How a batch group is protected now: the mode applied (a fallback's, or
/// the one `auto` chose), its switches, whether its mode fits the service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtectionState {
    /// The mode applied now.
    pub active: String,
    /// Switches so far.
    pub switches: u64,
    /// The last switch, with its reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_switch: Option<String>,
    /// The verdict on whether a mode can follow the LC service: the mode,
    /// `fits`, `UNFIT` or `unknown`, and the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<String>,
    /// `auto`: the last contention measured (co-run / solo − 1), %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention_pct: Option<f64>,
    /// The guards' hold through idle gaps, µs (guard mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_us: Option<f64>,
    /// The sched_ext scheduler (mode scx): running or why the kernel
    /// unloaded it, and its counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<String>,
}

/// One batch group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupHealth {
    /// Its name in the configuration.
    pub name: String,
    /// Its mode.
    pub mode: String,
    /// Its cgroup path.
    pub path: String,
    /// Ok, degraded or lost.
    pub state: GroupState,
    /// Why it is not ok, and what the daemon does about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Knobs whose writes failed.
    #[serde(default)]
    pub failures: Vec<KnobFailures>,
    /// How it is protected now (absent from a daemon that did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<ProtectionState>,
    /// How the host names it (`slice batch.slice (found by …)`), when it
    /// was named so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named: Option<String>,
    /// Who manages it (`systemd (batch.slice)`, `the kubelet`), when not
    /// the operator or the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// What the daemon runs, for `elfen status`: the LC and where it is
/// watched, the host's situation, where its groups live, the policy and
/// the signal source.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonAbout {
    /// The LC service as configured (`unit redis.service (and every group below)`).
    pub lc: String,
    /// The groups it is watched in now (an LC the host names).
    #[serde(default)]
    pub lc_groups: Vec<String>,
    /// The host: layout, systemd, whether the daemon's group is delegated.
    pub host: String,
    /// Where the groups of the commands it starts live.
    pub placement: String,
    /// The policy of every lane.
    pub policy: String,
    /// The LC signal source (BPF, or the poll fallback and why).
    pub source: String,
}

/// The daemon's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonHealth {
    /// [`HEALTH_SCHEMA`].
    pub schema: String,
    /// The daemon's pid (the page's creator).
    pub pid: u32,
    /// Same-named processes of another user not adopted as the LC.
    #[serde(default)]
    pub lc_ignored: u64,
    /// Why it protects nothing now: the LC service used CPU while batch
    /// work ran, and no LC busy period was seen on its request lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lc_unseen: Option<String>,
    /// Its batch groups.
    pub groups: Vec<GroupHealth>,
    /// What it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<DaemonAbout>,
}

/// Where the daemon owning the page at `page` publishes its health.
pub fn health_path(page: &Path) -> PathBuf {
    let mut p = page.as_os_str().to_owned();
    p.push(".health.json");
    PathBuf::from(p)
}

impl DaemonHealth {
    /// The record beside the page at `page`, created by `creator_pid`:
    /// `Ok(None)` when there is none (not a daemon's page, or a daemon
    /// that has not written it); `Err` naming why a file there is not
    /// trusted (a link, not root's or the page owner's, another writer, not
    /// a record).
    pub fn read(page: &Path, creator_pid: u32) -> Result<Option<DaemonHealth>, String> {
        let path = health_path(page);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        if !meta.file_type().is_file() {
            return Err(format!("{} is not a plain file: ignored", path.display()));
        }
        let page_owner = std::fs::metadata(page).map(|m| m.uid()).ok();
        if meta.uid() != 0 && Some(meta.uid()) != page_owner {
            return Err(format!(
                "{} belongs to {}, not root or the page's owner: ignored",
                path.display(),
                elfen_cmd::proc::describe_user(meta.uid())
            ));
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let h: DaemonHealth = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a daemon health record: {e}", path.display()))?;
        if h.schema != HEALTH_SCHEMA {
            return Err(format!(
                "{}: schema {:?} (this build reads {HEALTH_SCHEMA})",
                path.display(),
                h.schema
            ));
        }
        if h.pid != creator_pid {
            return Err(format!(
                "{} was written by pid {}, not the page's creator (pid {creator_pid}): ignored",
                path.display(),
                h.pid
            ));
        }
        Ok(Some(h))
    }

    /// Writes the record for the page at `page` (atomically, readable by
    /// everyone: `elfen status` runs as any user).
    pub fn write(&self, page: &Path) -> std::io::Result<()> {
        let mut json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        json.push(b'\n');
        elfen_cmd::files::write_atomic(&health_path(page), &json, 0o644)
    }

    /// Whether a group is lost or degraded, or the LC goes unseen.
    pub fn troubled(&self) -> bool {
        self.lc_unseen.is_some()
            || self
                .groups
                .iter()
                .any(|g| matches!(g.state, GroupState::Lost | GroupState::Degraded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: u32) -> DaemonHealth {
        DaemonHealth {
            schema: HEALTH_SCHEMA.into(),
            pid,
            lc_ignored: 1,
            lc_unseen: Some("the LC service used 400 ms of CPU …".into()),
            groups: vec![GroupHealth {
                name: "frz".into(),
                mode: "freeze".into(),
                path: "batch/nightly".into(),
                state: GroupState::Lost,
                reason: Some("removed".into()),
                failures: vec![KnobFailures {
                    knob: DaemonKnob::Freeze,
                    count: 3,
                    last_error: "ENOENT".into(),
                }],
                protection: Some(ProtectionState {
                    active: "idle".into(),
                    switches: 1,
                    last_switch: Some("freeze → idle: …".into()),
                    fit: Some("freeze UNFIT: cannot follow …".into()),
                    contention_pct: None,
                    hold_us: None,
                    scheduler: None,
                }),
                named: Some("slice batch.slice".into()),
                owner: Some("systemd (batch.slice)".into()),
            }],
            about: Some(DaemonAbout {
                lc: "unit redis.service".into(),
                lc_groups: vec!["/sys/fs/cgroup/system.slice/redis.service".into()],
                host: "cgroup v2 under systemd".into(),
                placement: "commands' groups: …".into(),
                policy: "borrow_idle".into(),
                source: "bpf".into(),
            }),
        }
    }

    #[test]
    fn written_and_read_beside_the_page() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("elfen");
        std::fs::write(&page, "").unwrap();
        assert_eq!(DaemonHealth::read(&page, 42), Ok(None));
        let h = record(42);
        h.write(&page).unwrap();
        assert_eq!(health_path(&page), dir.path().join("elfen.health.json"));
        assert_eq!(DaemonHealth::read(&page, 42), Ok(Some(h.clone())));
        assert!(h.troubled());
        // another writer than the page's creator: not shown as its health
        let e = DaemonHealth::read(&page, 43).unwrap_err();
        assert!(e.contains("not the page's creator"), "{e}");
        // garbage
        std::fs::write(health_path(&page), "{").unwrap();
        assert!(
            DaemonHealth::read(&page, 42)
                .unwrap_err()
                .contains("not a daemon health record")
        );
        // a link is not followed
        std::fs::remove_file(health_path(&page)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", health_path(&page)).unwrap();
        assert!(
            DaemonHealth::read(&page, 42)
                .unwrap_err()
                .contains("not a plain file")
        );
        std::fs::remove_file(health_path(&page)).unwrap();
        if elfen_cmd::proc::is_root() {
            h.write(&page).unwrap();
            std::os::unix::fs::chown(health_path(&page), Some(65534), None).unwrap();
            let e = DaemonHealth::read(&page, 42).unwrap_err();
            assert!(e.contains("uid 65534"), "{e}");
        } else {
            elfen_cmd::skip::skip(
                elfen_cmd::skip::Need::Root,
                "another user's health file not tried",
            );
        }
    }

    #[test]
    fn knob_names_are_the_serde_names() {
        for k in DaemonKnob::ALL {
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.name())
            );
        }
    }
}
