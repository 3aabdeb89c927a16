//! The Rust side of the C ABI: `elfen.h` agrees with the Rust constants and
//! entry points, and the `extern "C"` functions behave as the header says
//! when called as C would call them (NUL-terminated strings, NULLs, codes,
//! `elfen_last_error`), including an LC thread and a batch thread whose
//! fast path is the C thread-local pair.

use elfen::batch::{
    CBatchOptions, CBatchStats, elfen_batch_attach, elfen_batch_attach_ex, elfen_batch_attached,
    elfen_batch_describe, elfen_batch_detach, elfen_batch_nap_backend, elfen_batch_stats_get,
    elfen_check_slow,
};
use elfen::error::{self, elfen_abi_version, elfen_last_error};
use elfen::failsafe::*;
use elfen::lc::{
    elfen_lc_attach, elfen_lc_begin, elfen_lc_begin_q, elfen_lc_detach, elfen_lc_end,
    elfen_lc_end_q, elfen_lc_set_queue_len,
};
use elfen::page::*;
use elfen::tls::{self, Kind};
use elfen_shm::layout::{BatchLine, Header, LcLine};
use elfen_shm::state;
use std::collections::BTreeSet;
use std::ffi::{CStr, CString, c_char};
use std::path::Path;
use std::sync::atomic::Ordering::Acquire;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn header() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/c/elfen.h"))
        .expect("bindings/c/elfen.h")
}

/// The value of `#define NAME value` in elfen.h, as an integer.
fn define(h: &str, name: &str) -> i128 {
    let line = h
        .lines()
        .find(|l| {
            let mut w = l.split_whitespace();
            w.next() == Some("#define") && w.next() == Some(name)
        })
        .unwrap_or_else(|| panic!("elfen.h has no #define {name}"));
    let v = line.split_whitespace().nth(2).unwrap();
    let v = v
        .trim_start_matches("UINT64_C(")
        .trim_start_matches("UINT32_C(");
    let v = v
        .trim_start_matches('(')
        .trim_end_matches(')')
        .trim_end_matches('u');
    if v == "UINT64_MAX" {
        return u64::MAX.into();
    }
    let r = if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        i128::from_str_radix(hex, 16)
    } else {
        v.parse::<i128>()
    };
    r.unwrap_or_else(|_| panic!("#define {name}: cannot read {v:?}"))
}

#[test]
fn header_constants_match_rust() {
    use elfen_shm::layout as l;
    let h = header();
    let d = |n| define(&h, n);
    assert_eq!(d("ELFEN_ABI_VERSION"), l::ABI_VERSION.into());
    assert_eq!(d("ELFEN_MAGIC"), l::MAGIC.into());
    assert_eq!(d("ELFEN_BATCH_MAGIC"), l::BATCH_MAGIC.into());
    assert_eq!(d("ELFEN_LINE_SIZE"), l::LINE_SIZE as i128);
    assert_eq!(d("ELFEN_HEADER_SIZE"), l::HEADER_SIZE as i128);
    assert_eq!(d("ELFEN_LANE_STRIDE"), l::LANE_STRIDE as i128);
    assert_eq!(d("ELFEN_BATCH_HEADER_SIZE"), l::BATCH_HEADER_SIZE as i128);
    assert_eq!(d("ELFEN_BATCH_STRIDE"), l::BATCH_STRIDE as i128);
    assert_eq!(d("ELFEN_MAX_LANES"), l::MAX_LANES.into());
    assert_eq!(d("ELFEN_MAX_PARTNERS"), l::MAX_PARTNERS as i128);
    assert_eq!(d("ELFEN_CLOCK_TSC"), l::clock::TSC.into());
    assert_eq!(d("ELFEN_CLOCK_MONOTONIC_NS"), l::clock::MONOTONIC_NS.into());
    assert_eq!(d("ELFEN_CONTROL_KILL"), l::control::KILL.into());
    assert_eq!(d("ELFEN_CONTROL_UNMANAGED"), l::control::UNMANAGED.into());
    assert_eq!(d("ELFEN_CONTROL_KNOWN"), l::control::KNOWN.into());
    {
        use elfen::failsafe as f;
        for (n, v) in [
            ("ELFEN_KILL_OFF", f::KILL_OFF),
            ("ELFEN_KILL_PAUSED", f::KILL_PAUSED),
            ("ELFEN_KILL_UNMANAGED", f::KILL_UNMANAGED),
            ("ELFEN_BATCH_MANAGED", f::BATCH_MANAGED),
            ("ELFEN_BATCH_UNMANAGED", f::BATCH_UNMANAGED),
            ("ELFEN_BATCH_KILLED", f::BATCH_KILLED),
            ("ELFEN_BATCH_STALE", f::BATCH_STALE),
        ] {
            assert_eq!(d(n), v.into(), "{n}");
        }
    }
    assert_eq!(d("ELFEN_ROLE_UNUSED"), l::role::UNUSED.into());
    assert_eq!(d("ELFEN_ROLE_REQUEST"), l::role::REQUEST.into());
    assert_eq!(d("ELFEN_ROLE_BATCH"), l::role::BATCH.into());
    for (n, v) in [
        ("ELFEN_NAP_AUTO", l::nap::AUTO),
        ("ELFEN_NAP_SPIN", l::nap::SPIN),
        ("ELFEN_NAP_FUTEX", l::nap::FUTEX),
        ("ELFEN_NAP_HYBRID", l::nap::HYBRID),
        ("ELFEN_NAP_UMWAIT", l::nap::UMWAIT),
        ("ELFEN_NAP_MWAITX", l::nap::MWAITX),
    ] {
        assert_eq!(d(n), v.into(), "{n}");
    }
    assert_eq!(d("ELFEN_NAP_PAGE"), elfen::env::NAP_PAGE.into());
    for (kind, id) in elfen_policy_kinds() {
        let name = format!("ELFEN_POLICY_{}", kind.to_ascii_uppercase());
        assert_eq!(define(&h, &name), id.into(), "{name}");
    }
    assert_eq!(d("ELFEN_STATE_BUSY"), state::BUSY.into());
    assert_eq!(d("ELFEN_STATE_MAX_QUEUE_LEN"), state::MAX_QUEUE_LEN.into());
    assert_eq!(d("ELFEN_STATE_NEVER"), state::NEVER.into());
    assert_eq!(d("ELFEN_STATE_SEQ_MASK"), 0x7FFF_FFFF);
    for (n, v) in [
        ("ELFEN_OK", 0),
        ("ELFEN_EINVAL", error::EINVAL),
        ("ELFEN_EPAGE", error::EPAGE),
        ("ELFEN_ELANE", error::ELANE),
        ("ELFEN_ESTATE", error::ESTATE),
        ("ELFEN_EOS", error::EOS),
        ("ELFEN_EINTERNAL", error::EINTERNAL),
    ] {
        assert_eq!(d(n), v.into(), "{n}");
    }
}

/// `(name, id)` of every policy, as `ELFEN_POLICY_*` spells them.
fn elfen_policy_kinds() -> Vec<(String, u32)> {
    elfen_policy::PolicyKind::ALL
        .into_iter()
        .map(|k| (k.to_string(), k.id()))
        .collect()
}

/// Every `extern "C"` function of the crate is declared in elfen.h, and
/// every function elfen.h declares is defined (in Rust, or C for `elfen__`).
#[test]
fn header_declares_exactly_the_exports() {
    let h = header();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut rust = BTreeSet::new();
    for f in std::fs::read_dir(src).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        for l in text.lines() {
            if let Some(i) = l.find("extern \"C\" fn ") {
                let name: String = l[i + 14..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with("elfen_") {
                    rust.insert(name);
                }
            }
        }
    }
    let mut declared = BTreeSet::new();
    for l in h.lines().filter(|l| !l.trim_start().starts_with('#')) {
        // prototypes: `type name(args);` at top level, not inline helpers
        if l.starts_with(' ') || l.contains("ELFEN_INLINE") || !l.contains('(') {
            continue;
        }
        let head = &l[..l.find('(').unwrap()];
        if let Some(name) = head
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next_back()
        {
            if name.starts_with("elfen_") {
                declared.insert(name.to_string());
            }
        }
    }
    assert_eq!(
        rust, declared,
        "elfen.h prototypes vs extern \"C\" fns in crates/capi/src"
    );
}

#[test]
fn repr_c_structs_match_the_header() {
    use std::mem::{offset_of, size_of};
    // mirrored by _Static_asserts in bindings/c/tests/api.c
    assert_eq!(size_of::<PageOptions>(), 40);
    assert_eq!(offset_of!(PageOptions, budget_ns), 8);
    assert_eq!(offset_of!(PageOptions, replace), 28);
    assert_eq!(offset_of!(PageOptions, clock), 32);
    assert_eq!(size_of::<CBatchOptions>(), 16);
    assert_eq!(offset_of!(CBatchOptions, futex_timeout_us), 8);
    assert_eq!(size_of::<CBatchStats>(), 48);
    assert_eq!(offset_of!(CBatchStats, nap_ns), 40);
    let h = header();
    let init = h
        .lines()
        .find(|l| l.starts_with("#define ELFEN_PAGE_OPTIONS_INIT"))
        .unwrap();
    assert!(
        init.contains(
            "{ELFEN_POLICY_BORROW_IDLE, ELFEN_NAP_AUTO, 0, 0, 0644, 0, 0, ELFEN_CLOCK_AUTO, 0}"
        ),
        "{init}"
    );
    assert_eq!(PageOptions::default().policy, 1);
    assert_eq!(PageOptions::default().page_mode, 0o644);
    assert_eq!(PageOptions::default().clock, 0);
    assert_eq!(offset_of!(PageOptions, batch_gid), 36);
    assert_eq!(define(&h, "ELFEN_CLOCK_AUTO"), CLOCK_AUTO.into());
}

#[test]
fn page_options_set_the_batch_segments_group_and_mode() {
    let d = tempfile::tempdir().unwrap();
    // default: the creator's user writes batch lines, everyone reads
    let spec = page_spec("0:1", &PageOptions::default()).unwrap();
    assert_eq!((spec.batch_mode, spec.batch_gid), (0o644, None));
    // a batch group writes too
    let o = PageOptions {
        batch_gid: 65534,
        ..PageOptions::default()
    };
    let spec = page_spec("0:1", &o).unwrap();
    assert_eq!((spec.batch_mode, spec.batch_gid), (0o664, Some(65534)));
    let p = c(d.path().join("grp").to_str().unwrap());
    // SAFETY: valid strings and options; the handle is destroyed below.
    unsafe {
        let page = elfen_page_create(p.as_ptr(), c"0:1".as_ptr(), &o);
        assert!(!page.is_null(), "{}", last_error());
        let st = elfen_shm::Segment::stat((*page).page().batch_shmid()).unwrap();
        assert_eq!((st.gid, st.mode), (65534, 0o664));
        elfen_page_destroy(page);
    }
    // a page file others could write is refused before anything is made
    let bad = PageOptions {
        page_mode: 0o666,
        ..PageOptions::default()
    };
    let e = page_spec("0:1", &bad).unwrap_err().to_string();
    assert!(
        e.contains("page_mode 666") && e.contains("owner only"),
        "{e}"
    );
}

#[test]
fn page_options_pick_the_clock() {
    use elfen_shm::layout::clock::{MONOTONIC_NS, TSC};
    let d = tempfile::tempdir().unwrap();
    let o = PageOptions {
        clock: MONOTONIC_NS,
        ..PageOptions::default()
    };
    let spec = page_spec("0:1", &o).unwrap();
    assert_eq!(spec.clock, Some(elfen_shm::Clock::MONOTONIC));
    let p = c(d.path().join("mono").to_str().unwrap());
    // SAFETY: valid strings and options; the handle is destroyed below.
    unsafe {
        let page = elfen_page_create(p.as_ptr(), c"0:1".as_ptr(), &o);
        assert!(!page.is_null(), "{}", last_error());
        let h = &*(elfen_page_header(page) as *const Header);
        assert_eq!(h.clock.load(Acquire), MONOTONIC_NS);
        assert_eq!(h.ticks_per_sec.load(Acquire), 1_000_000_000);
        elfen_page_destroy(page);
    }
    assert_eq!(
        page_spec("0:1", &PageOptions::default()).unwrap().clock,
        None
    );
    let tsc = PageOptions {
        clock: TSC,
        ..PageOptions::default()
    };
    match page_spec("0:1", &tsc) {
        Ok(spec) => assert_eq!(spec.clock.map(|c| c.kind), Some(TSC)),
        Err(e) => assert!(e.to_string().contains("invariant TSC"), "{e}"),
    }
    let bad = PageOptions {
        clock: 7,
        ..PageOptions::default()
    };
    let e = page_spec("0:1", &bad).unwrap_err().to_string();
    assert!(e.contains("unknown clock 7"), "{e}");
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn last_error() -> String {
    // SAFETY: elfen_last_error never returns NULL.
    unsafe { CStr::from_ptr(elfen_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn create(path: &Path) -> *mut ElfenPage {
    let p = c(path.to_str().unwrap());
    // SAFETY: valid strings, NULL options.
    let page = unsafe { elfen_page_create(p.as_ptr(), c"0:1".as_ptr(), std::ptr::null()) };
    assert!(!page.is_null(), "{}", last_error());
    page
}

#[test]
fn pages_from_c() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("sig");
    let page = create(&path);
    // SAFETY: a live handle throughout.
    unsafe {
        assert_eq!(elfen_page_lane_count(page), 2);
        let h = &*(elfen_page_header(page) as *const Header);
        assert_eq!(h.magic.load(Acquire), elfen_shm::layout::MAGIC);
        assert!(elfen_page_lc(page, 2).is_null());
        assert_eq!(elfen_page_lane_of_cpu(page, 1), 1);
        assert_eq!(elfen_page_lane_of_cpu(page, 5), -1);
        assert_eq!(elfen_page_set_kill(page, 1), 0);
        assert_ne!(h.control.load(Acquire) & 1, 0);
        let p = c(path.to_str().unwrap());
        let ro = elfen_page_open(p.as_ptr());
        assert!(!ro.is_null());
        assert_eq!(elfen_page_set_kill(ro, 0), error::ESTATE);
        assert!(last_error().contains("read-only"), "{}", last_error());
        elfen_page_destroy(ro);
        assert_eq!(elfen_page_persist(page), 0);
        elfen_page_destroy(page);
    }
    assert!(path.exists(), "persisted");
    elfen_shm::Page::remove(&path).unwrap();
    // SAFETY: NULL handles are accepted.
    unsafe {
        elfen_page_destroy(std::ptr::null_mut());
        assert_eq!(elfen_page_lane_count(std::ptr::null()), 0);
        assert_eq!(elfen_page_persist(std::ptr::null_mut()), error::EINVAL);
    }
    assert_eq!(elfen_abi_version(), elfen_shm::ABI_VERSION);
}

#[test]
fn errors_are_codes_and_messages() {
    let d = tempfile::tempdir().unwrap();
    let missing = c(d.path().join("missing").to_str().unwrap());
    // SAFETY: valid or NULL strings, as the header allows.
    unsafe {
        assert!(elfen_page_open(missing.as_ptr()).is_null());
        assert!(last_error().contains("does not exist"), "{}", last_error());
        assert!(elfen_lc_attach(missing.as_ptr(), 0).is_null());
        assert_eq!(
            elfen_batch_attach(missing.as_ptr(), 1, 1),
            error::EPAGE,
            "{}",
            last_error()
        );
        assert_eq!(elfen_batch_attach(std::ptr::null(), 1, 1), error::EINVAL);
        assert!(last_error().contains("NULL"));
        let bad = c("\u{7f}\u{7f}/x");
        assert!(elfen_page_open(bad.as_ptr()).is_null());
        let path = d.path().join("sig");
        let page = create(&path);
        let p = c(path.to_str().unwrap());
        assert_eq!(elfen_batch_attach(p.as_ptr(), 0, 1), error::ELANE);
        assert!(
            last_error().contains("is a request lane"),
            "{}",
            last_error()
        );
        assert_eq!(elfen_batch_attach(p.as_ptr(), 9, 1), error::ELANE);
        assert!(
            last_error().contains("lane 9 is out of range"),
            "{}",
            last_error()
        );
        assert_eq!(elfen_batch_attach(p.as_ptr(), 1, 17), error::EINVAL);
        assert!(
            last_error().contains("unknown nap backend 17"),
            "{}",
            last_error()
        );
        assert!(elfen_lc_attach(p.as_ptr(), 1).is_null());
        assert!(last_error().contains("is a batch lane"), "{}", last_error());
        assert_eq!(elfen_lc_begin(std::ptr::null_mut(), 1), error::EINVAL);
        assert_eq!(elfen_batch_detach(), error::ESTATE);
        assert_eq!(elfen_batch_nap_backend(), error::ESTATE);
        let mut s = CBatchStats::default();
        assert_eq!(elfen_batch_stats_get(&mut s), error::ESTATE);
        assert!(elfen_page_create(p.as_ptr(), c"0:1".as_ptr(), std::ptr::null()).is_null());
        assert!(last_error().contains("already exists"), "{}", last_error());
        elfen_page_destroy(page);
    }
}

#[test]
fn an_unattached_thread_checks_nothing() {
    std::thread::spawn(|| {
        assert_eq!(tls::kind(), Kind::Unattached);
        assert!(!tls::would_take_slow_path());
        elfen_check_slow(); // safe; lazy attach is not armed in this binary
        assert_eq!(tls::kind(), Kind::Unattached);
        assert_eq!(elfen_batch_attached(), 0);
    })
    .join()
    .unwrap();
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(5), "timed out: {what}");
        std::thread::yield_now();
    }
}

/// An LC thread and a batch thread through the C entry points; the batch
/// loop is the C fast path (the thread-local word/expected pair).
#[test]
fn lc_and_batch_threads_through_the_abi() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("sig");
    let page = create(&path);
    let p = Arc::new(c(path.to_str().unwrap()));
    // SAFETY: the page outlives the threads below.
    let bl: &'static BatchLine = unsafe { &*(elfen_page_batch(page, 1) as *const BatchLine) };
    let lcl: &'static LcLine = unsafe { &*(elfen_page_lc(page, 0) as *const LcLine) };
    let progress = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(2));
    let batch = {
        let (p, progress, stop, ready) = (p.clone(), progress.clone(), stop.clone(), ready.clone());
        std::thread::spawn(move || {
            let o = CBatchOptions {
                nap: 1, // spin
                pin: 0,
                futex_timeout_us: 0,
                reserved: 0,
            };
            // SAFETY: valid string and options.
            assert_eq!(
                unsafe { elfen_batch_attach_ex(p.as_ptr(), 1, &o) },
                0,
                "{}",
                last_error()
            );
            assert_eq!(tls::kind(), Kind::Watching);
            assert_eq!(elfen_batch_attached(), 1);
            assert_eq!(elfen_batch_nap_backend(), 1);
            let mut buf = [0 as c_char; 256];
            // SAFETY: a 256-byte buffer.
            let n = unsafe { elfen_batch_describe(buf.as_mut_ptr(), buf.len()) };
            assert!(n > 0);
            // SAFETY: NUL-terminated by elfen_batch_describe.
            let desc = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
            assert!(desc.contains("batch lane 1"), "{desc}");
            // the first check runs the policy (expected starts as NEVER)
            assert!(tls::would_take_slow_path());
            ready.wait();
            while !stop.load(Ordering::Acquire) {
                // what elfen_check() compiles to, through the accessors
                if tls::would_take_slow_path() {
                    elfen_check_slow();
                }
                progress.fetch_add(1, Ordering::Relaxed);
            }
            let mut s = CBatchStats::default();
            // SAFETY: a valid out pointer.
            assert_eq!(unsafe { elfen_batch_stats_get(&mut s) }, 0);
            assert_eq!(elfen_batch_detach(), 0);
            assert_eq!(tls::kind(), Kind::Off);
            assert!(!tls::would_take_slow_path());
            s
        })
    };
    ready.wait();
    // SAFETY: valid string; one thread uses the handle.
    let lc = unsafe { elfen_lc_attach(p.as_ptr(), 0) };
    assert!(!lc.is_null(), "{}", last_error());
    for i in 0..5u64 {
        let naps = bl.naps.load(Acquire);
        // Odd requests publish their queue with begin and end (the _q calls).
        let queued = i % 2 == 1;
        if queued {
            // SAFETY: a live handle.
            assert_eq!(unsafe { elfen_lc_begin_q(lc, i, 3) }, 0);
            assert_eq!(state::queue_len(lcl.state.load(Acquire)), 3);
        } else {
            // SAFETY: a live handle.
            assert_eq!(unsafe { elfen_lc_begin(lc, i) }, 0);
        }
        wait_until("the batch thread naps", || {
            bl.napping.load(Acquire) == 1 && bl.naps.load(Acquire) > naps
        });
        let p0 = progress.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(progress.load(Ordering::Relaxed), p0, "ran while busy");
        // SAFETY: a live handle.
        assert_eq!(unsafe { elfen_lc_set_queue_len(lc, 2) }, 0);
        assert_eq!(state::queue_len(lcl.state.load(Acquire)), 2);
        if queued {
            // SAFETY: a live handle.
            assert_eq!(unsafe { elfen_lc_end_q(lc, 0) }, 0);
        } else {
            // SAFETY: a live handle.
            assert_eq!(unsafe { elfen_lc_set_queue_len(lc, 0) }, 0);
            // SAFETY: a live handle.
            assert_eq!(unsafe { elfen_lc_end(lc) }, 0);
        }
        let s = lcl.state.load(Acquire);
        assert!(!state::busy(s) && state::queue_len(s) == 0, "{s:#x}");
        let p1 = progress.load(Ordering::Relaxed);
        wait_until("the batch thread runs again", || {
            bl.napping.load(Acquire) == 0 && progress.load(Ordering::Relaxed) > p1
        });
    }
    stop.store(true, Ordering::Release);
    let stats = batch.join().unwrap();
    assert!(stats.naps >= 5 && stats.wakes == stats.naps, "{stats:?}");
    assert_eq!(bl.attached.load(Acquire), 0);
    // SAFETY: live handles, not used afterwards.
    unsafe {
        elfen_lc_detach(lc);
        elfen_page_destroy(page);
    }
}

/// The Rust API for Rust programs that call instrumented C: attach the
/// current thread, and the C thread-local pair watches the request lane.
#[test]
fn rust_attach_arms_the_c_fast_path() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("sig");
    let page = create(&path);
    std::thread::spawn(move || {
        let opts = elfen_runtime::BatchOptions::default().pin(false);
        elfen::open_current_thread(&path, 1, opts.clone()).unwrap();
        assert!(elfen::is_attached());
        let e = elfen::open_current_thread(&path, 1, opts).unwrap_err();
        assert_eq!(e.code, error::ESTATE);
        assert!(e.message.contains("already attached"), "{e}");
        let (word, expected) = tls::current();
        assert_eq!(expected, state::NEVER);
        assert_eq!(
            word,
            elfen::with_current_thread(|t| t.watch_word() as *const u64).unwrap()
        );
        elfen_check_slow();
        let (_, expected) = tls::current();
        // SAFETY: the word is mapped while attached.
        assert_eq!(expected, unsafe { std::ptr::read_volatile(word) });
        assert!(elfen::detach_current_thread());
        assert!(!elfen::detach_current_thread());
    })
    .join()
    .unwrap();
    // SAFETY: a live handle.
    unsafe { elfen_page_destroy(page) };
}

#[test]
fn kill_modes_and_heartbeat_from_c() {
    use elfen_shm::layout::control::{KILL, UNMANAGED};
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("sig");
    let page = create(&path);
    // SAFETY: a live handle throughout; `age` is writable.
    unsafe {
        let h = &*(elfen_page_header(page) as *const Header);
        assert_eq!(elfen_page_set_kill_mode(page, KILL_UNMANAGED), 0);
        assert_eq!(h.control.load(Acquire), UNMANAGED);
        assert_eq!(elfen_page_batch_mode(page), BATCH_UNMANAGED);
        assert_eq!(elfen_page_set_kill(page, 1), 0);
        assert_eq!(h.control.load(Acquire), KILL | UNMANAGED);
        assert_eq!(elfen_page_kill_mode(page), KILL_PAUSED);
        assert_eq!(elfen_page_batch_mode(page), BATCH_KILLED);
        assert_eq!(elfen_page_set_unmanaged(page, 0), 0);
        assert_eq!(elfen_page_set_kill_mode(page, KILL_OFF), 0);
        assert_eq!(h.control.load(Acquire), 0);
        assert_eq!(elfen_page_set_kill_mode(page, 9), error::EINVAL);
        assert!(last_error().contains("unknown mode 9"), "{}", last_error());

        let mut age = 7u64;
        assert_eq!(elfen_page_heartbeat_age_ns(page, &mut age), 0);
        assert_eq!(age, 7, "never beat: untouched");
        assert_eq!(elfen_page_set_heartbeat_stale(page, 1_000_000_000), 0);
        assert_eq!(h.heartbeat_stale_ns.load(Acquire), 1_000_000_000);
        assert_eq!(elfen_page_heartbeat_age_ns(page, &mut age), 1);
        assert!(age < 1_000_000_000);
        assert_eq!(elfen_page_heartbeat_stale(page), 0);
        let clock = (*page).page().clock();
        h.heartbeat.store(
            clock.now() - clock.ns_to_ticks(2_000_000_000),
            Ordering::Release,
        );
        assert_eq!(elfen_page_heartbeat_stale(page), 1);
        assert_eq!(elfen_page_batch_mode(page), BATCH_STALE);
        assert_eq!(elfen_page_beat(page), 0);
        assert_eq!(elfen_page_batch_mode(page), BATCH_MANAGED);
        assert_eq!(
            elfen_page_heartbeat_age_ns(page, std::ptr::null_mut()),
            error::EINVAL
        );

        let p = c_str(&path);
        let ro = elfen_page_open(p.as_ptr());
        assert!(!ro.is_null());
        for rc in [
            elfen_page_set_kill_mode(ro, KILL_OFF),
            elfen_page_set_unmanaged(ro, 1),
            elfen_page_beat(ro),
            elfen_page_set_heartbeat_stale(ro, 0),
        ] {
            assert_eq!(rc, error::ESTATE, "{}", last_error());
        }
        assert_eq!(elfen_page_kill_mode(ro), KILL_OFF);
        elfen_page_destroy(ro);
        assert_eq!(elfen_page_kill_mode(std::ptr::null()), error::EINVAL);
        elfen_page_destroy(page);
    }
}

fn c_str(p: &Path) -> CString {
    c(p.to_str().unwrap())
}
