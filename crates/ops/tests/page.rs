//! `elfen status` and `elfen ctl` against real pages in a temporary
//! directory (never /dev/shm).

use elfen_ops::ctl;
use elfen_ops::status::{self, Controller, PageStatus, Rates};
use elfen_runtime::LcLane;
use elfen_shm::KillMode;
use elfen_shm::{Page, PageSpec, policy};
use std::sync::Arc;

fn page(dir: &tempfile::TempDir) -> Arc<Page> {
    let spec = PageSpec::for_pairs(&[(0, vec![1])], policy::FIXED_BUDGET, 250_000);
    Arc::new(Page::create(dir.path().join("page"), &spec).unwrap())
}

#[test]
fn status_reads_every_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = page(&dir);
    let obs = status::attach(p.path()).unwrap();
    let s = PageStatus::read(&obs, 1000.0).unwrap();
    assert_eq!(s.creator_pid, std::process::id());
    assert!(s.creator_alive);
    assert_eq!(s.controller, Controller::CreatorAlive);
    assert_eq!(s.heartbeat_age_ms, None);
    assert!(!s.killed);
    assert_eq!(s.lanes.len(), 2);
    assert_eq!((s.lanes[0].role, s.lanes[1].role), ("request", "batch"));
    assert_eq!(s.lanes[0].policy, "fixed_budget");
    assert_eq!(s.lanes[0].budget_us, 250.0);
    assert_eq!(s.lanes[0].partners, vec![1]);
    assert!(!s.lanes[0].lc.busy);

    let mut lc = LcLane::attach(p.clone(), 0).unwrap();
    lc.request_begin_with_queue(42, 3);
    let busy = PageStatus::read(&obs, 1000.0).unwrap();
    assert!(busy.lanes[0].lc.busy);
    assert_eq!(busy.lanes[0].lc.request_id, 42);
    assert_eq!(busy.lanes[0].lc.queue_len, 3);
    assert_eq!(busy.lanes[0].lc.begins, 1);
    assert!(busy.lanes[0].lc.lc_tid_alive, "the LC thread is this one");
    std::thread::sleep(std::time::Duration::from_millis(20));
    lc.request_end_with_queue(0);
    let done = PageStatus::read(&obs, 1000.0).unwrap();
    assert!(!done.lanes[0].lc.busy);
    assert_eq!(done.lanes[0].lc.requests, 1);
    assert!(
        done.lanes[0].lc.busy_ms >= 19.0,
        "{}",
        done.lanes[0].lc.busy_ms
    );
    let r = Rates::between(&s, &done);
    assert!(r.lanes[0].lc_busy_frac > 0.0 && r.lanes[0].requests_per_s > 0.0);

    // a beating controller, then a stale one
    p.beat().unwrap();
    assert_eq!(
        PageStatus::read(&obs, 1000.0).unwrap().controller,
        Controller::Beating
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(
        PageStatus::read(&obs, 1.0).unwrap().controller,
        Controller::Stale
    );

    let text = elfen_ops::render::text(&done, Some(&r));
    assert!(
        text.contains("fixed_budget") && text.contains("kill switch: clear"),
        "{text}"
    );
    let json = serde_json::to_value(&done).unwrap();
    assert_eq!(json["lanes"][0]["lc"]["requests"], 1);
}

#[test]
fn kill_switch_off_and_on_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let p = page(&dir);
    assert_eq!(
        ctl::set(p.path(), KillMode::Paused).unwrap(),
        KillMode::Off,
        "was clear"
    );
    assert!(p.killed());
    let s = PageStatus::read(&status::attach(p.path()).unwrap(), 1000.0).unwrap();
    assert!(s.killed);
    assert_eq!(
        (s.kill_mode, s.batch_mode),
        ("paused", "paused (kill switch)")
    );
    assert!(elfen_ops::render::text(&s, None).contains("SET (paused)"));
    assert_eq!(
        ctl::set(p.path(), KillMode::Paused).unwrap(),
        KillMode::Paused
    );
    // unmanaged: borrowing off, batch runs
    assert_eq!(
        ctl::set(p.path(), KillMode::Unmanaged).unwrap(),
        KillMode::Paused
    );
    assert!(!p.killed() && p.unmanaged());
    let s = PageStatus::read(&status::attach(p.path()).unwrap(), 1000.0).unwrap();
    assert_eq!((s.kill_mode, s.batch_mode), ("unmanaged", "unmanaged"));
    assert_eq!(
        ctl::set(p.path(), KillMode::Off).unwrap(),
        KillMode::Unmanaged
    );
    assert!(!p.killed() && !p.unmanaged());
}

#[test]
fn a_stale_heartbeat_shows_in_status() {
    let dir = tempfile::tempdir().unwrap();
    let p = page(&dir);
    let obs = status::attach(p.path()).unwrap();
    p.set_heartbeat_stale(500_000_000).unwrap();
    p.beat().unwrap();
    let fresh = PageStatus::read(&obs, 1000.0).unwrap();
    assert_eq!(fresh.controller, Controller::Beating);
    assert_eq!(fresh.heartbeat_stale_ms, Some(500.0));
    assert_eq!(fresh.batch_mode, "managed");
    // the last beat 2 s ago (not a sleep: what counts is the age the page
    // shows), within the 60 s asked for here but not the page's 500 ms
    let c = p.clock();
    let past = c.now().saturating_sub(c.ns_to_ticks(2_000_000_000)).max(1);
    p.header()
        .heartbeat
        .store(past, std::sync::atomic::Ordering::Release);
    let stale = PageStatus::read(&obs, 60_000.0).unwrap();
    assert_eq!(
        stale.controller,
        Controller::Stale,
        "the page's own bound (500 ms) applies"
    );
    assert_eq!(stale.batch_mode, "paused (heartbeat stale)");
}

#[test]
fn missing_page_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = status::attach(&missing).unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
    let e = ctl::set(&missing, KillMode::Paused)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
}

fn scrape(addr: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn metrics_are_scraped_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let p = page(&dir);
    let mut lc = LcLane::attach(p.clone(), 0).unwrap();
    lc.request_begin(7);
    lc.request_end();
    lc.request_begin(8);
    p.set_kill(true).unwrap();
    p.beat().unwrap();
    let reg = elfen_ops::metrics::page_registry(p.clone(), 1000.0);
    let any_port = "127.0.0.1:0".parse().unwrap();
    let server = elfen_ops::metrics::serve(any_port, reg).unwrap();
    let out = scrape(server.addr(), "/metrics");
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    assert!(out.contains("application/openmetrics-text"), "{out}");
    for line in [
        "elfen_lc_requests_total{lane=\"0\",cpu=\"0\"} 1",
        "elfen_lc_running{lane=\"0\",cpu=\"0\"} 1",
        "elfen_batch_naps_total{lane=\"1\",cpu=\"1\"} 0",
        "elfen_lane_policy{lane=\"1\",cpu=\"1\",role=\"batch\",policy=\"fixed_budget\"} 1",
        "elfen_lane_budget_seconds{lane=\"0\",cpu=\"0\"} 0.00025",
        "elfen_kill_switch 1.0",
        "elfen_controller_alive 1",
        "# EOF",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    assert!(out.contains("elfen_lc_busy_seconds_total{lane=\"0\",cpu=\"0\"}"));
    assert!(out.contains("elfen_heartbeat_age_seconds "));
    assert!(scrape(server.addr(), "/other").starts_with("HTTP/1.1 404"));
    assert_eq!(server.scrapes(), 1);

    // the same port again: a clear error
    let e = elfen_ops::metrics::serve(server.addr(), elfen_ops::metrics::page_registry(p, 1000.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("in use"), "{e}");
}

#[test]
fn garbled_batch_lines_are_shown_as_they_are() {
    // A permitted batch writer may store any bytes in the batch segment:
    // status, its rates, its text and JSON, and the metrics read them as
    // they are, without a panic (debug builds panic on overflow too).
    let dir = tempfile::tempdir().unwrap();
    let p = page(&dir);
    let obs = status::attach(p.path()).unwrap();
    let seg = elfen_shm::Segment::attach(p.batch_shmid(), true).unwrap();
    let header = elfen_shm::layout::BATCH_HEADER_SIZE;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for round in 0..64 {
        let before = PageStatus::read(&obs, 1000.0).unwrap();
        // the lines (the header too would make new attaches refuse the page)
        let bytes: Vec<u8> = (header..seg.len())
            .map(|_| match round % 4 {
                0 => 0xff,
                1 => 0x00,
                2 => 0x80,
                _ => {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                }
            })
            .collect();
        seg.write_bytes(header, &bytes);
        let after = PageStatus::read(&obs, 1000.0).unwrap();
        let r = Rates::between(&before, &after);
        let _ = Rates::between(&after, &before);
        let text = elfen_ops::render::text(&after, Some(&r));
        assert!(text.contains("batch"), "{text}");
        serde_json::to_string(&after).unwrap();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(
            &mut out,
            &elfen_ops::metrics::page_registry(p.clone(), 1000.0),
        )
        .unwrap();
        assert!(out.contains("elfen_batch_naps_total"), "{out}");
    }
    seg.write_bytes(header, &vec![0xff; seg.len() - header]);
    let s = PageStatus::read(&obs, 1000.0).unwrap();
    assert_eq!(s.lanes[1].batch.naps, u64::MAX, "read as it is");
    assert_eq!(s.lanes[1].batch.sleepers, u32::MAX);
}

/// `elfen status` of a daemon's page shows what the daemon runs — the LC
/// and where it is watched, the signal source, the host, its groups' modes,
/// names and owners — from the record beside the page.
#[test]
fn status_shows_the_daemons_modes_and_groups() {
    use elfen_ops::health::{DaemonAbout, DaemonHealth, GroupHealth, GroupState, HEALTH_SCHEMA};
    let dir = tempfile::tempdir().unwrap();
    let p = page(&dir);
    let h = DaemonHealth {
        schema: HEALTH_SCHEMA.into(),
        pid: std::process::id(),
        lc_ignored: 0,
        lc_unseen: Some("the LC service used 400 ms of CPU in the last 5.0 s …".into()),
        groups: vec![GroupHealth {
            name: "batch".into(),
            mode: "idle".into(),
            path: "batch.slice".into(),
            state: GroupState::Waiting,
            reason: Some("nightly.service runs nothing now".into()),
            failures: vec![],
            named: Some("slice batch.slice (found by the slice's name)".into()),
            owner: Some("systemd (batch.slice)".into()),
            protection: None,
        }],
        about: Some(DaemonAbout {
            lc: "unit redis-server.service (and every group below)".into(),
            lc_groups: vec!["/sys/fs/cgroup/system.slice/redis-server.service".into()],
            host: "cgroup v2 under systemd; the daemon's group … is delegated to it".into(),
            placement: "commands' groups: system.slice/elfen-daemon.service/batch-<name>".into(),
            policy: "borrow_idle".into(),
            source: "bpf: tp_btf/sched_switch".into(),
        }),
    };
    h.write(p.path()).unwrap();
    let obs = status::attach(p.path()).unwrap();
    let s = PageStatus::read(&obs, 1000.0).unwrap();
    assert_eq!(s.daemon.as_ref(), Some(&h));
    let text = elfen_ops::render::text(&s, None);
    for want in [
        "LC unit redis-server.service",
        "watched in /sys/fs/cgroup/system.slice/redis-server.service",
        "signal: bpf",
        "policy: borrow_idle",
        "host: cgroup v2 under systemd",
        "batch-<name>",
        "waiting — nightly.service runs nothing now",
        "owned by systemd (batch.slice)",
        "WARNING: LC UNSEEN: the LC service used 400 ms of CPU",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
    assert!(h.troubled(), "an LC the lanes never see is trouble");
}
