//! **LC discovery**: which processes are the LC service now — by pid, by
//! cgroup or by command name — kept watched by the signal source as the
//! service exits and starts again.
//!
//! - [`LcTarget::Pid`]: that process; when it exits, a process with its
//!   command name is looked for (a restart by a service manager).
//! - [`LcTarget::Groups`]: a name the host gives a group — a cgroup
//!   directory, a systemd unit or slice, a container, a pod, a QoS class —
//!   and every group below it ([`crate::subtree`]): a group of the v2 tree
//!   is watched by id in the kernel (every process in the subtree, from its
//!   first context switch, restarts included); a v1 group by the
//!   `cgroup.procs` of its subtree, re-read. The name is resolved again as
//!   the host changes (a unit restarted, a container replaced).
//! - [`LcTarget::Comm`]: every process whose `comm` or `argv[0]` base name
//!   matches.
//!
//! **Whose processes.** Anyone can start a process with the LC's name, so a
//! name (a comm target, or a pid target's name after a restart) adopts
//! only processes of one user ([`LcOwner`]): the configured `[lc] user`,
//! or else the user of the pid target, or of the first process found (the
//! oldest one running when first looked for). A process counts as that
//! user's when its real and effective uid both are. A same-named process
//! of another user is ignored and said so once ([`Notice::Ignored`]).
//!
//! [`Discovery::tick`] runs on the writer thread between signal events:
//! a liveness check of the watched processes every `liveness`, a new look
//! every `rescan` (every `lost_rescan` while none is found). A look at
//! `/proc` reads the `comm` / `cmdline` only of processes not seen before.

use crate::subtree::{Change, GroupTarget, Subtrees};
use elfen_bpf::Source;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The LC service to protect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LcTarget {
    /// A process id (then its command name after a restart).
    Pid(u32),
    /// The groups a name of the host selects, each with every group below.
    Groups(GroupTarget),
    /// A command name (`comm` or the base name of `argv[0]`).
    Comm(String),
}

impl LcTarget {
    /// The LC as the processes of the cgroup directory `dir` (of any
    /// hierarchy under the default root) and of every group below it.
    pub fn cgroup_dir(dir: std::path::PathBuf) -> Result<LcTarget, elfen_cgroup::CgroupError> {
        let h = elfen_cgroup::Hierarchy::detect(elfen_cgroup::default_root())?;
        Ok(LcTarget::Groups(GroupTarget {
            selector: elfen_cgroup::Selector::Dir(dir),
            names: elfen_cgroup::HostNames::new(&h, elfen_cgroup::HostFiles::default())
                .with_systemctl(false),
        }))
    }

    /// The cgroup directory it names, when it names one by its directory.
    pub fn dir(&self) -> Option<&std::path::Path> {
        match self {
            LcTarget::Groups(GroupTarget {
                selector: elfen_cgroup::Selector::Dir(d),
                ..
            }) => Some(d),
            _ => None,
        }
    }
}

impl std::fmt::Display for LcTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LcTarget::Pid(p) => write!(f, "pid {p}"),
            LcTarget::Groups(g) => write!(f, "{g}"),
            LcTarget::Comm(c) => write!(f, "command {c:?}"),
        }
    }
}

/// Whose processes a name adopts (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LcOwner {
    /// Processes of this uid (`[lc] user`, or decided before the start).
    Uid(u32),
    /// The user of the pid target, or of the first process found.
    #[default]
    FirstFound,
}

/// Whether a process with real and effective uid `uids` is `owner`'s.
pub fn owned_by(uids: (u32, u32), owner: u32) -> bool {
    uids.0 == owner && uids.1 == owner
}

/// The owner a first look decides on: the uid of the oldest process (by
/// start time) whose real and effective uid agree. `candidates` are
/// (start ticks, (real uid, effective uid)).
pub fn first_owner(candidates: &[(u64, (u32, u32))]) -> Option<u32> {
    candidates
        .iter()
        .filter(|(_, (r, e))| r == e)
        .min_by_key(|(start, _)| *start)
        .map(|(_, (r, _))| *r)
}

/// The owner of the oldest of `pids` (see [`first_owner`]), with its pid.
pub fn oldest_owner(pids: &[u32]) -> Option<(u32, u32)> {
    let c: Vec<(u64, (u32, u32), u32)> = pids
        .iter()
        .filter_map(|&p| {
            Some((
                elfen_cmd::proc::start_ticks(p)?,
                elfen_cmd::proc::uids(p)?,
                p,
            ))
        })
        .collect();
    let uid = first_owner(&c.iter().map(|&(s, u, _)| (s, u)).collect::<Vec<_>>())?;
    c.iter()
        .filter(|(_, u, _)| owned_by(*u, uid))
        .min_by_key(|(s, _, _)| *s)
        .map(|&(_, _, p)| (uid, p))
}

/// How often discovery looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryOptions {
    /// Liveness check of the watched processes.
    pub liveness: Duration,
    /// A new look for processes (new ones of a comm or a v1 cgroup).
    pub rescan: Duration,
    /// A new look while no LC process is found.
    pub lost_rescan: Duration,
    /// Whose processes a name adopts.
    pub owner: LcOwner,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        DiscoveryOptions {
            liveness: Duration::from_millis(100),
            rescan: Duration::from_secs(1),
            lost_rescan: Duration::from_millis(10),
            owner: LcOwner::FirstFound,
        }
    }
}

/// What discovery tells the operator.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// LC processes found (the first time).
    Found {
        /// Their pids.
        pids: Vec<u32>,
    },
    /// No LC process runs now (it is looked for every `lost_rescan`).
    Waiting {
        /// What is looked for.
        target: String,
    },
    /// The watched LC processes are gone.
    Lost {
        /// The pids that exited.
        pids: Vec<u32>,
    },
    /// The LC service runs again under new pids.
    Restarted {
        /// The pids that exited.
        from: Vec<u32>,
        /// The new pids.
        to: Vec<u32>,
        /// From the new process's start (`/proc` start time, clock-tick
        /// resolution) until it was watched, ms; `None` when the kernel
        /// watched it from its first switch (a v2 cgroup).
        unprotected_ms: Option<f64>,
        /// From noticing the old processes gone until the new one was
        /// found, ms.
        absent_ms: f64,
    },
    /// The user whose processes a name adopts was decided at the first
    /// find (no `[lc] user`).
    Owner {
        /// The uid.
        uid: u32,
        /// The process it was taken from.
        pid: u32,
    },
    /// A process named like the LC service but of another user: not
    /// adopted (said once per process).
    Ignored {
        /// Its pid.
        pid: u32,
        /// Its real uid.
        uid: u32,
        /// The uid whose processes are adopted.
        owner: u32,
    },
    /// The groups the LC's name selects changed (a unit restarted, a
    /// container replaced, a pod added): now these directories.
    Moved {
        /// The watched groups.
        groups: Vec<String>,
    },
    /// A problem that does not stop the daemon.
    Warning(String),
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        match self {
            Notice::Found { pids } => write!(f, "LC service found: pid {}", list(pids)),
            Notice::Waiting { target } => {
                write!(f, "LC service ({target}) is not running; waiting for it")
            }
            Notice::Lost { pids } => write!(f, "LC service exited (pid {})", list(pids)),
            Notice::Owner { uid, pid } => write!(
                f,
                "LC processes are adopted only of {}, the owner of the first found (pid {pid}); \
                 set [lc] user to choose",
                elfen_cmd::proc::describe_user(*uid)
            ),
            Notice::Ignored { pid, uid, owner } => write!(
                f,
                "process {pid} ({}) is named like the LC service but runs as {}, not {}: \
                 ignored",
                elfen_cmd::proc::comm(*pid).unwrap_or_else(|| "?".into()),
                elfen_cmd::proc::describe_user(*uid),
                elfen_cmd::proc::describe_user(*owner)
            ),
            Notice::Restarted {
                from,
                to,
                unprotected_ms,
                absent_ms,
            } => {
                write!(
                    f,
                    "LC service restarted (pid {} → {}), ",
                    list(from),
                    list(to)
                )?;
                match unprotected_ms {
                    Some(ms) => write!(f, "unprotected for {ms:.0} ms")?,
                    None => write!(f, "unprotected for 0 ms (watched by cgroup in the kernel)")?,
                }
                write!(f, "; no LC process for {absent_ms:.0} ms")
            }
            Notice::Moved { groups } => write!(
                f,
                "LC service's groups now: {} (and every group below)",
                groups.join(", ")
            ),
            Notice::Warning(w) => write!(f, "warning: {w}"),
        }
    }
}

/// `/proc/<pid>/comm`, trimmed.
pub fn comm_of(pid: u32) -> Option<String> {
    elfen_cmd::proc::comm(pid)
}

/// The base name of `argv[0]` of `pid` (empty for kernel threads).
fn argv0_of(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let first = raw.split(|&b| b == 0).next()?;
    let s = String::from_utf8_lossy(first);
    let base = s.rsplit('/').next()?.to_string();
    (!base.is_empty()).then_some(base)
}

/// Whether process `pid` goes by `name` (`comm`, which the kernel cuts at
/// 15 bytes, or the base name of `argv[0]`).
pub fn matches_name(pid: u32, name: &str) -> bool {
    let Some(comm) = comm_of(pid) else {
        return false;
    };
    let short: String = name.chars().take(15).collect();
    if comm == name || (name.len() > 15 && comm == short) {
        return name.len() <= 15 || argv0_of(pid).is_some_and(|a| a == name);
    }
    argv0_of(pid).is_some_and(|a| a == name)
}

/// Process ids in `/proc`, sorted.
fn proc_pids() -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Every process (other than this one) going by `name`.
pub fn find_by_name(name: &str) -> Vec<u32> {
    let me = std::process::id();
    proc_pids()
        .into_iter()
        .filter(|&p| p != me && matches_name(p, name))
        .collect()
}

/// Milliseconds since process `pid` started (`/proc/<pid>/stat` field 22,
/// clock ticks since boot, against `CLOCK_BOOTTIME`).
fn age_ms(pid: u32) -> Option<f64> {
    let start = elfen_cmd::proc::start_ticks(pid)?;
    let start_ms = start as f64 * 1000.0 / elfen_cmd::proc::ticks_per_s();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let now_ms = ts.tv_sec as f64 * 1000.0 + ts.tv_nsec as f64 / 1e6;
    Some((now_ms - start_ms).max(0.0))
}

/// The LC processes, tracked for one [`Source`].
#[derive(Debug)]
pub struct Discovery {
    target: LcTarget,
    opts: DiscoveryOptions,
    /// The name to look for (comm targets; a pid target's after it exits).
    name: Option<String>,
    /// A group target's subtrees (their processes are `watched`).
    groups: Option<Subtrees>,
    /// Processes watched through the source (or, by cgroup id, seen in it).
    watched: BTreeSet<u32>,
    /// Processes seen and found not to match (comm targets), by pid, with
    /// when: while no LC process is found, re-read after `4 × lost_rescan`
    /// (a process may exec and so
    /// change its name after it was first seen).
    not_lc: BTreeMap<u32, Instant>,
    /// The uid whose processes a name adopts (`None`: decided at the
    /// first find).
    owner: Option<u32>,
    /// Same-named processes of another user already reported.
    ignored: BTreeSet<u32>,
    /// Since when no LC process runs, and which exited.
    lost: Option<(Instant, Vec<u32>)>,
    found_once: bool,
    next_liveness: Instant,
    next_rescan: Instant,
}

impl Discovery {
    /// Starts watching `target` through `src`: the processes found now,
    /// or a cgroup by id. Returns the notices to report.
    pub fn start(
        target: LcTarget,
        opts: DiscoveryOptions,
        src: &mut Source,
    ) -> Result<(Discovery, Vec<Notice>), crate::DaemonError> {
        let now = Instant::now();
        let mut d = Discovery {
            name: match &target {
                LcTarget::Comm(c) => Some(c.clone()),
                LcTarget::Pid(p) => comm_of(*p),
                LcTarget::Groups(_) => None,
            },
            groups: None,
            owner: match (opts.owner, &target) {
                (LcOwner::Uid(u), _) => Some(u),
                (LcOwner::FirstFound, LcTarget::Pid(p)) => {
                    elfen_cmd::proc::uids(*p).map(|(real, _)| real)
                }
                _ => None,
            },
            ignored: BTreeSet::new(),
            target,
            opts,
            watched: BTreeSet::new(),
            not_lc: BTreeMap::new(),
            lost: None,
            found_once: false,
            next_liveness: now + opts.liveness,
            next_rescan: now + opts.rescan,
        };
        let mut notes = Vec::new();
        match d.target.clone() {
            LcTarget::Pid(p) => {
                src.watch_tgid(p)?;
                d.watched.insert(p);
            }
            LcTarget::Groups(t) => {
                let (g, c) = Subtrees::start(t, src);
                notes.extend(c.warnings.into_iter().map(Notice::Warning));
                if !g.dirs().is_empty() {
                    notes.push(Notice::Moved { groups: g.dirs() });
                }
                d.watched = g.pids().clone();
                d.groups = Some(g);
            }
            LcTarget::Comm(_) => {
                d.rescan(src, &mut notes);
            }
        }
        if d.watched.is_empty() {
            d.lost = Some((now, Vec::new()));
            d.next_liveness = now + opts.lost_rescan;
            notes.push(Notice::Waiting {
                target: d.target.to_string(),
            });
        } else {
            d.found_once = true;
            notes.push(Notice::Found { pids: d.pids() });
        }
        Ok((d, notes))
    }

    /// The LC processes watched now.
    pub fn pids(&self) -> Vec<u32> {
        self.watched.iter().copied().collect()
    }

    /// Whether the task a slot shows running is LC. The slot's own LC flag
    /// is decided at each context switch; a process watched while it runs
    /// is flagged only from its next switch, so the writer also asks this.
    pub fn runs_lc(&self, s: &elfen_bpf::SlotSnapshot) -> bool {
        s.valid()
            && s.tid != 0
            && (self.watched.contains(&s.tgid)
                || self
                    .groups
                    .as_ref()
                    .is_some_and(|g| g.contains_cgroup(s.cgroup_id)))
    }

    /// Whether a thread of a watched LC process is running or runnable on
    /// `cpu` (read from /proc: for checking a slot that may be stale, not
    /// for every event).
    pub fn runnable_on(&self, cpu: u32) -> bool {
        let mut threads = Vec::new();
        self.watched.iter().any(|&p| {
            threads.clear();
            elfen_bpf::proc::running_threads(p, &mut threads);
            threads.iter().any(|&(_, c)| c == cpu)
        })
    }

    /// Whether no LC process is known to run.
    pub fn is_lost(&self) -> bool {
        self.lost.is_some()
    }

    /// How long until [`Discovery::tick`] has something to do.
    pub fn until_next(&self, now: Instant) -> Duration {
        self.next_liveness
            .min(self.next_rescan)
            .saturating_duration_since(now)
    }

    /// Does what is due at `now`: a liveness check every `liveness`; a look
    /// for processes every `rescan`, and every `lost_rescan` while none is
    /// found. Pushes what to report into `out`.
    pub fn tick(&mut self, src: &mut Source, now: Instant, out: &mut Vec<Notice>) {
        let rescan_due = now >= self.next_rescan;
        let look_due = now >= self.next_liveness;
        if !rescan_due && !look_due {
            return;
        }
        if self.groups.is_some() {
            if rescan_due {
                self.next_rescan = now + self.opts.rescan;
            }
            self.groups_tick(src, now, rescan_due, out);
            return;
        }
        if look_due {
            self.check_alive(src, now, out);
        }
        if rescan_due {
            self.next_rescan = now + self.opts.rescan;
        }
        // A pid target is that process: others with its name are looked
        // for only once it is gone (a restart).
        let looks_for_more = !matches!(self.target, LcTarget::Pid(_));
        if (rescan_due && looks_for_more) || self.lost.is_some() {
            let before = self.watched.len();
            self.rescan(src, out);
            if self.watched.len() > before {
                self.on_found(now, out);
            }
        }
        self.next_liveness = now
            + if self.lost.is_some() {
                self.opts.lost_rescan
            } else {
                self.opts.liveness
            };
    }

    /// A group target's look: the cheap one every liveness tick (every
    /// `lost_rescan` while none runs), the full resolution when `full`
    /// (every rescan); then its processes compared with the last look's.
    fn groups_tick(&mut self, src: &mut Source, now: Instant, full: bool, out: &mut Vec<Notice>) {
        let Some(g) = self.groups.as_mut() else {
            return;
        };
        let mut c: Change = g.check(src);
        // while nothing runs, the name is resolved again often, but not at
        // every lost_rescan (a resolution may search the whole tree)
        let lost_period = self.opts.lost_rescan.max(Duration::from_millis(100));
        let lost_due =
            g.pids().is_empty() && now.saturating_duration_since(g.last_full()) >= lost_period;
        if full || lost_due {
            let r = g.rescan(src);
            c.rewatched |= r.rewatched;
            c.moved = r.moved.or(c.moved);
            c.warnings.extend(r.warnings);
        }
        out.extend(c.warnings.into_iter().map(Notice::Warning));
        if let Some(groups) = c.moved {
            out.push(Notice::Moved { groups });
        }
        let pids = g.pids().clone();
        // From a new process's start until its group was watched: 0 when
        // the kernel watched the group before the process started (ages
        // are read in clock ticks: within one tick counts as before).
        let unprotected_ms = if g.kernel_follows() {
            let watched_ms = g.latest_watch().map_or(0.0, |t| {
                now.saturating_duration_since(t).as_secs_f64() * 1000.0
            });
            let tick_ms = 1000.0 / elfen_cmd::proc::ticks_per_s();
            pids.iter()
                .filter_map(|&p| age_ms(p))
                .map(|a| a - watched_ms)
                .reduce(f64::max)
                .filter(|&late| late > tick_ms)
        } else {
            pids.iter().filter_map(|&p| age_ms(p)).reduce(f64::max)
        };
        let appeared = !pids.is_empty() && self.watched.is_empty();
        if pids.is_empty() && !self.watched.is_empty() {
            let gone: Vec<u32> = self.watched.iter().copied().collect();
            out.push(Notice::Lost { pids: gone.clone() });
            self.lost = Some((now, gone));
        }
        self.watched = pids;
        if appeared {
            self.on_found_with(now, out, unprotected_ms);
        }
        self.next_liveness = now
            + if self.watched.is_empty() {
                self.opts.lost_rescan
            } else {
                self.opts.liveness
            };
    }

    /// Drops watched processes that exited.
    fn check_alive(&mut self, src: &mut Source, now: Instant, out: &mut Vec<Notice>) {
        let dead: Vec<u32> = self
            .watched
            .iter()
            .copied()
            .filter(|&p| !elfen_shm::pid_alive(p))
            .collect();
        if dead.is_empty() {
            return;
        }
        for p in &dead {
            self.watched.remove(p);
            if let Err(e) = src.unwatch_tgid(*p) {
                out.push(Notice::Warning(format!("unwatching pid {p}: {e}")));
            }
        }
        if self.watched.is_empty() {
            out.push(Notice::Lost { pids: dead.clone() });
            self.lost = Some((now, dead));
        }
    }

    /// Looks for LC processes not yet watched.
    fn rescan(&mut self, src: &mut Source, out: &mut Vec<Notice>) {
        let candidates: Vec<u32> = match &self.target {
            LcTarget::Groups(_) => return, // groups_tick
            LcTarget::Pid(_) | LcTarget::Comm(_) => {
                let Some(name) = self.name.clone() else {
                    return;
                };
                let me = std::process::id();
                let now = Instant::now();
                // While none is found, a process seen under another name is
                // read again after a while (it may exec into the service);
                // otherwise only new processes are read.
                let ttl = if self.lost.is_some() {
                    (self.opts.lost_rescan * 4).max(Duration::from_millis(20))
                } else {
                    Duration::MAX
                };
                let pids = proc_pids();
                self.not_lc.retain(|p, _| pids.binary_search(p).is_ok());
                self.ignored.retain(|p| pids.binary_search(p).is_ok());
                let mut hits = Vec::new();
                for p in pids {
                    let fresh = self
                        .not_lc
                        .get(&p)
                        .is_some_and(|&t| now.saturating_duration_since(t) < ttl);
                    if p == me || self.watched.contains(&p) || fresh {
                        continue;
                    }
                    // a zombie keeps its name until reaped: a dying LC
                    // must not count as found again
                    if matches_name(p, &name) && elfen_shm::pid_alive(p) {
                        hits.push(p);
                    } else {
                        self.not_lc.insert(p, now);
                    }
                }
                self.owned_only(hits, now, out)
            }
        };
        for p in candidates {
            if self.watched.contains(&p) {
                continue;
            }
            match src.watch_tgid(p) {
                Ok(()) => {
                    self.watched.insert(p);
                }
                // it exited meanwhile, or is a thread: not an LC process
                Err(elfen_bpf::BpfError::NoSuchProcess { .. })
                | Err(elfen_bpf::BpfError::NotAProcess { .. }) => {}
                Err(e) => out.push(Notice::Warning(format!("watching pid {p}: {e}"))),
            }
        }
    }

    /// Of same-named processes, those of the owner (decided here from the
    /// oldest, when not yet); the others are remembered as not LC and
    /// reported once each.
    fn owned_only(&mut self, hits: Vec<u32>, now: Instant, out: &mut Vec<Notice>) -> Vec<u32> {
        if hits.is_empty() {
            return hits;
        }
        let owner = match self.owner {
            Some(u) => u,
            None => {
                let Some((uid, pid)) = oldest_owner(&hits) else {
                    return Vec::new();
                };
                out.push(Notice::Owner { uid, pid });
                self.owner = Some(uid);
                uid
            }
        };
        let mut mine = Vec::new();
        for p in hits {
            match elfen_cmd::proc::uids(p) {
                Some(u) if owned_by(u, owner) => mine.push(p),
                Some(u) => {
                    self.not_lc.insert(p, now);
                    if self.ignored.insert(p) {
                        out.push(Notice::Ignored {
                            pid: p,
                            uid: u.0,
                            owner,
                        });
                    }
                }
                None => {}
            }
        }
        mine
    }

    /// Reports processes found after a loss (or for the first time).
    fn on_found(&mut self, now: Instant, out: &mut Vec<Notice>) {
        let unprotected_ms = self
            .pids()
            .iter()
            .filter_map(|&p| age_ms(p))
            .reduce(f64::max);
        self.on_found_with(now, out, unprotected_ms);
    }

    /// [`Discovery::on_found`] with the time the new processes ran
    /// unwatched (`None`: watched by group in the kernel from their start).
    fn on_found_with(&mut self, now: Instant, out: &mut Vec<Notice>, unprotected_ms: Option<f64>) {
        let pids = self.pids();
        match self.lost.take() {
            Some((since, from)) if self.found_once => {
                out.push(Notice::Restarted {
                    from,
                    to: pids,
                    unprotected_ms,
                    absent_ms: now.saturating_duration_since(since).as_secs_f64() * 1000.0,
                });
            }
            _ if !self.found_once => out.push(Notice::Found { pids }),
            _ => {}
        }
        self.found_once = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_adopts_one_users_processes() {
        // real and effective uid must both be the owner's
        assert!(owned_by((33, 33), 33));
        assert!(!owned_by((1000, 1000), 33));
        assert!(
            !owned_by((1000, 33), 33),
            "a setuid program started by another user"
        );
        assert!(!owned_by((33, 0), 33));
        // the first owner: the oldest process whose uids agree
        assert_eq!(first_owner(&[]), None);
        assert_eq!(first_owner(&[(50, (1000, 1000)), (10, (33, 33))]), Some(33));
        assert_eq!(
            first_owner(&[(10, (1000, 0)), (50, (33, 33))]),
            Some(33),
            "a setuid process does not decide"
        );
        assert_eq!(first_owner(&[(10, (1000, 0))]), None);
        // this process: its own owner
        let me = std::process::id();
        let uid = elfen_cmd::proc::uids(me).unwrap().0;
        assert_eq!(oldest_owner(&[me]), Some((uid, me)));
    }

    #[test]
    fn names_match_comm_or_argv0() {
        let me = std::process::id();
        let comm = comm_of(me).unwrap();
        assert!(matches_name(me, &comm));
        assert!(!matches_name(me, "no-such-name-here"));
        assert!(
            !find_by_name(&comm).contains(&me),
            "the daemon never finds itself"
        );
    }
}
