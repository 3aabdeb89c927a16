//! **Unmodified batch programs** from Debian packages, run as they are: no
//! checks, no rebuild. One instance per planned thread, pinned and given
//! its scheduling class (and cgroup) between `fork` and `exec`, so the
//! program never runs outside its plan. Their progress is measured from
//! outside, since they report no work units:
//!
//! - `xz`: bytes of input read (`/proc/<pid>/io` `rchar`) — compression
//!   work done, slowed by memory interference like the real thing;
//! - `stress-ng` and `7zz`: CPU time of the process tree (`schedstat`).

use super::{BatchPlan, BatchRun, BatchSample, ThreadSample};
use crate::error::{BenchError, Result};
use elfen_cmd::proc::{self, SchedClass};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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
}

impl ProgramKind {
    /// Every program.
    pub const ALL: [ProgramKind; 3] = [
        ProgramKind::Xz,
        ProgramKind::StressNg,
        ProgramKind::SevenZip,
    ];

    /// Its name in specs and results.
    pub fn name(self) -> &'static str {
        match self {
            ProgramKind::Xz => "xz",
            ProgramKind::StressNg => "stress-ng",
            ProgramKind::SevenZip => "7zz",
        }
    }

    /// The Debian package that provides it.
    pub fn package(self) -> &'static str {
        match self {
            ProgramKind::Xz => "xz-utils",
            ProgramKind::StressNg => "stress-ng",
            ProgramKind::SevenZip => "7zip",
        }
    }

    /// What its progress counts.
    pub fn unit(self) -> &'static str {
        match self {
            ProgramKind::Xz => "bytes of input compressed",
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
        };
        let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        if self == ProgramKind::Xz {
            v.push(input.display().to_string());
        }
        v
    }

    /// Checks that the program is installed.
    pub fn check(self) -> Result<()> {
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
                expected: "xz, stress-ng or 7zz".into(),
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
    children: Vec<Child>,
}

/// `rchar` of `/proc/<pid>/io`.
fn read_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("rchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `pid` and every process below it.
fn tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        for tid in proc::thread_ids(p) {
            if let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/task/{tid}/children")) {
                out.extend(s.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
        i += 1;
    }
    out
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
        };
        for t in &plan.threads {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let (cpu, sched, procs) = (t.cpu, plan.sched, procs.clone());
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
            let child = cmd
                .spawn()
                .map_err(|e| BenchError::Batch(format!("starting {:?}: {e}", argv.join(" "))))?;
            me.children.push(child);
        }
        Ok(me)
    }
}

impl BatchRun for ProgramProcess {
    fn pids(&self) -> Vec<u32> {
        self.children.iter().flat_map(|c| tree(c.id())).collect()
    }

    fn go(&self) {}

    fn alive(&mut self) -> bool {
        self.children
            .iter_mut()
            .all(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn sample(&self) -> BatchSample {
        let at_ns = elfen_shm::clock::monotonic_ns();
        let threads = self
            .children
            .iter()
            .map(|c| {
                let pids = tree(c.id());
                let (mut on, mut wait) = (0, 0);
                for &p in &pids {
                    for t in proc::thread_ids(p) {
                        let (o, w) = proc::thread_schedstat(p, t).unwrap_or((0, 0));
                        on += o;
                        wait += w;
                    }
                }
                let units = match self.kind {
                    ProgramKind::Xz => pids.iter().map(|&p| read_bytes(p)).sum(),
                    _ => on,
                };
                ThreadSample {
                    units,
                    on_cpu_ns: on,
                    wait_ns: wait,
                    ..ThreadSample::default()
                }
            })
            .collect();
        BatchSample { at_ns, threads }
    }
}

impl Drop for ProgramProcess {
    fn drop(&mut self) {
        for c in &mut self.children {
            for p in tree(c.id()).into_iter().rev() {
                proc::kill_pid(p);
            }
            let _ = c.wait();
        }
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
        std::thread::sleep(std::time::Duration::from_millis(300));
        let d1 = p.sample().since(&s0);
        assert!(p.alive());
        assert!(d1.total().units > 0, "xz read nothing: {d1:?}");
        assert!(d1.total().on_cpu_ns > 0);
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
