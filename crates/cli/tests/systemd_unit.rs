//! The systemd unit in `packaging/systemd` passes `systemd-analyze verify`
//! (with its ExecStart pointed at the binary under test).

use std::path::Path;
use std::process::Command;

#[test]
fn daemon_unit_verifies() {
    let unit =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd/elfen-daemon.service");
    let text = std::fs::read_to_string(&unit)
        .expect("packaging/systemd/elfen-daemon.service ships with the repository");
    assert!(text.contains("ExecStart=/usr/local/bin/elfen daemon --config /etc/elfen/daemon.toml"));
    let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(analyze) = analyze else {
        elfen_cmd::skip::skip(
            elfen_cmd::skip::Need::Program("systemd-analyze".into()),
            "only the unit's text was checked",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("elfen-daemon.service");
    std::fs::write(
        &copy,
        text.replace("/usr/local/bin/elfen", env!("CARGO_BIN_EXE_elfen")),
    )
    .unwrap();
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Lines about other units of this machine are not ours to judge.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("elfen-daemon.service"))
        .collect();
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}
