//! Creating, attaching and validating a signal page: the page file and
//! its batch segment ([`crate::layout`], [`crate::segment`]).

use crate::clock::Clock;
use crate::error::ShmError;
pub use crate::files::pid_alive;
use crate::files::{Mapping, exists_error, map_checked, open_page, os, publish, random_instance};
use crate::layout::*;
use crate::segment::Segment;
pub use crate::spec::{
    ControllerConfig, DEFAULT_HYBRID_SPIN_NS, DEFAULT_NAME, Identity, LaneSpec, PageSpec, SHM_DIR,
    page_path,
};
use crate::users::{describe_group, describe_user};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, fence};

/// How long [`Page::read_controller`] waits for a controller line that is
/// being rewritten (odd `config_seq`) before reporting it stuck.
pub const STUCK_SEQLOCK_NS: u64 = 100_000_000;

/// Who attaches, which decides each region's access (the permission model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The LC service: page read-write, batch segment read-only.
    Lc,
    /// A batch process: page read-only, batch segment read-write.
    Batch,
    /// The controller: both read-write.
    Controller,
    /// A monitor (`elfen status`): both read-only.
    Observer,
}

impl Access {
    fn name(self) -> &'static str {
        match self {
            Access::Lc => "LC",
            Access::Batch => "batch",
            Access::Controller => "controller",
            Access::Observer => "observer",
        }
    }
    fn page_rw(self) -> bool {
        matches!(self, Access::Lc | Access::Controller)
    }
    fn batch_rw(self) -> bool {
        matches!(self, Access::Batch | Access::Controller)
    }
}

/// An attached (or created) signal page: its file and its batch segment
/// mapped.
pub struct Page {
    path: PathBuf,
    page: Mapping,
    batch: Segment,
    lanes: u32,
    clock: Clock,
    owner: bool,
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page")
            .field("path", &self.path)
            .field("batch_shmid", &self.batch.id())
            .field("lanes", &self.lanes)
            .field("clock", &self.clock)
            .field("owner", &self.owner)
            .finish()
    }
}

/// A reference to a `T` at `off` of `len` bytes from `base`.
///
/// SAFETY: the caller guarantees `off + size_of::<T>() <= len`, that `off`
/// is 64-aligned, and that `T` consists only of atomics.
unsafe fn at<'a, T>(base: *mut u8, len: usize, off: usize) -> &'a T {
    debug_assert!(off + std::mem::size_of::<T>() <= len && off % 64 == 0);
    // SAFETY: per the function contract.
    unsafe { &*(base.add(off) as *const T) }
}

impl Mapping {
    /// SAFETY: as [`at`], within this mapping.
    unsafe fn at<T>(&self, off: usize) -> &T {
        // SAFETY: per the function contract.
        unsafe { at(self.ptr, self.len, off) }
    }
}

/// The name batch-segment errors give: the page and the segment id.
fn segment_label(path: &Path, shmid: i32) -> PathBuf {
    PathBuf::from(format!(
        "{} (batch segment, System V shm id {shmid})",
        path.display()
    ))
}

fn printable(magic: u64) -> String {
    magic
        .to_le_bytes()
        .iter()
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
        .collect()
}

struct Common {
    magic: u64,
    version: u32,
    line: u32,
    total: u64,
    lanes: u32,
}

fn check_common(
    path: &Path,
    c: Common,
    want_magic: u64,
    what: &'static str,
    actual_len: usize,
    size_of: fn(u32) -> usize,
    expect_lanes: Option<u32>,
) -> Result<(), ShmError> {
    if c.magic != want_magic {
        return Err(ShmError::BadMagic {
            path: path.to_path_buf(),
            found: printable(c.magic),
            expected: if want_magic == MAGIC {
                "ELFENSIG"
            } else {
                "ELFENBAT"
            },
            what,
        });
    }
    if c.version != ABI_VERSION {
        return Err(ShmError::BadVersion {
            path: path.to_path_buf(),
            found: c.version,
            expected: ABI_VERSION,
        });
    }
    let mismatch = |field, found: u64, expected: u64| {
        Err(ShmError::Mismatch {
            path: path.to_path_buf(),
            field,
            found,
            expected,
        })
    };
    if c.line as usize != LINE_SIZE {
        return mismatch("line_size", c.line.into(), LINE_SIZE as u64);
    }
    if c.total != actual_len as u64 {
        return mismatch(
            "total_size (vs its actual size)",
            c.total,
            actual_len as u64,
        );
    }
    if c.lanes == 0 || c.lanes > MAX_LANES {
        return mismatch("lane_count (must be 1..=4096)", c.lanes.into(), 1);
    }
    if size_of(c.lanes) != actual_len {
        return mismatch(
            "total_size (vs lane_count)",
            c.total,
            size_of(c.lanes) as u64,
        );
    }
    if let Some(want) = expect_lanes {
        if want != c.lanes {
            return mismatch("lane_count", c.lanes.into(), want.into());
        }
    }
    Ok(())
}

/// Attaches the batch segment `shmid` named by the page at `path` (owned
/// by uid `page_uid`, created by `creator_pid`), with the errors that name
/// the page, the segment and what to do.
fn attach_segment(
    path: &Path,
    shmid: u32,
    page_uid: u32,
    creator_pid: u32,
    rw: bool,
    role: &'static str,
) -> Result<Segment, ShmError> {
    let id = shmid as i32;
    let gone = || ShmError::BatchGone {
        path: path.to_path_buf(),
        shmid,
        pid: creator_pid,
        hint: if pid_alive(creator_pid) {
            "its creator still runs but no longer holds the page (a page lives only while \
             some process has it attached: re-create it), or this process is in another IPC \
             namespace than the creator (a container needs the host's: --ipc=host, hostIPC)"
        } else {
            "its creator is no longer running and no process holds the page any more: \
             re-create the page (restart its creator)"
        },
    };
    if id < 0 {
        return Err(gone());
    }
    let seg = Segment::attach(id, rw).map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL | libc::EIDRM) => gone(),
        Some(libc::EACCES | libc::EPERM) => ShmError::BatchDenied {
            path: path.to_path_buf(),
            shmid,
            mode: if rw { "read-write" } else { "read-only" },
            role,
            holder: match Segment::stat(id) {
                Ok(s) => format!(
                    "owned by {}, {}, mode {:o}",
                    describe_user(s.uid),
                    describe_group(s.gid),
                    s.mode
                ),
                Err(_) => "not even readable by this process".to_string(),
            },
        },
        _ => ShmError::Os {
            path: segment_label(path, id),
            op: "shmat",
            source: e,
        },
    })?;
    // The segment must come from the page's owner: an id that was freed
    // and reused by another user's segment is not this page's.
    let st = Segment::stat(id).map_err(os(path, "shmctl(IPC_STAT)"))?;
    if st.cuid != page_uid {
        return Err(ShmError::BatchForeign {
            path: path.to_path_buf(),
            shmid,
            creator: describe_user(st.cuid),
            owner: describe_user(page_uid),
        });
    }
    Ok(seg)
}

impl Page {
    /// Creates a page at `path` (see [`page_path`]) from `spec` — its batch
    /// segment first, then the page file naming it — and returns it
    /// attached with [`Access::Controller`]. The page file is complete
    /// before it appears under its name, so a concurrent attach never sees
    /// a half-written page. Dropping the returned page removes the file
    /// unless [`Page::persist`] was called; the batch segment is freed when
    /// the last process that has the page attached lets go of it.
    pub fn create(path: impl AsRef<Path>, spec: &PageSpec) -> Result<Page, ShmError> {
        spec.validate()?;
        let path = path.as_ref().to_path_buf();
        let lanes = spec.lanes.len() as u32;
        let id = spec.identity.unwrap_or_else(|| Identity {
            clock: spec.clock.unwrap_or_else(Clock::detect),
            instance: random_instance(),
            creator_pid: std::process::id(),
            created_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        });
        if !spec.replace && std::fs::symlink_metadata(&path).is_ok() {
            return Err(exists_error(&path));
        }
        // The batch segment first: the page file names it.
        let batch = Segment::create(batch_size(lanes), spec.batch_mode, spec.batch_gid)
            .map_err(os(&path, "creating the batch segment (shmget)"))?;
        {
            // SAFETY: the segment is batch_size(lanes) bytes.
            let h: &BatchHeader = unsafe { at(batch.ptr(), batch.len(), 0) };
            h.abi_version.store(ABI_VERSION, Relaxed);
            h.line_size.store(LINE_SIZE as u32, Relaxed);
            h.total_size.store(batch_size(lanes) as u64, Relaxed);
            h.lane_count.store(lanes, Relaxed);
            h.instance.store(id.instance, Relaxed);
            h.magic.store(BATCH_MAGIC, Release);
        }
        let shmid = batch.id() as u32;
        let pfile = publish(&path, page_size(lanes), spec.page_mode, spec.replace, |m| {
            // SAFETY: the mapping is page_size(lanes) bytes.
            let h: &Header = unsafe { m.at(0) };
            h.abi_version.store(ABI_VERSION, Relaxed);
            h.line_size.store(LINE_SIZE as u32, Relaxed);
            h.total_size.store(page_size(lanes) as u64, Relaxed);
            h.lane_count.store(lanes, Relaxed);
            h.clock.store(id.clock.kind, Relaxed);
            h.ticks_per_sec.store(id.clock.ticks_per_sec, Relaxed);
            h.instance.store(id.instance, Relaxed);
            h.creator_pid.store(id.creator_pid, Relaxed);
            h.batch_shmid.store(shmid, Relaxed);
            h.created_unix_s.store(id.created_unix_s, Relaxed);
            for (i, l) in spec.lanes.iter().enumerate() {
                // SAFETY: lane i < lanes, inside the mapping.
                let c: &ControllerLine = unsafe { m.at(HEADER_SIZE + i * LANE_STRIDE + LINE_SIZE) };
                store_controller(c, l);
            }
            h.magic.store(MAGIC, Release);
        })?;
        let page = Mapping::new(&pfile, page_size(lanes), true).map_err(os(&path, "mmap"))?;
        Ok(Page {
            path,
            page,
            batch,
            lanes,
            clock: id.clock,
            owner: true,
        })
    }

    /// Attaches to the page at `path` as `access`, validating the page file
    /// (who may write it, magic, version, sizes, lane count) and its batch
    /// segment (that it exists, comes from the page's owner, and belongs
    /// to this page).
    pub fn attach(path: impl AsRef<Path>, access: Access) -> Result<Page, ShmError> {
        Self::attach_inner(path.as_ref(), access, None)
    }

    /// As [`Page::attach`], and also requires `lanes` lanes.
    pub fn attach_expect(
        path: impl AsRef<Path>,
        access: Access,
        lanes: u32,
    ) -> Result<Page, ShmError> {
        Self::attach_inner(path.as_ref(), access, Some(lanes))
    }

    fn attach_inner(path: &Path, access: Access, expect: Option<u32>) -> Result<Page, ShmError> {
        let role_name = access.name();
        let pfile = open_page(path, access.page_rw(), role_name)?;
        let page_uid = pfile.metadata().map_err(os(path, "stat"))?.uid();
        let page = map_checked(path, &pfile, HEADER_SIZE, access.page_rw())?;
        // SAFETY: map_checked guarantees HEADER_SIZE bytes.
        let h: &Header = unsafe { page.at(0) };
        let magic = h.magic.load(Acquire);
        check_common(
            path,
            Common {
                magic,
                version: h.abi_version.load(Relaxed),
                line: h.line_size.load(Relaxed),
                total: h.total_size.load(Relaxed),
                lanes: h.lane_count.load(Relaxed),
            },
            MAGIC,
            "signal page",
            page.len,
            page_size,
            expect,
        )?;
        let lanes = h.lane_count.load(Relaxed);
        let clock = Clock {
            kind: h.clock.load(Relaxed),
            ticks_per_sec: h.ticks_per_sec.load(Relaxed),
        };
        if !matches!(clock.kind, clock::TSC | clock::MONOTONIC_NS) || clock.ticks_per_sec == 0 {
            return Err(ShmError::Mismatch {
                path: path.to_path_buf(),
                field: "clock",
                found: clock.kind.into(),
                expected: clock::TSC.into(),
            });
        }
        if clock.kind == clock::TSC && !crate::clock::invariant_tsc() {
            return Err(ShmError::Mismatch {
                path: path.to_path_buf(),
                field: "clock (TSC, but this machine has no invariant TSC)",
                found: clock.kind.into(),
                expected: clock::MONOTONIC_NS.into(),
            });
        }
        let shmid = h.batch_shmid.load(Relaxed);
        let batch = attach_segment(
            path,
            shmid,
            page_uid,
            h.creator_pid.load(Relaxed),
            access.batch_rw(),
            role_name,
        )?;
        let label = segment_label(path, batch.id());
        if batch.len() < BATCH_HEADER_SIZE {
            return Err(ShmError::Short {
                path: label,
                size: batch.len() as u64,
                need: BATCH_HEADER_SIZE,
            });
        }
        // SAFETY: the segment holds at least BATCH_HEADER_SIZE bytes.
        let bh: &BatchHeader = unsafe { at(batch.ptr(), batch.len(), 0) };
        check_common(
            &label,
            Common {
                magic: bh.magic.load(Acquire),
                version: bh.abi_version.load(Relaxed),
                line: bh.line_size.load(Relaxed),
                total: bh.total_size.load(Relaxed),
                lanes: bh.lane_count.load(Relaxed),
            },
            BATCH_MAGIC,
            "batch segment",
            batch.len(),
            batch_size,
            Some(lanes),
        )?;
        let (pi, bi) = (h.instance.load(Relaxed), bh.instance.load(Relaxed));
        if pi != bi {
            return Err(ShmError::Mismatch {
                path: label,
                field: "instance (the batch segment belongs to another page)",
                found: bi,
                expected: pi,
            });
        }
        Ok(Page {
            path: path.to_path_buf(),
            page,
            batch,
            lanes,
            clock,
            owner: false,
        })
    }

    /// Removes the page file at `path` (a missing file is fine). Its batch
    /// segment needs no removal: it is freed with its last attachment.
    pub fn remove(path: impl AsRef<Path>) -> Result<(), ShmError> {
        let path = path.as_ref();
        match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(os(path, "remove")(e)),
        }
    }

    /// Who holds the page file at `path`, read without attaching (and
    /// without trusting it): its owner, mode and the creator pid its header
    /// names. `None` when there is no file.
    pub fn holder(path: impl AsRef<Path>) -> Option<PageHolder> {
        let path = path.as_ref();
        let m = std::fs::symlink_metadata(path).ok()?;
        let line = m
            .file_type()
            .is_file()
            .then(|| crate::files::read_first_line(path))
            .flatten();
        let word =
            |at: usize| line.map_or(0, |b| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()));
        let pid = word(48);
        let created_unix_s = line.map_or(0, |b| u64::from_le_bytes(b[56..64].try_into().unwrap()));
        Some(PageHolder {
            uid: m.uid(),
            mode: m.mode() & 0o7777,
            regular: m.file_type().is_file(),
            signal_page: line.is_some_and(|b| b[..8] == MAGIC.to_le_bytes()),
            abi_version: word(8),
            creator_pid: pid,
            creator_alive: pid_alive(pid),
            created_unix_s,
        })
    }

    /// Keeps the page file after this (creating) handle is dropped. The
    /// batch segment still lives only while some process has the page
    /// attached: a persisted page whose every user has exited is refused at
    /// attach ("batch segment … is gone"), and its creator re-creates it.
    pub fn persist(&mut self) {
        self.owner = false;
    }

    /// The page file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The System V id of the batch segment (the page header's `batch_shmid`).
    pub fn batch_shmid(&self) -> i32 {
        self.batch.id()
    }

    /// Number of lanes.
    pub fn lane_count(&self) -> u32 {
        self.lanes
    }

    /// The page clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Whether this handle may write the page file (LC, controller).
    pub fn page_writable(&self) -> bool {
        self.page.writable
    }

    /// Whether this handle may write the batch segment (batch, controller).
    pub fn batch_writable(&self) -> bool {
        self.batch.writable()
    }

    /// The header.
    pub fn header(&self) -> &Header {
        // SAFETY: validated at attach/create: the page holds a header.
        unsafe { self.page.at(0) }
    }

    /// The batch segment's header.
    pub fn batch_header(&self) -> &BatchHeader {
        // SAFETY: validated at attach/create.
        unsafe { at(self.batch.ptr(), self.batch.len(), 0) }
    }

    fn check_lane(&self, lane: u32) -> Result<(), ShmError> {
        if lane < self.lanes {
            Ok(())
        } else {
            Err(ShmError::LaneOutOfRange {
                path: self.path.clone(),
                lane,
                lanes: self.lanes,
            })
        }
    }

    /// Lane `lane`'s LC line.
    pub fn lc(&self, lane: u32) -> Result<&LcLine, ShmError> {
        self.check_lane(lane)?;
        // SAFETY: lane < lanes and the size was validated.
        Ok(unsafe { self.page.at(HEADER_SIZE + lane as usize * LANE_STRIDE) })
    }

    /// The LC's busy time so far on lane `lane`'s LC line, ns: completed
    /// requests' `busy_ticks` plus the running request's time.
    pub fn lc_busy_ns(&self, lane: u32) -> Result<u64, ShmError> {
        let line = self.lc(lane)?;
        let s = line.state.load(Acquire);
        let done = line.busy_ticks.load(Acquire);
        let running = if crate::state::busy(s) {
            self.clock
                .now()
                .saturating_sub(line.busy_since.load(Acquire))
        } else {
            0
        };
        Ok(self.clock.ticks_to_ns(done.wrapping_add(running)))
    }

    /// Lane `lane`'s controller line.
    pub fn controller(&self, lane: u32) -> Result<&ControllerLine, ShmError> {
        self.check_lane(lane)?;
        // SAFETY: as above.
        Ok(unsafe {
            self.page
                .at(HEADER_SIZE + lane as usize * LANE_STRIDE + LINE_SIZE)
        })
    }

    /// Lane `lane`'s batch line.
    pub fn batch(&self, lane: u32) -> Result<&BatchLine, ShmError> {
        self.check_lane(lane)?;
        // SAFETY: as above, in the batch segment (validated: it is
        // batch_size(lanes) bytes, and no process can shrink it).
        Ok(unsafe {
            at(
                self.batch.ptr(),
                self.batch.len(),
                BATCH_HEADER_SIZE + lane as usize * BATCH_STRIDE,
            )
        })
    }

    /// The lane whose controller line names logical CPU `cpu`.
    pub fn lane_of_cpu(&self, cpu: u32) -> Option<u32> {
        (0..self.lanes).find(|&l| self.controller(l).is_ok_and(|c| c.cpu.load(Relaxed) == cpu))
    }

    /// Reads lane `lane`'s controller line consistently (retrying while the
    /// controller rewrites it).
    pub fn read_controller(&self, lane: u32) -> Result<ControllerConfig, ShmError> {
        let c = self.controller(lane)?;
        // A rewrite takes nanoseconds; a line odd for this long means the
        // controller died mid-write. Give up rather than hang the reader.
        let deadline = crate::clock::monotonic_ns() + STUCK_SEQLOCK_NS;
        let mut spins = 0u32;
        loop {
            let s0 = c.config_seq.load(Acquire);
            if s0 % 2 == 1 {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 && crate::clock::monotonic_ns() > deadline {
                    return Err(ShmError::StuckController {
                        path: self.path.clone(),
                        lane,
                    });
                }
                continue;
            }
            let mut partners = [0u32; MAX_PARTNERS];
            for (d, s) in partners.iter_mut().zip(&c.partners) {
                *d = s.load(Relaxed);
            }
            let cfg = ControllerConfig {
                role: c.role.load(Relaxed),
                cpu: c.cpu.load(Relaxed),
                policy: c.policy.load(Relaxed),
                nap: c.nap.load(Relaxed),
                budget_ns: c.budget_ns.load(Relaxed),
                ref_ipc_milli: c.ref_ipc_milli.load(Relaxed),
                partner_count: c.partner_count.load(Relaxed),
                partners,
                hybrid_spin_ns: c.hybrid_spin_ns.load(Relaxed),
                seq: s0,
            };
            fence(Acquire);
            if c.config_seq.load(Relaxed) == s0 {
                return Ok(cfg);
            }
        }
    }

    /// Rewrites lane `lane`'s controller line (controller only) under its
    /// seqlock, so batch threads pick the new configuration up atomically.
    pub fn write_controller(&self, lane: u32, spec: &LaneSpec) -> Result<(), ShmError> {
        self.require_page_writable("write a controller line")?;
        let c = self.controller(lane)?;
        if spec.partners.len() > MAX_PARTNERS
            || spec.partners.iter().any(|&p| p >= self.lanes || p == lane)
        {
            return Err(ShmError::BadSpec(format!(
                "lane {lane}: bad partners {:?}",
                spec.partners
            )));
        }
        if spec.nap > nap::MWAITX || spec.role > role::BATCH {
            return Err(ShmError::BadSpec(format!(
                "lane {lane}: unknown nap backend {} or role {}",
                spec.nap, spec.role
            )));
        }
        let s = c.config_seq.load(Relaxed);
        c.config_seq.store(s.wrapping_add(1) | 1, Relaxed);
        fence(Release);
        store_controller(c, spec);
        c.config_seq.store((s | 1).wrapping_add(1), Release);
        Ok(())
    }

    pub(crate) fn require_page_writable(&self, what: &'static str) -> Result<(), ShmError> {
        if self.page.writable {
            Ok(())
        } else {
            Err(ShmError::ReadOnly {
                path: self.path.clone(),
                what,
            })
        }
    }
}

fn store_controller(c: &ControllerLine, l: &LaneSpec) {
    c.role.store(l.role, Relaxed);
    c.cpu.store(l.cpu, Relaxed);
    c.policy.store(l.policy, Relaxed);
    c.nap.store(l.nap, Relaxed);
    c.budget_ns.store(l.budget_ns, Relaxed);
    c.ref_ipc_milli.store(l.ref_ipc_milli, Relaxed);
    c.partner_count.store(l.partners.len() as u32, Relaxed);
    for (i, p) in c.partners.iter().enumerate() {
        p.store(l.partners.get(i).copied().unwrap_or(0), Relaxed);
    }
    c.hybrid_spin_ns.store(l.hybrid_spin_ns, Relaxed);
}

impl Drop for Page {
    fn drop(&mut self) {
        if self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Who holds an existing page file ([`Page::holder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHolder {
    /// The file's owner.
    pub uid: u32,
    /// Its permission bits.
    pub mode: u32,
    /// Whether it is a regular file.
    pub regular: bool,
    /// Whether it starts with the signal page magic (of any ABI version).
    pub signal_page: bool,
    /// The ABI version its header says (0 if unreadable).
    pub abi_version: u32,
    /// The creator pid its header names (0 if unreadable).
    pub creator_pid: u32,
    /// Whether that process runs.
    pub creator_alive: bool,
    /// The creation time its header names, Unix seconds (0 if unreadable).
    pub created_unix_s: u64,
}

impl PageHolder {
    /// Whether a process of user `uid` may trust the file (the rule of
    /// attach): a regular file, owned by root or `uid`, writable by its
    /// owner only.
    pub fn trusted_by(&self, uid: u32) -> bool {
        self.regular && self.mode & 0o022 == 0 && (self.uid == 0 || self.uid == uid)
    }

    /// "user nobody (uid 65534), mode 644, created by pid 42 (no longer running)".
    pub fn describe(&self) -> String {
        format!(
            "{}, mode {:o}{}, created by pid {} ({})",
            describe_user(self.uid),
            self.mode,
            if self.regular {
                ""
            } else {
                ", not a regular file"
            },
            self.creator_pid,
            if self.creator_alive {
                "still running"
            } else {
                "no longer running"
            }
        )
    }
}

/// The futex word of an LC line (the low half of `state`), for batch
/// threads to sleep on and the LC to wake.
pub fn futex_word(lc: &LcLine) -> &AtomicU32 {
    // SAFETY: `state` is an 8-byte-aligned AtomicU64; its low (little-endian,
    // see the crate root) half is a valid, 4-byte-aligned AtomicU32 at the
    // same address.
    unsafe { &*(&lc.state as *const _ as *const AtomicU32) }
}
