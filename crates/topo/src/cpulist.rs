//! The kernel's CPU list syntax: `0-3,8,10-11`.
//!
//! Used by sysfs (`online`, `thread_siblings_list`), by cpusets (`cpuset.cpus`) and by
//! `taskset -c`, so every elfen crate that talks about sets of lanes reuses it.

use crate::error::{Result, TopoError};

/// Largest CPU id a list may name. Linux's `NR_CPUS` tops out at 8192; this bound
/// only keeps a typo like `0-4000000000` from allocating gigabytes.
pub const MAX_CPU_ID: u32 = 65_535;

/// Parses a CPU list like `"0-3,8,10-11"` into sorted, de-duplicated CPU ids.
///
/// Surrounding whitespace (sysfs files end in a newline) is ignored; an empty string
/// is the empty set, as in an empty `cpuset.cpus`. Ranges must be ascending.
///
/// ```
/// use elfen_topo::parse_cpu_list;
/// assert_eq!(parse_cpu_list("0-3,8\n").unwrap(), vec![0, 1, 2, 3, 8]);
/// assert!(parse_cpu_list("3-1").is_err());
/// ```
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>> {
    let err = |reason: String| TopoError::CpuList {
        input: s.to_string(),
        reason,
    };
    let trimmed = s.trim();
    let mut cpus = Vec::new();
    if trimmed.is_empty() {
        return Ok(cpus);
    }
    for item in trimmed.split(',') {
        let item = item.trim();
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (parse_id(a).map_err(&err)?, parse_id(b).map_err(&err)?),
            None => {
                let id = parse_id(item).map_err(&err)?;
                (id, id)
            }
        };
        if lo > hi {
            return Err(err(format!("range {item:?} is descending")));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Parses one CPU id of a list; the error text says which token was wrong.
fn parse_id(token: &str) -> std::result::Result<u32, String> {
    let token = token.trim();
    if token.is_empty() {
        return Err("empty entry (stray ',' or '-')".to_string());
    }
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("expected a cpu number, found {token:?}"));
    }
    match token.parse::<u32>() {
        Ok(id) if id <= MAX_CPU_ID => Ok(id),
        _ => Err(format!("cpu {token} is larger than {MAX_CPU_ID}")),
    }
}

/// Formats CPU ids in the kernel's list syntax, collapsing runs into ranges.
///
/// The input need not be sorted or unique. The empty set formats as `""`.
///
/// ```
/// use elfen_topo::format_cpu_list;
/// assert_eq!(format_cpu_list(&[8, 0, 1, 2, 3, 10, 11]), "0-3,8,10-11");
/// ```
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_examples() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), vec![0, 1]);
        assert_eq!(
            parse_cpu_list("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list(" 2, 0 ,1 ").unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_cpu_list("1,1,0-1").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpu_list("\n").unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        for (input, needle) in [
            ("abc", "expected a cpu number, found \"abc\""),
            ("0-", "empty entry"),
            ("0,,1", "empty entry"),
            ("3-1", "descending"),
            ("-1", "empty entry"),
            ("0x3", "\"0x3\""),
            ("99999999999", "larger than"),
            ("0-1-2", "\"1-2\""),
        ] {
            let e = parse_cpu_list(input).unwrap_err().to_string();
            assert!(e.contains(needle), "{input:?}: {e}");
            assert!(e.contains(&format!("{input:?}")), "{input:?}: {e}");
        }
    }

    #[test]
    fn formats_and_round_trips() {
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(format_cpu_list(&[5]), "5");
        assert_eq!(format_cpu_list(&[3, 1, 2, 2]), "1-3");
        assert_eq!(format_cpu_list(&[0, 2, 4, 5]), "0,2,4-5");
        for s in ["0-3,8,10-11", "0", "1,3,5-7,1023-1025"] {
            assert_eq!(format_cpu_list(&parse_cpu_list(s).unwrap()), s);
        }
    }
}
