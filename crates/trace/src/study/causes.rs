//! The causes of one request's latency, taken along time: before its
//! begin, on the LC thread, after its end, and beside it (see the module
//! above for the rules).

use super::timeline::{Iv, State, overlap_sum};
use super::{Ctx, Hold, Request};
use crate::report::{CauseKind, ThreadRef};
use crate::spans::ClientSpan;
use std::collections::HashMap;

/// A cause before shares are known.
pub(super) struct Raw {
    pub(super) kind: CauseKind,
    pub(super) ns: u64,
    pub(super) who: Vec<ThreadRef>,
    pub(super) behind: Vec<u64>,
    pub(super) count: u64,
    pub(super) major: u64,
    pub(super) huge: u64,
    pub(super) delayed_ack: bool,
    pub(super) text: String,
}

impl Raw {
    fn new(kind: CauseKind, ns: u64, text: String) -> Raw {
        Raw {
            kind,
            ns,
            who: Vec::new(),
            behind: Vec::new(),
            count: 0,
            major: 0,
            huge: 0,
            delayed_ack: false,
            text,
        }
    }
}

fn ms(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// The gaps of `[a, b)` not covered by sorted, disjoint `covered`.
fn gaps(a: u64, b: u64, covered: &[Iv]) -> Vec<Iv> {
    let mut out = Vec::new();
    let mut t = a;
    let i = covered.partition_point(|x| x.end <= a);
    for c in covered[i..].iter().take_while(|c| c.start < b) {
        if c.start > t {
            out.push(Iv {
                start: t,
                end: c.start,
            });
        }
        t = t.max(c.end);
    }
    if t < b {
        out.push(Iv { start: t, end: b });
    }
    out
}

impl Ctx<'_> {
    /// The causes of request `i`'s latency (unsorted, not yet shared).
    pub(super) fn causes(&self, i: usize) -> (u64, Vec<Raw>) {
        let r = &self.reqs[i];
        let (lat, out) = self.latency(r);
        let mut v: Vec<Raw> = Vec::new();
        if r.on_lc_line {
            if let Some(c) = r.client {
                self.before_begin(r, c, &mut v);
            }
            if let Some(lc) = self.rec.target.lc_tid {
                self.on_lc_thread(r, lc, &mut v);
            }
            self.after_end(r, out, &mut v);
        } else {
            self.client_only(r, &mut v);
        }
        self.beside(r, &mut v);
        (lat, v)
    }

    /// From the intended send to the begin: behind other requests, in a
    /// JVM pause, or on the way (the dispatcher's own waits named).
    /// Time other requests ran on the LC thread inside `[a, z)` (the
    /// queue `r` waited in), as a cause; that time.
    fn queueing(&self, r: &Request, a: u64, z: u64, v: &mut Vec<Raw>) -> u64 {
        let mut behind: Vec<(u64, u64)> = Vec::new();
        let lo = self.lc_spans.partition_point(|s| s.0.end <= a);
        for (iv, id) in &self.lc_spans[lo..] {
            if iv.start >= z {
                break;
            }
            if *id != r.id {
                let ov = iv.overlap(a, z);
                if ov > 0 {
                    behind.push((*id, ov));
                }
            }
        }
        let q: u64 = behind.iter().map(|x| x.1).sum();
        behind.sort_by_key(|x| std::cmp::Reverse(x.1));
        if q > 0 {
            let mut x = Raw::new(
                CauseKind::Queueing,
                q,
                format!(
                    "queued {} behind {} request(s), longest behind #{}",
                    ms(q),
                    behind.len(),
                    behind[0].0
                ),
            );
            x.behind = behind.iter().take(5).map(|x| x.0).collect();
            x.count = behind.len() as u64;
            v.push(x);
        }
        q
    }

    fn before_begin(&self, r: &Request, c: ClientSpan, v: &mut Vec<Raw>) {
        let b = r.begin_ns;
        let (a, z) = (c.intended_ns, b.max(c.intended_ns));
        let q = self.queueing(r, a, z, v);
        let covered: Vec<Iv> = self.lc_spans.iter().map(|s| s.0).collect();
        let free = gaps(a, z, &covered);
        // a safepoint: the LC thread (or the thread that woke it) was
        // released by a stop-the-world thread — it waited from its arrival
        // for the safepoint to end (time to safepoint included, which the
        // VM thread's own runs do not show)
        let held_until = self.rec.target.lc_tid.and_then(|lc| {
            let w = self.tl.wakeup_before(lc, b).filter(|w| w.t >= a)?;
            let released = self.stw.contains(&w.waker)
                || w.chain.first().is_some_and(|t| self.stw.contains(t));
            released.then_some(w.t)
        });
        let paused: u64 = free
            .iter()
            .map(|g| match held_until {
                Some(t) => Iv {
                    start: g.start,
                    end: g.end.min(t),
                }
                .overlap(g.start, g.end)
                .max(overlap_sum(&self.pause_ivs, g.start, g.end)),
                None => overlap_sum(&self.pause_ivs, g.start, g.end),
            })
            .sum();
        if paused > 0 {
            v.push(Raw::new(
                CauseKind::JvmPause,
                paused,
                format!(
                    "waited {} for a JVM pause before it began{}",
                    ms(paused),
                    if held_until.is_some() {
                        " (released by the JVM's VM thread at the safepoint's end)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        // on the way: the threads before the LC thread (the dispatcher)
        // stalled in page faults
        let stalled = self.faults_of(
            &self.others(),
            &free,
            "on its way, the service's other threads stalled ",
            v,
        );
        // the LC thread woken for it but waiting for its CPU
        let mut waited = 0u64;
        let mut ran: HashMap<u32, u64> = HashMap::new();
        if let Some(lc) = self.rec.target.lc_tid {
            for g in &free {
                for p in self.tl.periods(lc, g.start, g.end) {
                    if let State::Runnable(cpu) = p.state {
                        let (pa, pb) = (p.iv.start.max(g.start), p.iv.end.min(g.end));
                        if pb > pa {
                            waited += pb - pa;
                            let who = self
                                .tl
                                .cpus
                                .get(cpu as usize)
                                .map(|c| c.who_ran(pa, pb))
                                .unwrap_or_default();
                            for (t, ns) in who {
                                *ran.entry(t).or_default() += ns;
                            }
                        }
                    }
                }
            }
        }
        if waited > 0 {
            v.push(self.runnable(waited, ran, "woken for it, the LC thread was runnable"));
        }
        let cold = self.cold_on_the_way(&free, v);
        let dispatch = (z - a).saturating_sub(q + paused + stalled + waited + cold);
        if dispatch == 0 {
            return;
        }
        let late = c.sent_ns.saturating_sub(c.intended_ns);
        let mut x = Raw::new(
            CauseKind::Dispatch,
            dispatch,
            format!(
                "{} from its intended send to its begin with no request ahead{}",
                ms(dispatch),
                if late >= 10_000 {
                    format!(" (the client itself sent it {} late)", ms(late))
                } else {
                    String::new()
                }
            ),
        );
        // who woke the LC thread for it, and what held that waker back
        if let Some(lc) = self.rec.target.lc_tid {
            if let Some(w) = self.tl.wakeup_before(lc, b).filter(|w| w.t >= a) {
                let mut runnable = 0u64;
                let mut by: HashMap<u32, u64> = HashMap::new();
                for p in self.tl.periods(w.waker, a, w.t) {
                    if let State::Runnable(cpu) = p.state {
                        let (pa, pb) = (p.iv.start.max(a), p.iv.end.min(w.t));
                        runnable += pb.saturating_sub(pa);
                        if let Some(cr) = self.tl.cpus.get(cpu as usize) {
                            for (t, ns) in cr.who_ran(pa, pb) {
                                *by.entry(t).or_default() += ns;
                            }
                        }
                    }
                }
                let mut by: Vec<(u32, u64)> = by.into_iter().filter(|x| x.0 != 0).collect();
                by.sort_by_key(|x| std::cmp::Reverse(x.1));
                if runnable > 0 && !by.is_empty() {
                    x.text.push_str(&format!(
                        "; {} (which woke the LC thread) waited {} for a CPU while {} ran",
                        self.thread(w.waker),
                        ms(runnable),
                        self.thread(by[0].0)
                    ));
                    x.who = by.iter().take(5).map(|(t, _)| self.thread(*t)).collect();
                } else {
                    x.who = std::iter::once(w.waker)
                        .chain(w.chain.iter().copied())
                        .map(|t| self.thread(t))
                        .collect();
                }
            }
        }
        v.push(x);
    }

    /// Begin to end: the LC thread's periods.
    fn on_lc_thread(&self, r: &Request, lc: u32, v: &mut Vec<Raw>) {
        let (b, e) = (r.begin_ns, r.end_ns);
        let mut on = 0u64;
        let mut pre: HashMap<u32, u64> = HashMap::new();
        let mut pre_total = 0u64;
        let mut wait_total = 0u64;
        let mut wait_who: Vec<(u64, Vec<u32>)> = Vec::new();
        let mut pause_in = 0u64;
        let mut jit_wait = 0u64;
        for p in self.tl.periods(lc, b, e) {
            let ov = p.iv.overlap(b, e);
            if ov == 0 {
                continue;
            }
            let (pa, pb) = (p.iv.start.max(b), p.iv.end.min(e));
            match p.state {
                State::OnCpu(_) => on += ov,
                State::Runnable(cpu) => {
                    pre_total += ov;
                    let ran = self
                        .tl
                        .cpus
                        .get(cpu as usize)
                        .map(|c| c.who_ran(pa, pb))
                        .filter(|w| !w.is_empty())
                        .unwrap_or_else(|| vec![(p.successor, ov)]);
                    for (t, ns) in ran {
                        *pre.entry(t).or_default() += ns;
                    }
                }
                State::Blocked(_) => {
                    let paused = overlap_sum(&self.pause_ivs, pa, pb);
                    pause_in += paused;
                    let rest = ov.saturating_sub(paused);
                    let waker = self
                        .tl
                        .wakeup_before(lc, p.iv.end)
                        .filter(|w| w.t >= p.iv.start);
                    match waker {
                        // it waited for the JIT: a cold JVM
                        Some(w) if self.compilers.contains(&w.waker) => jit_wait += rest,
                        // held at a safepoint: the VM thread releases it
                        Some(w) if self.stw.contains(&w.waker) => pause_in += rest,
                        Some(w) => {
                            wait_total += rest;
                            let chain = std::iter::once(w.waker)
                                .chain(w.chain.iter().copied())
                                .collect();
                            wait_who.push((rest, chain));
                        }
                        None => wait_total += rest,
                    }
                }
            }
        }
        let fault_ns = self.faults(lc, b, e, v);
        let service = on.saturating_sub(fault_ns);
        // a cold JVM: the request's thread dealt with the JIT compiler (woke
        // it with compilation requests, or was woken by it), or the compiler
        // ran beside it for at least half of it; its own work is then code
        // still being compiled
        let exchanges = self.jit_exchanges(lc, b, e);
        let jit_beside: u64 = self
            .compilers
            .iter()
            .map(|&t| self.tl.on_cpu(t, b, e))
            .sum();
        let cold = exchanges > 0 || jit_wait > 0 || (e > b && jit_beside * 2 >= e - b);
        if cold && service + jit_wait > 0 {
            let mut x = Raw::new(
                CauseKind::JvmWarmup,
                service + jit_wait,
                format!(
                    "ran code the JVM was still loading and compiling: {} of its own work, {} waiting for the JIT \
                     ({exchanges} wake-ups between it and the compiler threads, which ran {} beside it)",
                    ms(service),
                    ms(jit_wait),
                    ms(jit_beside)
                ),
            );
            x.count = exchanges;
            x.who = self
                .compilers
                .iter()
                .filter(|&&t| self.tl.on_cpu(t, b, e) > 0)
                .map(|&t| self.thread(t))
                .collect();
            v.push(x);
        } else if service > 0 {
            v.push(Raw::new(
                CauseKind::Service,
                service,
                format!("{} of its own work on the CPU", ms(service)),
            ));
        }
        if pre_total > 0 {
            v.push(self.runnable(pre_total, pre, "runnable"));
        }
        if pause_in > 0 {
            v.push(Raw::new(
                CauseKind::JvmPause,
                pause_in,
                format!("stopped {} by a JVM pause while it ran", ms(pause_in)),
            ));
        }
        if wait_total > 0 {
            wait_who.sort_by_key(|x| std::cmp::Reverse(x.0));
            let chain: Vec<ThreadRef> = wait_who
                .first()
                .map(|(_, c)| c.iter().map(|&t| self.thread(t)).collect())
                .unwrap_or_default();
            let by = if chain.is_empty() {
                " (no wake-up of it recorded in the trace)".to_string()
            } else {
                format!(
                    " by {}",
                    chain
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(" ← woken by ")
                )
            };
            let mut x = Raw::new(
                CauseKind::WakeupWait,
                wait_total,
                format!("asleep {} until woken{by}", ms(wait_total)),
            );
            x.who = chain;
            v.push(x);
        }
    }

    /// A preemption cause: `total` ns runnable, `ran` who ran meanwhile on
    /// its CPU (the idle task: its CPU was idle — the wake-up's latency).
    fn runnable(&self, total: u64, ran: HashMap<u32, u64>, what: &str) -> Raw {
        let mut by: Vec<(u32, u64)> = ran.into_iter().filter(|x| x.0 != 0).collect();
        by.sort_by_key(|x| std::cmp::Reverse(x.1));
        let text = match by.first() {
            Some((t, _)) => format!(
                "{what} for {} while {} ran on its CPU",
                ms(total),
                self.thread(*t)
            ),
            None => format!(
                "{what} for {} before it ran, its CPU idle (the wake-up's latency)",
                ms(total)
            ),
        };
        let mut x = Raw::new(CauseKind::Preemption, total, text);
        x.who = by.iter().take(5).map(|(t, _)| self.thread(*t)).collect();
        x
    }

    /// The LC thread's page faults inside `[a, b)`, as a cause; their time.
    fn faults(&self, lc: u32, a: u64, b: u64, v: &mut Vec<Raw>) -> u64 {
        self.faults_of(&[lc], &[Iv { start: a, end: b }], "", v)
    }

    /// The page faults of threads `tids` inside the windows (overlapping
    /// ones counted once), as a cause saying whose (`who`: empty for the LC
    /// thread); their time.
    fn faults_of(&self, tids: &[u32], windows: &[Iv], who: &str, v: &mut Vec<Raw>) -> u64 {
        let mut ivs = Vec::new();
        let (mut nf, mut major, mut huge) = (0u64, 0u64, 0u64);
        let mut whose = Vec::new();
        for &t in tids {
            for w in windows {
                for f in self.tl.faults_in(t, w.start, w.end) {
                    ivs.push(Iv {
                        start: f.t.max(w.start),
                        end: (f.t + f.dur_ns).min(w.end),
                    });
                    nf += 1;
                    major += u64::from(f.major);
                    huge += u64::from(f.huge);
                    if !whose.contains(&t) {
                        whose.push(t);
                    }
                }
            }
        }
        let fault_ns: u64 = super::timeline::merge(ivs, 0)
            .iter()
            .map(|iv| iv.end.saturating_sub(iv.start))
            .sum();
        if fault_ns > 0 {
            let mut x = Raw::new(
                CauseKind::PageFaults,
                fault_ns,
                format!(
                    "{}{} in {nf} page fault(s){}{}",
                    who,
                    ms(fault_ns),
                    if huge > 0 {
                        format!(", {huge} of them a huge page zeroed")
                    } else {
                        String::new()
                    },
                    if major > 0 {
                        format!(", {major} major")
                    } else {
                        String::new()
                    }
                ),
            );
            x.count = nf;
            x.major = major;
            x.huge = huge;
            x.who = whose.iter().map(|&t| self.thread(t)).collect();
            v.push(x);
        }
        fault_ns
    }

    /// A cold JVM on a request's way: the service's threads other than the
    /// LC thread (the dispatcher) inside the windows, when they exchanged
    /// wake-ups with the JIT's compiler threads or the compiler ran beside
    /// them half of the time — their time on a CPU there, as a cause; that
    /// time.
    fn cold_on_the_way(&self, windows: &[Iv], v: &mut Vec<Raw>) -> u64 {
        let helpers: Vec<u32> = self
            .others()
            .into_iter()
            .filter(|t| !self.compilers.contains(t) && !self.stw.contains(t))
            .collect();
        let (mut on, mut exchanges, mut jit, mut len) = (0u64, 0u64, 0u64, 0u64);
        for w in windows {
            len += w.end - w.start;
            for &t in &helpers {
                on += self.tl.on_cpu(t, w.start, w.end);
                exchanges += self.jit_exchanges(t, w.start, w.end);
            }
            jit += self
                .compilers
                .iter()
                .map(|&c| self.tl.on_cpu(c, w.start, w.end))
                .sum::<u64>();
        }
        if on == 0 || (exchanges == 0 && jit * 2 < len) {
            return 0;
        }
        let mut x = Raw::new(
            CauseKind::JvmWarmup,
            on,
            format!(
                "on its way, the service's threads ran {} of code the JVM was still loading and compiling \
                 ({exchanges} wake-ups with the compiler threads, which ran {} meanwhile)",
                ms(on),
                ms(jit)
            ),
        );
        x.count = exchanges;
        v.push(x);
        on
    }

    /// The target's threads other than the LC thread (acceptor,
    /// dispatchers, the JVM's own): a request passes through them before
    /// the LC thread begins it.
    fn others(&self) -> Vec<u32> {
        let lc = self.rec.target.lc_tid;
        self.rec
            .threads
            .iter()
            .filter(|(t, i)| Some(**t) != lc && self.rec.target.tgids.contains(&i.tgid))
            .map(|(&t, _)| t)
            .collect()
    }

    /// After the end: the response held by TCP, then its delivery.
    fn after_end(&self, r: &Request, out: u64, v: &mut Vec<Raw>) {
        let e = r.end_ns;
        if let Some(h) = self.hold_at(e) {
            let held = out.saturating_sub(e);
            if held > 0 {
                v.push(self.held(h, held, "its response"));
            }
        }
        if let Some(c) = r.client {
            let recv = c.received_ns.unwrap_or(self.rec.end_ns);
            let d = recv.saturating_sub(out.max(e));
            if d > 0 {
                v.push(Raw::new(
                    CauseKind::Delivery,
                    d,
                    format!("{} from the response leaving to its arrival", ms(d)),
                ));
            }
        }
    }

    fn held(&self, h: &Hold, ns: u64, what: &str) -> Raw {
        let mut x = Raw::new(
            CauseKind::TcpHeld,
            ns,
            format!(
                "{what} waited {} in the kernel{}{}",
                ms(ns),
                if h.nagle {
                    format!(" (Nagle: {} B unacknowledged in flight)", h.in_flight)
                } else {
                    " (not by Nagle: window, cork or queue)".to_string()
                },
                if h.delayed_ack {
                    "; the client delayed its ACK"
                } else {
                    ""
                }
            ),
        );
        x.delayed_ack = h.delayed_ack;
        x.count = 1;
        x
    }

    /// A request the LC line did not show: what covered its window — the
    /// requests the LC thread ran meanwhile (it waited behind them; its own
    /// short run is among the gaps), JVM pauses, TCP holds, faults.
    fn client_only(&self, r: &Request, v: &mut Vec<Raw>) {
        let (a, z) = self.window(r);
        self.queueing(r, a, z, v);
        // pauses while no request ran (those inside one are its own)
        let covered: Vec<Iv> = self.lc_spans.iter().map(|s| s.0).collect();
        let paused: u64 = gaps(a, z, &covered)
            .iter()
            .map(|g| overlap_sum(&self.pause_ivs, g.start, g.end))
            .sum();
        if paused > 0 {
            v.push(Raw::new(
                CauseKind::JvmPause,
                paused,
                format!("a JVM pause covered {} of it", ms(paused)),
            ));
        }
        // holds on the LC thread's sockets it waited behind (its response
        // arrived after they ended)
        let mut held = 0u64;
        let mut worst: Option<&Hold> = None;
        for h in &self.holds {
            if (self.lc_socks.is_empty() || self.lc_socks.contains(&h.sock)) && h.iv.end <= z {
                let ov = h.iv.overlap(a, z);
                if ov > 0 {
                    held += ov;
                    if worst.is_none_or(|w| w.iv.end - w.iv.start < h.iv.end - h.iv.start) {
                        worst = Some(h);
                    }
                }
            }
        }
        if let Some(h) = worst {
            v.push(self.held(h, held, "a response ahead of it or its own"));
        }
        let mut tids = self.others();
        tids.extend(self.rec.target.lc_tid);
        self.faults_of(
            &tids,
            &[Iv { start: a, end: z }],
            "the service's threads stalled ",
            v,
        );
    }

    /// Wake-ups between the LC thread and the JIT's compiler threads, either
    /// way, inside `[a, b)`.
    fn jit_exchanges(&self, lc: u32, a: u64, b: u64) -> u64 {
        let count = |wakee: u32, from: &dyn Fn(u32) -> bool| -> u64 {
            self.tl.wakeups.get(&wakee).map_or(0, |v| {
                let i = v.partition_point(|w| w.t < a);
                v[i..]
                    .iter()
                    .take_while(|w| w.t < b)
                    .filter(|w| from(w.waker))
                    .count() as u64
            })
        };
        let by_jit = count(lc, &|w| self.compilers.contains(&w));
        let to_jit: u64 = self.compilers.iter().map(|&c| count(c, &|w| w == lc)).sum();
        by_jit + to_jit
    }

    /// Beside it, over its whole window: batch work on the batch lanes.
    fn beside(&self, r: &Request, v: &mut Vec<Raw>) {
        let (a, z) = self.window(r);
        let mut co: HashMap<u32, u64> = HashMap::new();
        for &cpu in &self.rec.target.batch_cpus {
            if let Some(c) = self.tl.cpus.get(cpu as usize) {
                for (t, ns) in c.who_ran(a, z) {
                    if self.foreign(t) {
                        *co.entry(t).or_default() += ns;
                    }
                }
            }
        }
        let corun: u64 = co.values().sum();
        if corun > 0 {
            let mut by: Vec<(u32, u64)> = co.into_iter().collect();
            by.sort_by_key(|x| std::cmp::Reverse(x.1));
            let mut x = Raw::new(
                CauseKind::BatchCorun,
                corun,
                format!(
                    "{} of other work on the batch lanes beside it, most by {}",
                    ms(corun),
                    self.thread(by[0].0)
                ),
            );
            x.who = by.iter().take(5).map(|(t, _)| self.thread(*t)).collect();
            v.push(x);
        }
    }
}
