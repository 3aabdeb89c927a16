//! Names the host uses, resolved over fake trees: a systemd host's units
//! and slices, docker and podman containers, and a Kubernetes node in both
//! of the kubelet's layouts (cgroupfs driver and systemd driver), each
//! built as directories in a temp dir. Nothing here reads the real host.

use crate::common::put;
use elfen_cgroup::{GroupPath, Hierarchy, HostFiles, HostNames, QosClass, SelectError, Selector};
use std::path::Path;

const POD_A: &str = "1f3b9c2e-8d4a-4b1e-9f00-3c2d1e0f9a8b";
const POD_B: &str = "22222222-3333-4444-5555-666666666666";
const POD_G: &str = "99999999-8888-7777-6666-555555555555";

fn ctr(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

/// A v2 root with the given group paths (each a directory with
/// `cgroup.procs`).
fn v2_tree(root: &Path, groups: &[String]) {
    put(
        root,
        &[
            ("cgroup.controllers", "cpuset cpu io memory pids\n"),
            ("cgroup.procs", ""),
            ("cgroup.subtree_control", ""),
        ],
    );
    for g in groups {
        let mut d = root.join(g);
        while d != root {
            put(&d, &[("cgroup.procs", "")]);
            d = d.parent().unwrap().to_path_buf();
        }
    }
}

fn names(root: &Path, files: &Path) -> HostNames {
    HostNames::new(&Hierarchy::detect(root).unwrap(), HostFiles::under(files))
}

fn one(n: &HostNames, s: Selector) -> String {
    let r = n.resolve(&s).unwrap_or_else(|e| panic!("{s}: {e}"));
    assert_eq!(r.len(), 1, "{s}: {r:?}");
    assert!(r[0].v2, "{s}: found in the v2 tree");
    r[0].path.as_str().to_string()
}

/// The kubelet's systemd driver, a docker container under systemd, a
/// podman one, and systemd's own units and slices.
fn systemd_node(root: &Path) {
    let a = POD_A.replace('-', "_");
    let b = POD_B.replace('-', "_");
    let g = POD_G.replace('-', "_");
    v2_tree(
        root,
        &[
            "system.slice/redis.service".into(),
            "system.slice/elfen-daemon.service/daemon".into(),
            format!("system.slice/docker-{}.scope", ctr('a')),
            format!("machine.slice/libpod-{}.scope/container", ctr('b')),
            format!("machine.slice/libpod-conmon-{}.scope", ctr('b')),
            "batch.slice/batch-nightly.slice/make.service".into(),
            "user.slice/user-1000.slice/user@1000.service/app.slice/redis.service".into(),
            format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{a}.slice/cri-containerd-{}.scope",
                ctr('c')
            ),
            format!(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{b}.slice/cri-containerd-{}.scope",
                ctr('d')
            ),
            format!(
                "kubepods.slice/kubepods-pod{g}.slice/cri-containerd-{}.scope",
                ctr('e')
            ),
        ],
    );
}

/// The kubelet's cgroupfs driver and docker's cgroupfs driver.
fn cgroupfs_node(root: &Path) {
    v2_tree(
        root,
        &[
            format!("kubepods/burstable/pod{POD_A}/{}", ctr('c')),
            format!("kubepods/besteffort/pod{POD_B}/{}", ctr('d')),
            format!("kubepods/pod{POD_G}/{}", ctr('e')),
            format!("docker/{}", ctr('a')),
        ],
    );
}

fn pod_logs(files: &Path) {
    for d in [
        format!("default_redis_{POD_A}"),
        format!("batch_nightly_{POD_B}"),
        // an old pod of the same name whose cgroup is gone
        "default_redis_00000000-0000-0000-0000-000000000000".into(),
    ] {
        std::fs::create_dir_all(files.join("var/log/pods").join(d)).unwrap();
    }
}

#[test]
fn systemd_units_and_slices() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    systemd_node(&root);
    let n = names(&root, tmp.path());
    assert_eq!(
        one(&n, Selector::Unit("redis.service".into())),
        "system.slice/redis.service",
        "the system unit, not the user manager's deeper one"
    );
    assert_eq!(
        one(&n, Selector::Slice("batch-nightly.slice".into())),
        "batch.slice/batch-nightly.slice"
    );
    assert_eq!(one(&n, Selector::Unit("batch.slice".into())), "batch.slice");
    assert_eq!(
        one(&n, Selector::Unit("make.service".into())),
        "batch.slice/batch-nightly.slice/make.service"
    );
    assert_eq!(
        one(
            &n,
            Selector::Cgroup(GroupPath::new("system.slice").unwrap())
        ),
        "system.slice"
    );
    // a unit that does not run (or exist): named, with where it looked
    let e = n
        .resolve(&Selector::Unit("nosuch.service".into()))
        .unwrap_err();
    assert!(matches!(e, SelectError::NotFound { .. }), "{e}");
    assert!(
        e.to_string().contains("unit nosuch.service")
            && e.to_string().contains("no directory named nosuch.service"),
        "{e}"
    );
    let e = n
        .resolve(&Selector::Slice("gone.slice".into()))
        .unwrap_err();
    assert!(e.to_string().contains("no directory gone.slice"), "{e}");
    // two units of one name at one depth
    put(
        &root.join("other.slice/redis.service"),
        &[("cgroup.procs", "")],
    );
    let e = n
        .resolve(&Selector::Unit("redis.service".into()))
        .unwrap_err();
    assert!(matches!(e, SelectError::Ambiguous { .. }), "{e}");
    assert!(e.to_string().contains("other.slice/redis.service"), "{e}");
}

/// docker's record of a container (`containers/<id>/config.v2.json`).
fn docker_record(files: &Path, id: &str, name: &str) {
    let dir = files.join("var/lib/docker/containers").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.v2.json"),
        format!("{{\"ID\":\"{id}\",\"Name\":\"/{name}\",\"State\":{{\"Running\":true}}}}"),
    )
    .unwrap();
}

/// podman's (containers/storage's) list of containers, `(id, name)` each.
fn podman_records(files: &Path, list: &[(&str, &str)]) {
    let podman = files.join("var/lib/containers/storage/overlay-containers");
    std::fs::create_dir_all(&podman).unwrap();
    let items: Vec<String> = list
        .iter()
        .map(|(id, name)| format!("{{\"id\":\"{id}\",\"names\":[\"{name}\"]}}"))
        .collect();
    std::fs::write(
        podman.join("containers.json"),
        format!("[{}]", items.join(",")),
    )
    .unwrap();
}

#[test]
fn containers_by_id_prefix_and_name() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    systemd_node(&root);
    let files = tmp.path();
    // docker's and podman's own records of names
    docker_record(files, &ctr('a'), "web");
    podman_records(files, &[(&ctr('b'), "builder")]);
    let n = names(&root, files);
    let docker = format!("system.slice/docker-{}.scope", ctr('a'));
    assert_eq!(one(&n, Selector::Container(ctr('a')[..12].into())), docker);
    assert_eq!(one(&n, Selector::Container("web".into())), docker);
    assert_eq!(
        one(&n, Selector::Container("builder".into())),
        format!("machine.slice/libpod-{}.scope", ctr('b')),
        "the container's scope, not podman's monitor"
    );
    assert_eq!(
        one(&n, Selector::Container(ctr('c')[..16].into())),
        format!(
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{}.scope",
            POD_A.replace('-', "_"),
            ctr('c')
        )
    );
    let e = n.resolve(&Selector::Container("f".repeat(12))).unwrap_err();
    assert!(e.to_string().contains("does not run here"), "{e}");
}

#[test]
fn a_container_name_matching_nothing_is_refused_naming_the_engines_looked_at() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    systemd_node(&root);
    let files = tmp.path();
    docker_record(files, &ctr('a'), "web");
    podman_records(files, &[(&ctr('b'), "builder")]);
    let e = names(&root, files)
        .resolve(&Selector::Container("nosuch".into()))
        .unwrap_err();
    assert!(matches!(e, SelectError::NotFound { .. }), "{e}");
    let text = e.to_string();
    for part in [
        "container nosuch: not found: no container of that name",
        "docker (1 containers in ",
        "var/lib/docker/containers/*/config.v2.json",
        "podman (1 containers in ",
        "overlay-containers/containers.json",
        "podman inspect -f",
    ] {
        assert!(text.contains(part), "{part:?} missing in: {text}");
    }
}

#[test]
fn two_containers_of_one_name_under_two_engines_are_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    systemd_node(&root);
    let files = tmp.path();
    docker_record(files, &ctr('a'), "web");
    podman_records(files, &[(&ctr('b'), "web")]);
    let n = names(&root, files);
    let e = n.resolve(&Selector::Container("web".into())).unwrap_err();
    assert!(matches!(e, SelectError::Ambiguous { .. }), "{e}");
    let text = e.to_string();
    for part in [
        "2 containers are named \"web\"",
        &format!("docker's {}", ctr('a')),
        &format!("podman's {}", ctr('b')),
        "select one by id",
    ] {
        assert!(text.contains(part), "{part:?} missing in: {text}");
    }
    // each is still selected by its id
    assert_eq!(
        one(&n, Selector::Container(ctr('b')[..12].into())),
        format!("machine.slice/libpod-{}.scope", ctr('b'))
    );
    // one container recorded twice by one engine (its two storage drivers'
    // lists) is one container
    let vfs = files.join("var/lib/containers/storage/vfs-containers");
    std::fs::create_dir_all(&vfs).unwrap();
    std::fs::copy(
        files.join("var/lib/containers/storage/overlay-containers/containers.json"),
        vfs.join("containers.json"),
    )
    .unwrap();
    std::fs::remove_dir_all(files.join("var/lib/docker")).unwrap();
    assert_eq!(
        one(&n, Selector::Container("web".into())),
        format!("machine.slice/libpod-{}.scope", ctr('b'))
    );
}

#[test]
fn no_container_engine_installed_is_said_and_other_selectors_are_unaffected() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    systemd_node(&root);
    // no docker or podman files at all
    let n = names(&root, tmp.path());
    let e = n.resolve(&Selector::Container("web".into())).unwrap_err();
    assert!(matches!(e, SelectError::NotFound { .. }), "{e}");
    let text = e.to_string();
    for part in [
        "no container engine's records here",
        "docker (not installed here: no ",
        "podman (not installed here: no ",
    ] {
        assert!(text.contains(part), "{part:?} missing in: {text}");
    }
    // an id needs no engine's files; units, slices and pods need none either
    assert_eq!(
        one(&n, Selector::Container(ctr('a')[..12].into())),
        format!("system.slice/docker-{}.scope", ctr('a'))
    );
    assert_eq!(
        one(&n, Selector::Unit("redis.service".into())),
        "system.slice/redis.service"
    );
    assert_eq!(
        one(&n, Selector::Slice("batch-nightly.slice".into())),
        "batch.slice/batch-nightly.slice"
    );
    assert_eq!(
        one(&n, Selector::PodUid(POD_A.into())),
        format!(
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            POD_A.replace('-', "_")
        )
    );
}

#[test]
fn pods_in_both_kubelet_layouts() {
    for systemd in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cgroup");
        if systemd {
            systemd_node(&root);
        } else {
            cgroupfs_node(&root);
        }
        pod_logs(tmp.path());
        let n = names(&root, tmp.path());
        let (a, b, g, burst, best) = if systemd {
            (
                format!(
                    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
                    POD_A.replace('-', "_")
                ),
                format!(
                    "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
                    POD_B.replace('-', "_")
                ),
                format!(
                    "kubepods.slice/kubepods-pod{}.slice",
                    POD_G.replace('-', "_")
                ),
                "kubepods.slice/kubepods-burstable.slice".to_string(),
                "kubepods.slice/kubepods-besteffort.slice".to_string(),
            )
        } else {
            (
                format!("kubepods/burstable/pod{POD_A}"),
                format!("kubepods/besteffort/pod{POD_B}"),
                format!("kubepods/pod{POD_G}"),
                "kubepods/burstable".to_string(),
                "kubepods/besteffort".to_string(),
            )
        };
        assert_eq!(
            one(&n, Selector::PodUid(POD_A.into())),
            a,
            "systemd {systemd}"
        );
        assert_eq!(
            one(&n, Selector::PodUid(POD_A.replace('-', "_").to_uppercase())),
            a,
            "a UID as the systemd driver spells it"
        );
        assert_eq!(one(&n, Selector::pod("default/redis").unwrap()), a);
        assert_eq!(one(&n, Selector::pod("batch/nightly").unwrap()), b);
        assert_eq!(one(&n, Selector::Qos(QosClass::Burstable)), burst);
        assert_eq!(one(&n, Selector::Qos(QosClass::Besteffort)), best);
        let guaranteed = n.resolve(&Selector::Qos(QosClass::Guaranteed)).unwrap();
        assert_eq!(
            guaranteed
                .iter()
                .map(|r| r.path.as_str())
                .collect::<Vec<_>>(),
            [g.as_str()],
            "guaranteed pods sit directly under kubepods"
        );
        // a pod that is not on this node; one whose logs are all that is left
        let e = n
            .resolve(&Selector::pod("default/nosuch").unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("default_nosuch_<uid>"), "{e}");
        std::fs::remove_dir_all(root.join(&a)).unwrap();
        let e = n
            .resolve(&Selector::pod("default/redis").unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("does not run on this node"), "{e}");
        let e = n.resolve(&Selector::PodUid(POD_A.into())).unwrap_err();
        assert!(matches!(e, SelectError::NotFound { .. }), "{e}");
    }
}

#[test]
fn no_kubelet_no_pods() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    v2_tree(&root, &["system.slice/x.service".into()]);
    let n = names(&root, tmp.path());
    let e = n.resolve(&Selector::Qos(QosClass::Burstable)).unwrap_err();
    assert!(e.to_string().contains("no kubelet"), "{e}");
}

#[test]
fn v1_hosts_are_searched_through_their_hierarchies() {
    // a v1 host (systemd's own name=systemd hierarchy, a cpu hierarchy
    // where docker's cgroupfs driver made its group): found there, not v2
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    put(
        &root.join("systemd/system.slice/redis.service"),
        &[("cgroup.procs", "")],
    );
    put(&root.join("systemd"), &[("cgroup.procs", "")]);
    put(
        &root.join("cpu"),
        &[("cgroup.procs", ""), ("cpu.shares", "1024\n")],
    );
    put(
        &root.join(format!("cpu/docker/{}", ctr('a'))),
        &[("cgroup.procs", "")],
    );
    let n = names(&root, tmp.path());
    let r = n.resolve(&Selector::Unit("redis.service".into())).unwrap();
    assert_eq!(r[0].dir(), root.join("systemd/system.slice/redis.service"));
    assert!(!r[0].v2);
    let r = n
        .resolve(&Selector::Container(ctr('a')[..12].into()))
        .unwrap();
    assert_eq!(r[0].dir(), root.join("cpu/docker").join(ctr('a')));
}

#[test]
fn the_kubelet_cpu_manager_policy_is_read_from_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let files = HostFiles::under(tmp.path());
    assert_eq!(files.cpu_manager_policy(), None);
    std::fs::create_dir_all(&files.kubelet).unwrap();
    std::fs::write(
        files.kubelet.join("cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{},"checksum":1}"#,
    )
    .unwrap();
    assert_eq!(files.cpu_manager_policy().unwrap().0, "static");
}
