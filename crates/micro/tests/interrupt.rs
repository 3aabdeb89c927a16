//! Ctrl-C during `elfen micro`: the run stops with "interrupted" and the
//! signal page is removed. (Its own test binary: the interrupt flag is
//! process-wide and stays set.)

mod common;

use common::shm_dirs as ours;
use std::time::Duration;

#[test]
fn sigint_stops_the_run_and_removes_the_page() {
    let before = ours();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let args = [
        "micro",
        "--quiet",
        "--toggles",
        "10000000",
        "--json",
        json.to_str().unwrap(),
    ];
    let cmd = common::parse(&args).unwrap();
    let h = std::thread::spawn(move || cmd.run());
    // Wait until the page exists, then interrupt.
    let t = std::time::Instant::now();
    while ours().len() <= before.len() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: sends SIGINT to this process; the handler elfen micro
    // installed only sets a flag.
    unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
    let e = h.join().unwrap().unwrap_err();
    assert!(format!("{e:#}").contains("interrupted"), "{e:#}");
    assert!(!json.exists(), "no result file for an interrupted run");
    let left: Vec<String> = ours().difference(&before).cloned().collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}
