//! The permission model, enforced by the OS: who may write the page file
//! and the batch segment; untrusted files and foreign segments are refused.

use crate::common::{tmp, two_lanes};
use elfen_shm::*;

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
