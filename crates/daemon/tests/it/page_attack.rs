//! A hostile local user against the running daemon (root, BPF, the cgroup
//! v1 hierarchies; skipped with a printed reason otherwise): the daemon
//! guards a busy LC service while, for a few seconds,
//!
//! - user nobody tries to open, truncate and shrink the page file (there
//!   is no `<page>.batch` file: the batch lines live in a System V
//!   segment) and to attach the batch segment read-write, remove it or
//!   change its permissions — each is refused by the OS;
//! - root (the segment's owner, a permitted writer) garbles every byte of
//!   the batch segment through its own attachment, over and over.
//!
//! Afterwards the daemon still runs, its guard still occupies the batch
//! lane while the LC is busy (its occupation count rises), its metrics
//! endpoint still answers (reading the garbled batch counters as they
//! are), the LC line keeps being published, and SIGTERM stops it cleanly,
//! leaving no page file, no batch segment, no group and no state file.

use crate::common::*;
use crate::live::{daemon_spinner, lc_bursts, scrape, setup, spinner_batch};
use elfen_shm::{Access, Page, Segment};
use std::path::Path;
use std::sync::atomic::Ordering::Acquire;
use std::time::{Duration, Instant};

/// Runs `f` in a forked child as user nobody (uid and gid 65534, no
/// supplementary groups); true if it returned true. The child makes only
/// syscalls.
fn as_nobody(f: impl FnOnce() -> bool) -> bool {
    // SAFETY: the child only switches ids, makes syscalls and exits.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(65534) == 0
                && libc::setuid(65534) == 0
                && f();
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

/// `script` run by /bin/sh as nobody succeeded.
fn sh_as_nobody(script: &str) -> bool {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .uid(65534)
        .gid(65534)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// What nobody managed to do to the page at `page` and its segment `shmid`.
fn attacks_as_nobody(page: &Path, shmid: i32) -> Vec<String> {
    let mut won = Vec::new();
    // the batch lines are no file: nothing of the page's to truncate beside
    // the page file (in /dev/shm anyone may create a file of that name, which
    // nobody maps, so no write is tried there)
    let batch_file = format!("{}.batch", page.display());
    if Path::new(&batch_file).exists() {
        won.push(format!("find a batch file {batch_file} to truncate"));
    }
    for f in [page.display().to_string()] {
        for (what, script) in [
            ("open for writing", format!("exec 3<>'{f}'")),
            ("truncate to 0", format!("truncate -s 0 '{f}'")),
            ("shrink to 64 bytes", format!("truncate -s 64 '{f}'")),
        ] {
            if sh_as_nobody(&script) {
                won.push(format!("{what} {f}"));
            }
        }
    }
    if as_nobody(|| Segment::attach(shmid, true).is_ok()) {
        won.push(format!("attach batch segment {shmid} read-write"));
    }
    // SAFETY (both): shmctl on an id, in the child.
    if as_nobody(|| unsafe { libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut()) } == 0) {
        won.push(format!("remove batch segment {shmid}"));
    }
    if as_nobody(|| unsafe {
        let mut ds: libc::shmid_ds = std::mem::zeroed();
        libc::shmctl(shmid, libc::IPC_STAT, &mut ds) == 0 && {
            ds.shm_perm.mode = 0o666;
            libc::shmctl(shmid, libc::IPC_SET, &mut ds) == 0
        }
    }) {
        won.push(format!("chmod batch segment {shmid} to 666"));
    }
    won
}

/// The value of the metric line starting with `name` in `metrics`.
fn metric(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}

#[test]
fn a_hostile_user_crashes_neither_the_daemon_nor_its_guards() {
    let Some(()) = live_ok("a_hostile_user_crashes_neither_the_daemon_nor_its_guards") else {
        return;
    };
    let _one = serial();
    let s = setup("pa", "", &spinner_batch("spin", "guard"));
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let line = d.wait_for("metrics at http://", Duration::from_secs(1));
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("an address in the line")
        .to_string();
    let (group, _spinner) = daemon_spinner(&d, "spin");
    // The LC: busy 2 ms, idle 2–8 ms, again, from 100 ms after its start.
    let _lc = lc_bursts(&s.lc_name, 0, None, 100, 2_000, (2_000, 8_000));
    d.wait_for("LC service found", Duration::from_secs(5));
    let page = Page::attach(&s.page, Access::Observer).unwrap();
    let shmid = page.batch_shmid();
    let requests = || page.lc(0).unwrap().requests.load(Acquire);
    let occupations = || metric(&scrape(&addr), "elfen_guard_occupations_total{lane=\"1\"");
    assert!(
        wait_until(Duration::from_secs(5), || requests() > 20
            && occupations() > 0.0),
        "the daemon publishes the LC's bursts and its guard occupies:\n{}",
        d.output()
    );
    let (r0, o0) = (requests(), occupations());

    // 1. as nobody: every write-side attack on the page is refused
    let won = attacks_as_nobody(&s.page, shmid);
    assert!(
        won.is_empty(),
        "user nobody succeeded at: {won:?}\n{}",
        d.output()
    );
    // 2. as root, through the segment: garble every byte for 3 s
    let g = Segment::attach(shmid, true).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut bytes = vec![0u8; g.len()];
    let (t0, mut rounds) = (Instant::now(), 0u64);
    while t0.elapsed() < Duration::from_secs(3) {
        if rounds % 2 == 0 {
            for b in &mut bytes {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        } else {
            bytes.fill(0xff);
        }
        g.write_bytes(0, &bytes);
        rounds += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(g);
    assert!(
        elfen_shm::pid_alive(d.pid()),
        "the daemon survived:\n{}",
        d.output()
    );
    // it still guards: the LC line moves, the guard keeps occupying, the
    // endpoint answers with the garbled counters read as they are
    let (r1, o1) = (requests(), occupations());
    assert!(
        wait_until(Duration::from_secs(5), || requests() > r1 + 20
            && occupations() > o1),
        "after the attack the LC line moves ({r0} → {r1} → {}) and the guard occupies \
         ({o0} → {o1} → {}):\n{}",
        requests(),
        occupations(),
        d.output()
    );
    assert_eq!(
        d.threads_named("elfen-guard-1").len(),
        1,
        "the guard thread"
    );
    println!(
        "nobody: every attack refused; garbled the batch segment {rounds} times in 3 s; \
         LC periods published {r0} → {r1} → {}, guard occupations {o0} → {o1} → {}",
        requests(),
        occupations()
    );
    drop(page);
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(10))
        .expect("exits on SIGTERM");
    assert!(status.success(), "SIGTERM exits 0:\n{}", d.output());
    assert!(
        !group.parent().unwrap().exists(),
        "the created group is removed"
    );
    assert!(
        !s.page.exists() && !s.state.exists(),
        "page and state file removed"
    );
    assert!(
        !Path::new(&format!("{}.batch", s.page.display())).exists(),
        "no batch file was ever made"
    );
    assert!(
        Segment::stat(shmid).is_err(),
        "the batch segment is freed with its last user"
    );
}
