//! I/O isolation for real (root, the I/O controller of the machine's
//! hierarchy — v1 `blkio` or v2 `io` —, a loop device over a file made for
//! the test; skipped with the need otherwise), whatever the layout:
//!
//! - the budget: two batch groups read the device as fast as they can;
//!   the daemon divides a read budget between them by weight
//!   (deficit-weighted round robin through their throttle limits: v2
//!   `io.max`, v1 `blkio.throttle.*`): their reads come out about 3 : 1
//!   and the two together stay near the budget. A static IOPS cap is
//!   written as is, beside the budget's limit;
//! - the kernel's weights: with the device on the BFQ scheduler and no
//!   budget, BFQ divides the device by the weights the daemon wrote.
//!
//! No speed is asserted beyond the shares, with wide margins; the budget
//! is sized by what the device reads here (a third of it, at most 16
//! MiB/s), so an emulated disk is still limited by the budget.

use crate::common::*;
use crate::live::setup;
use elfen_cgroup::Controller;
use elfen_cmd::skip::{Need, skip_test};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A loop device over a file, detached and removed when dropped.
pub(crate) struct LoopDevice {
    pub(crate) dev: PathBuf,
    pub(crate) numbers: String,
    file: PathBuf,
}

impl LoopDevice {
    /// A `mib` MiB loop device with direct I/O to its file, or why not.
    pub(crate) fn new(dir: &Path, mib: u64) -> Result<LoopDevice, String> {
        let file = dir.join("disk.img");
        let f = std::fs::File::create(&file).map_err(|e| e.to_string())?;
        f.set_len(mib << 20).map_err(|e| e.to_string())?;
        drop(f);
        let out = Command::new("losetup")
            .args(["--direct-io=on", "-f", "--show"])
            .arg(&file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let name = dev.file_name().unwrap().to_string_lossy().to_string();
        let numbers = std::fs::read_to_string(format!("/sys/block/{name}/dev"))
            .map_err(|e| e.to_string())?
            .trim()
            .to_string();
        let l = LoopDevice { dev, numbers, file };
        // written once, so reads are of real blocks
        let st = Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", l.dev.display()))
            .args(["bs=1M", "oflag=direct", "status=none"])
            .arg(format!("count={mib}"))
            .status()
            .map_err(|e| e.to_string())?;
        if !st.success() {
            return Err("writing the loop device failed".into());
        }
        Ok(l)
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

fn io_ok(test: &str) -> Option<()> {
    live_ok(test)?;
    controller_ok(test, "blkio")?;
    if !program_installed("losetup") {
        skip_test(
            test,
            Need::Program("losetup".into()),
            "the test's loop device",
        );
        return None;
    }
    let control = Path::new("/dev/loop-control");
    if !control.exists() {
        skip_test(
            test,
            Need::Input(control.to_path_buf()),
            "the kernel's loop devices (the loop module)",
        );
        return None;
    }
    Some(())
}

/// Whether `name` is on the `PATH`.
fn program_installed(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(name).is_file()))
}

/// Whether the I/O controller has v2 files here.
fn v2() -> bool {
    cgroups().is_v2(Controller::Io)
}

/// Bytes group `dir` read from `numbers` (v2 `io.stat`'s `rbytes`, v1
/// `blkio.throttle.io_service_bytes`' `Read`), read directly.
fn read_bytes(dir: &Path, numbers: &str) -> u64 {
    if v2() {
        return std::fs::read_to_string(dir.join("io.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{numbers} ")))
            .and_then(|r| {
                r.split_whitespace()
                    .find_map(|kv| kv.strip_prefix("rbytes="))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0);
    }
    std::fs::read_to_string(dir.join("blkio.throttle.io_service_bytes"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{numbers} Read ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The group's limits on `numbers` as the kernel shows them, read
/// directly: v2 the device's `io.max` line (`rbps=… wbps=… riops=…
/// wiops=…`), v1 the four throttle files' values, in the same words.
fn limits(dir: &Path, numbers: &str) -> String {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    if v2() {
        return read("io.max")
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{numbers} ")))
            .unwrap_or_default()
            .to_string();
    }
    ["rbps", "wbps", "riops", "wiops"]
        .iter()
        .zip([
            "blkio.throttle.read_bps_device",
            "blkio.throttle.write_bps_device",
            "blkio.throttle.read_iops_device",
            "blkio.throttle.write_iops_device",
        ])
        .map(|(k, f)| {
            let v = read(f)
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{numbers} ")).map(str::to_string))
                .unwrap_or_else(|| "max".into());
            format!("{k}={}", v.trim())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value of `key` (`rbps`, `wiops`, …) in [`limits`]' words.
fn limit(words: &str, key: &str) -> Option<String> {
    words
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
}

/// The read budget of the test, MiB/s: 16, or a third of what the device
/// reads unthrottled here when that is less (a device under emulation),
/// so the budget is what limits the readers, not the device. Said.
fn budget_mib(dev: &Path) -> u64 {
    let t0 = std::time::Instant::now();
    let st = Command::new("dd")
        .arg(format!("if={}", dev.display()))
        .args([
            "of=/dev/null",
            "bs=64K",
            "count=512",
            "iflag=direct",
            "status=none",
        ])
        .status()
        .expect("dd");
    assert!(st.success(), "reading the loop device");
    let rate = 32.0 / t0.elapsed().as_secs_f64();
    let budget = ((rate / 3.0) as u64).min(16);
    println!("the device reads {rate:.1} MiB/s unthrottled: a budget of {budget} MiB/s");
    assert!(
        budget >= 1,
        "the loop device reads {rate:.1} MiB/s: too slow for a budget of 1 MiB/s or more"
    );
    budget
}

#[test]
fn the_budget_is_divided_by_weight() {
    let test = "the_budget_is_divided_by_weight";
    let Some(()) = io_ok(test) else { return };
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let disk = LoopDevice::new(tmp.path(), 128).expect("a loop device over a file");
    let reader = |name: &str, weight: u32, extra: &str| {
        format!(
            "[[batch]]\nname = \"{name}\"\nmode = \"cooperative\"\nio_weight = {weight}\n{extra}\
             command = [\"sh\", \"-c\", \"while :; do dd if={} of=/dev/null bs=64K iflag=direct status=none; done\"]\n",
            disk.dev.display()
        )
    };
    let budget_mib = budget_mib(&disk.dev);
    let s = setup(
        "io",
        &format!(
            "[memory]\nmin_available = 0\npressure = \"off\"\n[io]\ndevice = \"{}\"\nread_bps = \"{budget_mib}M\"\nperiod_ms = 100\n",
            disk.dev.display()
        ),
        &format!(
            "{}{}",
            reader("heavy", 300, ""),
            reader(
                "light",
                100,
                &format!(
                    "io = [{{ device = \"{}\", write_iops = 50 }}]\n",
                    disk.numbers
                )
            )
        ),
    );
    let _lc = lc_helper(&s.lc_name, &["--cpu=0"]);
    let d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    assert!(
        d.output().contains("deficit-weighted round robin"),
        "{}",
        d.output()
    );
    let dir = |n: &str| group_dir("blkio", &format!("elfen-daemon-{}/{n}", d.pid()));
    // the static cap is written as configured (v2: in the budget's io.max
    // line, beside the read limit the budget sets)
    let light = limits(&dir("light"), &disk.numbers);
    assert_eq!(limit(&light, "wiops").as_deref(), Some("50"), "{light}");
    std::thread::sleep(patient(Duration::from_millis(1500)));
    let (h0, l0) = (
        read_bytes(&dir("heavy"), &disk.numbers),
        read_bytes(&dir("light"), &disk.numbers),
    );
    let t0 = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    let secs = t0.elapsed().as_secs_f64();
    let h = (read_bytes(&dir("heavy"), &disk.numbers) - h0) as f64 / secs;
    let l = (read_bytes(&dir("light"), &disk.numbers) - l0) as f64 / secs;
    let mib = |x: f64| x / f64::from(1 << 20);
    let budget = budget_mib as f64;
    println!(
        "heavy {:.1} MiB/s, light {:.1} MiB/s (budget {budget} MiB/s, weights 3:1)",
        mib(h),
        mib(l)
    );
    assert!(l > 0.0 && h > 0.0, "both read: heavy {h}, light {l}");
    let ratio = h / l;
    assert!(
        (1.8..=5.0).contains(&ratio),
        "reads by weight 3:1, got {ratio:.2} (heavy {:.1}, light {:.1} MiB/s)",
        mib(h),
        mib(l)
    );
    assert!(
        (budget * 0.4..=budget * 1.3).contains(&mib(h + l)),
        "the budget is used and kept: {:.1} MiB/s of {budget}",
        mib(h + l)
    );
    // the budget's share is the kernel's read limit
    let heavy = limits(&dir("heavy"), &disk.numbers);
    let rbps: u64 = limit(&heavy, "rbps")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a read limit on heavy: {heavy:?}"));
    // (its share plus at most the idle floors and the 5 % the controller
    // leaves a limit alone within)
    assert!(
        rbps > 0 && rbps as f64 <= 1.1 * (budget_mib << 20) as f64,
        "heavy's read limit {rbps} within the budget"
    );
}

/// A device's I/O scheduler set for a test, put back when dropped.
struct Scheduler {
    dir: PathBuf,
    before: String,
}

impl Scheduler {
    /// Sets `name` on `dev`. BFQ is set for a test of its weights:
    /// `low_latency` off (no boost of new readers), `strict_guarantees` on
    /// (it idles for the queue in service whatever its heuristics say of
    /// the device), and its idle window (`slice_idle`, 8 ms) stretched by
    /// [`slack`]: a reader that issues one request at a time keeps the
    /// device only if its next request comes within the window, and under
    /// emulation its think time is about ten times the host's. `Err`: the
    /// scheduler list after the refusal.
    fn set(dev: &Path, name: &str) -> Result<Scheduler, String> {
        let block = dev.file_name().unwrap().to_string_lossy().to_string();
        let dir = PathBuf::from(format!("/sys/block/{block}/queue"));
        let list = std::fs::read_to_string(dir.join("scheduler")).unwrap_or_default();
        let before = list
            .split_whitespace()
            .find(|w| w.starts_with('['))
            .map(|w| w.trim_matches(['[', ']']).to_string())
            .unwrap_or_else(|| "none".into());
        if std::fs::write(dir.join("scheduler"), name).is_err() {
            return Err(std::fs::read_to_string(dir.join("scheduler")).unwrap_or_default());
        }
        let s = Scheduler { dir, before };
        if name == "bfq" {
            let idle_us = (8_000 * slack()).to_string();
            for (f, v) in [
                ("low_latency", "0"),
                ("strict_guarantees", "1"),
                ("slice_idle_us", idle_us.as_str()),
            ] {
                let p = s.dir.join("iosched").join(f);
                std::fs::write(&p, v).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            }
        }
        Ok(s)
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("scheduler"), &self.before);
    }
}

/// The kernel's own weights, without a budget: the loop device on the BFQ
/// scheduler, two groups reading it as fast as they can with `io_weight`
/// 300 and 100. The daemon writes the weight BFQ reads (v2
/// `io.bfq.weight`, v1 `blkio.bfq.weight`; v2 `io.weight` too, iocost's)
/// and BFQ serves the two about 3 : 1 (asserted: clearly more than an
/// equal split, at most twice the weights' ratio).
#[test]
fn bfq_divides_a_device_by_the_groups_weights() {
    let test = "bfq_divides_a_device_by_the_groups_weights";
    let Some(()) = io_ok(test) else { return };
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let disk = LoopDevice::new(tmp.path(), 128).expect("a loop device over a file");
    let _bfq = match Scheduler::set(&disk.dev, "bfq") {
        Ok(s) => s,
        Err(list) => {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
            let module = PathBuf::from(format!(
                "/lib/modules/{}/kernel/block/bfq.ko",
                release.trim()
            ));
            skip_test(
                test,
                Need::Input(module),
                format!("the BFQ I/O scheduler (the device offers: {})", list.trim()),
            );
            return;
        }
    };
    let reader = |name: &str, weight: u32| {
        format!(
            "[[batch]]\nname = \"{name}\"\nmode = \"cooperative\"\nio_weight = {weight}\n\
             command = [\"sh\", \"-c\", \"while :; do dd if={} of=/dev/null bs=64K iflag=direct status=none; done\"]\n",
            disk.dev.display()
        )
    };
    let s = setup(
        "bfq",
        "[memory]\nmin_available = 0\npressure = \"off\"\n",
        &format!("{}{}", reader("heavy", 300), reader("light", 100)),
    );
    let _lc = lc_helper(&s.lc_name, &["--cpu=0"]);
    let mut d = DaemonProc::start(&s.config, &s.state, &s.page);
    d.wait_for("running", Duration::from_secs(10));
    let dir = |n: &str| group_dir("blkio", &format!("elfen-daemon-{}/{n}", d.pid()));
    let bfq_file = if v2() {
        "io.bfq.weight"
    } else {
        "blkio.bfq.weight"
    };
    let weight = |n: &str| {
        let t = std::fs::read_to_string(dir(n).join(bfq_file)).unwrap_or_default();
        t.lines()
            .find_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                match w[..] {
                    ["default", v] | [v] => v.parse::<u32>().ok(),
                    _ => None,
                }
            })
            .unwrap_or(0)
    };
    assert_eq!((weight("heavy"), weight("light")), (300, 100), "{bfq_file}");
    assert!(
        d.output().contains(if v2() {
            "batch heavy: BFQ weight 300"
        } else {
            "batch heavy: I/O weight 300"
        }),
        "{}",
        d.output()
    );
    assert!(
        !d.output().contains("which ignores it"),
        "the device's scheduler honours the weight: {}",
        d.output()
    );
    std::thread::sleep(patient(Duration::from_millis(1500)));
    let (h0, l0) = (
        read_bytes(&dir("heavy"), &disk.numbers),
        read_bytes(&dir("light"), &disk.numbers),
    );
    let t0 = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    let secs = t0.elapsed().as_secs_f64();
    let h = (read_bytes(&dir("heavy"), &disk.numbers) - h0) as f64 / secs;
    let l = (read_bytes(&dir("light"), &disk.numbers) - l0) as f64 / secs;
    let mib = |x: f64| x / f64::from(1 << 20);
    println!(
        "BFQ: heavy {:.1} MiB/s, light {:.1} MiB/s (weights 3:1)",
        mib(h),
        mib(l)
    );
    assert!(l > 0.0 && h > 0.0, "both read: heavy {h}, light {l}");
    let ratio = h / l;
    assert!(
        (1.5..=6.0).contains(&ratio),
        "BFQ serves the groups by weight 3:1, got {ratio:.2} (heavy {:.1}, light {:.1} MiB/s)",
        mib(h),
        mib(l)
    );
    let st = d
        .stop_with(libc::SIGTERM, patient(Duration::from_secs(10)))
        .expect("exits");
    assert!(st.success(), "{}", d.output());
}
