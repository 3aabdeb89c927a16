//! Mode scx for real, on a kernel with sched_ext (the VM test bed's trixie
//! guest, `scripts/vmtest.sh --guest trixie`; elsewhere a recorded skip):
//! `elfen daemon` loads elfen's scheduler for an LC spinner pinned to one
//! CPU of an SMT pair and a batch spinner on its sibling, in an operator's
//! cgroup. Measured by the kernel's own `sched_switch` trace event (the
//! scx crate's tracer, independent of the scheduler), side by side with a
//! window before the daemon: the sibling co-run share, batch progress
//! while the LC idles, the daemon's CPU; then SIGKILL of the daemon: the
//! kernel unloads the scheduler, and the batch is back in the fair class in
//! a group that is still `cpu.idle`. And the kernel unloading the scheduler
//! under a running daemon (SysRq-S): said, the fallback applied and shown.

use crate::common::*;
use crate::scx_tracer::{Intervals, Tracer, overlap, total};
use elfen_cmd::skip::{Need, skip_test};
use elfen_scx::kernel;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The LC spinner's busy and idle periods, µs (wall clock).
const LC_BUSY_US: u64 = 30_000;
const LC_IDLE_US: u64 = 30_000;

/// An SMT pair (the last one) and the other CPUs, or a recorded skip.
fn pair_or_skip(test: &str) -> Option<(u32, u32, Vec<u32>)> {
    live_ok(test)?;
    if !kernel::offered() {
        skip_test(
            test,
            Need::Input(kernel::STATE_FILE.into()),
            format!(
                "kernel {} has no sched_ext (CONFIG_SCHED_CLASS_EXT); scripts/vmtest.sh --guest \
                 trixie runs this test",
                kernel::kernel_release()
            ),
        );
        return None;
    }
    let topo = elfen_topo::Topology::detect().unwrap();
    let Some((a, b)) = topo
        .lanes
        .iter()
        .rev()
        .find_map(|l| l.siblings.iter().find(|&&s| s < l.cpu).map(|&s| (s, l.cpu)))
    else {
        skip_test(
            test,
            Need::Cpus(2),
            "mode scx keeps batch off an LC's SMT sibling: no SMT pair here",
        );
        return None;
    };
    let others: Vec<u32> = topo
        .cpus()
        .into_iter()
        .filter(|&c| c != a && c != b)
        .collect();
    let st = kernel::kernel_state().unwrap();
    assert!(st.idle(), "a sched_ext scheduler is loaded already: {st:?}");
    Some((a, b, others))
}

/// A test's pair of CPUs A:B, the other CPUs (where the test runs now), an
/// operator's cgroup and a batch spinner in it allowed on B only.
struct Rig {
    a: u32,
    b: u32,
    others: Vec<u32>,
    group: TestGroup,
    batch: Proc,
}

/// [`Rig`] for `test` (its group named after `tag`), or a recorded skip.
fn rig(test: &str, tag: &str) -> Option<Rig> {
    let (a, b, others) = pair_or_skip(test)?;
    if !others.is_empty() {
        elfen_topo::set_current_affinity(&others).unwrap();
    }
    let group = TestGroup::new(&unique(tag), &["cpu"]);
    let batch = spinner(&[&format!("--cpu={b}")]);
    group.add(batch.pid());
    Some(Rig {
        a,
        b,
        others,
        group,
        batch,
    })
}

/// A mode-scx daemon's files: its configuration, state file and page.
struct ScxFiles {
    config: PathBuf,
    state: PathBuf,
    page: PathBuf,
}

/// Writes, in `dir`, a configuration of mode scx for the LC `lc_pid`
/// and the batch group `group` (named `name`), pairing `pair`, the signal
/// on `others`, with `sections` (TOML tables) before `[lc]`.
fn scx_config(
    dir: &Path,
    (a, b): (u32, u32),
    others: &[u32],
    lc_pid: u32,
    group: &str,
    name: &str,
    sections: &str,
) -> ScxFiles {
    let state = dir.join("state.json");
    let page = PathBuf::from(format!("/dev/shm/{}", unique("page")));
    let config = dir.join("daemon.toml");
    let cpus = if others.is_empty() {
        String::new()
    } else {
        format!(
            "[signal]\ncpus = [{}]\n",
            others
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    std::fs::write(
        &config,
        format!(
            "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}pairs = \"{a}:{b}\"\n{cpus}{sections}\
             [lc]\npid = {lc_pid}\n[[batch]]\nname = \"{name}\"\nmode = \"scx\"\ncgroup = \"{group}\"\n",
            page.display(),
            state.display(),
        ),
    )
    .unwrap();
    ScxFiles {
        config,
        state,
        page,
    }
}

/// A process's threads.
fn tids(pid: u32) -> HashSet<u32> {
    kernel::threads(pid).unwrap().into_iter().collect()
}

/// The CPU time of every thread of `pid` so far, ns.
fn cpu_ns(pid: u32) -> u64 {
    elfen_cmd::proc::thread_ids(pid)
        .into_iter()
        .filter_map(|t| elfen_cmd::proc::thread_schedstat(pid, t))
        .map(|s| s.on_cpu_ns)
        .sum()
}

/// Each thread of `pid`: (its name, CPU so far in ns).
fn thread_cpu(pid: u32) -> Vec<(u32, String, u64)> {
    elfen_cmd::proc::thread_ids(pid)
        .into_iter()
        .filter_map(|t| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm")).ok()?;
            let ns = elfen_cmd::proc::thread_schedstat(pid, t)?.on_cpu_ns;
            Some((t, name.trim().to_string(), ns))
        })
        .collect()
}

/// One traced window: (LC on A, batch on B) and the events seen.
fn window(tracer: &Tracer, a: u32, b: u32, lc: u32, batch: u32, len: Duration) -> Seen {
    let t = tracer.record(len).expect("the trace");
    let lc_on_a = t.running(a, &tids(lc));
    let batch_on_b = t.running(b, &tids(batch));
    let idle = t.outside(&lc_on_a);
    let mut react_us: Vec<f64> = lc_on_a
        .iter()
        .filter_map(|&(s, _)| {
            batch_on_b
                .iter()
                .find(|&&(x, y)| x <= s && s < y)
                .map(|&(_, e)| (e - s) as f64 / 1e3)
        })
        .collect();
    react_us.sort_by(f64::total_cmp);
    Seen {
        share: overlap(&lc_on_a, &batch_on_b) as f64 / total(&lc_on_a).max(1) as f64,
        lc_ms: total(&lc_on_a) as f64 / 1e6,
        batch_in_idle: overlap(&idle, &batch_on_b) as f64 / total(&idle).max(1) as f64,
        react_us,
        _lc: lc_on_a,
    }
}

#[derive(Debug)]
struct Seen {
    /// Of the LC's on-CPU time on A, the share with batch on B.
    share: f64,
    lc_ms: f64,
    /// Of the time the LC was off A, the share batch ran on B.
    batch_in_idle: f64,
    /// Per LC switch-in that found batch on B: how long it stayed, µs.
    react_us: Vec<f64>,
    _lc: Intervals,
}

/// Sends `sig` to these processes (ours).
fn signal_all(pids: &[u32], sig: i32) {
    for &p in pids {
        elfen_cmd::proc::signal_pid(p, sig);
    }
}

/// Runs `f` with the spinners stopped: enabling and disabling a sched_ext
/// scheduler rewrites kernel text, and under TCG a vCPU that runs that
/// text meanwhile can take a stray int3 (the scx crate's live tests, and
/// docs/vmtest.md's Limits); with the spinners stopped their CPUs idle
/// without a tick. No measured window is inside.
fn with_stopped<T>(pids: &[u32], f: impl FnOnce() -> T) -> T {
    signal_all(pids, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(100));
    let out = f();
    signal_all(pids, libc::SIGCONT);
    out
}

fn quantile(v: &[f64], q: f64) -> f64 {
    v.get(((v.len().max(1) - 1) as f64 * q).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

#[test]
fn scx_mode_keeps_batch_off_the_lc_sibling_and_a_crash_leaves_it_idle() {
    let test = "scx_mode_keeps_batch_off_the_lc_sibling_and_a_crash_leaves_it_idle";
    let _serial = serial();
    let Some(Rig {
        a,
        b,
        others,
        group,
        batch,
    }) = rig(test, "scx")
    else {
        return;
    };
    let lc = lc_helper(
        "elfen-scx-lc",
        &[
            &format!("--cpu={a}"),
            &format!("--busy-us={LC_BUSY_US}"),
            &format!("--idle-min-us={LC_IDLE_US}"),
            &format!("--idle-max-us={LC_IDLE_US}"),
        ],
    );
    let tracer = Tracer::new(&unique("trace")).unwrap();
    let len = Duration::from_secs(4);
    std::thread::sleep(Duration::from_millis(300));
    // before the daemon: nothing keeps batch off the LC's sibling
    let before = window(&tracer, a, b, lc.pid(), batch.pid(), len);

    let dir = tempfile::tempdir().unwrap();
    let ScxFiles {
        config,
        state,
        page,
    } = scx_config(
        dir.path(),
        (a, b),
        &others,
        lc.pid(),
        &group.name,
        "scx",
        "",
    );
    let spinners = [lc.pid(), batch.pid()];
    let d = with_stopped(&spinners, || {
        let d = DaemonProc::start(&config, &state, &page);
        d.wait_for("elfen_lanes runs", Duration::from_secs(20));
        d
    });
    let st = kernel::kernel_state().unwrap();
    assert_eq!(
        (st.state.as_str(), st.ops.as_deref()),
        ("enabled", Some("elfen_lanes")),
        "{}",
        d.output()
    );
    assert_eq!(
        kernel::policy(batch.pid()).unwrap(),
        kernel::SCHED_EXT,
        "the batch spinner is in the ext class"
    );
    let cpu_idle = group.dir("cpu").join("cpu.idle");
    assert_eq!(std::fs::read_to_string(&cpu_idle).unwrap().trim(), "1");
    std::thread::sleep(Duration::from_millis(300));
    let (d0, threads0, t0) = (cpu_ns(d.pid()), thread_cpu(d.pid()), Instant::now());
    let ours = window(&tracer, a, b, lc.pid(), batch.pid(), len);
    let daemon_pct = 100.0 * (cpu_ns(d.pid()) - d0) as f64 / t0.elapsed().as_nanos() as f64;
    let per_thread: Vec<String> = thread_cpu(d.pid())
        .into_iter()
        .map(|(t, name, ns)| {
            let was = threads0.iter().find(|x| x.0 == t).map_or(0, |x| x.2);
            format!(
                "{name} {:.3} %",
                100.0 * (ns - was) as f64 / t0.elapsed().as_nanos() as f64
            )
        })
        .collect();

    let react_p50 = quantile(&ours.react_us, 0.5);
    println!(
        "pair {a}:{b}, LC busy {} ms / idle {} ms on {a}, batch spinner on {b}, {} s windows",
        LC_BUSY_US / 1000,
        LC_IDLE_US / 1000,
        len.as_secs()
    );
    for (name, w) in [("no daemon", &before), ("mode scx", &ours)] {
        println!(
            "{name:>10}: batch on the LC's sibling {:.2} % of the LC's {:.0} ms on CPU; batch ran \
             {:.1} % of the LC's idle time; reaction p50 {:.0} us, p99 {:.0} us over {} switch-ins \
             that found batch there",
            100.0 * w.share,
            w.lc_ms,
            100.0 * w.batch_in_idle,
            quantile(&w.react_us, 0.5),
            quantile(&w.react_us, 0.99),
            w.react_us.len()
        );
    }
    println!(
        "daemon CPU over the window: {daemon_pct:.3} % of a core (target <= 0.2 %); per thread: {}",
        per_thread.join(", ")
    );

    assert!(
        before.lc_ms > 500.0 && ours.lc_ms > 500.0,
        "{before:?} {ours:?}"
    );
    assert!(
        before.share > 0.5,
        "without the daemon batch runs beside the LC: {before:?}"
    );
    assert!(
        ours.share * 2.0 < before.share,
        "mode scx: batch ran beside the LC: {ours:?} (before {before:?})"
    );
    assert!(
        react_p50 < LC_BUSY_US as f64 / 2.0,
        "mode scx: batch should leave the sibling within the LC's busy period: {ours:?}"
    );
    assert!(
        ours.batch_in_idle > 0.3,
        "mode scx: batch should progress while the LC idles: {ours:?}"
    );
    // the 1 % co-run target: under TCG the kick's IPI waits for the host
    // to run the sibling's vCPU thread (the scx crate's live test measured
    // 5.7-19.6 % there), so it is printed, not asserted.
    // The daemon's CPU: under TCG its ticks (upkeep, writer, memory
    // watermark, each ~10 a second) cost 11-17 % of a core in three guest
    // runs, beyond the 0.2 % target even with the bed's slack: printed
    // there, asserted elsewhere (docs/scx.md).
    let share = format!("co-run share {:.2} % (target <= 1 %)", 100.0 * ours.share);
    let cpu = format!("daemon CPU {daemon_pct:.3} % of a core (target <= 0.2 %)");
    if std::env::var("ELFEN_VM").is_ok_and(|v| v == "tcg") {
        println!("timing not asserted: VM under TCG: {share}; {cpu}");
    } else {
        assert!(ours.share <= 0.01, "{share}");
        assert!(daemon_pct <= 0.2, "{cpu}");
    }

    // SIGKILL: the kernel unloads the scheduler; batch is in the fair class
    // (policy still SCHED_EXT, ext disabled) in a group still cpu.idle
    let (st, unload_ms) = with_stopped(&spinners, || {
        let t = Instant::now();
        d.kill_leaving_state();
        let st = wait_state_idle(Duration::from_secs(5));
        (st, t.elapsed().as_secs_f64() * 1e3)
    });
    assert!(st.idle(), "the kernel still runs a scheduler: {st:?}");
    let sched = kernel::task_sched(batch.pid()).unwrap();
    assert_ne!(sched.ext_enabled, Some(true), "{sched:?}");
    assert_eq!(std::fs::read_to_string(&cpu_idle).unwrap().trim(), "1");
    let t_before = cpu_ns(batch.pid());
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        cpu_ns(batch.pid()) > t_before,
        "the batch runs on after the crash"
    );
    println!(
        "after SIGKILL: sched_ext {} within {unload_ms:.0} ms (polled every 20 ms), batch \
         ext enabled {:?}, its group cpu.idle 1, the batch ran on",
        st.state, sched.ext_enabled
    );
    // what the crash left: repaired as the next start would
    match elfen_cgroup::Executor::recover(&state) {
        Ok(r) => println!("cleanup: recovered\n{r}"),
        Err(e) => println!("cleanup: recovery failed: {e}"),
    }
    let _ = elfen_shm::Page::remove(&page);
}

/// The kernel unloads a scheduler on its own: its watchdog (a runnable
/// task left waiting past `timeout_ms`), an error in it, SysRq-S. The
/// daemon takes each the same way, from the exit record: said at WARN with
/// the kernel's reason, `[scx] fallback` (idle here) runs, the group is
/// still `cpu.idle`, the batch runs on in the fair class, `elfen status`'s
/// record and `elfen_scx_running` say why, and SIGTERM still stops the
/// daemon cleanly. The watchdog cannot be made to fire on purpose: with an
/// LC that never idles on A and the batch allowed on its sibling B only,
/// the batch still runs whenever a kernel thread takes A from the LC (the
/// lane opens), so it never waits the watchdog's 30 s. That window is
/// measured first; then SysRq-S makes the kernel unload the scheduler.
#[test]
fn the_kernel_unloading_the_scheduler_is_said_and_the_fallback_runs() {
    let test = "the_kernel_unloading_the_scheduler_is_said_and_the_fallback_runs";
    let _serial = serial();
    let Some(Rig {
        a,
        b,
        others,
        group,
        batch,
    }) = rig(test, "scx-unload")
    else {
        return;
    };
    // an LC that never idles on A: B's lane stays closed while it runs
    let lc = spinner(&[&format!("--cpu={a}")]);

    let dir = tempfile::tempdir().unwrap();
    let ScxFiles {
        config,
        state,
        page,
    } = scx_config(
        dir.path(),
        (a, b),
        &others,
        lc.pid(),
        &group.name,
        "unload",
        "[metrics]\nlisten = \"127.0.0.1:0\"\n[scx]\nfallback = \"idle\"\n",
    );
    let spinners = [lc.pid(), batch.pid()];
    let mut d = with_stopped(&spinners, || {
        let d = DaemonProc::start(&config, &state, &page);
        d.wait_for("elfen_lanes runs", Duration::from_secs(20));
        d
    });
    // the never-idle LC: what the batch on its sibling gets
    let len = Duration::from_secs(5);
    let (lc0, batch0, t0) = (cpu_ns(lc.pid()), cpu_ns(batch.pid()), Instant::now());
    std::thread::sleep(len);
    let wall_ns = t0.elapsed().as_nanos() as f64;
    let (lc_ran, batch_ran) = (cpu_ns(lc.pid()) - lc0, cpu_ns(batch.pid()) - batch0);
    assert!(
        kernel::kernel_state().unwrap().ops.as_deref() == Some("elfen_lanes"),
        "the scheduler ran through the window:\n{}",
        d.output()
    );

    // SysRq-S: the kernel unloads it
    let t = with_stopped(&spinners, || {
        std::fs::write("/proc/sysrq-trigger", "S").expect("writing /proc/sysrq-trigger");
        let t = Instant::now();
        let st = wait_state_idle(Duration::from_secs(5));
        assert!(st.idle(), "the kernel still runs a scheduler: {st:?}");
        t
    });
    let said = d.wait_for(
        "the kernel unloaded the sched_ext scheduler",
        Duration::from_secs(5),
    );
    let seen_ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(said.contains("SysRq"), "the kernel's reason: {said}");
    assert!(said.contains("idle runs instead"), "{said}");
    let sched = kernel::task_sched(batch.pid()).unwrap();
    assert_ne!(sched.ext_enabled, Some(true), "{sched:?}");
    let cpu_idle = group.dir("cpu").join("cpu.idle");
    assert_eq!(std::fs::read_to_string(&cpu_idle).unwrap().trim(), "1");
    let t = cpu_ns(batch.pid());
    std::thread::sleep(Duration::from_millis(500));
    let batch_after = cpu_ns(batch.pid()) - t;
    assert!(
        batch_after > 0,
        "the batch runs on in the fair class once the scheduler is unloaded"
    );
    // what elfen status reads (the health record) and the metrics
    let published = wait_until(patient(Duration::from_secs(3)), || {
        health_of(&page, d.pid()).is_some_and(|g| {
            g.protection.is_some_and(|p| {
                p.active == "idle" && p.scheduler.is_some_and(|s| s.contains("NOT running"))
            })
        })
    });
    let g = health_of(&page, d.pid());
    assert!(published, "the health record: {g:#?}");
    let p = g.unwrap().protection.unwrap();
    assert!(
        p.last_switch
            .as_deref()
            .is_some_and(|s| s.contains("SysRq")),
        "{p:#?}"
    );
    let metrics = crate::live::scrape(&crate::coalesce::metrics_addr(&d));
    for want in [
        "elfen_scx_running{group=\"unload\"} 0",
        "elfen_protection_active{group=\"unload\",mode=\"idle\"} 1",
        "elfen_protection_active{group=\"unload\",mode=\"scx\"} 0",
    ] {
        assert!(metrics.contains(want), "no {want:?} in\n{metrics}");
    }
    println!(
        "pair {a}:{b}, an LC spinner never idle on {a}, batch allowed on {b} only: over {:.1} s \
         the LC ran {:.1} % of {a}, the batch {:.2} % of {b} (while other tasks took {a}); \
         SysRq-S: the daemon said so {seen_ms:.0} ms after it ({}); then the batch ran \
         {:.0} % of {b} over 0.5 s, its group cpu.idle 1, mode idle; status: {}",
        wall_ns / 1e9,
        100.0 * lc_ran as f64 / wall_ns,
        100.0 * batch_ran as f64 / wall_ns,
        line_reason(&said),
        100.0 * batch_after as f64 / 5e8,
        p.scheduler.as_deref().unwrap_or("")
    );
    let status = with_stopped(&spinners, || {
        d.stop_with(libc::SIGTERM, patient(Duration::from_secs(10)))
    })
    .expect("exits on SIGTERM");
    assert!(status.success(), "SIGTERM exits 0:\n{}", d.output());
    let _ = elfen_shm::Page::remove(&page);
}

/// Waits until the kernel runs no sched_ext scheduler (bounded).
fn wait_state_idle(limit: Duration) -> kernel::KernelState {
    let end = Instant::now() + patient(limit);
    loop {
        let st = kernel::kernel_state().unwrap();
        if st.idle() || Instant::now() > end {
            return st;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The batch group's record in the daemon's health file, if published.
fn health_of(page: &Path, pid: u32) -> Option<elfen_ops::health::GroupHealth> {
    elfen_ops::health::DaemonHealth::read(page, pid)
        .ok()
        .flatten()
        .and_then(|h| h.groups.into_iter().next())
}

/// The kernel's reason in the daemon's line (after "scheduler: ", up to
/// what runs instead).
fn line_reason(line: &str) -> &str {
    let r = line.split("sched_ext scheduler: ").nth(1).unwrap_or(line);
    r.split("; ").next().unwrap_or(r)
}
