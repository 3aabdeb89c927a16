//! The harness's **open-loop load generator**: the load kit's
//! (`elfen-load`: Poisson arrivals computed before the invocation starts,
//! each request sent at its intended time or at once if late, latency
//! from the intended send time, so a stall — of the server, the network or
//! the sender itself — shows up as latency for every request due during it)
//! re-exported where the harness has always found it, with what only the
//! harness's result files need: histograms encoded for `Rep.histogram`.
//! [`client`] runs one invocation against an LC service; [`drive`] is
//! `elfen load`, the generator on its own.

pub mod client;
pub mod drive;

pub use elfen_load::accounting::{Accounting, Outcome, new_histogram, percentiles_us};
pub use elfen_load::arrivals::{poisson_offsets, run_sender};
pub use elfen_load::clock::{Clock, FakeClock, MonoClock, mono_ns};

use hdrhistogram::Histogram;

/// A histogram as HdrHistogram V2 + DEFLATE, base64 (the `Rep.histogram`
/// field; `hdrhistogram`'s own tools read it back).
pub fn encode_histogram(h: &Histogram<u64>) -> Option<String> {
    use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
    let mut buf = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut buf).ok()?;
    Some(base64(&buf))
}

/// Standard base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        s.push(T[(n >> 18) as usize & 63] as char);
        s.push(T[(n >> 12) as usize & 63] as char);
        s.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        s.push(if c.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_encode() {
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
        let mut h = new_histogram();
        h.record(1234).unwrap();
        assert!(encode_histogram(&h).unwrap().len() > 8);
    }
}
