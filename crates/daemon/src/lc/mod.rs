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
//! **The service, not its first process.** Every process an adopted one
//! starts — its children and theirs, whatever their user and name — is
//! the service too ([`Notice::Followed`]): a pre-fork server's master runs
//! as root and its workers, which serve the requests, as an unprivileged
//! user; a server that forks per connection serves each in a child. The
//! children of the processes adopted by name or pid (a master) are read
//! at every liveness check, deeper descendants at every look; a descendant
//! runs unwatched until then (the notice says how long). A name's owner
//! rule still refuses a same-named process of another user that descends
//! from no LC process.
//!
//! [`Discovery::tick`] runs on the writer thread between signal events:
//! a liveness check of the watched processes every `liveness`, a new look
//! every `rescan` (every `lost_rescan` while none is found). A look at
//! `/proc` reads a process (`stat`, and its `cmdline` when its `comm` is
//! not the name) when it is new; a process read as not LC is read again at
//! every look during its first [`YOUNG`] (a fork runs its program soon
//! after: a shell that execs the service, a process starting under its
//! parent's name) and then every [`REREAD`], every `4 × lost_rescan` while
//! no LC process is found.

mod notice;
pub mod procs;

pub use notice::{FOLLOWED_SAID, Followed, Notice};

pub use procs::{comm_of, find_by_name, matches_name};

use crate::subtree::{Change, GroupTarget, Subtrees};
use elfen_bpf::Source;
use procs::{Stat, age_ms, age_ms_of};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// A process read as not LC is read again at every look while it is
/// younger than this (it may exec into the service: a shell wrapper, a
/// fork that has not run its program yet).
pub const YOUNG: Duration = Duration::from_secs(5);

/// A process read as not LC is read again after this long (it took the
/// LC's name later than [`YOUNG`] after its start).
pub const REREAD: Duration = Duration::from_secs(30);

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

/// A process's real and effective uid.
type Uids = (u32, u32);

/// A process read as not LC: when, and until when it counts as young.
#[derive(Debug, Clone, Copy)]
struct NotLc {
    read: Instant,
    young_until: Instant,
}

/// What one look at the processes not read lately found.
#[derive(Debug, Default)]
struct Look {
    /// Processes read now, with their `stat`.
    read: BTreeMap<u32, Stat>,
    /// Of those, the ones going by the LC's name (when a name is looked for).
    named: Vec<u32>,
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
    /// Of `watched`, the processes adopted by name or pid (not as a
    /// descendant): their children are read at every liveness check.
    roots: BTreeSet<u32>,
    /// Processes read and found not to be LC (see the module docs).
    not_lc: BTreeMap<u32, NotLc>,
    /// The uid whose processes a name adopts (`None`: decided at the
    /// first find).
    owner: Option<u32>,
    /// Same-named processes of another user already reported.
    ignored: BTreeSet<u32>,
    /// Since when no LC process runs, and which exited.
    lost: Option<(Instant, Vec<u32>)>,
    found_once: bool,
    /// [`Notice::Followed`] sent so far.
    followed_notices: u32,
    next_liveness: Instant,
    next_rescan: Instant,
}

impl Discovery {
    /// Starts watching `target` through `src`: the processes found now
    /// (with every process they started), or a cgroup by id. Returns the
    /// notices to report.
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
            roots: BTreeSet::new(),
            not_lc: BTreeMap::new(),
            lost: None,
            found_once: false,
            followed_notices: 0,
            next_liveness: now + opts.liveness,
            next_rescan: now + opts.rescan,
        };
        let mut notes = Vec::new();
        match d.target.clone() {
            LcTarget::Pid(p) => {
                src.watch_tgid(p)?;
                d.watched.insert(p);
                d.roots.insert(p);
                d.rescan(src, &mut notes);
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
            // "found" first, then who was followed
            let at = notes
                .iter()
                .position(|n| matches!(n, Notice::Followed { .. }))
                .unwrap_or(notes.len());
            notes.insert(at, Notice::Found { pids: d.pids() });
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
            self.follow_children(src, out);
        }
        if rescan_due {
            self.next_rescan = now + self.opts.rescan;
        }
        if rescan_due || self.lost.is_some() {
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
            self.roots.remove(p);
            if let Err(e) = src.unwatch_tgid(*p) {
                out.push(Notice::Warning(format!("unwatching pid {p}: {e}")));
            }
        }
        if self.watched.is_empty() {
            out.push(Notice::Lost { pids: dead.clone() });
            self.lost = Some((now, dead));
        }
    }

    /// The children of the processes adopted by name or pid (a pre-fork
    /// server's master respawning a worker), watched at once.
    fn follow_children(&mut self, src: &mut Source, out: &mut Vec<Notice>) {
        let mut new = Vec::new();
        for &r in &self.roots {
            for c in procs::children_of(r) {
                if !self.watched.contains(&c) && !new.iter().any(|&(p, _)| p == c) {
                    new.push((c, r));
                }
            }
        }
        if !new.is_empty() {
            self.adopt_descendants(src, new, out);
        }
    }

    /// Watches `procs` (pid, the LC process it descends from) and says so.
    fn adopt_descendants(
        &mut self,
        src: &mut Source,
        procs: Vec<(u32, u32)>,
        out: &mut Vec<Notice>,
    ) {
        let mut said = Vec::new();
        for (pid, from) in procs {
            let Some(st) = procs::read_stat(pid) else {
                continue;
            };
            if !self.watch(src, pid, out) {
                continue;
            }
            self.not_lc.remove(&pid);
            said.push(Followed {
                pid,
                comm: st.comm,
                uid: elfen_cmd::proc::uids(pid).map_or(u32::MAX, |u| u.0),
                from,
                unwatched_ms: age_ms_of(st.start_ticks),
            });
        }
        if said.is_empty() {
            return;
        }
        self.followed_notices = self.followed_notices.saturating_add(1);
        out.push(Notice::Followed {
            procs: said,
            n: self.followed_notices,
        });
    }

    /// Watches `pid` through the source; false when it cannot be (it
    /// exited meanwhile, or is a thread).
    fn watch(&mut self, src: &mut Source, pid: u32, out: &mut Vec<Notice>) -> bool {
        if self.watched.contains(&pid) {
            return true;
        }
        match src.watch_tgid(pid) {
            Ok(()) => {
                self.watched.insert(pid);
                true
            }
            Err(elfen_bpf::BpfError::NoSuchProcess { .. })
            | Err(elfen_bpf::BpfError::NotAProcess { .. }) => false,
            Err(e) => {
                out.push(Notice::Warning(format!("watching pid {pid}: {e}")));
                false
            }
        }
    }

    /// Whether `pid`, read as not LC at some point, needs no new read now.
    fn known_not_lc(&self, pid: u32, now: Instant) -> bool {
        let Some(n) = self.not_lc.get(&pid) else {
            return false;
        };
        if now < n.young_until {
            return false;
        }
        let ttl = if self.lost.is_some() {
            (self.opts.lost_rescan * 4).max(Duration::from_millis(20))
        } else {
            REREAD
        };
        now.saturating_duration_since(n.read) < ttl
    }

    /// Reads the processes not read lately; `by_name`: which go by the
    /// LC's name.
    fn look(&mut self, by_name: bool, now: Instant) -> Look {
        let me = std::process::id();
        let pids = procs::proc_pids();
        self.not_lc.retain(|p, _| pids.binary_search(p).is_ok());
        self.ignored.retain(|p| pids.binary_search(p).is_ok());
        let name = if by_name { self.name.clone() } else { None };
        let mut l = Look::default();
        for p in pids {
            if p == me || self.watched.contains(&p) || self.known_not_lc(p, now) {
                continue;
            }
            let Some(st) = procs::read_stat(p) else {
                continue;
            };
            // a zombie keeps its name until reaped: a dying LC must not
            // count as found again
            if !elfen_shm::pid_alive(p) {
                self.not_lc.insert(
                    p,
                    NotLc {
                        read: now,
                        young_until: now,
                    },
                );
                continue;
            }
            if name
                .as_deref()
                .is_some_and(|n| procs::comm_matches(p, &st.comm, n))
            {
                l.named.push(p);
            }
            l.read.insert(p, st);
        }
        l
    }

    /// Looks for LC processes not yet watched: processes going by the name
    /// (comm targets; a pid target's once it is gone) of the owner, and
    /// every process an LC process started.
    fn rescan(&mut self, src: &mut Source, out: &mut Vec<Notice>) {
        let by_name = match &self.target {
            LcTarget::Groups(_) => return, // groups_tick
            LcTarget::Comm(_) => true,
            // a pid target is that process (and what it starts): others
            // with its name are looked for only once it is gone (a restart)
            LcTarget::Pid(_) => self.lost.is_some(),
        };
        let now = Instant::now();
        let look = self.look(by_name, now);
        let (mine, others) = self.owned_only(&look.named, out);
        // Of the owner's same-named processes, one an LC process started (a
        // pre-fork server's new worker before it drops its privileges) is
        // followed from that process and said so; either kind is a root
        // whose children are followed at each liveness check.
        let mut started = Vec::new();
        for &p in &mine {
            let from = procs::ancestor_in(
                p,
                |q| self.watched.contains(&q) || mine.contains(&q),
                |q| look.read.get(&q).map(|s| s.ppid),
            );
            match from {
                Some(from) => started.push((p, from)),
                None => {
                    if self.watch(src, p, out) {
                        self.roots.insert(p);
                    }
                }
            }
        }
        let started_pids: Vec<u32> = started.iter().map(|&(p, _)| p).collect();
        self.adopt_descendants(src, started, out);
        for p in started_pids {
            if self.watched.contains(&p) {
                self.roots.insert(p);
            }
        }
        // every process read now that descends from a watched one
        let descendants: Vec<(u32, u32)> = look
            .read
            .keys()
            .filter(|p| !self.watched.contains(p))
            .filter_map(|&p| {
                let from = procs::ancestor_in(
                    p,
                    |q| self.watched.contains(&q),
                    |q| look.read.get(&q).map(|s| s.ppid),
                )?;
                Some((p, from))
            })
            .collect();
        self.adopt_descendants(src, descendants, out);
        for (p, uids) in others {
            if self.watched.contains(&p) {
                continue;
            }
            if self.ignored.insert(p) {
                out.push(Notice::Ignored {
                    pid: p,
                    uid: uids.0,
                    owner: self.owner.unwrap_or(u32::MAX),
                });
            }
        }
        for (p, st) in look.read {
            if self.watched.contains(&p) {
                continue;
            }
            let age = Duration::from_secs_f64(age_ms_of(st.start_ticks) / 1000.0);
            self.not_lc.insert(
                p,
                NotLc {
                    read: now,
                    young_until: now + YOUNG.saturating_sub(age),
                },
            );
        }
    }

    /// Of same-named processes, those of the owner (decided here from the
    /// oldest, when not yet), and the others with their uids.
    fn owned_only(&mut self, hits: &[u32], out: &mut Vec<Notice>) -> (Vec<u32>, Vec<(u32, Uids)>) {
        if hits.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let owner = match self.owner {
            Some(u) => u,
            None => {
                let Some((uid, pid)) = oldest_owner(hits) else {
                    return (Vec::new(), Vec::new());
                };
                out.push(Notice::Owner { uid, pid });
                self.owner = Some(uid);
                uid
            }
        };
        let (mut mine, mut others) = (Vec::new(), Vec::new());
        for &p in hits {
            match elfen_cmd::proc::uids(p) {
                Some(u) if owned_by(u, owner) => mine.push(p),
                Some(u) => others.push((p, u)),
                None => {}
            }
        }
        (mine, others)
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
}
