//! A shared memory region between a process and a child it starts (the
//! harness's and advise's batch children publish their counters there).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// A shared read-write memory region: created by the parent as a `memfd`
/// and opened by the child through `/proc/<parent>/fd/<fd>`, so nothing is
/// left in `/dev/shm` whatever happens to either process.
pub struct Region {
    ptr: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the region is shared memory accessed only through atomics.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("len", &self.len).finish()
    }
}

impl Region {
    /// A zeroed region of `len` bytes backed by a new memfd.
    pub fn create(len: usize) -> io::Result<Region> {
        let name = c"elfen-bench-stats";
        // SAFETY: the name is NUL-terminated; flags are valid.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Region::map(fd, len)
    }

    /// Opens a region by path (e.g. `/proc/<pid>/fd/<n>`), `len` bytes.
    pub fn open(path: &Path, len: usize) -> io::Result<Region> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        if (f.metadata()?.len() as usize) < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is shorter than {len} bytes", path.display()),
            ));
        }
        Region::map(OwnedFd::from(f), len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Region> {
        // SAFETY: mapping `len` bytes of a file at least that long, shared.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            ptr: ptr.cast(),
            len,
            fd,
        })
    }

    /// The path another process of this user opens it by.
    pub fn proc_path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd())
    }

    /// A reference to a `T` at byte `offset`.
    ///
    /// # Safety
    /// `T` must be made of atomics (any bit pattern valid), `offset` aligned
    /// for `T`, and `offset + size_of::<T>() <= len`.
    pub unsafe fn at<T>(&self, offset: usize) -> &T {
        debug_assert!(offset + std::mem::size_of::<T>() <= self.len);
        // SAFETY: by the caller's contract.
        unsafe { &*(self.ptr.add(offset) as *const T) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping what `map` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn regions_are_shared_through_proc() {
        let a = Region::create(4096).unwrap();
        let b = Region::open(Path::new(&a.proc_path()), 4096).unwrap();
        // SAFETY: offset 64 is aligned and inside both.
        let (x, y): (&AtomicU64, &AtomicU64) = unsafe { (a.at(64), b.at(64)) };
        x.store(77, Ordering::SeqCst);
        assert_eq!(y.load(Ordering::SeqCst), 77);
        assert!(Region::open(Path::new(&a.proc_path()), 8192).is_err());
    }
}
