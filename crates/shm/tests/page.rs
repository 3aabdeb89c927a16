//! Signal page: create/attach, the permission model (who may write the page
//! file and the batch segment), every bad-input error, and the golden
//! vectors in `testdata/signal/` (regenerate them with
//! `ELFEN_BLESS=1 cargo test -p elfen-shm --test page` after an ABI bump).

use elfen_shm::layout::{self, page_size};
use elfen_shm::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

fn two_lanes() -> PageSpec {
    PageSpec::for_pairs(&[(0, vec![1])], 1, 0)
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The segment's stat, or None once it is freed.
fn seg_stat(id: i32) -> Option<SegmentStat> {
    Segment::stat(id).ok()
}

#[test]
fn create_attach_and_cleanup() {
    let d = tmp();
    let p = d.path().join("sig");
    let page = Page::create(&p, &two_lanes()).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 384);
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["sig"], "one file: the batch lines are no file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let id = page.batch_shmid();
    assert_eq!(
        page.header().batch_shmid.load(Relaxed),
        id as u32,
        "the header names the segment"
    );
    let st = seg_stat(id).unwrap();
    assert_eq!(
        (st.size, st.mode, st.cuid),
        (192, DEFAULT_BATCH_MODE, unsafe { libc::geteuid() })
    );
    assert_eq!(
        DEFAULT_BATCH_MODE, 0o644,
        "no batch region others can write by default"
    );
    assert!(st.marked_for_removal, "freed with its last attachment");

    let lc = Page::attach(&p, Access::Lc).unwrap();
    assert!(lc.page_writable() && !lc.batch_writable());
    let b = Page::attach_expect(&p, Access::Batch, 2).unwrap();
    assert!(!b.page_writable() && b.batch_writable());
    assert_eq!(b.clock(), page.clock());
    assert_eq!(seg_stat(id).unwrap().attached, 3);
    // a store by the LC is seen by the batch side through its own mapping
    lc.lc(0)
        .unwrap()
        .state
        .store(state::pack(true, 1, 0), Relaxed);
    assert!(state::busy(b.lc(0).unwrap().state.load(Relaxed)));
    b.batch(1).unwrap().naps.fetch_add(1, Relaxed);
    assert_eq!(lc.batch(1).unwrap().naps.load(Relaxed), 1);
    let c = b.read_controller(1).unwrap();
    assert_eq!((c.role, c.cpu, c.partners()), (role::BATCH, 1, &[0][..]));
    assert_eq!(b.lane_of_cpu(1), Some(1));
    assert_eq!(b.lane_of_cpu(7), None);
    // read-only handles refuse writes with an error, not a segfault
    let e = b.set_kill(true).unwrap_err().to_string();
    assert!(e.contains("read-only") && e.contains("kill"), "{e}");
    drop(page);
    assert!(!p.exists(), "the creator removes its page file");
    assert!(
        seg_stat(id).is_some(),
        "the segment lives while others have the page attached"
    );
    drop((lc, b));
    assert!(seg_stat(id).is_none(), "and is freed with the last of them");
}

#[test]
fn a_persisted_page_without_holders_is_refused_with_the_reason() {
    let d = tmp();
    let p = d.path().join("sig");
    let mut page = Page::create(&p, &two_lanes()).unwrap();
    let id = page.batch_shmid();
    page.persist();
    drop(page);
    assert!(p.exists(), "persisted");
    assert!(
        seg_stat(id).is_none(),
        "nobody holds it: the segment is gone"
    );
    let e = Page::attach(&p, Access::Observer).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string())
            && e.contains(&format!("shm id {id}"))
            && e.contains(&format!("pid {}", std::process::id()))
            && e.contains("is gone")
            && e.contains("re-create"),
        "{e}"
    );
}

#[test]
fn lc_busy_time_counts_the_running_request() {
    let d = tmp();
    let page = Page::create(d.path().join("sig"), &two_lanes()).unwrap();
    let (c, line) = (page.clock(), page.lc(0).unwrap());
    let ms = |n: u64| c.ns_to_ticks(n * 1_000_000);
    // completed requests' 5 ms, idle: just those
    line.busy_ticks.store(ms(5), Relaxed);
    let done = page.lc_busy_ns(0).unwrap();
    assert!(done.abs_diff(5_000_000) < 50_000, "{done}");
    // busy for the last 20 ms: those 5 ms plus the running 20
    line.busy_since
        .store(c.now().saturating_sub(ms(20)), Relaxed);
    line.state.store(state::pack(true, 1, 0), Relaxed);
    let running = page.lc_busy_ns(0).unwrap();
    assert!((25_000_000..30_000_000).contains(&running), "{running}");
    assert!(page.lc_busy_ns(9).is_err());
}

#[test]
fn create_refuses_an_existing_page_unless_replacing() {
    let d = tmp();
    let p = d.path().join("sig");
    let mut first = Page::create(&p, &two_lanes()).unwrap();
    let e = Page::create(&p, &two_lanes()).unwrap_err().to_string();
    assert!(
        e.contains("already exists")
            && e.contains("still running")
            && e.contains(&users::describe_user(users::euid()))
            && e.contains("create with replace"),
        "{e}"
    );
    first.persist();
    drop(first);
    assert!(p.exists());
    let spec = PageSpec {
        replace: true,
        ..PageSpec::for_pairs(&[(0, vec![1]), (2, vec![3])], 1, 0)
    };
    let second = Page::create(&p, &spec).unwrap();
    assert_eq!(Page::attach(&p, Access::Observer).unwrap().lane_count(), 4);
    drop(second);
    assert!(!p.exists());
    Page::remove(&p).unwrap(); // idempotent
    let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert!(names.is_empty(), "no temp files left: {names:?}");
}

#[test]
fn spec_validation() {
    let mut s = two_lanes();
    s.lanes[1].partners = vec![5];
    assert!(
        Page::create("/nonexistent/x", &s)
            .unwrap_err()
            .to_string()
            .contains("partner 5")
    );
    let mut s = two_lanes();
    s.lanes[1].cpu = 0;
    assert!(
        s.validate()
            .unwrap_err()
            .to_string()
            .contains("cpu 0 appears twice")
    );
    let mut s = two_lanes();
    s.lanes[1].role = role::REQUEST;
    assert!(
        s.validate()
            .unwrap_err()
            .to_string()
            .contains("must be a batch lane")
    );
    let mut s = two_lanes();
    s.lanes[0].role = role::BATCH;
    assert!(
        s.validate()
            .unwrap_err()
            .to_string()
            .contains("watches exactly one request lane")
    );
    let s = PageSpec {
        lanes: vec![],
        ..two_lanes()
    };
    assert!(s.validate().is_err());
    let s = PageSpec::for_pairs(&[(0, (1..8).collect())], 1, 0);
    assert!(s.validate().unwrap_err().to_string().contains("at most 6"));
}

/// A page file `name` in `dir` with `page`'s bytes, naming a new batch
/// segment holding `batch` (kept attached by the returned handle), or
/// naming the id of a segment that no longer exists when `batch` is None.
fn write_pair(dir: &Path, name: &str, page: &[u8], batch: Option<&[u8]>) -> (PathBuf, Segment) {
    let p = dir.join(name);
    let seg = match batch {
        Some(b) => {
            let s = Segment::create(b.len(), 0o644, None).unwrap();
            s.write_bytes(0, b);
            s
        }
        None => Segment::create(64, 0o644, None).unwrap(),
    };
    let mut bytes = page.to_vec();
    let id = if batch.is_some() {
        seg.id()
    } else {
        let gone = Segment::create(64, 0o644, None).unwrap();
        gone.id()
    };
    if bytes.len() >= 56 {
        bytes[52..56].copy_from_slice(&(id as u32).to_le_bytes());
    }
    let _ = std::fs::remove_file(&p);
    std::fs::write(&p, &bytes).unwrap();
    (p, seg)
}

/// The bytes of a fresh two-lane page and its batch segment.
fn good_bytes() -> (Vec<u8>, Vec<u8>) {
    let d = tmp();
    let p = d.path().join("good");
    let page = Page::create(&p, &two_lanes()).unwrap();
    let seg = Segment::attach(page.batch_shmid(), false).unwrap();
    (std::fs::read(&p).unwrap(), seg.read_bytes())
}

fn attach_err(p: &Path) -> String {
    Page::attach(p, Access::Batch).unwrap_err().to_string()
}

#[test]
fn bad_pages_are_clear_errors() {
    let d = tmp();
    let (page, batch) = good_bytes();
    // missing
    let e = attach_err(&d.path().join("absent"));
    assert!(e.contains("absent") && e.contains("does not exist"), "{e}");
    // short
    let (p, _s) = write_pair(d.path(), "short", &page[..12], Some(&batch));
    let e = attach_err(&p);
    assert!(e.contains("12 bytes") && e.contains("shorter"), "{e}");
    // wrong magic
    let mut m = page.clone();
    m[..8].copy_from_slice(b"NOTELFEN");
    let (p, _s) = write_pair(d.path(), "magic", &m, Some(&batch));
    let e = attach_err(&p);
    assert!(e.contains("NOTELFEN") && e.contains("ELFENSIG"), "{e}");
    // wrong version: an ABI-1 page (with its batch file beside it) is refused
    // for its version, before anything looks for a batch region
    let mut v = page.clone();
    v[8..12].copy_from_slice(&1u32.to_le_bytes());
    let (p, _s) = write_pair(d.path(), "v1", &v, Some(&batch));
    let e = attach_err(&p);
    assert!(
        e.contains("ABI version 1") && e.contains("speaks version 2"),
        "{e}"
    );
    // size field disagrees with the file
    let mut t = page.clone();
    t.extend_from_slice(&[0; 64]);
    let (p, _s) = write_pair(d.path(), "long", &t, Some(&batch));
    let e = attach_err(&p);
    assert!(e.contains("total_size") && e.contains("448"), "{e}");
    // lane count disagrees with size
    let mut l = page.clone();
    l[24..28].copy_from_slice(&3u32.to_le_bytes());
    let (p, _s) = write_pair(d.path(), "lanes", &l, Some(&batch));
    let e = attach_err(&p);
    assert!(e.contains("lane_count"), "{e}");
    // expected lane count
    let (p, _good) = write_pair(d.path(), "bad", &page, Some(&batch));
    let e = Page::attach_expect(&p, Access::Batch, 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("lane_count is 2, expected 4"), "{e}");
    // batch segment gone / of another page / wrong magic / wrong size
    let (p, _s) = write_pair(d.path(), "gone", &page, None);
    let e = attach_err(&p);
    assert!(
        e.contains("gone") && e.contains("batch segment") && e.contains("pid "),
        "{e}"
    );
    let (_, other_batch) = good_bytes();
    let (p, _s) = write_pair(d.path(), "other", &page, Some(&other_batch));
    let e = attach_err(&p);
    assert!(e.contains("instance") && e.contains("another page"), "{e}");
    let mut bm = batch.clone();
    bm[0] = b'X';
    let (p, _s) = write_pair(d.path(), "bmagic", &page, Some(&bm));
    let e = attach_err(&p);
    assert!(
        e.contains("batch segment") && e.contains("ELFENBAT") && e.contains("shm id"),
        "{e}"
    );
    let (p, _s) = write_pair(d.path(), "bshort", &page, Some(&batch[..128]));
    let e = attach_err(&p);
    assert!(
        e.contains("batch segment") && e.contains("total_size"),
        "{e}"
    );
    // lane out of range
    let (p, _s) = write_pair(d.path(), "ok", &page, Some(&batch));
    let page = Page::attach(&p, Access::Observer).unwrap();
    let e = page.lc(2).unwrap_err().to_string();
    assert!(
        e.contains("lane 2 is out of range") && e.contains("2 lanes"),
        "{e}"
    );
    assert!(page.batch(9).is_err() && page.controller(u32::MAX).is_err());
}

/// Runs `f` in a forked child as user nobody (uid 65534) with group `gid`
/// and no supplementary groups; its result is the child's exit status.
/// The child makes syscalls only (plus what glibc's fork-safe malloc
/// allows); root only.
fn as_nobody(gid: u32, f: impl FnOnce() -> bool) -> bool {
    // SAFETY: the child only switches ids, runs `f` and exits.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(gid) == 0
                && libc::setuid(65534) == 0
                && f();
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn permission_model_is_enforced_by_the_os() {
    // A batch user (here: nobody, uid 65534) may read the page and, only
    // when it is in the page's batch group, write the batch segment; it
    // can never write the page file. Needs root to switch users; elsewhere
    // the modes are still checked.
    let d = tmp();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = d.path().join("perm");
    let page = Page::create(&p, &two_lanes()).unwrap();
    assert_eq!(Segment::stat(page.batch_shmid()).unwrap().mode, 0o644);
    if !is_root() {
        let why = "switches to a batch user (the modes were checked)";
        elfen_cmd::skip::skip(elfen_cmd::skip::Need::Root, why);
        return;
    }
    let sh_as_nobody = |script: &str| {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap()
            .success()
    };
    let page_s = p.display().to_string();
    assert!(
        sh_as_nobody(&format!("exec 3<'{page_s}'")),
        "others can read the page"
    );
    assert!(
        !sh_as_nobody(&format!("exec 3<>'{page_s}'")),
        "others must not write the page"
    );
    assert!(
        !sh_as_nobody(&format!("truncate -s 0 '{page_s}'")),
        "others must not truncate the page"
    );
    let id = page.batch_shmid();
    assert!(
        as_nobody(65534, || Segment::attach(id, false).is_ok()),
        "others read the batch segment (observers)"
    );
    assert!(
        as_nobody(65534, || Segment::attach(id, true)
            .is_err_and(|e| e.raw_os_error() == Some(libc::EACCES))),
        "outside a batch group: no write access to the batch segment"
    );
    assert!(
        as_nobody(65534, || Page::attach(&p, Access::Batch)
            .is_err_and(|e| e.to_string().contains("permission denied")
                && e.to_string().contains("batch_group"))),
        "a batch attach says why"
    );
    assert!(
        as_nobody(65534, || Page::attach(&p, Access::Observer).is_ok()),
        "an observer attaches"
    );
    // neither remove nor change the segment: only its owner may
    assert!(
        as_nobody(65534, || unsafe {
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        }),
        "others cannot remove the segment"
    );
    // with a batch group, its members write the batch segment
    let q = d.path().join("perm2");
    let page2 = Page::create(&q, &two_lanes().with_batch_group(65534)).unwrap();
    let st = Segment::stat(page2.batch_shmid()).unwrap();
    assert_eq!((st.gid, st.mode), (65534, 0o664));
    assert!(
        as_nobody(65534, || Page::attach(&q, Access::Batch).is_ok()),
        "a member of the batch group attaches batch threads"
    );
    assert!(
        !as_nobody(1, || Page::attach(&q, Access::Batch).is_ok()),
        "outside the batch group: refused"
    );
}

#[test]
fn untrusted_page_files_are_refused_naming_owner_and_mode() {
    let d = tmp();
    let p = d.path().join("sig");
    let mut page = Page::create(&p, &two_lanes()).unwrap();
    page.persist();
    use std::os::unix::fs::PermissionsExt;
    // writable by its group
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).unwrap();
    let e = Page::attach(&p, Access::Observer).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string())
            && e.contains("mode 664")
            && e.contains("group or other users can write it"),
        "{e}"
    );
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o646)).unwrap();
    assert!(Page::attach(&p, Access::Lc).is_err());
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(Page::attach(&p, Access::Lc).is_ok());
    // a FIFO squatting the name: refused at once, not waited on
    let f = d.path().join("fifo");
    let c = std::ffi::CString::new(f.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let e = Page::attach(&f, Access::Observer).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    if !is_root() {
        let why = "gives a page file to another user (the modes were checked)";
        elfen_cmd::skip::skip(elfen_cmd::skip::Need::Root, why);
        return;
    }
    // owned by another user (a squatter): refused, naming them
    std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    let e = Page::attach(&p, Access::Lc).unwrap_err().to_string();
    assert!(
        e.contains("user nobody (uid 65534)") && e.contains("neither root nor this process's user"),
        "{e}"
    );
    let holder = Page::holder(&p).unwrap();
    assert!(!holder.trusted_by(0) && holder.trusted_by(65534));
    assert!(
        holder
            .describe()
            .contains("user nobody (uid 65534), mode 644")
    );
    // creating at a name another user holds: says who and how to clear it
    let e = Page::create(&p, &two_lanes()).unwrap_err().to_string();
    assert!(
        e.contains("already exists")
            && e.contains("user nobody (uid 65534)")
            && e.contains(&format!("pid {}", std::process::id()))
            && e.contains("belongs to another user")
            && e.contains(&format!("rm {}", p.display())),
        "{e}"
    );
    // a page file that is not writable by its owner's group is fine for
    // the root-owned case above; drop the persisted page
    drop(page);
}

#[test]
fn a_batch_segment_of_another_user_is_not_the_pages() {
    // The page names a segment id that now belongs to a segment another
    // user created (the page's own was freed and its id reused): refused.
    if !is_root() {
        let why = "creates a segment as another user";
        elfen_cmd::skip::skip(elfen_cmd::skip::Need::Root, why);
        return;
    }
    let d = tmp();
    let p = d.path().join("sig");
    let page = Page::create(&p, &two_lanes()).unwrap();
    let (good, batch) = {
        let s = Segment::attach(page.batch_shmid(), false).unwrap();
        (std::fs::read(&p).unwrap(), s.read_bytes())
    };
    // a segment made by nobody, with this page's batch bytes
    let mut fds = [0i32; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let made = as_nobody(65534, || unsafe {
        let id = libc::shmget(libc::IPC_PRIVATE, 192, libc::IPC_CREAT | 0o666);
        id >= 0 && libc::write(fds[1], (&id as *const i32).cast(), 4) == 4
    });
    assert!(made);
    let mut id = 0i32;
    assert_eq!(
        unsafe { libc::read(fds[0], (&mut id as *mut i32).cast(), 4) },
        4
    );
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    let foreign = Segment::attach(id, true).unwrap();
    // root removes it now: it lives while attached, nothing leaks
    assert_eq!(
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) },
        0
    );
    foreign.write_bytes(0, &batch);
    let mut bytes = good.clone();
    bytes[52..56].copy_from_slice(&(id as u32).to_le_bytes());
    let q = d.path().join("squat");
    std::fs::write(&q, &bytes).unwrap();
    let e = Page::attach(&q, Access::Lc).unwrap_err().to_string();
    assert!(
        e.contains(&format!("shm id {id}"))
            && e.contains("created by user nobody (uid 65534)")
            && e.contains("reused"),
        "{e}"
    );
}

#[test]
fn controller_updates_are_atomic_to_readers() {
    let d = tmp();
    let p = d.path().join("seq");
    let page = Page::create(&p, &two_lanes()).unwrap();
    let reader = Page::attach(&p, Access::Batch).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // every snapshot must be one of the two written configurations
            while !stop.load(Relaxed) {
                let c = reader.read_controller(1).unwrap();
                assert!(c.seq % 2 == 0);
                assert!(
                    (c.policy, c.budget_ns) == (1, 0)
                        || (c.policy, c.budget_ns) == (2, 5_000)
                        || (c.policy, c.budget_ns) == (3, 7_000),
                    "torn read: {c:?}"
                );
            }
        });
        let mut l = two_lanes().lanes[1].clone();
        for i in 0..20_000u64 {
            (l.policy, l.budget_ns) = if i % 2 == 0 { (2, 5_000) } else { (3, 7_000) };
            page.write_controller(1, &l).unwrap();
        }
        stop.store(true, Relaxed);
    });
    assert_eq!(reader.read_controller(1).unwrap().seq, 40_000);
    // a controller that dies mid-rewrite leaves the line odd: readers give up
    page.controller(1)
        .unwrap()
        .config_seq
        .store(40_001, Relaxed);
    let e = reader.read_controller(1).unwrap_err().to_string();
    assert!(e.contains("lane 1") && e.contains("mid-rewrite"), "{e}");
    let mut bad = two_lanes().lanes[1].clone();
    bad.nap = 9;
    assert!(
        page.write_controller(1, &bad)
            .unwrap_err()
            .to_string()
            .contains("nap backend 9")
    );
}

// ---------------------------------------------------------------- golden vectors

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/signal")
}

/// `header.batch_shmid` in the golden vectors: the kernel picks a real
/// page's id, so tests set the bytes they compare to this value (and
/// point a copy of the golden page at a live segment before attaching it).
const GOLDEN_SHMID: u32 = 123_456_789;
/// Offset of `header.batch_shmid`.
const SHMID_OFFSET: usize = std::mem::offset_of!(Header, batch_shmid);

/// The page file's and batch segment's bytes, the segment id set to
/// [`GOLDEN_SHMID`].
fn golden_bytes(page: &Page) -> (Vec<u8>, Vec<u8>) {
    let mut p = std::fs::read(page.path()).unwrap();
    p[SHMID_OFFSET..SHMID_OFFSET + 4].copy_from_slice(&GOLDEN_SHMID.to_le_bytes());
    let b = Segment::attach(page.batch_shmid(), false)
        .unwrap()
        .read_bytes();
    (p, b)
}

/// A copy of the golden page at `dir/name`, naming a new segment holding
/// the golden batch bytes (alive while the returned handle is).
fn golden_copy(dir: &Path, name: &str) -> (PathBuf, Segment) {
    let td = testdata();
    let mut page = std::fs::read(td.join("v2-2lanes.page.bin")).unwrap();
    let batch = std::fs::read(td.join("v2-2lanes.batch.bin")).unwrap();
    let seg = Segment::create(batch.len(), 0o644, None).unwrap();
    seg.write_bytes(0, &batch);
    page[SHMID_OFFSET..SHMID_OFFSET + 4].copy_from_slice(&(seg.id() as u32).to_le_bytes());
    let p = dir.join(name);
    std::fs::write(&p, &page).unwrap();
    (p, seg)
}

/// The golden page: two lanes (cpu 0 request, cpu 1 batch) with every field
/// set to a recognisable value.
fn golden_page(dir: &Path) -> Page {
    let mut spec = two_lanes();
    spec.identity = Some(Identity {
        clock: Clock::MONOTONIC,
        instance: 0x0123_4567_89AB_CDEF,
        creator_pid: 4242,
        created_unix_s: 1_790_000_000,
    });
    spec.lanes[0].policy = 2;
    spec.lanes[0].budget_ns = 2_000_000;
    spec.lanes[1].policy = 2;
    spec.lanes[1].budget_ns = 1_000_000;
    spec.lanes[1].nap = nap::HYBRID;
    spec.lanes[1].ref_ipc_milli = 1500;
    let page = Page::create(dir.join("golden"), &spec).unwrap();
    // one seqlocked rewrite of lane 0 (config_seq 0 -> 2)
    let mut l0 = spec.lanes[0].clone();
    l0.policy = 3;
    page.write_controller(0, &l0).unwrap();
    // the kill switch in mode "paused" over "unmanaged" (bits 0 and 1), the
    // heartbeat fail-safe on at 50 ms, then a fixed heartbeat
    page.set_control(KillMode::Unmanaged).unwrap();
    page.set_kill(true).unwrap();
    page.set_heartbeat_stale(50_000_000).unwrap();
    let h = page.header();
    h.heartbeat.store(5_400_000_000, Relaxed);
    let lc = page.lc(0).unwrap();
    lc.state.store(state::pack(true, 5, 3), Relaxed);
    lc.request_id.store(0xDEAD_BEEF_0000_0042, Relaxed);
    lc.busy_since.store(5_399_000_000, Relaxed);
    lc.busy_ticks.store(123_456_789, Relaxed);
    lc.requests.store(4, Relaxed);
    lc.lc_tid.store(4243, Relaxed);
    let b = page.batch(1).unwrap();
    b.attached.store(1, Relaxed);
    b.napping.store(1, Relaxed);
    b.sleepers.store(1, Relaxed);
    b.naps.store(17, Relaxed);
    b.wakes.store(16, Relaxed);
    b.run_ticks.store(1_000_000, Relaxed);
    b.corun_ticks.store(250_000, Relaxed);
    b.last_change.store(5_399_000_100, Relaxed);
    b.slow_checks.store(40, Relaxed);
    page
}

/// (file, name, offset, size): every named field of a 2-lane page.
fn field_table() -> Vec<(&'static str, String, usize, usize)> {
    use std::mem::offset_of;
    let mut t = Vec::new();
    macro_rules! f {
        ($file:expr, $base:expr, $prefix:expr, $ty:ty, $($field:ident: $size:expr),*) => {
            $(t.push(($file, format!("{}.{}", $prefix, stringify!($field)), $base + offset_of!($ty, $field), $size));)*
        };
    }
    f!("page", 0, "header", Header, magic: 8, abi_version: 4, line_size: 4, total_size: 8,
       lane_count: 4, clock: 4, ticks_per_sec: 8, instance: 8, creator_pid: 4, batch_shmid: 4,
       created_unix_s: 8, heartbeat: 8, control: 8, heartbeat_stale_ns: 8);
    f!("batch", 0, "batch_header", BatchHeader, magic: 8, abi_version: 4, line_size: 4,
       total_size: 8, lane_count: 4, instance: 8);
    for lane in 0..2usize {
        let lc = layout::HEADER_SIZE + lane * layout::LANE_STRIDE;
        f!("page", lc, format!("lane{lane}.lc"), LcLine, state: 8, request_id: 8, busy_since: 8,
           busy_ticks: 8, requests: 8, lc_tid: 4);
        let c = lc + layout::LINE_SIZE;
        f!("page", c, format!("lane{lane}.controller"), ControllerLine, role: 4, cpu: 4,
           policy: 4, nap: 4, budget_ns: 8, ref_ipc_milli: 4, partner_count: 4);
        for i in 0..MAX_PARTNERS {
            t.push((
                "page",
                format!("lane{lane}.controller.partners[{i}]"),
                c + 32 + 4 * i,
                4,
            ));
        }
        f!("page", c, format!("lane{lane}.controller"), ControllerLine, hybrid_spin_ns: 4,
           config_seq: 4);
        let b = layout::BATCH_HEADER_SIZE + lane * layout::BATCH_STRIDE;
        f!("batch", b, format!("lane{lane}.batch"), BatchLine, attached: 4, sleepers: 4,
           napping: 4, naps: 8, wakes: 8, run_ticks: 8, corun_ticks: 8, last_change: 8,
           slow_checks: 8);
    }
    t
}

fn read_le(bytes: &[u8], off: usize, size: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..size].copy_from_slice(&bytes[off..off + size]);
    u64::from_le_bytes(b)
}

#[test]
fn golden_vectors_match_this_build() {
    let d = tmp();
    let page = golden_page(d.path());
    let (got_page, got_batch) = golden_bytes(&page);
    assert_eq!(got_page.len(), page_size(2));
    let dir = testdata();
    let fields: Vec<serde_json::Value> = field_table()
        .into_iter()
        .map(|(file, name, offset, size)| {
            let bytes = if file == "page" {
                &got_page
            } else {
                &got_batch
            };
            serde_json::json!({
                "file": file, "name": name, "offset": offset, "size": size,
                "value": read_le(bytes, offset, size).to_string(),
            })
        })
        .collect();
    let json = serde_json::json!({
        "description": "elfen signal page ABI v2, 2 lanes (lane 0 = cpu 0 request lane, lane 1 = cpu 1 batch lane). \
                        \"page\" is the page file, \"batch\" the batch segment's bytes (a System V shared-memory segment \
                        whose id is header.batch_shmid; the kernel picks it, so the vectors hold 123456789 there and tests set \
                        a real page's bytes to that value before comparing, and point a copy at a live segment before attaching). \
                        Every named field; all other bytes are zero. Values are little-endian unsigned integers, \
                        written as decimal strings. Regenerate: ELFEN_BLESS=1 cargo test -p elfen-shm --test page",
        "abi_version": ABI_VERSION,
        "page_file": "v2-2lanes.page.bin",
        "batch_file": "v2-2lanes.batch.bin",
        "golden_batch_shmid": GOLDEN_SHMID,
        "page_size": got_page.len(),
        "batch_size": got_batch.len(),
        "fields": fields,
    });
    if std::env::var_os("ELFEN_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("v2-2lanes.page.bin"), &got_page).unwrap();
        std::fs::write(dir.join("v2-2lanes.batch.bin"), &got_batch).unwrap();
        std::fs::write(
            dir.join("v2-2lanes.json"),
            serde_json::to_string_pretty(&json).unwrap() + "\n",
        )
        .unwrap();
    }
    let want_page = std::fs::read(dir.join("v2-2lanes.page.bin"))
        .expect("golden page (bless with ELFEN_BLESS=1)");
    let want_batch = std::fs::read(dir.join("v2-2lanes.batch.bin")).unwrap();
    assert!(
        got_page == want_page,
        "page bytes differ from testdata/signal/v2-2lanes.page.bin"
    );
    assert!(
        got_batch == want_batch,
        "batch bytes differ from testdata/signal/v2-2lanes.batch.bin"
    );
    let want_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("v2-2lanes.json")).unwrap())
            .unwrap();
    assert_eq!(
        json, want_json,
        "v2-2lanes.json differs from this build's field table"
    );
}

#[test]
fn golden_vectors_read_through_the_api() {
    // Attach to a copy of the golden page (its batch bytes in a new
    // segment) and read every field the JSON lists.
    let dir = testdata();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("v2-2lanes.json")).unwrap())
            .unwrap();
    let d = tmp();
    let (p, _seg) = golden_copy(d.path(), "copy");
    let page = Page::attach_expect(&p, Access::Observer, 2).unwrap();
    assert!(page.killed() && page.unmanaged());
    assert_eq!(page.kill_mode(), KillMode::Paused);
    assert_eq!(
        page.header().control.load(Relaxed),
        control::KILL | control::UNMANAGED
    );
    assert_eq!(page.heartbeat_stale_ns(), 50_000_000);
    assert_eq!(page.header().heartbeat.load(Relaxed), 5_400_000_000);
    // KILL wins over a stale heartbeat and over UNMANAGED
    assert_eq!(page.batch_mode(), BatchMode::Killed);
    let c0 = page.read_controller(0).unwrap();
    assert_eq!((c0.policy, c0.seq, c0.partners()), (3, 2, &[1][..]));
    let s = page.lc(0).unwrap().state.load(Relaxed);
    assert_eq!(
        (state::busy(s), state::seq(s), state::queue_len(s)),
        (true, 5, 3)
    );
    let bytes = golden_bytes(&page);
    let mut covered = (vec![false; bytes.0.len()], vec![false; bytes.1.len()]);
    for f in json["fields"].as_array().unwrap() {
        let (off, size) = (
            f["offset"].as_u64().unwrap() as usize,
            f["size"].as_u64().unwrap() as usize,
        );
        let want: u64 = f["value"].as_str().unwrap().parse().unwrap();
        let (b, cov) = if f["file"] == "page" {
            (&bytes.0, &mut covered.0)
        } else {
            (&bytes.1, &mut covered.1)
        };
        assert_eq!(read_le(b, off, size), want, "{}", f["name"]);
        cov[off..off + size].iter_mut().for_each(|c| *c = true);
    }
    // everything not named is reserved and zero
    for (b, cov) in [(&bytes.0, &covered.0), (&bytes.1, &covered.1)] {
        for (i, (&byte, &c)) in b.iter().zip(cov.iter()).enumerate() {
            assert!(c || byte == 0, "reserved byte {i} is {byte}");
        }
    }
}

#[test]
fn a_page_can_be_created_with_the_monotonic_clock() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("mono");
    let spec = PageSpec {
        clock: Some(elfen_shm::Clock::MONOTONIC),
        ..two_lanes()
    };
    let page = Page::create(&p, &spec).unwrap();
    assert_eq!(page.clock(), elfen_shm::Clock::MONOTONIC);
    let seen = Page::attach(&p, Access::Observer).unwrap();
    assert_eq!(seen.clock(), elfen_shm::Clock::MONOTONIC);
    assert_eq!(
        seen.header()
            .clock
            .load(std::sync::atomic::Ordering::Relaxed),
        elfen_shm::clock_kind::MONOTONIC_NS
    );
}

#[test]
fn kill_switch_modes_set_both_bits_and_keep_others() {
    let d = tmp();
    let page = Page::create(d.path().join("sig"), &two_lanes()).unwrap();
    let obs = Page::attach(page.path(), Access::Observer).unwrap();
    let word = || obs.header().control.load(Relaxed);
    assert_eq!(
        (obs.kill_mode(), obs.batch_mode()),
        (KillMode::Off, BatchMode::Managed)
    );
    page.set_control(KillMode::Unmanaged).unwrap();
    assert_eq!(word(), control::UNMANAGED);
    assert_eq!(
        (obs.kill_mode(), obs.batch_mode()),
        (KillMode::Unmanaged, BatchMode::Unmanaged)
    );
    // set_kill keeps its old meaning and leaves UNMANAGED alone; KILL wins
    page.set_kill(true).unwrap();
    assert_eq!(word(), control::KILL | control::UNMANAGED);
    assert_eq!(
        (obs.kill_mode(), obs.batch_mode()),
        (KillMode::Paused, BatchMode::Killed)
    );
    page.set_kill(false).unwrap();
    assert_eq!(obs.kill_mode(), KillMode::Unmanaged);
    page.set_control(KillMode::Paused).unwrap();
    assert_eq!(word(), control::KILL);
    page.set_unmanaged(true).unwrap();
    page.set_control(KillMode::Off).unwrap();
    assert_eq!(word(), 0);
    // a bit this version does not define survives set_control
    page.header().control.store(1 << 7, Relaxed);
    page.set_control(KillMode::Paused).unwrap();
    assert_eq!(word(), (1 << 7) | control::KILL);
    page.set_control(KillMode::Off).unwrap();
    assert_eq!(word(), 1 << 7);
    // read-only handles refuse every write, naming what was refused
    for e in [
        obs.set_control(KillMode::Paused).unwrap_err(),
        obs.set_unmanaged(true).unwrap_err(),
    ] {
        assert!(
            e.to_string().contains("read-only") && e.to_string().contains("kill"),
            "{e}"
        );
    }
}

#[test]
fn heartbeat_fail_safe_reads_age_and_staleness() {
    let d = tmp();
    let page = Page::create(d.path().join("sig"), &two_lanes()).unwrap();
    let obs = Page::attach(page.path(), Access::Observer).unwrap();
    // a new page: never beat, check off -> not stale
    assert_eq!(obs.heartbeat_age_ns(), None);
    assert_eq!(obs.heartbeat_stale_ns(), 0);
    assert!(!obs.heartbeat_stale());
    // turning the check on beats first: fresh at once
    page.set_heartbeat_stale(1_000_000_000).unwrap();
    assert_eq!(obs.heartbeat_stale_ns(), 1_000_000_000);
    assert!(obs.heartbeat_age_ns().unwrap() < 1_000_000_000);
    assert!(!obs.heartbeat_stale());
    assert_eq!(obs.batch_mode(), BatchMode::Managed);
    // a heartbeat 2 s in the past is stale and pauses batch, also unmanaged
    let clock = page.clock();
    let past = clock.now() - clock.ns_to_ticks(2_000_000_000);
    page.header().heartbeat.store(past, Relaxed);
    assert!(obs.heartbeat_age_ns().unwrap() >= 2_000_000_000);
    assert!(obs.heartbeat_stale());
    assert_eq!(obs.batch_mode(), BatchMode::Stale);
    page.set_control(KillMode::Unmanaged).unwrap();
    assert_eq!(obs.batch_mode(), BatchMode::Stale);
    // a beat makes it fresh again
    page.beat().unwrap();
    assert!(!obs.heartbeat_stale());
    assert_eq!(obs.batch_mode(), BatchMode::Unmanaged);
    // check off: an old or missing heartbeat is no reason to pause
    page.header().heartbeat.store(0, Relaxed);
    page.set_heartbeat_stale(0).unwrap();
    assert!(!obs.heartbeat_stale());
    assert_eq!(
        obs.header().heartbeat.load(Relaxed),
        0,
        "turning it off does not beat"
    );
    page.set_heartbeat_stale(5).unwrap();
    page.header().heartbeat.store(0, Relaxed);
    assert!(obs.heartbeat_stale(), "on and never beat is stale");
    let e = obs.set_heartbeat_stale(1).unwrap_err().to_string();
    assert!(
        e.contains("read-only") && e.contains("heartbeat_stale_ns"),
        "{e}"
    );
}

#[test]
fn a_zombie_is_not_alive() {
    let mut c = std::process::Command::new("sleep")
        .arg("10")
        .spawn()
        .unwrap();
    let pid = c.id();
    assert!(elfen_shm::pid_alive(pid));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    // killed, not yet reaped: a zombie, still in the process table
    let gone = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(5));
        !elfen_shm::pid_alive(pid)
    });
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "still in the process table"
    );
    c.wait().unwrap();
    assert!(gone, "a zombie counts as not alive");
    assert!(!elfen_shm::pid_alive(pid));
}
