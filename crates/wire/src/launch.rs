//! An **external** LC service: a server started from a command line that
//! speaks the LC wire protocol (`docs/lc-protocol.md`), e.g. `elfen serve`
//! (the built-in chase as its own process) or the Lucene search server.
//!
//! The command line is split on whitespace; `{port}`, `{page}`, `{lane}`,
//! `{cpu}`, `{side_cpus}` and `{lc_signal}` are substituted and the same
//! values are passed as `ELFEN_PORT`, `ELFEN_PAGE`, … in the environment.
//! The service runs in its own process group (a Ctrl-C at the terminal
//! reaches only the program that started it, which stops the service by
//! pid), its stderr is kept (the last few KiB) for error messages, and it is ready when it
//! answers a ping. It is stopped with SIGTERM, then SIGKILL after a grace
//! period, and reaped — on drop, so also on error and Ctrl-C.

use crate::error::{LaunchError, Result};
use crate::protocol::{self as wire, Kind, Response, Status};
use elfen_cmd::child::ChildGuard;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of stderr kept for messages.
const STDERR_TAIL: usize = 4096;

/// What the starter (the harness, the proxy, the profiler) passes to the
/// service.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The command line template.
    pub command: String,
    /// Values for the placeholders and `ELFEN_*` variables, by name
    /// (`port`, `page`, `lane`, `cpu`, `side_cpus`, `lc_signal`).
    pub vars: Vec<(&'static str, String)>,
    /// How long it may take to answer its first ping.
    pub startup_timeout: Duration,
}

/// `text` with the `{name}` placeholders of `vars` substituted; a
/// placeholder left over is an error naming it and `what`.
pub fn fill(text: &str, vars: &[(&'static str, String)], what: &str) -> Result<String> {
    let mut line = text.to_string();
    for (k, v) in vars {
        line = line.replace(&format!("{{{k}}}"), v);
    }
    if let Some(i) = line.find('{') {
        let rest = &line[i..];
        let name = rest.split('}').next().unwrap_or(rest);
        if rest.contains('}') && !name.contains(char::is_whitespace) {
            return Err(LaunchError::Config(format!(
                "{what}: unknown placeholder {name}}} in {text:?} (known: {})",
                vars.iter()
                    .map(|(k, _)| format!("{{{k}}}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )));
        }
    }
    Ok(line)
}

impl Launch {
    /// The command line with the placeholders substituted, split into words.
    pub fn argv(&self) -> Result<Vec<String>> {
        let line = fill(&self.command, &self.vars, "lc.command")?;
        let argv: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        if argv.is_empty() {
            return Err(LaunchError::Config("lc.command is empty".into()));
        }
        Ok(argv)
    }
}

/// How a service is started: its argv (placeholders substituted), the
/// `ELFEN_*` variables, the CPU its process is pinned to before `exec`
/// (`None`: it places itself), and how to tell it is ready.
pub struct Spawn<'a> {
    /// The argv.
    pub argv: Vec<String>,
    /// Passed as `ELFEN_<NAME>` in the environment.
    pub vars: &'a [(&'static str, String)],
    /// Pin the process (every thread it will start) to this CPU.
    pub pin_cpu: Option<u32>,
    /// Ok once the service answers at this address.
    pub ready: &'a dyn Fn(SocketAddr) -> std::io::Result<()>,
    /// How long it may take.
    pub startup_timeout: Duration,
}

/// How long a service has to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A running external service; stopped and reaped on drop.
#[derive(Debug)]
pub struct External {
    child: ChildGuard,
    addr: SocketAddr,
    argv: Vec<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The thread copying stderr into `stderr`; it ends at EOF.
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl External {
    /// Starts the service and waits until it answers a ping at `addr`.
    /// Fails — naming the command and the tail of its stderr, with nothing
    /// left running — if it cannot start, exits, or never answers.
    pub fn start(launch: &Launch, addr: SocketAddr, stop: &AtomicBool) -> Result<External> {
        External::spawn(
            Spawn {
                argv: launch.argv()?,
                vars: &launch.vars,
                pin_cpu: None,
                ready: &ping,
                startup_timeout: launch.startup_timeout,
            },
            addr,
            stop,
        )
    }

    /// Starts a service as `how` says and waits until it is ready at
    /// `addr`; fails as [`External::start`] does.
    pub fn spawn(how: Spawn, addr: SocketAddr, stop: &AtomicBool) -> Result<External> {
        let argv = how.argv;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        for (k, v) in how.vars {
            cmd.env(format!("ELFEN_{}", k.to_ascii_uppercase()), v);
        }
        use std::os::unix::process::CommandExt;
        if let Some(cpu) = how.pin_cpu {
            // SAFETY: sched_setaffinity on the child itself, on a set built
            // on the stack: async-signal-safe, no allocation.
            unsafe {
                cmd.pre_exec(move || {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu as usize, &mut set);
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| {
            LaunchError::Service(format!(
                "cannot start the LC service {:?}: {e}",
                argv.join(" ")
            ))
        })?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut stderr_reader = None;
        if let Some(mut e) = child.stderr.take() {
            let tail = stderr.clone();
            let reader = std::thread::Builder::new()
                .name("elfen-lc-stderr".into())
                .spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = e.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let mut t = tail.lock().expect("stderr tail");
                        t.extend_from_slice(&buf[..n]);
                        let over = t.len().saturating_sub(STDERR_TAIL);
                        t.drain(..over);
                    }
                })
                .map_err(|e| LaunchError::io("spawning the stderr reader", e))?;
            stderr_reader = Some(reader);
        }
        let mut me = External {
            child: ChildGuard::new(child).with_grace(STOP_GRACE),
            addr,
            argv,
            stderr,
            stderr_reader,
        };
        me.wait_ready(how.startup_timeout, how.ready, stop)?;
        Ok(me)
    }

    /// The service's pid.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The command line, as run (an empty argument or one with spaces in
    /// quotes).
    pub fn command(&self) -> String {
        self.argv
            .iter()
            .map(|a| {
                if a.is_empty() || a.contains(char::is_whitespace) {
                    format!("{a:?}")
                } else {
                    a.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The last lines the service wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        let t = self.stderr.lock().expect("stderr tail");
        let s = String::from_utf8_lossy(&t);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    fn failure(&self, what: &str) -> LaunchError {
        let tail = self.stderr_tail();
        LaunchError::Service(format!(
            "the LC service {:?} {what}{}",
            self.command(),
            if tail.is_empty() {
                " (it wrote nothing to stderr)".to_string()
            } else {
                format!("; its stderr ends with:\n{tail}")
            }
        ))
    }

    /// Ok while the service runs; an error naming it and its stderr once it
    /// has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        let exited = self.child.try_wait().ok().flatten();
        match exited {
            Some(status) => {
                // let the stderr reader drain what the child wrote last: it
                // ends at EOF, unless a process the service left behind
                // still holds the pipe open
                if let Some(r) = self.stderr_reader.take() {
                    let t0 = Instant::now();
                    while !r.is_finished() && t0.elapsed() < Duration::from_secs(2) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    if r.is_finished() {
                        let _ = r.join();
                    }
                }
                Err(self.failure(&format!("exited ({status})")))
            }
            None => Ok(()),
        }
    }

    fn wait_ready(
        &mut self,
        timeout: Duration,
        ready: &dyn Fn(SocketAddr) -> std::io::Result<()>,
        stop: &AtomicBool,
    ) -> Result<()> {
        let t0 = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                self.terminate();
                return Err(LaunchError::Interrupted);
            }
            self.check_alive()?;
            if ready(self.addr).is_ok() {
                return Ok(());
            }
            if t0.elapsed() > timeout {
                let e = self.failure(&format!(
                    "did not answer a ping on {} within {:.0} s",
                    self.addr,
                    timeout.as_secs_f64()
                ));
                self.terminate();
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then SIGKILL after 2 s; reaps. Idempotent.
    pub fn terminate(&mut self) {
        self.child.stop();
    }
}

impl Drop for External {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Connects to `addr` and sends one ping; Ok when it is answered.
pub fn ping(addr: SocketAddr) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(&wire::request_bytes(u64::MAX, 0, b"", Kind::Ping))?;
    let mut b = [0u8; wire::RESPONSE_BYTES];
    s.read_exact(&mut b)?;
    let r = Response::decode(&b);
    if r.id == u64::MAX && r.status == Status::Ok {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("bad ping answer {r:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(cmd: &str) -> Launch {
        Launch {
            command: cmd.into(),
            vars: vec![("port", "4321".into()), ("cpu", "0".into())],
            startup_timeout: Duration::from_millis(500),
        }
    }

    #[test]
    fn placeholders_are_substituted_and_unknown_ones_refused() {
        assert_eq!(
            launch("srv --port {port} --cpu={cpu}").argv().unwrap(),
            vec!["srv", "--port", "4321", "--cpu=0"]
        );
        let e = launch("srv {prot}").argv().unwrap_err().to_string();
        assert!(e.contains("{prot}") && e.contains("{port}"), "{e}");
        assert!(launch("  ").argv().is_err());
    }

    #[test]
    fn a_service_that_fails_or_never_listens_is_a_clear_error() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let stop = AtomicBool::new(false);
        let e = External::start(&launch("/nonexistent/srv {port}"), addr, &stop)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/srv 4321"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("fails.sh");
        std::fs::write(&script, "echo cannot open the index >&2\nexit 3\n").unwrap();
        let e = External::start(&launch(&format!("sh {}", script.display())), addr, &stop)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("exited") && e.contains("cannot open the index") && e.contains("fails.sh"),
            "{e}"
        );
        let t0 = Instant::now();
        let e = External::start(&launch("sleep 30"), addr, &stop)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("did not answer a ping") && e.contains("sleep 30"),
            "{e}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "terminated, not waited for"
        );
    }
}
