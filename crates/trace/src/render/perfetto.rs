//! The trace as Chrome trace-event JSON, which ui.perfetto.dev (and
//! chrome://tracing) open: one track per thread, one per recorded CPU.
//!
//! - the LC thread's track: one slice per request (`request #id`, its
//!   latency and causes in the arguments), with its off-CPU periods
//!   (`preempted by …`, `asleep`) and page faults nested inside;
//! - every other thread: `running` slices while it is on a CPU;
//! - a `CPUs` process with one track per fully recorded CPU: who ran;
//! - wake-ups of the target's threads as flow arrows from the waker's
//!   running slice to the woken thread's next slice;
//! - JVM pauses, TCP holds and page faults of the target as async slices
//!   of its process; the peer's delayed ACKs as instants.
//!
//! Times are µs from the trace's start (`displayTimeUnit` ns).

use crate::pause::pauses_of;
use crate::record::{Event, TraceRecord};
use crate::report::TraceReport;
use crate::spans::ClientSpan;
use crate::study::timeline::{Period, State, Timeline};
use crate::study::{Request, holds, requests};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The pid of the `CPUs` pseudo-process; CPU `c`'s track is tid `CPU_PID + c`.
pub const CPU_PID: u32 = 2_000_000_000;

/// One trace event (the fields Chrome's format defines; absent ones
/// omitted).
#[derive(Debug, Clone, Serialize)]
pub struct TraceEvent {
    /// Phase: `X` complete, `M` metadata, `s`/`f` flow, `b`/`e` async,
    /// `i` instant.
    pub ph: &'static str,
    /// Name.
    pub name: String,
    /// Category.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub cat: &'static str,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Time, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    /// Duration (`X`), µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// Flow and async id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Flow end binding (`e`: the enclosing slice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bp: Option<&'static str>,
    /// Instant scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<&'static str>,
    /// Arguments.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub args: Value,
}

struct Out {
    t0: u64,
    ev: Vec<TraceEvent>,
    next_id: u64,
}

impl Out {
    fn us(&self, t: u64) -> f64 {
        (t.saturating_sub(self.t0)) as f64 / 1e3
    }
    fn meta(&mut self, name: &'static str, pid: u32, tid: u32, value: String) {
        self.ev.push(TraceEvent {
            ph: "M",
            name: name.into(),
            cat: "",
            pid,
            tid,
            ts: None,
            dur: None,
            id: None,
            bp: None,
            s: None,
            args: json!({ "name": value }),
        });
    }
    fn slice(
        &mut self,
        (pid, tid): (u32, u32),
        cat: &'static str,
        name: String,
        (a, b): (u64, u64),
        args: Value,
    ) {
        let ts = self.us(a);
        self.ev.push(TraceEvent {
            ph: "X",
            name,
            cat,
            pid,
            tid,
            ts: Some(ts),
            dur: Some((self.us(b) - ts).max(0.0)),
            id: None,
            bp: None,
            s: None,
            args,
        });
    }
    fn point(
        &mut self,
        (pid, tid): (u32, u32),
        ph: &'static str,
        cat: &'static str,
        name: String,
        t: u64,
        id: Option<u64>,
    ) {
        let ts = self.us(t);
        self.ev.push(TraceEvent {
            ph,
            name,
            cat,
            pid,
            tid,
            ts: Some(ts),
            dur: None,
            id,
            bp: None,
            s: (ph == "i").then_some("t"),
            args: Value::Null,
        });
    }
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

fn pid_of(rec: &TraceRecord, tid: u32) -> u32 {
    rec.threads.get(&tid).map_or(tid, |t| t.tgid)
}

fn thread_label(rec: &TraceRecord, tid: u32) -> String {
    format!("{} ({tid})", rec.comm(tid))
}

/// What the tracks are built from.
struct Src<'a> {
    rec: &'a TraceRecord,
    tl: Timeline,
    /// Threads named so far.
    named: HashSet<u32>,
    /// Process names.
    pids: BTreeMap<u32, String>,
}

impl Src<'_> {
    /// Names thread `tid` (and its process) once.
    fn name_thread(&mut self, o: &mut Out, tid: u32) {
        if tid == 0 || !self.named.insert(tid) {
            return;
        }
        let rec = self.rec;
        let pid = pid_of(rec, tid);
        self.pids.entry(pid).or_insert_with(|| {
            rec.threads.get(&pid).map_or_else(
                || format!("process {pid}"),
                |t| format!("{} ({pid})", t.comm),
            )
        });
        o.meta("thread_name", pid, tid, thread_label(rec, tid));
    }

    /// A `CPUs` process with one track per recorded CPU: who ran.
    fn cpu_tracks(&mut self, o: &mut Out) {
        let rec = self.rec;
        o.meta("process_name", CPU_PID, CPU_PID, "CPUs".into());
        for &cpu in &rec.lanes {
            let Some(c) = self.tl.cpus.get(cpu as usize) else {
                continue;
            };
            o.meta("thread_name", CPU_PID, CPU_PID + cpu, format!("CPU {cpu}"));
            let st = c.starts();
            for (k, &(t, tid)) in st.iter().enumerate() {
                if tid == 0 {
                    continue;
                }
                let end = st.get(k + 1).map_or(rec.end_ns, |x| x.0);
                let args = json!({ "tid": tid, "pid": pid_of(rec, tid) });
                o.slice(
                    (CPU_PID, CPU_PID + cpu),
                    "cpu",
                    thread_label(rec, tid),
                    (t, end),
                    args,
                );
            }
        }
    }

    /// `running` slices of every thread but the LC thread.
    fn thread_tracks(&mut self, o: &mut Out) {
        let lc = self.rec.target.lc_tid;
        let mut tids: Vec<u32> = self.tl.threads.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            if Some(tid) == lc {
                continue;
            }
            self.name_thread(o, tid);
            let pid = pid_of(self.rec, tid);
            for p in &self.tl.threads[&tid] {
                if let State::OnCpu(cpu) = p.state {
                    o.slice(
                        (pid, tid),
                        "sched",
                        "running".into(),
                        (p.iv.start, p.iv.end),
                        json!({ "cpu": cpu }),
                    );
                }
            }
        }
    }

    /// The LC thread's track: its requests, what happened inside them.
    /// Returns the request slices `(begin, end)` in time order.
    fn lc_track(
        &mut self,
        o: &mut Out,
        client: &[ClientSpan],
        report: &TraceReport,
    ) -> Vec<(u64, u64)> {
        let rec = self.rec;
        let Some(lc) = rec.target.lc_tid else {
            return Vec::new();
        };
        self.name_thread(o, lc);
        let pid = pid_of(rec, lc);
        let slow: HashMap<u64, &crate::report::RequestReport> =
            report.slow.iter().map(|s| (s.id, s)).collect();
        let mut out = Vec::new();
        let reqs: Vec<Request> = requests(rec, client);
        for r in reqs.iter().filter(|r| r.on_lc_line) {
            let (args, name) = match slow.get(&r.id) {
                Some(s) => (
                    json!({
                        "id": r.id,
                        "latency_ms": s.latency_ns as f64 / 1e6,
                        "top_cause": s.top.map(|k| k.label()),
                        "top_hazard": s.top_hazard.or(s.root_hazard).map(|k| k.label()),
                        "causes": s.causes.iter().map(|c| format!("{:.1}% {}: {}", c.share_pct, c.kind.label(), c.text)).collect::<Vec<_>>(),
                    }),
                    format!("request #{} (slow)", r.id),
                ),
                None => (json!({ "id": r.id }), format!("request #{}", r.id)),
            };
            o.slice((pid, lc), "request", name, (r.begin_ns, r.end_ns), args);
            out.push((r.begin_ns, r.end_ns));
            // children: off-CPU periods and faults, clipped, never overlapping
            let mut kids: Vec<(u64, u64, String)> = Vec::new();
            for p in self.tl.periods(lc, r.begin_ns, r.end_ns) {
                let (a, b) = (p.iv.start.max(r.begin_ns), p.iv.end.min(r.end_ns));
                match p.state {
                    _ if b <= a => {}
                    State::Runnable(_) => {
                        kids.push((a, b, format!("preempted by {}", rec.comm(p.successor))))
                    }
                    State::Blocked(_) => kids.push((a, b, "asleep".into())),
                    State::OnCpu(_) => {}
                }
            }
            for f in self.tl.faults_in(lc, r.begin_ns, r.end_ns) {
                let (a, b) = (f.t.max(r.begin_ns), (f.t + f.dur_ns).min(r.end_ns));
                if b > a {
                    let name = if f.huge {
                        "page fault (huge page)"
                    } else {
                        "page fault"
                    };
                    kids.push((a, b, name.into()));
                }
            }
            kids.sort_by_key(|k| k.0);
            let mut last_end = 0;
            for (a, b, name) in kids {
                if a >= last_end {
                    last_end = b;
                    o.slice((pid, lc), "request", name, (a, b), Value::Null);
                }
            }
        }
        out
    }

    /// Wake-ups of the target's threads: flows from the waker's running
    /// slice to the woken thread's next slice.
    fn wakeups(&mut self, o: &mut Out, lc_slices: &[(u64, u64)]) {
        let rec = self.rec;
        let lc = rec.target.lc_tid;
        for e in &rec.events {
            let Event::Wakeup(w) = e else { continue };
            if w.waker == 0 || !rec.is_target(w.wakee) || Some(w.waker) == lc {
                continue;
            }
            let running = self
                .tl
                .periods(w.waker, w.t, w.t + 1)
                .iter()
                .any(|p: &Period| {
                    matches!(p.state, State::OnCpu(_)) && p.iv.start <= w.t && w.t < p.iv.end
                });
            if !running {
                continue;
            }
            let land = if Some(w.wakee) == lc {
                let i = lc_slices.partition_point(|s| s.0 < w.t);
                lc_slices
                    .get(i)
                    .map(|s| s.0)
                    .filter(|&b| b < w.t + 50_000_000)
            } else {
                self.tl
                    .periods(w.wakee, w.t, u64::MAX)
                    .iter()
                    .find(|p| matches!(p.state, State::OnCpu(_)) && p.iv.start >= w.t)
                    .map(|p| p.iv.start)
            };
            let Some(at) = land else { continue };
            self.name_thread(o, w.waker);
            let id = o.id();
            let (from, to) = (
                (pid_of(rec, w.waker), w.waker),
                (pid_of(rec, w.wakee), w.wakee),
            );
            o.point(from, "s", "wakeup", "wake-up".into(), w.t, Some(id));
            o.point(to, "f", "wakeup", "wake-up".into(), at, Some(id));
        }
    }

    /// JVM pauses, TCP holds and the target's faults as async slices; the
    /// peer's delayed ACKs as instants.
    fn asyncs(&mut self, o: &mut Out) {
        let rec = self.rec;
        let main = rec.target.tgids.first().copied().unwrap_or(0);
        let span = |o: &mut Out, at: (u32, u32), cat: &'static str, name: &str, a: u64, b: u64| {
            let id = o.id();
            o.point(at, "b", cat, name.into(), a, Some(id));
            o.point(at, "e", cat, name.into(), b, Some(id));
        };
        for p in pauses_of(rec) {
            span(o, (main, main), "jvm", "JVM pause", p.start_ns, p.end_ns);
        }
        for h in holds(rec) {
            let name = if h.nagle {
                "TCP held (Nagle)"
            } else {
                "TCP held"
            };
            span(
                o,
                (pid_of(rec, h.tid), h.tid),
                "tcp",
                name,
                h.iv.start,
                h.iv.end,
            );
        }
        for e in &rec.events {
            match e {
                Event::Fault(f) if f.dur_ns >= 10_000 && rec.is_target(f.tid) => {
                    let name = if f.huge {
                        "page fault (huge page)"
                    } else {
                        "page fault"
                    };
                    span(
                        o,
                        (pid_of(rec, f.tid), f.tid),
                        "fault",
                        name,
                        f.t,
                        f.t + f.dur_ns,
                    );
                }
                Event::Tcp(t) if t.kind == crate::record::TcpKind::DelayedAck => {
                    self.name_thread(o, t.tid);
                    o.point(
                        (pid_of(rec, t.tid), t.tid),
                        "i",
                        "tcp",
                        "peer delayed its ACK".into(),
                        t.t,
                        None,
                    );
                }
                _ => {}
            }
        }
    }
}

/// Builds the trace events of `rec` with the requests and causes of
/// `report` (its slow requests carry their causes in their arguments).
pub fn events(rec: &TraceRecord, client: &[ClientSpan], report: &TraceReport) -> Vec<TraceEvent> {
    let mut o = Out {
        t0: rec.start_ns,
        ev: Vec::new(),
        next_id: 0,
    };
    let mut src = Src {
        rec,
        tl: Timeline::build(rec),
        named: HashSet::new(),
        pids: BTreeMap::new(),
    };
    for (i, &p) in rec.target.tgids.iter().enumerate() {
        let cmd = rec.target.cmdlines.get(i).cloned().unwrap_or_default();
        src.pids.insert(
            p,
            format!("target {p}: {}", cmd.chars().take(120).collect::<String>()),
        );
    }
    src.cpu_tracks(&mut o);
    src.thread_tracks(&mut o);
    let lc_slices = src.lc_track(&mut o, client, report);
    src.wakeups(&mut o, &lc_slices);
    src.asyncs(&mut o);
    for (pid, name) in std::mem::take(&mut src.pids) {
        o.meta("process_name", pid, pid, name);
    }
    // metadata first, then by time; a parent before the slices it holds
    o.ev.sort_by(|a, b| {
        let key = |e: &TraceEvent| (e.ph != "M", e.ts.unwrap_or(0.0), -e.dur.unwrap_or(0.0));
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0)
            .then(ka.1.total_cmp(&kb.1))
            .then(ka.2.total_cmp(&kb.2))
    });
    o.ev
}

/// Writes the trace events as a Chrome trace-event JSON file.
pub fn write(path: &std::path::Path, events: &[TraceEvent]) -> Result<(), crate::TraceError> {
    #[derive(Serialize)]
    struct File<'a> {
        #[serde(rename = "traceEvents")]
        trace_events: &'a [TraceEvent],
        #[serde(rename = "displayTimeUnit")]
        display_time_unit: &'static str,
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| crate::TraceError::io(dir, e))?;
    }
    let f = std::fs::File::create(path).map_err(|e| crate::TraceError::io(path, e))?;
    let mut w = std::io::BufWriter::new(f);
    serde_json::to_writer(
        &mut w,
        &File {
            trace_events: events,
            display_time_unit: "ns",
        },
    )
    .map_err(|e| crate::TraceError::Parse {
        path: path.into(),
        detail: e.to_string(),
    })?;
    std::io::Write::flush(&mut w).map_err(|e| crate::TraceError::io(path, e))
}

/// What [`check`] found wrong with a trace-event file, if anything.
pub fn check(json: &Value) -> Result<CheckSummary, String> {
    let evs = json
        .get("traceEvents")
        .and_then(Value::as_array)
        .ok_or("no traceEvents array")?;
    let mut sum = CheckSummary::default();
    // per track: the stack of open slice ends, the last start
    let mut tracks: HashMap<(u64, u64), (Vec<f64>, f64)> = HashMap::new();
    // flow id → (start time, end time)
    let mut flows: HashMap<u64, (Option<f64>, Option<f64>)> = HashMap::new();
    let mut asyncs: HashMap<(String, u64), (u32, f64)> = HashMap::new();
    const EPS: f64 = 1e-6;
    for (i, e) in evs.iter().enumerate() {
        let ph = e
            .get("ph")
            .and_then(Value::as_str)
            .ok_or(format!("event {i}: no ph"))?;
        let pid = e
            .get("pid")
            .and_then(Value::as_u64)
            .ok_or(format!("event {i}: no pid"))?;
        let tid = e
            .get("tid")
            .and_then(Value::as_u64)
            .ok_or(format!("event {i}: no tid"))?;
        e.get("name")
            .and_then(Value::as_str)
            .ok_or(format!("event {i}: no name"))?;
        if ph == "M" {
            sum.metadata += 1;
            continue;
        }
        let ts = e
            .get("ts")
            .and_then(Value::as_f64)
            .ok_or(format!("event {i}: no ts"))?;
        if !(ts >= 0.0 && ts.is_finite()) {
            return Err(format!("event {i}: ts {ts}"));
        }
        match ph {
            "X" => {
                let dur = e
                    .get("dur")
                    .and_then(Value::as_f64)
                    .ok_or(format!("event {i}: X without dur"))?;
                if dur < 0.0 {
                    return Err(format!("event {i}: negative dur"));
                }
                let (stack, last) = tracks.entry((pid, tid)).or_insert((Vec::new(), 0.0));
                if ts + EPS < *last {
                    return Err(format!(
                        "event {i}: ts {ts} before the track's previous slice at {last}"
                    ));
                }
                *last = ts;
                while stack.last().is_some_and(|&end| end <= ts + EPS) {
                    stack.pop();
                }
                if let Some(&end) = stack.last() {
                    if ts + dur > end + EPS {
                        return Err(format!(
                            "event {i} ({}): [{ts}, {}] overlaps its parent ending at {end} on track {pid}/{tid}",
                            e["name"],
                            ts + dur
                        ));
                    }
                }
                stack.push(ts + dur);
                sum.slices += 1;
            }
            "s" | "f" => {
                let id = e
                    .get("id")
                    .and_then(Value::as_u64)
                    .ok_or(format!("event {i}: flow without id"))?;
                let f = flows.entry(id).or_default();
                if ph == "s" {
                    if f.0.replace(ts).is_some() {
                        return Err(format!("flow {id} starts twice"));
                    }
                    // it must start inside a slice of its track
                    let inside = tracks
                        .get(&(pid, tid))
                        .is_some_and(|(st, _)| st.last().is_some_and(|&end| end + EPS >= ts));
                    if !inside {
                        return Err(format!("flow {id} starts outside any slice of {pid}/{tid}"));
                    }
                } else if f.1.replace(ts).is_some() {
                    return Err(format!("flow {id} ends twice"));
                }
            }
            "b" | "e" => {
                let id = e
                    .get("id")
                    .and_then(Value::as_u64)
                    .ok_or(format!("event {i}: async without id"))?;
                let cat = e
                    .get("cat")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let a = asyncs.entry((cat, id)).or_insert((0, 0.0));
                if ph == "b" {
                    a.0 += 1;
                    a.1 = ts;
                } else {
                    if a.0 != 1 || ts + EPS < a.1 {
                        return Err(format!("async {id}: end without its begin, or before it"));
                    }
                    a.0 += 1;
                    sum.asyncs += 1;
                }
            }
            "i" => sum.instants += 1,
            other => return Err(format!("event {i}: unexpected ph {other}")),
        }
    }
    for (id, (s, f)) in flows {
        match (s, f) {
            (Some(ts), Some(tf)) if tf + EPS >= ts => sum.flows += 1,
            _ => return Err(format!("flow {id} is not one start followed by one end")),
        }
    }
    if let Some(((c, id), _)) = asyncs.iter().find(|(_, v)| v.0 != 2) {
        return Err(format!("async {c}/{id} is not closed"));
    }
    Ok(sum)
}

/// Counts of a checked trace-event file.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CheckSummary {
    /// Metadata records.
    pub metadata: u64,
    /// Complete slices.
    pub slices: u64,
    /// Paired flows.
    pub flows: u64,
    /// Closed async slices.
    pub asyncs: u64,
    /// Instants.
    pub instants: u64,
}
