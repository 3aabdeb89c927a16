//! Egress marking for real (root, BPF, a cgroup2 tree; skipped with the
//! reason otherwise), on an operator's group of a hybrid layout: the daemon
//! gives the group a directory of its own in the v2 tree, moves its
//! processes there, attaches its program; their packets are counted as
//! marked (metrics), a process outside is not; SIGTERM removes the v2
//! group, and after a SIGKILL the next start does. (That the marks put
//! the traffic behind the LC's is the netns test of elfen-isobench.)

use crate::common::*;
use crate::live::{scrape, setup};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn send_udp(n: u32) {
    let st = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "for i in $(seq {n}); do echo x > /dev/udp/127.0.0.1/9; done"
        ))
        .status()
        .unwrap();
    assert!(st.success());
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

#[test]
fn an_operators_group_sends_at_low_priority_and_nothing_is_left() {
    let test = "an_operators_group_sends_at_low_priority_and_nothing_is_left";
    let Some(()) = live_ok(test) else { return };
    let unified = Path::new("/sys/fs/cgroup/unified");
    if !unified.join("cgroup.controllers").exists() {
        println!(
            "skipped {test}: this machine has no hybrid v2 tree at {}",
            unified.display()
        );
        return;
    }
    let _one = serial();
    let g = TestGroup::new(&unique("eg"), &["freezer"]);
    // a member that sends UDP when told (a line on stdin)
    let mut member = Command::new("bash")
        .arg("-c")
        .arg("while read n; do for i in $(seq $n); do echo x > /dev/udp/127.0.0.1/9; done; echo done; done")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    g.add(member.id());
    let s = setup(
        "eg",
        "[memory]\nmin_available = 0\npressure = \"off\"\n",
        &format!(
            "[[batch]]\nname = \"up\"\nmode = \"cooperative\"\ncgroup = \"{}\"\negress = \"low\"\n",
            g.name
        ),
    );
    let _lc = lc_helper(&s.lc_name, &["--cpu=0"]);
    let mirror = unified.join(&g.name);
    {
        let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
        d.wait_for("running", Duration::from_secs(10));
        assert!(
            d.output().contains("egress at priority 1"),
            "{}",
            d.output()
        );
        assert!(mirror.is_dir(), "the daemon made {}", mirror.display());
        let procs = std::fs::read_to_string(mirror.join("cgroup.procs")).unwrap();
        assert!(
            procs
                .split_whitespace()
                .any(|p| p == member.id().to_string()),
            "the member joined the v2 group: {procs:?}"
        );
        let line = d.wait_for("metrics at http://", Duration::from_secs(1));
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap()
            .to_string();
        // wait one upkeep tick for the counter to be published
        std::thread::sleep(Duration::from_millis(300));
        let before = metric(&scrape(&addr), "elfen_egress_packets_total");
        send_udp(10); // from outside the group: not marked
        {
            use std::io::{BufRead, Write};
            let mut w = member.stdin.take().unwrap();
            writeln!(w, "10").unwrap();
            let mut r = std::io::BufReader::new(member.stdout.take().unwrap());
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            assert_eq!(l.trim(), "done");
            member.stdin = Some(w);
        }
        assert!(
            wait_until(Duration::from_secs(3), || {
                metric(&scrape(&addr), "elfen_egress_packets_total") >= before + 10
            }),
            "the member's 10 datagrams marked: {} → {}",
            before,
            metric(&scrape(&addr), "elfen_egress_packets_total")
        );
        assert!(
            metric(&scrape(&addr), "elfen_egress_packets_total") < before + 20,
            "datagrams from outside the group were marked"
        );
        // SIGTERM: the v2 group goes, the member back in the root
        let st = d.stop_with(libc::SIGTERM, Duration::from_secs(10)).unwrap();
        assert!(st.success(), "{}", d.output());
        assert!(!mirror.exists(), "{} left behind", mirror.display());
    }
    // SIGKILL: the next start repairs
    {
        let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
        d.wait_for("running", Duration::from_secs(10));
        assert!(mirror.is_dir());
        d.stop_with(libc::SIGKILL, Duration::from_secs(5));
        assert!(mirror.is_dir(), "a killed daemon leaves its group");
        let mut d2 = DaemonProc::start(&s.config, &s.state, &s.page);
        d2.wait_for("running", Duration::from_secs(10));
        assert!(
            d2.output()
                .contains(&format!("removed unified group {}", g.name)),
            "{}",
            d2.output()
        );
        d2.stop_with(libc::SIGTERM, Duration::from_secs(10));
        assert!(!mirror.exists(), "{} left behind", mirror.display());
    }
    elfen_cmd::proc::kill_pid(member.id());
    let _ = member.wait();
}
