//! What an operator installs, checked without installing it: the package's
//! configuration and cargo-deb's asset list, the container recipe, and the
//! Kubernetes manifest (the YAML parses; the DaemonSet shares the host's PID
//! and IPC namespaces, mounts its cgroup tree and /dev/shm, adds the
//! daemon's capabilities; its ConfigMap is a configuration the daemon
//! accepts). The image itself cannot be built here (no container engine).

use elfen_daemon::config::Config;
use std::path::{Path, PathBuf};
use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_packaged_configuration_is_accepted() {
    let c = Config::parse(&read("packaging/daemon.toml")).expect("packaging/daemon.toml parses");
    c.check().expect("and passes the file's checks");
    assert_eq!(c.lc.unit.as_deref(), Some("redis-server.service"));
    assert_eq!(c.batch[0].slice.as_deref(), Some("batch.slice"));
}

#[test]
fn every_asset_of_the_package_exists() {
    let manifest: toml::Table = toml::from_str(&read("crates/cli/Cargo.toml")).unwrap();
    let deb = &manifest["package"]["metadata"]["deb"];
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    let assets = deb["assets"].as_array().expect("assets");
    let mut dests = Vec::new();
    for a in assets {
        let src = a[0].as_str().unwrap();
        dests.push(a[1].as_str().unwrap().to_string());
        if src.starts_with("target/") {
            continue; // built by cargo deb
        }
        let p = cli.join(src);
        if src.contains('*') {
            let dir = p.parent().unwrap();
            assert!(
                std::fs::read_dir(dir).unwrap().next().is_some(),
                "{src}: files to ship"
            );
        } else {
            assert!(p.is_file(), "{src} ships with the repository");
        }
    }
    for d in [
        "usr/bin/",
        "etc/elfen/daemon.toml",
        "usr/share/doc/elfen/quickstart.md",
    ] {
        assert!(dests.iter().any(|x| x == d), "{d} in {dests:?}");
    }
    let units = &deb["systemd-units"];
    let dir = cli.join(units["unit-scripts"].as_str().unwrap());
    let name = units["unit-name"].as_str().unwrap();
    assert!(dir.join(format!("{name}.service")).is_file());
    assert_eq!(
        units["enable"].as_bool(),
        Some(false),
        "not enabled before it is configured"
    );
}

#[test]
fn the_container_recipe_names_what_exists() {
    let text = read("deploy/container/Containerfile");
    let known = [
        "FROM",
        "RUN",
        "WORKDIR",
        "COPY",
        "ENTRYPOINT",
        "CMD",
        "ENV",
        "ARG",
        "LABEL",
    ];
    let mut copies = 0;
    let mut joined = String::new();
    for line in text.lines() {
        joined.push_str(line.trim_end_matches('\\'));
        if line.ends_with('\\') {
            continue;
        }
        let l = std::mem::take(&mut joined);
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let word = l.split_whitespace().next().unwrap();
        assert!(
            known.contains(&word),
            "unknown instruction {word:?} in {l:?}"
        );
        if word == "COPY" && !l.contains("--from=") {
            let src = l.split_whitespace().nth(1).unwrap();
            assert!(src == "." || repo().join(src).exists(), "{src} exists");
            copies += 1;
        }
    }
    assert!(copies >= 2);
    assert!(text.contains("cargo build --release --locked -p elfen"));
}

fn manifest() -> Vec<Yaml> {
    YamlLoader::load_from_str(&read("deploy/kubernetes/elfen-daemonset.yaml"))
        .expect("the manifest is YAML")
}

fn kind<'a>(docs: &'a [Yaml], k: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(k))
        .unwrap_or_else(|| panic!("a {k} in the manifest"))
}

#[test]
fn the_daemonset_shares_what_the_daemon_needs() {
    let docs = manifest();
    assert_eq!(docs.len(), 3, "Namespace, ConfigMap, DaemonSet");
    let ds = kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    assert_eq!(
        pod["hostIPC"].as_bool(),
        Some(true),
        "the batch lines are a SysV segment"
    );
    let host_paths: Vec<&str> = pod["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    for p in ["/sys/fs/cgroup", "/dev/shm", "/run/elfen", "/var/log/pods"] {
        assert!(host_paths.contains(&p), "{p} from the host: {host_paths:?}");
    }
    let c = &pod["containers"][0];
    let caps: Vec<&str> = c["securityContext"]["capabilities"]["add"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    for cap in ["BPF", "PERFMON", "SYS_NICE"] {
        assert!(caps.contains(&cap), "{cap} in {caps:?}");
    }
    assert_eq!(
        c["securityContext"]["privileged"].as_bool(),
        Some(false),
        "capabilities, not a privileged container"
    );
    assert!(
        c["resources"]["limits"]["cpu"].is_badvalue(),
        "no CPU limit: a quota would throttle the real-time writer"
    );
}

#[test]
fn the_configmap_is_a_configuration_the_daemon_accepts() {
    let docs = manifest();
    let cm = kind(&docs, "ConfigMap");
    let text = cm["data"]["daemon.toml"].as_str().expect("daemon.toml");
    let c = Config::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    c.check().unwrap();
    assert_eq!(c.cgroup_root, Path::new("/host/sys/fs/cgroup"));
    assert_eq!(c.host_root, Path::new("/host"));
    assert!(c.lc.qos.is_some() && c.batch[0].qos.is_some());
    // the daemon's configuration is where the container reads it
    let ds = kind(&docs, "DaemonSet");
    let mounts = ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        .as_vec()
        .unwrap();
    assert!(
        mounts.iter().any(|m| m["name"].as_str() == Some("config")
            && m["mountPath"].as_str() == Some("/etc/elfen"))
    );
}
