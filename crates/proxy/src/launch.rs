//! Replicas the proxy **starts** from a command template — the harness's
//! convention for external LC services (`docs/lc-protocol.md`): `{port}`,
//! `{cpu}`, `{side_cpus}`, `{page}`, `{lane}` and `{lc_signal}` substituted
//! and passed as `ELFEN_*` variables (`elfen_wire::launch::Launch`).
//! A replica runs in its own process group, its stderr's tail is kept for
//! messages, it is ready when it answers (a wire ping, or any HTTP answer),
//! and it is stopped with SIGTERM, then SIGKILL, and reaped — on drop too,
//! so nothing is left running on an error.

use crate::config::Protocol;
use crate::error::{ProxyError, Result};
use crate::message::ping_bytes;
use elfen_cmd::child::ChildGuard;
use elfen_wire::launch::Launch;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a replica has to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Bytes of stderr kept for messages.
const STDERR_TAIL: usize = 4096;

/// A started replica process.
#[derive(Debug)]
pub struct Spawned {
    child: ChildGuard,
    argv: Vec<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

/// Whether the replica at `addr` answers: a wire ping answered with status
/// 0, or any HTTP answer to `GET /`.
pub fn answers(protocol: Protocol, addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    match protocol {
        Protocol::Wire => {
            let mut b = [0u8; elfen_wire::RESPONSE_BYTES];
            s.write_all(&ping_bytes()).is_ok()
                && s.read_exact(&mut b).is_ok()
                && elfen_wire::Response::decode(&b).status == elfen_wire::Status::Ok
        }
        Protocol::Http => {
            let req = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            let mut b = [0u8; 12];
            s.write_all(req.as_bytes()).is_ok()
                && s.read_exact(&mut b).is_ok()
                && b.starts_with(b"HTTP/1.")
        }
    }
}

impl Spawned {
    /// Starts the replica `launch` describes (with `env` added) and waits
    /// until it answers at `addr`. Fails — naming the command and the tail
    /// of its stderr, with nothing left running — if it cannot start,
    /// exits, or does not answer within `timeout`.
    pub fn start(
        launch: &Launch,
        env: &BTreeMap<String, String>,
        protocol: Protocol,
        addr: SocketAddr,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<Spawned> {
        let argv = launch.argv()?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        for (k, v) in &launch.vars {
            cmd.env(format!("ELFEN_{}", k.to_ascii_uppercase()), v);
        }
        cmd.envs(env);
        use std::os::unix::process::CommandExt;
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| {
            ProxyError::Replica(format!(
                "cannot start the replica {:?}: {e}",
                argv.join(" ")
            ))
        })?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut e) = child.stderr.take() {
            let tail = stderr.clone();
            let _ = std::thread::Builder::new()
                .name("elfen-proxy-stderr".into())
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
                });
        }
        let mut me = Spawned {
            child: ChildGuard::new(child).with_grace(STOP_GRACE),
            argv,
            stderr,
        };
        let t0 = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                me.terminate();
                return Err(ProxyError::Interrupted);
            }
            if let Some(status) = me.exited() {
                // give the stderr reader a moment to take the last lines
                std::thread::sleep(Duration::from_millis(50));
                return Err(me.failure(&format!("exited ({status})")));
            }
            if answers(protocol, addr) {
                return Ok(me);
            }
            if t0.elapsed() > timeout {
                let e = me.failure(&format!(
                    "did not answer on {addr} within {:.0} s",
                    timeout.as_secs_f64()
                ));
                me.terminate();
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The command line, as run.
    pub fn command(&self) -> String {
        self.argv.join(" ")
    }

    /// The last lines it wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        let t = self.stderr.lock().expect("stderr tail");
        let s = String::from_utf8_lossy(&t);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    fn failure(&self, what: &str) -> ProxyError {
        let tail = self.stderr_tail();
        ProxyError::Replica(format!(
            "the replica {:?} {what}{}",
            self.command(),
            if tail.is_empty() {
                " (it wrote nothing to stderr)".to_string()
            } else {
                format!("; its stderr ends with:\n{tail}")
            }
        ))
    }

    /// Its exit status, once it has exited (reaped).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Whether it still runs.
    pub fn running(&self) -> bool {
        !self.child.is_reaped()
    }

    /// SIGTERM (and SIGCONT, for a stopped one), then SIGKILL after 2 s;
    /// reaps. Idempotent.
    pub fn terminate(&mut self) {
        self.child.stop();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.terminate();
    }
}
