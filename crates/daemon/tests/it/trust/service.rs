//! The LC is the service, not its first process: an unmodified pre-fork
//! server from Debian — nginx, its master running as root and its
//! workers, which serve every request, as `www-data` — named by `[lc]
//! comm`, protected in guard mode. Its workers are the service whatever
//! their user, a worker its master respawns is followed, a same-named
//! process of another user that nginx did not start is still refused and
//! named, and the daemon sees the service busy (no "LC UNSEEN").

use super::{sample, scrape, setup};
use crate::coalesce::metrics_addr;
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Debian's nginx binary.
const NGINX: &str = "/usr/sbin/nginx";

/// nginx run as Debian installs it, under a name of its own (a link to the
/// binary named `name`: the kernel names the process after the file it
/// runs, and the workers inherit it), its master pinned to `cpu`.
struct Nginx {
    master: Proc,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(name: &str, cpu: u32) -> Nginx {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join(name);
        std::os::unix::fs::symlink(NGINX, &bin).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "user www-data;\nworker_processes 2;\ndaemon off;\npid {d}/nginx.pid;\n\
                 error_log {d}/error.log;\nevents {{ worker_connections 64; }}\n\
                 http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n\
                 proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
                 uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
                 server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"ok\\n\"; }} }}\n}}\n"
            ),
        )
        .unwrap();
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf)
            .stdin(std::process::Stdio::null());
        // SAFETY: sched_setaffinity on the child itself, before its exec
        unsafe {
            cmd.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu as usize, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let master = Proc(cmd.spawn().expect("starting nginx"));
        let n = Nginx {
            master,
            port,
            _dir: dir,
        };
        let log = n._dir.path().join("error.log");
        assert!(
            wait_until(Duration::from_secs(10), || n.get().is_some() && {
                let w = n.workers();
                w.len() == 2
                    && w.iter()
                        .all(|&p| elfen_cmd::proc::uids(p).is_some_and(|u| u == (33, 33)))
            }),
            "nginx answers on port {port} with 2 workers of www-data; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        n
    }

    /// One GET; the body.
    fn get(&self) -> Option<String> {
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        c.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        c.read_to_string(&mut out).ok()?;
        out.ends_with("ok\n").then_some(out)
    }

    /// The master's children: its workers.
    fn workers(&self) -> Vec<u32> {
        elfen_daemon::lc::procs::children_of(self.master.pid())
    }
}

impl Drop for Nginx {
    /// The master told to stop (it stops its workers), then any worker
    /// left killed by pid; the master itself is killed with its `Proc`.
    fn drop(&mut self) {
        let workers = self.workers();
        elfen_cmd::proc::signal_pid(self.master.pid(), libc::SIGTERM);
        wait_until(Duration::from_secs(3), || {
            workers.iter().all(|&w| !elfen_shm::pid_alive(w))
        });
        workers.into_iter().for_each(elfen_cmd::proc::kill_pid);
    }
}

/// Requests in a loop (about one a millisecond) until `stop`; counts the
/// answers.
fn load(n: &Arc<Nginx>, stop: &Arc<AtomicBool>, answered: &Arc<AtomicU64>) {
    let (n, stop, answered) = (Arc::clone(n), Arc::clone(stop), Arc::clone(answered));
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if n.get().is_some() {
                answered.fetch_add(1, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// A process of nobody named `name`: `sleep` with that `argv[0]`.
fn stranger(name: &str) -> Proc {
    use std::os::unix::process::CommandExt;
    Proc(
        std::process::Command::new("/bin/bash")
            .args(["-c", &format!("exec -a {name} sleep 60")])
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("starting a process as nobody"),
    )
}

/// The sum of every sample of `name` (all label sets).
fn sum_of(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_pre_fork_servers_workers_are_the_service_whatever_their_user() {
    let test = "a_pre_fork_servers_workers_are_the_service_whatever_their_user";
    let Some(()) = live_ok(test) else { return };
    if !PathBuf::from(NGINX).exists() {
        elfen_cmd::skip::skip_test(
            test,
            elfen_cmd::skip::Need::Program(NGINX.into()),
            "an unmodified pre-fork server (scripts/deps/daemon.apt installs nginx)",
        );
        return;
    }
    let _one = serial();
    let name = unique("n");
    let name = name[name.len() - 15..].to_string();
    let s = setup(
        &format!("{name}\"\nunseen_window_ms = 1000 #"),
        "",
        &format!(
            "[[batch]]\nname = \"spin\"\nmode = \"guard\"\ncommand = [\"{BIN}\", \"spin-helper\"]\n"
        ),
    );
    let n = Arc::new(Nginx::start(&name, 0));
    let master = n.master.pid();
    let workers = n.workers();
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let found = d.wait_for("LC service found", Duration::from_secs(5));
    for p in std::iter::once(master).chain(workers.iter().copied()) {
        assert!(
            found.contains(&p.to_string()),
            "master and workers are the LC: {found}"
        );
    }
    for &w in &workers {
        let l = d.wait_for(
            &format!("pid {w} ({name}, user www-data"),
            Duration::from_secs(5),
        );
        assert!(l.contains(&format!("started by LC pid {master}")), "{l}");
    }
    // requests for a while: the workers serve them on the request lane
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    load(&n, &stop, &answered);
    let addr = metrics_addr(&d);
    let protected = wait_until(patient(Duration::from_secs(10)), || {
        let m = scrape(&addr);
        sum_of(&m, "elfen_lc_busy_periods_total") > 0.0
            && sum_of(&m, "elfen_guard_occupations_total") > 0.0
    });
    assert!(
        protected,
        "the writer saw the workers busy and the guard occupied its lane ({} answers):\n{}",
        answered.load(Ordering::Relaxed),
        scrape(&addr)
    );
    // a worker killed: its master starts another, which is followed (the
    // notice names the user it had when found: root until it drops to
    // www-data, a moment after its fork)
    elfen_cmd::proc::kill_pid(workers[0]);
    let mut fresh = Vec::new();
    assert!(wait_until(Duration::from_secs(10), || {
        fresh = n
            .workers()
            .into_iter()
            .filter(|w| !workers.contains(w))
            .collect();
        !fresh.is_empty()
    }));
    let l = d.wait_for(
        &format!("pid {} ({name}, ", fresh[0]),
        Duration::from_secs(5),
    );
    assert!(l.contains(&format!("started by LC pid {master}")), "{l}");
    // a same-named process of another user that nginx did not start
    let other = stranger(&name);
    let said = d.wait_for(&format!("process {} ", other.pid()), Duration::from_secs(5));
    assert!(said.contains("runs as user nobody (uid 65534)") && said.contains("ignored"));
    // served all along, and seen: no window went unseen
    std::thread::sleep(patient(Duration::from_millis(2500)));
    stop.store(true, Ordering::Relaxed);
    let m = scrape(&addr);
    assert_eq!(sample(&m, "elfen_lc_unseen"), Some(0.0), "{m}");
    assert!(sample(&m, "elfen_lc_followed_processes_total").is_some_and(|v| v >= 3.0));
    let status = d
        .stop_with(libc::SIGTERM, Duration::from_secs(15))
        .expect("exits");
    let out = d.output();
    assert!(status.success(), "{out}");
    assert!(answered.load(Ordering::Relaxed) > 100, "nginx served");
    for w in workers.iter().chain(&fresh) {
        assert!(
            !out.lines()
                .any(|l| l.contains(&format!("process {w} ")) && l.contains("ignored")),
            "worker {w} refused:\n{out}"
        );
    }
    assert!(!out.contains("LC UNSEEN"), "a served, seen LC:\n{out}");
}
