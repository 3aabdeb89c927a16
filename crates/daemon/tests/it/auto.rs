//! Mode `auto`: an LC whose busy periods are fixed work (a pointer chase
//! over a few MiB, so a memory-streaming co-runner makes them longer) and a
//! streaming batch: the daemon starts at idle, measures the contention in
//! its A/B periods (batch running vs stepped aside) and switches to guard,
//! saying why; the switch shows in the metrics and in `elfen status`; a
//! SIGKILL in the middle (possibly in a solo window, the group frozen) is
//! repaired by the recovery, and a clean stop restores everything.

use crate::coalesce::{metrics_addr, sample};
use crate::common::*;
use crate::live::{scrape, setup};
use std::time::Duration;

const AUTO: &str = "[auto]\nladder = [\"idle\", \"guard\"]\nperiod_ms = 1000\nsolo_ms = 200\n\
                    confirm = 1\nmin_dwell_s = 1\nstep_down_s = 600\nmin_periods = 20\n";

/// The LC: fixed-work busy periods on cpu 0, idle 0.5–1.5 ms between.
fn chase_lc(name: &str) -> Proc {
    lc_helper(
        name,
        &[
            "--cpu=0",
            "--chase-steps=20000",
            "--chase-kib=4096",
            "--idle-min-us=500",
            "--idle-max-us=1500",
        ],
    )
}

fn streamer_batch(name: &str) -> String {
    format!(
        "[[batch]]\nname = \"{name}\"\nmode = \"auto\"\ncommand = [\"{BIN}\", \"spin-helper\", \
         \"--stream-mib\", \"64\"]\n"
    )
}

#[test]
fn auto_switches_when_a_contending_batch_runs_and_every_switch_is_restored() {
    let test = "auto_switches_when_a_contending_batch_runs_and_every_switch_is_restored";
    let Some(()) = live_ok(test) else {
        return;
    };
    let _one = serial();
    let s = setup("au", AUTO, &streamer_batch("st"));
    let lc = chase_lc(&s.lc_name);
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let started = d.wait_for("auto starts at idle", Duration::from_secs(5));
    println!("{started}");
    let addr = metrics_addr(&d);
    let switch = d.wait_for("st: idle → guard:", Duration::from_secs(30));
    println!("{switch}");
    assert!(switch.contains("contention"), "{switch}");
    let m = scrape(&addr);
    let active = |mode: &str| {
        sample(
            &m,
            &format!("elfen_protection_active{{group=\"st\",mode=\"{mode}\"}}"),
        )
    };
    // a trial back down waits step_down_s (600 s): guard holds
    assert_eq!(
        (active("guard"), active("idle")),
        (Some(1.0), Some(0.0)),
        "{m}"
    );
    assert!(
        sample(&m, "elfen_protection_switches_total{group=\"st\"}").is_some_and(|n| n >= 1.0),
        "{m}"
    );
    let c = sample(&m, "elfen_auto_contention_ratio{group=\"st\"}");
    println!("contention now {c:?}");
    let page = elfen_ops::status::attach(&s.page).unwrap();
    let st = elfen_ops::status::PageStatus::read(&page, 1000.0).unwrap();
    let text = elfen_ops::render::text(&st, None);
    println!("{text}");
    assert!(
        text.contains("auto (guard)") && text.contains("idle → guard:"),
        "{text}"
    );
    drop(page);
    // a SIGKILL now: the next start repairs whatever it left (a frozen
    // group of a solo window included)
    let pid = d.pid();
    d.stop_with(libc::SIGKILL, Duration::from_secs(5))
        .expect("killed");
    let rec = std::fs::read_to_string(&s.state).expect("a killed daemon leaves its state file");
    assert!(rec.contains(&format!("elfen-daemon-{pid}")), "{rec}");
    let mut d2 = DaemonProc::start(&s.config, &s.state, &s.page);
    d2.wait_for("running", Duration::from_secs(10));
    let out = d2.output();
    assert!(out.contains("repaired"), "{out}");
    let old = group_dir("freezer", &format!("elfen-daemon-{pid}"));
    assert!(!old.exists(), "{} removed by the repair", old.display());
    // and a clean stop of the second restores everything
    std::thread::sleep(Duration::from_millis(1500));
    let status = d2
        .stop_with(libc::SIGTERM, Duration::from_secs(10))
        .expect("exits");
    assert!(status.success(), "{}", d2.output());
    drop(lc);
    assert!(!s.state.exists(), "nothing left to restore");
    let new = group_dir("freezer", &format!("elfen-daemon-{}", d2.pid()));
    assert!(!new.exists() || d2.pid() == 0, "{} removed", new.display());
}
