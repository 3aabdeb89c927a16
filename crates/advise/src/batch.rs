//! The **batch work** advise runs: one of elfen's kernels (Stream, the
//! memory streamer; Matrix, the compute hog) in a process of its own —
//! `elfen advise batch-helper`, started by advise for a probe (placed on
//! a lane at a scheduling class) or by the daemon as a knob's `[[batch]]
//! command` (placed by the daemon; unmodified, or instrumented with
//! checks on the daemon's page for the cooperative knobs). It counts its
//! work units into a shared region advise reads (`elfen_shm`'s
//! [`Region`], a memfd opened through `/proc/<advise>/fd/<n>`: nothing is
//! left in `/dev/shm`), and dies with its parent.

use anyhow::Context;
use clap::Args;
use elfen_cmd::child::ChildGuard;
use elfen_cmd::proc::{SchedClass, kill_me_with_parent, set_sched};
use elfen_kernels::{Check, Kernel, KernelKind, NoCheck};
use elfen_runtime::{BatchOptions, BatchThread};
use elfen_shm::region::Region;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of a units region (one counter, a cache line).
const REGION_BYTES: usize = 64;

/// Arguments of the hidden `elfen advise batch-helper`.
#[derive(Debug, Clone, Args)]
pub struct HelperArgs {
    /// The kernel: stream, matrix, loop, flush.
    #[arg(long)]
    pub kernel: String,
    /// The units region to count into (a path, e.g. /proc/PID/fd/N).
    #[arg(long)]
    pub units: PathBuf,
    /// Pin to this CPU.
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Run SCHED_IDLE.
    #[arg(long)]
    pub idle: bool,
    /// Attach to the signal page (ELFEN_PAGE, ELFEN_LANE) as an Elfen
    /// batch thread and check at every work unit.
    #[arg(long)]
    pub checks: bool,
}

/// The runtime's batch thread as the kernels' check.
struct Elfen(BatchThread);

impl Check for Elfen {
    #[inline(always)]
    fn check(&mut self) {
        self.0.check();
    }
}

/// Units per chunk between two stores of the count (about a millisecond of
/// work or less).
fn chunk(kind: KernelKind) -> u64 {
    match kind {
        KernelKind::Stream | KernelKind::Flush => 256,
        KernelKind::Matrix | KernelKind::Loop => 16_384,
    }
}

fn run_forever<C: Check>(kernel: &mut Kernel, check: &mut C, units: &AtomicU64) -> ! {
    let n = chunk(kernel.kind());
    loop {
        kernel.run_units(n, check);
        units.store(kernel.units(), Ordering::Relaxed);
    }
}

/// The helper's `main`: runs the kernel until killed.
pub fn helper_main(a: &HelperArgs) -> anyhow::Result<()> {
    kill_me_with_parent();
    let kind: KernelKind = a
        .kernel
        .parse()
        .map_err(|e| anyhow::anyhow!("--kernel: {e}"))?;
    let region = Region::open(&a.units, REGION_BYTES)
        .with_context(|| format!("opening the units region {}", a.units.display()))?;
    // SAFETY: offset 0 is aligned and inside the region; an AtomicU64 takes
    // any bit pattern.
    let units: &AtomicU64 = unsafe { region.at(0) };
    if let Some(cpu) = a.cpu {
        elfen_topo::pin_current_thread(cpu).with_context(|| format!("pinning to cpu {cpu}"))?;
    }
    if a.idle {
        set_sched(0, SchedClass::Idle).context("SCHED_IDLE")?;
    }
    let mut kernel = Kernel::new(kind);
    if a.checks {
        let page = std::env::var_os("ELFEN_PAGE")
            .context("--checks: ELFEN_PAGE is not set (the daemon sets it in cooperative mode)")?;
        let lane: u32 = std::env::var("ELFEN_LANE")
            .context("--checks: ELFEN_LANE is not set (one batch lane)")?
            .parse()
            .context("ELFEN_LANE")?;
        let page = elfen_shm::Page::attach(Path::new(&page), elfen_shm::Access::Batch)
            .with_context(|| format!("attaching to the signal page {page:?}"))?;
        let bt = BatchThread::attach(
            std::sync::Arc::new(page),
            lane,
            BatchOptions::default().pin(true),
        )
        .with_context(|| format!("attaching to batch lane {lane}"))?;
        run_forever(&mut kernel, &mut Elfen(bt), units)
    }
    run_forever(&mut kernel, &mut NoCheck, units)
}

/// A units region advise reads (the helper writes it).
#[derive(Debug)]
pub struct Units(Region);

impl Units {
    /// A fresh, zeroed region.
    pub fn new() -> anyhow::Result<Units> {
        Ok(Units(
            Region::create(REGION_BYTES).context("creating a units region")?,
        ))
    }

    /// The path the helper opens it by.
    pub fn path(&self) -> String {
        self.0.proc_path()
    }

    /// Units counted so far.
    pub fn get(&self) -> u64 {
        // SAFETY: as in `helper_main`.
        let u: &AtomicU64 = unsafe { self.0.at(0) };
        u.load(Ordering::Relaxed)
    }
}

/// How to start the helper: the program and the arguments before its
/// subcommand (`[elfen, advise]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperCommand(pub Vec<String>);

impl HelperCommand {
    /// This executable's `advise batch-helper`.
    pub fn this_exe() -> anyhow::Result<HelperCommand> {
        let exe = std::env::current_exe().context("locating the elfen executable")?;
        Ok(HelperCommand(vec![
            exe.to_string_lossy().into_owned(),
            "advise".into(),
        ]))
    }

    /// The helper's argv.
    pub fn argv(
        &self,
        kernel: KernelKind,
        units: &Units,
        cpu: Option<u32>,
        idle: bool,
        checks: bool,
    ) -> Vec<String> {
        let mut v = self.0.clone();
        v.extend([
            "batch-helper".into(),
            "--kernel".into(),
            kernel.to_string(),
            "--units".into(),
            units.path(),
        ]);
        if let Some(c) = cpu {
            v.extend(["--cpu".into(), c.to_string()]);
        }
        if idle {
            v.push("--idle".into());
        }
        if checks {
            v.push("--checks".into());
        }
        v
    }
}

/// A helper advise started itself (a probe's co-runner): killed and
/// reaped when dropped.
#[derive(Debug)]
pub struct Helper {
    child: ChildGuard,
    /// Its units.
    pub units: Units,
}

impl Helper {
    /// Starts `kernel` on `cpu`, SCHED_IDLE if `idle`, in its own process
    /// group (a Ctrl-C of the terminal reaches advise, which stops it).
    pub fn spawn(
        cmd: &HelperCommand,
        kernel: KernelKind,
        cpu: u32,
        idle: bool,
    ) -> anyhow::Result<Helper> {
        use std::os::unix::process::CommandExt;
        let units = Units::new()?;
        let argv = cmd.argv(kernel, &units, Some(cpu), idle, false);
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", argv.join(" ")))?;
        Ok(Helper {
            child: ChildGuard::new(child),
            units,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// `None` while it runs; its exit otherwise.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(None) => None,
            Ok(Some(s)) => Some(format!("the batch helper exited ({s})")),
            Err(e) => Some(format!("the batch helper cannot be waited for: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helper_argv_names_its_placement() {
        let u = Units::new().unwrap();
        let c = HelperCommand(vec!["elfen".into(), "advise".into()]);
        let v = c.argv(KernelKind::Stream, &u, Some(1), true, false);
        assert_eq!(
            &v[..5],
            ["elfen", "advise", "batch-helper", "--kernel", "stream"]
        );
        assert!(v.contains(&"--idle".to_string()) && v.contains(&"1".to_string()));
        assert!(v[6].starts_with("/proc/"), "{v:?}");
        let v = c.argv(KernelKind::Matrix, &u, None, false, true);
        assert_eq!(v.last().map(String::as_str), Some("--checks"));
        assert!(!v.contains(&"--cpu".to_string()));
        assert_eq!(u.get(), 0);
    }
}
