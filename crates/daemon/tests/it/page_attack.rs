//! A hostile local user against the running daemon (root, BPF, the cgroup
//! hierarchy; a skip recorded otherwise): the daemon guards a busy LC
//! service while, for a few seconds,
//!
//! - user nobody tries to open, truncate and shrink the page file (there
//!   is no `<page>.batch` file: the batch lines live in a System V
//!   segment) and to attach the batch segment read-write, remove it or
//!   change its permissions — each is refused by the OS with EACCES or
//!   EPERM, while the same steps against a file and a segment nobody owns
//!   go through (the positive control: each step runs, as nobody);
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

/// The user the attacks run as: nobody.
const NOBODY: u32 = 65534;

/// What one attack step, run as nobody, came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The step ran and the OS let it through.
    Done,
    /// The step ran and the OS refused it with this errno.
    Refused(i32),
}

/// Runs `f` in a forked child as user nobody (uid and gid 65534, no
/// supplementary groups); `f` returns 0 when its system call succeeded,
/// else the errno. Panics when the child could not become nobody (then
/// nothing was tried) or died. The child makes only syscalls.
fn as_nobody(f: impl FnOnce() -> i32) -> Step {
    const NOT_NOBODY: i32 = 100;
    // SAFETY: the child only switches ids, makes syscalls and exits.
    let status = unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let became = libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(NOBODY) == 0
                && libc::setuid(NOBODY) == 0
                && libc::geteuid() == NOBODY
                && libc::getegid() == NOBODY;
            if !became {
                libc::_exit(NOT_NOBODY);
            }
            libc::_exit(f().clamp(0, NOT_NOBODY - 1));
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid, "waitpid");
        status
    };
    assert!(
        libc::WIFEXITED(status),
        "the attacking child died (wait status {status:#x})"
    );
    match libc::WEXITSTATUS(status) {
        0 => Step::Done,
        NOT_NOBODY => panic!("the attacking child could not become uid/gid {NOBODY}"),
        e => Step::Refused(e),
    }
}

/// The errno of the last failed call (in the child).
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
}

/// The attack steps, each as a system call run as nobody against the page
/// file `file` and the batch segment `shmid`: (what, outcome).
fn attack_steps(file: &Path, shmid: i32) -> Vec<(&'static str, Step)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(file.as_os_str().as_bytes()).unwrap();
    let path = c.as_ptr();
    // SAFETY (every step): system calls on a valid C string and an id, in
    // the child.
    vec![
        (
            "open the page file for writing",
            as_nobody(|| unsafe {
                let fd = libc::open(path, libc::O_RDWR);
                if fd < 0 {
                    errno()
                } else {
                    libc::close(fd);
                    0
                }
            }),
        ),
        (
            "truncate the page file to 0",
            as_nobody(|| unsafe {
                if libc::truncate(path, 0) == 0 {
                    0
                } else {
                    errno()
                }
            }),
        ),
        (
            "shrink the page file to 64 bytes",
            as_nobody(|| unsafe {
                if libc::truncate(path, 64) == 0 {
                    0
                } else {
                    errno()
                }
            }),
        ),
        (
            "attach the batch segment read-write",
            as_nobody(|| unsafe {
                let at = libc::shmat(shmid, std::ptr::null(), 0);
                if at as isize == -1 {
                    errno()
                } else {
                    libc::shmdt(at);
                    0
                }
            }),
        ),
        (
            "chmod the batch segment to 666",
            as_nobody(|| unsafe {
                let mut ds: libc::shmid_ds = std::mem::zeroed();
                if libc::shmctl(shmid, libc::IPC_STAT, &mut ds) != 0 {
                    return errno();
                }
                ds.shm_perm.mode = 0o666;
                if libc::shmctl(shmid, libc::IPC_SET, &mut ds) == 0 {
                    0
                } else {
                    errno()
                }
            }),
        ),
        (
            "remove the batch segment",
            as_nobody(|| unsafe {
                if libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut()) == 0 {
                    0
                } else {
                    errno()
                }
            }),
        ),
    ]
}

/// The positive control: the same steps, as nobody, against a file and a
/// segment nobody owns, all go through — so each step runs (the child
/// became nobody, the calls work) and a refusal on the daemon's page is the
/// OS's permission check, not a step that never ran.
fn control_steps(dir: &Path) -> Vec<(&'static str, Step)> {
    use std::os::unix::fs::PermissionsExt;
    // nobody must reach the file: the directory open to all, the file its own
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = dir.join("control-page");
    std::fs::write(&file, vec![0u8; 4096]).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&file, Some(NOBODY), Some(NOBODY)).unwrap();
    let seg = Segment::create(4096, 0o600, None).expect("a control segment");
    // SAFETY: IPC_STAT / IPC_SET on a segment this process created.
    unsafe {
        let mut ds: libc::shmid_ds = std::mem::zeroed();
        assert_eq!(libc::shmctl(seg.id(), libc::IPC_STAT, &mut ds), 0);
        ds.shm_perm.uid = NOBODY;
        ds.shm_perm.gid = NOBODY;
        assert_eq!(
            libc::shmctl(seg.id(), libc::IPC_SET, &mut ds),
            0,
            "chown the control segment"
        );
    }
    let steps = attack_steps(&file, seg.id());
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        64,
        "the control file was truncated, then grown to 64 bytes: {steps:?}"
    );
    steps
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
    let addr = crate::coalesce::metrics_addr(&d);
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

    // 1. as nobody: every write-side attack on the page is refused by the
    // OS's permission check — each step shown to work on a control file and
    // segment of nobody's own first
    let control_dir = tempfile::tempdir().unwrap();
    for (what, step) in control_steps(control_dir.path()) {
        assert_eq!(
            step,
            Step::Done,
            "control: nobody could not {what} of its own"
        );
    }
    let batch_file = format!("{}.batch", s.page.display());
    assert!(
        !Path::new(&batch_file).exists(),
        "a batch file {batch_file} to truncate"
    );
    let size = std::fs::metadata(&s.page).unwrap().len();
    for (what, step) in attack_steps(&s.page, shmid) {
        assert!(
            matches!(step, Step::Refused(e) if e == libc::EACCES || e == libc::EPERM),
            "user nobody tried to {what}: {step:?} (wanted refused with EACCES or EPERM)\n{}",
            d.output()
        );
    }
    assert_eq!(
        std::fs::metadata(&s.page).unwrap().len(),
        size,
        "the page file keeps its size"
    );
    assert!(Segment::exists(shmid), "the batch segment is still there");
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
