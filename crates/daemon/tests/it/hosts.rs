//! The host's names and its owners, planned on fake trees: an LC selected
//! by systemd unit, batch by slice, pods and containers; the groups of
//! commands placed below the daemon's delegated group on a systemd host and
//! refused (naming the unit) where it is not delegated; groups of the
//! kubelet with its static CPU manager left alone; knobs of one cgroup
//! version asked on the other. Every refusal applies nothing. The host's
//! situation is given (`Plan::resolve_with`), so these run anywhere.

use crate::common::{fake_root, tree};
use elfen_cgroup::{Delegation, GroupPath, HostSituation, Layout, Owner};
use elfen_daemon::config::Config;
use elfen_daemon::lc::LcTarget;
use elfen_daemon::placement::Placement;
use elfen_daemon::plan::{GroupSource, Plan};
use std::path::{Path, PathBuf};

const POD: &str = "1f3b9c2e-8d4a-4b1e-9f00-3c2d1e0f9a8b";

/// A systemd host on cgroup v2, as directories: redis.service, a batch
/// slice, the daemon's own unit, and a Kubernetes node's pods (systemd
/// driver).
fn systemd_v2_root(dir: &Path) -> PathBuf {
    let root = dir.join("cgroup");
    let group = |p: &Path, controllers: &str| {
        std::fs::create_dir_all(p).unwrap();
        for (f, v) in [
            ("cgroup.procs", ""),
            ("cgroup.threads", ""),
            ("cgroup.controllers", controllers),
            ("cgroup.subtree_control", ""),
            ("cgroup.freeze", "0\n"),
            ("cgroup.events", "populated 0\nfrozen 0\n"),
            ("cpu.weight", "100\n"),
            ("cpu.idle", "0\n"),
            ("cpuset.cpus", "\n"),
            ("cpuset.cpus.effective", "0-1\n"),
        ] {
            std::fs::write(p.join(f), v).unwrap();
        }
    };
    group(&root, "cpuset cpu io memory pids\n");
    std::fs::write(root.join("cgroup.subtree_control"), "cpuset cpu\n").unwrap();
    std::fs::remove_file(root.join("cpu.weight")).unwrap();
    let uid = POD.replace('-', "_");
    for g in [
        "system.slice".to_string(),
        "system.slice/redis.service".into(),
        "system.slice/elfen-daemon.service".into(),
        "batch.slice".into(),
        "kubepods.slice".into(),
        "kubepods.slice/kubepods-besteffort.slice".into(),
        format!("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice"),
    ] {
        group(&root.join(&g), "cpuset cpu\n");
    }
    std::fs::write(
        root.join("system.slice/cgroup.subtree_control"),
        "cpuset cpu\n",
    )
    .unwrap();
    std::fs::write(
        root.join("kubepods.slice/cgroup.subtree_control"),
        "cpuset cpu\n",
    )
    .unwrap();
    let logs = dir
        .join("host/var/log/pods")
        .join(format!("batch_nightly_{POD}"));
    std::fs::create_dir_all(logs).unwrap();
    root
}

/// A configuration on the fake root: `body` may start with top-level keys;
/// the writer runs SCHED_OTHER unless a guard group needs it above the
/// guards.
fn config(dir: &Path, root: &Path, body: &str) -> Config {
    let signal = if body.contains("\"guard\"") {
        ""
    } else {
        "[signal]\npriority = 0\n"
    };
    let text = format!(
        "page = \"{}\"\nstate_file = \"{}\"\ncgroup_root = \"{}\"\nhost_root = \"{}\"\n\
         {body}{signal}",
        dir.join("page").display(),
        dir.join("state/daemon.json").display(),
        root.display(),
        dir.join("host").display()
    );
    Config::parse(&text).unwrap_or_else(|e| panic!("{text}\n→ {e}"))
}

/// The daemon in its unit's group, delegated to it or not.
fn situation(delegated: bool) -> HostSituation {
    let unit = Some("elfen-daemon.service".to_string());
    HostSituation {
        systemd: true,
        layout: Layout::V2,
        own_group: Some(GroupPath::new("system.slice/elfen-daemon.service").unwrap()),
        delegation: if delegated {
            Delegation::Delegated {
                unit,
                how: "a test".into(),
            }
        } else {
            Delegation::NotDelegated {
                unit,
                why: "a test".into(),
            }
        },
    }
}

/// Refused naming `field` and `reason`; nothing applied.
fn refused(dir: &Path, c: &Config, host: HostSituation, field: &str, reason: &str) {
    let before = tree(&dir.join("cgroup"));
    let e = Plan::resolve_with(c, Some(host)).expect_err("must be refused");
    assert!(
        e.field.contains(field) && e.reason.contains(reason),
        "expected {field}: …{reason}…, got {e}"
    );
    assert!(!dir.join("page").exists() && !dir.join("state").exists());
    assert_eq!(
        tree(&dir.join("cgroup")),
        before,
        "the cgroup root is untouched"
    );
}

const LC_UNIT: &str = "[lc]\nunit = \"redis.service\"\n";

#[test]
fn an_lc_unit_and_a_batch_slice() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let root = systemd_v2_root(d);
    let c = config(
        d,
        &root,
        &format!(
            "{LC_UNIT}[[batch]]\nname = \"b\"\nmode = \"cooperative\"\nslice = \"batch.slice\"\n"
        ),
    );
    let plan = Plan::resolve_with(&c, Some(situation(false))).unwrap();
    match &plan.lc {
        LcTarget::Groups(t) => assert_eq!(t.selector.to_string(), "unit redis.service"),
        t => panic!("{t}"),
    }
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("system.slice/redis.service") && n.contains("by id in the kernel")),
        "{:?}",
        plan.notes
    );
    let g = &plan.groups[0];
    assert_eq!(g.path.as_str(), "batch.slice");
    assert_eq!(g.source, GroupSource::Existing);
    assert_eq!(
        g.owner,
        Owner::Systemd {
            unit: "batch.slice".into()
        }
    );
    assert!(g.named.as_deref().unwrap().starts_with("slice batch.slice"));
    assert!(!g.follows, "a slice is an operator's standing group");
    // no commands: not delegated is fine
    assert_eq!(plan.placement, Placement::Root);
    assert!(
        plan.describe().contains("slice batch.slice"),
        "{}",
        plan.describe()
    );
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("systemd's (batch.slice)")),
        "what systemd may write over is said: {:?}",
        plan.notes
    );
    // a unit as a batch group follows the unit
    let c = config(
        d,
        &root,
        &format!(
            "{LC_UNIT}[[batch]]\nname = \"b\"\nmode = \"cooperative\"\nunit = \"redis.service\"\n"
        ),
    );
    assert!(
        Plan::resolve_with(&c, Some(situation(false)))
            .unwrap()
            .groups[0]
            .follows
    );
}

#[test]
fn names_that_do_not_exist_are_refused_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let root = systemd_v2_root(d);
    let coop = "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\nslice = \"batch.slice\"\n";
    for (lc, field, reason) in [
        (
            "unit = \"nosuch.service\"",
            "lc.unit",
            "unit nosuch.service: not found",
        ),
        (
            "container = \"web\"",
            "lc.container",
            "container web: not found: no container engine's records here",
        ),
        ("pod = \"default/redis\"", "lc.pod", "default_redis_<uid>"),
        (
            "pod_uid = \"22222222-3333-4444-5555-666666666666\"",
            "lc.pod_uid",
            "does not run on this node",
        ),
        ("unit = \"redis\"", "lc.unit", "ends in"),
    ] {
        let c = config(d, &root, &format!("[lc]\n{lc}\n{coop}"));
        refused(d, &c, situation(false), field, reason);
    }
    let c = config(
        d,
        &root,
        &format!(
            "{LC_UNIT}[[batch]]\nname = \"b\"\nmode = \"cooperative\"\nslice = \"gone.slice\"\n"
        ),
    );
    refused(
        d,
        &c,
        situation(false),
        "batch[0].slice",
        "slice gone.slice: not found",
    );
    // a pod by name, through the kubelet's log directories
    let c = config(
        d,
        &root,
        &format!(
            "{LC_UNIT}[[batch]]\nname = \"b\"\nmode = \"cooperative\"\npod = \"batch/nightly\"\n"
        ),
    );
    let plan = Plan::resolve_with(&c, Some(situation(false))).unwrap();
    assert!(plan.groups[0].path.as_str().ends_with(&format!(
        "kubepods-besteffort-pod{}.slice",
        POD.replace('-', "_")
    )));
    assert_eq!(plan.groups[0].owner, Owner::Kubelet);
    assert!(plan.groups[0].follows);
    // guaranteed pods have no group of their class
    let e = Config::parse("[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\nqos = \"guaranteed\"\n")
        .unwrap()
        .check()
        .unwrap_err();
    assert!(
        e.field == "batch[0].qos" && e.reason.contains("one group"),
        "{e}"
    );
    let e = Config::parse("[lc]\nunit = \"a.service\"\nuser = \"root\"\n[[batch]]\nname = \"b\"\nslice = \"b.slice\"\n")
        .unwrap()
        .check()
        .unwrap_err();
    assert!(e.field == "lc.user" && e.reason.contains("not unit"), "{e}");
    let e = Config::parse(
        "[lc]\nunit = \"a.service\"\ncomm = \"a\"\n[[batch]]\nname = \"b\"\nslice = \"b.slice\"\n",
    )
    .unwrap()
    .check()
    .unwrap_err();
    assert!(e.field == "lc" && e.reason.contains("exactly one"), "{e}");
}

#[test]
fn commands_go_below_the_delegated_group_or_are_refused_naming_the_unit() {
    if !elfen_cmd::proc::is_root() {
        elfen_cmd::skip::skip(elfen_cmd::skip::Need::Root, "a command's group needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let root = systemd_v2_root(d);
    let body = format!("{LC_UNIT}[[batch]]\nname = \"b\"\nmode = \"idle\"\ncommand = [\"true\"]\n");
    let c = config(d, &root, &body);
    // not delegated: refused, naming the unit to change and the opt-in
    refused(
        d,
        &c,
        situation(false),
        "batch[0].command",
        "set Delegate=yes on elfen-daemon.service",
    );
    let e = Plan::resolve_with(&c, Some(situation(false))).unwrap_err();
    assert!(e.reason.contains("undelegated = \"root\""), "{e}");
    // asked for: at the root, with a warning naming the unit to change
    let mut at_root = c.clone();
    at_root.undelegated = elfen_daemon::config::Undelegated::Root;
    let plan = Plan::resolve_with(&at_root, Some(situation(false))).unwrap();
    assert_eq!(plan.placement, Placement::Root);
    assert!(
        plan.notes
            .iter()
            .any(|n| n.starts_with("WARNING batch[0].command")
                && n.contains("set Delegate=yes on elfen-daemon.service")),
        "{:?}",
        plan.notes
    );
    let plan = Plan::resolve_with(&c, Some(situation(true))).unwrap();
    assert_eq!(
        plan.placement,
        Placement::Delegated {
            base: GroupPath::new("system.slice/elfen-daemon.service").unwrap(),
            unit: Some("elfen-daemon.service".into())
        }
    );
    let g = &plan.groups[0];
    assert_eq!(g.path.as_str(), "system.slice/elfen-daemon.service/batch-b");
    let y = g
        .cpu_yield
        .as_ref()
        .expect("an idle group yields as a whole");
    assert_eq!(
        y.groups.iter().map(GroupPath::as_str).collect::<Vec<_>>(),
        ["system.slice/elfen-daemon.service/batch-b"],
        "the unit's own cpu.idle is systemd's (CPUWeight=idle), never written"
    );
    assert!(
        plan.notes.iter().any(|n| n.contains("CPUWeight=idle")),
        "the unit is not idle: said ({:?})",
        plan.notes
    );
    assert_eq!(
        plan.placement.daemon_leaf().unwrap().as_str(),
        "system.slice/elfen-daemon.service/daemon"
    );
    // a controller systemd did not delegate to the unit
    std::fs::write(
        root.join("system.slice/elfen-daemon.service/cgroup.controllers"),
        "cpu\n",
    )
    .unwrap();
    let c = config(
        d,
        &root,
        &format!("{LC_UNIT}[[batch]]\nname = \"b\"\nmode = \"guard\"\ncommand = [\"true\"]\n"),
    );
    refused(
        d,
        &c,
        situation(true),
        "batch[0].mode",
        "cpuset controller is not delegated",
    );
}

#[test]
fn the_kubelets_static_cpu_manager_keeps_its_cpusets() {
    if !elfen_cmd::proc::is_root() {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Root,
            "modes guard and idle need root",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let root = systemd_v2_root(d);
    let kubelet = d.join("host/var/lib/kubelet");
    std::fs::create_dir_all(&kubelet).unwrap();
    std::fs::write(
        kubelet.join("cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":1}"#,
    )
    .unwrap();
    let batch = |extra: &str| {
        config(
            d,
            &root,
            &format!("{LC_UNIT}[[batch]]\nname = \"b\"\nqos = \"besteffort\"\n{extra}"),
        )
    };
    refused(
        d,
        &batch("mode = \"guard\"\n"),
        situation(false),
        "batch[0].confine",
        "static policy",
    );
    refused(
        d,
        &batch("mode = \"blind\"\n"),
        situation(false),
        "batch[0].mode",
        "static policy",
    );
    let plan = Plan::resolve_with(
        &batch("mode = \"idle\"\nconfine = false\n"),
        Some(situation(false)),
    )
    .unwrap();
    assert_eq!(
        plan.groups[0].path.as_str(),
        "kubepods.slice/kubepods-besteffort.slice"
    );
    assert!(plan.groups[0].confine.is_none());
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("the kubelet's") && n.contains("never moves")),
        "{:?}",
        plan.notes
    );
}

#[test]
fn a_knob_of_one_cgroup_version_asked_on_the_other_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let v2 = systemd_v2_root(d);
    let coop = "[[batch]]\nname = \"b\"\nmode = \"cooperative\"\nslice = \"batch.slice\"\n";
    let c = config(d, &v2, &format!("freezer = \"v1\"\n{LC_UNIT}{coop}"));
    refused(d, &c, situation(false), "freezer", "cgroup v2 only");
    let tmp1 = tempfile::tempdir().unwrap();
    let v1 = fake_root(tmp1.path());
    let c = config(
        tmp1.path(),
        &v1,
        "freezer = \"v2\"\n[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"batch\"\n",
    );
    let e = Plan::resolve(&c).unwrap_err();
    assert!(
        e.field == "freezer" && e.reason.contains("cgroup v1 only"),
        "{e}"
    );
    let c = config(
        tmp1.path(),
        &v1,
        "[lc]\ncomm = \"x\"\n[[batch]]\nname = \"b\"\nmode = \"idle\"\nidle_method = \"cpu_idle\"\ncgroup = \"batch\"\n",
    );
    std::fs::remove_file(v1.join("cpu/batch/cpu.idle")).unwrap();
    if elfen_cmd::proc::is_root() {
        let e = Plan::resolve(&c).unwrap_err();
        assert!(
            e.field == "batch[0].idle_method" && e.reason.contains("cpu.idle"),
            "{e}"
        );
    }
}
