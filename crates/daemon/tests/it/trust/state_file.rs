//! The state file and the page against other processes: one held by a
//! running process blocks the start naming it, a reused pid does not hold
//! them, and one another user could write blocks the start.

use super::{bystander, plan_config};
use std::time::Duration;

/// A state record written by `pid` (started at `start`, if recorded).
fn state_record(path: &std::path::Path, pid: u32, start: Option<u64>) {
    let start = start.map_or(String::new(), |s| format!("\"pid_start\": {s},\n"));
    std::fs::write(
        path,
        format!(
            "{{\"version\": 1, \"root\": \"/sys/fs/cgroup\", \"layout\": \"v1\", \"pid\": {pid},\n\
             {start}\"created\": [], \"originals\": [], \"enabled\": []}}\n"
        ),
    )
    .unwrap();
}

#[test]
fn a_state_file_held_by_a_running_process_blocks_the_start_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let c = plan_config(tmp.path(), &state);
    let (p, start) = bystander();
    state_record(&state, p.pid(), Some(start));
    let e = elfen_daemon::Plan::resolve(&c).expect_err("held");
    println!("{e}");
    assert_eq!(e.field, "state_file");
    for want in [
        format!("held by pid {} (sleep, ", p.pid()),
        "user root".to_string(),
        format!("kill -TERM {}", p.pid()),
        "another state_file".to_string(),
    ] {
        if want == "user root" && !elfen_cmd::proc::is_root() {
            continue;
        }
        assert!(e.reason.contains(&want), "{want:?} in {e}");
    }
    assert!(!tmp.path().join("page").exists(), "nothing applied");
}

#[test]
fn a_pid_reused_by_another_program_does_not_hold_the_state_file_or_the_page() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let c = plan_config(tmp.path(), &state);
    let (p, start) = bystander();
    // its start is not the one recorded: the writer is gone
    state_record(&state, p.pid(), Some(start.saturating_sub(1)));
    let plan = elfen_daemon::Plan::resolve(&c).expect("a dead writer's file is recovered");
    assert_eq!(plan.stale_state, Some(p.pid()));
    let note = plan.notes.join("\n");
    assert!(
        note.contains("now belongs to another program") && note.contains("sleep"),
        "{note}"
    );
    // a file of an older build (no start recorded), last written before
    // the process with its pid started
    state_record(&state, p.pid(), None);
    let f = std::fs::File::options().write(true).open(&state).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(f);
    let plan = elfen_daemon::Plan::resolve(&c).expect("judged by the file's time");
    assert_eq!(plan.stale_state, Some(p.pid()));
    // written after it started: it may be that process's own, so held
    state_record(&state, p.pid(), None);
    let e = elfen_daemon::Plan::resolve(&c).expect_err("held");
    assert!(e.reason.contains("held by"), "{e}");
    std::fs::remove_file(&state).unwrap();
    // a page whose creator's pid now belongs to a program started after it
    let page_path = tmp.path().join("page");
    let spec = elfen_shm::PageSpec::for_pairs(&[(0, vec![1])], 1, 0);
    let held = elfen_shm::Page::create(&page_path, &spec).unwrap();
    let h = held.header();
    h.creator_pid
        .store(p.pid(), std::sync::atomic::Ordering::Relaxed);
    h.created_unix_s
        .store(1_000, std::sync::atomic::Ordering::Relaxed);
    let plan = elfen_daemon::Plan::resolve(&c).expect("a dead creator's page is replaced");
    assert_eq!(plan.stale_page, Some(p.pid()));
    // created after that process started: its creator may be it, so in use
    h.created_unix_s.store(
        elfen_cmd::time::now_unix_s(),
        std::sync::atomic::Ordering::Relaxed,
    );
    let e = elfen_daemon::Plan::resolve(&c).expect_err("in use");
    assert!(
        e.field == "page"
            && e.reason.contains(&format!("pid {} (sleep", p.pid()))
            && e.reason.contains("kill -TERM"),
        "{e}"
    );
}

#[test]
fn a_state_file_another_user_could_write_blocks_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let state = shared.join("state.json");
    let c = plan_config(tmp.path(), &state);
    let e = elfen_daemon::Plan::resolve(&c).expect_err("a shared directory");
    println!("{e}");
    assert!(
        e.field == "state_file"
            && e.reason.contains(&shared.display().to_string())
            && e.reason.contains("writable by every user"),
        "{e}"
    );
    if !elfen_cmd::proc::is_root() {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Root,
            "another user's state file not tried",
        );
        return;
    }
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    state_record(&state, 1, None);
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let e = elfen_daemon::Plan::resolve(&c).expect_err("another user's file");
    println!("{e}");
    assert!(
        e.reason.contains("uid 65534") && e.reason.contains("remove it"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(&state).unwrap().lines().count(),
        2,
        "the file is left as it was"
    );
}
