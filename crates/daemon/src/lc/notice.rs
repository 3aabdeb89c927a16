//! What discovery tells the operator ([`Notice`]), and how it says it.

/// How many [`Notice::Followed`] are logged; later ones are counted only
/// (`elfen_lc_followed_processes_total`).
pub const FOLLOWED_SAID: u32 = 20;

/// A process followed as part of the LC service.
#[derive(Debug, Clone, PartialEq)]
pub struct Followed {
    /// Its pid.
    pub pid: u32,
    /// Its command name when found.
    pub comm: String,
    /// Its real uid.
    pub uid: u32,
    /// The LC process it descends from (its parent, or an ancestor).
    pub from: u32,
    /// How long it ran before it was watched, ms (clock-tick resolution).
    pub unwatched_ms: f64,
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
    /// Processes an LC process started (its children, or theirs): part of
    /// the service whatever their user and name, watched from now on.
    Followed {
        /// The processes.
        procs: Vec<Followed>,
        /// The notice's number (from 1): past [`FOLLOWED_SAID`] it is
        /// counted, not logged ([`Notice::is_quiet`]; a server that forks
        /// per connection would fill the log).
        n: u32,
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

impl Notice {
    /// Whether it is counted but not logged.
    pub fn is_quiet(&self) -> bool {
        matches!(self, Notice::Followed { n, .. } if *n > FOLLOWED_SAID)
    }
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
            Notice::Followed { procs, n } => {
                write!(f, "LC service: ")?;
                for (i, p) in procs.iter().enumerate() {
                    write!(
                        f,
                        "{}pid {} ({}, {}, started by LC pid {}; watched after {:.0} ms)",
                        if i > 0 { ", " } else { "" },
                        p.pid,
                        p.comm,
                        elfen_cmd::proc::describe_user(p.uid),
                        p.from,
                        p.unwatched_ms
                    )?;
                }
                write!(
                    f,
                    ": part of the service (an LC process's descendants are, whatever their user)"
                )?;
                if *n == FOLLOWED_SAID {
                    write!(
                        f,
                        "; further processes it starts are followed without a line each \
                         (elfen_lc_followed_processes_total counts them)"
                    )?;
                }
                Ok(())
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
