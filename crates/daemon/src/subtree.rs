//! **An LC service named the way the host names it** — a cgroup, a
//! systemd unit or slice, a container, a pod, a QoS class — kept watched as
//! the host changes: every group below the named one counts
//! ([`elfen_bpf::Source::watch_cgroup_path`] watches a subtree), and the
//! name is resolved again so that a restarted unit (a new directory at the
//! same path), a replaced container or a recreated pod (a new path) is
//! followed.
//!
//! Cheap checks run at every liveness tick: each watched root's directory
//! is looked at (`stat`); gone, it is unwatched; recreated (a new inode,
//! the kernel's new cgroup id), it is watched anew at once. The full
//! resolution ([`HostNames::resolve`]: a search of the tree, the engines'
//! files) runs at every rescan. A root in the v2 tree is watched by id in
//! the kernel (its processes are LC from their first switch); a root in a
//! v1 hierarchy is watched by the processes its subtree lists, read again
//! at each tick.

use elfen_bpf::Source;
use elfen_cgroup::{HostNames, Resolved, SelectError, Selector};
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A selector with the host it is resolved on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTarget {
    /// The name.
    pub selector: Selector,
    /// Where it is resolved.
    pub names: HostNames,
}

impl std::fmt::Display for GroupTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (and every group below)", self.selector)
    }
}

impl GroupTarget {
    /// The processes in the groups the name selects now, with every group
    /// below (none when it selects nothing).
    pub fn pids_now(&self) -> BTreeSet<u32> {
        let (mut pids, mut ids) = (BTreeSet::new(), BTreeSet::new());
        for r in self.names.resolve(&self.selector).unwrap_or_default() {
            subtree(&r.dir(), &mut pids, &mut ids);
        }
        pids
    }
}

/// One watched subtree root.
#[derive(Debug, Clone)]
struct Root {
    dir: PathBuf,
    /// Its inode (the v2 cgroup id) when watched.
    id: u64,
    v2: bool,
    /// Since when it is watched under this id.
    since: Instant,
}

/// The watched subtrees of a [`GroupTarget`].
#[derive(Debug)]
pub struct Subtrees {
    target: GroupTarget,
    roots: Vec<Root>,
    /// Ids of every group in the v2 subtrees (a slot's task is LC when its
    /// cgroup is one of them).
    ids: BTreeSet<u64>,
    /// Processes in the subtrees now.
    pids: BTreeSet<u32>,
    /// Roots whose directory went away (a unit stopped): looked at in
    /// every cheap look, watched again when they come back.
    absent: Vec<(PathBuf, bool)>,
    /// The last resolution's error, said once.
    last_error: Option<String>,
    /// When the name was last resolved.
    last_full: Instant,
}

/// What a look at the subtrees found to say.
#[derive(Debug, Default)]
pub struct Change {
    /// The watched roots changed (now these directories).
    pub moved: Option<Vec<String>>,
    /// A root was watched anew during this look (processes found now may
    /// have run unwatched since their start).
    pub rewatched: bool,
    /// Problems (not fatal).
    pub warnings: Vec<String>,
}

fn inode(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir).ok().map(|m| m.ino())
}

/// The processes and group ids of the subtree at `dir` (as deep as the BPF
/// program looks).
fn subtree(dir: &Path, pids: &mut BTreeSet<u32>, ids: &mut BTreeSet<u64>) {
    let mut stack = vec![(dir.to_path_buf(), 0u32)];
    while let Some((d, depth)) = stack.pop() {
        let Some(ino) = inode(&d) else { continue };
        ids.insert(ino);
        pids.extend(elfen_bpf::proc::cgroup_procs(&d));
        if depth + 1 >= elfen_bpf::contract::MAX_CGROUP_DEPTH {
            continue;
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }
}

impl Subtrees {
    /// Resolves `target` and watches what it names now.
    pub fn start(target: GroupTarget, src: &mut Source) -> (Subtrees, Change) {
        let mut s = Subtrees {
            target,
            roots: Vec::new(),
            ids: BTreeSet::new(),
            pids: BTreeSet::new(),
            absent: Vec::new(),
            last_error: None,
            last_full: Instant::now(),
        };
        let mut c = s.rescan(src);
        c.rewatched = false;
        (s, c)
    }

    /// Whether every root is in the v2 tree (the kernel follows their
    /// processes from their first switch).
    pub fn kernel_follows(&self) -> bool {
        !self.roots.is_empty() && self.roots.iter().all(|r| r.v2)
    }

    /// The processes in the subtrees at the last look.
    pub fn pids(&self) -> &BTreeSet<u32> {
        &self.pids
    }

    /// Whether the v2 cgroup `id` lies in a watched subtree (as of the last
    /// look).
    pub fn contains_cgroup(&self, id: u64) -> bool {
        id != 0 && self.ids.contains(&id)
    }

    /// The watched roots' directories.
    pub fn dirs(&self) -> Vec<String> {
        self.roots
            .iter()
            .map(|r| r.dir.display().to_string())
            .collect()
    }

    fn watch(&mut self, r: &Resolved, src: &mut Source, c: &mut Change) {
        let dir = r.dir();
        let id = if r.v2 {
            match src.watch_cgroup_path(&dir) {
                Ok(id) => id,
                Err(e) => {
                    c.warnings
                        .push(format!("watching the LC's cgroup {}: {e}", dir.display()));
                    return;
                }
            }
        } else {
            inode(&dir).unwrap_or(0)
        };
        c.rewatched = true;
        self.roots.push(Root {
            dir,
            id,
            v2: r.v2,
            since: Instant::now(),
        });
    }

    fn unwatch(&mut self, i: usize, src: &mut Source, c: &mut Change) {
        let r = self.roots.remove(i);
        if r.v2 {
            if let Err(e) = src.unwatch_cgroup(&r.dir, r.id) {
                c.warnings.push(format!(
                    "unwatching the LC's cgroup {}: {e}",
                    r.dir.display()
                ));
            }
        }
    }

    /// The cheap look (every liveness tick): each root's directory is
    /// still there under the same id, or is watched anew, or dropped; then
    /// the subtrees' processes are read.
    pub fn check(&mut self, src: &mut Source) -> Change {
        let mut c = Change::default();
        let mut i = 0;
        let before = self.dirs();
        while i < self.roots.len() {
            let (dir, id, v2) = (
                self.roots[i].dir.clone(),
                self.roots[i].id,
                self.roots[i].v2,
            );
            match inode(&dir) {
                Some(now) if now == id || !v2 => i += 1,
                Some(_) => {
                    // recreated (a unit restarted): the kernel's new id
                    self.unwatch(i, src, &mut c);
                    let r = Resolved {
                        tree: dir.clone(),
                        path: elfen_cgroup::GroupPath::root(),
                        v2,
                        found_by: String::new(),
                    };
                    self.watch(&r, src, &mut c);
                }
                None => {
                    self.absent.push((dir, v2));
                    self.unwatch(i, src, &mut c);
                }
            }
        }
        // a stopped unit's group created again (its restart)
        for (dir, v2) in std::mem::take(&mut self.absent) {
            if inode(&dir).is_some() {
                let r = Resolved {
                    tree: dir.clone(),
                    path: elfen_cgroup::GroupPath::root(),
                    v2,
                    found_by: String::new(),
                };
                self.watch(&r, src, &mut c);
            } else {
                self.absent.push((dir, v2));
            }
        }
        self.read(src, &mut c);
        if self.dirs() != before && !self.roots.is_empty() {
            c.moved = Some(self.dirs());
        }
        c
    }

    /// The full look (every rescan): the name resolved again, new groups
    /// watched, groups it no longer names unwatched.
    pub fn rescan(&mut self, src: &mut Source) -> Change {
        let mut c = Change::default();
        let before = self.dirs();
        self.last_full = Instant::now();
        let found = match self.target.names.resolve(&self.target.selector) {
            Ok(v) => {
                self.last_error = None;
                v
            }
            Err(e) => {
                let msg = e.to_string();
                if self.last_error.as_deref() != Some(msg.as_str())
                    && !matches!(
                        e,
                        SelectError::NotRunning { .. } | SelectError::NotFound { .. }
                    )
                {
                    c.warnings.push(msg.clone());
                }
                self.last_error = Some(msg);
                Vec::new()
            }
        };
        let want: Vec<PathBuf> = found.iter().map(Resolved::dir).collect();
        let mut i = 0;
        while i < self.roots.len() {
            let r = &self.roots[i];
            let same = want.contains(&r.dir) && (!r.v2 || inode(&r.dir) == Some(r.id));
            if same {
                i += 1;
            } else {
                self.unwatch(i, src, &mut c);
            }
        }
        for r in &found {
            if !self.roots.iter().any(|x| x.dir == r.dir()) {
                self.watch(r, src, &mut c);
            }
        }
        if !found.is_empty() {
            self.absent.clear();
        }
        self.read(src, &mut c);
        if self.dirs() != before && !self.roots.is_empty() {
            c.moved = Some(self.dirs());
        }
        c
    }

    /// Reads the subtrees' processes and group ids; processes of v1 roots
    /// are watched by tgid (the kernel cannot follow them by group).
    fn read(&mut self, src: &mut Source, c: &mut Change) {
        let (mut pids, mut ids) = (BTreeSet::new(), BTreeSet::new());
        let mut v1_pids = BTreeSet::new();
        for r in &self.roots {
            if r.v2 {
                subtree(&r.dir, &mut pids, &mut ids);
            } else {
                let mut unused = BTreeSet::new();
                subtree(&r.dir, &mut v1_pids, &mut unused);
            }
        }
        for &p in &v1_pids {
            if self.pids.contains(&p) {
                continue;
            }
            match src.watch_tgid(p) {
                Ok(()) => {}
                Err(elfen_bpf::BpfError::NoSuchProcess { .. })
                | Err(elfen_bpf::BpfError::NotAProcess { .. }) => continue,
                Err(e) => c.warnings.push(format!("watching pid {p}: {e}")),
            }
        }
        for &p in self.pids.difference(&v1_pids) {
            if !pids.contains(&p) {
                let _ = src.unwatch_tgid(p);
            }
        }
        pids.extend(v1_pids);
        self.pids = pids;
        self.ids = ids;
    }

    /// When the name was last resolved ([`Subtrees::rescan`]).
    pub fn last_full(&self) -> Instant {
        self.last_full
    }

    /// When a root was last watched anew (for "unprotected for X ms").
    pub fn latest_watch(&self) -> Option<Instant> {
        self.roots.iter().map(|r| r.since).max()
    }
}
