//! The memory watermark for real (root, the cgroup v1 memory hierarchy;
//! skipped with the reason otherwise): two batch groups grow; when
//! `MemAvailable` falls below the watermark the daemon kills the group of
//! the lowest priority — whole — even though the other uses more memory;
//! the other group and the LC service live on; the kill is in the daemon's
//! log, its kill log and its metrics; the kernel's OOM killer never fired.
//! Then the limits: memory_max and memory_high are in the group's files and
//! put back at exit.
//!
//! The watermark is set 768 MiB below what is available when the test
//! starts, so the test needs well under a gigabyte whatever the machine.

use crate::common::*;
use crate::live::{scrape, setup};
use elfen_ops::kills::KillLog;
use std::path::Path;
use std::time::Duration;

fn oom_kills() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn mem_available() -> u64 {
    elfen_daemon::isolation::plan::meminfo()
        .1
        .expect("MemAvailable")
}

fn memory_ok(test: &str) -> Option<()> {
    live_ok(test)?;
    if !Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists() {
        println!("skipped {test}: needs the cgroup v1 memory hierarchy at /sys/fs/cgroup/memory");
        return None;
    }
    Some(())
}

fn balloon(name: &str, priority: i32, rate: u64, max: u64, extra: &str) -> String {
    format!(
        "[[batch]]\nname = \"{name}\"\nmode = \"idle\"\npriority = {priority}\n{extra}\
         command = [\"{BIN}\", \"balloon-helper\", \"--rate-mib-s={rate}\", \"--max-mib={max}\"]\n"
    )
}

fn line_has(d: &DaemonProc, text: &str) -> bool {
    d.output().contains(text)
}

fn group_pid(d: &DaemonProc, name: &str) -> Option<u32> {
    let g = Path::new("/sys/fs/cgroup/memory").join(format!("elfen-daemon-{}/{name}", d.pid()));
    std::fs::read_to_string(g.join("cgroup.procs"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn the_lowest_priority_group_is_killed_below_the_watermark() {
    let test = "the_lowest_priority_group_is_killed_below_the_watermark";
    let Some(()) = memory_ok(test) else { return };
    let _one = serial();
    let kills = tempfile::tempdir().unwrap();
    let kill_log = kills.path().join("kills.json");
    let watermark = mem_available().saturating_sub(768 << 20);
    let s = setup(
        "mem",
        &format!(
            "[memory]\nmin_available = {watermark}\npoll_ms = 20\ncooldown_ms = 5000\nkill_log = \"{}\"\n",
            kill_log.display()
        ),
        // "high" holds 512 MiB at once; "low" grows 128 MiB/s: the
        // watermark is crossed while "high" uses more, and "low" goes
        &format!(
            "{}{}",
            balloon("low", 0, 128, 1536, "memory_max = \"2G\"\n"),
            balloon("high", 5, 1024, 512, "memory_max = \"2G\"\n")
        ),
    );
    let lc = lc_helper(&s.lc_name, &["--cpu=0"]);
    let oom_before = oom_kills();
    let d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    assert!(
        d.output().contains("memory watermark: MemAvailable below"),
        "{}",
        d.output()
    );
    assert!(!line_has(&d, "killed batch group"), "killed too early");
    let high = group_pid(&d, "high").expect("high's balloon runs");
    let low = group_pid(&d, "low").expect("low's balloon runs");
    let line = d.wait_for("killed batch group", Duration::from_secs(40));
    assert!(
        line.contains("killed batch group low (priority 0"),
        "{line}"
    );
    // the whole group: its process is gone, the group empty
    assert!(
        wait_until(Duration::from_secs(2), || !elfen_shm::pid_alive(low)),
        "low's balloon still runs"
    );
    assert!(
        wait_until(Duration::from_secs(3), || group_pid(&d, "low").is_none()),
        "the group is empty (once the daemon reaped its command)"
    );
    // nothing else: the other batch group and the LC live on
    assert!(elfen_shm::pid_alive(high), "high's balloon was killed");
    assert!(elfen_shm::pid_alive(lc.pid()), "the LC was killed");
    assert_eq!(oom_kills(), oom_before, "the kernel's OOM killer fired");
    // recorded: the kill log and the metrics
    let log = KillLog::load(&kill_log).unwrap().expect("the kill log");
    assert_eq!(log.total(), 1, "{log:?}");
    let k = &log.kills[0];
    assert_eq!((k.group.as_str(), k.priority), ("low", 0));
    assert_eq!(k.processes, vec![low]);
    assert!(k.left.is_empty() && k.done_mono_ns >= k.detected_mono_ns);
    assert!(k.available_bytes < watermark, "{k:?}");
    let line = d.wait_for("metrics at http://", Duration::from_secs(1));
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("an address");
    let m = scrape(addr);
    assert!(
        m.contains("elfen_batch_kills_total{group=\"low\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("elfen_batch_kills_total{group=\"high\"} 0"),
        "{m}"
    );
    assert!(m.contains("elfen_memory_available_bytes"), "{m}");
    // the command's exit is said too
    d.wait_for("signal: 9", Duration::from_secs(3));
}

#[test]
fn limits_are_written_and_put_back() {
    let test = "limits_are_written_and_put_back";
    let Some(()) = memory_ok(test) else { return };
    let _one = serial();
    let g = TestGroup::new(&unique("lim"), &["memory", "freezer"]);
    let dir = g.dir("memory");
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .unwrap()
            .trim()
            .to_string()
    };
    let (soft0, hard0) = (
        read("memory.soft_limit_in_bytes"),
        read("memory.limit_in_bytes"),
    );
    let s = setup(
        "lim",
        "[memory]\nmin_available = 0\npressure = \"off\"\n",
        &format!(
            "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"{}\"\n\
             memory_high = \"256M\"\nmemory_max = \"512M\"\n",
            g.name
        ),
    );
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    assert_eq!(
        read("memory.soft_limit_in_bytes"),
        (256u64 << 20).to_string()
    );
    assert_eq!(read("memory.limit_in_bytes"), (512u64 << 20).to_string());
    assert!(
        d.output().contains("memory watermark: off"),
        "{}",
        d.output()
    );
    let st = d
        .stop_with(libc::SIGTERM, Duration::from_secs(10))
        .expect("exits");
    assert!(st.success(), "{}", d.output());
    assert_eq!(read("memory.soft_limit_in_bytes"), soft0, "put back");
    assert_eq!(read("memory.limit_in_bytes"), hard0, "put back");
}
