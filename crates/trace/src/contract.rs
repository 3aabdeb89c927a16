//! The Rust side of `src/bpf/elfen_trace.h`: the record structs are the
//! skeleton's own (libbpf-cargo generates them from the object's BTF, so
//! they cannot drift from the C), the `#define`s are repeated here and
//! tested against the header; [`decode`] turns one ring-buffer record into
//! a typed [`Event`].

use crate::record::{Event, Exit, Fault, Switch, Tcp, TcpKind, Wakeup};
use crate::skel::types;
use std::net::Ipv4Addr;

/// `ELFEN_TRACE_ABI`.
pub const ABI: u32 = 1;
/// `ET_ON`: the value stored in the `targets` and `lanes` maps.
pub const ON: u32 = 1;
/// `ET_CHAIN`: wakers of the waker one wake-up record carries.
pub const CHAIN: usize = 3;
/// `ET_MAX_TARGETS`: most processes traced at once.
pub const MAX_TARGETS: u32 = 1024;
/// `ET_RING_BYTES`: the default ring buffer size.
pub const RING_BYTES: u32 = 16 * 1024 * 1024;
/// `ET_KINDS`: slots of the per-kind counters.
pub const KINDS: usize = 8;

/// `et_header.kind`.
pub mod kind {
    /// `ET_SWITCH`.
    pub const SWITCH: u32 = 1;
    /// `ET_WAKING`.
    pub const WAKING: u32 = 2;
    /// `ET_FAULT`.
    pub const FAULT: u32 = 3;
    /// `ET_TCP_HELD`.
    pub const TCP_HELD: u32 = 4;
    /// `ET_TCP_RELEASED`.
    pub const TCP_RELEASED: u32 = 5;
    /// `ET_TCP_DELACK`.
    pub const TCP_DELACK: u32 = 6;
    /// `ET_EXIT`.
    pub const EXIT: u32 = 7;
}

/// `et_fault.flags`.
pub mod fault {
    /// `ET_FAULT_MAJOR`.
    pub const MAJOR: u32 = 1 << 0;
    /// `ET_FAULT_HUGE`.
    pub const HUGE: u32 = 1 << 1;
}

/// `et_tcp.flags`.
pub mod tcp {
    /// `ET_TCP_NAGLE`.
    pub const NAGLE: u32 = 1 << 0;
    /// `ET_TCP_INFLIGHT`.
    pub const INFLIGHT: u32 = 1 << 1;
    /// `ET_TCP_CORK`.
    pub const CORK: u32 = 1 << 2;
}

const _: () = {
    assert!(std::mem::size_of::<types::et_header>() == 16);
    assert!(std::mem::size_of::<types::et_task>() == 24);
    assert!(std::mem::size_of::<types::et_switch>() == 72);
    assert!(std::mem::size_of::<types::et_waking>() == 72 + 24 * CHAIN);
    assert!(std::mem::size_of::<types::et_fault>() == 48);
    assert!(std::mem::size_of::<types::et_tcp>() == 80);
    assert!(std::mem::size_of::<types::et_exit>() == 48);
    assert!(std::mem::size_of::<types::et_stats>() == 144);
};

/// A task named in a record: `(tid, tgid, comm)`.
pub type TaskName = (u32, u32, String);

/// Reads a `T` from the front of `data` if it is long enough.
fn read<T: Copy>(data: &[u8]) -> Option<T> {
    (data.len() >= std::mem::size_of::<T>()).then(|| {
        // SAFETY: long enough; T is a plain repr(C) struct of integers
        // (every bit pattern valid); read_unaligned copes with alignment.
        unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) }
    })
}

/// A kernel `comm` (NUL-padded) as a string.
pub fn comm_str(c: &[i8]) -> String {
    let bytes: Vec<u8> = c
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn task(t: &types::et_task) -> TaskName {
    (t.tid, t.tgid, comm_str(&t.comm))
}

fn addr(ip_be: u32, port: u16) -> String {
    format!("{}:{port}", Ipv4Addr::from(u32::from_be(ip_be)))
}

/// One decoded record: the event and the tasks it names (for the thread
/// table).
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The event.
    pub event: Event,
    /// Tasks named, with their process and name.
    pub tasks: Vec<TaskName>,
}

/// Decodes one ring-buffer record; `None` for an unknown kind or a short
/// record (counted as malformed by the caller).
pub fn decode(data: &[u8]) -> Option<Decoded> {
    let h: types::et_header = read(data)?;
    match h.kind {
        kind::SWITCH => {
            let e: types::et_switch = read(data)?;
            Some(Decoded {
                event: Event::Switch(Switch {
                    t: h.time_ns,
                    cpu: h.cpu,
                    prev: e.prev.tid,
                    prev_state: if e.preempt != 0 { 0 } else { e.prev_state },
                    next: e.next.tid,
                }),
                tasks: vec![task(&e.prev), task(&e.next)],
            })
        }
        kind::WAKING => {
            let e: types::et_waking = read(data)?;
            let depth = (e.depth as usize).min(CHAIN);
            let mut tasks = vec![task(&e.wakee), task(&e.waker)];
            tasks.extend(e.chain[..depth].iter().map(task));
            Some(Decoded {
                event: Event::Wakeup(Wakeup {
                    t: h.time_ns,
                    cpu: h.cpu,
                    wakee: e.wakee.tid,
                    waker: e.waker.tid,
                    chain: e.chain[..depth].iter().map(|t| t.tid).collect(),
                }),
                tasks,
            })
        }
        kind::FAULT => {
            let e: types::et_fault = read(data)?;
            Some(Decoded {
                event: Event::Fault(Fault {
                    t: h.time_ns,
                    cpu: h.cpu,
                    tid: e.tid,
                    dur_ns: e.duration_ns,
                    addr: e.address,
                    major: e.flags & fault::MAJOR != 0,
                    huge: e.flags & fault::HUGE != 0,
                }),
                tasks: Vec::new(),
            })
        }
        kind::TCP_HELD | kind::TCP_RELEASED | kind::TCP_DELACK => {
            let e: types::et_tcp = read(data)?;
            let kind = match h.kind {
                kind::TCP_HELD => TcpKind::Held,
                kind::TCP_RELEASED => TcpKind::Released,
                _ => TcpKind::DelayedAck,
            };
            Some(Decoded {
                event: Event::Tcp(Tcp {
                    t: h.time_ns,
                    cpu: h.cpu,
                    kind,
                    sock: e.sock,
                    since_ns: e.since_ns,
                    tid: e.tid,
                    unsent: e.unsent,
                    in_flight: e.in_flight,
                    nagle: e.flags & tcp::NAGLE != 0,
                    cork: e.flags & tcp::CORK != 0,
                    local: addr(e.saddr, e.sport),
                    remote: addr(e.daddr, e.dport),
                }),
                tasks: vec![(e.tid, e.tgid, comm_str(&e.comm))],
            })
        }
        kind::EXIT => {
            let e: types::et_exit = read(data)?;
            Some(Decoded {
                event: Event::Exit(Exit {
                    t: h.time_ns,
                    tid: e.task.tid,
                    leader: e.leader != 0,
                }),
                tasks: vec![task(&e.task)],
            })
        }
        _ => None,
    }
}

/// The bytes of a record (tests build records the way BPF does).
pub fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: a plain repr(C) struct viewed as bytes for its size.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `#define NAME value` lines of the header.
    fn defines() -> Vec<(String, String)> {
        let h = include_str!("bpf/elfen_trace.h");
        h.lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .filter_map(|l| {
                let mut it = l.splitn(2, char::is_whitespace);
                Some((it.next()?.to_string(), it.next()?.trim().to_string()))
            })
            .collect()
    }

    fn def(name: &str) -> String {
        let v = defines()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} not in elfen_trace.h"))
            .1;
        v.split("/*").next().unwrap().trim().to_string()
    }

    fn num(name: &str) -> u64 {
        let v = def(name);
        if let Some(shift) = v.strip_prefix("(1u << ").and_then(|s| s.strip_suffix(')')) {
            return 1 << shift.parse::<u32>().unwrap();
        }
        if let Some(m) = v
            .strip_prefix("(16 * 1024 * 1024")
            .and_then(|s| s.strip_suffix(')'))
        {
            assert!(m.is_empty());
            return 16 * 1024 * 1024;
        }
        v.parse().unwrap_or_else(|_| panic!("{name} = {v}"))
    }

    #[test]
    fn constants_match_the_header() {
        assert_eq!(num("ELFEN_TRACE_ABI"), ABI as u64);
        assert_eq!(num("ET_ON"), ON as u64);
        assert_eq!(num("ET_CHAIN"), CHAIN as u64);
        assert_eq!(num("ET_MAX_TARGETS"), MAX_TARGETS as u64);
        assert_eq!(num("ET_RING_BYTES"), RING_BYTES as u64);
        assert_eq!(num("ET_KINDS"), KINDS as u64);
        for (n, v) in [
            ("ET_SWITCH", kind::SWITCH),
            ("ET_WAKING", kind::WAKING),
            ("ET_FAULT", kind::FAULT),
            ("ET_TCP_HELD", kind::TCP_HELD),
            ("ET_TCP_RELEASED", kind::TCP_RELEASED),
            ("ET_TCP_DELACK", kind::TCP_DELACK),
            ("ET_EXIT", kind::EXIT),
            ("ET_FAULT_MAJOR", fault::MAJOR),
            ("ET_FAULT_HUGE", fault::HUGE),
            ("ET_TCP_NAGLE", tcp::NAGLE),
            ("ET_TCP_INFLIGHT", tcp::INFLIGHT),
            ("ET_TCP_CORK", tcp::CORK),
        ] {
            assert_eq!(num(n), v as u64, "{n}");
        }
    }

    fn comm(s: &str) -> [i8; 16] {
        let mut c = [0i8; 16];
        for (i, b) in s.bytes().take(15).enumerate() {
            c[i] = b as i8;
        }
        c
    }

    #[test]
    fn records_decode() {
        let mut s = types::et_switch::default();
        s.h.time_ns = 5;
        s.h.kind = kind::SWITCH;
        s.h.cpu = 1;
        s.prev.tid = 10;
        s.prev.tgid = 9;
        s.prev.comm = comm("worker");
        s.next.tid = 0;
        s.prev_state = 1;
        let d = decode(&bytes_of(&s)).unwrap();
        assert_eq!(
            d.event,
            Event::Switch(Switch {
                t: 5,
                cpu: 1,
                prev: 10,
                prev_state: 1,
                next: 0
            })
        );
        assert_eq!(d.tasks[0], (10, 9, "worker".to_string()));
        // a preempted thread is runnable whatever its state word said
        s.preempt = 1;
        let Event::Switch(sw) = decode(&bytes_of(&s)).unwrap().event else {
            panic!()
        };
        assert_eq!(sw.prev_state, 0);

        let mut w = types::et_waking::default();
        w.h.kind = kind::WAKING;
        w.wakee.tid = 10;
        w.waker.tid = 20;
        w.depth = 2;
        w.chain[0].tid = 30;
        w.chain[1].tid = 40;
        w.chain[2].tid = 50; // beyond depth: ignored
        let Event::Wakeup(wk) = decode(&bytes_of(&w)).unwrap().event else {
            panic!()
        };
        assert_eq!(wk.chain, vec![30, 40]);

        let mut t = types::et_tcp::default();
        t.h.kind = kind::TCP_HELD;
        t.saddr = u32::from(Ipv4Addr::new(127, 0, 0, 1)).to_be();
        t.sport = 7411;
        t.daddr = t.saddr;
        t.dport = 40000;
        t.flags = tcp::NAGLE | tcp::INFLIGHT;
        t.unsent = 16;
        let Event::Tcp(tc) = decode(&bytes_of(&t)).unwrap().event else {
            panic!()
        };
        assert_eq!(tc.kind, TcpKind::Held);
        assert_eq!(tc.local, "127.0.0.1:7411");
        assert_eq!(tc.remote, "127.0.0.1:40000");
        assert!(tc.nagle && !tc.cork);

        let mut f = types::et_fault::default();
        f.h.kind = kind::FAULT;
        f.flags = fault::HUGE;
        f.duration_ns = 300_000;
        let Event::Fault(fa) = decode(&bytes_of(&f)).unwrap().event else {
            panic!()
        };
        assert!(fa.huge && !fa.major);
        assert_eq!(fa.dur_ns, 300_000);

        // short and unknown records are refused
        assert!(decode(&bytes_of(&s)[..40]).is_none());
        let x = types::et_header {
            kind: 99,
            ..Default::default()
        };
        assert!(decode(&bytes_of(&x)).is_none());
    }
}
