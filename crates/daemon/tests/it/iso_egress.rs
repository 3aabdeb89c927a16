//! Egress marking for real (root, BPF, a cgroup2 tree — the v2 hierarchy
//! or a hybrid layout's v2 tree —, `ip` and `tc`; skipped with the need
//! otherwise), observed where it matters: in the queueing discipline.
//! Each test makes two network namespaces joined by a veth pair, with a
//! priority qdisc on the sending side, and counts the packets of its
//! normal class (1:2) and its low one (1:3) (`tc -s class show`): a
//! `prio` qdisc (three bands; its default priomap puts `skb->priority` 0
//! in band 1:2 and 1, the daemon's default low priority, in band 1:3), or
//! where the kernel has no `prio` (`sch_prio` not built) an `htb` qdisc
//! whose default class is 1:2, the daemon then configured with `[egress]
//! priority` = class 1:3's id (HTB puts a packet whose priority names one
//! of its classes in that class):
//!
//! - a batch command the daemon starts (its group made by the daemon)
//!   sends UDP through the link: its datagrams go to the low band and are
//!   counted as marked (metrics); datagrams of a process outside the group
//!   go to the normal band;
//! - an operator's group: the daemon attaches its program to the group's
//!   directory in the v2 tree (on hybrid a directory of its own, where the
//!   group's processes are moved); a member's datagrams go to the low band
//!   while the daemon runs and to the normal band once it has stopped —
//!   SIGTERM detaches the program (and removes a hybrid mirror), a SIGKILL
//!   takes the program with the daemon (the next start removes the
//!   mirror a killed daemon left).
//!
//! (That the marks put the traffic behind the LC's under load is the
//! netns benchmark of elfen-isobench.)

use crate::coalesce::metrics_addr;
use crate::common::*;
use crate::live::{scrape, setup};
use elfen_cgroup::Layout;
use elfen_cmd::skip::{Need, skip_test};
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `args`; the error says the command and its stderr.
fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two network namespaces joined by a veth pair, a priority qdisc on the
/// sending end (`prio`, else `htb`); deleted (and with them the link)
/// when dropped.
struct PrioLink {
    /// The sending side's namespace.
    a: String,
    b: String,
    /// `a`'s veth end.
    dev: String,
    /// `b`'s address.
    ip_b: String,
    /// The qdisc (`prio` or `htb`).
    qdisc: &'static str,
    /// The `[egress] priority` that puts packets in class 1:3.
    low_priority: u32,
}

impl PrioLink {
    fn new(tag: &str) -> PrioLink {
        let id = std::process::id();
        let (x, y) = (id % 200 + 20, id / 200 % 250);
        // device names: at most 15 bytes
        let (a, b) = (
            format!("elfen-dt{id}-{tag}a"),
            format!("elfen-dt{id}-{tag}b"),
        );
        let (dev, dev_b) = (
            format!("edt{}{tag}a", id % 1_000_000),
            format!("edt{}{tag}b", id % 1_000_000),
        );
        let (addr_a, addr_b) = (format!("10.{x}.{y}.1/24"), format!("10.{x}.{y}.2/24"));
        // dropped on a failure: what was made is removed
        let mut n = PrioLink {
            a: a.clone(),
            b: b.clone(),
            dev: dev.clone(),
            ip_b: format!("10.{x}.{y}.2"),
            qdisc: "prio",
            low_priority: 1,
        };
        let steps: [&[&str]; 7] = [
            &["ip", "netns", "add", &a],
            &["ip", "netns", "add", &b],
            &[
                "ip", "link", "add", &dev, "netns", &a, "type", "veth", "peer", "name", &dev_b,
                "netns", &b,
            ],
            &["ip", "-n", &a, "addr", "add", &addr_a, "dev", &dev],
            &["ip", "-n", &b, "addr", "add", &addr_b, "dev", &dev_b],
            &["ip", "-n", &a, "link", "set", &dev, "up"],
            &["ip", "-n", &b, "link", "set", &dev_b, "up"],
        ];
        for s in steps {
            if let Err(e) = run(s) {
                drop(n);
                panic!("making the test's network: {e}");
            }
        }
        let tc = |args: &[&str]| {
            let mut v = vec!["tc", "-n", &a];
            v.extend_from_slice(args);
            run(&v)
        };
        let root = ["qdisc", "replace", "dev", &dev, "root", "handle", "1:"];
        if let Err(no_prio) = tc(&[&root[..], &["prio"]].concat()) {
            let htb = tc(&[&root[..], &["htb", "default", "2"]].concat()).and_then(|()| {
                for class in ["1:2", "1:3"] {
                    let c = [
                        "class", "add", "dev", &dev, "parent", "1:", "classid", class,
                    ];
                    tc(&[&c[..], &["htb", "rate", "1gbit"]].concat())?;
                }
                Ok(())
            });
            if let Err(e) = htb {
                drop(n);
                panic!("a priority qdisc for the test: {no_prio}; {e}");
            }
            println!("no prio qdisc here ({no_prio}): htb, low priority = class 1:3");
            n.qdisc = "htb";
            n.low_priority = 0x0001_0003;
        }
        n
    }

    /// Packets class `1:<class>` sent so far.
    fn band(&self, class: u32) -> u64 {
        let out = Command::new("tc")
            .args(["-n", &self.a, "-s", "class", "show", "dev", &self.dev])
            .output()
            .expect("tc");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        while let Some(l) = lines.next() {
            if l.starts_with(&format!("class {} 1:{class} ", self.qdisc)) {
                let sent = lines.next().unwrap_or_default();
                // " Sent 280 bytes 4 pkt (dropped 0, …)"
                let w: Vec<&str> = sent.split_whitespace().collect();
                if let Some(i) = w.iter().position(|x| *x == "pkt") {
                    return w[i - 1].parse().unwrap_or(0);
                }
            }
        }
        panic!("no class 1:{class} in tc's output:\n{text}");
    }

    /// Packets of the normal (1:2) and low (1:3) classes.
    fn bands(&self) -> (u64, u64) {
        (self.band(2), self.band(3))
    }

    /// A shell loop, in namespace `a`, sending one UDP datagram to `b`.
    fn send_line(&self) -> String {
        format!("echo x > /dev/udp/{}/9", self.ip_b)
    }

    /// Sends `n` datagrams from a process of the test (in no batch group).
    fn send(&self, n: u32) {
        let st = Command::new("ip")
            .args(["netns", "exec", &self.a, "bash", "-c"])
            .arg(format!(
                "for i in $(seq {n}); do {}; done",
                self.send_line()
            ))
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for PrioLink {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            if let Err(e) = run(&["ip", "netns", "del", ns]) {
                println!("cleanup: {e}");
            }
        }
    }
}

/// `None` (the skip recorded) unless the daemon can mark egress here and
/// the test can make its network.
fn egress_ok(test: &str) -> Option<()> {
    live_ok(test)?;
    let h = cgroups();
    if h.unified().is_none() {
        let need = Need::Input(h.root().join("unified"));
        skip_test(
            test,
            need,
            "a cgroup2 tree (v2, or a hybrid layout's unified/): cgroup BPF programs attach \
             only to cgroup2 groups",
        );
        return None;
    }
    for p in ["ip", "tc"] {
        let on_path = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()));
        if !on_path {
            skip_test(
                test,
                Need::Program(p.into()),
                "the test's network (iproute2)",
            );
            return None;
        }
    }
    Some(())
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

#[test]
fn a_batch_commands_traffic_is_queued_in_the_low_band() {
    let test = "a_batch_commands_traffic_is_queued_in_the_low_band";
    let Some(()) = egress_ok(test) else { return };
    let _one = serial();
    let net = PrioLink::new("c");
    // the batch command sends a datagram every 50 ms, in namespace a
    let s = setup(
        "egc",
        &format!(
            "[memory]\nmin_available = 0\npressure = \"off\"\n[egress]\npriority = {}\n",
            net.low_priority
        ),
        &format!(
            "[[batch]]\nname = \"up\"\nmode = \"cooperative\"\negress = \"low\"\n\
             command = [\"ip\", \"netns\", \"exec\", \"{}\", \"bash\", \"-c\", \
             \"while :; do {}; sleep 0.05; done\"]\n",
            net.a,
            net.send_line()
        ),
    );
    let _lc = lc_helper(&s.lc_name, &["--cpu=0"]);
    let (normal0, low0) = net.bands();
    let d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    assert!(
        d.output().contains(&format!(
            "batch up: egress at priority {}",
            net.low_priority
        )),
        "{}",
        d.output()
    );
    let addr = metrics_addr(&d);
    // outside the group: the normal band
    net.send(10);
    assert!(
        wait_until(patient(Duration::from_secs(5)), || net.band(3) >= low0 + 10),
        "the batch command's datagrams in the low band: {:?} → {:?}",
        (normal0, low0),
        net.bands()
    );
    let (normal, low) = net.bands();
    // the counter is published at the daemon's upkeep ticks
    let marked = || metric(&scrape(&addr), "elfen_egress_packets_total");
    wait_until(patient(Duration::from_secs(2)), || marked() >= low - low0);
    let marked = marked();
    println!(
        "normal band {} packets, low band {} packets, {marked} marked",
        normal - normal0,
        low - low0
    );
    assert!(
        normal >= normal0 + 10,
        "the test's 10 datagrams in the normal band: {normal0} → {normal}"
    );
    assert!(
        marked >= low - low0,
        "every packet of the low band was marked: {} in the band, {marked} marked",
        low - low0
    );
}

#[test]
fn an_operators_group_sends_at_low_priority_and_nothing_is_left() {
    let test = "an_operators_group_sends_at_low_priority_and_nothing_is_left";
    let Some(()) = egress_ok(test) else { return };
    let _one = serial();
    let h = cgroups();
    let net = PrioLink::new("o");
    let g = TestGroup::new(&unique("eg"), &["freezer"]);
    // a member that sends datagrams in namespace a when told (a line on
    // stdin: how many), then says "done"
    let mut member = Proc(
        Command::new("ip")
            .args(["netns", "exec", &net.a, "bash", "-c"])
            .arg(format!(
                "while read n; do for i in $(seq $n); do {}; done; echo done; done",
                net.send_line()
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    g.add(member.pid());
    let mut to = member.0.stdin.take().unwrap();
    let mut from = std::io::BufReader::new(member.0.stdout.take().unwrap());
    let mut member_sends = |n: u32| {
        writeln!(to, "{n}").unwrap();
        let mut l = String::new();
        from.read_line(&mut l).unwrap();
        assert_eq!(l.trim(), "done");
    };
    // the member's datagrams in the low band (true) or the normal one
    let mut sends_low = |low: bool| {
        let (n0, l0) = net.bands();
        member_sends(10);
        let (n1, l1) = net.bands();
        let (normal, marked) = (n1 - n0, l1 - l0);
        if low {
            assert!(
                marked >= 10 && normal < 10,
                "the member's 10 datagrams in the low band: normal +{normal}, low +{marked}"
            );
        } else {
            assert!(
                normal >= 10 && marked == 0,
                "the member's 10 datagrams in the normal band: normal +{normal}, low +{marked}"
            );
        }
    };
    let s = setup(
        "eg",
        &format!(
            "[memory]\nmin_available = 0\npressure = \"off\"\n[egress]\npriority = {}\n",
            net.low_priority
        ),
        &format!(
            "[[batch]]\nname = \"up\"\nmode = \"cooperative\"\ncgroup = \"{}\"\negress = \"low\"\n",
            g.name
        ),
    );
    let _lc = lc_helper(&s.lc_name, &["--cpu=0"]);
    // where the program goes: the group itself on v2, a mirror on hybrid
    let hybrid = h.layout() == Layout::Hybrid;
    let unified = h.unified().expect("egress_ok checked").join(&g.name);
    sends_low(false);
    {
        let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
        d.wait_for("running", Duration::from_secs(10));
        assert!(
            d.output().contains(&format!(
                "egress at priority {} (BPF on {}",
                net.low_priority,
                unified.display()
            )),
            "{}",
            d.output()
        );
        assert!(unified.is_dir(), "{}", unified.display());
        let procs = std::fs::read_to_string(unified.join("cgroup.procs")).unwrap();
        assert!(
            procs
                .split_whitespace()
                .any(|p| p == member.pid().to_string()),
            "the member is in the v2 group: {procs:?}"
        );
        let addr = metrics_addr(&d);
        std::thread::sleep(Duration::from_millis(300));
        let before = metric(&scrape(&addr), "elfen_egress_packets_total");
        net.send(10); // from outside the group: not marked
        sends_low(true);
        assert!(
            wait_until(patient(Duration::from_secs(3)), || {
                metric(&scrape(&addr), "elfen_egress_packets_total") >= before + 10
            }),
            "the member's 10 datagrams counted as marked: {} → {}",
            before,
            metric(&scrape(&addr), "elfen_egress_packets_total")
        );
        assert!(
            metric(&scrape(&addr), "elfen_egress_packets_total") < before + 20,
            "datagrams from outside the group were marked"
        );
        // SIGTERM: the program detached (a hybrid mirror removed, the
        // member back in the root)
        let st = d
            .stop_with(libc::SIGTERM, patient(Duration::from_secs(10)))
            .unwrap();
        assert!(st.success(), "{}", d.output());
        assert_eq!(!unified.exists(), hybrid, "{}", unified.display());
        sends_low(false);
    }
    // SIGKILL: the program goes with the daemon; the next start repairs
    // what the killed one left (a hybrid mirror)
    {
        let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
        d.wait_for("running", Duration::from_secs(10));
        sends_low(true);
        d.stop_with(libc::SIGKILL, patient(Duration::from_secs(5)));
        sends_low(false);
        assert!(unified.is_dir(), "{}", unified.display());
        let mut d2 = DaemonProc::start(&s.config, &s.state, &s.page);
        d2.wait_for("running", Duration::from_secs(10));
        if hybrid {
            assert!(
                d2.output()
                    .contains(&format!("removed unified group {}", g.name)),
                "{}",
                d2.output()
            );
        }
        sends_low(true);
        d2.stop_with(libc::SIGTERM, patient(Duration::from_secs(10)));
        assert_eq!(!unified.exists(), hybrid, "{}", unified.display());
        sends_low(false);
    }
    drop(to);
}
