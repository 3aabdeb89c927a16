//! The page file: opening it as a role needs (and refusing one this process
//! cannot trust), mapping it, and publishing a new one atomically.

use crate::error::ShmError;
use crate::users::{describe_user, euid};
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A shared mapping of a file; unmapped when dropped.
pub(crate) struct Mapping {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    pub(crate) writable: bool,
}

// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn new(file: &File, len: usize, writable: bool) -> std::io::Result<Mapping> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: mapping a file we hold open, with a length we checked
        // against its size; MAP_SHARED so other processes see our stores.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
            writable,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub(crate) fn os<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> ShmError + 'a {
    move |source| ShmError::Os {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Whether process (or thread) `pid` lives: `kill(pid, 0)` succeeds or is
/// refused for permission (it exists, owned by someone else), and it is not
/// a zombie (exited, waiting for its parent to reap it). 0 and ids beyond
/// `i32::MAX` never live.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid as i32, 0) };
    let exists = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !is_zombie(pid)
}

/// Whether `/proc/<pid>/stat` says state `Z` (unreadable: not a zombie).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

pub(crate) fn alive_word(pid: u32) -> &'static str {
    if pid_alive(pid) {
        "still running"
    } else {
        "no longer running"
    }
}

pub(crate) fn random_instance() -> u64 {
    let mut x = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into x.
    let n = unsafe { libc::getrandom((&mut x as *mut u64).cast(), 8, 0) };
    if n != 8 {
        x = crate::clock::monotonic_ns() ^ (u64::from(std::process::id()) << 32);
    }
    x | 1
}

/// The first line of the page file at `path` (None if unreadable or
/// shorter). Never waits (a FIFO squatting the name is read non-blocking).
pub(crate) fn read_first_line(path: &Path) -> Option<[u8; 64]> {
    use std::io::Read;
    let mut b = [0u8; 64];
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .ok()?;
    Some(b)
}

/// The creator pid recorded in the page at `path` (0 if unreadable).
pub(crate) fn read_creator_pid(path: &Path) -> u32 {
    read_first_line(path).map_or(0, |b| {
        u32::from_le_bytes(b[48..52].try_into().expect("4 bytes"))
    })
}

/// Who holds an existing file at `path`, for [`ShmError::Exists`]: its
/// owner, the creator pid its header names, and what to do about it.
pub(crate) fn exists_error(path: &Path) -> ShmError {
    let owner = std::fs::symlink_metadata(path).map(|m| m.uid()).ok();
    let pid = read_creator_pid(path);
    let mine = owner.is_some_and(|u| u == euid() || u == 0);
    ShmError::Exists {
        path: path.to_path_buf(),
        owner: owner.map_or_else(|| "an unknown owner".to_string(), describe_user),
        pid,
        alive: alive_word(pid),
        advice: if mine {
            "remove it or create with replace".to_string()
        } else {
            format!(
                "it belongs to another user, not to this process's ({}) nor to root: \
                 remove it (rm {}, as its owner or root) or choose another page name",
                describe_user(euid()),
                path.display()
            )
        },
    }
}

/// Opens the page file for `role` and refuses one this process cannot
/// trust: not a regular file, writable by its group or by others, or owned
/// by neither root nor this process's user. (Whoever can write the page
/// file can truncate it under every mapping — a SIGBUS in the LC — or
/// steer batch threads, so only its owner may, and the owner must be one
/// this process trusts.)
pub(crate) fn open_page(path: &Path, rw: bool, role: &'static str) -> Result<File, ShmError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(rw)
        // a FIFO squatting the name must not block the open
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ShmError::Missing {
                path: path.to_path_buf(),
            },
            std::io::ErrorKind::PermissionDenied => ShmError::PermissionDenied {
                path: path.to_path_buf(),
                mode: if rw { "read-write" } else { "read-only" },
                role,
            },
            _ => ShmError::Os {
                path: path.to_path_buf(),
                op: "open",
                source: e,
            },
        })?;
    let m = file.metadata().map_err(os(path, "stat"))?;
    let untrusted = |why: String| ShmError::Untrusted {
        path: path.to_path_buf(),
        owner: describe_user(m.uid()),
        mode: m.mode() & 0o7777,
        why,
    };
    if !m.file_type().is_file() {
        return Err(untrusted("it is not a regular file".into()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(untrusted("its group or other users can write it".into()));
    }
    let me = euid();
    if m.uid() != 0 && m.uid() != me {
        return Err(untrusted(format!(
            "it is owned by neither root nor this process's user ({})",
            describe_user(me)
        )));
    }
    Ok(file)
}

/// Maps a file after checking its size covers `header_size`.
pub(crate) fn map_checked(
    path: &Path,
    file: &File,
    header_size: usize,
    rw: bool,
) -> Result<Mapping, ShmError> {
    let size = file.metadata().map_err(os(path, "stat"))?.len();
    if size < header_size as u64 {
        return Err(ShmError::Short {
            path: path.to_path_buf(),
            size,
            need: header_size,
        });
    }
    let len = usize::try_from(size).map_err(|_| ShmError::Short {
        path: path.to_path_buf(),
        size,
        need: header_size,
    })?;
    Mapping::new(file, len, rw).map_err(os(path, "mmap"))
}

/// Writes a new file at a temporary name, fills it through `fill`, and
/// publishes it at `dest` (hard link: fails if `dest` exists; rename when
/// replacing). Returns the open file.
pub(crate) fn publish(
    dest: &Path,
    size: usize,
    mode: u32,
    replace: bool,
    fill: impl FnOnce(&Mapping),
) -> Result<File, ShmError> {
    let tmp = {
        let mut s = dest.as_os_str().to_owned();
        s.push(format!(
            ".tmp{}.{:x}",
            std::process::id(),
            random_instance() & 0xffff_ffff
        ));
        PathBuf::from(s)
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(os(dest, "create"))?;
    let result = (|| {
        // The umask may have cleared bits of `mode`: set it exactly.
        // SAFETY: fchmod on a descriptor we own.
        if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } != 0 {
            return Err(os(dest, "chmod")(std::io::Error::last_os_error()));
        }
        file.set_len(size as u64).map_err(os(dest, "truncate"))?;
        let map = Mapping::new(&file, size, true).map_err(os(dest, "mmap"))?;
        fill(&map);
        drop(map);
        if replace {
            std::fs::rename(&tmp, dest).map_err(|e| match e.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) if dest.exists() => exists_error(dest),
                _ => os(dest, "rename")(e),
            })?;
        } else {
            let cpath = CString::new(tmp.as_os_str().as_bytes()).expect("no NUL in path");
            let dpath = CString::new(dest.as_os_str().as_bytes()).expect("no NUL in path");
            // SAFETY: link(2) with two valid C strings.
            if unsafe { libc::link(cpath.as_ptr(), dpath.as_ptr()) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    return Err(exists_error(dest));
                }
                return Err(os(dest, "link")(e));
            }
            let _ = std::fs::remove_file(&tmp);
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| file)
}
