//! A rep's **latency histogram** as the result file keeps it
//! ([`crate::Rep::histogram`]): HdrHistogram V2 + DEFLATE, standard base64
//! — what `hdrhistogram`'s own tools read. Encoded by the harness, decoded
//! by the study to pool rounds ([`crate::study::pooled`]).

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

/// `h` as the result file keeps it; `None` if it does not serialize.
pub fn encode(h: &Histogram<u64>) -> Option<String> {
    let mut buf = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut buf).ok()?;
    Some(base64_encode(&buf))
}

/// A histogram from [`encode`]'s text; `None` if it is not one.
pub fn decode(text: &str) -> Option<Histogram<u64>> {
    let bytes = base64_decode(text)?;
    Deserializer::new()
        .deserialize(&mut std::io::Cursor::new(bytes))
        .ok()
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let digit = |shift: u32| ALPHABET[(n >> shift) as usize & 63] as char;
        s.push(digit(18));
        s.push(digit(12));
        s.push(if c.len() > 1 { digit(6) } else { '=' });
        s.push(if c.len() > 2 { digit(0) } else { '=' });
    }
    s
}

/// The bytes of standard base64 text (padding optional, no whitespace);
/// `None` on any other character.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for ch in text.bytes() {
        let v = ALPHABET.iter().position(|&a| a == ch)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        assert_eq!(base64_encode(b"Man"), "TWFu");
        assert_eq!(base64_encode(b"Ma"), "TWE=");
        assert_eq!(base64_encode(b"M"), "TQ==");
        for n in 0..20u8 {
            let data: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(base64_decode(&base64_encode(&data)).unwrap(), data);
        }
        assert_eq!(base64_decode("TW!u"), None);
    }

    #[test]
    fn a_histogram_round_trips() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for v in [1_000u64, 2_000, 2_000, 50_000, 7_000_000] {
            h.record(v).unwrap();
        }
        let back = decode(&encode(&h).unwrap()).unwrap();
        assert_eq!(back.len(), 5);
        assert_eq!(back.value_at_quantile(0.99), h.value_at_quantile(0.99));
        assert_eq!(decode("not a histogram"), None);
    }
}
