//! An independent tracer for the live tests: the kernel's own
//! `sched:sched_switch` trace event in a tracefs instance of its own (no
//! BPF, nothing of the scheduler under test), read back as text, and the
//! per-CPU timelines it gives.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One `sched_switch` event: on `cpu` at `t_ns`, `prev` left and `next` came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    pub cpu: u32,
    pub t_ns: u64,
    pub prev: u32,
    pub next: u32,
}

/// Parses one line of a tracefs `trace` file; `None` for headers and other
/// events. The line looks like
/// `  <idle>-0  [001] d..2.  1234.567890: sched_switch: prev_comm=swapper/1
///    prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=spin next_pid=321 next_prio=120`.
pub fn parse_line(line: &str) -> Option<Switch> {
    let (head, rest) = line.split_once(": sched_switch: ")?;
    let open = head.find('[')?;
    let close = head[open..].find(']')? + open;
    let cpu: u32 = head[open + 1..close].trim().parse().ok()?;
    let ts = head.rsplit(' ').next()?.trim_end_matches(':');
    let (s, frac) = ts.split_once('.')?;
    let secs: u64 = s.parse().ok()?;
    // the fraction has 6 (µs) or 9 (ns) digits
    let frac_ns: u64 = format!("{frac:0<9}")[..9].parse().ok()?;
    let (prev_part, next_part) = rest.split_once(" ==> ")?;
    // comm may hold spaces or '='; the pid is the last prev_pid=/next_pid= field
    let pid = |part: &str, key: &str| -> Option<u32> {
        let i = part.rfind(key)? + key.len();
        part[i..].split_whitespace().next()?.parse().ok()
    };
    Some(Switch {
        cpu,
        t_ns: secs * 1_000_000_000 + frac_ns,
        prev: pid(prev_part, " prev_pid=")?,
        next: pid(next_part, " next_pid=")?,
    })
}

/// Intervals `[start, end)` in ns.
pub type Intervals = Vec<(u64, u64)>;

/// The switches of a window, by CPU, in time order.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    by_cpu: BTreeMap<u32, Vec<Switch>>,
    /// The window: first and last event seen (any CPU).
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Timeline {
    pub fn from_switches(mut all: Vec<Switch>) -> Timeline {
        all.sort_by_key(|s| (s.t_ns, s.cpu));
        let mut t = Timeline {
            start_ns: all.first().map_or(0, |s| s.t_ns),
            end_ns: all.last().map_or(0, |s| s.t_ns),
            ..Timeline::default()
        };
        for s in all {
            t.by_cpu.entry(s.cpu).or_default().push(s);
        }
        t
    }

    pub fn parse(text: &str) -> Timeline {
        Timeline::from_switches(text.lines().filter_map(parse_line).collect())
    }

    pub fn events(&self) -> usize {
        self.by_cpu.values().map(Vec::len).sum()
    }

    /// When a task of `tids` ran on `cpu`, within the window (before a
    /// CPU's first event, what ran is that event's `prev`).
    pub fn running(&self, cpu: u32, tids: &HashSet<u32>) -> Intervals {
        let mut out = Vec::new();
        let Some(ev) = self.by_cpu.get(&cpu) else {
            return out;
        };
        let mut since = self.start_ns;
        let mut cur = ev[0].prev;
        for s in ev {
            if tids.contains(&cur) && s.t_ns > since {
                out.push((since, s.t_ns));
            }
            since = s.t_ns;
            cur = s.next;
        }
        if tids.contains(&cur) && self.end_ns > since {
            out.push((since, self.end_ns));
        }
        out
    }

    /// The complement of `iv` within the window.
    pub fn outside(&self, iv: &Intervals) -> Intervals {
        let mut out = Vec::new();
        let mut at = self.start_ns;
        for &(a, b) in iv {
            if a > at {
                out.push((at, a));
            }
            at = at.max(b);
        }
        if self.end_ns > at {
            out.push((at, self.end_ns));
        }
        out
    }
}

pub fn total(iv: &Intervals) -> u64 {
    iv.iter().map(|(a, b)| b - a).sum()
}

/// ns where both interval lists hold (each sorted and disjoint).
pub fn overlap(x: &Intervals, y: &Intervals) -> u64 {
    let (mut i, mut j, mut sum) = (0, 0, 0);
    while i < x.len() && j < y.len() {
        let a = x[i].0.max(y[j].0);
        let b = x[i].1.min(y[j].1);
        if b > a {
            sum += b - a;
        }
        if x[i].1 < y[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    sum
}

/// A tracefs instance recording `sched_switch` on every CPU with the
/// monotonic clock; removed on drop.
pub struct Tracer {
    dir: PathBuf,
}

fn write(path: &Path, what: &str) -> std::io::Result<()> {
    std::fs::write(path, what).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("writing {what:?} to {}: {e}", path.display()),
        )
    })
}

impl Tracer {
    /// Makes the instance (tracefs mounted at /sys/kernel/tracing if it is not).
    pub fn new(name: &str) -> std::io::Result<Tracer> {
        let root = Path::new("/sys/kernel/tracing");
        if !root.join("instances").exists() {
            let ok = std::process::Command::new("mount")
                .args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"])
                .status()?
                .success();
            if !ok {
                return Err(std::io::Error::other("mount -t tracefs failed"));
            }
        }
        let dir = root.join("instances").join(name);
        if dir.exists() {
            std::fs::remove_dir(&dir)?;
        }
        std::fs::create_dir(&dir)?;
        let t = Tracer { dir };
        write(&t.dir.join("tracing_on"), "0")?;
        write(&t.dir.join("trace_clock"), "mono")?;
        write(&t.dir.join("buffer_size_kb"), "16384")?;
        write(&t.dir.join("events/sched/sched_switch/enable"), "1")?;
        Ok(t)
    }

    /// Records for `window` and returns what it saw. Fails if the buffer
    /// overran (the timeline would have holes).
    pub fn record(&self, window: Duration) -> std::io::Result<Timeline> {
        write(&self.dir.join("trace"), "")?; // clears the buffer
        write(&self.dir.join("tracing_on"), "1")?;
        std::thread::sleep(window);
        write(&self.dir.join("tracing_on"), "0")?;
        let mut overrun = 0u64;
        if let Ok(rd) = std::fs::read_dir(self.dir.join("per_cpu")) {
            for e in rd.flatten() {
                let stats = std::fs::read_to_string(e.path().join("stats")).unwrap_or_default();
                overrun += stats
                    .lines()
                    .find_map(|l| l.strip_prefix("overrun:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        if overrun > 0 {
            return Err(std::io::Error::other(format!(
                "the trace buffer overran ({overrun} events lost)"
            )));
        }
        let text = std::fs::read_to_string(self.dir.join("trace"))?;
        Ok(Timeline::parse(&text))
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = write(&self.dir.join("tracing_on"), "0");
        let _ = write(&self.dir.join("events/sched/sched_switch/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# tracer: nop
#
#                                _-----=> irqs-off/BH-disabled
          <idle>-0       [001] d..2.   100.000000: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=lc spin next_pid=10 next_prio=120
           batch-20      [000] d..2.   100.000100: sched_switch: prev_comm=batch prev_pid=20 prev_prio=120 prev_state=R ==> next_comm=swapper/0 next_pid=0 next_prio=120
          lc spin-10     [001] d..2.   100.004000: sched_switch: prev_comm=lc spin prev_pid=10 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
          <idle>-0       [000] d..2.   100.005000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=batch next_pid=20 next_prio=120
          <idle>-0       [001] d..2.   100.010000: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=lc spin next_pid=10 next_prio=120
";

    #[test]
    fn lines_parse_with_spaces_in_names() {
        let s = parse_line(TEXT.lines().nth(3).unwrap()).unwrap();
        assert_eq!(
            s,
            Switch {
                cpu: 1,
                t_ns: 100_000_000_000,
                prev: 0,
                next: 10
            }
        );
        assert!(parse_line("# tracer: nop").is_none());
        let ns = parse_line(
            " x-1 [002] d..2. 5.123456789: sched_switch: prev_comm=a prev_pid=1 prev_prio=1 prev_state=S ==> next_comm=b=c next_pid=2 next_prio=1",
        )
        .unwrap();
        assert_eq!((ns.cpu, ns.t_ns, ns.next), (2, 5_123_456_789, 2));
    }

    #[test]
    fn timelines_give_running_time_and_overlap() {
        let t = Timeline::parse(TEXT);
        assert_eq!(t.events(), 5);
        assert_eq!((t.start_ns, t.end_ns), (100_000_000_000, 100_010_000_000));
        let lc: HashSet<u32> = [10].into();
        let batch: HashSet<u32> = [20].into();
        let on1 = t.running(1, &lc);
        assert_eq!(
            on1,
            vec![
                (100_000_000_000, 100_004_000_000),
                (100_010_000_000, 100_010_000_000)
            ]
            .into_iter()
            .filter(|(a, b)| b > a)
            .collect::<Vec<_>>()
        );
        // batch on cpu 0: from the window's start (its first event's prev)
        // to 100.0001, then from 100.005 to the end
        let on0 = t.running(0, &batch);
        assert_eq!(
            on0,
            vec![
                (100_000_000_000, 100_000_100_000),
                (100_005_000_000, 100_010_000_000)
            ]
        );
        assert_eq!(overlap(&on1, &on0), 100_000);
        assert_eq!(total(&on1), 4_000_000);
        let idle = t.outside(&on1);
        assert_eq!(idle, vec![(100_004_000_000, 100_010_000_000)]);
        assert_eq!(overlap(&idle, &on0), 5_000_000);
    }
}
