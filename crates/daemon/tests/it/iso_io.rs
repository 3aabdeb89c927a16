//! The I/O budget for real (root, the cgroup v1 blkio hierarchy, a loop
//! device made for the test; skipped with the reason otherwise): two batch
//! groups read the device as fast as they can; the daemon divides a read
//! budget between them by weight (deficit-weighted round robin through
//! their blkio throttle files): their reads come out about 3 : 1 and the
//! two together stay near the budget. A static IOPS cap is written as is.
//! No speed is asserted beyond the budget's own shares, with wide margins.

use crate::common::*;
use crate::live::setup;
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
    if !Path::new("/sys/fs/cgroup/blkio/cgroup.procs").exists() {
        println!("skipped {test}: needs the cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio");
        return None;
    }
    Some(())
}

/// Bytes group `dir` read from `numbers`.
fn read_bytes(dir: &Path, numbers: &str) -> u64 {
    std::fs::read_to_string(dir.join("blkio.throttle.io_service_bytes"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{numbers} Read ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_budget_is_divided_by_weight() {
    let test = "the_budget_is_divided_by_weight";
    let Some(()) = io_ok(test) else { return };
    let _one = serial();
    let tmp = tempfile::tempdir().unwrap();
    let disk = match LoopDevice::new(tmp.path(), 128) {
        Ok(d) => d,
        Err(e) => {
            println!("skipped {test}: no loop device: {e}");
            return;
        }
    };
    let reader = |name: &str, weight: u32, extra: &str| {
        format!(
            "[[batch]]\nname = \"{name}\"\nmode = \"cooperative\"\nio_weight = {weight}\n{extra}\
             command = [\"sh\", \"-c\", \"while :; do dd if={} of=/dev/null bs=64K iflag=direct status=none; done\"]\n",
            disk.dev.display()
        )
    };
    let s = setup(
        "io",
        &format!(
            "[memory]\nmin_available = 0\npressure = \"off\"\n[io]\ndevice = \"{}\"\nread_bps = \"16M\"\nperiod_ms = 100\n",
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
    let dir =
        |n: &str| Path::new("/sys/fs/cgroup/blkio").join(format!("elfen-daemon-{}/{n}", d.pid()));
    // the static cap is written as configured
    let wiops =
        std::fs::read_to_string(dir("light").join("blkio.throttle.write_iops_device")).unwrap();
    assert_eq!(wiops.trim(), format!("{} 50", disk.numbers));
    std::thread::sleep(Duration::from_millis(1500));
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
        "heavy {:.1} MiB/s, light {:.1} MiB/s (budget 16 MiB/s, weights 3:1)",
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
        (16.0 * 0.4..=16.0 * 1.3).contains(&mib(h + l)),
        "the budget is used and kept: {:.1} MiB/s of 16",
        mib(h + l)
    );
    let limit =
        std::fs::read_to_string(dir("heavy").join("blkio.throttle.read_bps_device")).unwrap();
    assert!(limit.starts_with(&disk.numbers), "{limit}");
}
