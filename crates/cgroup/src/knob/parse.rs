//! The formats of the kernel's files: numbers and lists, v1 per-device
//! values, v2 `io.max`, `max` and `io.weight`, and weight ↔ shares.

use super::Device;
use crate::error::{CgroupError, Result};
use std::path::Path;

/// v1 memory limits at or above this many bytes mean "unlimited".
pub(super) const V1_UNLIMITED_FROM: u64 = 1 << 62;

pub(super) fn parse_u64(path: &Path, t: &str) -> Result<u64> {
    t.trim()
        .parse()
        .map_err(|_| CgroupError::parse(path, t, "expected an unsigned integer"))
}

pub(super) fn parse_list(path: &Path, t: &str) -> Result<Vec<u32>> {
    elfen_topo::parse_cpu_list(t).map_err(|e| CgroupError::parse(path, t, e.to_string()))
}

/// The value of `device` in a v1 `blkio.throttle.*_device` file
/// (`MAJ:MIN VALUE` lines; absent = unlimited).
pub(super) fn v1_device_value(path: &Path, text: &str, device: Device) -> Result<Option<u64>> {
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if let (Some(d), Some(v)) = (it.next(), it.next()) {
            if d.parse::<Device>().ok() == Some(device) {
                let v = parse_u64(path, v)?;
                return Ok((v != 0).then_some(v));
            }
        }
    }
    Ok(None)
}

/// `rbps`, `wbps`, `riops`, `wiops` of `device` in a v2 `io.max` file
/// (`MAJ:MIN rbps=N wbps=max riops=max wiops=max` lines; absent = max).
pub(super) fn v2_io_max(path: &Path, text: &str, device: Device) -> Result<[Option<u64>; 4]> {
    let mut out = [None; 4];
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if it.next().and_then(|d| d.parse::<Device>().ok()) != Some(device) {
            continue;
        }
        for kv in it {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let val = if v == "max" {
                None
            } else {
                Some(parse_u64(path, v)?)
            };
            match k {
                "rbps" => out[0] = val,
                "wbps" => out[1] = val,
                "riops" => out[2] = val,
                "wiops" => out[3] = val,
                _ => {}
            }
        }
        break;
    }
    Ok(out)
}

/// A v2 byte value that may read `max`.
pub(super) fn v2_max(path: &Path, t: &str) -> Result<Option<u64>> {
    Ok(if t == "max" {
        None
    } else {
        Some(parse_u64(path, t)?)
    })
}

/// The `default` weight of a v2 `io.weight` file (`default 100` and
/// `MAJ:MIN W` lines; a bare number is the default too).
pub(super) fn v2_io_weight(path: &Path, text: &str) -> Result<u32> {
    for line in text.lines() {
        let mut it = line.split_whitespace();
        match (it.next(), it.next()) {
            (Some("default"), Some(w)) | (Some(w), None) => {
                return Ok(parse_u64(path, w)?.min(u64::from(u32::MAX)) as u32);
            }
            _ => {}
        }
    }
    Err(CgroupError::parse(
        path,
        text,
        "expected a \"default W\" line",
    ))
}

/// Weight (v2 units) → shares (v1 units), the kernel's own conversion.
pub fn weight_to_shares(weight: u32) -> u64 {
    ((u64::from(weight) * 1024 + 50) / 100).clamp(2, 262_144)
}

/// Shares (v1 units) → weight (v2 units), the kernel's own conversion.
pub fn shares_to_weight(shares: u64) -> u32 {
    ((shares.saturating_mul(100) + 512) / 1024).clamp(1, 10_000) as u32
}
