//! **Batch API**: a batch thread borrows its batch lane while the partner
//! request lane's policy allows it.
//!
//! - [`BatchThread::attach`]: validates everything (lane role, pairing,
//!   policy id, nap backend), pins the thread to the lane's CPU, and counts
//!   itself in the batch line's `attached`.
//! - [`BatchThread::check`] — the **check**, the fast path: one relaxed load
//!   of the request lane's `state` and one compare with [`expected`]. Call
//!   it often (every loop iteration, every function entry).
//! - [`BatchThread::slow_path`] — runs only when the compare fails: header
//!   line 1 (the kill switch and its mode, the heartbeat fail-safe:
//!   `elfen_shm::batch_mode`), configuration changes, the **policy**
//!   (`elfen-policy`), and on `Nap` a **nap** (`crate::nap`) until the lane
//!   changes, then again until the policy says `Run`. It never allocates,
//!   logs or fails.
//!
//! While a budget policy co-runs (`Policy::time_sensitive`) the expected
//! value is `state::NEVER`, so every check takes the slow path: the budget
//! expires with time alone.
//!
//! [`expected`]: BatchThread::expected

use elfen_policy::{Decision, Observation, Policy, PolicyConfig, PolicyKind};
use elfen_shm::layout::{BatchLine, ControllerLine, Header, LcLine};
use elfen_shm::{
    Access, BatchMode, Clock, ControllerConfig, Page, batch_mode, futex_word, role, state,
};
use elfen_topo::PinGuard;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::time::Duration;

use crate::error::{RuntimeError, Side};
use crate::ipc::IpcSampler;
use crate::nap::{NapBackend, NapChoice, Napper, Watch, machine_features};

/// How a batch thread attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOptions {
    /// Pin the calling thread to the batch lane's CPU (default `true`); the
    /// previous affinity is restored when the thread detaches.
    pub pin: bool,
    /// The nap backend; `None` (default) takes the controller line's `nap`.
    pub nap: Option<NapChoice>,
    /// How long one futex nap blocks before re-reading the control word
    /// (default 10 ms, clamped to 100 µs..=1 s). Longer delays how soon a
    /// sleeping thread obeys the kill switch; tests lengthen it to make a
    /// lost wakeup visible.
    pub futex_timeout: Duration,
}

/// Default [`BatchOptions::futex_timeout`].
pub const DEFAULT_FUTEX_TIMEOUT: Duration = Duration::from_millis(10);

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            pin: true,
            nap: None,
            futex_timeout: DEFAULT_FUTEX_TIMEOUT,
        }
    }
}

impl BatchOptions {
    /// Sets [`BatchOptions::pin`].
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }
    /// Sets [`BatchOptions::nap`].
    pub fn nap(mut self, nap: NapChoice) -> Self {
        self.nap = Some(nap);
        self
    }
    /// Sets [`BatchOptions::futex_timeout`].
    pub fn futex_timeout(mut self, t: Duration) -> Self {
        self.futex_timeout = t;
        self
    }
}

/// A snapshot of one batch thread's accounting (for benchmarks; the batch
/// line holds the per-lane sums).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Checks that took the slow path.
    pub slow_checks: u64,
    /// Naps taken.
    pub naps: u64,
    /// Naps ended.
    pub wakes: u64,
    /// Time spent running batch code (between naps), ns.
    pub run_ns: u64,
    /// Of `run_ns`, time run while the request lane was busy (co-running), ns.
    pub corun_ns: u64,
    /// Time spent napping, ns.
    pub nap_ns: u64,
    /// Controller-line rewrites refused (unknown policy or nap id, invalid
    /// parameters, unavailable backend); the thread kept its configuration.
    pub config_rejects: u64,
}

/// Local counters, in page-clock ticks.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    slow_checks: u64,
    naps: u64,
    wakes: u64,
    run_ticks: u64,
    corun_ticks: u64,
    nap_ticks: u64,
    config_rejects: u64,
}

/// Where the nap choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NapSource {
    Options,
    Controller,
}

/// A batch thread attached to a batch lane.
///
/// Not `Send`: it pins, and accounts for, the thread that attached it.
/// Detaches on drop: `attached` decremented, its run time flushed to the
/// batch line, the thread's affinity restored.
///
/// `repr(C)` keeps the two fields the check reads first, in one cache line.
#[repr(C)]
pub struct BatchThread {
    // ---- the check reads only these two ----
    /// The partner request lane's `state`.
    watch: *const AtomicU64,
    /// The `state` value the thread last acted on (`NEVER` while a budget runs).
    expected: u64,
    // ---- the slow path ----
    policy: Policy,
    clock: Clock,
    lc: *const LcLine,
    line: *const BatchLine,
    ctl: *const ControllerLine,
    header: *const Header,
    config_seq: u32,
    nap_id: u32,
    napper: Napper,
    nap_why: &'static str,
    ipc: Option<IpcSampler>,
    /// Page clock when the thread last started running batch code.
    run_since: u64,
    /// Page clock when the current co-running interval started (0 = none).
    corun_since: u64,
    /// Slow checks not yet added to the batch line.
    unflushed_slow: u64,
    counters: Counters,
    /// Page clock past which a spinning nap ends the slow path (`None`:
    /// naps end only when the lane's state says so).
    spin_deadline: Option<u64>,
    /// Whether the last slow path ended at `spin_deadline`.
    cut: bool,
    // ---- identity ----
    lane: u32,
    request_lane: u32,
    cpu: u32,
    request_cpu: u32,
    nap_source: NapSource,
    ipc_note: Option<String>,
    page: Arc<Page>,
    pin: Option<PinGuard>,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for BatchThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchThread")
            .field("page", &self.page.path())
            .field("lane", &self.lane)
            .field("request_lane", &self.request_lane)
            .field("policy", &self.policy.config().kind)
            .field("nap", &self.napper.backend())
            .field("expected", &self.expected)
            .finish()
    }
}

/// The policy a controller line describes, if its id is known.
fn policy_config(cfg: &ControllerConfig) -> Option<PolicyConfig> {
    let kind = PolicyKind::from_id(cfg.policy)?;
    Some(PolicyConfig {
        kind,
        budget_ns: cfg.budget_ns,
        ref_ipc: (cfg.ref_ipc_milli > 0).then(|| f64::from(cfg.ref_ipc_milli) / 1000.0),
        ..PolicyConfig::simple(kind)
    })
}

impl BatchThread {
    /// Attaches the page at `path` (see `elfen_shm::page_path` for names)
    /// with [`Access::Batch`] and then [`BatchThread::attach`]es to `lane`.
    pub fn open(
        path: impl AsRef<Path>,
        lane: u32,
        opts: BatchOptions,
    ) -> Result<BatchThread, RuntimeError> {
        BatchThread::attach(Arc::new(Page::attach(path, Access::Batch)?), lane, opts)
    }

    /// Attaches the calling thread to batch lane `lane`.
    ///
    /// The page must be attached with [`Access::Batch`] or
    /// [`Access::Controller`] (write access to the batch segment). Reads the
    /// lane's controller line (policy, budget, nap backend, hybrid bound,
    /// reference IPC), resolves the nap backend against this machine, opens
    /// the request lane's IPC counters for dynamic refresh, pins the thread
    /// (unless `opts.pin` is false) and increments `attached`. On any error
    /// the thread's affinity and the page are as before.
    pub fn attach(
        page: Arc<Page>,
        lane: u32,
        opts: BatchOptions,
    ) -> Result<BatchThread, RuntimeError> {
        let path = || page.path().to_path_buf();
        let cfg = crate::error::attach_check(&page, lane, Side::Batch)?;
        let &[request_lane] = cfg.partners() else {
            return Err(RuntimeError::BadLane {
                path: path(),
                lane,
                what: format!(
                    "a batch lane watches exactly one request lane, its controller line lists {:?}",
                    cfg.partners()
                ),
            });
        };
        let rcfg = crate::error::read_config(&page, request_lane)
            .ok()
            .filter(|r| r.role == role::REQUEST)
            .ok_or_else(|| RuntimeError::BadLane {
                path: path(),
                lane,
                what: format!(
                    "its partner, lane {request_lane}, is not a request lane of the page"
                ),
            })?;
        let pcfg = policy_config(&cfg).ok_or_else(|| RuntimeError::UnknownPolicy {
            path: path(),
            lane,
            id: cfg.policy,
        })?;
        let policy = Policy::new(pcfg).map_err(|source| RuntimeError::BadPolicy {
            path: path(),
            lane,
            source,
        })?;
        let (choice, nap_source) = match opts.nap {
            Some(c) => (c, NapSource::Options),
            None => (
                NapChoice::from_id(cfg.nap).ok_or_else(|| RuntimeError::UnknownNap {
                    path: path(),
                    lane,
                    id: cfg.nap,
                })?,
                NapSource::Controller,
            ),
        };
        let (backend, nap_why) = choice.resolve(machine_features())?;
        let clock = page.clock();
        let napper = Napper::new(backend, cfg.hybrid_spin_ns, opts.futex_timeout, clock);
        let (ipc, ipc_note) = if pcfg.kind == PolicyKind::DynamicRefresh {
            match IpcSampler::open(rcfg.cpu, clock) {
                Ok(s) => (
                    Some(s),
                    Some(format!(
                        "hardware counters: sampling request lane cpu {}'s IPC every {} µs",
                        rcfg.cpu,
                        crate::ipc::SAMPLE_EVERY_NS / 1000
                    )),
                ),
                Err(note) => (None, Some(note)),
            }
        } else {
            (None, None)
        };
        // Pinning is the last step that can fail: the guard restores the
        // affinity if anything after it went wrong, and nothing does.
        let pin = if opts.pin {
            Some(PinGuard::new(cfg.cpu).map_err(|source| RuntimeError::Pin {
                path: path(),
                lane,
                cpu: cfg.cpu,
                source,
            })?)
        } else {
            None
        };
        let lc = page.lc(request_lane)?;
        let line = page.batch(lane)?;
        let ctl = page.controller(lane)?;
        line.attached.fetch_add(1, AcqRel);
        let now = clock.now();
        Ok(BatchThread {
            watch: &lc.state,
            // The first check always runs the policy.
            expected: state::NEVER,
            policy,
            clock,
            lc,
            line,
            ctl,
            header: page.header(),
            config_seq: cfg.seq,
            nap_id: cfg.nap,
            napper,
            nap_why,
            ipc,
            run_since: now,
            corun_since: 0,
            unflushed_slow: 0,
            counters: Counters::default(),
            spin_deadline: None,
            cut: false,
            lane,
            request_lane,
            cpu: cfg.cpu,
            request_cpu: rcfg.cpu,
            nap_source,
            ipc_note,
            pin,
            page,
            _not_send: PhantomData,
        })
    }

    /// **The check** (fast path): one relaxed load of the partner request
    /// lane's `state` and one compare with the value last acted on; only a
    /// difference calls [`BatchThread::slow_path`]. No syscall, no
    /// allocation, no thread-local storage.
    #[inline(always)]
    pub fn check(&mut self) {
        // SAFETY: `watch` points into `self.page`'s mapping, alive as long as self.
        if unsafe { (*self.watch).load(Relaxed) } != self.expected {
            self.slow_path();
        }
    }

    /// The word [`BatchThread::check`] loads (the partner request lane's
    /// `state`), for an external fast path such as `elfen.h`'s: valid while
    /// this thread is attached. Load it relaxed (a plain aligned 64-bit load).
    pub fn watch_word(&self) -> *const AtomicU64 {
        self.watch
    }

    /// The value the fast path compares the watch word against. Changes
    /// only inside [`BatchThread::slow_path`]: an external fast path must
    /// re-read it after every slow path call.
    #[inline(always)]
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// **The slow path**: runs the policy and naps until it says `Run`.
    ///
    /// Each round: a changed controller `config_seq` (re-read the line,
    /// reconfigure the policy/nap backend); header line 1, folded by
    /// `elfen_shm::batch_mode` — kill switch `KILL` (nap until the control
    /// word or `state` changes), a stale heartbeat (nap until a beat, the
    /// control word or `state` changes), `UNMANAGED` (run without asking the
    /// policy); otherwise an observation (busy, queue length, begin sequence
    /// as the running request, now in ns, the LC IPC where counters exist)
    /// and the policy step. `Run` returns (with `expected` = the observed
    /// `state`, or `NEVER` while a budget runs); `Nap` naps on the observed
    /// `state` and goes round again. Never allocates, logs or fails.
    #[cold]
    #[inline(never)]
    pub fn slow_path(&mut self) {
        self.counters.slow_checks += 1;
        self.unflushed_slow += 1;
        self.cut = false;
        loop {
            // An odd seq is a rewrite in progress: keep the old
            // configuration this round rather than wait for the controller.
            let seq = self.ctl().config_seq.load(Relaxed);
            if seq != self.config_seq && seq % 2 == 0 {
                self.reload_config();
            }
            // SAFETY: as in `check`.
            let s = unsafe { &*self.watch }.load(Acquire);
            // SAFETY: points into self.page's header.
            let h = unsafe { &*self.header };
            let control_word = h.control.load(Acquire);
            let now = self.clock.now();
            // The heartbeat is read only where the fail-safe is on.
            let stale_ns = h.heartbeat_stale_ns.load(Relaxed);
            let beat = if stale_ns != 0 {
                h.heartbeat.load(Relaxed)
            } else {
                0
            };
            match batch_mode(control_word, beat, stale_ns, now, self.clock) {
                BatchMode::Managed => {}
                BatchMode::Killed => {
                    if !self.nap(s, control_word, None, now) {
                        return self.cut_at(s);
                    }
                    continue;
                }
                BatchMode::Stale => {
                    if !self.nap(s, control_word, Some((beat, stale_ns)), now) {
                        return self.cut_at(s);
                    }
                    continue;
                }
                BatchMode::Unmanaged => {
                    self.run(s, now, false);
                    return;
                }
            }
            let lc_ipc = match &mut self.ipc {
                Some(ipc) if self.policy.config().kind == PolicyKind::DynamicRefresh => {
                    ipc.sample(now)
                }
                _ => None,
            };
            let obs = Observation {
                lc_busy: state::busy(s),
                queue_len: state::queue_len(s),
                running_request: u64::from(state::seq(s)),
                now_ns: self.clock.ticks_to_ns(now),
                lc_ipc,
            };
            match self.policy.step(&obs) {
                Decision::Run => {
                    let every_check = self.policy.time_sensitive();
                    self.run(s, now, every_check);
                    return;
                }
                Decision::Nap => {
                    if !self.nap(s, control_word, None, now) {
                        return self.cut_at(s);
                    }
                }
            }
        }
    }

    /// Bounds the spin of the naps that follow: a nap that spins (the
    /// `spin` backend, `hybrid`'s spin) and is still on at `deadline`
    /// (page clock ticks) ends there, and so does the slow path — with the
    /// `state` it napped on as the value the check compares against, so
    /// the check's fast path calls the slow path again only once the lane's
    /// state changes ([`BatchThread::cut_short`] says so). `None` (the
    /// default): naps end only when the lane's state (or header line 1)
    /// says so. For a thread that spins on behalf of others at a real-time
    /// priority (the daemon's guards), which must not hold its CPU past a
    /// bound; a batch thread running batch code has no use for it.
    pub fn set_spin_deadline(&mut self, deadline: Option<u64>) {
        self.spin_deadline = deadline;
    }

    /// Whether the last slow path ended at the spin deadline
    /// ([`BatchThread::set_spin_deadline`]) while the policy still said nap.
    pub fn cut_short(&self) -> bool {
        self.cut
    }

    /// The slow path ends at the spin deadline, napping on `state` `s`.
    fn cut_at(&mut self, s: u64) {
        self.cut = true;
        self.expected = s;
    }

    /// The slow path's `Run` on `state` value `s` at `now`: co-running
    /// accounting, then the value the check compares against — `s`, or
    /// `NEVER` when `every_check` (a budget being spent) so every check
    /// comes back here.
    #[inline(always)]
    fn run(&mut self, s: u64, now: u64, every_check: bool) {
        if state::busy(s) {
            if self.corun_since == 0 {
                self.corun_since = now.max(1);
            }
        } else {
            self.end_corun(now);
        }
        if every_check {
            self.expected = state::NEVER;
        } else {
            self.expected = s;
            self.flush_slow_checks();
        }
    }

    #[inline(always)]
    fn line(&self) -> &BatchLine {
        // SAFETY: points into self.page's batch mapping.
        unsafe { &*self.line }
    }

    #[inline(always)]
    fn ctl(&self) -> &ControllerLine {
        // SAFETY: points into self.page's mapping.
        unsafe { &*self.ctl }
    }

    fn flush_slow_checks(&mut self) {
        if self.unflushed_slow != 0 {
            self.line()
                .slow_checks
                .fetch_add(self.unflushed_slow, Relaxed);
            self.unflushed_slow = 0;
        }
    }

    /// Closes a co-running interval at `now` (adds it to `corun_ticks`).
    fn end_corun(&mut self, now: u64) {
        if self.corun_since != 0 {
            let t = now.saturating_sub(self.corun_since);
            self.counters.corun_ticks += t;
            self.line().corun_ticks.fetch_add(t, Relaxed);
            self.corun_since = 0;
        }
    }

    /// One nap on `state` value `s` (and control word `control0`; for a
    /// stale heartbeat also on `beat0` = (heartbeat, heartbeat_stale_ns)),
    /// with the batch-line accounting of protocol.md around it. `false`
    /// when it ended at the spin deadline rather than by a change.
    fn nap(&mut self, s: u64, control0: u64, beat0: Option<(u64, u64)>, now: u64) -> bool {
        self.end_corun(now);
        self.flush_slow_checks();
        let ran = now.saturating_sub(self.run_since);
        self.counters.run_ticks += ran;
        self.counters.naps += 1;
        let line = self.line();
        line.napping.fetch_add(1, AcqRel);
        line.naps.fetch_add(1, Relaxed);
        line.run_ticks.fetch_add(ran, Relaxed);
        line.last_change.store(now, Relaxed);
        // SAFETY: all pointers into self.page's mappings.
        let (state_word, h, lc) = unsafe { (&*self.watch, &*self.header, &*self.lc) };
        let over = self.napper.nap(
            &Watch {
                state: state_word,
                futex: futex_word(lc),
                napped: s,
                control: &h.control,
                control0,
                heartbeat: &h.heartbeat,
                stale_ns: &h.heartbeat_stale_ns,
                beat0,
                sleepers: &line.sleepers,
            },
            self.spin_deadline,
        );
        let woke = self.clock.now();
        line.napping.fetch_sub(1, AcqRel);
        line.wakes.fetch_add(1, Relaxed);
        line.last_change.store(woke, Relaxed);
        self.counters.wakes += 1;
        self.counters.nap_ticks += woke.saturating_sub(now);
        self.run_since = woke;
        over
    }

    /// The controller rewrote our line: adopt what is valid, count what is not.
    #[cold]
    fn reload_config(&mut self) {
        let Ok(cfg) = self.page.read_controller(self.lane) else {
            return; // cannot happen: the lane was validated at attach
        };
        self.config_seq = cfg.seq;
        match policy_config(&cfg) {
            Some(p) if p == *self.policy.config() => {}
            Some(p) => {
                if self.policy.reconfigure(p).is_ok() {
                    let now = self.clock.now();
                    self.end_corun(now);
                } else {
                    self.counters.config_rejects += 1;
                }
            }
            None => self.counters.config_rejects += 1,
        }
        let spin_changed = u64::from(cfg.hybrid_spin_ns) != self.napper.hybrid_spin_ns();
        if self.nap_source == NapSource::Controller && (cfg.nap != self.nap_id || spin_changed) {
            match NapChoice::from_id(cfg.nap).map(|c| c.resolve_static(machine_features())) {
                Some(Ok((backend, why))) => {
                    self.napper = self.napper.with(backend, cfg.hybrid_spin_ns);
                    self.nap_why = why;
                    self.nap_id = cfg.nap;
                }
                _ => self.counters.config_rejects += 1,
            }
        } else if spin_changed {
            self.napper = self.napper.with(self.napper.backend(), cfg.hybrid_spin_ns);
        }
    }

    /// This thread's accounting so far (run time includes the current run).
    pub fn stats(&self) -> BatchStats {
        let now = self.clock.now();
        let c = &self.counters;
        let ns = |t: u64| self.clock.ticks_to_ns(t);
        let corun_open = if self.corun_since != 0 {
            now.saturating_sub(self.corun_since)
        } else {
            0
        };
        BatchStats {
            slow_checks: c.slow_checks,
            naps: c.naps,
            wakes: c.wakes,
            run_ns: ns(c.run_ticks + now.saturating_sub(self.run_since)),
            corun_ns: ns(c.corun_ticks + corun_open),
            nap_ns: ns(c.nap_ticks),
            config_rejects: c.config_rejects,
        }
    }

    /// The nap backend in use.
    pub fn nap_backend(&self) -> NapBackend {
        self.napper.backend()
    }

    /// Why that backend (e.g. "auto: hybrid, because this CPU offers neither
    /// umwait (WAITPKG) nor mwaitx (MONITORX)").
    pub fn nap_reason(&self) -> &'static str {
        self.nap_why
    }

    /// For dynamic refresh: whether hardware counters feed the policy, or
    /// "no hardware counters: dynamic refresh behaves as refresh budget (…)".
    /// `None` for other policies.
    pub fn ipc_note(&self) -> Option<&str> {
        self.ipc_note.as_deref()
    }

    /// The policy in force.
    pub fn policy(&self) -> &PolicyConfig {
        self.policy.config()
    }

    /// The batch lane.
    pub fn lane(&self) -> u32 {
        self.lane
    }

    /// The request lane it watches.
    pub fn request_lane(&self) -> u32 {
        self.request_lane
    }

    /// The batch lane's CPU.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// Whether attach pinned the thread (to [`BatchThread::cpu`]).
    pub fn pinned(&self) -> bool {
        self.pin.is_some()
    }

    /// The page.
    pub fn page(&self) -> &Arc<Page> {
        &self.page
    }

    /// One line for humans (the CLI prints it): lanes, policy, nap backend
    /// and why, and the IPC note for dynamic refresh.
    pub fn describe(&self) -> String {
        let p = self.policy.config();
        let budget = if p.kind.uses_budget() {
            format!(" (budget {} µs)", p.budget_ns / 1000)
        } else {
            String::new()
        };
        let nap = match self.napper.backend() {
            NapBackend::Hybrid => format!(
                "hybrid (spin {} µs, then futex)",
                self.napper.hybrid_spin_ns() / 1000
            ),
            b => b.name().to_string(),
        };
        let source = match self.nap_source {
            NapSource::Options => "options",
            NapSource::Controller => "controller line",
        };
        let mut s = format!(
            "batch lane {} (cpu {}{}) watching request lane {} (cpu {}) of {}; policy {}{}; nap {} [{}: {}]",
            self.lane,
            self.cpu,
            if self.pinned() {
                ", pinned"
            } else {
                ", not pinned"
            },
            self.request_lane,
            self.request_cpu,
            self.page.path().display(),
            p.kind,
            budget,
            nap,
            source,
            self.nap_why,
        );
        if let Some(n) = &self.ipc_note {
            s.push_str("; ");
            s.push_str(n);
        }
        s
    }
}

impl Drop for BatchThread {
    fn drop(&mut self) {
        let now = self.clock.now();
        self.end_corun(now);
        self.flush_slow_checks();
        let line = self.line();
        line.run_ticks
            .fetch_add(now.saturating_sub(self.run_since), Relaxed);
        // `napping` and `sleepers` need nothing: `nap` undoes its own
        // increments before it returns and cannot unwind in between.
        line.attached.fetch_sub(1, AcqRel);
        // Then the PinGuard field restores the thread's affinity.
    }
}
