//! Egress: batch traffic at low priority. One `elfen-bpf` egress program
//! (cgroup-skb, `src/bpf/egress.bpf.c` there) is attached to the cgroup2
//! directory of every batch group with `egress = "low"`; it sets each
//! packet's `skb->priority` (and the mark, if configured) before the
//! device's queueing discipline sees it.
//!
//! Why BPF rather than `net_prio`: the v1 `net_prio` controller (its
//! `net_prio.ifpriomap` does the same per interface) is often not mounted
//! (systemd hybrid and v2 machines have no v1 net controllers), and a
//! cgroup-skb program works on every cgroup2 tree — also the v2 tree of a
//! hybrid layout (`/sys/fs/cgroup/unified`), whose groups hold no
//! controller but do take BPF programs. The priority works with any qdisc
//! that honours it (`pfifo_fast`, `prio`, `mqprio`); the mark serves
//! `htb` / `hfsc` with an `fw` filter. A group's directory in the v2 tree
//! is the group itself on v2; on hybrid a command the daemon starts joins
//! one the daemon creates, and an operator's group gets one (created,
//! recorded, removed at exit) whose members follow the group's at every
//! rescan. The attachments are BPF links: a killed daemon leaves none.
//!
//! A socket keeps the cgroup of the process that created it: traffic of
//! sockets made before a process joined the group is not marked.

use super::plan::GroupIso;
use crate::error::DaemonError;
use elfen_bpf::egress::{EgressMarking, EgressProgram};
use elfen_cgroup::{Controller, Executor, Group};

/// A group whose traffic is marked.
#[derive(Debug)]
struct Marked {
    name: String,
    /// The batch group.
    group: Group,
    /// Its group in the v2 tree, where the program is attached (the same
    /// path; a group of its own on hybrid for an operator's group).
    unified: Group,
    mirror: bool,
}

/// The attached program.
#[derive(Debug)]
pub struct Egress {
    prog: EgressProgram,
    marked: Vec<Marked>,
}

impl Egress {
    /// Loads the program and attaches it to each group of `groups` (name,
    /// group, plan) that asks for it. `None` when none does.
    pub fn start(
        ex: &mut Executor,
        marking: (u32, u32),
        groups: &[(String, Group, GroupIso)],
    ) -> Result<Option<(Egress, Vec<String>)>, DaemonError> {
        if !groups.iter().any(|(_, _, i)| i.egress) {
            return Ok(None);
        }
        let bpf = |e: elfen_bpf::BpfError| DaemonError::thread("egress", e.to_string());
        let mut prog = EgressProgram::load(EgressMarking {
            priority: marking.0,
            mark: marking.1,
        })
        .map_err(bpf)?;
        let mut marked = Vec::new();
        let mut notes = Vec::new();
        for (name, group, iso) in groups.iter().filter(|(_, _, i)| i.egress) {
            let unified = if iso.egress_mirror {
                let path = group.path().as_str();
                let dir = ex
                    .hierarchy()
                    .group_dir(Controller::Unified, group.path())?;
                if dir.is_dir() {
                    ex.open_group(path, &[Controller::Unified])?
                } else {
                    ex.create_group(path, &[Controller::Unified])?
                }
            } else {
                group.clone()
            };
            let dir = ex
                .hierarchy()
                .group_dir(Controller::Unified, unified.path())?;
            prog.attach(&dir).map_err(bpf)?;
            let m = Marked {
                name: name.clone(),
                group: group.clone(),
                unified,
                mirror: iso.egress_mirror,
            };
            let moved = sync(ex, &m);
            notes.push(format!(
                "batch {name}: egress at priority {}{} (BPF on {}{})",
                marking.0,
                if marking.1 != 0 {
                    format!(", mark {}", marking.1)
                } else {
                    String::new()
                },
                dir.display(),
                if m.mirror {
                    format!(", {moved} processes joined it")
                } else {
                    String::new()
                }
            ));
            marked.push(m);
        }
        Ok(Some((Egress { prog, marked }, notes)))
    }

    /// At a rescan: members of an operator's group that are not yet in its
    /// v2 group join it. Returns what to say.
    pub fn tick(&self, ex: &Executor) -> Vec<String> {
        self.marked
            .iter()
            .filter(|m| m.mirror)
            .filter_map(|m| {
                let n = sync(ex, m);
                (n > 0).then(|| {
                    format!(
                        "batch {}: {n} new processes now send at low priority",
                        m.name
                    )
                })
            })
            .collect()
    }

    /// Packets marked so far.
    pub fn packets(&self) -> u64 {
        self.prog.packets()
    }

    /// Detaches the program (the executor removes the groups it created).
    pub fn stop(self) -> String {
        let n = self.prog.packets();
        drop(self.prog);
        format!(
            "egress: {n} packets of {} sent at low priority; program detached",
            self.marked
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Moves the group's processes that are not in its v2 group there;
/// returns how many moved.
fn sync(ex: &Executor, m: &Marked) -> usize {
    if !m.mirror {
        return 0;
    }
    let want = ex.procs(&m.group).unwrap_or_default();
    let have = ex.procs(&m.unified).unwrap_or_default();
    want.iter()
        .filter(|p| !have.contains(p))
        .filter(|&&p| ex.add_process(&m.unified, p).is_ok())
        .count()
}
