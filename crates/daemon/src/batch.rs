//! **Batch groups**: opening an operator's cgroup or creating one for a
//! command the daemon starts, confining it to the batch lanes, making it
//! yield (`cpu.idle` through the executor, or SCHED_IDLE on every thread),
//! and giving everything back at exit.
//!
//! Every cgroup value goes through the executor (recorded in its state
//! file before the write). Scheduling classes of threads are not cgroup
//! values: the daemon remembers each thread's previous class in memory
//! and restores it at a clean exit; after a SIGKILL those threads stay
//! SCHED_IDLE (the least-priority class: they still run on idle CPUs).
//!
//! A command starts already inside its group: the child writes `0` to
//! each of the group's `cgroup.procs` (the kernel's "the writing process")
//! between fork and exec, sets SCHED_IDLE if asked, and asks for SIGKILL
//! when the daemon dies, so no instant of it runs outside the group. What
//! it forks stays in the group too (a shell wrapper's children, a
//! grandchild that leaves its session): the group is created as the
//! daemon's own (`Executor::create_owned_group`, with the freezer where
//! one is offered), and stopping the command stops the whole group —
//! SIGTERM to every process in it, then, after the grace time, every one
//! left is killed (`cgroup.kill` on v2; freeze, SIGKILL, thaw on v1). After
//! a SIGKILL of the daemon only the command's own process dies with it;
//! the rest stays in the group, and the next start's recovery kills it
//! before it removes the group — it never runs outside a group. An
//! operator's group (`cgroup = ...`, or a group the host names: a slice, a
//! unit, a pod) is never signalled and none of its processes is moved.
//!
//! Where the groups of commands live is the plan's [`Placement`]: at the
//! root of each hierarchy (`elfen-daemon-<pid>/<name>`), or, on a systemd
//! host, below the daemon's own delegated group (`<group>/batch-<name>`),
//! after the daemon has moved itself into the leaf `<group>/daemon`
//! ([`enter_delegated_leaf`]). A group that follows a unit that restarts
//! gets its knobs again ([`BatchGroup::reapply`]).

use crate::config::{IdleMethod, Mode};
use crate::error::DaemonError;
use crate::health::Health;
use crate::placement::Placement;
use crate::plan::{GroupPlan, GroupSource};
use elfen_cgroup::{Controller, Executor, Group, GroupPath, Hierarchy, KILL_TIMEOUT, Knob};
use elfen_cmd::proc::{SchedClass, set_sched};
use elfen_ops::health::DaemonKnob;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What a launched command is told (the cooperative mode's attach point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// `ELFEN_PAGE`.
    pub page: PathBuf,
    /// `ELFEN_LANE`, when there is one batch lane.
    pub lane: Option<u32>,
}

/// A thread's scheduling class before the daemon changed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Class {
    policy: i32,
    priority: i32,
}

fn class_of(tid: u32) -> Option<Class> {
    // SAFETY: plain syscalls on a thread id; param is a valid out-parameter.
    unsafe {
        let policy = libc::sched_getscheduler(tid as libc::pid_t);
        if policy < 0 {
            return None;
        }
        let mut p: libc::sched_param = std::mem::zeroed();
        if libc::sched_getparam(tid as libc::pid_t, &mut p) != 0 {
            return None;
        }
        Some(Class {
            policy: policy & !libc::SCHED_RESET_ON_FORK,
            priority: p.sched_priority,
        })
    }
}

fn set_class(tid: u32, c: Class) -> std::io::Result<()> {
    let p = libc::sched_param {
        sched_priority: c.priority,
    };
    // SAFETY: a thread id and a valid sched_param.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, c.policy, &p) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Under a delegated placement: moves this process (all its threads) into
/// the leaf `<its group>/daemon` (made if missing), so that its own group
/// holds no process and can hand controllers to the groups of commands
/// (systemd's rule for delegated groups). Refused, naming them, when other
/// processes stay in its group. Returns the leaf. The leaf is not removed
/// at the stop (the daemon is in it until it exits); systemd removes the
/// unit's groups when the unit stops.
pub fn enter_delegated_leaf(
    placement: &Placement,
    h: &Hierarchy,
) -> Result<Option<GroupPath>, DaemonError> {
    let (Some(leaf), Some(base), Some(tree)) =
        (placement.daemon_leaf(), placement.boundary(), h.unified())
    else {
        return Ok(None);
    };
    let dir = tree.join(leaf.as_str());
    if !dir.is_dir() {
        std::fs::create_dir(&dir)
            .map_err(|e| DaemonError::os(format!("creating {}", dir.display()), e))?;
    }
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).map_err(|e| {
        DaemonError::os(
            format!(
                "moving the daemon into {} (its delegated leaf)",
                dir.display()
            ),
            e,
        )
    })?;
    let left = elfen_bpf::proc::cgroup_procs(&tree.join(base.as_str()));
    if !left.is_empty() {
        let pids: Vec<String> = left.iter().map(u32::to_string).collect();
        return Err(DaemonError::thread(
            "placement",
            format!(
                "the daemon's group {base} still holds processes besides the daemon (pid {}): \
                 a group that hands controllers to its children may hold none itself; start the \
                 daemon directly from its unit (no wrapper left running in it)",
                pids.join(", ")
            ),
        ));
    }
    Ok(Some(leaf))
}

/// A batch group the daemon drives.
#[derive(Debug)]
pub struct BatchGroup {
    /// The plan.
    pub plan: GroupPlan,
    /// The executor's handle.
    pub group: Group,
    child: Option<Child>,
    /// Threads set to SCHED_IDLE, with their previous class.
    idled: BTreeMap<u32, Class>,
    /// SCHED_IDLE as a fallback ([`BatchGroup::fall_back_to_sched_idle`]).
    idle_fallback: bool,
    /// Set by a protection that wants the group's threads SCHED_IDLE
    /// (idle mode as a fallback, guard mode on a group that does not yield
    /// by its set-up).
    pub sched_idle: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl BatchGroup {
    /// Opens or creates the group, confines it, makes it yield, starts its
    /// command. On error, what was done is in the executor's record (the
    /// caller restores it) and a started command is killed.
    pub fn setup(
        ex: &mut Executor,
        plan: &GroupPlan,
        env: &LaunchEnv,
    ) -> Result<BatchGroup, DaemonError> {
        let path = plan.path.as_str();
        let group = match plan.source {
            GroupSource::Existing => ex.open_group(path, &plan.controllers)?,
            GroupSource::Launch { .. } => {
                // the freezer too where offered: the whole group can then be
                // frozen while it is killed, so nothing in it forks meanwhile
                let mut ctls = plan.controllers.clone();
                if ex.hierarchy().supports(Controller::Freezer)
                    && !ctls.contains(&Controller::Freezer)
                {
                    ctls.push(Controller::Freezer);
                }
                ex.create_owned_group(path, &ctls)?
            }
        };
        if let Some(cpus) = &plan.confine {
            ex.set(&group, Knob::CpusetCpus(cpus.clone()))?;
        }
        // a cpu group yields as a whole (the daemon's top group first)
        if let Some(y) = &plan.cpu_yield {
            for p in &y.groups {
                let g = ex.open_group(p.as_str(), &[Controller::Cpu])?;
                ex.set(&g, y.knob.clone())?;
            }
        }
        let mut g = BatchGroup {
            plan: plan.clone(),
            group,
            child: None,
            idled: BTreeMap::new(),
            idle_fallback: false,
            sched_idle: Default::default(),
        };
        if let GroupSource::Launch { program, args } = &plan.source {
            g.child = Some(g.launch(ex, program, args, env)?);
        }
        g.idle_threads(ex, None);
        Ok(g)
    }

    /// Applies the group's start knobs again (its cpuset, how it yields)
    /// where they no longer hold: the group it follows was made anew (a
    /// unit restarted), or its owner wrote over them (systemd applies a
    /// unit's CPU settings again at a daemon-reload). Returns what was
    /// written (nothing when every value still held).
    pub fn reapply(&mut self, ex: &mut Executor) -> Result<Vec<String>, DaemonError> {
        let mut written = Vec::new();
        if let Some(cpus) = &self.plan.confine {
            let knob = Knob::CpusetCpus(cpus.clone());
            if !ex.set(&self.group, knob.clone())?.is_noop() {
                written.push(format!("{knob} on {}", self.group.path()));
            }
        }
        if let Some(y) = &self.plan.cpu_yield {
            for p in &y.groups {
                let g = ex.open_group(p.as_str(), &[Controller::Cpu])?;
                if !ex.set(&g, y.knob.clone())?.is_noop() {
                    written.push(format!("{} on {p}", y.knob));
                }
            }
        }
        self.idle_threads(ex, None);
        Ok(written)
    }

    /// Moves the group to `path`, where its container or pod was made anew
    /// under the same name (the old directory is gone): opened in the same
    /// controllers; the cpu yield's groups at or below the old path follow.
    /// Writes nothing: [`BatchGroup::reapply`] applies the knobs. Returns
    /// the old path.
    pub fn rebind(
        &mut self,
        ex: &Executor,
        path: GroupPath,
        named: String,
    ) -> Result<GroupPath, DaemonError> {
        let group = ex.open_group(path.as_str(), self.group.controllers())?;
        let old = std::mem::replace(&mut self.plan.path, path.clone());
        if let Some(y) = &mut self.plan.cpu_yield {
            for p in &mut y.groups {
                if let Some(rest) = p.as_str().strip_prefix(old.as_str()) {
                    if rest.is_empty() || rest.starts_with('/') {
                        *p = GroupPath::new(&format!("{}{rest}", path.as_str()))?;
                    }
                }
            }
        }
        self.group = group;
        self.plan.named = Some(named);
        self.idled.clear();
        Ok(old)
    }

    /// Whether every directory of the group exists.
    pub fn present(&self, ex: &Executor) -> bool {
        self.group.controllers().iter().all(|&c| {
            ex.hierarchy()
                .group_dir(c, self.group.path())
                .is_ok_and(|d| d.is_dir())
        })
    }

    /// The `cgroup.procs` files of the group, one per distinct directory.
    fn procs_files(&self, ex: &Executor) -> Result<Vec<PathBuf>, DaemonError> {
        let mut out: Vec<PathBuf> = Vec::new();
        for &c in self.group.controllers() {
            let f = ex
                .hierarchy()
                .group_dir(c, self.group.path())?
                .join("cgroup.procs");
            if !out.contains(&f) {
                out.push(f);
            }
        }
        Ok(out)
    }

    fn launch(
        &self,
        ex: &Executor,
        program: &Path,
        args: &[String],
        env: &LaunchEnv,
    ) -> Result<Child, DaemonError> {
        let files: Vec<CString> = self
            .procs_files(ex)?
            .iter()
            .map(|p| CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL in a path"))
            .collect();
        let sched_idle = self.plan.idle == Some(IdleMethod::SchedIdle);
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .env("ELFEN_PAGE", &env.page);
        // the service manager's socket is the daemon's, not the command's
        for v in elfen_ops::notify::ENV {
            cmd.env_remove(v);
        }
        if let Some(l) = env.lane {
            cmd.env("ELFEN_LANE", l.to_string());
        }
        // SAFETY: the closure only makes async-signal-safe system calls
        // (open, write, close, sched_setscheduler, prctl) on memory
        // prepared before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                for f in &files {
                    let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let r = libc::write(fd, b"0".as_ptr().cast(), 1);
                    let e = std::io::Error::last_os_error();
                    libc::close(fd);
                    if r != 1 {
                        return Err(e);
                    }
                }
                if sched_idle {
                    let p = libc::sched_param { sched_priority: 0 };
                    if libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                Ok(())
            });
        }
        cmd.spawn().map_err(|source| DaemonError::Launch {
            name: self.plan.name.clone(),
            program: program.to_path_buf(),
            source,
        })
    }

    /// SCHED_IDLE on threads of the group that are not yet (method
    /// `sched_idle`, or the fallback of a group whose freezes or cpusets
    /// fail); returns how many were changed. A thread that refuses it
    /// (other than one that exited meanwhile) is counted in `health` as
    /// group `index`'s.
    pub fn idle_threads(&mut self, ex: &Executor, health: Option<(&Health, usize)>) -> usize {
        let wanted = self.sched_idle.load(std::sync::atomic::Ordering::Relaxed);
        if self.plan.idle != Some(IdleMethod::SchedIdle) && !self.idle_fallback && !wanted {
            return 0;
        }
        let Ok(tids) = ex.threads(&self.group) else {
            return 0;
        };
        let mut n = 0;
        for tid in tids {
            let Some(c) = class_of(tid) else { continue };
            if c.policy == libc::SCHED_IDLE {
                continue;
            }
            match set_sched(tid, SchedClass::Idle) {
                Ok(()) => {
                    self.idled.entry(tid).or_insert(c);
                    n += 1;
                    if let Some((h, g)) = health {
                        h.succeeded(g, DaemonKnob::SchedIdle);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    if let Some((h, g)) = health {
                        h.count_failure(
                            g,
                            DaemonKnob::SchedIdle,
                            format!("SCHED_IDLE on thread {tid}: {e}"),
                            false,
                        );
                    }
                }
            }
        }
        n
    }

    /// From now on every thread of the group is put SCHED_IDLE (at each
    /// rescan; their classes are given back at the stop): what protects
    /// the LC when the group's mode cannot.
    pub fn fall_back_to_sched_idle(&mut self) {
        self.idle_fallback = true;
    }

    /// The command's pid, if the daemon started one.
    pub fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the started command has exited (reaped; reported once,
    /// with what it left running in its group).
    pub fn poll_exit(&mut self, ex: &Executor) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(status)) => {
                let pid = c.id();
                self.child = None;
                let left = ex.procs(&self.group).map_or(0, |p| p.len());
                Some(format!(
                    "batch {}: command (pid {pid}) exited: {status}{}",
                    self.plan.name,
                    if left > 0 {
                        format!(
                            "; {left} processes it started still run in its group (stopped with it)"
                        )
                    } else {
                        String::new()
                    }
                ))
            }
            _ => None,
        }
    }

    /// Whether the daemon started this group's processes (a command in a
    /// group it created): only then are they ever signalled.
    pub fn is_owned(&self) -> bool {
        matches!(self.plan.source, GroupSource::Launch { .. })
    }

    /// Stops the started command and everything it forked: SIGTERM to
    /// every process of the group, then, after at most `grace`, SIGKILL to
    /// every one left ([`Executor::kill_tasks`], bounded by
    /// [`KILL_TIMEOUT`]); gives threads their previous scheduling class.
    /// Without the executor (a drop without shutdown) only the command's
    /// own process is signalled; the restore or the next start kills the
    /// rest. Returns what it did, survivors named.
    pub fn stop(&mut self, ex: Option<&Executor>, grace: Duration) -> Vec<String> {
        let mut out = Vec::new();
        let name = self.plan.name.clone();
        let child = self.child.take();
        let owned = self.is_owned();
        let members = |ex: Option<&Executor>| -> Vec<u32> {
            match ex {
                Some(ex) if owned => ex.procs(&self.group).unwrap_or_default(),
                _ => Vec::new(),
            }
        };
        let first = members(ex);
        if child.is_some() || !first.is_empty() {
            let mut c = child;
            let pid = c.as_ref().map(Child::id);
            for p in first.iter().copied().chain(pid) {
                elfen_cmd::proc::signal_pid(p, libc::SIGTERM);
            }
            let t0 = Instant::now();
            let mut status = None;
            loop {
                if let Some(ch) = c.as_mut() {
                    if let Ok(Some(s)) = ch.try_wait() {
                        status = Some(s);
                        c = None;
                    }
                }
                let done = c.is_none() && members(ex).is_empty();
                if done || t0.elapsed() >= grace {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let killed = match ex {
                Some(ex) if owned => match ex.kill_tasks(&self.group, KILL_TIMEOUT) {
                    Ok(r) if r.is_clean() => (r.killed > 0).then(|| format!("{} killed", r.killed)),
                    Ok(r) => Some(format!(
                        "FAILED to stop all of it: {r}; the next start kills them"
                    )),
                    Err(e) => Some(format!("FAILED to stop the rest: {e}")),
                },
                _ => None,
            };
            if let Some(mut ch) = c {
                elfen_cmd::proc::kill_pid(ch.id());
                status = ch.wait().ok();
            }
            let others = first.iter().filter(|&&p| Some(p) != pid).count();
            let mut line = format!("batch {name}: ");
            match pid {
                Some(pid) => {
                    line += &format!(
                        "command (pid {pid}) stopped ({})",
                        status.map_or("status unknown".into(), |s| s.to_string())
                    )
                }
                None => line += "command had exited",
            }
            if others > 0 {
                line += &format!("; {others} more processes of its group sent SIGTERM");
            }
            if let Some(k) = killed {
                line += &format!("; {k}");
            }
            out.push(line);
        }
        let mut restored = 0;
        for (tid, c) in std::mem::take(&mut self.idled) {
            if class_of(tid).is_some_and(|now| now.policy == libc::SCHED_IDLE)
                && set_class(tid, c).is_ok()
            {
                restored += 1;
            }
        }
        if restored > 0 {
            out.push(format!(
                "batch {name}: {restored} threads back to their scheduling class"
            ));
        }
        out
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.plan.mode
    }
}

impl Drop for BatchGroup {
    fn drop(&mut self) {
        if self.child.is_some() || !self.idled.is_empty() {
            self.stop(None, Duration::from_millis(500));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::CpuYield;
    use elfen_cgroup::Layout;

    #[test]
    fn a_group_made_anew_elsewhere_moves_with_its_cpu_yield() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpuset cpu\n").unwrap();
        let old_path = "machine.slice/libpod-aaaa.scope";
        let new_path = "machine.slice/libpod-bbbb.scope";
        for p in [old_path, new_path] {
            std::fs::create_dir_all(root.path().join(p)).unwrap();
        }
        let ex = Executor::new(Hierarchy::with_layout(root.path(), Layout::V2).unwrap());
        let path = GroupPath::new(old_path).unwrap();
        let plan = GroupPlan {
            name: "b".into(),
            mode: Mode::Idle,
            path: path.clone(),
            source: GroupSource::Existing,
            controllers: vec![Controller::Cpu],
            confine: None,
            idle: Some(IdleMethod::CpuIdle),
            cpu_yield: Some(CpuYield {
                groups: vec![GroupPath::new("machine.slice").unwrap(), path.clone()],
                knob: Knob::CpuIdle(true),
            }),
            rungs: vec![Mode::Idle],
            guard_cpus: None,
            named: Some("container b".into()),
            owner: elfen_cgroup::Owner::Operator,
            follows: true,
            iso: Default::default(),
        };
        let mut g = BatchGroup {
            group: ex.open_group(old_path, &plan.controllers).unwrap(),
            plan,
            child: None,
            idled: BTreeMap::new(),
            idle_fallback: false,
            sched_idle: Default::default(),
        };
        std::fs::remove_dir(root.path().join(old_path)).unwrap();
        assert!(!g.present(&ex));
        let new = GroupPath::new(new_path).unwrap();
        let old = g
            .rebind(&ex, new.clone(), "container b (new)".into())
            .unwrap();
        assert_eq!(old.as_str(), old_path);
        assert_eq!(g.group.path(), &new);
        assert_eq!(g.plan.path, new);
        assert!(g.present(&ex));
        // the slice above is kept, the group's own entry follows it
        let y = g.plan.cpu_yield.as_ref().unwrap();
        assert_eq!(
            y.groups,
            vec![GroupPath::new("machine.slice").unwrap(), new]
        );
        assert_eq!(g.plan.named.as_deref(), Some("container b (new)"));
        // a path that is not there is refused, the group unchanged
        let gone = GroupPath::new("machine.slice/libpod-cccc.scope").unwrap();
        assert!(g.rebind(&ex, gone, "x".into()).is_err());
        assert_eq!(g.plan.path.as_str(), new_path);
    }
}
