//! `elfen_page_*`: create a signal page from C (an LC service that is its
//! own controller, a test), or open one read-only to watch its counters.

use crate::error::{EINVAL, Error, guard};
use elfen_policy::{PolicyConfig, PolicyKind};
use elfen_shm::{Access, Clock, Page, PageSpec};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::PathBuf;

/// `elfen_page`: a created or opened page.
pub struct ElfenPage {
    page: Page,
}

impl ElfenPage {
    /// The page.
    pub fn page(&self) -> &Page {
        &self.page
    }
}

/// `elfen_page_options` (elfen.h), field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageOptions {
    /// `ELFEN_POLICY_*` of every lane.
    pub policy: u32,
    /// `ELFEN_NAP_*` of every lane.
    pub nap: u32,
    /// Budget of the budget policies, ns.
    pub budget_ns: u64,
    /// Hybrid spin bound, ns (0 = the default).
    pub hybrid_spin_ns: u32,
    /// Mode of the page file (0 = 0644; group or other write bits are refused).
    pub page_mode: u32,
    /// Permission bits of the batch segment (0 = 0644, or 0664 with a
    /// `batch_gid`).
    pub batch_mode: u32,
    /// Nonzero: replace an existing page.
    pub replace: u32,
    /// The page clock: 0 = this machine's best (TSC where invariant),
    /// `ELFEN_CLOCK_TSC` or `ELFEN_CLOCK_MONOTONIC_NS`.
    pub clock: u32,
    /// Group of the batch segment, whose members may attach batch threads
    /// (0 = none: only the creator's user writes batch lines).
    pub batch_gid: u32,
}

impl Default for PageOptions {
    /// `ELFEN_PAGE_OPTIONS_INIT`.
    fn default() -> Self {
        PageOptions {
            policy: 1,
            nap: elfen_shm::nap::AUTO,
            budget_ns: 0,
            hybrid_spin_ns: 0,
            page_mode: 0o644,
            batch_mode: 0,
            replace: 0,
            clock: CLOCK_AUTO,
            batch_gid: 0,
        }
    }
}

/// `ELFEN_CLOCK_AUTO`: the page clock elfen-shm detects.
pub const CLOCK_AUTO: u32 = 0;

/// The page clock `elfen_page_options.clock` asks for (`None`: detect).
fn page_clock(clock: u32) -> Result<Option<Clock>, Error> {
    use elfen_shm::layout::clock::{MONOTONIC_NS, TSC};
    match clock {
        CLOCK_AUTO => Ok(None),
        MONOTONIC_NS => Ok(Some(Clock::MONOTONIC)),
        TSC => {
            let c = Clock::detect();
            if c.kind == TSC {
                Ok(Some(c))
            } else {
                Err(Error::new(
                    EINVAL,
                    "elfen_page_create: clock ELFEN_CLOCK_TSC, but this machine has no invariant \
                     TSC; use ELFEN_CLOCK_AUTO or ELFEN_CLOCK_MONOTONIC_NS",
                ))
            }
        }
        other => Err(Error::new(
            EINVAL,
            format!(
                "elfen_page_create: unknown clock {other} (0 auto, 1 TSC, 2 CLOCK_MONOTONIC \
                 nanoseconds)"
            ),
        )),
    }
}

/// A path argument: a name without `/` lives in `/dev/shm`
/// ([`elfen_shm::page_path`]), anything else is a path.
pub(crate) fn path_arg(p: *const c_char, what: &str) -> Result<PathBuf, Error> {
    if p.is_null() {
        return Err(Error::new(EINVAL, format!("{what}: the page path is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string (elfen.h contract).
    let s = unsafe { CStr::from_ptr(p) };
    let s = s.to_str().map_err(|_| {
        Error::new(
            EINVAL,
            format!("{what}: the page path {s:?} is not valid UTF-8"),
        )
    })?;
    if s.is_empty() {
        return Err(Error::new(
            EINVAL,
            format!("{what}: the page path is empty"),
        ));
    }
    Ok(elfen_shm::page_path(s))
}

/// The page spec `elfen_page_create` builds.
pub fn page_spec(pairs: &str, o: &PageOptions) -> Result<PageSpec, Error> {
    let pairs = elfen_topo::parse_pair_spec(pairs)
        .map_err(|e| Error::new(EINVAL, format!("elfen_page_create: {e}")))?;
    let pairs: Vec<(u32, Vec<u32>)> = pairs.into_iter().map(|p| (p.request, p.batch)).collect();
    // The policy batch threads will build from each controller line: refuse
    // here what their attach would refuse.
    let kind = PolicyKind::from_id(o.policy).ok_or_else(|| {
        Error::new(
            EINVAL,
            format!(
                "elfen_page_create: unknown policy id {} (0 unmanaged, 1 borrow idle, 2 fixed \
                 budget, 3 refresh budget, 4 dynamic refresh)",
                o.policy
            ),
        )
    })?;
    PolicyConfig::budget(kind, o.budget_ns)
        .validate()
        .map_err(|e| Error::new(EINVAL, format!("elfen_page_create: {e}")))?;
    let mut spec = PageSpec::for_pairs(&pairs, o.policy, o.budget_ns);
    for l in &mut spec.lanes {
        l.nap = o.nap;
        if o.hybrid_spin_ns != 0 {
            l.hybrid_spin_ns = o.hybrid_spin_ns;
        }
    }
    if o.page_mode != 0 {
        spec.page_mode = o.page_mode;
    }
    if o.batch_gid != 0 {
        spec = spec.with_batch_group(o.batch_gid);
    }
    if o.batch_mode != 0 {
        spec.batch_mode = o.batch_mode;
    }
    spec.replace = o.replace != 0;
    spec.clock = page_clock(o.clock)?;
    spec.validate()?;
    Ok(spec)
}

/// The handle behind `p` (NULL → `None`).
pub(crate) fn handle<'a>(p: *const ElfenPage) -> Option<&'a ElfenPage> {
    // SAFETY: NULL or a handle from elfen_page_create/open not yet destroyed.
    unsafe { p.as_ref() }
}

/// `elfen_page_create`: creates a page for CPU pairs `pairs` ("0:1", "0:1+2,3:4").
///
/// # Safety
/// `path` and `pairs` are NUL-terminated strings; `opts` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_create(
    path: *const c_char,
    pairs: *const c_char,
    opts: *const PageOptions,
) -> *mut ElfenPage {
    guard(
        |_| std::ptr::null_mut(),
        || {
            let path = path_arg(path, "elfen_page_create")?;
            if pairs.is_null() {
                return Err(Error::new(EINVAL, "elfen_page_create: pairs is NULL"));
            }
            // SAFETY: per the function contract.
            let pairs = unsafe { CStr::from_ptr(pairs) }.to_string_lossy();
            // SAFETY: per the function contract.
            let opts = unsafe { opts.as_ref() }.copied().unwrap_or_default();
            let spec = page_spec(&pairs, &opts)?;
            let page = Page::create(&path, &spec)?;
            Ok(Box::into_raw(Box::new(ElfenPage { page })))
        },
    )
}

/// `elfen_page_open`: opens an existing page read-only (observer).
///
/// # Safety
/// `path` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_open(path: *const c_char) -> *mut ElfenPage {
    guard(
        |_| std::ptr::null_mut(),
        || {
            let path = path_arg(path, "elfen_page_open")?;
            let page = Page::attach(&path, Access::Observer)?;
            Ok(Box::into_raw(Box::new(ElfenPage { page })))
        },
    )
}

/// `elfen_page_destroy`: unmaps; removes the page file of a created, unpersisted page.
///
/// # Safety
/// `page` is NULL or a live handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_destroy(page: *mut ElfenPage) {
    if !page.is_null() {
        guard(
            |_| (),
            || {
                // SAFETY: per the function contract.
                drop(unsafe { Box::from_raw(page) });
                Ok(())
            },
        );
    }
}

/// `elfen_page_persist`: keeps the page file after destroy (the batch
/// segment lives while some process has the page attached).
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_persist(page: *mut ElfenPage) -> c_int {
    guard(
        |c| c,
        || {
            // SAFETY: per the function contract.
            let p = unsafe { page.as_mut() }
                .ok_or_else(|| Error::new(EINVAL, "elfen_page_persist: page is NULL"))?;
            p.page.persist();
            Ok(0)
        },
    )
}

/// `elfen_page_lane_count`.
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_lane_count(page: *const ElfenPage) -> u32 {
    handle(page).map_or(0, |p| p.page.lane_count())
}

/// `elfen_page_header`: the mapped header.
///
/// # Safety
/// `page` is NULL or a live handle; the pointer dies with it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_header(page: *const ElfenPage) -> *const c_void {
    handle(page).map_or(std::ptr::null(), |p| {
        p.page.header() as *const _ as *const c_void
    })
}

fn line<T>(page: *const ElfenPage, f: impl FnOnce(&Page) -> Option<&T>) -> *const c_void {
    handle(page)
        .and_then(|p| f(&p.page))
        .map_or(std::ptr::null(), |l| l as *const T as *const c_void)
}

/// `elfen_page_lc`: lane `lane`'s LC line (NULL if out of range).
///
/// # Safety
/// `page` is NULL or a live handle; the pointer dies with it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_lc(page: *const ElfenPage, lane: u32) -> *const c_void {
    line(page, |p| p.lc(lane).ok())
}

/// `elfen_page_controller`: lane `lane`'s controller line (NULL if out of range).
///
/// # Safety
/// `page` is NULL or a live handle; the pointer dies with it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_controller(page: *const ElfenPage, lane: u32) -> *const c_void {
    line(page, |p| p.controller(lane).ok())
}

/// `elfen_page_batch`: lane `lane`'s batch line (NULL if out of range).
///
/// # Safety
/// `page` is NULL or a live handle; the pointer dies with it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_batch(page: *const ElfenPage, lane: u32) -> *const c_void {
    line(page, |p| p.batch(lane).ok())
}

/// `elfen_page_lane_of_cpu`: the lane of CPU `cpu`, or -1.
///
/// # Safety
/// `page` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn elfen_page_lane_of_cpu(page: *const ElfenPage, cpu: u32) -> c_int {
    handle(page)
        .and_then(|p| p.page.lane_of_cpu(cpu))
        .map_or(-1, |l| l as c_int)
}
