//! A hostile local user against an LC service that serves requests while a
//! batch thread borrows its idle lane (docs/protocol.md, "What a hostile
//! local user can do"):
//!
//! - as user nobody (no batch group): opening any of the page's files for
//!   writing, truncating them, attaching the batch segment read-write,
//!   removing it or changing its permissions is refused by the OS — and
//!   there is no batch file to shrink: the batch lines live in a System V
//!   segment, whose size nobody can change;
//! - as the segment's owner (a permitted writer), every byte of the batch
//!   segment is garbled — random bytes and all ones, over and over — while
//!   the LC serves: the LC keeps serving (its request count keeps rising),
//!   no signal kills the process, and a new attach refuses the garbled
//!   segment with a clear error.
//!
//! Needs root to switch to nobody; without it the test says so and checks
//! only the garbling half.

use crate::common::*;
use elfen_policy::PolicyKind;
use elfen_runtime::{BatchOptions, BatchThread, LcLane};
use elfen_shm::{Access, Page, Segment};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

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

/// Every attack nobody can try on the page's files and its batch segment;
/// returns what succeeded (nothing, if the permission model holds).
fn attacks_as_nobody(page_path: &Path, shmid: i32) -> Vec<String> {
    let mut won = Vec::new();
    let dir = page_path.parent().unwrap();
    // the page's files: the page file, and a batch file if there is one
    let mut files = vec![page_path.to_path_buf()];
    let batch_file = {
        let mut s = page_path.as_os_str().to_owned();
        s.push(".batch");
        std::path::PathBuf::from(s)
    };
    files.push(batch_file);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if !files.contains(&e.path()) {
            files.push(e.path());
        }
    }
    for f in &files {
        let f = f.display();
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
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    if as_nobody(|| Segment::attach(shmid, true).is_ok()) {
        won.push(format!("attach batch segment {shmid} read-write"));
    }
    // SAFETY (all three): shmctl on an id; the child only reports.
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
    // what nobody can do: read it (observers), and nothing else
    assert!(
        as_nobody(|| Segment::attach(shmid, false).is_ok()),
        "nobody reads the batch segment (errno {})",
        errno()
    );
    won
}

#[test]
fn a_hostile_user_cannot_stop_the_lc_and_garbled_batch_lines_do_not_hurt_it() {
    let _serial = serial();
    let Some(fx) = Fixture::new(PolicyKind::BorrowIdle.id(), 0, elfen_shm::nap::FUTEX) else {
        return;
    };
    let page = fx.page.clone();
    let path = page.path().to_path_buf();
    // nobody must reach the page file to attack it
    std::fs::set_permissions(
        path.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let shmid = page.batch_shmid();
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let report = watchdog(Duration::from_secs(120), move || {
        // The LC: 20 µs requests, 50 µs apart, until told to stop.
        let lc = {
            let (page, stop, served) = (page.clone(), stop.clone(), served.clone());
            std::thread::spawn(move || {
                let mut lc = LcLane::attach(page.clone(), 0).unwrap();
                let clock = page.clock();
                let mut id = 0u64;
                while !stop.load(Relaxed) {
                    id += 1;
                    lc.request_begin(id);
                    spin_until(&clock, clock.now() + clock.ns_to_ticks(20_000));
                    lc.request_end();
                    served.fetch_add(1, SeqCst);
                    std::thread::sleep(Duration::from_micros(50));
                }
                id
            })
        };
        // A batch thread on the batch lane, napping in futex while the LC
        // is busy (so the LC reads `sleepers` and wakes it).
        let batch = {
            let (page, stop) = (page.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut bt = BatchThread::attach(page, 1, BatchOptions::default()).unwrap();
                let mut x = 1u64;
                while !stop.load(Relaxed) {
                    bt.check();
                    batch_code(&mut x);
                }
                bt.stats().naps
            })
        };
        wait_for("the LC to serve", || served.load(SeqCst) > 100);
        let mut out = String::new();
        // 1. As nobody: every write-side attack is refused.
        if is_root() {
            let won = attacks_as_nobody(&path, shmid);
            assert!(
                won.is_empty(),
                "user nobody succeeded at: {won:?} (the LC and every guard map the batch lines)"
            );
            out += "nobody: every attack on the page file and the batch segment refused; ";
        } else {
            out += "not root: cannot switch to nobody, the refusals were not tried; ";
        }
        // 2. A permitted writer garbles every byte for ~1.5 s.
        let g = Segment::attach(shmid, true).expect("the owner writes its batch segment");
        let mut rng = Rng::new(0xba7c4);
        let before = served.load(SeqCst);
        let t0 = Instant::now();
        let mut rounds = 0u64;
        let mut bytes = vec![0u8; g.len()];
        while t0.elapsed() < Duration::from_millis(1500) {
            if rounds % 2 == 0 {
                bytes.iter_mut().for_each(|b| *b = rng.next() as u8);
            } else {
                bytes.fill(0xff);
            }
            g.write_bytes(0, &bytes);
            rounds += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
        let during = served.load(SeqCst) - before;
        assert!(
            during > 10,
            "the LC kept serving while its batch lines were garbled ({during} requests in 1.5 s)"
        );
        // a new attach refuses the garbled segment, clearly
        let e = Page::attach(&path, Access::Observer)
            .expect_err("a garbled batch header is refused")
            .to_string();
        assert!(e.contains("batch segment") && e.contains("shm id"), "{e}");
        drop(g);
        stop.store(true, Relaxed);
        let requests = lc.join().expect("the LC thread survived");
        let naps = batch.join().expect("the batch thread survived");
        out += &format!(
            "garbled {rounds} times in 1.5 s: the LC served {during} requests meanwhile \
             ({requests} in all), the batch thread napped {naps} times"
        );
        out
    });
    println!("{report}");
    let shmid = fx.page.batch_shmid();
    drop(fx);
    assert!(
        Segment::stat(shmid).is_err(),
        "the batch segment is freed with its last user"
    );
}
