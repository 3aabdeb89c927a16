//! Creating, attaching and validating a signal page (the two files of
//! [`crate::layout`]).

use crate::clock::Clock;
use crate::error::ShmError;
use crate::layout::*;
pub use crate::spec::{
    ControllerConfig, DEFAULT_HYBRID_SPIN_NS, DEFAULT_NAME, Identity, LaneSpec, PageSpec, SHM_DIR,
    batch_path, page_path,
};
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, fence};

/// How long [`Page::read_controller`] waits for a controller line that is
/// being rewritten (odd `config_seq`) before reporting it stuck.
pub const STUCK_SEQLOCK_NS: u64 = 100_000_000;

/// Who attaches, which decides each file's access (the permission model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The LC service: page read-write, batch file read-only.
    Lc,
    /// A batch process: page read-only, batch file read-write.
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

struct Mapping {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(file: &File, len: usize, writable: bool) -> std::io::Result<Mapping> {
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

    /// A reference to a `T` at `off`.
    ///
    /// SAFETY: the caller guarantees `off + size_of::<T>() <= len`, that `off`
    /// is 64-aligned, and that `T` consists only of atomics.
    unsafe fn at<T>(&self, off: usize) -> &T {
        debug_assert!(off + std::mem::size_of::<T>() <= self.len && off % 64 == 0);
        // SAFETY: per the function contract.
        unsafe { &*(self.ptr.add(off) as *const T) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// An attached (or created) signal page: both files mapped.
pub struct Page {
    path: PathBuf,
    batch_path: PathBuf,
    page: Mapping,
    batch: Mapping,
    lanes: u32,
    clock: Clock,
    owner: bool,
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page")
            .field("path", &self.path)
            .field("lanes", &self.lanes)
            .field("clock", &self.clock)
            .field("owner", &self.owner)
            .finish()
    }
}

fn os<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> ShmError + 'a {
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

fn random_instance() -> u64 {
    let mut x = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into x.
    let n = unsafe { libc::getrandom((&mut x as *mut u64).cast(), 8, 0) };
    if n != 8 {
        x = crate::clock::monotonic_ns() ^ (u64::from(std::process::id()) << 32);
    }
    x | 1
}

/// Writes a new file at a temporary name, fills it through `fill`, and
/// publishes it at `dest` (hard link: fails if `dest` exists; rename when
/// replacing). Returns the open file.
fn publish(
    dest: &Path,
    size: usize,
    mode: u32,
    gid: Option<u32>,
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
        let cpath = CString::new(tmp.as_os_str().as_bytes()).expect("no NUL in path");
        // SAFETY: fchmod/fchown on a descriptor we own.
        if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } != 0 {
            return Err(os(dest, "chmod")(std::io::Error::last_os_error()));
        }
        if let Some(g) = gid {
            // SAFETY: as above; uid -1 leaves the owner unchanged.
            if unsafe { libc::fchown(file.as_raw_fd(), u32::MAX, g) } != 0 {
                return Err(os(dest, "chown")(std::io::Error::last_os_error()));
            }
        }
        file.set_len(size as u64).map_err(os(dest, "truncate"))?;
        let map = Mapping::new(&file, size, true).map_err(os(dest, "mmap"))?;
        fill(&map);
        drop(map);
        if replace {
            std::fs::rename(&tmp, dest).map_err(os(dest, "rename"))?;
        } else {
            // SAFETY: link(2) with two valid C strings.
            let dpath = CString::new(dest.as_os_str().as_bytes()).expect("no NUL in path");
            if unsafe { libc::link(cpath.as_ptr(), dpath.as_ptr()) } != 0 {
                let e = std::io::Error::last_os_error();
                let _ = std::fs::remove_file(&tmp);
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    let pid = read_creator_pid(dest).unwrap_or(0);
                    return Err(ShmError::Exists {
                        path: dest.to_path_buf(),
                        pid,
                        alive: if pid_alive(pid) {
                            "still running"
                        } else {
                            "no longer running"
                        },
                    });
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

fn read_creator_pid(path: &Path) -> Option<u32> {
    let bytes = std::fs::read(path).ok()?;
    let b = bytes.get(48..52)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn open(path: &Path, rw: bool, role: &'static str) -> Result<File, ShmError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(rw)
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
        })
}

/// Maps a file after checking its size covers `header_size`.
fn map_checked(
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
    Mapping::new(file, size as usize, rw).map_err(os(path, "mmap"))
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
            "total_size (vs the file's size)",
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

impl Page {
    /// Creates both files of a page at `path` (see [`page_path`]) from
    /// `spec` and returns it attached with [`Access::Controller`]. The files
    /// are complete before they appear under their names, so a concurrent
    /// attach never sees a half-written page. Dropping the returned page
    /// removes the files unless [`Page::persist`] was called.
    pub fn create(path: impl AsRef<Path>, spec: &PageSpec) -> Result<Page, ShmError> {
        spec.validate()?;
        let path = path.as_ref().to_path_buf();
        let bpath = batch_path(&path);
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
        if !spec.replace && path.exists() {
            let pid = read_creator_pid(&path).unwrap_or(0);
            return Err(ShmError::Exists {
                path,
                pid,
                alive: if pid_alive(pid) {
                    "still running"
                } else {
                    "no longer running"
                },
            });
        }
        // The batch file first: whoever sees the page file finds its batch file.
        let bfile = publish(
            &bpath,
            batch_size(lanes),
            spec.batch_mode,
            spec.batch_gid,
            true,
            |m| {
                // SAFETY: the mapping is batch_size(lanes) bytes.
                let h: &BatchHeader = unsafe { m.at(0) };
                h.abi_version.store(ABI_VERSION, Relaxed);
                h.line_size.store(LINE_SIZE as u32, Relaxed);
                h.total_size.store(batch_size(lanes) as u64, Relaxed);
                h.lane_count.store(lanes, Relaxed);
                h.instance.store(id.instance, Relaxed);
                h.magic.store(BATCH_MAGIC, Release);
            },
        )?;
        let pfile = match publish(
            &path,
            page_size(lanes),
            spec.page_mode,
            None,
            spec.replace,
            |m| {
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
                h.created_unix_s.store(id.created_unix_s, Relaxed);
                for (i, l) in spec.lanes.iter().enumerate() {
                    // SAFETY: lane i < lanes, inside the mapping.
                    let c: &ControllerLine =
                        unsafe { m.at(HEADER_SIZE + i * LANE_STRIDE + LINE_SIZE) };
                    store_controller(c, l);
                }
                h.magic.store(MAGIC, Release);
            },
        ) {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&bpath);
                return Err(e);
            }
        };
        let page = Mapping::new(&pfile, page_size(lanes), true).map_err(os(&path, "mmap"))?;
        let batch = Mapping::new(&bfile, batch_size(lanes), true).map_err(os(&bpath, "mmap"))?;
        Ok(Page {
            path,
            batch_path: bpath,
            page,
            batch,
            lanes,
            clock: id.clock,
            owner: true,
        })
    }

    /// Attaches to the page at `path` as `access`, validating magic, version,
    /// sizes and lane count of both files and that they belong together.
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
        let pfile = open(path, access.page_rw(), role_name)?;
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
        let bpath = batch_path(path);
        let bfile = open(&bpath, access.batch_rw(), role_name)?;
        let batch = map_checked(&bpath, &bfile, BATCH_HEADER_SIZE, access.batch_rw())?;
        // SAFETY: map_checked guarantees BATCH_HEADER_SIZE bytes.
        let bh: &BatchHeader = unsafe { batch.at(0) };
        check_common(
            &bpath,
            Common {
                magic: bh.magic.load(Acquire),
                version: bh.abi_version.load(Relaxed),
                line: bh.line_size.load(Relaxed),
                total: bh.total_size.load(Relaxed),
                lanes: bh.lane_count.load(Relaxed),
            },
            BATCH_MAGIC,
            "batch file",
            batch.len,
            batch_size,
            Some(lanes),
        )?;
        let (pi, bi) = (h.instance.load(Relaxed), bh.instance.load(Relaxed));
        if pi != bi {
            return Err(ShmError::Mismatch {
                path: bpath,
                field: "instance (the batch file belongs to another page)",
                found: bi,
                expected: pi,
            });
        }
        Ok(Page {
            path: path.to_path_buf(),
            batch_path: bpath,
            page,
            batch,
            lanes,
            clock,
            owner: false,
        })
    }

    /// Removes both files of the page at `path` (missing files are fine).
    pub fn remove(path: impl AsRef<Path>) -> Result<(), ShmError> {
        let path = path.as_ref();
        for p in [path.to_path_buf(), batch_path(path)] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(os(&p, "remove")(e)),
            }
        }
        Ok(())
    }

    /// Keeps the files after this (creating) handle is dropped.
    pub fn persist(&mut self) {
        self.owner = false;
    }

    /// The page file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The batch file.
    pub fn batch_path(&self) -> &Path {
        &self.batch_path
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

    /// Whether this handle may write the batch file (batch, controller).
    pub fn batch_writable(&self) -> bool {
        self.batch.writable
    }

    /// The header.
    pub fn header(&self) -> &Header {
        // SAFETY: validated at attach/create: the page holds a header.
        unsafe { self.page.at(0) }
    }

    /// The batch file header.
    pub fn batch_header(&self) -> &BatchHeader {
        // SAFETY: validated at attach/create.
        unsafe { self.batch.at(0) }
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
        // SAFETY: as above, in the batch file.
        Ok(unsafe {
            self.batch
                .at(BATCH_HEADER_SIZE + lane as usize * BATCH_STRIDE)
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
            let _ = std::fs::remove_file(&self.batch_path);
        }
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
