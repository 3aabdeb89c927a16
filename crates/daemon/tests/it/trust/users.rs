//! Other users' processes: a same-named process of another user is not
//! adopted, `lc_user` adopts that user's processes only, and is checked
//! before anything is applied.

use super::{bystander, plan_config, sample, scrape, setup};
use crate::coalesce::metrics_addr;
use crate::common::*;
use std::time::Duration;

/// `name` run as user nobody: `sleep` with `argv[0]` set to `name` (the
/// daemon matches the base name of `argv[0]` as it matches `comm`), exec'd
/// by a shell that first waits 300 ms — so a daemon that looks every
/// 100 ms reads the process under the shell's name first, as it does in a
/// slow guest where bash takes that long to start, and must read it again.
fn impostor(name: &str) -> Proc {
    use std::os::unix::process::CommandExt;
    Proc(
        std::process::Command::new("/bin/bash")
            .args(["-c", &format!("sleep 0.3; exec -a {name} sleep 60")])
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("starting a process as nobody"),
    )
}

/// An LC service named `name` on cpu 0, idle but alive.
fn quiet_lc(name: &str) -> Proc {
    lc_helper(
        name,
        &[
            "--cpu=0",
            "--busy-us=0",
            "--idle-min-us=1000",
            "--idle-max-us=1000",
        ],
    )
}

#[test]
fn a_same_named_process_of_another_user_is_not_adopted() {
    let Some(()) = live_ok("a_same_named_process_of_another_user_is_not_adopted") else {
        return;
    };
    let _one = serial();
    let name = unique("u");
    let name = name[name.len() - 15..].to_string();
    let s = setup(
        &name,
        "",
        &format!(
            "[[batch]]\nname = \"spin\"\nmode = \"idle\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n"
        ),
    );
    // the LC (root) runs first: its user is the one adopted
    let lc = quiet_lc(&name);
    assert!(wait_until(Duration::from_secs(5), || {
        elfen_daemon::lc::find_by_name(&name).contains(&lc.pid())
    }));
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let start = d.output();
    assert!(
        start.contains("processes of user root (uid 0) only"),
        "the plan says whose processes are adopted:\n{start}"
    );
    d.wait_for(
        &format!("LC service found: pid {}", lc.pid()),
        Duration::from_secs(5),
    );
    // a process of nobody with the same name: seen, said once, not adopted
    let imp = impostor(&name);
    let said = d.wait_for(&format!("process {} ", imp.pid()), Duration::from_secs(5));
    assert!(
        said.contains("runs as user nobody (uid 65534), not user root (uid 0): ignored"),
        "{said}"
    );
    // the LC exits: the daemon looks for it every lost_rescan (10 ms) and
    // must not take the impostor for its restart
    drop(lc);
    d.wait_for("LC service exited", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(700));
    let out = d.output();
    let imp_s = imp.pid().to_string();
    for l in out.lines() {
        assert!(
            !(l.contains("LC service restarted") || l.contains("LC service found"))
                || !l.contains(&imp_s),
            "the impostor was adopted: {l}"
        );
    }
    assert_eq!(
        out.matches(&format!("process {} ", imp.pid())).count(),
        1,
        "said once per process, although looked at every 10 ms:\n{out}"
    );
    let metrics = scrape(&metrics_addr(&d));
    assert_eq!(
        sample(&metrics, "elfen_lc_ignored_processes_total"),
        Some(1.0),
        "{metrics}"
    );
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
}

#[test]
fn lc_user_adopts_that_users_processes_only_even_when_another_runs_first() {
    let Some(()) = live_ok("lc_user_adopts_that_users_processes_only_even_when_another_runs_first")
    else {
        return;
    };
    let _one = serial();
    let name = unique("w");
    let name = name[name.len() - 15..].to_string();
    let s = setup(
        &format!("{name}\"\nuser = \"root"),
        "",
        &format!(
            "[[batch]]\nname = \"spin\"\nmode = \"idle\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n"
        ),
    );
    // nobody's process runs first
    let imp = impostor(&name);
    assert!(wait_until(Duration::from_secs(5), || {
        elfen_daemon::lc::find_by_name(&name).contains(&imp.pid())
    }));
    let check = std::process::Command::new(BIN)
        .args(["--config", s.config.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{plan}");
    assert!(
        plan.contains("processes of user root (uid 0) only ([lc] user)")
            && plan.contains(&format!("pid {} (user nobody (uid 65534))", imp.pid())),
        "--check says whose processes are adopted, and which are not:\n{plan}"
    );
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    d.wait_for(&format!("process {} ", imp.pid()), Duration::from_secs(5));
    let lc = quiet_lc(&name);
    let found = d.wait_for("LC service found", Duration::from_secs(5));
    assert!(
        found.ends_with(&format!("pid {}", lc.pid())),
        "only root's process is the LC: {found}"
    );
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    assert!(status.success(), "{}", d.output());
}

#[test]
fn lc_user_is_checked_before_anything_is_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state.json");
    let base = plan_config(tmp.path(), &state);
    let with = |f: &dyn Fn(&mut elfen_daemon::Config)| {
        let mut c = base.clone();
        f(&mut c);
        elfen_daemon::Plan::resolve(&c).expect_err("refused")
    };
    let e = with(&|c| c.lc.user = Some(" ".into()));
    assert!(
        e.field == "lc.user" && e.reason.contains("not empty"),
        "{e}"
    );
    let e = with(&|c| c.lc.user = Some("no-such-user-here-xyz".into()));
    assert!(
        e.field == "lc.user" && e.reason.contains("no user named"),
        "{e}"
    );
    let e = with(&|c| {
        c.lc.comm = None;
        c.lc.cgroup = Some("/sys/fs/cgroup".into());
        c.lc.user = Some("root".into());
    });
    assert!(e.field == "lc.user" && e.reason.contains("cgroup"), "{e}");
    // a pid of another user than lc.user
    let (p, _) = bystander();
    let e = with(&|c| {
        c.lc.comm = None;
        c.lc.pid = Some(p.pid());
        c.lc.user = Some("65534".into());
    });
    assert!(
        e.field == "lc.pid" && e.reason.contains("not lc.user uid 65534")
            || e.reason.contains("not lc.user user nobody"),
        "{e}"
    );
    assert!(!state.exists() && !tmp.path().join("page").exists());
    // the defaults the docs give, and a bad value named
    let d = elfen_daemon::Config::default();
    assert_eq!(d.on_group_lost, elfen_daemon::config::OnGroupLost::Stop);
    assert_eq!(d.group_gone_ms, 300_000);
    let e = elfen_daemon::Config::parse("group_gone_ms = -1\n").unwrap_err();
    assert!(e.field.contains("line 1"), "{e}");
    assert!(d.lc.user.is_none());
    let e = elfen_daemon::Config::parse("on_group_lost = \"sometimes\"\n").unwrap_err();
    assert!(
        e.field.contains("line 1") && e.reason.contains("sometimes"),
        "{e}"
    );
}
