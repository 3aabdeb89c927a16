//! Reading what a group uses: I/O counters per device (the input of the
//! daemon's I/O budget controller). Reading only: nothing here writes.

use crate::error::{CgroupError, Result};
use crate::executor::Executor;
use crate::fsio;
use crate::group::Group;
use crate::knob::Device;
use crate::layout::Controller;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Cumulative I/O of a group on one device since the group was created
/// (v2 `io.stat`; v1 `blkio.throttle.io_service_bytes` and
/// `blkio.throttle.io_serviced`). A device the group never used reads 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoStat {
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Read operations.
    pub read_ios: u64,
    /// Write operations.
    pub write_ios: u64,
}

impl IoStat {
    /// `self − earlier`, per counter (0 where a counter went backwards: a
    /// group removed and created again).
    pub fn since(&self, earlier: &IoStat) -> IoStat {
        IoStat {
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            read_ios: self.read_ios.saturating_sub(earlier.read_ios),
            write_ios: self.write_ios.saturating_sub(earlier.write_ios),
        }
    }
}

impl Executor {
    /// `group`'s cumulative I/O on `device`.
    pub fn io_stat(&self, group: &Group, device: Device) -> Result<IoStat> {
        let dir = self.group_dir_checked(group, Controller::Io)?;
        if self.hierarchy().is_v2(Controller::Io) {
            let f = dir.join("io.stat");
            parse_v2_io_stat(&f, &fsio::read(&f)?, device)
        } else {
            let fb = dir.join("blkio.throttle.io_service_bytes");
            let fo = dir.join("blkio.throttle.io_serviced");
            let (read_bytes, write_bytes) = parse_v1_rw(&fb, &fsio::read(&fb)?, device)?;
            let (read_ios, write_ios) = parse_v1_rw(&fo, &fsio::read(&fo)?, device)?;
            Ok(IoStat {
                read_bytes,
                write_bytes,
                read_ios,
                write_ios,
            })
        }
    }
}

/// `MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N` lines.
fn parse_v2_io_stat(path: &Path, text: &str, device: Device) -> Result<IoStat> {
    let mut s = IoStat::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if it.next().and_then(|d| d.parse::<Device>().ok()) != Some(device) {
            continue;
        }
        for kv in it {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let n = || {
                v.parse::<u64>()
                    .map_err(|_| CgroupError::parse(path, line, "expected key=number"))
            };
            match k {
                "rbytes" => s.read_bytes = n()?,
                "wbytes" => s.write_bytes = n()?,
                "rios" => s.read_ios = n()?,
                "wios" => s.write_ios = n()?,
                _ => {}
            }
        }
    }
    Ok(s)
}

/// `MAJ:MIN Read N` / `MAJ:MIN Write N` lines (others ignored).
fn parse_v1_rw(path: &Path, text: &str, device: Device) -> Result<(u64, u64)> {
    let (mut r, mut w) = (0, 0);
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(d), Some(op), Some(v)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if d.parse::<Device>().ok() != Some(device) {
            continue;
        }
        let n = v
            .parse::<u64>()
            .map_err(|_| CgroupError::parse(path, line, "expected MAJ:MIN OP NUMBER"))?;
        match op {
            "Read" => r = n,
            "Write" => w = n,
            _ => {}
        }
    }
    Ok((r, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_parse() {
        let d = Device {
            major: 254,
            minor: 0,
        };
        let p = Path::new("x");
        let v2 = "7:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n\
                  254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n";
        assert_eq!(
            parse_v2_io_stat(p, v2, d).unwrap(),
            IoStat {
                read_bytes: 4096,
                write_bytes: 8192,
                read_ios: 1,
                write_ios: 2
            }
        );
        let v1 = "254:0 Read 4096\n254:0 Write 512\n254:0 Sync 0\n254:0 Total 4608\nTotal 4608\n";
        assert_eq!(parse_v1_rw(p, v1, d).unwrap(), (4096, 512));
        assert_eq!(parse_v1_rw(p, "Total 0\n", d).unwrap(), (0, 0));
        let a = IoStat {
            read_bytes: 10,
            ..IoStat::default()
        };
        assert_eq!(a.since(&IoStat::default()).read_bytes, 10);
        assert_eq!(IoStat::default().since(&a).read_bytes, 0);
    }
}
