//! The **latency probe** (`--latency-probe KIND@HOST:PORT`): advise's own
//! requests to the LC, a few hundred a second beside its real load, in
//! the LC's protocol — `redis` / `memcached` (the harness's RESP and line
//! presets, `GET` of a random key of its key space) or `wire` (elfen's LC
//! wire protocol, a work request of `--probe-work-us`). Open loop like the
//! harness's generator, on the load kit's open-loop connection
//! (`elfen_load::conn`): Poisson send times drawn ahead, each request sent
//! at its intended time (at once if late), never waiting for answers, and
//! its latency taken from the **intended** send time, so a stall of the
//! LC shows up for every request due during it. Requests still unanswered
//! when a window is read count with the age they reached (once).
//!
//! A sender and a receiver thread on one TCP connection, pinned to the
//! batch lanes at SCHED_FIFO where permitted (as the harness's generator),
//! so batch work at the LC's priority does not delay the probe itself.

use crate::record::LatencyWindow;
use anyhow::{Context, bail};
use elfen_cmd::proc::SchedClass;
use elfen_load::conn::{Answer, Connection, Drive, Place, Protocol, Receive};
use elfen_load::kv::KvSpec;
use elfen_load::text::TextProtocol;
use elfen_load::{mono_ns, new_histogram, poisson_arrivals};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The protocol the probe speaks.
#[derive(Debug, Clone)]
pub enum ProbeProtocol {
    /// A key-value service's own text protocol (a preset of the harness).
    Text(Arc<TextProtocol>),
    /// elfen's LC wire protocol: work requests of this many ns.
    Wire(u64),
}

/// A parsed `--latency-probe`.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    /// What it was given as.
    pub text: String,
    /// The protocol.
    pub protocol: ProbeProtocol,
    /// Where the LC listens.
    pub addr: SocketAddr,
}

/// Parses `KIND@HOST:PORT` (`redis@127.0.0.1:6379`, `memcached@…`,
/// `wire@…`).
pub fn parse_spec(s: &str, work_us: f64) -> anyhow::Result<ProbeSpec> {
    let Some((kind, addr)) = s.split_once('@') else {
        bail!("--latency-probe {s:?}: expected KIND@HOST:PORT (KIND: redis, memcached or wire)");
    };
    let addr: SocketAddr = addr
        .parse()
        .with_context(|| format!("--latency-probe {s:?}: {addr:?} is not HOST:PORT"))?;
    let text = |kv: KvSpec| -> anyhow::Result<ProbeProtocol> {
        Ok(ProbeProtocol::Text(Arc::new(
            TextProtocol::new(&kv).map_err(|e| anyhow::anyhow!("{e}"))?,
        )))
    };
    let protocol = match kind {
        "redis" => text(KvSpec::redis())?,
        "memcached" => text(KvSpec::memcached())?,
        "wire" => {
            if !(work_us.is_finite() && work_us > 0.0) {
                bail!("--probe-work-us {work_us}: must be > 0");
            }
            ProbeProtocol::Wire((work_us * 1e3).round() as u64)
        }
        other => bail!("--latency-probe {s:?}: unknown kind {other:?} (redis, memcached or wire)"),
    };
    Ok(ProbeSpec {
        text: s.to_string(),
        protocol,
        addr,
    })
}

/// One request sent and not yet answered.
#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u64,
    intended_ns: u64,
    /// Counted in a window already, with the age it had then.
    in_window: bool,
}

/// What the two threads share.
#[derive(Debug)]
struct Shared {
    pending: Mutex<VecDeque<Pending>>,
    window: Mutex<Histogram<u64>>,
    watch: Mutex<Histogram<u64>>,
    errors: AtomicU64,
    failed: Mutex<Option<String>>,
    quit: AtomicBool,
}

/// A running probe; [`LatencyProbe::stop`] (or drop) ends it.
#[derive(Debug)]
pub struct LatencyProbe {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// How its threads run (class, CPUs), in words.
    pub placement: String,
}

/// Most requests in flight: past it, sends wait (the LC has stalled; the
/// age of the oldest shows it).
const MAX_PENDING: usize = 10_000;

fn window_of(h: &Histogram<u64>, errors: u64) -> LatencyWindow {
    let us = |ns: u64| ns as f64 / 1e3;
    LatencyWindow {
        samples: h.len(),
        errors,
        p50_us: if h.is_empty() {
            0.0
        } else {
            us(h.value_at_quantile(0.5))
        },
        p99_us: if h.is_empty() {
            0.0
        } else {
            us(h.value_at_quantile(0.99))
        },
        max_us: us(h.max()),
    }
}

impl LatencyProbe {
    /// Connects and starts sending `rps` requests a second; its threads
    /// run on `cpus` at `sched`.
    pub fn start(
        spec: &ProbeSpec,
        rps: f64,
        cpus: &[u32],
        sched: SchedClass,
    ) -> anyhow::Result<LatencyProbe> {
        if !(rps.is_finite() && rps > 0.0) {
            bail!("--probe-rps {rps}: must be > 0");
        }
        let conn = Connection::open_within(spec.addr, Duration::from_secs(2))
            .with_context(|| format!("latency probe: connecting to {}", spec.addr))?;
        let shared = Arc::new(Shared {
            pending: Mutex::new(VecDeque::new()),
            window: Mutex::new(new_histogram()),
            watch: Mutex::new(new_histogram()),
            errors: AtomicU64::new(0),
            failed: Mutex::new(None),
            quit: AtomicBool::new(false),
        });
        let place = Place {
            cpus: cpus.to_vec(),
            sched,
        };
        let s = Arc::clone(&shared);
        let probe = spec.protocol.clone();
        let runner = std::thread::Builder::new()
            .name("elfen-probe".into())
            .spawn(move || run(conn, &probe, rps, &place, &s))
            .context("starting the probe")?;
        Ok(LatencyProbe {
            shared,
            threads: vec![runner],
            placement: format!(
                "{} on cpu {}",
                sched.name(),
                elfen_topo::format_cpu_list(cpus)
            ),
        })
    }

    /// Why it stopped working, if it did.
    pub fn failed(&self) -> Option<String> {
        self.shared.failed.lock().ok().and_then(|f| f.clone())
    }

    /// The latencies since the last call (the window's), unanswered
    /// requests with the age they reached (each counted in one window).
    pub fn take_window(&self) -> LatencyWindow {
        let now = mono_ns();
        let mut h = std::mem::replace(
            &mut *self.shared.window.lock().expect("window"),
            new_histogram(),
        );
        for p in self.shared.pending.lock().expect("pending").iter_mut() {
            if !p.in_window {
                h.saturating_record(now.saturating_sub(p.intended_ns).max(1));
                p.in_window = true;
            }
        }
        let errors = self.shared.errors.swap(0, Ordering::Relaxed);
        window_of(&h, errors)
    }

    /// The latencies since the last look (for the stop rule), unanswered
    /// requests with their age now.
    pub fn take_watch(&self) -> LatencyWindow {
        let now = mono_ns();
        let mut h = std::mem::replace(
            &mut *self.shared.watch.lock().expect("watch"),
            new_histogram(),
        );
        for p in self.shared.pending.lock().expect("pending").iter() {
            h.saturating_record(now.saturating_sub(p.intended_ns).max(1));
        }
        window_of(&h, 0)
    }

    /// Forgets everything recorded so far (a window's start).
    pub fn reset(&self) {
        let _ = self.take_window();
        let _ = self.take_watch();
    }

    /// Stops both threads.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.quit.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for LatencyProbe {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The probe's load until quit: Poisson send times at `rps` from now,
/// each request sent at its intended time (at once if late; held back
/// while [`MAX_PENDING`] are unanswered), answers matched to the pending
/// requests; a failure of the connection is recorded as it happens.
fn run(conn: Connection, probe: &ProbeProtocol, rps: f64, place: &Place, s: &Arc<Shared>) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x00AD_015E);
    let mut keys_rng = rand::rngs::SmallRng::seed_from_u64(0x00AD_015E ^ 0x4B45_5953);
    let (protocol, work_ns, keys) = match probe {
        ProbeProtocol::Text(t) => (Protocol::Text(Arc::clone(t)), 0, t.keys.max(1)),
        ProbeProtocol::Wire(ns) => (Protocol::Wire, *ns, 1),
    };
    let request = |id: u64, due: u64, _now: u64, out: &mut Vec<u8>| {
        if s.pending.lock().map(|p| p.len()).unwrap_or(0) >= MAX_PENDING {
            return false;
        }
        protocol.encode(id, work_ns, &[], keys_rng.random_range(0..keys), out);
        s.pending.lock().expect("pending").push_back(Pending {
            id,
            intended_ns: due,
            in_window: false,
        });
        true
    };
    let drive = Drive {
        t0_ns: mono_ns(),
        offsets: poisson_arrivals(rps, &mut rng),
        last_due_ns: 0,
        drain_ns: 0,
        place,
        name: Some("elfen-probe"),
    };
    let mut rx = Answers {
        shared: s,
        by_id: matches!(probe, ProbeProtocol::Wire(_)),
    };
    let r = conn.drive(&protocol, drive, request, &mut rx, &s.quit, |_| {});
    if let Some(e) = r.send_error.filter(|_| !s.quit.load(Ordering::Relaxed)) {
        s.fail(format!("latency probe: sending: {e}"));
    }
}

/// The probe's receiver: each answer to the pending request it answers.
struct Answers<'a> {
    shared: &'a Shared,
    /// The protocol carries ids (wire); otherwise answers come in order.
    by_id: bool,
}

impl Receive for Answers<'_> {
    fn answered(&mut self, a: &Answer, now_ns: u64) {
        self.shared
            .answered(self.by_id.then_some(a.id), !a.ok, now_ns);
    }
    fn ended(&mut self, closed: bool, protocol_error: Option<&str>) {
        match protocol_error {
            Some(e) => self
                .shared
                .fail(format!("latency probe: not the LC's protocol: {e}")),
            None if closed => self
                .shared
                .fail("latency probe: the LC closed the connection".into()),
            None => {}
        }
    }
}

impl Shared {
    /// Records why the probe stopped working.
    fn fail(&self, why: String) {
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }
    /// A response arrived at `now`: the oldest pending request (text
    /// protocols answer in order), or the one with its id (wire).
    fn answered(&self, id: Option<u64>, error: bool, now: u64) {
        let mut pending = self.pending.lock().expect("pending");
        let p = match id {
            None => pending.pop_front(),
            Some(id) => {
                // requests before it were lost
                while pending.front().is_some_and(|p| p.id != id) {
                    pending.pop_front();
                    self.errors.fetch_add(1, Ordering::Relaxed);
                }
                pending.pop_front()
            }
        };
        drop(pending);
        let Some(p) = p else {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let lat = now.saturating_sub(p.intended_ns).max(1);
        if !p.in_window {
            self.window.lock().expect("window").saturating_record(lat);
        }
        self.watch.lock().expect("watch").saturating_record(lat);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_or_say_what_is_wrong() {
        let s = parse_spec("redis@127.0.0.1:6379", 20.0).unwrap();
        assert!(matches!(s.protocol, ProbeProtocol::Text(_)));
        assert_eq!(s.addr.port(), 6379);
        let s = parse_spec("wire@127.0.0.1:7000", 25.0).unwrap();
        assert!(matches!(s.protocol, ProbeProtocol::Wire(25_000)));
        for bad in [
            "redis",
            "http@127.0.0.1:80",
            "redis@localhost",
            "wire@1.2.3.4:5",
        ] {
            let e = parse_spec(bad, if bad.starts_with("wire") { 0.0 } else { 1.0 });
            assert!(e.is_err(), "{bad}");
        }
        let e = parse_spec("http@127.0.0.1:80", 1.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("http") && e.contains("redis"), "{e}");
    }

    #[test]
    fn answers_in_order_and_by_id_with_lost_requests_counted() {
        let s = Shared {
            pending: Mutex::new(
                (0..4)
                    .map(|i| Pending {
                        id: i,
                        intended_ns: 1_000 * i,
                        in_window: i == 0,
                    })
                    .collect(),
            ),
            window: Mutex::new(new_histogram()),
            watch: Mutex::new(new_histogram()),
            errors: AtomicU64::new(0),
            failed: Mutex::new(None),
            quit: AtomicBool::new(false),
        };
        // in order: request 0 (already counted in a window: watch only)
        s.answered(None, false, 10_000);
        assert_eq!(s.window.lock().unwrap().len(), 0);
        assert_eq!(s.watch.lock().unwrap().len(), 1);
        // by id: request 3 answers, 1 and 2 were lost
        s.answered(Some(3), false, 13_000);
        assert_eq!(s.errors.load(Ordering::Relaxed), 2);
        let w = window_of(&s.window.lock().unwrap(), 0);
        assert_eq!(w.samples, 1);
        assert!((w.p50_us - 10.0).abs() < 0.1, "{w:?}");
        // an answer nobody waits for is an error
        s.answered(None, false, 20_000);
        assert_eq!(s.errors.load(Ordering::Relaxed), 3);
    }
}
