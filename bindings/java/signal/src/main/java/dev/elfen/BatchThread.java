package dev.elfen;

import dev.elfen.policy.Decision;
import dev.elfen.policy.Policy;
import dev.elfen.policy.PolicyConfig;
import dev.elfen.policy.PolicyKind;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.List;

/**
 * <b>Batch API</b>: a batch thread borrows its batch lane while the partner
 * request lane's policy allows it (the Java mirror of Rust's
 * {@code BatchThread}).
 *
 * <ul>
 *   <li>{@link #attach}: validates everything (lane role, pairing, policy id,
 *       nap backend), pins the thread to the lane's CPU (unless told not to),
 *       and counts itself in the batch line's {@code attached}.
 *   <li>{@link #check()} — the fast path: one acquire load of the partner
 *       request lane's {@code state} and one compare with the value last
 *       acted on. Call it often (every loop iteration).
 *   <li>{@link #slowPath()} — only when the compare fails: header line 1
 *       (the kill switch and its mode, the heartbeat fail-safe:
 *       {@link BatchMode#of}), configuration changes (the controller line's
 *       seqlock), the policy ({@link Policy}), and on NAP a nap until the
 *       lane changes, then again until the policy says RUN. It never throws.
 * </ul>
 *
 * <p>While a budget policy co-runs the expected value is {@link State#NEVER},
 * so every check takes the slow path: the budget expires with time alone.
 *
 * <p>Use it from the thread that attached it (like Rust's, it is not
 * {@code Send}); {@link #close()} detaches: {@code attached} decremented, run
 * time flushed to the batch line, the thread's affinity restored.
 */
public final class BatchThread implements AutoCloseable {
    /**
     * All of the address space, so the check addresses {@code state} by its
     * absolute address: a segment whose size, base and scope are constants
     * leaves the JIT nothing to re-check per load but the alignment. Safe
     * because the page's mappings stay until this thread is closed
     * ({@link Page#retain}), and {@link #close} points {@link #watchAddress}
     * at {@link #CLOSED_WATCH}.
     */
    @SuppressWarnings("restricted")
    private static final MemorySegment EVERYTHING = MemorySegment.NULL.reinterpret(Long.MAX_VALUE);
    /** Where a closed thread's check looks: 0, never {@code NEVER}, so a check after close reaches the slow path. */
    private static final MemorySegment CLOSED_WATCH = Arena.global().allocate(8, 8);

    // ---- the check reads only these two
    /** Absolute address of the partner request lane's {@code state}. */
    private long watchAddress;
    /** The {@code state} value the thread last acted on ({@code NEVER} while a budget runs). */
    private long expected;
    /** The same {@code state} as an 8-byte slice of the page mapping (the slow path's view). */
    private final MemorySegment watch;

    // ---- the slow path
    private final Policy policy;
    private final Page page;
    private final boolean ownsPage;
    private final MemorySegment pageSeg;
    private final MemorySegment batchSeg;
    private final long line;
    private final long ctl;
    private int configSeq;
    private int napId;
    private final Napper napper;
    private String napWhy;
    private long runSince;
    private long corunSince;
    private long unflushedSlow;
    private long slowChecks;
    private long naps;
    private long wakes;
    private long runTicks;
    private long corunTicks;
    private long napTicks;
    private long configRejects;

    // ---- identity
    private final int lane;
    private final int requestLane;
    private final int cpu;
    private final int requestCpu;
    private final boolean napFromController;
    private final String ipcNote;
    private final Pin pin;
    private final Thread owner;
    private boolean closed;

    /**
     * Attaches the page at {@code path} with {@link Access#BATCH} and then
     * attaches to {@code lane}; {@link #close()} also closes that page.
     */
    public static BatchThread open(Path path, int lane, BatchOptions opts) throws ElfenException {
        Page p = Page.attach(path, Access.BATCH);
        try {
            return create(p, lane, opts, true);
        } catch (ElfenException | RuntimeException e) {
            p.close();
            throw e;
        }
    }

    /**
     * Attaches the calling thread to batch lane {@code lane}. The page must be
     * attached with {@link Access#BATCH} or {@link Access#CONTROLLER}. Reads
     * the lane's controller line (policy, budget, nap backend, hybrid bound),
     * resolves the nap backend, pins the thread (unless {@code opts.pin()} is
     * false) and increments {@code attached}. On any error the thread's
     * affinity and the page are as before.
     */
    public static BatchThread attach(Page page, int lane, BatchOptions opts) throws ElfenException {
        return create(page, lane, opts, false);
    }

    private static BatchThread create(Page page, int lane, BatchOptions opts, boolean ownsPage)
            throws ElfenException {
        page.retain();
        try {
            return new BatchThread(page, lane, opts, ownsPage);
        } catch (ElfenException | RuntimeException e) {
            page.release();
            throw e;
        }
    }

    private BatchThread(Page page, int lane, BatchOptions opts, boolean ownsPage) throws ElfenException {
        Attach.requirePlatformThread("a batch thread");
        Path path = page.path();
        ControllerConfig cfg = Attach.check(page, lane, Attach.Side.BATCH);
        List<Integer> partners = cfg.partners();
        if (partners.size() != 1) {
            throw ElfenException.badLane(path, lane,
                    "a batch lane watches exactly one request lane, its controller line lists " + partners);
        }
        int req = partners.get(0);
        ControllerConfig rcfg = null;
        try {
            rcfg = Attach.readConfig(page, req);
        } catch (ElfenException e) {
            // reported below
        }
        if (rcfg == null || rcfg.role() != Layout.Role.REQUEST) {
            throw ElfenException.badLane(path, lane, "its partner, lane " + Integer.toUnsignedString(req)
                    + ", is not a request lane of the page");
        }
        PolicyConfig pcfg = policyConfig(cfg);
        if (pcfg == null) {
            throw ElfenException.unknownPolicy(path, lane, cfg.policy());
        }
        Policy pol;
        try {
            pol = new Policy(pcfg);
        } catch (IllegalArgumentException e) {
            throw ElfenException.badPolicy(path, lane, e);
        }
        NapChoice choice;
        if (opts.nap() != null) {
            choice = opts.nap();
        } else {
            choice = NapChoice.fromId(cfg.nap());
            if (choice == null) {
                throw ElfenException.unknownNap(path, lane, cfg.nap());
            }
        }
        NapBackend backend = choice.resolve();
        this.page = page;
        this.ownsPage = ownsPage;
        this.pageSeg = page.pageSegment();
        this.batchSeg = page.batchSegment();
        this.lane = lane;
        this.requestLane = req;
        this.cpu = cfg.cpu();
        this.requestCpu = rcfg.cpu();
        this.line = Layout.batchLine(lane);
        this.ctl = Layout.controllerLine(lane);
        long stateOff = Layout.lcLine(req) + Layout.LcLine.STATE;
        this.watch = pageSeg.asSlice(stateOff, 8);
        this.watchAddress = watch.address();
        this.policy = pol;
        this.napper = new Napper(pageSeg, stateOff, batchSeg, line + Layout.BatchLine.SLEEPERS, backend,
                cfg.hybridSpinNs(), opts.futexTimeout() == null ? BatchOptions.DEFAULT_FUTEX_TIMEOUT
                        : opts.futexTimeout());
        this.napWhy = choice.why();
        this.napFromController = opts.nap() == null;
        this.napId = cfg.nap();
        this.configSeq = cfg.seq();
        this.ipcNote = pcfg.kind() == PolicyKind.DYNAMIC_REFRESH
                ? "no hardware counters from Java: dynamic refresh behaves as refresh budget"
                        + " (the Java binding does not sample the request lane's IPC)"
                : null;
        this.owner = Thread.currentThread();
        // Pinning is the last step that can fail.
        this.pin = opts.pin() ? Pin.to(Native.gettid(), cpu, why -> ElfenException.pin(path, lane, cpu, why)) : null;
        Mem.add32(batchSeg, line + Layout.BatchLine.ATTACHED, 1);
        this.runSince = PageClock.now();
        // the first check always runs the policy
        this.expected = State.NEVER;
    }

    /** The policy a controller line describes, or {@code null} if its id is unknown. */
    private static PolicyConfig policyConfig(ControllerConfig c) {
        PolicyKind kind = PolicyKind.fromId(c.policy());
        if (kind == null) {
            return null;
        }
        Double ref = c.refIpcMilli() != 0 ? Integer.toUnsignedLong(c.refIpcMilli()) / 1000.0 : null;
        return new PolicyConfig(kind, c.budgetNs(), ref, PolicyConfig.DEFAULT_MAX_BUDGET_RATIO);
    }

    /**
     * <b>The check</b> (fast path): one acquire load of the partner request
     * lane's {@code state} and one compare with the value last acted on; only
     * a difference calls {@link #slowPath()}. No syscall, no allocation.
     */
    public void check() {
        if ((long) Mem.U64.getAcquire(EVERYTHING, watchAddress) != expected) {
            slowPath();
        }
    }

    /** The value the fast path compares {@code state} against (changes only in the slow path). */
    public long expected() {
        return expected;
    }

    /**
     * <b>The slow path</b>: runs the policy and naps until it says RUN. Each
     * round: a changed {@code config_seq} (re-read the line, reconfigure);
     * header line 1 through {@link BatchMode#of} — KILL naps until the control
     * word or {@code state} changes, a stale heartbeat naps until a beat (or
     * the control word or {@code state} changes), UNMANAGED runs without
     * asking the policy; otherwise an observation (busy, queue length, begin
     * sequence as the running request, now) and the policy step. RUN
     * returns, NAP naps on the observed {@code state} and goes round again.
     *
     * @throws IllegalStateException when called from another thread than the attaching one, or after close
     */
    public void slowPath() {
        requireOwner("used");
        if (closed) {
            throw new IllegalStateException("batch thread of lane " + lane + " is closed");
        }
        slowChecks++;
        unflushedSlow++;
        while (true) {
            // An odd seq is a rewrite in progress: keep the old configuration this round.
            int seq = Mem.get32(pageSeg, ctl + Layout.ControllerLine.CONFIG_SEQ);
            if (seq != configSeq && (seq & 1) == 0) {
                reloadConfig();
            }
            long s = Mem.acquire64(watch, 0);
            long controlWord = Mem.acquire64(pageSeg, Layout.Header.CONTROL);
            long now = PageClock.now();
            // the heartbeat is read only where the fail-safe is on
            long staleNs = Mem.get64(pageSeg, Layout.Header.HEARTBEAT_STALE_NS);
            long beat = staleNs != 0 ? Mem.get64(pageSeg, Layout.Header.HEARTBEAT) : 0;
            BatchMode mode = BatchMode.of(controlWord, beat, staleNs, now, PageClock.TICKS_PER_SEC);
            if (mode == BatchMode.KILLED) {
                nap(s, controlWord, false, 0, 0, now);
                continue;
            }
            if (mode == BatchMode.STALE) {
                nap(s, controlWord, true, beat, staleNs, now);
                continue;
            }
            if (mode == BatchMode.UNMANAGED) {
                run(s, now, false);
                return;
            }
            Decision d = policy.step(State.busy(s), State.queueLen(s), Integer.toUnsignedLong(State.seq(s)), now,
                    false, 0);
            if (d == Decision.RUN) {
                run(s, now, policy.timeSensitive());
                return;
            }
            nap(s, controlWord, false, 0, 0, now);
        }
    }

    /**
     * The slow path's RUN on {@code state} value {@code s}: co-running
     * accounting, then the value the check compares against — {@code s}, or
     * {@code NEVER} when {@code everyCheck} (a budget being spent).
     */
    private void run(long s, long now, boolean everyCheck) {
        if (State.busy(s)) {
            if (corunSince == 0) {
                corunSince = now == 0 ? 1 : now;
            }
        } else {
            endCorun(now);
        }
        if (everyCheck) {
            expected = State.NEVER;
        } else {
            expected = s;
            flushSlowChecks();
        }
    }

    private void flushSlowChecks() {
        if (unflushedSlow != 0) {
            Mem.add64(batchSeg, line + Layout.BatchLine.SLOW_CHECKS, unflushedSlow);
            unflushedSlow = 0;
        }
    }

    /** Closes a co-running interval at {@code now} (adds it to {@code corun_ticks}). */
    private void endCorun(long now) {
        if (corunSince != 0) {
            long t = PageClock.since(now, corunSince);
            corunTicks += t;
            Mem.add64(batchSeg, line + Layout.BatchLine.CORUN_TICKS, t);
            corunSince = 0;
        }
    }

    /**
     * One nap on {@code state} value {@code s} (and control word {@code control0};
     * for a stale heartbeat also on {@code beat0} / {@code staleNs0}), with the
     * batch-line accounting of protocol.md around it.
     */
    private void nap(long s, long control0, boolean stale, long beat0, long staleNs0, long now) {
        endCorun(now);
        flushSlowChecks();
        long ran = PageClock.since(now, runSince);
        runTicks += ran;
        naps++;
        Mem.add32(batchSeg, line + Layout.BatchLine.NAPPING, 1);
        Mem.add64(batchSeg, line + Layout.BatchLine.NAPS, 1);
        Mem.add64(batchSeg, line + Layout.BatchLine.RUN_TICKS, ran);
        Mem.set64(batchSeg, line + Layout.BatchLine.LAST_CHANGE, now);
        if (stale) {
            napper.napStale(s, control0, beat0, staleNs0);
        } else {
            napper.nap(s, control0);
        }
        long woke = PageClock.now();
        Mem.add32(batchSeg, line + Layout.BatchLine.NAPPING, -1);
        Mem.add64(batchSeg, line + Layout.BatchLine.WAKES, 1);
        Mem.set64(batchSeg, line + Layout.BatchLine.LAST_CHANGE, woke);
        wakes++;
        napTicks += PageClock.since(woke, now);
        runSince = woke;
    }

    /** The controller rewrote our line: adopt what is valid, count what is not. */
    private void reloadConfig() {
        ControllerConfig cfg;
        try {
            cfg = page.readController(lane);
        } catch (ElfenException e) {
            return; // stuck mid-rewrite: keep the configuration, retry next slow path
        }
        configSeq = cfg.seq();
        PolicyConfig p = policyConfig(cfg);
        if (p == null) {
            configRejects++;
        } else if (!p.equals(policy.config())) {
            try {
                policy.reconfigure(p);
                endCorun(PageClock.now());
            } catch (IllegalArgumentException e) {
                configRejects++;
            }
        }
        boolean spinChanged = Integer.toUnsignedLong(cfg.hybridSpinNs()) != napper.hybridSpinNs();
        if (napFromController && (cfg.nap() != napId || spinChanged)) {
            NapChoice c = NapChoice.fromId(cfg.nap());
            NapBackend b = c == null ? null : c.backend();
            if (b != null) {
                napper.reconfigure(b, cfg.hybridSpinNs());
                napWhy = c.why();
                napId = cfg.nap();
            } else {
                configRejects++;
            }
        } else if (spinChanged) {
            napper.reconfigure(napper.backend(), cfg.hybridSpinNs());
        }
    }

    /** This thread's accounting so far (run time includes the current run). */
    public BatchStats stats() {
        long now = PageClock.now();
        long corunOpen = corunSince != 0 ? PageClock.since(now, corunSince) : 0;
        return new BatchStats(slowChecks, naps, wakes, page.ticksToNs(runTicks + PageClock.since(now, runSince)),
                page.ticksToNs(corunTicks + corunOpen), page.ticksToNs(napTicks), configRejects);
    }

    /** The nap backend in use. */
    public NapBackend napBackend() {
        return napper.backend();
    }

    /** Why that backend. */
    public String napReason() {
        return napWhy;
    }

    /** For dynamic refresh: why it behaves as refresh budget from Java; {@code null} for other policies. */
    public String ipcNote() {
        return ipcNote;
    }

    /** The policy in force. */
    public PolicyConfig policy() {
        return policy.config();
    }

    /** The batch lane. */
    public int lane() {
        return lane;
    }

    /** The request lane it watches. */
    public int requestLane() {
        return requestLane;
    }

    /** The batch lane's CPU. */
    public int cpu() {
        return cpu;
    }

    /** Whether attach pinned the thread. */
    public boolean pinned() {
        return pin != null;
    }

    /** The page. */
    public Page page() {
        return page;
    }

    /** One line for humans: lanes, policy, nap backend and why. */
    public String describe() {
        PolicyConfig p = policy.config();
        String budget = p.kind().usesBudget() ? " (budget " + Long.divideUnsigned(p.budgetNs(), 1000) + " µs)" : "";
        String nap = napper.backend() == NapBackend.HYBRID
                ? "hybrid (spin " + napper.hybridSpinNs() / 1000 + " µs, then futex)" : napper.backend().label();
        String s = "batch lane " + lane + " (cpu " + Integer.toUnsignedString(cpu) + (pinned() ? ", pinned" : ", not pinned")
                + ") watching request lane " + requestLane + " (cpu " + Integer.toUnsignedString(requestCpu) + ") of "
                + page.path() + "; policy " + p.kind() + budget + "; nap " + nap + " ["
                + (napFromController ? "controller line" : "options") + ": " + napWhy + "]";
        return ipcNote == null ? s : s + "; " + ipcNote;
    }

    /**
     * Detaches: closes an open co-running interval, flushes run time and slow
     * checks to the batch line, decrements {@code attached}, restores the
     * thread's affinity, and closes the page if {@link #open} opened it.
     */
    private void requireOwner(String what) {
        if (Thread.currentThread() != owner) {
            throw new IllegalStateException("batch thread of lane " + lane + " " + what + " from "
                    + Thread.currentThread() + ", attached by " + owner + ": use it from the attaching thread");
        }
    }

    /**
     * {@inheritDoc}
     *
     * @throws IllegalStateException when called from another thread than the attaching one
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        requireOwner("closed");
        closed = true;
        watchAddress = CLOSED_WATCH.address();
        expected = State.NEVER;
        long now = PageClock.now();
        endCorun(now);
        flushSlowChecks();
        Mem.add64(batchSeg, line + Layout.BatchLine.RUN_TICKS, PageClock.since(now, runSince));
        Mem.add32(batchSeg, line + Layout.BatchLine.ATTACHED, -1);
        if (pin != null) {
            pin.restore();
        }
        page.release();
        if (ownsPage) {
            page.close();
        }
    }

    @Override
    public String toString() {
        return "BatchThread[" + describe() + "]";
    }
}
