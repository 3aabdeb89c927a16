//! Things a benchmark makes and must take down whatever happens: a loop
//! device over a file on the root disk, and a pair of network namespaces
//! joined by a veth pair with a rate-limited priority qdisc on one side.
//! Each is removed when dropped (also when a benchmark fails).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| {
        format!("running {cmd:?} (is it installed? see scripts/deps/isolation.apt)")
    })?;
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A loop device over a file, with direct I/O to the file (so its I/O
/// reaches the disk under it), detached and the file removed when dropped.
#[derive(Debug)]
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub dev: PathBuf,
    /// `major:minor`.
    pub numbers: String,
    file: PathBuf,
}

impl LoopDevice {
    /// A `mib` MiB device over `dir/<name>`, written once through.
    pub fn new(dir: &Path, mib: u64) -> Result<LoopDevice> {
        let file = dir.join("loop-disk.img");
        let f =
            std::fs::File::create(&file).with_context(|| format!("creating {}", file.display()))?;
        f.set_len(mib << 20)?;
        drop(f);
        let dev = PathBuf::from(run(Command::new("losetup")
            .args(["--direct-io=on", "-f", "--show"])
            .arg(&file))?);
        let name = dev
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let l = LoopDevice {
            numbers: std::fs::read_to_string(format!("/sys/block/{name}/dev"))
                .unwrap_or_default()
                .trim()
                .to_string(),
            dev,
            file,
        };
        run(Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", l.dev.display()))
            .args(["bs=1M", "oflag=direct", "status=none"])
            .arg(format!("count={mib}")))?;
        Ok(l)
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Two network namespaces, `a` and `b`, joined by a veth pair: `a` (the
/// server side: the LC service and the batch sender) has `10.<x>.<y>.1`,
/// `b` (the clients) `.2`. On `a`'s end, a token bucket at `rate_mbit`
/// (so the link is the bottleneck and packets queue) with `pfifo_fast`
/// under it — the default qdisc, three bands served in order; its priomap
/// puts `skb->priority` 0 (TC_PRIO_BESTEFFORT) in the middle band and 1
/// (TC_PRIO_FILLER) in the last. Both namespaces (and with them the link
/// and the qdiscs) are deleted when dropped.
#[derive(Debug)]
pub struct NetPair {
    /// Namespace of the server side.
    pub a: String,
    /// Namespace of the client side.
    pub b: String,
    /// `a`'s address.
    pub ip_a: std::net::Ipv4Addr,
    /// `b`'s address.
    pub ip_b: std::net::Ipv4Addr,
    /// `a`'s veth end.
    pub dev_a: String,
}

impl NetPair {
    /// Creates the pair (names unique to this process and `tag`).
    pub fn new(tag: &str, rate_mbit: u32) -> Result<NetPair> {
        let id = std::process::id();
        let a = format!("elfen-{tag}-{id}-a");
        let b = format!("elfen-{tag}-{id}-b");
        let x = (id % 200 + 20) as u8;
        let y = (tag.bytes().map(u32::from).sum::<u32>() % 250) as u8;
        let n = NetPair {
            ip_a: std::net::Ipv4Addr::new(10, x, y, 1),
            ip_b: std::net::Ipv4Addr::new(10, x, y, 2),
            dev_a: format!("ve{}a", id % 100_000),
            a,
            b,
        };
        let dev_b = format!("ve{}b", id % 100_000);
        run(Command::new("ip").args(["netns", "add", &n.a]))?;
        let me = NetPairGuard(&n);
        run(Command::new("ip").args(["netns", "add", &n.b]))?;
        run(Command::new("ip").args([
            "link", "add", &n.dev_a, "netns", &n.a, "type", "veth", "peer", "name", &dev_b,
            "netns", &n.b,
        ]))?;
        for (ns, dev, ip) in [(&n.a, &n.dev_a, n.ip_a), (&n.b, &dev_b, n.ip_b)] {
            run(Command::new("ip").args([
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]))?;
            run(Command::new("ip").args(["-n", ns, "link", "set", dev, "up"]))?;
            run(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]))?;
        }
        run(Command::new("tc").args([
            "-n",
            &n.a,
            "qdisc",
            "add",
            "dev",
            &n.dev_a,
            "root",
            "handle",
            "1:",
            "tbf",
            "rate",
            &format!("{rate_mbit}mbit"),
            "burst",
            "16kb",
            "latency",
            "200ms",
        ]))?;
        run(Command::new("tc").args([
            "-n",
            &n.a,
            "qdisc",
            "add",
            "dev",
            &n.dev_a,
            "parent",
            "1:1",
            "handle",
            "10:",
            "pfifo_fast",
        ]))?;
        std::mem::forget(me);
        Ok(n)
    }

    /// `ip netns exec <ns> argv…`.
    pub fn exec(ns: &str, argv: &[String]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(argv);
        c
    }

    /// Moves the calling thread into namespace `ns` (network only).
    pub fn enter(ns: &str) -> Result<()> {
        let p = format!("/run/netns/{ns}");
        let f = std::fs::File::open(&p).with_context(|| format!("opening {p}"))?;
        use std::os::fd::AsRawFd;
        // SAFETY: a namespace fd we hold; affects the calling thread only.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error()).context("setns");
        }
        Ok(())
    }
}

/// Deletes the namespaces of a pair still being built, if building fails.
struct NetPairGuard<'a>(&'a NetPair);

impl Drop for NetPairGuard<'_> {
    fn drop(&mut self) {
        delete(self.0);
    }
}

fn delete(n: &NetPair) {
    for ns in [&n.a, &n.b] {
        let _ = Command::new("ip")
            .args(["netns", "del", ns])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for NetPair {
    fn drop(&mut self) {
        delete(self);
    }
}
