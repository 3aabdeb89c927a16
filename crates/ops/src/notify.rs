//! The service manager's notification protocol (`sd_notify(3)`), for a
//! daemon run by systemd with `Type=notify` and `WatchdogSec=`: one Unix
//! datagram per message to the socket in `$NOTIFY_SOCKET` (`@name` is an
//! abstract socket), each a few `KEY=VALUE` lines — `READY=1` when the
//! daemon serves, `STATUS=…` for `systemctl status`, `WATCHDOG=1` at least
//! every `$WATCHDOG_USEC` (sent at half of it), `STOPPING=1` at the stop.
//! Outside systemd (no `$NOTIFY_SOCKET`) there is no [`Notifier`] and
//! nothing is sent. No libsystemd: the protocol is these lines.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

/// The environment variables of the protocol (a child the daemon starts
/// must not inherit them: it would speak for the daemon).
pub const ENV: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// Where to notify, and how often the watchdog must hear from us.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    addr: std::os::unix::net::SocketAddr,
    watchdog: Option<Duration>,
    last_watchdog: Option<Instant>,
}

impl Notifier {
    /// The notifier of this process, from `$NOTIFY_SOCKET` (and the
    /// watchdog's interval from `$WATCHDOG_USEC`, if `$WATCHDOG_PID` is
    /// unset or this process); `None` when not run by a service manager
    /// that listens, or the socket cannot be named.
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        let watchdog = watchdog_interval(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        );
        Notifier::to(path.to_str()?, watchdog)
    }

    /// A notifier for the socket `path` (`@name`: abstract).
    pub fn to(path: &str, watchdog: Option<Duration>) -> Option<Notifier> {
        let addr = if let Some(name) = path.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()?
        } else {
            std::os::unix::net::SocketAddr::from_pathname(path).ok()?
        };
        let socket = UnixDatagram::unbound().ok()?;
        Some(Notifier {
            socket,
            addr,
            watchdog,
            last_watchdog: None,
        })
    }

    /// Sends one message (`KEY=VALUE` lines).
    pub fn send(&self, msg: &str) -> std::io::Result<()> {
        self.socket
            .send_to_addr(msg.as_bytes(), &self.addr)
            .map(|_| ())
    }

    /// `READY=1` with a status line.
    pub fn ready(&self, status: &str) -> std::io::Result<()> {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    /// A status line for `systemctl status`.
    pub fn status(&self, status: &str) -> std::io::Result<()> {
        self.send(&format!("STATUS={}", one_line(status)))
    }

    /// `STOPPING=1` with a status line.
    pub fn stopping(&self, status: &str) -> std::io::Result<()> {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)))
    }

    /// `WATCHDOG=1` when half the watchdog's interval passed since the last
    /// one (a call every heartbeat sends a few a interval); nothing without
    /// a watchdog. Returns whether it sent.
    pub fn watchdog(&mut self) -> std::io::Result<bool> {
        let Some(every) = self.watchdog else {
            return Ok(false);
        };
        let due = self.last_watchdog.is_none_or(|t| t.elapsed() >= every / 2);
        if due {
            self.send("WATCHDOG=1")?;
            self.last_watchdog = Some(Instant::now());
        }
        Ok(due)
    }

    /// The watchdog's interval, if systemd set one for this process.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog
    }
}

/// The watchdog's interval from `$WATCHDOG_USEC` when `$WATCHDOG_PID` is
/// unset or `pid` (the variables may be inherited by a child they are not
/// meant for).
pub fn watchdog_interval(usec: Option<&str>, for_pid: Option<&str>, pid: u32) -> Option<Duration> {
    if for_pid.is_some_and(|p| p.trim().parse::<u32>().ok() != Some(pid)) {
        return None;
    }
    let us: u64 = usec?.trim().parse().ok()?;
    (us > 0).then(|| Duration::from_micros(us))
}

fn one_line(s: &str) -> String {
    s.replace('\n', "; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_arrive_as_datagrams_and_the_watchdog_is_paced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let recv = || {
            let mut buf = [0u8; 512];
            let n = server.recv(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).to_string()
        };
        let mut n = Notifier::to(path.to_str().unwrap(), Some(Duration::from_millis(200))).unwrap();
        n.ready("protecting redis\nwith 1 group").unwrap();
        assert_eq!(recv(), "READY=1\nSTATUS=protecting redis; with 1 group");
        assert!(n.watchdog().unwrap(), "the first at once");
        assert_eq!(recv(), "WATCHDOG=1");
        assert!(!n.watchdog().unwrap(), "not again within half the interval");
        std::thread::sleep(Duration::from_millis(110));
        assert!(n.watchdog().unwrap());
        assert_eq!(recv(), "WATCHDOG=1");
        n.stopping("restoring").unwrap();
        assert_eq!(recv(), "STOPPING=1\nSTATUS=restoring");
        // abstract sockets
        let name = format!("elfen-notify-test-{}", std::process::id());
        let abs = {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
        };
        let server = UnixDatagram::bind_addr(&abs).unwrap();
        Notifier::to(&format!("@{name}"), None)
            .unwrap()
            .status("ok")
            .unwrap();
        let mut buf = [0u8; 64];
        let k = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..k], b"STATUS=ok");
    }

    #[test]
    fn the_watchdog_is_ours_only_when_it_names_us() {
        assert_eq!(
            watchdog_interval(Some("10000000"), None, 7),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            watchdog_interval(Some("10000000"), Some("7"), 7),
            Some(Duration::from_secs(10))
        );
        assert_eq!(watchdog_interval(Some("10000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("x"), None, 7), None);
    }
}
