//! The batch region's memory: a System V shared-memory segment.
//!
//! Batch lines are written by batch users, who are not trusted with the LC.
//! A file mapping would let any process that can open the file for writing
//! shrink it (`ftruncate`), and the next access through every mapping of
//! it — the LC's read of `sleepers`, a root daemon's guard — would raise
//! SIGBUS. A System V segment has a fixed size from its creation: no
//! process, its owner included, can shrink, grow or remap it under another,
//! so a mapping of it never faults. What a writer can do is store bytes.
//!
//! The creator ([`Segment::create`]) makes the segment with
//! `shmget(IPC_PRIVATE, …, IPC_CREAT | IPC_EXCL | mode)`, gives it its
//! group (`IPC_SET`), attaches it and at once marks it for removal
//! (`IPC_RMID`): Linux still lets processes attach a marked segment by id,
//! and frees it when the last one detaches, so nothing is left behind after
//! a crash. The id is recorded in the page file (`Header::batch_shmid`);
//! attachers use [`Segment::attach`] and [`Segment::stat`].

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// What `IPC_STAT` says about a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStat {
    /// Its size in bytes (fixed at creation).
    pub size: usize,
    /// The creator's effective uid.
    pub cuid: u32,
    /// The owner's uid.
    pub uid: u32,
    /// The group.
    pub gid: u32,
    /// Permission bits (`rwxrwxrwx`; only `r` and `w` mean anything).
    pub mode: u32,
    /// Processes attached now.
    pub attached: u64,
    /// The creator's pid.
    pub creator_pid: u32,
    /// Marked for removal (freed at the last detach).
    pub marked_for_removal: bool,
}

/// One attachment of a segment: detached when dropped.
#[derive(Debug)]
pub struct Segment {
    id: i32,
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: the segment is shared memory accessed only through atomics.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl Segment {
    /// Creates a private segment of `len` bytes with permission bits `mode`
    /// (and group `gid`), attaches it read-write and marks it for removal,
    /// so it lives exactly as long as some process has it attached. Its
    /// bytes start zero.
    pub fn create(len: usize, mode: u32, gid: Option<u32>) -> std::io::Result<Segment> {
        // SAFETY: shmget with a private key allocates a new segment.
        let id = unsafe {
            libc::shmget(
                libc::IPC_PRIVATE,
                len,
                libc::IPC_CREAT | libc::IPC_EXCL | (mode & 0o777) as i32,
            )
        };
        if id < 0 {
            return Err(last_error());
        }
        // Attach first (the attachment keeps it alive), then mark it: from
        // here on the kernel frees it with its last user.
        let seg = Segment::attach(id, true);
        // SAFETY: IPC_RMID on the segment we just created.
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        let seg = seg?;
        if let Some(g) = gid {
            set_owner(id, g, mode)?;
        }
        Ok(seg)
    }

    /// Attaches segment `id` (read-write or read-only) whole.
    pub fn attach(id: i32, writable: bool) -> std::io::Result<Segment> {
        let flags = if writable { 0 } else { libc::SHM_RDONLY };
        // SAFETY: shmat at an address of the kernel's choosing.
        let ptr = unsafe { libc::shmat(id, std::ptr::null(), flags) };
        if ptr as isize == -1 {
            return Err(last_error());
        }
        let mut seg = Segment {
            id,
            ptr: ptr.cast(),
            len: 0,
            writable,
        };
        // What is attached now cannot change size any more (nor be freed,
        // nor its id reused): its size from a stat made while attached.
        seg.len = Segment::stat(id)?.size;
        Ok(seg)
    }

    /// `IPC_STAT` of segment `id` (needs read permission on it).
    pub fn stat(id: i32) -> std::io::Result<SegmentStat> {
        // SAFETY: shmid_ds is plain data; IPC_STAT fills it.
        let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) } != 0 {
            return Err(last_error());
        }
        Ok(SegmentStat {
            size: ds.shm_segsz,
            cuid: ds.shm_perm.cuid,
            uid: ds.shm_perm.uid,
            gid: ds.shm_perm.gid,
            mode: u32::from(ds.shm_perm.mode) & 0o777,
            attached: ds.shm_nattch,
            creator_pid: ds.shm_cpid as u32,
            marked_for_removal: u32::from(ds.shm_perm.mode) & 0o1000 != 0,
        })
    }

    /// Whether segment `id` exists (in this IPC namespace).
    pub fn exists(id: i32) -> bool {
        match Segment::stat(id) {
            Ok(_) => true,
            Err(e) => e.raw_os_error() == Some(libc::EACCES),
        }
    }

    /// Its id.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never, for a batch region).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether this attachment may write.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Copies the segment's bytes out (relaxed byte loads: the bytes may be
    /// changing under us).
    pub fn read_bytes(&self) -> Vec<u8> {
        // SAFETY: `len` bytes are mapped; AtomicU8 has the layout of u8.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr as *const AtomicU8, self.len) };
        bytes.iter().map(|b| b.load(Relaxed)).collect()
    }

    /// Stores `bytes` at `offset` (relaxed byte stores). Panics if this
    /// attachment is read-only or the range leaves the segment: callers
    /// are tests and creators.
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        assert!(self.writable, "segment {} is attached read-only", self.id);
        assert!(
            offset
                .checked_add(bytes.len())
                .is_some_and(|end| end <= self.len),
            "{} bytes at {offset} leave the {}-byte segment",
            bytes.len(),
            self.len
        );
        // SAFETY: checked above; AtomicU8 has the layout of u8.
        let dst = unsafe {
            std::slice::from_raw_parts(self.ptr.add(offset) as *const AtomicU8, bytes.len())
        };
        for (d, &b) in dst.iter().zip(bytes) {
            d.store(b, Relaxed);
        }
    }
}

/// `IPC_SET`: group `gid` and permission bits `mode` (owner unchanged).
fn set_owner(id: i32, gid: u32, mode: u32) -> std::io::Result<()> {
    // SAFETY: as in `stat`.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: IPC_STAT then IPC_SET of the same segment.
    unsafe {
        if libc::shmctl(id, libc::IPC_STAT, &mut ds) != 0 {
            return Err(last_error());
        }
        ds.shm_perm.gid = gid;
        ds.shm_perm.mode = (mode & 0o777) as _;
        if libc::shmctl(id, libc::IPC_SET, &mut ds) != 0 {
            return Err(last_error());
        }
    }
    Ok(())
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: detaching exactly what `attach` attached.
        unsafe { libc::shmdt(self.ptr.cast()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_lives_while_attached_and_is_freed_with_the_last_detach() {
        let s = Segment::create(192, 0o644, None).unwrap();
        let st = Segment::stat(s.id()).unwrap();
        assert_eq!((st.size, st.mode, st.attached), (192, 0o644, 1));
        assert!(st.marked_for_removal, "marked at creation: nothing leaks");
        s.write_bytes(8, &[1, 2, 3]);
        let ro = Segment::attach(s.id(), false).unwrap();
        assert_eq!(&ro.read_bytes()[8..11], &[1, 2, 3]);
        assert_eq!(ro.len(), 192);
        let id = s.id();
        drop((s, ro));
        assert!(!Segment::exists(id), "freed with its last attachment");
        let e = Segment::attach(id, false).unwrap_err();
        assert!(
            matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EIDRM)),
            "{e}"
        );
    }

    #[test]
    fn a_group_and_mode_are_set_exactly() {
        let s = Segment::create(64, 0o660, Some(0)).unwrap();
        let st = Segment::stat(s.id()).unwrap();
        assert_eq!((st.gid, st.mode), (0, 0o660));
    }
}
