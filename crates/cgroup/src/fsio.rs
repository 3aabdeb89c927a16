//! File primitives: the only place that touches the file system.
//!
//! Cgroup files are written with one `write(2)` of the whole value (the
//! kernel parses each write on its own; a partial write would be a different
//! value). Errors carry the path and the operation.

use crate::error::{CgroupError, Result};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Reads a whole cgroup file.
pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| CgroupError::io(path, "reading", e))
}

/// Reads a cgroup file with surrounding whitespace removed.
pub(crate) fn read_trim(path: &Path) -> Result<String> {
    read(path).map(|s| s.trim().to_string())
}

/// Writes `value` to a cgroup file in one write (no create, no truncate
/// semantics beyond what the file system gives: on cgroupfs the kernel
/// parses the buffer; on a test's temp dir the file is replaced). An empty
/// value (a v2 cpuset that inherits its parent's CPUs) is written as a
/// newline: a write of no bytes never reaches the kernel, so the file would
/// keep its old value.
pub(crate) fn write(path: &Path, value: &str) -> Result<()> {
    let op = || format!("writing {value:?}");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| CgroupError::io(path, op(), e))?;
    let bytes = if value.is_empty() { "\n" } else { value };
    f.write_all(bytes.as_bytes())
        .map_err(|e| CgroupError::io(path, op(), e))
}

/// Whether `dir` is on a cgroup (v1 or v2) file system. Test roots are not:
/// there, removing a group may delete the ordinary files it holds.
pub(crate) fn is_cgroupfs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the struct we pass; the path is NUL-terminated.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return false;
    }
    const CGROUP_SUPER_MAGIC: i64 = 0x27e0eb;
    const CGROUP2_SUPER_MAGIC: i64 = 0x63677270;
    let t = s.f_type as i64;
    t == CGROUP_SUPER_MAGIC || t == CGROUP2_SUPER_MAGIC
}

/// Removes a group directory. On cgroupfs, `rmdir` fails with `EBUSY` while
/// the kernel still tears down an exiting task, so it is retried for up to
/// half a second. A directory that is already gone is success.
pub(crate) fn remove_group_dir(dir: &Path) -> Result<()> {
    let cgroupfs = is_cgroupfs(dir);
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // A real cgroup directory holds only kernel files, which rmdir
            // ignores; a test root's directory holds ordinary files.
            Err(_) if !cgroupfs && std::fs::remove_dir_all(dir).is_ok() => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(CgroupError::io(
        dir,
        "removing",
        last.unwrap_or_else(|| std::io::Error::other("busy")),
    ))
}

/// Writes `content` to `path` atomically (`elfen_cmd::files::write_atomic`:
/// a fresh temporary file with a random name, created exclusively without
/// following links, synced and renamed over `path`), readable by its owner
/// only.
pub(crate) fn write_atomic(path: &Path, content: &[u8]) -> std::io::Result<()> {
    elfen_cmd::files::write_atomic(path, content, 0o600)
}

/// The system page size (memory limits are kept in whole pages).
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

/// Parses a list of ids, one per line (`cgroup.procs`, `tasks`).
pub(crate) fn parse_ids(path: &Path, content: &str) -> Result<Vec<u32>> {
    content
        .split_whitespace()
        .map(|t| {
            t.parse::<u32>()
                .map_err(|_| CgroupError::parse(path, t, "expected a process or thread id"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;

    /// A write reaches the reader as one buffer — an empty value too: the
    /// kernel sees a newline (an empty list), not nothing at all.
    #[test]
    fn an_empty_value_is_written_as_a_newline() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("cpuset.cpus");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // the read end first (non-blocking), so opening for writing does not wait
        let mut r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        for (value, seen) in [("1-3", "1-3"), ("", "\n")] {
            write(&fifo, value).unwrap();
            let mut buf = [0u8; 16];
            let n = r.read(&mut buf).unwrap_or(0);
            assert_eq!(std::str::from_utf8(&buf[..n]).unwrap(), seen, "{value:?}");
        }
    }
}
