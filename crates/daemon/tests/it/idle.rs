//! The `idle` mode yields to the LC as a whole.
//!
//! A task's SCHED_IDLE ranks it only among the tasks of its own cpu group:
//! a batch group of the cpu controller that is not idle itself competes
//! with the LC at its weight, and its SCHED_IDLE threads run as if at the
//! LC's priority. So:
//!
//! - the plan: a command in `idle` mode is held by a controller that leaves
//!   its scheduling alone (the freezer), and every cpu group the daemon
//!   creates or adopts for a yielding mode is idle as a whole (`cpu.idle`,
//!   its own top group included), or at the minimum weight where
//!   `cpu.idle` is not offered — said in the plan's notes;
//! - live (root, BPF, the cgroup hierarchy; a skip recorded otherwise): an LC
//!   thread of this test that wakes every 2 ms and an `idle`-mode CPU
//!   spinner the daemon starts share cpu 0; the LC's wake-to-run latency
//!   p99 with the spinner running stays near its p99 with the spinner
//!   stopped (medians over short alternating windows; generous slack: at
//!   equal priority it is several ms), the
//!   spinner's cpu group is idle all the way up, and a busy LC leaves it
//!   next to no CPU.

use crate::common::*;
use elfen_cgroup::{Controller, Knob};
use elfen_daemon::config::Config;
use elfen_daemon::plan::Plan;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The wake-up period of the LC thread.
const PERIOD_NS: u64 = 2_000_000;
/// Windows with the batch running, and as many with it stopped.
const WINDOWS: usize = 10;
/// One window.
const WINDOW: Duration = Duration::from_millis(500);

/// A config on a fake v1 root in `dir` (cpu, cpuset, freezer, group
/// `batch`), the daemon's page and state file there too.
fn fake_config(dir: &Path, root: &Path, batch: &str) -> Config {
    let text = format!(
        "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\npairs = \"0:1\"\n\
         [lc]\ncomm = \"x\"\n{batch}",
        dir.join("page").display(),
        dir.join("state.json").display(),
        root.display(),
    );
    Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn idle_command(method: &str) -> String {
    format!(
        "[[batch]]\nname = \"spin\"\nmode = \"idle\"\nidle_method = \"{method}\"\n\
         command = [\"{BIN}\", \"spin-helper\"]\n"
    )
}

#[test]
fn idle_groups_yield_as_a_whole_in_the_plan() {
    if !elfen_daemon::plan::is_root() {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Root,
            "modes other than cooperative need root",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let root = fake_root(d);
    let top = format!("elfen-daemon-{}", std::process::id());

    // a command in idle mode (SCHED_IDLE threads on v1): held by the
    // freezer, not put in a cpu group (unless the daemon's own cpu group is
    // not the root: then in an idle one)
    let plan = Plan::resolve(&fake_config(d, &root, &idle_command("sched_idle"))).unwrap();
    let g = &plan.groups[0];
    let own_cpu_root = elfen_cgroup::Hierarchy::detect("/sys/fs/cgroup")
        .and_then(|h| h.group_of(std::process::id(), Controller::Cpu))
        .map_or(true, |g| g.is_root());
    if own_cpu_root {
        assert_eq!(g.controllers, [Controller::Freezer], "{}", plan.describe());
        assert_eq!(g.cpu_yield, None);
    }

    // cpu_idle on v1: the group and the daemon's top group are idle
    let plan = Plan::resolve(&fake_config(d, &root, &idle_command("cpu_idle"))).unwrap();
    let y = plan.groups[0]
        .cpu_yield
        .clone()
        .expect("a cpu group yields");
    let names: Vec<&str> = y.groups.iter().map(|p| p.as_str()).collect();
    assert_eq!(names, [top.clone(), format!("{top}/spin")]);
    assert_eq!(y.knob, Knob::CpuIdle(true));
    assert!(
        plan.describe()
            .contains(&format!("cpu.idle = 1 on cpu group {top}, {top}/spin")),
        "{}",
        plan.describe()
    );

    // an operator's group that is a cpu group is adopted and made idle
    let existing = "[[batch]]\nname = \"jobs\"\nmode = \"idle\"\ncgroup = \"batch\"\n";
    let plan = Plan::resolve(&fake_config(d, &root, existing)).unwrap();
    let g = &plan.groups[0];
    assert!(g.controllers.contains(&Controller::Cpu), "{g:?}");
    let y = g.cpu_yield.clone().expect("adopted");
    assert_eq!(
        (y.groups.len(), y.groups[0].as_str(), y.knob),
        (1, "batch", Knob::CpuIdle(true))
    );

    // a group below a cpu group that is not idle: said
    std::fs::create_dir_all(root.join("cpu/batch/nightly")).unwrap();
    std::fs::write(root.join("cpu/batch/nightly/cpu.idle"), "0\n").unwrap();
    std::fs::create_dir_all(root.join("freezer/batch/nightly")).unwrap();
    let nested = "[[batch]]\nname = \"n\"\nmode = \"idle\"\ncgroup = \"batch/nightly\"\n";
    let plan = Plan::resolve(&fake_config(d, &root, nested)).unwrap();
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("cpu group batch above batch/nightly is not idle")),
        "{:?}",
        plan.notes
    );

    // no cpu.idle offered: the minimum weight, and said
    for dir in [
        root.join("cpu"),
        root.join("cpu/batch"),
        root.join("cpu/batch/nightly"),
    ] {
        let _ = std::fs::remove_file(dir.join("cpu.idle"));
    }
    let plan = Plan::resolve(&fake_config(d, &root, existing)).unwrap();
    let y = plan.groups[0].cpu_yield.clone().expect("adopted");
    assert_eq!(y.knob, Knob::CpuShares(2));
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("cpu.idle is not offered") && n.contains("cpu.shares=2")),
        "{:?}",
        plan.notes
    );
    assert!(
        plan.describe().contains("cpu.shares=2"),
        "{}",
        plan.describe()
    );
}

/// The wake-to-run latency (ns) of each wake-up of this thread, pinned to
/// `cpu`, sleeping until every next multiple of [`PERIOD_NS`] for `span`:
/// how late it runs after its timer was due.
fn wake_latencies(cpu: u32, span: Duration) -> Vec<u64> {
    let _pin = elfen_topo::PinGuard::with_cpus(&[cpu]).expect("pin to the request lane");
    elfen_cmd::proc::set_timer_slack_ns(1);
    let now = elfen_shm::clock::monotonic_ns;
    let end = now() + span.as_nanos() as u64;
    let mut due = now() + PERIOD_NS;
    let mut out = Vec::with_capacity((span.as_nanos() as u64 / PERIOD_NS) as usize + 1);
    while due < end {
        let ts = libc::timespec {
            tv_sec: (due / 1_000_000_000) as libc::time_t,
            tv_nsec: (due % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: an absolute sleep on CLOCK_MONOTONIC; ts outlives the call.
        while unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        } == libc::EINTR
        {}
        out.push(now().saturating_sub(due));
        due += PERIOD_NS;
    }
    out
}

fn p99(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * 0.99).round() as usize]
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The pid of the command the daemon `dpid` started for batch group
/// `name`, from whichever hierarchy holds its group (v1's, or the unified
/// tree at the root).
fn command_pid(dpid: u32, name: &str) -> Option<u32> {
    ["freezer", "cpuset", "cpu", ""].iter().find_map(|c| {
        let f = Path::new("/sys/fs/cgroup")
            .join(c)
            .join(format!("elfen-daemon-{dpid}/{name}/cgroup.procs"));
        std::fs::read_to_string(f)
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    })
}

/// The cpu groups from `pid`'s own up to the root's child, each with its
/// `cpu.idle` and its weight (`cpu.shares` on v1, `cpu.weight` on v2):
/// from the v1 cpu hierarchy, else from the unified tree.
fn cpu_chain(pid: u32) -> Vec<(PathBuf, String, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let line = |want_v1: bool| {
        text.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let (id, ctls, p) = (it.next()?, it.next()?, it.next()?);
            let hit = if want_v1 {
                ctls.split(',').any(|c| c == "cpu")
            } else {
                id == "0" && ctls.is_empty()
            };
            hit.then(|| p.to_string())
        })
    };
    let (base, weight, path) = match line(true) {
        Some(p) => ("/sys/fs/cgroup/cpu", "cpu.shares", p),
        None => (
            "/sys/fs/cgroup",
            "cpu.weight",
            line(false).unwrap_or_else(|| "/".into()),
        ),
    };
    let mut out = Vec::new();
    let mut p = PathBuf::from(path.trim_start_matches('/'));
    while !p.as_os_str().is_empty() {
        let dir = Path::new(base).join(&p);
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "-".into())
        };
        out.push((p.clone(), read("cpu.idle"), read(weight)));
        p = p.parent().map(Path::to_path_buf).unwrap_or_default();
    }
    out
}

fn on_cpu_ns(pid: u32) -> u64 {
    elfen_cmd::proc::thread_schedstat(pid, pid).map_or(0, |s| s.on_cpu_ns)
}

#[test]
fn an_idle_batch_program_leaves_the_lc_its_wake_to_run_latency() {
    let test = "an_idle_batch_program_leaves_the_lc_its_wake_to_run_latency";
    if live_ok(test).is_none() {
        return;
    }
    let _lanes = serial();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let page = PathBuf::from(format!("/dev/shm/{}", unique("idle-page")));
    let config = tmp.path().join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}pairs = \"0:1\"\nheartbeat_ms = 20\n\
             [metrics]\nlisten = \"\"\n[lc]\npid = {}\n\
             [[batch]]\nname = \"spin\"\nmode = \"idle\"\n\
             command = [\"{BIN}\", \"spin-helper\", \"--cpu=0\"]\n",
            page.display(),
            state.display(),
            std::process::id()
        ),
    )
    .unwrap();
    let d = DaemonProc::start(&config, &state, &page);
    d.wait_for("running", Duration::from_secs(10));
    let mut pid = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            pid = command_pid(d.pid(), "spin");
            pid.is_some()
        }),
        "the spinner runs in the daemon's group:\n{}",
        d.output()
    );
    let pid = pid.unwrap();
    // Its cpu group, up to the root's child: each one must be idle as a
    // whole (or at the minimum weight where cpu.idle is not offered).
    let chain = cpu_chain(pid);
    println!(
        "spinner (pid {pid}) cpu groups, innermost first (group, cpu.idle, weight): {chain:?}"
    );
    // SAFETY: a plain query of another process's policy.
    let policy = unsafe { libc::sched_getscheduler(pid as libc::pid_t) };
    // The idle method: SCHED_IDLE threads (v1's default), or the group's
    // cpu.idle (v2's), which makes its threads SCHED_IDLE to the kernel
    // without changing the policy they report.
    assert!(
        policy & !libc::SCHED_RESET_ON_FORK == libc::SCHED_IDLE
            || chain.first().is_some_and(|(_, idle, _)| idle == "1"),
        "the spinner is neither SCHED_IDLE (policy {policy}) nor in a group with cpu.idle = 1: \
         {chain:?}"
    );

    // The LC's wake-to-run latency with the spinner running and with it
    // stopped (wake_series): p99 with it at most 3x alone (measured side by
    // side: not stretched in the VM test bed) or alone + 1 ms (stretched by
    // the slack there), medians over windows. One burst of other work on a shared machine can tip the
    // medians, so the series may run once more (elfen_cmd::rerun: counted
    // in the test log); a batch that is not idle misses the bound in both.
    let (p_with, p_alone) = elfen_cmd::rerun::once_more(
        "one burst of other work on a shared machine can tip a series' medians",
        || {
            let (with, alone) = wake_series(pid);
            assert_timing(
                with as f64 / 1e3,
                Bound::NearReference {
                    reference: alone as f64 / 1e3,
                    ratio: 3.0,
                    plus: 1000.0,
                },
                "the LC's wake-up p99 with the idle batch running, µs, against it alone \
                 (medians over windows)",
            );
            (with, alone)
        },
    );

    // A busy LC: the spinner gets next to none of the CPU (at the LC's
    // priority it would get about half).
    let spin_ns = {
        let _pin = elfen_topo::PinGuard::with_cpus(&[0]).unwrap();
        let c0 = on_cpu_ns(pid);
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(500) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        on_cpu_ns(pid) - c0
    };
    println!(
        "the spinner ran {:.1} ms of a 500 ms busy period of the LC on its CPU",
        spin_ns as f64 / 1e6
    );
    drop(d);

    for (g, idle, shares) in &chain {
        assert!(
            idle == "1" || (idle == "-" && (shares == "2" || shares == "1")),
            "cpu group {} of the idle batch is not idle (cpu.idle {idle}, cpu.shares {shares}): \
             its SCHED_IDLE threads compete with the LC at the group's weight",
            g.display()
        );
    }
    println!(
        "the idle batch's effect on the LC's wake-ups: p99 {:.0} µs with it vs {:.0} µs alone",
        p_with as f64 / 1e3,
        p_alone as f64 / 1e3
    );
    assert!(
        spin_ns < 50_000_000,
        "the idle batch took {:.1} ms of a 500 ms busy period of the LC",
        spin_ns as f64 / 1e6
    );
}

/// The LC's wake-to-run latency p99 with the spinner `pid` running and with
/// it stopped, in short alternating windows so that bursts of other work on
/// the machine hit a few windows of either kind, not one kind: the medians
/// over windows (with, alone), in ns.
fn wake_series(pid: u32) -> (u64, u64) {
    let (mut with, mut alone) = (Vec::new(), Vec::new());
    for _ in 0..WINDOWS {
        elfen_cmd::proc::signal_pid(pid, libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(10));
        alone.push(p99(&mut wake_latencies(0, WINDOW)));
        elfen_cmd::proc::signal_pid(pid, libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(10));
        with.push(p99(&mut wake_latencies(0, WINDOW)));
    }
    let (p_with, p_alone) = (median(&mut with), median(&mut alone));
    println!(
        "LC wake-to-run latency p99 per {} ms window, µs: with the idle spinner {:?}, alone {:?}; \
         medians {:.0} / {:.0} µs",
        WINDOW.as_millis(),
        with.iter().map(|x| x / 1000).collect::<Vec<_>>(),
        alone.iter().map(|x| x / 1000).collect::<Vec<_>>(),
        p_with as f64 / 1e3,
        p_alone as f64 / 1e3
    );
    (p_with, p_alone)
}
