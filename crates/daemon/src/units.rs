//! Quantities with units in the configuration file: byte sizes (`"512M"`,
//! `"2G"`, or a number of bytes) and amounts of memory that may also be a
//! share of the machine's (`"5%"`).
//!
//! Suffixes are binary: `K`/`KiB` = 1024, `M`/`MiB` = 1024², `G`/`GiB` =
//! 1024³, `T`/`TiB` = 1024⁴; a fraction is allowed before a suffix
//! (`"1.5G"`). A size serialises as its number of bytes, so a file written
//! back reads the same.

use serde::{Deserialize, Serialize};

/// A number of bytes, written `"512M"`, `"2G"`, `"1.5GiB"` or `1048576`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "SizeText", into = "u64")]
pub struct ByteSize(pub u64);

/// A size as TOML gives it: a number or a string.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeText {
    Int(u64),
    Text(String),
}

impl TryFrom<SizeText> for ByteSize {
    type Error = String;
    fn try_from(t: SizeText) -> Result<ByteSize, String> {
        match t {
            SizeText::Int(n) => Ok(ByteSize(n)),
            SizeText::Text(s) => s.parse(),
        }
    }
}

impl From<ByteSize> for u64 {
    fn from(b: ByteSize) -> u64 {
        b.0
    }
}

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let mult: u64 = match unit.trim() {
            "" | "B" => 1,
            "K" | "KiB" => 1 << 10,
            "M" | "MiB" => 1 << 20,
            "G" | "GiB" => 1 << 30,
            "T" | "TiB" => 1 << 40,
            u => {
                return Err(format!(
                    "{s:?}: unknown unit {u:?} (bytes, or K, M, G, T — powers of 1024)"
                ));
            }
        };
        let bad = || format!("{s:?} is not a size like \"512M\", \"2G\" or 1048576");
        if num.is_empty() {
            return Err(bad());
        }
        if mult == 1 {
            return num.parse::<u64>().map(ByteSize).map_err(|_| bad());
        }
        let x: f64 = num.parse().map_err(|_| bad())?;
        let b = x * mult as f64;
        if !b.is_finite() || b < 0.0 || b > u64::MAX as f64 {
            return Err(bad());
        }
        Ok(ByteSize(b.round() as u64))
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&human_bytes(self.0))
    }
}

/// `1.5 GiB`, `512 MiB`, `900 B`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (u, m) in UNITS {
        if b >= m {
            let x = b as f64 / m as f64;
            return if (x - x.round()).abs() < 0.005 {
                format!("{x:.0} {u}")
            } else if x < 10.0 || u == "GiB" || u == "TiB" {
                format!("{x:.2} {u}")
            } else {
                format!("{x:.1} {u}")
            };
        }
    }
    format!("{b} B")
}

/// An amount of memory: bytes, or a share of the machine's (`"5%"` of
/// `MemTotal`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SizeText", into = "String")]
pub enum MemAmount {
    /// Bytes.
    Bytes(u64),
    /// Percent of the machine's memory (0..=100).
    Percent(f64),
}

impl MemAmount {
    /// In bytes, given the machine's total.
    pub fn bytes(&self, total: u64) -> u64 {
        match *self {
            MemAmount::Bytes(b) => b,
            MemAmount::Percent(p) => (total as f64 * p / 100.0) as u64,
        }
    }
}

impl TryFrom<SizeText> for MemAmount {
    type Error = String;
    fn try_from(t: SizeText) -> Result<MemAmount, String> {
        match t {
            SizeText::Int(n) => Ok(MemAmount::Bytes(n)),
            SizeText::Text(s) => match s.trim().strip_suffix('%') {
                Some(p) => {
                    let x: f64 = p
                        .trim()
                        .parse()
                        .map_err(|_| format!("{s:?} is not a percentage like \"5%\""))?;
                    if !(0.0..=100.0).contains(&x) {
                        return Err(format!("{s:?}: a share of memory is 0..=100 %"));
                    }
                    Ok(MemAmount::Percent(x))
                }
                None => s.parse::<ByteSize>().map(|b| MemAmount::Bytes(b.0)),
            },
        }
    }
}

impl From<MemAmount> for String {
    fn from(m: MemAmount) -> String {
        match m {
            MemAmount::Bytes(b) => b.to_string(),
            MemAmount::Percent(p) => format!("{p}%"),
        }
    }
}

impl std::fmt::Display for MemAmount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemAmount::Bytes(b) => f.write_str(&human_bytes(*b)),
            MemAmount::Percent(p) => write!(f, "{p}% of memory"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        let p = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(p("512M"), Ok(512 << 20));
        assert_eq!(p("2G"), Ok(2 << 30));
        assert_eq!(p("1.5GiB"), Ok(3 << 29));
        assert_eq!(p("4096"), Ok(4096));
        assert_eq!(p(" 8 K "), Ok(8192));
        assert!(p("12 MB").unwrap_err().contains("unknown unit"));
        assert!(p("G").is_err() && p("").is_err() && p("-1G").is_err() && p("1.5").is_err());
        assert_eq!(human_bytes(3 << 29), "1.50 GiB");
        assert_eq!(human_bytes((22 << 30) - (300 << 20)), "21.71 GiB");
        assert_eq!(human_bytes(512 << 20), "512 MiB");
        assert_eq!(human_bytes(12), "12 B");
    }

    #[test]
    fn amounts_take_a_share_and_round_trip() {
        #[derive(Deserialize, Serialize, Debug, PartialEq)]
        struct T {
            a: MemAmount,
            b: ByteSize,
        }
        let t: T = toml::from_str("a = \"5%\"\nb = \"1G\"").unwrap();
        assert_eq!(t.a, MemAmount::Percent(5.0));
        assert_eq!(t.a.bytes(1000), 50);
        assert_eq!(t.b, ByteSize(1 << 30));
        let back: T = toml::from_str(&toml::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        let t: T = toml::from_str("a = 1024\nb = 1").unwrap();
        assert_eq!(t.a, MemAmount::Bytes(1024));
        assert!(toml::from_str::<T>("a = \"120%\"\nb = 1").is_err());
    }
}
