//! What batch work, other users and a vanished group can do to a running
//! daemon (root, BPF, a cgroup hierarchy; skipped with a printed reason
//! otherwise):
//!
//! - a batch command that forks a tree (`tree`): SIGTERM stops the whole
//!   tree; after a SIGKILL of the daemon the next start kills what is left;
//! - the state file and the page against other processes (`state_file`);
//! - other users' processes and `lc_user` (`users`);
//! - an unmodified pre-fork server whose workers run as another user than
//!   its master (`service`);
//! - an LC its request lanes never see (`unseen`);
//! - a group removed under the daemon (`lost`).

mod lost;
mod service;
mod state_file;
mod tree;
mod unseen;
mod users;

use crate::common::*;
use elfen_cmd::proc::start_ticks;
use std::path::PathBuf;
use std::time::Duration;

struct Setup {
    _dir: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
    page: PathBuf,
}

/// A config for one test: an LC named `lc` (it need not run), `extra`
/// top-level keys, `batch` the batch groups.
fn setup(lc: &str, extra: &str, batch: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let page = PathBuf::from(format!("/dev/shm/{}", unique("tpage")));
    let config = dir.path().join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}pairs = \"0:1\"\nheartbeat_ms = 20\n{extra}\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n\
             [lc]\ncomm = \"{lc}\"\nliveness_ms = 20\nrescan_ms = 100\n{batch}",
            page.display(),
            state.display()
        ),
    )
    .unwrap();
    Setup {
        _dir: dir,
        config,
        state,
        page,
    }
}

/// GET /metrics.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("the metrics port answers");
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n")
        .map_or(out.clone(), |(_, b)| b.to_string())
}

/// The value of the sample line starting with `prefix` (name and labels).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A config on a fake cgroup root (nothing here needs root, BPF or a real
/// hierarchy), with its page and state file in `dir`.
fn plan_config(dir: &std::path::Path, state: &std::path::Path) -> elfen_daemon::Config {
    let root = fake_root(dir);
    let text = format!(
        "page = \"{}\"\nstate_file = \"{}\"\n{HOST_ROOT}cgroup_root = \"{}\"\n[signal]\npriority = 0\n\
         [lc]\ncomm = \"nobody-runs-this\"\n\
         [[batch]]\nname = \"b\"\nmode = \"cooperative\"\ncgroup = \"batch\"\n",
        dir.join("page").display(),
        state.display(),
        root.display()
    );
    elfen_daemon::Config::parse(&text).unwrap()
}

/// A process that is not a daemon: `sleep 60`, killed when dropped.
fn bystander() -> (Proc, u64) {
    let p = Proc(
        std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap(),
    );
    let start = (0..100)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(5));
            start_ticks(p.pid())
        })
        .unwrap();
    (p, start)
}
