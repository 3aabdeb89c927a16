//! **Unmodified batch programs** from Debian packages, run as they are: no
//! checks, no rebuild. One instance per planned thread, pinned and given
//! its scheduling class (and cgroup) between `fork` and `exec`, so the
//! program never runs outside its plan. Their progress is measured from
//! outside, since they report no work units:
//!
//! - `xz`: bytes of input read (`/proc/<pid>/io` `rchar`) — compression
//!   work done, slowed by memory interference like the real thing;
//! - `stress-ng` and `7zz`: CPU time of the process tree (`schedstat`);
//! - `lucene-index`, the Java batch job ([`super::java`]): the documents it
//!   reports indexed. It is the one program here that checks (the Java
//!   binding), so it also runs the Elfen configurations.

use super::{BatchPlan, BatchRun, BatchSample, ThreadSample};
use crate::error::{BenchError, Result};
use elfen_cmd::child::ChildGuard;
use elfen_cmd::proc::{self, SchedClass};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// An unmodified batch program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProgramKind {
    /// `xz -6 -T1` compressing a file of pseudo-text (Debian `xz-utils`).
    #[serde(rename = "xz")]
    Xz,
    /// `stress-ng --cpu 1 --cpu-method matrixprod` (Debian `stress-ng`).
    #[serde(rename = "stress-ng")]
    StressNg,
    /// `7zz b -mmt1`, 7-Zip's LZMA benchmark, memory-hungry (Debian `7zip`).
    #[serde(rename = "7zz")]
    SevenZip,
    /// Lucene indexing of the corpus in Java (`elfen-lucene batch`),
    /// instrumented with the Java binding's check.
    #[serde(rename = "lucene-index")]
    LuceneIndex,
}

impl ProgramKind {
    /// Every program.
    pub const ALL: [ProgramKind; 4] = [
        ProgramKind::Xz,
        ProgramKind::StressNg,
        ProgramKind::SevenZip,
        ProgramKind::LuceneIndex,
    ];

    /// Its name in specs and results.
    pub fn name(self) -> &'static str {
        match self {
            ProgramKind::Xz => "xz",
            ProgramKind::StressNg => "stress-ng",
            ProgramKind::SevenZip => "7zz",
            ProgramKind::LuceneIndex => "lucene-index",
        }
    }

    /// Whether it checks the signal page (and so runs the Elfen
    /// configurations).
    pub fn checks(self) -> bool {
        self == ProgramKind::LuceneIndex
    }

    /// The Debian package that provides it.
    pub fn package(self) -> &'static str {
        match self {
            ProgramKind::Xz => "xz-utils",
            ProgramKind::StressNg => "stress-ng",
            ProgramKind::SevenZip => "7zip",
            ProgramKind::LuceneIndex => crate::lc::lucene::SETUP,
        }
    }

    /// What its progress counts.
    pub fn unit(self) -> &'static str {
        match self {
            ProgramKind::Xz => "bytes of input compressed",
            ProgramKind::LuceneIndex => "documents indexed",
            _ => "ns of CPU time",
        }
    }

    fn argv(self, input: &Path) -> Vec<String> {
        let v: &[&str] = match self {
            ProgramKind::Xz => &["xz", "-6", "-T1", "-c", "-k"],
            ProgramKind::StressNg => &[
                "stress-ng",
                "--cpu",
                "1",
                "--cpu-method",
                "matrixprod",
                "--timeout",
                "0",
                "--quiet",
            ],
            ProgramKind::SevenZip => &["7zz", "b", "-mmt1", "1000"],
            ProgramKind::LuceneIndex => return super::java::argv(),
        };
        let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        if self == ProgramKind::Xz {
            v.push(input.display().to_string());
        }
        v
    }

    /// Checks that the program is installed.
    pub fn check(self) -> Result<()> {
        if self == ProgramKind::LuceneIndex {
            return super::java::check().map(|_| ());
        }
        let exe = self.argv(Path::new(""))[0].clone();
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(&exe).is_file()))
            .unwrap_or(false);
        if found {
            Ok(())
        } else {
            Err(BenchError::Batch(format!(
                "{exe} not found: install the Debian package {} (scripts/setup.sh does)",
                self.package()
            )))
        }
    }
}

impl std::fmt::Display for ProgramKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ProgramKind {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self> {
        ProgramKind::ALL
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| BenchError::Parse {
                what: "program".into(),
                given: s.into(),
                expected: "xz, stress-ng, 7zz or lucene-index".into(),
            })
    }
}

/// Writes `bytes` of deterministic pseudo-text (words from a small
/// vocabulary, so it compresses like prose) to `path`, unless a file of
/// that size is there.
pub fn make_input(path: &Path, bytes: u64) -> Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == bytes) {
        return Ok(());
    }
    const WORDS: [&str; 16] = [
        "the",
        "request",
        "lane",
        "batch",
        "borrows",
        "idle",
        "cycles",
        "and",
        "returns",
        "them",
        "within",
        "microseconds",
        "when",
        "search",
        "arrives",
        "latency",
    ];
    let mut out = Vec::with_capacity(bytes as usize);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    while (out.len() as u64) < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x % 16) as usize].as_bytes());
        out.push(if x % 11 == 0 { b'\n' } else { b' ' });
    }
    out.truncate(bytes as usize);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)
            .map_err(|e| BenchError::io(format!("creating {}", d.display()), e))?;
    }
    std::fs::write(path, out).map_err(|e| BenchError::io(format!("writing {}", path.display()), e))
}

/// The input file of the programs that read one.
pub fn input_path(dir: &Path) -> PathBuf {
    dir.join("elfen-batch-input.txt")
}

/// Running instances of a program, one per planned thread.
#[derive(Debug)]
pub struct ProgramProcess {
    kind: ProgramKind,
    children: Vec<ChildGuard>,
    /// Per child, the documents it reported (the Java job).
    reported: Vec<Arc<AtomicU64>>,
    /// Per child, the tail of its stderr (the Java job).
    stderr: Vec<Arc<Mutex<Vec<u8>>>>,
    /// Per child, its temporary directory (the Java job), removed after
    /// the children are killed.
    tmp: Vec<super::java::JobTmp>,
    /// A program that checks: the page and each child's batch lane, whose
    /// batch line holds its naps and run time (the binding keeps them).
    page: Option<elfen_shm::Page>,
    lanes: Vec<Option<u32>>,
}

impl ProgramProcess {
    /// Starts one instance per planned thread: pinned where the plan pins,
    /// at the plan's scheduling class, in `cgroup_procs` (a `cgroup.procs`
    /// file) if given — all set before `exec`.
    pub fn spawn(
        kind: ProgramKind,
        plan: &BatchPlan,
        input: &Path,
        cgroup_procs: Option<&Path>,
    ) -> Result<ProgramProcess> {
        kind.check()?;
        let argv = kind.argv(input);
        let procs = cgroup_procs.map(|p| CString::new(p.as_os_str().as_bytes()).expect("no NUL"));
        let mut me = ProgramProcess {
            kind,
            children: Vec::new(),
            reported: Vec::new(),
            stderr: Vec::new(),
            tmp: Vec::new(),
            page: None,
            lanes: Vec::new(),
        };
        let page = match &plan.page {
            Some(p) if kind.checks() => {
                Some(elfen_shm::Page::attach(p, elfen_shm::Access::Observer)?)
            }
            _ => None,
        };
        for t in &plan.threads {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(if kind.checks() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stderr(if kind.checks() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                // placed by the plan alone: no side CPUs to `taskset` to,
                // no page unless the configuration attaches one
                .env_remove("ELFEN_SIDE_CPUS")
                .env_remove("ELFEN_PAGE")
                .env_remove("ELFEN_LANE");
            if kind == ProgramKind::LuceneIndex {
                let tmp = super::java::JobTmp::create()?;
                cmd.env("ELFEN_LUCENE_JAVA_OPTS", tmp.java_opts());
                me.tmp.push(tmp);
            }
            // A program that checks attaches to its lane, and all of its
            // threads (a JVM's compiler and collector too) stay on the lane's CPU.
            let mut cpu = t.cpu;
            if let (Some(pg), Some(lane)) = (&page, t.lane) {
                cmd.env("ELFEN_PAGE", pg.path())
                    .env("ELFEN_LANE", lane.to_string());
                cpu = cpu.or(Some(pg.read_controller(lane)?.cpu));
            }
            let (cpu, sched, procs) = (cpu, plan.sched, procs.clone());
            // SAFETY: only async-signal-safe calls (sched_setaffinity,
            // sched_setscheduler, prctl, open, write, close) between fork and
            // exec; nothing allocates.
            unsafe {
                cmd.pre_exec(move || {
                    libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGKILL as libc::c_ulong,
                        0,
                        0,
                        0,
                    );
                    if let Some(p) = &procs {
                        let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
                        if fd < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        let w = libc::write(fd, b"0".as_ptr().cast(), 1);
                        libc::close(fd);
                        if w != 1 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    if let Some(c) = cpu {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(c as usize, &mut set);
                        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    if sched == SchedClass::Idle {
                        let p = libc::sched_param { sched_priority: 0 };
                        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
            let mut child = cmd
                .spawn()
                .map_err(|e| BenchError::Batch(format!("starting {:?}: {e}", argv.join(" "))))?;
            if let Some(out) = child.stdout.take() {
                me.reported.push(super::java::follow(out));
            }
            if let Some(err) = child.stderr.take() {
                me.stderr.push(super::java::follow_stderr(err));
            }
            me.children.push(ChildGuard::new(child).with_tree());
            me.lanes.push(t.lane.filter(|_| page.is_some()));
        }
        me.page = page;
        me.wait_reporting()?;
        Ok(me)
    }

    /// A program that reports its progress (the Java job: JVM start,
    /// corpus load, JIT) counts as started once every instance reported
    /// work and then ran [`super::java::WARM_UP`] longer, so measured
    /// windows see it working, not starting.
    fn wait_reporting(&mut self) -> Result<()> {
        if self.reported.is_empty() {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let mut warm_from = None;
        loop {
            if self.reported.iter().all(|d| d.load(Relaxed) > 0) {
                let since = *warm_from.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= super::java::WARM_UP {
                    return Ok(());
                }
            }
            if !self.alive() {
                // let the stderr readers drain what it wrote last
                std::thread::sleep(std::time::Duration::from_millis(100));
                return Err(BenchError::Batch(format!(
                    "{} ({}) exited while starting; its stderr ends with:\n{}",
                    self.kind,
                    super::java::argv().join(" "),
                    self.stderr_tail()
                )));
            }
            if t0.elapsed() > super::java::START_TIMEOUT {
                return Err(BenchError::Batch(format!(
                    "{} reported no progress within {:?}; its stderr ends with:\n{}",
                    self.kind,
                    super::java::START_TIMEOUT,
                    self.stderr_tail()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The stderr tail of the first instance that wrote any.
    fn stderr_tail(&self) -> String {
        self.stderr
            .iter()
            .map(|t| super::java::tail_text(t))
            .find(|t| !t.is_empty())
            .unwrap_or_else(|| "(nothing)".into())
    }
}

impl BatchRun for ProgramProcess {
    fn pids(&self) -> Vec<u32> {
        self.children
            .iter()
            .flat_map(|c| proc::process_tree(c.pid()))
            .collect()
    }

    fn go(&self) {}

    fn alive(&mut self) -> bool {
        self.children.iter_mut().all(ChildGuard::running)
    }

    fn sample(&self) -> BatchSample {
        let at_ns = elfen_shm::clock::monotonic_ns();
        let threads = self
            .children
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pids = proc::process_tree(c.pid());
                let (mut on, mut wait) = (0, 0);
                for &p in &pids {
                    for t in proc::thread_ids(p) {
                        let s = proc::thread_schedstat(p, t).unwrap_or_default();
                        on += s.on_cpu_ns;
                        wait += s.wait_ns;
                    }
                }
                let units = match self.kind {
                    ProgramKind::Xz => pids.iter().map(|&p| proc::read_chars(p)).sum(),
                    ProgramKind::LuceneIndex => self.reported.get(i).map_or(0, |d| d.load(Relaxed)),
                    _ => on,
                };
                let mut t = ThreadSample {
                    units,
                    on_cpu_ns: on,
                    wait_ns: wait,
                    ..ThreadSample::default()
                };
                if let (Some(pg), Some(Some(lane))) = (&self.page, self.lanes.get(i)) {
                    if let Ok(b) = pg.batch(*lane) {
                        let ns = |ticks: u64| pg.clock().ticks_to_ns(ticks);
                        t.naps = b.naps.load(Relaxed);
                        t.wakes = b.wakes.load(Relaxed);
                        t.run_ns = ns(b.run_ticks.load(Relaxed));
                        t.corun_ns = ns(b.corun_ticks.load(Relaxed));
                        // the JVM's other threads wait too: batch code's
                        // execution is its run time, capped by CPU time
                        t.wait_ns = 0;
                    }
                }
                t
            })
            .collect();
        BatchSample { at_ns, threads }
    }
}

impl Drop for ProgramProcess {
    fn drop(&mut self) {
        for c in &mut self.children {
            c.stop();
        }
        // the children are gone: their temporary directories go too
        self.tmp.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchProgram, ThreadPlan};
    use elfen_runtime::NapChoice;

    #[test]
    fn names_parse_and_inputs_are_deterministic() {
        for p in ProgramKind::ALL {
            assert_eq!(p.name().parse::<ProgramKind>().unwrap(), p);
        }
        let e = "gzip".parse::<ProgramKind>().unwrap_err().to_string();
        assert!(e.contains("gzip") && e.contains("7zz"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        make_input(&a, 10_000).unwrap();
        make_input(&b, 10_000).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(std::fs::metadata(&a).unwrap().len(), 10_000);
    }

    #[test]
    fn a_program_runs_pinned_and_its_progress_is_measured_from_outside() {
        let kind = ProgramKind::Xz;
        if let Err(e) = kind.check() {
            panic!("{e}");
        }
        let d = tempfile::tempdir().unwrap();
        let input = input_path(d.path());
        make_input(&input, 32 << 20).unwrap();
        let cpu = elfen_topo::current_affinity().unwrap()[0];
        let plan = BatchPlan {
            program: BatchProgram::Program(kind),
            stream_mib: 8,
            threads: vec![ThreadPlan {
                cpu: Some(cpu),
                lane: None,
            }],
            page: None,
            nap: NapChoice::Spin,
            sched: SchedClass::Idle,
        };
        let mut p = ProgramProcess::spawn(kind, &plan, &input, None).unwrap();
        let s0 = p.sample();
        // SCHED_IDLE on a CPU other tests may keep busy: it gets CPU time
        // eventually, not within any fixed window
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let d1 = loop {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let d = p.sample().since(&s0);
            let t = d.total();
            if (t.units > 0 && t.on_cpu_ns > 0) || std::time::Instant::now() >= deadline {
                break d;
            }
        };
        assert!(p.alive());
        assert!(d1.total().units > 0, "xz read nothing in 10 s: {d1:?}");
        assert!(d1.total().on_cpu_ns > 0, "xz never ran in 10 s: {d1:?}");
        let pid = p.pids()[0];
        let aff = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let allowed = aff
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        assert_eq!(allowed, cpu.to_string());
        // SAFETY: a plain query of another process's policy.
        let policy = unsafe { libc::sched_getscheduler(pid as libc::pid_t) };
        assert_eq!(policy, libc::SCHED_IDLE);
        drop(p);
        assert!(!elfen_shm::pid_alive(pid), "killed and reaped on drop");
    }
}
