//! The Rust side of `src/bpf/lanes.h`, the contract between the BPF
//! scheduler and its loader: the same numbers (checked against the header's
//! text and the skeleton's types in the tests), the counters, and the
//! kernel's exit record.

use std::fmt;

/// `LANES_ABI`: bumped on any change of the contract.
pub const ABI: u32 = 1;
/// `LANES_MAX_CPUS`: the most possible CPU ids the scheduler covers.
pub const MAX_CPUS: u32 = 256;
/// `LANES_DSQ`: the dispatch queue every batch task waits in.
pub const DSQ: u64 = 0;
/// `LANES_SLICE_NS`: a batch task's slice when nothing takes its CPU earlier.
pub const SLICE_NS: u64 = 20_000_000;
/// `LANES_CGROUP_DEPTH`: cgroup levels above a task compared with the LC cgroups.
pub const CGROUP_DEPTH: u32 = 16;
/// `LANES_MAX_LC`: entries of the LC process map and of the LC cgroup map.
pub const MAX_LC: u32 = 4096;
/// `LANES_NR_STATS`: counters per CPU.
pub const NR_STATS: usize = 10;

/// The scheduler's name as the kernel shows it (`/sys/kernel/sched_ext/root/ops`).
pub const OPS_NAME: &str = "elfen_lanes";

/// The counters, summed over CPUs (`enum lanes_stat`, in its order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// An LC task switched in on a CPU that ran none.
    pub lc_in: u64,
    /// A CPU's last LC task switched out.
    pub lc_out: u64,
    /// Preempt kicks sent to a sibling running batch as an LC started.
    pub kick_preempt: u64,
    /// Idle kicks sent to a sibling as its LC left.
    pub kick_idle: u64,
    /// Local queues handed back to the shared queue as an LC took their CPU.
    pub reenq: u64,
    /// Batch tasks queued.
    pub enqueued: u64,
    /// Batch tasks sent straight to an idle open CPU at wake-up.
    pub direct: u64,
    /// Batch tasks moved to a CPU by dispatch.
    pub dispatched: u64,
    /// Dispatches that gave nothing because the sibling ran LC.
    pub held: u64,
    /// Batch tasks that started on a CPU whose sibling ran LC (kicked off at once).
    pub ran_held: u64,
}

impl Stats {
    /// From one CPU's counters, in `enum lanes_stat` order.
    pub fn from_counters(v: &[u64; NR_STATS]) -> Stats {
        Stats {
            lc_in: v[0],
            lc_out: v[1],
            kick_preempt: v[2],
            kick_idle: v[3],
            reenq: v[4],
            enqueued: v[5],
            direct: v[6],
            dispatched: v[7],
            held: v[8],
            ran_held: v[9],
        }
    }

    /// The counters with their names, in `enum lanes_stat` order.
    pub fn named(&self) -> [(&'static str, u64); NR_STATS] {
        [
            ("lc_in", self.lc_in),
            ("lc_out", self.lc_out),
            ("kick_preempt", self.kick_preempt),
            ("kick_idle", self.kick_idle),
            ("reenq", self.reenq),
            ("enqueued", self.enqueued),
            ("direct", self.direct),
            ("dispatched", self.dispatched),
            ("held", self.held),
            ("ran_held", self.ran_held),
        ]
    }

    /// Adds another CPU's counters.
    pub fn add(&mut self, o: &Stats) {
        self.lc_in += o.lc_in;
        self.lc_out += o.lc_out;
        self.kick_preempt += o.kick_preempt;
        self.kick_idle += o.kick_idle;
        self.reenq += o.reenq;
        self.enqueued += o.enqueued;
        self.direct += o.direct;
        self.dispatched += o.dispatched;
        self.held += o.held;
        self.ran_held += o.ran_held;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .named()
            .iter()
            .map(|(n, v)| format!("{n} {v}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// Why the kernel unloaded the scheduler (`struct scx_exit_info` as
/// `ops.exit` copied it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// `enum scx_exit_kind`.
    pub kind: i32,
    /// The CPU that reported it, or -1.
    pub exit_cpu: i32,
    /// The scheduler's exit code (`scx_bpf_exit`), else 0.
    pub exit_code: i64,
    /// The kernel's reason (e.g. "disabled by sysrq-S", "runnable task stall").
    pub reason: String,
    /// Details (e.g. which task stalled).
    pub msg: String,
}

impl ExitInfo {
    /// The kernel's name of the kind (`SCX_EXIT_*`).
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            0 => "none",
            1 => "done",
            64 => "unregistered",
            65 => "unregistered by BPF",
            66 => "unregistered by the kernel",
            67 => "SysRq",
            68 => "parent",
            69 => "parent killed",
            1024 => "error",
            1025 => "error in BPF",
            1026 => "stall (watchdog)",
            1027 => "re-enqueue error",
            1028 => "rescue error",
            _ => "unknown",
        }
    }

    /// Whether the scheduler was ejected for an error or a stall (kind >= 1024)
    /// rather than unregistered.
    pub fn is_error(&self) -> bool {
        self.kind >= 1024
    }
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.kind_name(), self.kind)?;
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        if !self.msg.is_empty() {
            write!(f, " — {}", self.msg)?;
        }
        Ok(())
    }
}

/// A NUL-terminated C string from a fixed array.
pub(crate) fn c_string(bytes: &[i8]) -> String {
    let b: Vec<u8> = bytes
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skel::types;
    use std::mem::{offset_of, size_of};

    /// The header's #define and enum values as text.
    fn header_value(name: &str) -> String {
        let h = include_str!("bpf/lanes.h");
        for line in h.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() >= 3 && words[0] == "#define" && words[1] == name {
                return words[2].trim_end_matches("ULL").to_string();
            }
            if words.len() >= 3 && words[0] == name && words[1] == "=" {
                return words[2].trim_end_matches(',').to_string();
            }
        }
        panic!("lanes.h defines no {name}");
    }

    #[test]
    fn header_constants_agree() {
        assert_eq!(header_value("LANES_ABI"), ABI.to_string());
        assert_eq!(header_value("LANES_MAX_CPUS"), MAX_CPUS.to_string());
        assert_eq!(header_value("LANES_DSQ"), DSQ.to_string());
        assert_eq!(header_value("LANES_SLICE_NS"), SLICE_NS.to_string());
        assert_eq!(header_value("LANES_CGROUP_DEPTH"), CGROUP_DEPTH.to_string());
        assert_eq!(header_value("LANES_MAX_LC"), MAX_LC.to_string());
        assert_eq!(header_value("LANES_NR_STATS"), NR_STATS.to_string());
        // the counters' names are the enum's, in its order
        let stats = Stats::default();
        for (i, (name, _)) in stats.named().iter().enumerate() {
            let c = format!("LANES_STAT_{}", name.to_uppercase());
            assert_eq!(header_value(&c), i.to_string(), "{c}");
        }
        let ops = include_str!("bpf/lanes.bpf.c");
        assert!(ops.contains(&format!(".name = \"{OPS_NAME}\"")));
    }

    /// The skeleton's types come from the compiled object's BTF, i.e. from
    /// the header as clang compiled it.
    #[test]
    fn skeleton_types_agree() {
        assert_eq!(size_of::<types::lanes_cpu>(), 64);
        assert_eq!(size_of::<types::lanes_stats>(), NR_STATS * 8);
        type E = types::lanes_exit;
        assert_eq!(offset_of!(E, kind), 0);
        assert_eq!(offset_of!(E, exit_cpu), 4);
        assert_eq!(offset_of!(E, exit_code), 8);
        assert_eq!(offset_of!(E, reason), 16);
        assert_eq!(offset_of!(E, msg), 16 + 128);
    }

    #[test]
    fn counters_map_to_names_in_order() {
        let v: [u64; NR_STATS] = std::array::from_fn(|i| i as u64 + 1);
        let s = Stats::from_counters(&v);
        let named = s.named();
        for (i, (_, value)) in named.iter().enumerate() {
            assert_eq!(*value, i as u64 + 1);
        }
        let mut sum = s;
        sum.add(&s);
        assert_eq!(sum.ran_held, 2 * NR_STATS as u64);
        assert!(s.to_string().starts_with("lc_in 1, lc_out 2"));
    }

    #[test]
    fn exit_info_says_kind_and_reason() {
        let e = ExitInfo {
            kind: 1026,
            exit_cpu: 2,
            exit_code: 0,
            reason: "runnable task stall".into(),
            msg: "spin[42] failed to run for 30.1s".into(),
        };
        assert!(e.is_error());
        assert_eq!(
            e.to_string(),
            "stall (watchdog) (1026): runnable task stall — spin[42] failed to run for 30.1s"
        );
        let sysrq = ExitInfo {
            kind: 67,
            exit_cpu: -1,
            exit_code: 0,
            reason: String::new(),
            msg: String::new(),
        };
        assert!(!sysrq.is_error());
        assert_eq!(sysrq.to_string(), "SysRq (67)");
        assert_eq!(c_string(&[104, 105, 0, 120]), "hi");
    }
}
