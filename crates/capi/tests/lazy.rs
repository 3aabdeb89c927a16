//! Lazy attach, as the hook library arms it (one test: it sets process-wide
//! environment variables and arms process-wide state, so it has its own
//! test binary and runs alone).

use elfen::batch::{elfen_batch_attached, elfen_check_slow};
use elfen::tls::{self, Kind};
use elfen_shm::layout::BatchLine;
use std::sync::atomic::Ordering::Acquire;

fn in_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().unwrap()
}

fn set(k: &str, v: Option<&str>) {
    // SAFETY: this binary's only test; no other thread reads the environment now.
    unsafe {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
}

#[test]
fn first_check_attaches_from_the_environment() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("sig");
    let page = elfen_shm::Page::create(
        &path,
        &elfen_shm::PageSpec::for_pairs(&[(0, vec![1])], 1, 0),
    )
    .unwrap();
    let line: &BatchLine = page.batch(1).unwrap();

    // not armed: an unattached thread's checks and slow path do nothing
    for v in [
        "ELFEN_PAGE",
        "ELFEN_LANE",
        "ELFEN_NAP",
        "ELFEN_PIN",
        "ELFEN_QUIET",
    ] {
        set(v, None);
    }
    set("ELFEN_PAGE", Some(path.to_str().unwrap()));
    assert!(!tls::lazy_attach_armed());
    in_thread(|| {
        assert!(!tls::would_take_slow_path());
        elfen_check_slow();
        assert_eq!(tls::kind(), Kind::Unattached);
    });

    // armed (what linking libelfen_hook does): the first check attaches
    tls::arm_lazy_attach();
    assert!(tls::lazy_attach_armed());
    set("ELFEN_PIN", Some("0"));
    set("ELFEN_NAP", Some("spin"));
    let (kind, attached, desc) = in_thread(|| {
        assert!(
            tls::would_take_slow_path(),
            "armed: the first check goes slow"
        );
        elfen_check_slow();
        let desc = elfen::with_current_thread(|t| t.describe()).unwrap_or_default();
        (tls::kind(), elfen_batch_attached(), desc)
    });
    assert_eq!((kind, attached), (Kind::Watching, 1), "{desc}");
    assert!(
        desc.contains("batch lane 1") && desc.contains("spin"),
        "{desc}"
    );
    assert!(desc.contains("not pinned"), "{desc}");
    assert_eq!(line.attached.load(Acquire), 0, "the exited thread detached");
    assert!(line.slow_checks.load(Acquire) >= 1);

    // ELFEN_LANE picks the lane; a request lane is refused, checks go off
    set("ELFEN_LANE", Some("0"));
    let (kind, err) = in_thread(|| {
        elfen_check_slow();
        (tls::kind(), elfen::last_error())
    });
    assert_eq!(kind, Kind::Off);
    assert!(err.contains("is a request lane"), "{err}");

    // a bad variable: off, with the variable named
    set("ELFEN_LANE", Some("one"));
    let (kind, err) = in_thread(|| {
        elfen_check_slow();
        (tls::kind(), elfen::last_error())
    });
    assert_eq!(kind, Kind::Off);
    assert!(err.contains("ELFEN_LANE=\"one\""), "{err}");

    // no ELFEN_PAGE: off (the warning goes to stderr, once per process)
    set("ELFEN_LANE", None);
    set("ELFEN_PAGE", None);
    let kind = in_thread(|| {
        elfen_check_slow();
        let k = tls::kind();
        assert!(!tls::would_take_slow_path(), "off: checks do nothing");
        k
    });
    assert_eq!(kind, Kind::Off);
    assert_eq!(line.attached.load(Acquire), 0);

    // disarmed again (elfen_set_lazy_attach(0)): no slow path at all
    set("ELFEN_PAGE", Some(path.to_str().unwrap()));
    elfen::set_lazy_attach(false);
    assert!(!tls::lazy_attach_armed());
    let kind = in_thread(|| {
        assert!(!tls::would_take_slow_path());
        elfen_check_slow();
        tls::kind()
    });
    assert_eq!(kind, Kind::Unattached);
    assert_eq!(line.attached.load(Acquire), 0);
    drop(page);
}
