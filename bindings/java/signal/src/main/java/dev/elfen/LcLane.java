package dev.elfen;

import java.lang.foreign.MemorySegment;
import java.lang.invoke.VarHandle;
import java.nio.file.Path;
import java.util.List;

/**
 * <b>LC API</b>: the latency-critical service publishes its request lane's
 * state on the lane's LC line (the Java mirror of Rust's {@code LcLane}).
 *
 * <p>One {@code LcLane} per request lane, used by one thread at a time. Each
 * call is a few plain stores on the LC's own line (protocol.md, "LC side");
 * the object keeps a private shadow of the begin sequence, queue length and
 * counters so it never reads-modifies-writes shared memory:
 *
 * <ul>
 *   <li>{@link #requestBegin}: {@code request_id}, {@code busy_since}, then
 *       {@code state} = busy | seq+1 | queue (release);
 *   <li>{@link #setQueueLen}: {@code state} with the new queue length;
 *   <li>{@link #requestEnd}: {@code busy_ticks}, {@code requests}, then
 *       {@code state} = idle (release); a full fence; a read of each partner
 *       batch lane's {@code sleepers}; a {@code FUTEX_WAKE} only if one is
 *       non-zero.
 * </ul>
 *
 * <p>{@link #close()} ends a request left open (so no batch thread sleeps
 * forever) and releases {@code lc_tid}. The page's mappings stay while the
 * lane is open, even if the {@link Page} is closed first.
 */
public final class LcLane implements AutoCloseable {
    private static final int SEQ_MASK = 0x7FFF_FFFF;

    private final Page page;
    private final boolean ownsPage;
    private final MemorySegment seg;
    private final long line;
    private final long ctl;
    private final MemorySegment futexWord;
    private final MemorySegment batchSeg;
    /** Offsets of the partner batch lines' {@code sleepers}, re-read when config_seq moves. */
    private long[] sleepers = new long[0];
    private int configSeq;
    private final int tid;
    private final int lane;
    // shadows of our own line
    private boolean busy;
    private int seq;
    private int queue;
    private long busySince;
    private long busyTicks;
    private long requests;
    private boolean closed;
    /** FUTEX_WAKE syscalls made, and waiters they woke (for tests). */
    long wakeSyscalls;
    long woken;

    /**
     * Attaches the page at {@code path} with {@link Access#LC} and then
     * attaches to {@code lane}; {@link #close()} also closes that page.
     */
    public static LcLane open(Path path, int lane) throws ElfenException {
        Page p = Page.attach(path, Access.LC);
        try {
            return create(p, lane, true);
        } catch (ElfenException | RuntimeException e) {
            p.close();
            throw e;
        }
    }

    /**
     * Attaches the calling thread as the LC thread of request lane {@code lane}.
     * The page must be attached with {@link Access#LC} or
     * {@link Access#CONTROLLER}. Fails on a lane out of range, a lane that is
     * not a request lane, or a lane another live thread serves. A request
     * left open by a dead LC thread is ended (and sleepers woken).
     */
    public static LcLane attach(Page page, int lane) throws ElfenException {
        return create(page, lane, false);
    }

    private static LcLane create(Page page, int lane, boolean ownsPage) throws ElfenException {
        page.retain();
        try {
            return new LcLane(page, lane, ownsPage);
        } catch (ElfenException | RuntimeException e) {
            page.release();
            throw e;
        }
    }

    private LcLane(Page page, int lane, boolean ownsPage) throws ElfenException {
        Attach.requirePlatformThread("an LC lane");
        ControllerConfig cfg = Attach.check(page, lane, Attach.Side.LC);
        this.page = page;
        this.ownsPage = ownsPage;
        this.seg = page.pageSegment();
        this.batchSeg = page.batchSegment();
        this.lane = lane;
        this.line = Layout.lcLine(lane);
        this.ctl = Layout.controllerLine(lane);
        this.futexWord = seg.asSlice(line + Layout.LcLine.STATE, 4);
        this.tid = Native.gettid();
        claim(page.path());
        long s = Mem.acquire64(seg, line + Layout.LcLine.STATE);
        busy = State.busy(s);
        seq = State.seq(s);
        queue = State.queueLen(s);
        busySince = Mem.get64(seg, line + Layout.LcLine.BUSY_SINCE);
        busyTicks = Mem.get64(seg, line + Layout.LcLine.BUSY_TICKS);
        requests = Mem.get64(seg, line + Layout.LcLine.REQUESTS);
        configSeq = cfg.seq() + 1; // force a read of the partners below
        reloadPartners();
        if (busy) {
            // Left open by a previous LC thread: end it without accounting,
            // so batch threads napping on it wake.
            busy = false;
            Mem.release64(seg, line + Layout.LcLine.STATE, State.pack(false, seq, queue));
            VarHandle.fullFence();
            wakeSleepers();
        }
    }

    /** Claims {@code lc_tid} by CAS (the only read-modify-write of the LC API). */
    private void claim(Path path) throws ElfenException {
        long off = line + Layout.LcLine.LC_TID;
        int seen = Mem.acquire32(seg, off);
        while (true) {
            if (seen == tid || (seen != 0 && Native.alive(seen))) {
                throw ElfenException.laneTaken(path, lane, seen);
            }
            int witness = (int) Mem.U32.compareAndExchange(seg, off, seen, tid);
            if (witness == seen) {
                return;
            }
            seen = witness;
        }
    }

    /** Re-reads the partner batch lanes from the controller line. */
    private void reloadPartners() {
        ControllerConfig cfg;
        try {
            cfg = page.readController(lane);
        } catch (ElfenException e) {
            return; // a stuck controller: keep the partners we had
        }
        List<Integer> ps = cfg.partners();
        long[] offs = new long[ps.size()];
        int n = 0;
        for (int p : ps) {
            if (p >= 0 && p < page.laneCount()) {
                offs[n++] = Layout.batchLine(p) + Layout.BatchLine.SLEEPERS;
            }
        }
        sleepers = java.util.Arrays.copyOf(offs, n);
        configSeq = cfg.seq();
    }

    /** After the fence of requestEnd: a syscall only if a partner batch lane has a sleeper. */
    private void wakeSleepers() {
        int s = Mem.get32(seg, ctl + Layout.ControllerLine.CONFIG_SEQ);
        if (s != configSeq && (s & 1) == 0) {
            reloadPartners();
        }
        for (long off : sleepers) {
            if (Mem.get32(batchSeg, off) != 0) {
                wakeSyscalls++;
                woken += Native.futexWakeAll(futexWord);
                return;
            }
        }
    }

    /**
     * A request starts on this lane: stores {@code request_id} and
     * {@code busy_since}, then {@code state} = busy, begin sequence + 1,
     * current queue length (release). No syscall. A begin while a request is
     * open completes that one and begins the next without an idle gap.
     */
    public void requestBegin(long id) {
        long now = PageClock.now();
        if (busy) {
            accountCompleted(now);
        }
        Mem.set64(seg, line + Layout.LcLine.REQUEST_ID, id);
        Mem.set64(seg, line + Layout.LcLine.BUSY_SINCE, now);
        seq = (seq + 1) & SEQ_MASK;
        busy = true;
        busySince = now;
        Mem.release64(seg, line + Layout.LcLine.STATE, State.pack(true, seq, queue));
    }

    private void accountCompleted(long now) {
        busyTicks += PageClock.since(now, busySince);
        requests++;
        Mem.set64(seg, line + Layout.LcLine.BUSY_TICKS, busyTicks);
        Mem.set64(seg, line + Layout.LcLine.REQUESTS, requests);
    }

    /**
     * The running request ends: stores {@code busy_ticks}, {@code requests},
     * then {@code state} = idle (release); a full fence; reads the partner
     * batch lanes' {@code sleepers} and wakes futex sleepers only if there are
     * any. A no-op when no request is open.
     */
    public void requestEnd() {
        if (!busy) {
            return;
        }
        accountCompleted(PageClock.now());
        busy = false;
        Mem.release64(seg, line + Layout.LcLine.STATE, State.pack(false, seq, queue));
        // Pairs with the batch side's fence between its sleepers increment and
        // its re-read of state (protocol.md, "futex").
        VarHandle.fullFence();
        wakeSleepers();
    }

    /**
     * Publishes the queue length (requests waiting, not counting the running
     * one; unsigned, saturates at 2^32 - 2). One store; it wakes nobody.
     */
    public void setQueueLen(int n) {
        int q = Integer.compareUnsigned(n, State.MAX_QUEUE_LEN) > 0 ? State.MAX_QUEUE_LEN : n;
        if (q == queue) {
            return;
        }
        queue = q;
        Mem.release64(seg, line + Layout.LcLine.STATE, State.pack(busy, seq, q));
    }

    /** Whether a request is open. */
    public boolean isBusy() {
        return busy;
    }

    /** The queue length last published. */
    public int queueLen() {
        return queue;
    }

    /** The begin sequence of the last request begun (31 bits, wrapping). */
    public int seq() {
        return seq;
    }

    /** The lane index. */
    public int lane() {
        return lane;
    }

    /** The thread id recorded in {@code lc_tid}. */
    public int tid() {
        return tid;
    }

    /** The page. */
    public Page page() {
        return page;
    }

    /** Ends an open request, releases {@code lc_tid}, and closes the page if {@link #open} opened it. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        requestEnd();
        int unused = (int) Mem.U32.compareAndExchange(seg, line + Layout.LcLine.LC_TID, tid, 0);
        page.release();
        if (ownsPage) {
            page.close();
        }
    }
}
