//! The **knobs**, run the way an operator runs them: a configuration
//! file per knob (`docs/daemon.md`'s surface, nothing of the daemon's
//! insides) and the real `elfen daemon --config FILE` as a child process,
//! with the batch kernel as its `[[batch]] command`. Per knob the run
//! reads the daemon's threads' CPU time (`schedstat`), its guards'
//! occupation from its metrics endpoint, and the batch process tree's
//! CPU; stopping it is a SIGTERM, after which the daemon restores what it
//! changed — and the run checks that its page and groups are gone.

use crate::batch::{HelperCommand, Units};
use crate::record::{DaemonWindow, Knob, Offered};
use anyhow::Context;
use elfen_daemon::LcTarget;
use elfen_daemon::config::{
    AutoSection, BatchSection, BlindSection, Config, FreezeSection, LcSection, MetricsSection,
    Mode, PageSection, PolicySection, Undelegated, Unfit,
};
use elfen_kernels::KernelKind;
use elfen_policy::PolicyKind;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What every knob's configuration shares.
#[derive(Debug, Clone)]
pub struct KnobContext {
    /// The LC, as found.
    pub target: LcTarget,
    /// `[lc] user`, if given.
    pub user: Option<String>,
    /// The lane pair (`0:1`).
    pub pairs: String,
    /// How to start the batch helper.
    pub helper: HelperCommand,
    /// The batch kernel.
    pub kernel: KernelKind,
    /// The budget of the budget policies, µs.
    pub budget_us: u64,
    /// Where the daemon's state files go (a private directory).
    pub dir: PathBuf,
    /// What the machine offers.
    pub offered: Offered,
}

/// Why no knob can run here (every knob runs the daemon, which needs
/// root), or `None` when they can.
pub fn not_offered(offered: &Offered) -> Option<String> {
    if !offered.root {
        return Some("needs root (the daemon changes cgroups and scheduling classes)".into());
    }
    None
}

/// The daemon's configuration for `knob`, with `units` as the batch
/// kernel's counter, its page at `page` and its metrics at `metrics`.
pub fn config_for(
    knob: Knob,
    cx: &KnobContext,
    units: &Units,
    page: &Path,
    metrics: SocketAddr,
) -> Config {
    let (mode, policy) = match knob {
        Knob::Idle => (Mode::Idle, PolicyKind::BorrowIdle),
        Knob::Guard => (Mode::Guard, PolicyKind::BorrowIdle),
        Knob::Blind => (Mode::Blind, PolicyKind::BorrowIdle),
        Knob::Freeze => (Mode::Freeze, PolicyKind::BorrowIdle),
        Knob::Auto => (Mode::Auto, PolicyKind::BorrowIdle),
        Knob::BorrowIdle => (Mode::Cooperative, PolicyKind::BorrowIdle),
        Knob::FixedBudget => (Mode::Cooperative, PolicyKind::FixedBudget),
        Knob::RefreshBudget => (Mode::Cooperative, PolicyKind::RefreshBudget),
    };
    let budget = matches!(
        policy,
        PolicyKind::FixedBudget | PolicyKind::RefreshBudget | PolicyKind::DynamicRefresh
    );
    let lc = match &cx.target {
        LcTarget::Pid(p) => LcSection {
            pid: Some(*p),
            user: cx.user.clone(),
            ..LcSection::default()
        },
        LcTarget::Comm(c) => LcSection {
            comm: Some(c.clone()),
            user: cx.user.clone(),
            ..LcSection::default()
        },
        // a --cgroup directory (the only host name elfen advise takes)
        LcTarget::Groups(_) => LcSection {
            cgroup: cx.target.dir().map(Path::to_path_buf),
            ..LcSection::default()
        },
    };
    let command = cx
        .helper
        .argv(cx.kernel, units, None, false, knob.cooperative());
    Config {
        page: PageSection {
            path: page.to_path_buf(),
            batch_group: None,
        },
        state_file: cx.dir.join(format!("state-{}.json", knob.name())),
        pairs: Some(cx.pairs.clone()),
        policy: PolicySection {
            kind: policy,
            budget_us: if budget { cx.budget_us.max(1) } else { 0 },
            ..PolicySection::default()
        },
        lc,
        blind: BlindSection {
            buffer_cores: 0,
            ..BlindSection::default()
        },
        // the freeze knob is measured as such, even where the daemon judges
        // it unable to follow the service (it would fall back to idle)
        freeze: FreezeSection {
            unfit: Unfit::Warn,
            ..FreezeSection::default()
        },
        // auto within one window of a few seconds: a decision per second
        auto: AutoSection {
            period_ms: 1000,
            solo_ms: 100,
            confirm: 1,
            min_dwell_s: 2,
            step_down_s: 10,
            ..AutoSection::default()
        },
        metrics: MetricsSection {
            listen: metrics.to_string(),
        },
        batch: vec![BatchSection {
            name: "advise".into(),
            mode,
            command: Some(command),
            confine: Some(matches!(
                mode,
                Mode::Idle | Mode::Guard | Mode::Freeze | Mode::Auto
            )),
            ..BatchSection::default()
        }],
        // a measurement run from a shell: its group at the root where the
        // shell's group is not delegated (said by the daemon)
        undelegated: Undelegated::Root,
        ..Config::default()
    }
}

/// `config` as the TOML file the daemon reads, checked by the daemon's
/// own parser first.
pub fn config_text(config: &Config) -> anyhow::Result<String> {
    let text = toml::to_string(config).context("writing the daemon configuration")?;
    let back = Config::parse(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    back.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(text)
}

/// A free TCP port on 127.0.0.1 for the daemon's metrics (bound and
/// released: the daemon binds it again at once).
pub fn free_metrics_addr() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    l.local_addr().context("finding a free port")
}

/// Lines of the daemon's output kept.
const LOG_LINES: usize = 40;

/// A running `elfen daemon`.
#[derive(Debug)]
pub struct DaemonProc {
    child: Option<Child>,
    log: Arc<Mutex<VecDeque<String>>>,
    metrics: SocketAddr,
    page: PathBuf,
}

impl DaemonProc {
    /// Starts `exe daemon --config config_path` in its own process group
    /// (a Ctrl-C of the terminal reaches advise only, which stops the
    /// daemon with one SIGTERM), asking for SIGTERM if advise dies.
    pub fn spawn(
        exe: &Path,
        config_path: &Path,
        metrics: SocketAddr,
        page: &Path,
    ) -> anyhow::Result<DaemonProc> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(exe);
        cmd.arg("daemon")
            .arg("--config")
            .arg(config_path)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: prctl is async-signal-safe; nothing else runs between
        // fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {} daemon", exe.display()))?;
        let log = Arc::new(Mutex::new(VecDeque::new()));
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                    if l.len() == LOG_LINES {
                        l.pop_front();
                    }
                    l.push_back(line);
                }
            });
        }
        Ok(DaemonProc {
            child: Some(child),
            log,
            metrics,
            page: page.to_path_buf(),
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// `None` while it runs; its exit otherwise.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.as_mut()?.try_wait() {
            Ok(None) => None,
            Ok(Some(s)) => Some(format!("the daemon exited ({s})")),
            Err(e) => Some(format!("the daemon cannot be waited for: {e}")),
        }
    }

    /// The last lines it wrote.
    pub fn log(&self) -> Vec<String> {
        self.log
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Waits until the batch command runs (its units count) and the page
    /// exists, at most `timeout`; the error says why not (the daemon's
    /// exit and its last lines).
    pub fn wait_ready(
        &mut self,
        units: &Units,
        timeout: Duration,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            if let Some(e) = self.exited() {
                // let the readers take its last lines
                std::thread::sleep(Duration::from_millis(50));
                return Err(format!("{e}: {}", self.log().join(" | ")));
            }
            if units.get() > 0 && self.page.exists() {
                return Ok(());
            }
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return Err("interrupted".into());
            }
            if t0.elapsed() > timeout {
                return Err(format!(
                    "the batch command did not run within {:.0} s of the daemon's start: {}",
                    timeout.as_secs_f64(),
                    self.log().join(" | ")
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A reading of its CPU time, its guards' occupation and the batch
    /// processes' (its children's) CPU time.
    pub fn read(&self) -> DaemonReading {
        let pid = self.pid();
        let mut threads = Vec::new();
        for tid in elfen_cmd::proc::thread_ids(pid) {
            let ns = elfen_cmd::proc::thread_schedstat(pid, tid).map_or(0, |s| s.on_cpu_ns);
            let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            threads.push((tid, name, ns));
        }
        let tree = elfen_cmd::proc::process_tree(pid);
        DaemonReading {
            threads,
            occupied_ns: scrape_occupied_ns(self.metrics),
            batch_cpu_ns: elfen_cmd::proc::processes_schedstat(&tree[1.min(tree.len())..])
                .on_cpu_ns,
        }
    }

    /// Stops it: SIGTERM, then up to `timeout` for it to restore and exit
    /// (SIGKILL after that). Returns how it ended and its last lines.
    pub fn stop(mut self, timeout: Duration) -> (String, Vec<String>) {
        let how = self.halt(timeout);
        // let the readers take its last lines
        std::thread::sleep(Duration::from_millis(50));
        (how, self.log())
    }

    fn halt(&mut self, timeout: Duration) -> String {
        let Some(mut child) = self.child.take() else {
            return "already stopped".into();
        };
        if let Ok(Some(s)) = child.try_wait() {
            return format!("had exited ({s})");
        }
        elfen_cmd::proc::signal_pid(child.id(), libc::SIGTERM);
        let t0 = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(s)) => return format!("stopped by SIGTERM: {s}"),
                Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return format!(
                        "did not stop within {:.0} s of SIGTERM: killed (its next start repairs)",
                        timeout.as_secs_f64()
                    );
                }
            }
        }
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        self.halt(Duration::from_secs(15));
    }
}

/// One reading of a daemon.
#[derive(Debug, Clone, Default)]
pub struct DaemonReading {
    /// (tid, name, on-CPU ns) per thread.
    pub threads: Vec<(u32, String, u64)>,
    /// Its guards' occupation so far, ns (metrics), if read.
    pub occupied_ns: Option<u64>,
    /// CPU of its child processes (the batch command), ns.
    pub batch_cpu_ns: u64,
}

impl DaemonReading {
    /// The window from `earlier` to this reading, per thread name.
    pub fn since(&self, earlier: &DaemonReading) -> DaemonWindow {
        let mut by_name: Vec<(String, u64)> = Vec::new();
        let mut total = 0;
        for (tid, name, ns) in &self.threads {
            let before = earlier
                .threads
                .iter()
                .find(|(t, _, _)| t == tid)
                .map_or(0, |(_, _, n)| *n);
            let d = ns.saturating_sub(before);
            total += d;
            match by_name.iter_mut().find(|(n, _)| n == name) {
                Some((_, x)) => *x += d,
                None => by_name.push((name.clone(), d)),
            }
        }
        DaemonWindow {
            cpu_ns: total,
            occupied_ns: match (self.occupied_ns, earlier.occupied_ns) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            },
            threads: by_name,
        }
    }
}

/// The sum of `elfen_guard_occupied_seconds_total` in Prometheus text.
pub fn occupied_from_metrics(text: &str) -> Option<u64> {
    let mut found = false;
    let mut s = 0.0;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("elfen_guard_occupied_seconds_total") {
            if let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
                s += v;
                found = true;
            }
        }
    }
    found.then(|| (s * 1e9).round() as u64)
}

/// Reads the guards' occupation from the daemon's metrics endpoint (0
/// without guards; `None` when the endpoint does not answer).
fn scrape_occupied_ns(addr: SocketAddr) -> Option<u64> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    if !body.starts_with("HTTP/1.") {
        return None;
    }
    Some(occupied_from_metrics(&body).unwrap_or(0))
}

/// What a stopped daemon left behind: its page, and groups named after
/// it in any cgroup hierarchy under `cgroup_root`.
pub fn leftovers(page: &Path, daemon_pid: u32, cgroup_root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if page.exists() {
        out.push(format!("its page {}", page.display()));
    }
    let group = format!("elfen-daemon-{daemon_pid}");
    let mut dirs = vec![cgroup_root.join(&group)];
    if let Ok(rd) = std::fs::read_dir(cgroup_root) {
        dirs.extend(rd.flatten().map(|e| e.path().join(&group)));
    }
    for d in dirs {
        if d.is_dir() {
            out.push(format!("its group {}", d.display()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Availability;

    fn offered(root: bool) -> Offered {
        let no = |d: &str| Availability {
            offered: false,
            detail: d.into(),
        };
        Offered {
            root,
            smt: no("no SMT"),
            counters: no("not offered here: no counters"),
            cat: no("not offered here: no cat_l3"),
            mba: no("not offered here: no mba"),
            mbm: no("not offered here: no MBM"),
        }
    }

    fn cx(dir: &Path) -> KnobContext {
        KnobContext {
            target: LcTarget::Comm("redis-server".into()),
            user: Some("redis".into()),
            pairs: "0:1".into(),
            helper: HelperCommand(vec!["/usr/bin/elfen".into(), "advise".into()]),
            kernel: KernelKind::Stream,
            budget_us: 25,
            dir: dir.to_path_buf(),
            offered: offered(true),
        }
    }

    #[test]
    fn every_knob_is_a_valid_daemon_configuration() {
        let dir = tempfile_dir();
        let units = Units::new().unwrap();
        let addr: SocketAddr = "127.0.0.1:9999".parse().unwrap();
        for k in Knob::ALL {
            let c = config_for(
                k,
                &cx(&dir),
                &units,
                Path::new("/dev/shm/elfen-advise-x"),
                addr,
            );
            let text = config_text(&c).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
            let back = Config::parse(&text).unwrap();
            assert_eq!(back, c, "{}", k.name());
            let b = &back.batch[0];
            assert_eq!(b.command.as_ref().unwrap()[2], "batch-helper");
            assert_eq!(
                b.command.as_ref().unwrap().last().map(String::as_str) == Some("--checks"),
                k.cooperative(),
                "{}",
                k.name()
            );
            assert_eq!(back.lc.comm.as_deref(), Some("redis-server"));
            assert_eq!(back.lc.user.as_deref(), Some("redis"));
            assert_eq!(back.metrics.listen, "127.0.0.1:9999");
        }
        let c = config_for(Knob::FixedBudget, &cx(&dir), &units, Path::new("p"), addr);
        assert_eq!(
            (c.policy.kind, c.policy.budget_us),
            (PolicyKind::FixedBudget, 25)
        );
        let c = config_for(Knob::Idle, &cx(&dir), &units, Path::new("p"), addr);
        assert_eq!(
            (c.batch[0].mode, c.batch[0].confine),
            (Mode::Idle, Some(true))
        );
        assert_eq!(c.policy.budget_us, 0);
    }

    fn tempfile_dir() -> PathBuf {
        std::env::temp_dir()
    }

    #[test]
    fn knobs_this_machine_cannot_run_say_why() {
        let o = offered(true);
        assert_eq!(not_offered(&o), None);
        assert!(not_offered(&offered(false)).unwrap().contains("root"));
    }

    #[test]
    fn guard_occupation_is_read_from_the_metrics() {
        let text = "# HELP x\nelfen_guard_occupied_seconds_total{lane=\"1\",cpu=\"1\"} 1.5\n\
                    elfen_guard_occupied_seconds_total{lane=\"3\",cpu=\"3\"} 0.25\n\
                    elfen_guard_occupations_total{lane=\"1\",cpu=\"1\"} 12\n";
        assert_eq!(occupied_from_metrics(text), Some(1_750_000_000));
        assert_eq!(occupied_from_metrics("elfen_up 1\n"), None);
    }

    #[test]
    fn a_daemon_reading_is_summed_per_thread_name() {
        let a = DaemonReading {
            threads: vec![(1, "elfen".into(), 100), (2, "elfen-guard-1".into(), 50)],
            occupied_ns: Some(10),
            batch_cpu_ns: 0,
        };
        let b = DaemonReading {
            threads: vec![
                (1, "elfen".into(), 150),
                (2, "elfen-guard-1".into(), 450),
                (3, "elfen-guard-1".into(), 5),
            ],
            occupied_ns: Some(310),
            batch_cpu_ns: 0,
        };
        let w = b.since(&a);
        assert_eq!(w.cpu_ns, 50 + 400 + 5);
        assert_eq!(w.occupied_ns, Some(300));
        assert_eq!(
            w.threads,
            vec![
                ("elfen".to_string(), 50),
                ("elfen-guard-1".to_string(), 405)
            ]
        );
    }
}
